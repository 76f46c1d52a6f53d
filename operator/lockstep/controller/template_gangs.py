"""Gangs from pod templates: pods labelled ``scheduling.lockstep.dev/pod-group: NAME`` and annotated
``scheduling.lockstep.dev/min-count: "N"`` whose PodGroup does not exist get one, created by lockstep:
a gang of minCount N in the pods' namespace, owned by the pods' controller (the Job, JobSet, ... of
the first pod's controller ownerReference), so the garbage collector deletes it with them; pods
without a controller get a PodGroup without an owner.

Gangs from owners come the same way: a pod without the annotation asks for the minCount its owner's
spec gives (``infer``, see ``lockstep.controller.owner_gangs``), the PodGroup is owned by that owner
(a JobSet, not its child Job) and follows its spec up and down.

Members that disagree on N are reported on the PodGroup (a ``ConflictingMinCount`` event, once the
PodGroup shows the N it uses) and the lowest N is used: a PodGroup lockstep created is lowered to
it. Pods held by scheduling gates count only once ungated, as for scheduling. Only the leader writes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep import GROUP, VERSION
from lockstep.kube.client import POD_GROUPS, ApiError, KubeClient, PatchType
from lockstep.kube.events import WARNING, EventRecorder, ObjectReference
from lockstep.logging import get_logger

log = get_logger("lockstep.controller.template_gangs")

MIN_COUNT_ANNOTATION = f"{GROUP}/min-count"
# marks a PodGroup lockstep created from its pods' template lines: only those are kept in step
CREATED_FROM_PODS_ANNOTATION = f"{GROUP}/created-from-pods"
MAX_MIN_COUNT = 10000


@dataclass(frozen=True, slots=True)
class Ask:
    """What one pod asks of its PodGroup."""

    min_count: int
    owner: dict[str, Any] | None  # the PodGroup's ownerReference
    from_owner: bool = False  # inferred from the owner's spec: the PodGroup follows it up and down


# the minCount a pod without the annotation asks for, from its owner; or the problem; or None
Infer = Callable[[dict[str, Any], str], Ask | str | None]


def requested_min_count(pod: dict[str, Any]) -> int | str | None:
    """The pod's min-count annotation: an int, None when absent, or why the value is unusable."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(MIN_COUNT_ANNOTATION)
    if value is None:
        return None
    text = str(value).strip()
    if not text.isdigit() or not 1 <= int(text) <= MAX_MIN_COUNT:
        return (
            f"annotation {MIN_COUNT_ANNOTATION}: {value!r} is not a whole number "
            f"between 1 and {MAX_MIN_COUNT}"
        )
    return int(text)


def controller_reference(pod: dict[str, Any]) -> dict[str, Any] | None:
    """The pod's controller as an ownerReference for its PodGroup (not itself a controller)."""
    for owner in (pod.get("metadata") or {}).get("ownerReferences") or []:
        if owner.get("controller"):
            return {key: owner[key] for key in ("apiVersion", "kind", "name", "uid") if key in owner}
    return None


def podgroup_for(namespace: str, name: str, min_count: int, owner: dict[str, Any] | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "annotations": {CREATED_FROM_PODS_ANNOTATION: "true"},
    }
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


