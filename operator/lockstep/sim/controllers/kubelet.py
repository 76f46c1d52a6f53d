"""Simulated kubelets for all simulated nodes, as one controller over the pod watch.

- A pod bound to one of our nodes and still Pending is marked Running after ``start_delay`` seconds:
  phase Running, conditions PodReadyToStartContainers/Initialized/Ready/ContainersReady True
  (PodScheduled is kept: the status is a strategic merge patch keyed by condition type),
  containerStatuses, podIP, hostIP and startTime. Like the real kubelet, it first prepares the
  pod's ResourceClaims: each must exist, be allocated, list the pod in ``status.reservedFor`` and,
  for the simulated driver, hold devices of this node's pool. Until then the pod stays Pending and
  is checked again when one of its claims changes (or its status names a template's claim). The claim
  the scheduler made for the pod's DRA-backed extended resources (``status.extendedResourceClaimStatus``)
  is one of them. There is no admission against the node's allocatable (the real kubelet drops
  extended resources the node does not advertise, and DRA-backed ones, from its fit check).
  Its PersistentVolumeClaims must be Bound too (the volume manager cannot mount an unbound claim):
  until then the pod stays Pending, gets one ``FailedMount`` Warning event, and is checked again
  when one of those claims changes.
- A bound pod with a deletionTimestamp is removed with a DELETE ``gracePeriodSeconds=0`` guarded by
  the pod's uid once its containers stopped: ``delete_delay`` seconds after the deletion (how long the
  simulated containers take to exit on SIGTERM), or at the end of its grace period
  (``deletionGracePeriodSeconds``) if that comes first. ``delete_delay=None`` simulates containers
  that ignore SIGTERM: the pod stays, terminating, for its whole grace period.
- Simulated workloads (``lockstep.sim.workload``: the pod's ``sim.lockstep.dev/run-seconds`` and
  ``sim.lockstep.dev/exit-code``, else the cluster-wide ``run_seconds``): the containers of a Running
  pod exit that long after they (re)started. As ``getPhase`` in upstream's ``pkg/kubelet/kubelet_pods.go``:
  with ``restartPolicy`` Always, or OnFailure and a non-zero code, they are started again at once
  (restartCount + 1, ``lastState.terminated``, phase stays Running; no CrashLoopBackOff delay);
  otherwise the pod is Succeeded (code 0, containers terminated ``Completed``) or Failed (reason
  ``Error``). A bad annotation is one Warning event ``InvalidSimulatedWorkload`` and is ignored.
- ``spec.activeDeadlineSeconds``, as ``pkg/kubelet/active_deadline.go``: counted from the pod's start
  (``status.startTime``); once reached the pod is Failed with reason ``DeadlineExceeded`` and message
  "Pod was active on the node longer than the specified deadline", its containers terminated with
  code 143 (they exit on SIGTERM), and a Normal event ``DeadlineExceeded`` is recorded.
- A lost node (``lose``): its kubelet stops reporting anything (``last_heard`` stops advancing, for the
  node lifecycle controller) and acting on its pods: they stay as the API last saw them, deletions
  included. ``restore`` posts the node's healthy conditions again, reports its running pods Ready and
  catches up: what fell due while the node was lost (exits, deadlines, deletions) happens then.
  With the nodes informer, ``kubectl`` drives it too: the Node annotation ``sim.lockstep.dev/lost:
  "true"`` loses the node and removing it restores the node; a deleted Node's kubelet is lost with it
  (its pods are left to the pod GC's orphan collection) and reports again when a Node of that name is
  created anew.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import ipaddress
import time
from collections.abc import Sequence

import structlog

from lockstep.sim.controllers import events_path, object_event, pod_warning_event
from lockstep.sim.controllers.dra_driver import DRIVER_NAME
from lockstep.sim.controllers.persistentvolume import pod_claim_names as pod_pvc_names
from lockstep.sim.watching import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Informer,
    JsonObject,
    KubeHttp,
    WorkQueue,
)
from lockstep.sim.workload import INVALID_REASON, PREFIX, Workload, parse_workload

log = structlog.get_logger("lockstep.sim.controllers.kubelet")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


DEADLINE_REASON = "DeadlineExceeded"
DEADLINE_MESSAGE = "Pod was active on the node longer than the specified deadline"
# on a Node, "true": its kubelet stops reporting and acting, as when the machine is cut off
LOST_ANNOTATION = PREFIX + "lost"
KILLED_EXIT_CODE = 143  # 128 + SIGTERM: the simulated containers exit when the kubelet stops them


def parse_rfc3339(value: str) -> datetime.datetime | None:
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def monotonic_of(value: str | None, default: float) -> float:
    """The monotonic clock's reading at wall-clock time ``value`` (RFC 3339), or ``default``."""
    when = parse_rfc3339(value) if value else None
    if when is None or when.tzinfo is None:
        return default
    return time.monotonic() - (datetime.datetime.now(datetime.UTC) - when).total_seconds()


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def _condition(condition_type: str, status: str, when: str, reason: str | None = None) -> JsonObject:
    condition: JsonObject = {"type": condition_type, "status": status, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    return condition


def _container_status(
    pod: JsonObject,
    container: JsonObject,
    state: JsonObject,
    *,
    restarts: int = 0,
    last_state: JsonObject | None = None,
) -> JsonObject:
    running = "running" in state
    status: JsonObject = {
        "name": container["name"],
        "image": container.get("image", ""),
        "imageID": f"sim://{container.get('image', '')}",
        "containerID": f"sim://{pod['metadata'].get('uid', '')}/{container['name']}",
        "ready": running,
        "started": running,
        "restartCount": restarts,
        "state": state,
    }
    if last_state:
        status["lastState"] = last_state
    return status


def _containers(pod: JsonObject) -> list[JsonObject]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _container_started_at(pod: JsonObject, name: str, default: str) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            state = status.get("state") or {}
            return str((state.get("running") or state.get("terminated") or {}).get("startedAt") or default)
    return default


def running_status(pod: JsonObject, pod_ip: str, host_ip: str, when: str) -> JsonObject:
    """The status patch a kubelet writes once all containers of ``pod`` started."""
    return {
        "status": {
            "phase": "Running",
            "conditions": [
                _condition("PodReadyToStartContainers", "True", when),
                _condition("Initialized", "True", when),
                _condition("Ready", "True", when),
                _condition("ContainersReady", "True", when),
            ],
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
            "startTime": when,
            "containerStatuses": [
                _container_status(pod, container, {"running": {"startedAt": when}})
                for container in _containers(pod)
            ],
        }
    }


def _terminated(pod: JsonObject, container: JsonObject, exit_code: int, reason: str, when: str) -> JsonObject:
    started = _container_started_at(pod, container["name"], (pod.get("status") or {}).get("startTime", when))
    return {"exitCode": exit_code, "reason": reason, "startedAt": started, "finishedAt": when}


def _restart_count(pod: JsonObject, name: str) -> int:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == name:
            return int(status.get("restartCount") or 0)
    return 0


def exit_reason(exit_code: int) -> str:
    return "Completed" if exit_code == 0 else "Error"


def terminated_status(
    pod: JsonObject, exit_code: int, when: str, *, reason: str | None = None, message: str | None = None
) -> JsonObject:
    """The status patch once the containers exited with ``exit_code`` for good: Succeeded on 0, else
    Failed (``reason`` and ``message`` are the pod's, e.g. DeadlineExceeded)."""
    phase = "Succeeded" if exit_code == 0 and reason is None else "Failed"
    condition_reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
    status: JsonObject = {
        "phase": phase,
        "conditions": [
            _condition("Ready", "False", when, condition_reason),
            _condition("ContainersReady", "False", when, condition_reason),
        ],
        "containerStatuses": [
            _container_status(
                pod,
                container,
                {"terminated": _terminated(pod, container, exit_code, exit_reason(exit_code), when)},
                restarts=_restart_count(pod, container["name"]),
            )
            for container in _containers(pod)
        ],
    }
    if reason is not None:
        status["reason"] = reason
        status["message"] = message or ""
    return {"status": status}


def restarted_status(pod: JsonObject, exit_code: int, when: str) -> JsonObject:
    """The status patch once the containers exited with ``exit_code`` and were started again
    (``restartPolicy`` Always, or OnFailure and a non-zero code): the phase stays Running."""
    return {
        "status": {
            "containerStatuses": [
                _container_status(
                    pod,
                    container,
                    {"running": {"startedAt": when}},
                    restarts=_restart_count(pod, container["name"]) + 1,
                    last_state={
                        "terminated": _terminated(pod, container, exit_code, exit_reason(exit_code), when)
                    },
                )
                for container in _containers(pod)
            ]
        }
    }


def ready_status(pod: JsonObject, when: str) -> JsonObject:
    """The Ready conditions a kubelet reports again for its running pod (after its node was lost)."""
    return {
        "status": {
            "conditions": [_condition("Ready", "True", when), _condition("ContainersReady", "True", when)]
        }
    }


def healthy_node_conditions(when: str) -> list[JsonObject]:
    """The conditions a kubelet posts for a healthy node."""

    def condition(kind: str, status: str, reason: str, message: str) -> JsonObject:
        return {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastHeartbeatTime": when,
            "lastTransitionTime": when,
        }

    return [
        condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory"),
        condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID"),
        condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
    ]


# How messages name the claim the scheduler made for the pod's DRA-backed extended resources.
EXTENDED_RESOURCES_CLAIM = "for extended resources"


def pod_claim_names(pod: JsonObject) -> list[tuple[str, str | None]]:
    """(pod claim name, ResourceClaim name or None while a template's claim is not recorded yet).

    Like the kubelet's DRA manager (gate DRAExtendedResource, on in 1.36), the claim that
    ``status.extendedResourceClaimStatus`` names is prepared like the pod's own claims."""
    status = pod.get("status") or {}
    recorded = {
        claim_status.get("name"): claim_status.get("resourceClaimName")
        for claim_status in status.get("resourceClaimStatuses") or []
    }
    names: list[tuple[str, str | None]] = []
    for pod_claim in pod.get("spec", {}).get("resourceClaims") or []:
        name = str(pod_claim.get("name", ""))
        if pod_claim.get("resourceClaimName"):
            names.append((name, str(pod_claim["resourceClaimName"])))
        else:
            names.append((name, recorded.get(name)))
    extended_claim = (status.get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    if extended_claim:
        names.append((EXTENDED_RESOURCES_CLAIM, str(extended_claim)))
    return names


def pod_claim_keys(pod: JsonObject) -> list[str]:
    """``namespace/name`` of the ResourceClaims the pod names (a template's once its status records it)."""
    namespace = pod["metadata"].get("namespace")
    return [f"{namespace}/{claim_name}" for _, claim_name in pod_claim_names(pod) if claim_name]


def unprepared_claim(pod: JsonObject, claims: dict[str, JsonObject]) -> str | None:
    """Why the kubelet cannot prepare ``pod``'s claims on its node yet, or None when it can.

    ``claims`` maps ``namespace/name`` to ResourceClaims as the API shows them.
    """
    namespace = pod["metadata"].get("namespace")
    uid = pod["metadata"].get("uid")
    node_name = pod.get("spec", {}).get("nodeName")
    for pod_claim, claim_name in pod_claim_names(pod):
        if claim_name is None:
            return f"claim {pod_claim}: no ResourceClaim recorded for the template yet"
        claim = claims.get(f"{namespace}/{claim_name}")
        if claim is None:
            return f"claim {pod_claim}: ResourceClaim {claim_name} not found"
        status = claim.get("status") or {}
        allocation = status.get("allocation")
        if not allocation:
            return f"claim {pod_claim}: ResourceClaim {claim_name} is not allocated"
        if not any(entry.get("uid") == uid for entry in status.get("reservedFor") or []):
            return f"claim {pod_claim}: ResourceClaim {claim_name} is not reserved for the pod"
        for result in (allocation.get("devices") or {}).get("results") or []:
            if result.get("driver") == DRIVER_NAME and result.get("pool") != node_name:
                return (
                    f"claim {pod_claim}: device {result.get('pool')}/{result.get('device')} of "
                    f"ResourceClaim {claim_name} is not on node {node_name}"
                )
    return None


def unbound_volume_claims(pod: JsonObject, pvcs: dict[str, JsonObject]) -> list[str]:
    """The pod's PersistentVolumeClaims that are missing or not Bound to a volume yet."""
    namespace = pod["metadata"].get("namespace")
    unbound = []
    for name in pod_pvc_names(pod):
        claim = pvcs.get(f"{namespace}/{name}")
        if (
            claim is None
            or (claim.get("status") or {}).get("phase") != "Bound"
            or not (claim.get("spec") or {}).get("volumeName")
        ):
            unbound.append(name)
    return unbound


def failed_mount_event(pod: JsonObject, node_name: str, unbound: list[str], when: str) -> JsonObject:
    message = f"Unable to attach or mount volumes: unbound PersistentVolumeClaims: {', '.join(unbound)}"
    return pod_warning_event(pod, "FailedMount", message, {"component": "kubelet", "host": node_name}, when)


@dataclasses.dataclass
class PodRuntime:
    """What the simulated container runtime knows of a started pod (monotonic clock readings)."""

    uid: str
    workload: Workload
    started: float  # status.startTime
    containers_started: float  # the containers' last (re)start


class Kubelets:
    """The kubelets of ``node_names``: start, finish and remove the pods bound to them."""

    def __init__(
        self,
        http: KubeHttp,
        pods: Informer,
        claims: Informer,
        node_names: Sequence[str],
        node_pod_cidrs: Sequence[str],
        node_ips: Sequence[str],
        *,
        start_delay: float = 0.1,
        delete_delay: float | None = 0.1,
        run_seconds: float | None = None,
        workers: int = 32,
        pvcs: Informer | None = None,
        nodes: Informer | None = None,
    ) -> None:
        self.http = http
        self.pods = pods
        self.claims = claims
        self.pvcs = pvcs
        self.start_delay = start_delay
        self.delete_delay = delete_delay
        self.run_seconds = run_seconds
        self._node_ips = dict(zip(node_names, node_ips, strict=True))
        self._pod_networks = {
            node: ipaddress.ip_network(cidr) for node, cidr in zip(node_names, node_pod_cidrs, strict=True)
        }
        self._next_host: dict[str, int] = {}
        self._scheduled: dict[str, float] = {}  # action:pod key -> monotonic time of its planned visit
        self._removal_due: dict[str, float] = {}  # pod key -> monotonic time its containers are gone
        self._runtimes: dict[str, PodRuntime] = {}  # pod key -> its started containers
        self._lost: dict[str, float] = {}  # lost node -> monotonic time its kubelet last reported
        # lost through the API (the lost annotation, or the Node deleted): the API brings them back
        self._lost_through_api: set[str] = set()
        self._restoring: set[asyncio.Task[None]] = set()
        # claim key -> keys of pods that could not start until it changes
        self._waiting_for_claim: dict[str, set[str]] = {}
        # PersistentVolumeClaim key -> keys of pods waiting for it to be bound
        self._waiting_for_pvc: dict[str, set[str]] = {}
        self._mount_reported: set[str] = set()  # pod uids given their FailedMount event
        self._workload_reported: set[str] = set()  # pod uids given their InvalidSimulatedWorkload event
        self._queue = WorkQueue(self._sync, workers=workers, name="kubelet")
        pods.add_handler(self._on_pod_event)
        claims.add_handler(self._on_claim_event)
        if pvcs is not None:
            pvcs.add_handler(self._on_pvc_event)
        if nodes is not None:
            nodes.add_handler(self._on_node_event)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        for task in list(self._restoring):
            task.cancel()
        await self._queue.stop()

    # ------------------------------------------------------------ node loss

    def last_heard(self, node_name: str) -> float | None:
        """When the node's kubelet last reported (monotonic; now while it reports), None if not ours."""
        if node_name not in self._node_ips:
            return None
        return self._lost.get(node_name, time.monotonic())

    def lose(self, node_name: str) -> None:
        """The node's kubelet stops reporting and acting (a partition: its containers keep running)."""
        self._check_node(node_name)
        self._lost.setdefault(node_name, time.monotonic())

    async def restore(self, node_name: str) -> None:
        """The node's kubelet reports again: its node status, then its pods."""
        self._check_node(node_name)
        if self._lost.pop(node_name, None) is None:
            return
        patch = {"status": {"conditions": healthy_node_conditions(now_rfc3339())}}
        await self.http.patch(f"/api/v1/nodes/{node_name}/status", patch, STRATEGIC_MERGE_PATCH)
        for key, pod in list(self.pods.cache.items()):
            if (pod.get("spec") or {}).get("nodeName") != node_name:
                continue
            self._removal_due.pop(key, None)  # planned while lost: plan it again from now
            self._after(key, "ready", 0)
            self._on_pod_event("MODIFIED", pod)

    def _on_node_event(self, event_type: str, node: JsonObject) -> None:
        name = node["metadata"]["name"]
        if name not in self._node_ips:
            return
        annotations = node["metadata"].get("annotations") or {}
        if event_type == "DELETED" or annotations.get(LOST_ANNOTATION) == "true":
            if name not in self._lost:
                self._lost_through_api.add(name)
                self.lose(name)
        elif name in self._lost_through_api:
            self._lost_through_api.discard(name)
            task = asyncio.create_task(self._restore_reporting(name), name=f"sim-kubelet-restore-{name}")
            self._restoring.add(task)
            task.add_done_callback(self._restoring.discard)

    async def _restore_reporting(self, node_name: str) -> None:
        try:
            await self.restore(node_name)
        except ApiError as exc:
            log.warning("a restored node's kubelet could not report", node=node_name, status=exc.status)

    def _check_node(self, node_name: str) -> None:
        if node_name not in self._node_ips:
            raise ValueError(f"{node_name!r} is not a simulated node")

    # ------------------------------------------------------------ events

    def _allocate_pod_ip(self, node_name: str) -> str:
        network = self._pod_networks[node_name]
        host = self._next_host.get(node_name, 0)
        self._next_host[node_name] = host + 1
        # Skip the network address; wrap around within the node's CIDR.
        return str(network[1 + host % (network.num_addresses - 2)])

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        key = f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}"
        if event_type == "DELETED":
            self._removal_due.pop(key, None)
            self._runtimes.pop(key, None)
            uid = pod["metadata"].get("uid", "")
            self._mount_reported.discard(uid)
            self._workload_reported.discard(uid)
            return
        node_name = pod.get("spec", {}).get("nodeName")
        if node_name not in self._node_ips or node_name in self._lost:
            return
        phase = pod.get("status", {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(key, float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        elif phase == "Pending":
            self._after(key, "start", self.start_delay)
        elif phase == "Running":
            self._plan_running(key, pod)

    def _plan_running(self, key: str, pod: JsonObject) -> None:
        """Plan the visits that end a Running pod's containers: their exit, the pod's deadline."""
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        runtime = self._runtime(key, pod)
        now = time.monotonic()
        if runtime.workload.run_seconds is not None:
            self._after(key, "exit", runtime.containers_started + runtime.workload.run_seconds - now)
        if isinstance(deadline, int):
            self._after(key, "deadline", runtime.started + deadline - now)

    def _runtime(self, key: str, pod: JsonObject) -> PodRuntime:
        """The pod's runtime record; rebuilt from its status if this kubelet did not start it."""
        uid = pod["metadata"].get("uid", "")
        runtime = self._runtimes.get(key)
        if runtime is None or runtime.uid != uid:
            now = time.monotonic()
            status = pod.get("status") or {}
            started = monotonic_of(status.get("startTime"), now)
            running = [
                monotonic_of(((cs.get("state") or {}).get("running") or {}).get("startedAt"), started)
                for cs in status.get("containerStatuses") or []
            ]
            workload, _ = parse_workload(pod, self.run_seconds)
            runtime = PodRuntime(uid, workload, started, max(running, default=started))
            self._runtimes[key] = runtime
        return runtime

    def _terminate(self, key: str, grace: float) -> None:
        """Plan the removal of a terminating pod; a later, shorter grace period brings it forward."""
        delay = grace if self.delete_delay is None else min(grace, self.delete_delay)
        due = time.monotonic() + delay
        if due >= self._removal_due.get(key, float("inf")):
            return
        self._removal_due[key] = due
        self._queue.add_after(f"delete@{due}:{key}", delay)

    def _on_claim_event(self, event_type: str, claim: JsonObject) -> None:
        metadata = claim.get("metadata") or {}
        for pod_key in self._waiting_for_claim.pop(f"{metadata.get('namespace')}/{metadata.get('name')}", ()):
            self._after(pod_key, "start", 0)

    def _on_pvc_event(self, event_type: str, claim: JsonObject) -> None:
        metadata = claim.get("metadata") or {}
        for pod_key in self._waiting_for_pvc.pop(f"{metadata.get('namespace')}/{metadata.get('name')}", ()):
            self._after(pod_key, "start", 0)

    async def _volumes_unbound(self, pod: JsonObject, key: str, node_name: str) -> bool:
        """Whether the pod must wait for its PersistentVolumeClaims (said once with an event)."""
        if self.pvcs is None:
            return False
        unbound = unbound_volume_claims(pod, self.pvcs.cache)
        if not unbound:
            return False
        namespace = pod["metadata"]["namespace"]
        for name in unbound:
            self._waiting_for_pvc.setdefault(f"{namespace}/{name}", set()).add(key)
        uid = pod["metadata"].get("uid", "")
        if uid not in self._mount_reported:
            self._mount_reported.add(uid)
            event = failed_mount_event(pod, node_name, unbound, now_rfc3339())
            await self.http.create(f"/api/v1/namespaces/{namespace}/events", event)
        return True

    def _after(self, key: str, action: str, delay: float) -> None:
        """Plan one visit of ``key`` per action (an earlier one replaces a later one); the visit
        re-reads the pod from the cache."""
        token = f"{action}:{key}"
        delay = max(delay, 0.0)
        due = time.monotonic() + delay
        if self._scheduled.get(token, float("inf")) <= due:
            return
        self._scheduled[token] = due
        self._queue.add_after(token, delay)

    # ------------------------------------------------------------ visits

    async def _sync(self, token: str) -> None:
        action, _, key = token.partition(":")
        self._scheduled.pop(token, None)
        pod = self.pods.cache.get(key)
        if pod is None:
            return
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node_name = pod.get("spec", {}).get("nodeName", "")
        if node_name in self._lost:
            return  # restore() plans every visit of the node's pods again
        phase = pod.get("status", {}).get("phase")
        try:
            if pod["metadata"].get("deletionTimestamp"):
                if not action.startswith("delete@") or time.monotonic() + 0.001 < self._removal_due.get(
                    key, 0.0
                ):
                    return  # still stopping: the planned visit removes it
                await self.http.delete(
                    pod_path(namespace, name),
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "gracePeriodSeconds": 0,
                        "preconditions": {"uid": pod["metadata"]["uid"]},
                    },
                )
            elif action == "start" and phase == "Pending":
                await self._start(key, pod, node_name)
            elif phase != "Running":
                return
            elif action == "exit":
                await self._exit(key, pod)
            elif action == "deadline":
                await self._deadline(key, pod)
            elif action == "ready" and not _condition_true(pod, "Ready") and not self._ending(key, pod):
                await self._patch_status(pod, ready_status(pod, now_rfc3339()))
        except ApiError as exc:
            # Gone in the meantime: nothing left to do. Anything else (a 409 included: the pod was
            # replaced, or the write raced) is retried by the work queue against the fresh cache.
            if exc.status != 404:
                raise

    def _ending(self, key: str, pod: JsonObject) -> bool:
        """Whether the containers' exit or the pod's deadline is due: that visit writes its status."""
        runtime = self._runtime(key, pod)
        now = time.monotonic()
        run_seconds = runtime.workload.run_seconds
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        return (run_seconds is not None and runtime.containers_started + run_seconds <= now) or (
            isinstance(deadline, int) and runtime.started + deadline <= now
        )

    async def _patch_status(self, pod: JsonObject, patch: JsonObject) -> None:
        path = pod_path(pod["metadata"]["namespace"], pod["metadata"]["name"]) + "/status"
        await self.http.patch(path, patch, STRATEGIC_MERGE_PATCH)

    async def _start(self, key: str, pod: JsonObject, node_name: str) -> None:
        if unprepared_claim(pod, self.claims.cache) is not None:
            # Checked again when a claim changes; a template's claim being recorded in the
            # pod's status is a pod event, which schedules a visit by itself.
            for claim_key in pod_claim_keys(pod):
                self._waiting_for_claim.setdefault(claim_key, set()).add(key)
            return
        if await self._volumes_unbound(pod, key, node_name):
            return
        workload, problems = parse_workload(pod, self.run_seconds)
        uid = pod["metadata"].get("uid", "")
        if problems and uid not in self._workload_reported:
            self._workload_reported.add(uid)
            source = {"component": "kubelet", "host": node_name}
            event = pod_warning_event(pod, INVALID_REASON, "; ".join(problems), source, now_rfc3339())
            await self.http.create(events_path(pod), event)
        now = time.monotonic()
        # Recorded before the write: its watch event may come before the answer.
        self._runtimes[key] = PodRuntime(uid, workload, now, now)
        patch = running_status(
            pod, self._allocate_pod_ip(node_name), self._node_ips[node_name], now_rfc3339()
        )
        try:
            await self._patch_status(pod, patch)
        except BaseException:
            self._runtimes.pop(key, None)
            raise

    async def _exit(self, key: str, pod: JsonObject) -> None:
        runtime = self._runtime(key, pod)
        run_seconds = runtime.workload.run_seconds
        if run_seconds is None:
            return
        remaining = runtime.containers_started + run_seconds - time.monotonic()
        if remaining > 0.001:
            self._after(key, "exit", remaining)
            return
        exit_code = runtime.workload.exit_code
        policy = (pod.get("spec") or {}).get("restartPolicy") or "Always"
        when = now_rfc3339()
        if policy == "Always" or (policy == "OnFailure" and exit_code != 0):
            previous = runtime.containers_started
            runtime.containers_started = time.monotonic()
            try:
                await self._patch_status(pod, restarted_status(pod, exit_code, when))
            except BaseException:
                runtime.containers_started = previous
                raise
        else:
            await self._patch_status(pod, terminated_status(pod, exit_code, when))

    async def _deadline(self, key: str, pod: JsonObject) -> None:
        deadline = (pod.get("spec") or {}).get("activeDeadlineSeconds")
        if not isinstance(deadline, int):
            return
        remaining = self._runtime(key, pod).started + deadline - time.monotonic()
        if remaining > 0.001:
            self._after(key, "deadline", remaining)
            return
        when = now_rfc3339()
        patch = terminated_status(
            pod, KILLED_EXIT_CODE, when, reason=DEADLINE_REASON, message=DEADLINE_MESSAGE
        )
        await self._patch_status(pod, patch)
        source = {"component": "kubelet", "host": pod["spec"].get("nodeName", "")}
        event = object_event(
            {"kind": "Pod", **pod}, "Normal", DEADLINE_REASON, DEADLINE_MESSAGE, source, when
        )
        await self.http.create(events_path(pod), event)


def _condition_true(pod: JsonObject, condition_type: str) -> bool:
    return any(
        c.get("type") == condition_type and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )
