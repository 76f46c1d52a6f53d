"""The workloads, mirroring scheduler_perf, as plain data: gangs, their pods and setup objects.

A workload is generated from its name, a scale factor (1.0 is the published size; tests use tiny
ones) and the shape of the simulated nodes, read from the cluster, so capacity-sensitive workloads
(mixed) stay tight whatever the emulator's node size is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from lockstep.sim.cluster import node_name as sim_node_name

NAMESPACE = "bench"
SCHEDULER_NAME = "lockstep"
OTHER_SCHEDULER = "default-scheduler"
POD_GROUP_LABEL = "scheduling.lockstep.dev/pod-group"
PODGROUP_API_VERSION = "scheduling.lockstep.dev/v1alpha1"
RESOURCE_API_VERSION = "resource.k8s.io/v1"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
CLAIM_NAME = "gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
GANGS_IN_FLIGHT = 8


@dataclass(frozen=True)
class NodeShape:
    """Allocatable of one simulated node (all nodes of the emulator are alike)."""

    cpu_millis: int
    memory_mib: int
    pods: int


@dataclass(frozen=True)
class DeviceDriver:
    """What the emulator's DRA driver publishes: its DeviceClass and a CEL selector for its devices."""

    device_class: str
    selector: str


@dataclass(frozen=True)
class GangSpec:
    """One PodGroup and its pods. ``counted`` gangs are the ones whose binding the phase measures."""

    name: str
    pods: int
    min_count: int
    cpu_millis: int
    memory_mib: int = 64
    oversized_members: int = 0
    # "template": one claim per pod from the template; "group": one shared claim; "extended": each pod
    # asks for EXTENDED_RESOURCE, which a DeviceClass provides (lockstep creates the pod's claim)
    claim: str | None = None
    counted: bool = True
    scheduler: str = SCHEDULER_NAME  # another name: lockstep ignores the pods, and no PodGroup is created
    one_per_node: bool = False  # members carry required pod anti-affinity on the hostname against each other
    pod_group: bool = True  # False: lone pods, with no PodGroup and no pod-group label
    node_name: str | None = None  # required node affinity on metadata.name, as a DaemonSet's pod has


@dataclass(frozen=True)
class ChurnSpec:
    """While scheduling, delete ``gangs`` whole gangs (pods and PodGroup) and create replacements."""

    gangs: int
    interval_seconds: float
    seed: int = 8


@dataclass(frozen=True)
class Workload:
    name: str
    description: str
    nodes: int
    devices_per_node: int
    gangs: tuple[GangSpec, ...]
    pods_expected: int
    setup: tuple[dict[str, Any], ...] = ()
    churn: ChurnSpec | None = None
    baseline: bool = False
    gangs_in_flight: int = GANGS_IN_FLIGHT  # gangs the load generator creates at once

    @property
    def pods_total(self) -> int:
        return sum(g.pods for g in self.gangs)

    def counted_alone(self) -> Workload:
        """The "same gangs alone" baseline of mixed: lockstep sees only the counted gangs.

        The other gangs' pods are still created, in the same order, but for another scheduler and
        without PodGroups, so the load generator, the emulator and the watches do the same work and
        only lockstep's handling of the gangs that cannot fit differs between the two phases.
        """
        gangs = tuple(g if g.counted else replace(g, scheduler=OTHER_SCHEDULER) for g in self.gangs)
        return replace(
            self, description=self.description + " (counted gangs alone)", gangs=gangs, baseline=False
        )


def pod_name(gang: GangSpec, index: int) -> str:
    return f"{gang.name}-{index}"