class TemplateGangs:
    """Keeps, per (namespace, group), the min-counts its pods ask for, and creates or lowers the
    PodGroup. ``podgroup_min_count(namespace, name)`` answers (minCount, created by lockstep) of an
    existing lockstep PodGroup, or None."""

    def __init__(
        self,
        client: KubeClient,
        events: EventRecorder,
        podgroup_min_count: Callable[[str, str], tuple[int, bool] | None],
        infer: Infer | None = None,
    ) -> None:
        self.client = client
        self.events = events
        self.podgroup_min_count = podgroup_min_count
        self.infer = infer
        self.leading = False
        # (namespace, group) -> pod name -> its ask
        self._asks: dict[tuple[str, str], dict[str, Ask]] = {}
        self._busy: set[tuple[str, str]] = set()
        self._reported: dict[tuple[str, str], tuple[int, ...]] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def on_pod(self, event_type: str, pod: dict[str, Any], group: str, gated: bool) -> str | None:
        """Record the pod's ask; returns a problem with its annotation, if any."""
        meta = pod.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        key = (namespace, group)
        asks = self._asks.get(key)
        asked: Ask | str | None = None
        if group and event_type != "DELETED":
            annotated = requested_min_count(pod)
            if isinstance(annotated, int):
                asked = Ask(annotated, controller_reference(pod))
            elif annotated is None and self.infer is not None:
                asked = self.infer(pod, group)
            else:
                asked = annotated
        if asked is None or gated or isinstance(asked, str):
            if asks is not None:
                asks.pop(name, None)
                if not asks:
                    del self._asks[key]
            return asked if isinstance(asked, str) else None
        self._asks.setdefault(key, {})[name] = asked
        self.reconcile(key)
        return None

    def reconcile_all(self) -> None:
        for key in list(self._asks):
            self.reconcile(key)

    def reconcile(self, key: tuple[str, str]) -> None:
        asks = self._asks.get(key)
        if not self.leading or not asks or key in self._busy:
            return
        lowest = min(ask.min_count for ask in asks.values())
        # a PodGroup made from owners follows their specs; one made from annotations is only lowered
        follows = all(ask.from_owner for ask in asks.values())
        existing = self.podgroup_min_count(*key)
        if existing is not None and (
            not existing[1] or existing[0] == lowest or (existing[0] < lowest and not follows)
        ):
            self._report_conflict(key, asks, existing[0])
            return
        self._busy.add(key)
        task = asyncio.get_running_loop().create_task(self._write(key, lowest, existing is None))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(lambda _: self._busy.discard(key))

    async def _write(self, key: tuple[str, str], min_count: int, create: bool) -> None:
        namespace, name = key
        asks = self._asks.get(key) or {}
        # the first pod (in arrival order) with a controller decides the owner
        owner = next((ask.owner for ask in asks.values() if ask.owner is not None), None)
        try:
            if create:
                await self.client.create(
                    POD_GROUPS, namespace, podgroup_for(namespace, name, min_count, owner)
                )
                log.info(
                    "podgroup created from pod template lines",
                    podgroup=f"{namespace}/{name}",
                    min_count=min_count,
                    owner=(owner or {}).get("kind"),
                )
            else:
                await self.client.patch(
                    POD_GROUPS,
                    namespace,
                    name,
                    {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}},
                    PatchType.MERGE,
                )
        except ApiError as exc:
            if not (exc.conflict or exc.not_found):
                log.warning(
                    "podgroup from pod template lines", podgroup=f"{namespace}/{name}", error=str(exc)
                )

    def _report_conflict(self, key: tuple[str, str], asks: dict[str, Ask], used: int) -> None:
        counts = tuple(sorted({ask.min_count for ask in asks.values()}))
        if len(counts) < 2 or self._reported.get(key) == counts:
            return
        self._reported[key] = counts
        namespace, name = key
        examples = ", ".join(
            f"{count} (pod {next(pod for pod, ask in asks.items() if ask.min_count == count)})"
            for count in counts
        )
        asked = (
            "minCounts (from their owners' specs)"
            if any(ask.from_owner for ask in asks.values())
            else f"{MIN_COUNT_ANNOTATION} values"
        )
        message = (
            f"pods of PodGroup {namespace}/{name} ask for different {asked}: "
            f"{examples}; minCount {used} is used"
        )
        log.warning("conflicting min-count", podgroup=f"{namespace}/{name}", counts=list(counts), used=used)
        reference = ObjectReference("PodGroup", namespace, name, "", f"{GROUP}/{VERSION}")
        self.events.record(reference, WARNING, "ConflictingMinCount", message)
