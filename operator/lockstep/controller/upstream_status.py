"""Status of upstream (``scheduling.k8s.io``) PodGroups: the one condition kube-scheduler writes,
``PodGroupInitiallyScheduled`` in v1beta1 (Kubernetes 1.37) and ``PodGroupScheduled`` in v1alpha2
(1.36), with upstream's reasons: True/Scheduled when a group cycle placed the group,
False/Unschedulable when it cannot be placed (or waits for pods), False/SchedulerError on an error.
Once True it is never set back to False (as kube-scheduler's ``updatePodGroupCondition``). Each
PodGroup is written in the version it was read in.

lockstep also writes KEP-6413's ``PodGroupSatisfied`` (provisional; kube-scheduler does not write it
yet): True (``MinCountSatisfied``) while at least minCount members are running or have succeeded,
False (``BelowMinCount``) with the count below. It is written only when its status changes (its message
carries the count at that moment), in the same patch as the scheduling condition when both change: no
write per member on the hot path.

One strict (resourceVersion) merge patch per change; an unchanged condition is not written again.
lockstep's own PodGroups keep their richer status (``controller/status.py``).
"""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

from lockstep.api.podgroup import CONDITION_SATISFIED, REASON_BELOW_MIN_COUNT, REASON_MIN_COUNT_SATISFIED
from lockstep.api.upstream_podgroup import (
    REASON_SCHEDULED,
    REASON_SCHEDULER_ERROR,
    REASON_UNSCHEDULABLE,
    UpstreamPodGroup,
)
from lockstep.kube.client import (
    UPSTREAM_POD_GROUPS,
    UPSTREAM_POD_GROUPS_V1ALPHA2,
    ApiError,
    KubeClient,
    ResourceKind,
)
from lockstep.kube.patching import loose_merge_patch, write_conditions
from lockstep.logging import get_logger
from lockstep.scheduler.framework import Code, GroupKey
from lockstep.scheduler.records import GroupAttempt
from lockstep.scheduler.reservation import RESERVATION_ANNOTATION

log = get_logger("lockstep.controller.upstream_status")

MAX_MESSAGE = 32768


def scheduled_condition(code: Code, message: str) -> tuple[str, str, str]:
    """(status, reason, message) of PodGroupScheduled for an attempt that ended with ``code``."""
    if code is Code.SUCCESS:
        return "True", REASON_SCHEDULED, message
    if code is Code.ERROR:
        return "False", REASON_SCHEDULER_ERROR, message
    return "False", REASON_UNSCHEDULABLE, message


def satisfied_condition(
    satisfying: int, running: int, succeeded: int, min_count: int
) -> tuple[str, str, str]:
    """(status, reason, message) of PodGroupSatisfied."""
    message = (
        f"{satisfying} of minCount {min_count} members running or succeeded "
        f"({running} running, {succeeded} succeeded)"
    )
    if satisfying >= min_count:
        return "True", REASON_MIN_COUNT_SATISFIED, message
    return "False", REASON_BELOW_MIN_COUNT, message


def _kind_of(podgroup: UpstreamPodGroup) -> ResourceKind:
    """The version the PodGroup was read in."""
    kinds = (UPSTREAM_POD_GROUPS, UPSTREAM_POD_GROUPS_V1ALPHA2)
    return next(kind for kind in kinds if kind.version == podgroup.version)


