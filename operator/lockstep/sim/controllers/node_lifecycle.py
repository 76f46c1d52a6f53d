"""The node lifecycle controller (kube-controller-manager's ``pkg/controller/nodelifecycle/
node_lifecycle_controller.go``), for the simulated nodes.

- Every ``monitor_period`` seconds (``--node-monitor-period``, 5 s) it checks when each simulated
  node's kubelet last reported. One silent for longer than ``grace_period`` (``--node-monitor-grace-period``,
  50 s) gets its Ready, MemoryPressure, DiskPressure and PIDPressure conditions set to Unknown, reason
  ``NodeStatusUnknown``, message "Kubelet stopped posting node status." (``tryUpdateNodeHealth``); on
  that transition the pods bound to it get Ready=False (``MarkPodsNotReady``) and the node a Normal
  event ``NodeNotReady``.
- From the Ready condition it keeps the node's taints (``doNoScheduleTaintingPass``,
  ``doNoExecuteTaintingPass``, ``markNodeAsReachable``): Unknown is ``node.kubernetes.io/unreachable``,
  False is ``node.kubernetes.io/not-ready``, each with effect NoSchedule and NoExecute (the NoExecute
  one with ``timeAdded``); True removes them. Other taints are kept.

The health signal is the simulated kubelet's in-process report (``Kubelets.last_heard``), not node
Leases: thousands of simulated nodes renewing a Lease every 10 s would load the emulator for nothing.
Nodes without a simulated kubelet (created by a test) are not monitored. Upstream's rate limit on
NoExecute tainting (``--node-eviction-rate``, zone disruption states) is not simulated: every lost node
is tainted at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from lockstep.sim.controllers import events_path, object_event
from lockstep.sim.controllers.kubelet import now_rfc3339
from lockstep.sim.watching import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Informer,
    JsonObject,
    KubeHttp,
    WorkQueue,
)

log = structlog.get_logger("lockstep.sim.controllers.node_lifecycle")

UNREACHABLE_TAINT = "node.kubernetes.io/unreachable"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
CONTROLLER_TAINTS = (UNREACHABLE_TAINT, NOT_READY_TAINT)
MONITORED_CONDITIONS = ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure")
UNKNOWN_REASON = "NodeStatusUnknown"
UNKNOWN_MESSAGE = "Kubelet stopped posting node status."
SOURCE = {"component": "node-controller"}


def node_condition(node: JsonObject, condition_type: str) -> JsonObject | None:
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == condition_type:
            return dict(condition)
    return None


def ready_status(node: JsonObject) -> str:
    """The node's Ready condition status: True, False or Unknown (no condition is Unknown)."""
    condition = node_condition(node, "Ready")
    return str(condition.get("status")) if condition else "Unknown"


def unknown_conditions(node: JsonObject, when: str) -> list[JsonObject]:
    """The monitored conditions that are not Unknown yet, made Unknown (empty: nothing to write)."""
    changed = []
    for condition_type in MONITORED_CONDITIONS:
        condition = node_condition(node, condition_type)
        if condition is None:
            changed.append(
                {
                    "type": condition_type,
                    "status": "Unknown",
                    "reason": "NodeStatusNeverUpdated",
                    "message": "Kubelet never posted node status.",
                    "lastHeartbeatTime": node["metadata"].get("creationTimestamp"),
                    "lastTransitionTime": when,
                }
            )
        elif condition.get("status") != "Unknown":
            condition.update(
                status="Unknown", reason=UNKNOWN_REASON, message=UNKNOWN_MESSAGE, lastTransitionTime=when
            )
            changed.append(condition)
    return changed


