"""The simulated cluster: API server emulator, nodes, kubelets, DRA driver, resourceclaim controller,
PV controller, a dynamic provisioner (StorageClasses with provisioner ``local.sim.lockstep.dev``), and
the node lifecycle, taint eviction and pod GC controllers (``lose_node``/``restore_node``).

Node ``i`` of N is in rack ``i // rack_size`` and zone ``rack % zones`` (whole racks per zone), has
the labels ``kubernetes.io/hostname``, ``topology.kubernetes.io/zone`` and ``lockstep.dev/rack``,
the pod CIDR ``10.(64 + i // 256).(i % 256).0/24`` and the InternalIP ``10.0.(i // 250).(i % 250 + 1)``.
With ``taint_every=k`` every k-th node (i % k == k - 1) carries ``lockstep.dev/dedicated=infra:NoSchedule``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import structlog
import yaml

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.controllers.disruption import DisruptionController
from lockstep.sim.controllers.dra_driver import DraDriver
from lockstep.sim.controllers.ephemeral_volume import EphemeralVolumeController
from lockstep.sim.controllers.job import JobController
from lockstep.sim.controllers.jobset import JobSetController
from lockstep.sim.controllers.kubelet import Kubelets, healthy_node_conditions, now_rfc3339
from lockstep.sim.controllers.leaderworkerset import LeaderWorkerSetController
from lockstep.sim.controllers.node_lifecycle import NodeLifecycleController
from lockstep.sim.controllers.persistentvolume import PersistentVolumeController
from lockstep.sim.controllers.podgc import PodGarbageCollector
from lockstep.sim.controllers.podgroup_protection import (
    COMPOSITES_PATH,
    PodGroupProtectionController,
    pod_groups_path,
)
from lockstep.sim.controllers.provisioner import Provisioner
from lockstep.sim.controllers.pytorchjob import PyTorchJobController
from lockstep.sim.controllers.raycluster import RayClusterController
from lockstep.sim.controllers.resourceclaim import ClaimController
from lockstep.sim.controllers.resourceclaim_podgroups import PodGroupClaimController
from lockstep.sim.controllers.taint_eviction import TaintEvictionController
from lockstep.sim.registry import OPTIONAL_CRDS
from lockstep.sim.registry.jobset import jobset_crd
from lockstep.sim.registry.kubeflow import pytorchjob_crd
from lockstep.sim.registry.leaderworkerset import leaderworkerset_crd
from lockstep.sim.registry.ray import raycluster_crd
from lockstep.sim.registry.scheduling import GROUP
from lockstep.sim.versions import KubeVersion
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, new_session

log = structlog.get_logger("lockstep.sim.cluster")

ZONE_NAMES = "abcdefghijklmnopqrstuvwxyz"
TAINT_KEY = "lockstep.dev/dedicated"
RACK_LABEL = "lockstep.dev/rack"
ZONE_LABEL = "topology.kubernetes.io/zone"
HOSTNAME_LABEL = "kubernetes.io/hostname"
CRD_FILE = "scheduling.lockstep.dev_podgroups.yaml"
SIM_KUBELET_VERSION = "v1.36.2-lockstep-sim"


class OwnerController(Protocol):
    def start(self) -> None: ...

    async def stop(self) -> None: ...


# The workload operators the emulator can add, by kind: their CRD and their simulated controller.
OWNER_KINDS: dict[str, tuple[Callable[[], JsonObject], Callable[[KubeHttp], OwnerController]]] = {
    "JobSet": (jobset_crd, JobSetController),
    "LeaderWorkerSet": (leaderworkerset_crd, LeaderWorkerSetController),
    "PyTorchJob": (pytorchjob_crd, PyTorchJobController),
    "RayCluster": (raycluster_crd, RayClusterController),
}


@dataclass(frozen=True)
class NodeShape:
    """Capacity of every simulated node; allocatable is capacity less a fixed system reservation."""

    cpu_millis: int = 32_000
    memory_gi: int = 256
    pods: int = 110
    ephemeral_storage_gi: int = 500
    reserved_cpu_millis: int = 500
    reserved_memory_gi: int = 2
    reserved_storage_gi: int = 10

    def __post_init__(self) -> None:
        for name, value, reserved in (
            ("cpu_millis", self.cpu_millis, self.reserved_cpu_millis),
            ("memory_gi", self.memory_gi, self.reserved_memory_gi),
            ("ephemeral_storage_gi", self.ephemeral_storage_gi, self.reserved_storage_gi),
        ):
            if value <= reserved:
                raise ValueError(f"NodeShape.{name}: {value} must exceed the system reservation {reserved}")
        if self.pods < 1:
            raise ValueError(f"NodeShape.pods: must be at least 1, got {self.pods}")


def node_name(index: int, count: int) -> str:
    return f"node-{index:0{max(3, len(str(count - 1)))}d}"


def node_pod_cidr(index: int) -> str:
    return f"10.{64 + index // 256}.{index % 256}.0/24"


def node_internal_ip(index: int) -> str:
    return f"10.0.{index // 250}.{index % 250 + 1}"


def make_node(
    index: int,
    count: int,
    *,
    shape: NodeShape = NodeShape(),
    zones: int = 3,
    rack_size: int = 8,
    taint_every: int = 0,
    created: str = "",
) -> JsonObject:
    """The Node object (spec, labels and a Ready status) of simulated node ``index`` of ``count``."""
    if not 0 <= index < count:
        raise ValueError(f"node index {index} out of range for {count} nodes")
    if not 1 <= zones <= len(ZONE_NAMES):
        raise ValueError(f"zones: must be between 1 and {len(ZONE_NAMES)}, got {zones}")
    if rack_size < 1:
        raise ValueError(f"rack_size: must be at least 1, got {rack_size}")
    name = node_name(index, count)
    rack = index // rack_size
    spec: JsonObject = {"podCIDR": node_pod_cidr(index), "podCIDRs": [node_pod_cidr(index)]}
    if taint_every > 0 and index % taint_every == taint_every - 1:
        spec["taints"] = [{"key": TAINT_KEY, "value": "infra", "effect": "NoSchedule"}]
    capacity = {
        "cpu": f"{shape.cpu_millis}m" if shape.cpu_millis % 1000 else str(shape.cpu_millis // 1000),
        "memory": f"{shape.memory_gi}Gi",
        "pods": str(shape.pods),
        "ephemeral-storage": f"{shape.ephemeral_storage_gi}Gi",
    }
    allocatable_cpu = shape.cpu_millis - shape.reserved_cpu_millis
    allocatable = {
        "cpu": f"{allocatable_cpu}m" if allocatable_cpu % 1000 else str(allocatable_cpu // 1000),
        "memory": f"{shape.memory_gi - shape.reserved_memory_gi}Gi",
        "pods": str(shape.pods),
        "ephemeral-storage": f"{shape.ephemeral_storage_gi - shape.reserved_storage_gi}Gi",
    }

    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                HOSTNAME_LABEL: name,
                ZONE_LABEL: f"zone-{ZONE_NAMES[rack % zones]}",
                RACK_LABEL: f"rack-{rack:02d}",
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
            },
        },
        "spec": spec,
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": healthy_node_conditions(created),
            "addresses": [
                {"type": "InternalIP", "address": node_internal_ip(index)},
                {"type": "Hostname", "address": name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "osImage": "lockstep simulated node",
                "kernelVersion": "6.1.0-sim",
                "containerRuntimeVersion": "sim://1.0",
                "kubeletVersion": SIM_KUBELET_VERSION,
                "kubeProxyVersion": "",
                "machineID": f"sim-{index}",
                "systemUUID": f"sim-{index}",
                "bootID": f"sim-{index}",
            },
            "phase": "Running",
        },
    }


def find_crd_file() -> Path:
    """The PodGroup CRD in the repository's ``crds/``, found from this source file upwards."""
    here = Path(__file__).resolve()
    for parent in here.parents:
        candidate = parent / "crds" / CRD_FILE
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"crds/{CRD_FILE} not found in any parent directory of {here}")


