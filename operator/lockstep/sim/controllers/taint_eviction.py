"""Taint-based eviction (kube-controller-manager's ``pkg/controller/tainteviction/taint_eviction.go``).

A pod bound to a node with NoExecute taints is deleted unless its tolerations match them all:

- a taint no toleration matches: at once;
- otherwise after the smallest ``tolerationSeconds`` of the matching tolerations, counted from when
  the controller saw the taint (0 or less: at once; none set: never).

Tolerations match as ``Toleration.ToleratesTaint``: same effect or none, same key or none with
operator Exists, and with operator Equal (the default) the same value. The deletion first sets the pod
condition DisruptionTarget=True (reason ``DeletionByTaintManager``, message "Taint manager: deleting due
to NoExecute taint"), after the pod's other conditions as upstream's ``UpdatePodCondition`` puts it,
records a Normal event ``TaintManagerEviction``, then DELETEs the pod with the default grace period.
A planned deletion is cancelled when the taints go or the pod tolerates them forever. Every pod gets
300 s tolerations for ``node.kubernetes.io/not-ready`` and ``unreachable`` at creation (the
DefaultTolerationSeconds admission in ``registry/core.py``) unless it sets its own.
"""

from __future__ import annotations

import time

import structlog

from lockstep.sim.controllers import events_path, object_event
from lockstep.sim.controllers.kubelet import now_rfc3339, pod_path
from lockstep.sim.watching import (
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Informer,
    JsonObject,
    KubeHttp,
    WorkQueue,
    object_key,
)

log = structlog.get_logger("lockstep.sim.controllers.taint_eviction")

DISRUPTION_REASON = "DeletionByTaintManager"
DISRUPTION_MESSAGE = "Taint manager: deleting due to NoExecute taint"
SOURCE = {"component": "taint-eviction-controller"}


def tolerates(toleration: JsonObject, taint: JsonObject) -> bool:
    if toleration.get("effect") and toleration.get("effect") != taint.get("effect"):
        return False
    operator = toleration.get("operator") or "Equal"
    if toleration.get("key"):
        if toleration.get("key") != taint.get("key"):
            return False
    elif operator != "Exists":
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and (toleration.get("value") or "") == (taint.get("value") or "")


def toleration_seconds(taints: list[JsonObject], tolerations: list[JsonObject]) -> float | None:
    """How long the pod may stay on a node with these NoExecute taints: 0 when one is not tolerated,
    None for ever."""
    used: list[JsonObject] = []
    for taint in taints:
        matching = [t for t in tolerations if isinstance(t, dict) and tolerates(t, taint)]
        if not matching:
            return 0.0
        used.extend(matching)
    seconds = [t["tolerationSeconds"] for t in used if isinstance(t.get("tolerationSeconds"), int)]
    if not seconds:
        return None
    return float(max(min(seconds), 0))


class TaintEvictionController:
    def __init__(self, http: KubeHttp, nodes: Informer, pods: Informer) -> None:
        self.http = http
        self.pods = pods
        self._taints: dict[str, list[JsonObject]] = {}  # node -> its NoExecute taints
        self._due: dict[str, tuple[str, float]] = {}  # pod key -> (uid, monotonic time of its deletion)
        self._queue = WorkQueue(self._evict, workers=4, name="taint-eviction")
        nodes.add_handler(self._on_node_event)
        pods.add_handler(self._on_pod_event)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

    def _on_node_event(self, event_type: str, node: JsonObject) -> None:
        name = node["metadata"]["name"]
        taints = [] if event_type == "DELETED" else no_execute_taints(node)
        if taints == self._taints.get(name, []):
            return
        if taints:
            self._taints[name] = taints
        else:
            self._taints.pop(name, None)
        for key, pod in list(self.pods.cache.items()):
            if (pod.get("spec") or {}).get("nodeName") == name:
                self._process(key, pod, taints)

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        key = object_key(pod)
        if event_type == "DELETED":
            self._due.pop(key, None)
            return
        taints = self._taints.get((pod.get("spec") or {}).get("nodeName") or "")
        if taints or key in self._due:
            self._process(key, pod, taints or [])

    def _process(self, key: str, pod: JsonObject, taints: list[JsonObject]) -> None:
        if not taints:
            self._due.pop(key, None)
            return
        if pod["metadata"].get("deletionTimestamp"):
            return  # being deleted already
        seconds = toleration_seconds(taints, list((pod.get("spec") or {}).get("tolerations") or []))
        if seconds is None:
            self._due.pop(key, None)
            return
        uid = str(pod["metadata"].get("uid", ""))
        planned = self._due.get(key)
        now = time.monotonic()
        # A planned deletion keeps its time, unless a taint the pod does not tolerate makes it now.
        if planned is not None and planned[0] == uid and (seconds > 0 or planned[1] <= now):
            return
        self._due[key] = (uid, now + seconds)
        self._queue.add_after(key, seconds)

    async def _evict(self, key: str) -> None:
        planned = self._due.get(key)
        pod = self.pods.cache.get(key)
        if planned is None or pod is None or pod["metadata"].get("uid") != planned[0]:
            return
        if time.monotonic() + 0.001 < planned[1]:
            return  # an earlier plan's visit: the current one has its own
        meta = pod["metadata"]
        path = pod_path(meta["namespace"], meta["name"])
        when = now_rfc3339()
        condition = {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": DISRUPTION_REASON,
            "message": DISRUPTION_MESSAGE,
            "lastTransitionTime": when,
        }
        try:
            await self.http.patch(path + "/status", condition_patch(pod, condition), STRATEGIC_MERGE_PATCH)
            message = f"Marking for deletion Pod {key}"
            event = object_event(
                {"kind": "Pod", **pod}, "Normal", "TaintManagerEviction", message, SOURCE, when
            )
            await self.http.create(events_path(pod), event)
            await self.http.delete(
                path, {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta["uid"]}}
            )
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or replaced by a pod of the same name
                raise
        self._due.pop(key, None)


def condition_patch(pod: JsonObject, condition: JsonObject) -> JsonObject:
    """The status patch upstream's ``UpdatePodCondition`` + ``PatchPodStatus`` send: the condition
    replaces one of its type in place, else goes after the pod's other conditions (a two-way merge
    patch carries ``$setElementOrder``; without it kube-apiserver would put the new one first)."""
    types = [c.get("type") for c in (pod.get("status") or {}).get("conditions") or []]
    if condition["type"] not in types:
        types.append(condition["type"])
    order = [{"type": kind} for kind in types]
    return {"status": {"$setElementOrder/conditions": order, "conditions": [condition]}}


def no_execute_taints(node: JsonObject) -> list[JsonObject]:
    return [t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"]
