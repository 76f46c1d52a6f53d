"""Status of upstream CompositePodGroups (``scheduling.k8s.io/v1alpha3``): the one condition
kube-scheduler writes on them, ``CompositePodGroupInitiallyScheduled`` (KEP-6012,
``staging/src/k8s.io/api/scheduling/v1alpha3/types.go``): True/``Scheduled`` when its hierarchy's cycle
placed ``minGroupCount`` children whole, False/``Unschedulable`` (or ``SchedulerError``) with the
reason, False/``Invalid`` for a hierarchy kube-scheduler would refuse at runtime (a cycle of parent
links, too deep). Once True it is terminal: never written back to False. The children's own
``PodGroupInitiallyScheduled`` is written by ``controller/upstream_status.py`` (lockstep's PodGroups:
``controller/status.py``) from their attempts.

One strict (resourceVersion) merge patch of ``/status`` per change; an unchanged condition is not
written again.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from lockstep.api.composite_podgroup import CONDITION_INITIALLY_SCHEDULED, REASON_INVALID, CompositePodGroup
from lockstep.api.upstream_podgroup import REASON_SCHEDULED, REASON_SCHEDULER_ERROR, REASON_UNSCHEDULABLE
from lockstep.kube.client import COMPOSITE_POD_GROUPS, ApiError, KubeClient
from lockstep.kube.patching import strict_merge_patch
from lockstep.logging import get_logger
from lockstep.scheduler.framework import Code

log = get_logger("lockstep.controller.composite_status")

MAX_MESSAGE = 32768
Ref = tuple[str, str]


def composite_condition(code: Code, message: str, invalid: bool = False) -> tuple[str, str, str]:
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
        self._wanted: dict[Ref, tuple[str, str, str]] = {}
        self._writing: set[Ref] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def observe(self, ref: Ref, composite: CompositePodGroup | None) -> None:
        if composite is None:
            self._composites.pop(ref, None)
            self._wanted.pop(ref, None)
        else:
            self._composites[ref] = composite

    def want(self, ref: Ref, code: Code, message: str, invalid: bool = False) -> None:
        if ref not in self._composites:
            return
        self._wanted[ref] = composite_condition(code, message[:MAX_MESSAGE], invalid)
        if ref in self._writing:
            return  # the running writer picks the newest wish up
        self._writing.add(ref)
        task = asyncio.get_running_loop().create_task(self._write(ref))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _to_write(self, composite: CompositePodGroup, wanted: tuple[str, str, str]) -> dict[str, Any] | None:
        status, reason, message = wanted
        current = next(
            (c for c in composite.status.conditions if c.type == CONDITION_INITIALLY_SCHEDULED), None
        )
        if current is not None:
            if current.status == "True" and status != "True":
                return None  # terminal once True
            if (current.status, current.reason, current.message) == wanted:
                return None
        moment = (
            current.last_transition_time
            if current is not None and current.status == status
            else datetime.now(UTC)
        )
        return {
            "type": CONDITION_INITIALLY_SCHEDULED,
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
                wanted = self._wanted.get(ref)
                if composite is None or wanted is None:
                    return
                condition = self._to_write(composite, wanted)
                if condition is None:
                    return
                others = [
                    c.model_dump(by_alias=True, mode="json", exclude_none=True)
                    for c in composite.status.conditions
                    if c.type != CONDITION_INITIALLY_SCHEDULED
                ]
                meta = composite.metadata
                try:
                    # rbac: patch compositepodgroups.scheduling.k8s.io/status
                    written = await strict_merge_patch(
                        self.client,
                        COMPOSITE_POD_GROUPS,
                        meta.namespace,
                        meta.name,
                        meta.resource_version,
                        {"status": {"conditions": [*others, condition]}},
                        subresource="status",
                    )
                except ApiError as exc:
                    if exc.not_found:
                        return
                    if not exc.conflict:
                        log.warning(
                            "compositepodgroup status write failed", composite="/".join(ref), error=str(exc)
                        )
                        return
                    try:
                        # rbac: get compositepodgroups.scheduling.k8s.io
                        written = await self.client.get(COMPOSITE_POD_GROUPS, meta.namespace, meta.name)
                    except ApiError:
                        return
                if ref in self._composites:
                    self._composites[ref] = CompositePodGroup.model_validate(written)
        finally:
            self._writing.discard(ref)