class UpstreamStatusWriter:
    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._groups: dict[GroupKey, UpstreamPodGroup] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._wanted: dict[GroupKey, tuple[str, str, str]] = {}  # (status, reason, message)
        self._wanted_satisfied: dict[GroupKey, tuple[str, str, str]] = {}
        self._attempted_at: dict[GroupKey, int] = {}  # generation of the PodGroup at the last attempt
        self._writing: set[GroupKey] = set()
        self._reservations: dict[GroupKey, dict[str, Any] | None] = {}  # to record, newest
        self._recording: set[GroupKey] = set()

    def observe(self, key: GroupKey, podgroup: UpstreamPodGroup | None) -> None:
        if podgroup is None:
            self._groups.pop(key, None)
            self._wanted.pop(key, None)
            self._wanted_satisfied.pop(key, None)
            self._attempted_at.pop(key, None)
        else:
            self._groups[key] = podgroup

    def on_attempt(self, attempt: GroupAttempt) -> None:
        """Want the condition this attempt implies; one writer per group writes the latest wanted."""
        key = attempt.group
        if key not in self._groups:
            return
        self._wanted[key] = scheduled_condition(attempt.code, attempt.message[:MAX_MESSAGE])
        # the generation the cycle saw: a spec change (a raised minCount) before the write must not
        # be recorded as placed
        self._attempted_at[key] = self._groups[key].metadata.generation
        self._start(key)

    def on_members(self, key: GroupKey, satisfying: int, running: int, succeeded: int) -> None:
        """The group's members changed: want PodGroupSatisfied as they are now (written only if its
        status differs from the one the PodGroup shows)."""
        podgroup = self._groups.get(key)
        if podgroup is None or not podgroup.spec.is_gang or not self._placed(podgroup, key):
            return  # as KEP-6413: absent until the group is first placed
        wanted = satisfied_condition(satisfying, running, succeeded, podgroup.spec.min_count)
        current = next((c for c in podgroup.status.conditions if c.type == CONDITION_SATISFIED), None)
        if current is not None and current.status == wanted[0] and key not in self._wanted_satisfied:
            return
        self._wanted_satisfied[key] = wanted
        self._start(key)

    def _placed(self, podgroup: UpstreamPodGroup, key: GroupKey) -> bool:
        condition = next((c for c in podgroup.status.conditions if c.type == podgroup.condition_type), None)
        wanted = self._wanted.get(key)
        return (condition is not None and condition.status == "True") or (
            wanted is not None and wanted[0] == "True"
        )

    def _start(self, key: GroupKey) -> None:
        if key in self._writing:
            return  # the running writer picks the newest wish up
        self._writing.add(key)
        task = asyncio.get_running_loop().create_task(self._write(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def record_reservation(self, key: GroupKey, reservation: dict[str, Any] | None) -> None:
        """Record the capacity held for the group in its annotation (upstream's PodGroup has no status
        field for it), so that a restarted or new leader finds it; None removes it. The newest wins."""
        if key not in self._groups:
            return
        self._reservations[key] = reservation
        if key in self._recording:
            return
        self._recording.add(key)
        task = asyncio.get_running_loop().create_task(self._record(key))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _record(self, key: GroupKey) -> None:
        try:
            while key in self._reservations:
                reservation = self._reservations.pop(key)
                podgroup = self._groups.get(key)
                if podgroup is None:
                    return
                value = json.dumps(reservation, sort_keys=True) if reservation is not None else None
                if podgroup.metadata.annotations.get(RESERVATION_ANNOTATION) == value:
                    continue
                meta = podgroup.metadata
                try:
                    # rbac: patch podgroups.scheduling.k8s.io
                    await loose_merge_patch(
                        self.client,
                        _kind_of(podgroup),
                        meta.namespace,
                        meta.name,
                        {"metadata": {"annotations": {RESERVATION_ANNOTATION: value}}},
                    )
                except ApiError as exc:
                    if not exc.not_found:
                        log.warning("recording the reservation failed", podgroup=str(key), error=str(exc))
        finally:
            self._recording.discard(key)

    def _satisfied_to_write(self, podgroup: UpstreamPodGroup, key: GroupKey) -> dict[str, Any] | None:
        wanted = self._wanted_satisfied.get(key)
        if wanted is None:
            return None
        status, reason, message = wanted
        current = next((c for c in podgroup.status.conditions if c.type == CONDITION_SATISFIED), None)
        if current is not None and current.status == status:
            return None  # only transitions are written
        return {
            "type": CONDITION_SATISFIED,
            "status": status,
            "observedGeneration": podgroup.metadata.generation,
            "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": reason,
            "message": message,
        }

    def _condition_to_write(
        self, podgroup: UpstreamPodGroup, wanted: tuple[str, str, str] | None, attempted_at: int | None = None
    ) -> dict[str, Any] | None:
        """The condition to write for ``wanted`` on ``podgroup`` as last seen; None: nothing to write
        (the same already, or it would take a True condition back to False)."""
        if wanted is None:
            return None
        status, reason, message = wanted
        condition_type = podgroup.condition_type
        current = next((c for c in podgroup.status.conditions if c.type == condition_type), None)
        if current is not None:
            if current.status == "True" and status != "True":
                return None
            if (current.status, current.reason, current.message) == wanted:
                return None
        moment = (
            current.last_transition_time
            if current is not None and current.status == status
            else datetime.now(UTC)
        )
        # A True condition keeps the generation it turned True at: lockstep's OnceSatisfied policy reads
        # "True at this generation" as "reached the current minCount" (a raise bumps the generation).
        generation = (
            current.observed_generation
            if current is not None and current.status == "True" and current.observed_generation is not None
            else attempted_at
            if attempted_at is not None
            else podgroup.metadata.generation
        )
        return {
            "type": condition_type,
            "status": status,
            "observedGeneration": generation,
            "lastTransitionTime": moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "reason": reason,
            "message": message,
        }

    async def _write(self, key: GroupKey, attempts: int = 5) -> None:
        """Write the newest wanted condition next to the others; on a conflict re-read the PodGroup
        and try again; a wish that arrives meanwhile is written next."""
        try:
            await self._write_newest(key, attempts)
        finally:
            self._writing.discard(key)  # synchronously with the last check: no wish slips between

    async def _write_newest(self, key: GroupKey, attempts: int) -> None:
        for _ in range(attempts):
            podgroup = self._groups.get(key)
            if podgroup is None:
                return
            written_now = [
                c
                for c in (
                    self._condition_to_write(podgroup, self._wanted.get(key), self._attempted_at.get(key)),
                    self._satisfied_to_write(podgroup, key),
                )
                if c is not None
            ]
            if not written_now:
                self._wanted_satisfied.pop(key, None)
                return
            meta = podgroup.metadata
            try:
                # rbac: patch podgroups.scheduling.k8s.io/status
                # rbac: get podgroups.scheduling.k8s.io
                written = await write_conditions(
                    self.client,
                    _kind_of(podgroup),
                    meta.namespace,
                    meta.name,
                    meta.resource_version,
                    podgroup.status.conditions,
                    written_now,
                )
            except ApiError as exc:
                log.warning("upstream podgroup status write failed", podgroup=str(key), error=str(exc))
                return
            if written is None:
                return
            if key in self._groups:
                self._groups[key] = UpstreamPodGroup.model_validate(written)