def pod_manifest(gang: GangSpec, index: int, shape: NodeShape, namespace: str = NAMESPACE) -> dict[str, Any]:
    oversized = index >= gang.pods - gang.oversized_members
    cpu = shape.cpu_millis * 2 if oversized else gang.cpu_millis
    container: dict[str, Any] = {
        "name": "app",
        "image": PAUSE_IMAGE,
        "resources": {"requests": {"cpu": f"{cpu}m", "memory": f"{gang.memory_mib}Mi"}},
    }
    spec: dict[str, Any] = {
        "schedulerName": gang.scheduler,
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [container],
    }
    if gang.node_name is not None:
        pinned = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [gang.node_name]}]}
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [pinned]}
            }
        }
    if gang.one_per_node:
        term = {"labelSelector": {"matchLabels": {POD_GROUP_LABEL: gang.name}}, "topologyKey": HOSTNAME_LABEL}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if gang.claim == "template":
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": template_name()}]
        container["resources"]["claims"] = [{"name": CLAIM_NAME}]
    if gang.claim == "extended":
        container["resources"]["requests"][EXTENDED_RESOURCE] = "1"
        container["resources"]["limits"] = {EXTENDED_RESOURCE: "1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": pod_name(gang, index),
            "namespace": namespace,
            "labels": {POD_GROUP_LABEL: gang.name} if gang.pod_group else {},
        },
        "spec": spec,
    }


def podgroup_manifest(gang: GangSpec, namespace: str = NAMESPACE) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": gang.min_count}}}
    if gang.claim == "group":
        spec["resourceClaims"] = [{"name": CLAIM_NAME, "resourceClaimTemplateName": template_name()}]
    return {
        "apiVersion": PODGROUP_API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": gang.name, "namespace": namespace},
        "spec": spec,
    }


def template_name() -> str:
    return "bench-gpu"


def claim_template_manifest(driver: DeviceDriver, namespace: str = NAMESPACE) -> dict[str, Any]:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": driver.device_class,
            "selectors": [{"cel": {"expression": driver.selector}}],
        },
    }
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": template_name(), "namespace": namespace},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


EXTENDED_RESOURCE = "example.com/gpu"


def extended_resource_class_manifest(driver: DeviceDriver) -> dict[str, Any]:
    """A DeviceClass of the driver's devices that provides EXTENDED_RESOURCE (DRAExtendedResource)."""
    return {
        "apiVersion": RESOURCE_API_VERSION,
        "kind": "DeviceClass",
        "metadata": {"name": "bench-extended-gpu"},
        "spec": {
            "selectors": [{"cel": {"expression": driver.selector}}],
            "extendedResourceName": EXTENDED_RESOURCE,
        },
    }


def namespace_manifest(namespace: str = NAMESPACE) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}


def _scaled(count: int, scale: float, multiple: int = 1) -> int:
    """``count * scale`` rounded to a positive multiple of ``multiple``."""
    return max(multiple, round(count * scale / multiple) * multiple)


# Nodes and DRA devices per node of each workload at scale 1.0.
CLUSTER: dict[str, tuple[int, int]] = {
    "basic": (5000, 0),
    "claim-template": (500, 8),
    "extended-resource": (500, 8),
    "shared-claim": (100, 8),
    "mixed": (1000, 0),
    "churn": (1000, 0),
    "anti-affinity": (1000, 0),
    "upstream-basic-10k": (5000, 0),
    "upstream-basic-50k": (5000, 0),
    "upstream-gangs-1000": (5000, 0),
    "upstream-gangs-2000": (5000, 0),
    "upstream-gangs-3000": (5000, 0),
    "upstream-claim-template": (500, 10),
    "upstream-claim-template-1000x8": (1000, 8),
    "upstream-daemonset": (15000, 0),
    "upstream-saturation": (20000, 0),
}
SHARED_CLAIM_PODS = 1000


def cluster_size(name: str, scale: float) -> tuple[int, int]:
    """(nodes, devices per node) the emulator must start with; the node shape is read from it after."""
    if name not in CLUSTER:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(CLUSTER)}")
    nodes, devices = CLUSTER[name]
    return _scaled(nodes, scale), devices


def max_pods_per_node(name: str, scale: float) -> int | None:
    """Pods a node must hold when more than the emulator's default: the shared claim's gang shares one
    node-local device, so the whole gang lands on one node."""
    if name == "shared-claim":
        return _scaled(SHARED_CLAIM_PODS, scale) + 10
    return None


