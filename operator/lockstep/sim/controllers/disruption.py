"""The disruption controller of kube-controller-manager: keeps each PodDisruptionBudget's status.

For every PDB it counts the pods its selector matches in its namespace and writes
``status.expectedPods``, ``currentHealthy`` (Ready, not terminating, not just evicted),
``desiredHealthy`` (``minAvailable``, or expected less ``maxUnavailable``; percentages rounded up),
``disruptionsAllowed`` (healthy beyond desired), ``observedGeneration`` and the
``DisruptionAllowed`` condition, as upstream ``pkg/controller/disruption`` does. Entries of
``status.disruptedPods`` (written by the eviction subresource) are dropped once their pod is
terminating or gone. The simulation has no workload controllers, so the expected count is always
the number of matching pods (upstream reads the owners' scale for percentages and maxUnavailable).
"""

from __future__ import annotations

from collections.abc import Iterable

import structlog

from lockstep.sim.controllers.kubelet import now_rfc3339
from lockstep.sim.registry.policy import pod_is_ready, scaled_value, selector_matches
from lockstep.sim.watching import MERGE_PATCH, ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key

log = structlog.get_logger("lockstep.sim.controllers.disruption")


def budget_status(budget: JsonObject, pods: Iterable[JsonObject]) -> JsonObject:
    """The status the controller writes for ``budget`` given every pod of the cluster."""
    meta = budget["metadata"]
    spec = budget.get("spec") or {}
    old = budget.get("status") or {}
    matching = [
        p
        for p in pods
        if p["metadata"].get("namespace") == meta.get("namespace")
        and selector_matches(spec.get("selector"), p["metadata"].get("labels") or {})
        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
    live = {p["metadata"]["name"] for p in matching if not p["metadata"].get("deletionTimestamp")}
    disrupted = {name: at for name, at in (old.get("disruptedPods") or {}).items() if name in live}
    healthy = sum(1 for p in matching if p["metadata"]["name"] in live - disrupted.keys() and pod_is_ready(p))
    expected = len(matching)
    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled_value(spec["maxUnavailable"], expected))
    else:
        desired = scaled_value(spec.get("minAvailable", 0), expected)
    allowed = max(0, healthy - desired)
    generation = int(meta.get("generation") or 1)
    condition_status, reason = ("True", "SufficientPods") if allowed > 0 else ("False", "InsufficientPods")
    previous = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    since = (
        previous["lastTransitionTime"]
        if previous is not None and previous.get("status") == condition_status
        else now_rfc3339()
    )
    status: JsonObject = {
        "observedGeneration": generation,
        "disruptionsAllowed": allowed,
        "currentHealthy": healthy,
        "desiredHealthy": desired,
        "expectedPods": expected,
        "conditions": [
            {
                "type": "DisruptionAllowed",
                "status": condition_status,
                "observedGeneration": generation,
                "lastTransitionTime": since,
                "reason": reason,
                "message": "",
            }
        ],
    }
    if disrupted:
        status["disruptedPods"] = disrupted
    return status


class DisruptionController:
    """Recomputes a namespace's PDBs when one of its pods or PDBs changes."""

    def __init__(self, http: KubeHttp, pods: Informer, budgets: Informer) -> None:
        self.http = http
        self.pods = pods
        self.budgets = budgets
        self._queue = WorkQueue(self._sync, workers=2, name="disruption")
        pods.add_handler(self._on_pod_event)
        budgets.add_handler(self._on_budget_event)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        # every budget of the namespace: the pod's labels may just have stopped matching one
        namespace = pod["metadata"].get("namespace")
        for key, budget in list(self.budgets.cache.items()):
            if budget["metadata"].get("namespace") == namespace:
                self._queue.add(key)

    def _on_budget_event(self, event_type: str, budget: JsonObject) -> None:
        if event_type != "DELETED":
            self._queue.add(object_key(budget))

    async def _sync(self, key: str) -> None:
        budget = self.budgets.cache.get(key)
        if budget is None:
            return
        status = budget_status(budget, self.pods.cache.values())
        if status == budget.get("status"):
            return
        namespace, name = budget["metadata"]["namespace"], budget["metadata"]["name"]
        patch = dict(status)
        confirmed = set((budget.get("status") or {}).get("disruptedPods") or {}) - set(
            status.get("disruptedPods") or {}
        )
        if confirmed:  # a merge patch removes map entries by setting them to null
            patch["disruptedPods"] = {**dict.fromkeys(confirmed), **(status.get("disruptedPods") or {})}
        body = {"metadata": {"resourceVersion": budget["metadata"]["resourceVersion"]}, "status": patch}
        try:
            await self.http.patch(
                f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}/status",
                body,
                MERGE_PATCH,
            )
        except ApiError as exc:
            if exc.status == 409:  # a newer version is on its way through the watch
                return
            if exc.status != 404:
                raise
