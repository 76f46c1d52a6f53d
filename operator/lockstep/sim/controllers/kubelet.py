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
- With ``run_seconds`` set, a Running pod is marked Succeeded that long after it started.
"""

from __future__ import annotations

import datetime
import ipaddress
import time
from collections.abc import Sequence

import structlog

from lockstep.sim.controllers import pod_warning_event
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

log = structlog.get_logger("lockstep.sim.controllers.kubelet")


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods/{name}"


def _condition(condition_type: str, status: str, when: str, reason: str | None = None) -> JsonObject:
    condition: JsonObject = {"type": condition_type, "status": status, "lastTransitionTime": when}
    if reason:
        condition["reason"] = reason
    return condition


def running_status(pod: JsonObject, pod_ip: str, host_ip: str, when: str) -> JsonObject:
    """The status patch a kubelet writes once all containers of ``pod`` started."""
    uid = pod["metadata"].get("uid", "")
    containers = pod.get("spec", {}).get("containers") or []
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
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": f"sim://{container.get('image', '')}",
                    "containerID": f"sim://{uid}/{container['name']}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": when}},
                }
                for container in containers
            ],
        }
    }


def succeeded_status(pod: JsonObject, when: str) -> JsonObject:
    """The status patch once every container exited 0 (restartPolicy is not consulted)."""
    uid = pod["metadata"].get("uid", "")
    started = pod.get("status", {}).get("startTime", when)
    containers = pod.get("spec", {}).get("containers") or []
    return {
        "status": {
            "phase": "Succeeded",
            "conditions": [
                _condition("Ready", "False", when, "PodCompleted"),
                _condition("ContainersReady", "False", when, "PodCompleted"),
            ],
            "containerStatuses": [
                {
                    "name": container["name"],
                    "image": container.get("image", ""),
                    "imageID": f"sim://{container.get('image', '')}",
                    "containerID": f"sim://{uid}/{container['name']}",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": started,
                            "finishedAt": when,
                        }
                    },
                }
                for container in containers
            ],
        }
    }


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
        self._scheduled: set[str] = set()
        self._removal_due: dict[str, float] = {}  # pod key -> monotonic time its containers are gone
        # claim key -> keys of pods that could not start until it changes
        self._waiting_for_claim: dict[str, set[str]] = {}
        # PersistentVolumeClaim key -> keys of pods waiting for it to be bound
        self._waiting_for_pvc: dict[str, set[str]] = {}
        self._mount_reported: set[str] = set()  # pod uids given their FailedMount event
        self._queue = WorkQueue(self._sync, workers=workers, name="kubelet")
        pods.add_handler(self._on_pod_event)
        claims.add_handler(self._on_claim_event)
        if pvcs is not None:
            pvcs.add_handler(self._on_pvc_event)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

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
            self._mount_reported.discard(pod["metadata"].get("uid", ""))
            return
        node_name = pod.get("spec", {}).get("nodeName")
        if node_name not in self._node_ips:
            return
        phase = pod.get("status", {}).get("phase")
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(key, float(pod["metadata"].get("deletionGracePeriodSeconds") or 0))
        elif phase == "Pending":
            self._after(key, "start", self.start_delay)
        elif phase == "Running" and self.run_seconds is not None:
            self._after(key, "finish", self.run_seconds)

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
        """Schedule one visit of ``key`` per action; the visit re-reads the pod from the cache."""
        token = f"{action}:{key}"
        if token in self._scheduled:
            return
        self._scheduled.add(token)
        self._queue.add_after(token, delay)

    async def _sync(self, token: str) -> None:
        action, _, key = token.partition(":")
        self._scheduled.discard(token)
        pod = self.pods.cache.get(key)
        if pod is None:
            return
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node_name = pod.get("spec", {}).get("nodeName", "")
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
                if unprepared_claim(pod, self.claims.cache) is not None:
                    # Checked again when a claim changes; a template's claim being recorded in the
                    # pod's status is a pod event, which schedules a visit by itself.
                    for claim_key in pod_claim_keys(pod):
                        self._waiting_for_claim.setdefault(claim_key, set()).add(key)
                    return
                if await self._volumes_unbound(pod, key, node_name):
                    return
                patch = running_status(
                    pod, self._allocate_pod_ip(node_name), self._node_ips[node_name], now_rfc3339()
                )
                await self.http.patch(pod_path(namespace, name) + "/status", patch, STRATEGIC_MERGE_PATCH)
            elif action == "finish" and phase == "Running":
                patch = succeeded_status(pod, now_rfc3339())
                await self.http.patch(pod_path(namespace, name) + "/status", patch, STRATEGIC_MERGE_PATCH)
        except ApiError as exc:
            # Gone in the meantime: nothing left to do. Anything else (a 409 included: the pod was
            # replaced, or the write raced) is retried by the work queue against the fresh cache.
            if exc.status != 404:
                raise