def basic(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    nodes, _ = cluster_size("basic", scale)
    pods = _scaled(10000, scale, 8)
    gangs = tuple(GangSpec(f"basic-{i}", pods=8, min_count=8, cpu_millis=100) for i in range(pods // 8))
    return Workload(
        name="basic",
        description=f"{nodes:,} nodes, {pods:,} pods in gangs of 8 (minCount 8)",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=pods,
    )


def _device_gangs(name: str, scale: float, claim: str, what: str, setup: dict[str, Any]) -> Workload:
    """5,000 pods at scale 1.0 in gangs of 4, each pod getting one device as ``claim`` says."""
    nodes, devices_per_node = cluster_size(name, scale)
    pods = _scaled(5000, scale, 4)
    gangs = tuple(
        GangSpec(f"{claim}-{i}", pods=4, min_count=4, cpu_millis=100, claim=claim) for i in range(pods // 4)
    )
    # 8 devices per node give fewer devices than pods: whole gangs up to the device count can bind.
    capacity = nodes * devices_per_node
    expected = min(pods, capacity // 4 * 4)
    return Workload(
        name=name,
        description=(
            f"{nodes:,} nodes x {devices_per_node} devices, {pods:,} pods each {what}, gangs of 4; "
            f"{expected:,} fit the devices"
        ),
        nodes=nodes,
        devices_per_node=devices_per_node,
        gangs=gangs,
        pods_expected=expected,
        setup=(setup,),
    )


def claim_template(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    what = "with one claim from a template with a CEL selector"
    return _device_gangs("claim-template", scale, "template", what, claim_template_manifest(driver))


def extended_resource(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    what = (
        f"asking for {EXTENDED_RESOURCE}: 1, which a DeviceClass provides (a claim per pod made at PreBind)"
    )
    return _device_gangs(
        "extended-resource", scale, "extended", what, extended_resource_class_manifest(driver)
    )


def shared_claim(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    pods = _scaled(SHARED_CLAIM_PODS, scale)
    nodes, devices_per_node = cluster_size("shared-claim", scale)
    gang = GangSpec("shared", pods=pods, min_count=pods, cpu_millis=10, claim="group")
    return Workload(
        name="shared-claim",
        description=f"one PodGroup of {pods:,} pods sharing one claim, {nodes:,} nodes (kubernetes #140263)",
        nodes=nodes,
        devices_per_node=devices_per_node,
        gangs=(gang,),
        pods_expected=pods,
        setup=(claim_template_manifest(driver),),
    )


def mixed(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    """Feasible gangs fill 3/4 of the cluster; infeasible ones interleaved would take far more if held.

    Each pod takes a quarter of a node's CPU. "oversized" gangs have one member that fits no node, and
    "short" gangs have fewer pods than minCount: a scheduler that held their partial placements would
    leave the feasible gangs without room.
    """
    nodes, _ = cluster_size("mixed", scale)
    slots = nodes * 4
    cpu = shape.cpu_millis // 4
    feasible = max(1, slots * 3 // 4 // 8)
    infeasible = max(1, feasible // 2)
    gangs: list[GangSpec] = []
    for i in range(max(feasible, infeasible)):
        if i < feasible:
            gangs.append(GangSpec(f"fits-{i}", pods=8, min_count=8, cpu_millis=cpu))
        if i < infeasible:
            if i % 2 == 0:
                gangs.append(
                    GangSpec(
                        f"oversized-{i}",
                        pods=8,
                        min_count=8,
                        cpu_millis=cpu,
                        oversized_members=1,
                        counted=False,
                    )
                )
            else:
                gangs.append(GangSpec(f"short-{i}", pods=6, min_count=8, cpu_millis=cpu, counted=False))
    return Workload(
        name="mixed",
        description=(
            f"{nodes:,} nodes, {feasible:,} feasible gangs of 8 interleaved with {infeasible:,} that cannot "
            "fit (one oversized member, or fewer pods than minCount)"
        ),
        nodes=nodes,
        devices_per_node=0,
        gangs=tuple(gangs),
        pods_expected=feasible * 8,
        baseline=True,
    )


def churn(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    nodes, _ = cluster_size("churn", scale)
    pods = _scaled(5000, scale, 8)
    gang_count = pods // 8
    gangs = tuple(GangSpec(f"churn-{i}", pods=8, min_count=8, cpu_millis=100) for i in range(gang_count))
    replaced = max(1, gang_count // 10)
    return Workload(
        name="churn",
        description=f"{nodes:,} nodes, {pods:,} pods in gangs of 8; {replaced:,} gangs deleted and recreated "
        "while scheduling",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=pods,
        churn=ChurnSpec(gangs=replaced, interval_seconds=0.05),
    )


def anti_affinity(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    nodes, _ = cluster_size("anti-affinity", scale)
    pods = _scaled(5000, scale, 8)
    gangs = tuple(
        GangSpec(f"spread-{i}", pods=8, min_count=8, cpu_millis=100, one_per_node=True)
        for i in range(pods // 8)
    )
    return Workload(
        name="anti-affinity",
        description=f"{nodes:,} nodes, {pods:,} pods in gangs of 8, each member with required pod "
        "anti-affinity on the hostname against its gang (one member per node)",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=pods,
    )


# Upstream's scheduler_perf shapes (kubernetes test/integration/scheduler_perf), with lockstep's own
# PodGroups for the gangs. Lone pods are created 64 at a time, gangs of 3 21 at a time, so about as
# many creates are in flight as with 8 gangs of 8.
PODS_IN_FLIGHT = 64


def _lone_pods(name: str, scale: float, pods_at_full_scale: int, description: str, **spec: Any) -> Workload:
    nodes, devices_per_node = cluster_size(name, scale)
    pods = _scaled(pods_at_full_scale, scale)
    prefix = name.removeprefix("upstream-")
    gangs = tuple(
        GangSpec(f"{prefix}-{i}", pods=1, min_count=1, pod_group=False, **spec) for i in range(pods)
    )
    return Workload(
        name=name,
        description=description.format(nodes=nodes, pods=pods),
        nodes=nodes,
        devices_per_node=devices_per_node,
        gangs=gangs,
        pods_expected=pods,
        gangs_in_flight=PODS_IN_FLIGHT,
    )


def upstream_basic(pods: int) -> Callable[[float, NodeShape, DeviceDriver], Workload]:
    """misc/performance-config.yaml SchedulingBasic: lone pods of pod-default.yaml (100m, 500Mi)."""

    def build_basic(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
        name = f"upstream-basic-{pods // 1000}k"
        what = "SchedulingBasic: {nodes:,} nodes, {pods:,} lone pods of 100m CPU and 500Mi"
        return _lone_pods(name, scale, pods, what, cpu_millis=100, memory_mib=500)

    return build_basic


def upstream_gangs(gang_count: int) -> Callable[[float, NodeShape, DeviceDriver], Workload]:
    """gangscheduling/performance-config.yaml: gangs of 3 (minCount 3), pods of 100m and 100Mi."""

    def build_gangs(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
        name = f"upstream-gangs-{gang_count}"
        nodes, _ = cluster_size(name, scale)
        count = _scaled(gang_count, scale)
        gangs = tuple(
            GangSpec(f"gang-{i}", pods=3, min_count=3, cpu_millis=100, memory_mib=100) for i in range(count)
        )
        return Workload(
            name=name,
            description=f"GangScheduling: {nodes:,} nodes, {count:,} gangs of 3 (minCount 3), 100m and 100Mi",
            nodes=nodes,
            devices_per_node=0,
            gangs=gangs,
            pods_expected=count * 3,
            gangs_in_flight=PODS_IN_FLIGHT // 3,
        )

    return build_gangs


def upstream_claim_template(name: str) -> Callable[[float, NodeShape, DeviceDriver], Workload]:
    """dra/performance-config.yaml SchedulingWithResourceClaimTemplate 5000pods_500nodes: 10 devices a
    node (maxClaimsPerNode 10), so the pods fill the cluster exactly; upstream measures the second
    2,500 after 2,500 init pods, this measures all 5,000. ``-1000x8`` is issue 29's memory run: the
    same 5,000 pods on 1,000 nodes x 8 devices, where kube-scheduler held 346 MB."""

    def build_claim_template(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
        _, devices = cluster_size(name, scale)
        what = (
            "SchedulingWithResourceClaimTemplate: {nodes:,} nodes x "
            f"{devices} devices, {{pods:,}} lone pods with a template claim"
        )
        workload = _lone_pods(name, scale, 5000, what, cpu_millis=100, claim="template")
        return replace(workload, setup=(claim_template_manifest(driver),))

    return build_claim_template


def upstream_daemonset(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    """misc/performance-config.yaml SchedulingDaemonset: one pod per node, each pinned to its node by
    required node affinity on metadata.name (templates/daemonset-pod.yaml), no requests."""
    nodes, _ = cluster_size("upstream-daemonset", scale)
    gangs = tuple(
        GangSpec(
            f"daemonset-{i}",
            pods=1,
            min_count=1,
            cpu_millis=0,
            memory_mib=0,
            pod_group=False,
            node_name=sim_node_name(i, nodes),
        )
        for i in range(nodes)
    )
    return Workload(
        name="upstream-daemonset",
        description=f"SchedulingDaemonset: {nodes:,} nodes, one lone pod pinned to each by metadata.name",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=nodes,
        gangs_in_flight=PODS_IN_FLIGHT,
    )


def upstream_saturation(scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    """batching/performance-config.yaml ResourceSaturation 20000Nodes_20000Pods: each pod takes 3/4 of
    a node's CPU (3 of 4 upstream), so every node holds one and the last pods find few free nodes."""
    what = "ResourceSaturation: {nodes:,} nodes, {pods:,} lone pods of 3/4 of a node's CPU (one per node)"
    return _lone_pods("upstream-saturation", scale, 20000, what, cpu_millis=shape.cpu_millis * 3 // 4)


UPSTREAM_BUILDERS: dict[str, Callable[[float, NodeShape, DeviceDriver], Workload]] = {
    "upstream-basic-10k": upstream_basic(10000),
    "upstream-basic-50k": upstream_basic(50000),
    "upstream-gangs-1000": upstream_gangs(1000),
    "upstream-gangs-2000": upstream_gangs(2000),
    "upstream-gangs-3000": upstream_gangs(3000),
    "upstream-claim-template": upstream_claim_template("upstream-claim-template"),
    "upstream-claim-template-1000x8": upstream_claim_template("upstream-claim-template-1000x8"),
    "upstream-daemonset": upstream_daemonset,
    "upstream-saturation": upstream_saturation,
}

BUILDERS: dict[str, Callable[[float, NodeShape, DeviceDriver], Workload]] = {
    "basic": basic,
    "claim-template": claim_template,
    "extended-resource": extended_resource,
    "shared-claim": shared_claim,
    "mixed": mixed,
    "churn": churn,
    "anti-affinity": anti_affinity,
}


def build(name: str, scale: float, shape: NodeShape, driver: DeviceDriver) -> Workload:
    builders = BUILDERS | UPSTREAM_BUILDERS
    if name not in builders:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(builders)}")
    if scale <= 0:
        raise ValueError(f"workload {name}: scale must be positive, got {scale}")
    return builders[name](scale, shape, driver)


def replacement(gang: GangSpec, generation: int) -> GangSpec:
    """The gang created in place of a deleted one: same shape, new name (new PodGroup and pods)."""
    return replace(gang, name=f"{gang.name}-r{generation}")


def startup_workload(nodes: int, pods: int, gang_size: int) -> Workload:
    """``bench/startup.py``'s and ``bench/ingest.py``'s shape: ``pods // gang_size`` gangs of
    ``gang_size`` (minCount all of them), 100m each, on ``nodes`` nodes, all created before the
    operator starts."""
    gangs = tuple(
        GangSpec(f"start-{i:05d}", pods=gang_size, min_count=gang_size, cpu_millis=100)
        for i in range(pods // gang_size)
    )
    return Workload(
        name="startup",
        description="start-up",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=len(gangs) * gang_size,
        setup=(namespace_manifest(),),
    )