def load_crd(path: Path | None = None) -> JsonObject:
    document = yaml.safe_load((path or find_crd_file()).read_text())
    if not isinstance(document, dict) or document.get("kind") != "CustomResourceDefinition":
        raise ValueError(f"{path}: not a CustomResourceDefinition")
    return document


class SimCluster:
    """Starts the API server emulator and the cluster's components; stops them in reverse order."""

    def __init__(
        self,
        nodes: int = 10,
        devices_per_node: int = 8,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        shape: NodeShape = NodeShape(),
        zones: int = 3,
        rack_size: int = 8,
        taint_every: int = 0,
        kubelet_start_delay: float = 0.1,
        kubelet_delete_delay: float | None = 0.1,
        pod_run_seconds: float | None = None,
        install_crd: bool = True,
        owner_crds: Sequence[str] = (),
        install_crds: Sequence[str] = (),
        start_timeout: float = 60.0,
        feature_gates: str | Mapping[str, bool] | None = None,
        kube_version: str | KubeVersion | None = None,
        attach_seconds: float = 0.2,
        node_monitor_grace_period: float = 50.0,
        node_monitor_period: float = 5.0,
        pod_gc_period: float = 20.0,
        write_latency: float = 0.0,
    ) -> None:
        if nodes < 1:
            raise ValueError(f"SimCluster nodes: must be at least 1, got {nodes}")
        if devices_per_node < 0:
            raise ValueError(f"SimCluster devices_per_node: must not be negative, got {devices_per_node}")
        self.node_count = nodes
        self.devices_per_node = devices_per_node
        self.server = ApiServer(
            host=host,
            port=port,
            feature_gates=feature_gates,
            kube_version=kube_version,
            write_latency=write_latency,
        )
        self.shape = shape
        self.zones = zones
        self.rack_size = rack_size
        self.taint_every = taint_every
        self.kubelet_start_delay = kubelet_start_delay
        self.kubelet_delete_delay = kubelet_delete_delay
        self.pod_run_seconds = pod_run_seconds
        self.install_crd = install_crd
        unknown = sorted(set(owner_crds) - set(OWNER_KINDS))
        if unknown:
            raise ValueError(f"SimCluster owner_crds: unknown kinds {unknown} (known: {sorted(OWNER_KINDS)})")
        self.owner_crds = tuple(owner_crds)
        self._owner_controllers: dict[str, OwnerController] = {}
        self.optional_crds = tuple(install_crds)
        self.attach_seconds = attach_seconds  # the DRA driver's time to meet a device's binding conditions
        self.start_timeout = start_timeout
        # kube-controller-manager's --node-monitor-grace-period and --node-monitor-period, and the pod
        # GC's check period (its quarantine of a missing node is twice that, 40 s upstream)
        self.node_monitor_grace_period = node_monitor_grace_period
        self.node_monitor_period = node_monitor_period
        self.pod_gc_period = pod_gc_period
        self.url = ""
        self.node_names = [node_name(i, nodes) for i in range(nodes)]
        self._session: aiohttp.ClientSession | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._kubelets: Kubelets | None = None
        self._claim_controller: ClaimController | None = None
        self._disruption_controller: DisruptionController | None = None
        # kube-controller-manager's other parts: started after the informers feeding them
        self._controllers: list[
            JobController
            | EphemeralVolumeController
            | PodGroupProtectionController
            | PodGroupClaimController
            | NodeLifecycleController
            | TaintEvictionController
            | PodGarbageCollector
        ] = []
        self._dra_driver: DraDriver | None = None
        self._pv_controller: PersistentVolumeController | None = None
        self._provisioner: Provisioner | None = None

    @property
    def http(self) -> KubeHttp:
        if self._session is None:
            raise RuntimeError("SimCluster is not started")
        return KubeHttp(self.url, self._session)

    async def start(self) -> str:
        """Start everything; return the API server's base URL once nodes, slices and CRD are ready."""
        self.url = await self.server.start()
        try:
            await asyncio.wait_for(self._start_components(), self.start_timeout)
        except BaseException:
            await self.stop()
            raise
        log.info(
            "simulated cluster ready", url=self.url, nodes=self.node_count, devices=self.devices_per_node
        )
        return self.url

    async def _start_components(self) -> None:
        self._session = new_session()
        http = self.http
        if self.install_crd:
            await self._install_crd(http)
        if self.optional_crds:
            await self.install_crds(*self.optional_crds)
        await self._create_nodes(http)
        for kind in self.owner_crds:
            await self.install_owner_crd(kind)

        pods = Informer(http, "/api/v1/pods")
        nodes = Informer(http, "/api/v1/nodes")
        claims = Informer(http, "/apis/resource.k8s.io/v1/resourceclaims")
        pvs = Informer(http, "/api/v1/persistentvolumes")
        pvcs = Informer(http, "/api/v1/persistentvolumeclaims")
        classes = Informer(http, "/apis/storage.k8s.io/v1/storageclasses")
        self._kubelets = Kubelets(
            http,
            pods,
            claims,
            self.node_names,
            [node_pod_cidr(i) for i in range(self.node_count)],
            [node_internal_ip(i) for i in range(self.node_count)],
            start_delay=self.kubelet_start_delay,
            delete_delay=self.kubelet_delete_delay,
            run_seconds=self.pod_run_seconds,
            pvcs=pvcs,
            nodes=nodes,
        )
        self._claim_controller = ClaimController(http, pods, claims)
        self._pv_controller = PersistentVolumeController(http, pvs, pvcs, pods)
        self._provisioner = Provisioner(http, pvcs, classes)
        budgets = Informer(http, "/apis/policy/v1/poddisruptionbudgets")
        self._disruption_controller = DisruptionController(http, pods, budgets)
        informers = {
            "pods": pods,
            "claims": claims,
            "pvs": pvs,
            "pvcs": pvcs,
            "classes": classes,
            "pdbs": budgets,
            "nodes": nodes,
        }
        self._controllers = [
            EphemeralVolumeController(http, pods, pvcs),
            NodeLifecycleController(
                http,
                nodes,
                pods,
                self._kubelets.last_heard,
                grace_period=self.node_monitor_grace_period,
                monitor_period=self.node_monitor_period,
            ),
            TaintEvictionController(http, nodes, pods),
            PodGarbageCollector(
                http, pods, nodes, period=self.pod_gc_period, quarantine=2 * self.pod_gc_period
            ),
        ]
        pod_group_type = next(
            (
                rt
                for (group, _, plural), rt in self.server.types.items()
                if (group, plural) == (GROUP, "podgroups")
            ),
            None,
        )
        if pod_group_type is not None:
            group_version = pod_group_type.api_version
            pod_groups = informers["podgroups"] = Informer(http, pod_groups_path(group_version))
            composites = None
            if any((g, p) == (GROUP, "compositepodgroups") for g, _, p in self.server.types):
                composites = informers["compositepodgroups"] = Informer(
                    http, f"{COMPOSITES_PATH}/compositepodgroups"
                )
            self._controllers += [
                PodGroupProtectionController(http, pods, pod_groups, group_version, composites),
                PodGroupClaimController(http, pod_groups, claims, group_version),
            ]
        self._controllers.append(self._job_controller(http, pods, informers))
        components = (
            self._kubelets,
            self._claim_controller,
            self._pv_controller,
            self._provisioner,
            self._disruption_controller,
            *self._controllers,
        )
        for component in components:
            component.start()
        for name, informer in informers.items():
            self._tasks.append(asyncio.create_task(informer.run(), name=f"sim-{name}-watch"))
        for informer in informers.values():
            await informer.synced.wait()
        if self.devices_per_node > 0:
            self._dra_driver = DraDriver(
                http,
                self.node_names,
                self.devices_per_node,
                list_attributes=self.server.feature_gates["DRAListTypeAttributes"],
                claims=claims,
                attach_seconds=self.attach_seconds,
            )
            await self._dra_driver.start()

    def _job_controller(
        self, http: KubeHttp, pods: Informer, informers: dict[str, Informer]
    ) -> JobController:
        """The Job controller; with ``WorkloadWithJob`` (1.37) it also makes the Jobs' Workloads and
        PodGroups, in the served scheduling.k8s.io version."""
        workloads_type = next(
            (
                rt
                for (group, _, plural), rt in self.server.types.items()
                if (group, plural) == (GROUP, "workloads")
            ),
            None,
        )
        if (
            workloads_type is None
            or "podgroups" not in informers
            or not self.server.feature_gates.get("WorkloadWithJob", False)
        ):
            return JobController(http, pods)
        version = workloads_type.api_version
        workloads = informers["workloads"] = Informer(http, f"/apis/{version}/workloads")
        return JobController(
            http, pods, scheduling_version=version, workloads=workloads, pod_groups=informers["podgroups"]
        )

    async def lose_node(self, name: str) -> None:
        """Lose node ``name``: its kubelet stops reporting and acting on its pods (they stay as the API
        last saw them). After ``node_monitor_grace_period`` the node lifecycle controller makes it Ready
        Unknown, taints it ``node.kubernetes.io/unreachable`` (NoSchedule, NoExecute) and its pods
        Ready=False; taint eviction then deletes the pods after their ``tolerationSeconds``."""
        if self._kubelets is None:
            raise RuntimeError("SimCluster is not started")
        self._kubelets.lose(name)

    async def restore_node(self, name: str) -> None:
        """The kubelet of node ``name`` reports again: Ready True (the controller then removes the
        taints), its running pods Ready, and what fell due meanwhile (exits, deadlines, deletions)."""
        if self._kubelets is None:
            raise RuntimeError("SimCluster is not started")
        await self._kubelets.restore(name)

    async def _create_nodes(self, http: KubeHttp) -> None:
        created = now_rfc3339()
        nodes = [
            make_node(
                i,
                self.node_count,
                shape=self.shape,
                zones=self.zones,
                rack_size=self.rack_size,
                taint_every=self.taint_every,
                created=created,
            )
            for i in range(self.node_count)
        ]
        semaphore = asyncio.Semaphore(32)

        async def create(node: JsonObject) -> None:
            async with semaphore:
                try:
                    await http.create("/api/v1/nodes", node)
                except ApiError as exc:
                    if exc.status != 409:
                        raise

        await asyncio.gather(*(create(node) for node in nodes))

    async def install_owner_crd(self, kind: str) -> None:
        """Install the CRD of a workload operator (``OWNER_KINDS``) and start its simulated controller,
        as installing that operator would."""
        crd_of, controller_of = OWNER_KINDS[kind]
        crd = crd_of()
        await self._install_crd(self.http, crd)
        if kind not in self._owner_controllers:
            controller = self._owner_controllers[kind] = controller_of(self.http)
            controller.start()

    async def install_crds(self, *names: str) -> None:
        """Install other schedulers' CRDs (``lockstep.sim.registry.OPTIONAL_CRDS``), as an admin
        applying them would, and wait until they are served."""
        for name in names:
            await self._install_crd(self.http, OPTIONAL_CRDS[name]())

    async def _install_crd(self, http: KubeHttp, crd: JsonObject | None = None) -> None:
        crd = crd or load_crd()
        name = crd["metadata"]["name"]
        try:
            await http.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd)
        except ApiError as exc:
            if exc.status != 409:
                raise
        await wait_for_crd_established(http, name)

    async def stop(self) -> None:
        if self._dra_driver is not None:
            await self._dra_driver.stop()
        stopping = (
            self._disruption_controller,
            self._provisioner,
            self._pv_controller,
            self._claim_controller,
        )
        for component in stopping:
            if component is not None:
                await component.stop()
        for controller in self._controllers:
            await controller.stop()
        self._controllers = []
        for owner_controller in self._owner_controllers.values():
            await owner_controller.stop()
        self._owner_controllers = {}
        if self._kubelets is not None:
            await self._kubelets.stop()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self.server.stop()

    async def __aenter__(self) -> SimCluster:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()


def is_established(crd: JsonObject) -> bool:
    conditions: list[dict[str, Any]] = crd.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


async def wait_for_crd_established(http: KubeHttp, name: str) -> None:
    """Poll until the CRD is Established (the caller bounds the wait)."""
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    while not is_established(await http.get(path)):  # noqa: ASYNC110 - the state lives in the server
        await asyncio.sleep(0.05)
