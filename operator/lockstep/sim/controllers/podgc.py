"""The pod garbage collector (kube-controller-manager's ``pkg/controller/podgc/gc_controller.go``).

Every ``period`` seconds (upstream's ``gcCheckPeriod``, 20 s) it force-deletes (grace period 0), after
setting phase Failed on a pod that is not finished yet:

- ``gcTerminating``: terminating pods on a node that is not Ready and carries the
  ``node.kubernetes.io/out-of-service`` taint (what an operator adds to a node known to be down);
- ``gcOrphaned``: pods bound to a node that no longer exists, once it has been missing for
  ``quarantine`` seconds (upstream's ``quarantineTime``, 40 s) and a GET confirms it, with the condition
  DisruptionTarget=True, reason ``DeletionByPodGC``, message "PodGC: node no longer exists".

A pod whose writes fail is tried again the next period; the others of the pass are collected
meanwhile, as upstream's loops go on after an error.

So a pod deleted on a lost node stays terminating until the node comes back, is tainted out of service,
or is deleted, as on a real cluster. Not simulated: ``gcTerminated`` (finished pods beyond
``--terminated-pod-gc-threshold``, 12,500) and ``gcUnscheduledTerminating`` (the emulator deletes an
unbound pod at once).
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import structlog

from lockstep.sim.controllers.kubelet import now_rfc3339, pod_path
from lockstep.sim.controllers.node_lifecycle import ready_status
from lockstep.sim.watching import STRATEGIC_MERGE_PATCH, ApiError, Informer, JsonObject, KubeHttp

log = structlog.get_logger("lockstep.sim.controllers.podgc")

OUT_OF_SERVICE_TAINT = "node.kubernetes.io/out-of-service"


class PodGarbageCollector:
    def __init__(
        self,
        http: KubeHttp,
        pods: Informer,
        nodes: Informer,
        *,
        period: float = 20.0,
        quarantine: float = 40.0,
    ) -> None:
        if period <= 0 or quarantine < 0:
            raise ValueError("pod GC period must be positive and quarantine not negative")
        self.http = http
        self.pods = pods
        self.nodes = nodes
        self.period = period
        self.quarantine = quarantine
        self._missing_since: dict[
            str, float
        ] = {}  # node name -> when a pod was first seen bound to it missing
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sim-podgc")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            try:
                await self.collect()
            except Exception:
                log.exception("pod garbage collection failed; retrying next period")

    async def collect(self) -> None:
        nodes = self.nodes.cache
        now = time.monotonic()
        terminating: list[JsonObject] = []
        bound_to_missing: dict[str, list[JsonObject]] = {}
        for pod in list(self.pods.cache.values()):
            node_name = (pod.get("spec") or {}).get("nodeName")
            if not node_name:
                continue
            node = nodes.get(node_name)
            if node is None:
                bound_to_missing.setdefault(node_name, []).append(pod)
            elif pod["metadata"].get("deletionTimestamp") and out_of_service(node):
                terminating.append(pod)
        for pod in terminating:
            await self._collect_one(pod, None)
        self._missing_since = {name: self._missing_since.get(name, now) for name in bound_to_missing}
        for name, pods in bound_to_missing.items():
            if now - self._missing_since[name] < self.quarantine or await self._node_exists(name):
                continue
            condition = {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists",
                "lastTransitionTime": now_rfc3339(),
            }
            for pod in pods:
                await self._collect_one(pod, condition)

    async def _collect_one(self, pod: JsonObject, condition: JsonObject | None) -> None:
        """One pod's deletion; a failure is logged and the others go on, as upstream's loop does (the
        next period tries the pod again)."""
        try:
            await self._delete(pod, condition)
        except ApiError as exc:
            log.warning(
                "pod garbage collection of a pod failed; retrying next period",
                pod=f"{pod['metadata'].get('namespace')}/{pod['metadata']['name']}",
                status=exc.status,
            )

    async def _node_exists(self, name: str) -> bool:
        try:
            await self.http.get(f"/api/v1/nodes/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def _delete(self, pod: JsonObject, condition: JsonObject | None) -> None:
        meta = pod["metadata"]
        path = pod_path(meta["namespace"], meta["name"])
        try:
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                status: JsonObject = {"phase": "Failed"}
                if condition is not None:
                    status["conditions"] = [condition]
                await self.http.patch(path + "/status", {"status": status}, STRATEGIC_MERGE_PATCH)
            await self.http.delete(
                path,
                {
                    "apiVersion": "v1",
                    "kind": "DeleteOptions",
                    "gracePeriodSeconds": 0,
                    "preconditions": {"uid": meta["uid"]},
                },
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise


def out_of_service(node: JsonObject) -> bool:
    """Not Ready and tainted ``node.kubernetes.io/out-of-service``: ``gcTerminating`` may force-delete."""
    taints = (node.get("spec") or {}).get("taints") or []
    return ready_status(node) != "True" and any(t.get("key") == OUT_OF_SERVICE_TAINT for t in taints)
