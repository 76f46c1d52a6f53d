"""Status of upstream CompositePodGroups (``scheduling.k8s.io/v1alpha3``): the conditions
kube-scheduler writes on them (KEP-6012, ``staging/src/k8s.io/api/scheduling/v1alpha3/types.go``):

- ``CompositePodGroupInitiallyScheduled``: True/``Scheduled`` when its hierarchy's cycle placed
  ``minGroupCount`` children whole, False/``Unschedulable`` (or ``SchedulerError``) with the reason,
  False/``Invalid`` for a hierarchy kube-scheduler would refuse at runtime (a cycle of parent links,
  too deep). Once True it is terminal: never written back to False.
- ``DisruptionTarget``: True/``PreemptionByScheduler`` when the composite is preempted whole
  (``disruptionMode: all``).

The children's own ``PodGroupInitiallyScheduled`` is written by ``controller/upstream_status.py``
(lockstep's PodGroups: ``controller/status.py``) from their attempts. One strict (resourceVersion)
merge patch of ``/status`` per change; an unchanged condition is not written again.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from lockstep.api.composite_podgroup import (
    CONDITION_DISRUPTION_TARGET,
    CONDITION_INITIALLY_SCHEDULED,
    REASON_INVALID,
    REASON_PREEMPTION_BY_SCHEDULER,
    CompositePodGroup,
)
from lockstep.api.upstream_podgroup import REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE
from lockstep.kube.client import COMPOSITE_POD_GROUPS, ApiError, KubeClient
from lockstep.kube.patching import write_conditions
from lockstep.logging import get_logger
from lockstep.scheduler.framework import Code

log = get_logger("lockstep.controller.composite_status")

MAX_MESSAGE = 32768
Ref = tuple[str, str]
Wanted = tuple[str, str, str]  # (status, reason, message)


def composite_condition(code: Code, message: str, invalid: bool = False) -> Wanted:
    """(status, reason, message) of CompositePodGroupInitiallyScheduled."""
    if code is Code.SUCCESS:
        return "True", REASON_SCHEDULED, message
    if invalid:
        return "False", REASON_INVALID, message
    if code is Code.ERROR:
        return "False", REASON_SCHEDULER_ERROR, message
    return "False", REASON_UNSCHEDULABLE, message


class CompositeStatusWriter:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._composites: dict[Ref, CompositePodGroup] = {}
        self._wanted: dict[Ref, dict[str, Wanted]] = {}  # condition type -> what to write
        self._writing: set[Ref] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def observe(self, ref: Ref, composite: CompositePodGroup | None) -> None:
        if composite is None:
            self._composites.pop(ref, None)
            self._wanted.pop(ref, None)
        else:
            self._composites[ref] = composite

    def want(self, ref: Ref, code: Code, message: str, invalid: bool = False) -> None:
        self._want(
            ref, CONDITION_INITIALLY_SCHEDULED, composite_condition(code, message[:MAX_MESSAGE], invalid)
        )

    def disrupted(self, ref: Ref, message: str) -> None:
        self._want(ref, CONDITION_DISRUPTION_TARGET, ("True", REASON_PREEMPTION_BY_SCHEDULER, message))

    def _want(self, ref: Ref, kind: str, wanted: Wanted) -> None:
        if ref not in self._composites:
            return
        self._wanted.setdefault(ref, {})[kind] = wanted
        if ref in self._writing:
            return  # the running writer picks the newest wish up
        self._writing.add(ref)
        task = asyncio.get_running_loop().create_task(self._write(ref))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    @staticmethod
    def _to_write(composite: CompositePodGroup, kind: str, wanted: Wanted) -> dict[str, Any] | None:
        status, reason, message = wanted
        current = next((c for c in composite.status.conditions if c.type == kind), None)
        if current is not None:
            if kind == CONDITION_INITIALLY_SCHEDULED and current.status == "True" and status != "True":
                return None  # terminal once True
            if (current.status, current.reason, current.message) == wanted:
                return None
        moment = (
            current.last_transition_time
            if current is not None and current.status == status
            else datetime.now(UTC)
        )
        return {
            "type": kind,
            "status": status,
            "observedGeneration": composite.metadata.generation,
            "lastTransitionTime": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": reason,
            "message": message,
        }

    async def _write(self, ref: Ref, attempts: int = 5) -> None:
        try:
            for _ in range(attempts):
                composite = self._composites.get(ref)
                wanted = self._wanted.get(ref) or {}
                if composite is None:
                    return
                written_now = [
                    condition
                    for kind, want in wanted.items()
                    if (condition := self._to_write(composite, kind, want)) is not None
                ]
                if not written_now:
                    return
                meta = composite.metadata
                try:
                    # rbac: patch compositepodgroups.scheduling.k8s.io/status
                    # rbac: get compositepodgroups.scheduling.k8s.io
                    written = await write_conditions(
                        self.client,
                        COMPOSITE_POD_GROUPS,
                        meta.namespace,
                        meta.name,
                        meta.resource_version,
                        composite.status.conditions,
                        written_now,
                    )
                except ApiError as exc:
                    where = "/".join(ref)
                    log.warning("compositepodgroup status write failed", composite=where, error=str(exc))
                    return
                if written is None:
                    return
                if ref in self._composites:
                    self._composites[ref] = CompositePodGroup.model_validate(written)
        finally:
            self._writing.discard(ref)