def desired_taints(node: JsonObject, when: str) -> list[JsonObject]:
    """The node's taints as the controller wants them for its Ready condition."""
    status = ready_status(node)
    key = {"Unknown": UNREACHABLE_TAINT, "False": NOT_READY_TAINT}.get(status)
    current = list((node.get("spec") or {}).get("taints") or [])
    kept = [t for t in current if t.get("key") not in CONTROLLER_TAINTS or t.get("key") == key]
    if key is None:
        return kept
    for effect in ("NoSchedule", "NoExecute"):
        if not any(t.get("key") == key and t.get("effect") == effect for t in kept):
            taint: JsonObject = {"key": key, "effect": effect}
            if effect == "NoExecute":
                taint["timeAdded"] = when
            kept.append(taint)
    return kept


class NodeLifecycleController:
    def __init__(
        self,
        http: KubeHttp,
        nodes: Informer,
        pods: Informer,
        last_heard: Callable[[str], float | None],
        *,
        grace_period: float = 50.0,
        monitor_period: float = 5.0,
    ) -> None:
        if grace_period <= 0 or monitor_period <= 0:
            raise ValueError("node monitor grace period and period must be positive")
        self.http = http
        self.nodes = nodes
        self.pods = pods
        self.last_heard = last_heard
        self.grace_period = grace_period
        self.monitor_period = monitor_period
        self._queue = WorkQueue(self._sync, workers=2, name="node-lifecycle")
        self._task: asyncio.Task[None] | None = None
        nodes.add_handler(self._on_node_event)

    def start(self) -> None:
        self._queue.start()
        self._task = asyncio.create_task(self._monitor(), name="sim-node-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._queue.stop()

    def _on_node_event(self, event_type: str, node: JsonObject) -> None:
        if event_type != "DELETED":
            self._queue.add(node["metadata"]["name"])

    def _silent(self, name: str) -> bool:
        heard = self.last_heard(name)
        return heard is not None and time.monotonic() - heard > self.grace_period

    async def _monitor(self) -> None:
        while True:
            await asyncio.sleep(self.monitor_period)
            for name, node in list(self.nodes.cache.items()):
                if self._silent(name) and any(
                    (node_condition(node, kind) or {}).get("status") != "Unknown"
                    for kind in MONITORED_CONDITIONS
                ):
                    self._queue.add(name)

    async def _sync(self, name: str) -> None:
        node = self.nodes.cache.get(name)
        if node is None:
            return
        when = now_rfc3339()
        try:
            if self._silent(name):
                changed = unknown_conditions(node, when)
                if changed:
                    was_ready = ready_status(node) == "True"
                    await self.http.patch(
                        f"/api/v1/nodes/{name}/status",
                        {"status": {"conditions": changed}},
                        STRATEGIC_MERGE_PATCH,
                    )
                    if was_ready:
                        await self._mark_pods_not_ready(name, when)
                        message = f"Node {name} status is now: NodeNotReady"
                        event = object_event(
                            {"kind": "Node", **node}, "Normal", "NodeNotReady", message, SOURCE, when
                        )
                        await self.http.create(events_path(node), event)
                    return  # the status write is a node event: the taints follow from it
            taints = desired_taints(node, when)
            if taints != list((node.get("spec") or {}).get("taints") or []):
                await self.http.patch(
                    f"/api/v1/nodes/{name}",
                    {
                        "metadata": {"resourceVersion": node["metadata"]["resourceVersion"]},
                        "spec": {"taints": taints or None},
                    },
                )
        except ApiError as exc:
            if exc.status != 404:
                raise  # a 409 (stale cache) is retried against the next node event's state

    async def _mark_pods_not_ready(self, node_name: str, when: str) -> None:
        for pod in list(self.pods.cache.values()):
            if (pod.get("spec") or {}).get("nodeName") != node_name:
                continue
            ready = next(
                (c for c in (pod.get("status") or {}).get("conditions") or [] if c.get("type") == "Ready"),
                None,
            )
            if ready is None or ready.get("status") == "False":
                continue
            meta = pod["metadata"]
            patch = {
                "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": when}]}
            }
            with contextlib.suppress(ApiError):  # gone, or changed: upstream skips it as well
                await self.http.patch(
                    f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}/status",
                    patch,
                    STRATEGIC_MERGE_PATCH,
                )
