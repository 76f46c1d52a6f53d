"""PodGroup status: computed from what the API shows plus the scheduler's last attempt, written
through ``/status`` with strict (resourceVersion) merge patches, at most one write per group per
flush, and only when something changed.

The counts come from the pod watch (``spec.nodeName``, ``status.phase``), never from the
scheduler's assumptions: a group is Scheduled only once at least minCount members have a node name
in the API.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import Enum
from typing import Any

import aiohttp

from lockstep import POD_GROUP_LABEL
from lockstep.api.podgroup import (
    CONDITION_SATISFIED,
    CONDITION_SCHEDULED,
    REASON_BELOW_MIN_COUNT,
    REASON_MIN_COUNT_SATISFIED,
    PodGroupPhase,
)
from lockstep.kube.client import POD_GROUPS, ApiError, KubeClient
from lockstep.kube.patching import strict_merge_patch
from lockstep.logging import get_logger
from lockstep.scheduler.framework import BINDING_WAIT

log = get_logger("lockstep.controller.status")

MAX_REASONS = 32


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class AttemptResult:
    """How the scheduler's last attempt for a group ended (the PodGroupScheduled reasons)."""

    SCHEDULED = "Scheduled"
    WAITING = "Waiting"
    UNSCHEDULABLE = "Unschedulable"
    TIMEOUT = "Timeout"
    SCHEDULER_ERROR = "SchedulerError"


@dataclass(frozen=True, slots=True)
class ReasonCount:
    reason: str  # a cause: InsufficientCPU, Taint, ClaimUnallocatable, TooFewPods, Timeout, ...
    count: int
    message: str = ""


@dataclass(frozen=True, slots=True)
class AttemptSummary:
    """The scheduler's last word on a group, in the terms the status speaks."""

    result: str
    message: str
    attempted_at: datetime
    next_retry_at: datetime | None = None
    reasons: tuple[ReasonCount, ...] = ()
    # (place, how many) among the groups waiting to be placed, and when it is expected to start
    # (RFC 3339, from a reservation with known deadlines) or None: "unknown"
    queue_position: tuple[int, int] | None = None
    expected_start: str | None = None
    domain: str = ""  # the topology domain holding the group, and why it was chosen


@dataclass(slots=True)
class MemberCounts:
    total: int = 0
    scheduled: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    pending: int = 0
    ready: int = 0

    @property
    def satisfying(self) -> int:
        """Members that satisfy the group: running, or finished with success."""
        return self.running + self.succeeded


@dataclass(slots=True)
class _Member:
    node_name: str
    phase: str
    ready: bool = False
    deleting: bool = False  # lost: being deleted (taint eviction of a lost node's pods, an eviction)


def _ready(status: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


@dataclass(slots=True)
class GroupMembers:
    """Members of each PodGroup as the API shows them, fed by the pod watch."""

    _by_group: dict[tuple[str, str], dict[str, _Member]] = field(default_factory=dict)
    _group_of: dict[str, tuple[str, str]] = field(default_factory=dict)

    def observe(self, event_type: str, pod: Mapping[str, Any]) -> list[tuple[str, str]]:
        """Record a pod event; return the (namespace, podgroup) keys whose counts may have changed."""
        meta = pod.get("metadata") or {}
        uid = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
        previous = self._group_of.get(uid)
        group_name = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        key = (str(meta.get("namespace") or "default"), str(group_name)) if group_name else None
        if event_type == "DELETED":
            key = None
        changed: list[tuple[str, str]] = []
        if previous is not None and previous != key:
            self._forget(uid, previous)
            changed.append(previous)
        if key is None:
            return changed
        self._group_of[uid] = key
        spec = pod.get("spec") or {}
        status = pod.get("status") or {}
        members = self._by_group.setdefault(key, {})
        known = members.get(uid)
        # spec.nodeName never goes back to empty: an event older than a binding seen already (the
        # scheduler's own 201, or a later watch event) must not take the binding back.
        node_name = str(spec.get("nodeName") or "") or (known.node_name if known is not None else "")
        phase = str(status.get("phase") or "Pending")
        member = _Member(
            node_name, phase, phase == "Running" and _ready(status), bool(meta.get("deletionTimestamp"))
        )
        if known != member:
            members[uid] = member
            changed.append(key)
        return changed

    def bound(self, uid: str, node_name: str) -> tuple[str, str] | None:
        """Record a binding the API server confirmed (its 201), ahead of the pod's watch event; return
        the group whose counts changed, if any."""
        key = self._group_of.get(uid)
        if key is None:
            return None
        members = self._by_group[key]
        member = members[uid]
        if member.node_name == node_name:
            return None
        members[uid] = _Member(node_name, member.phase, member.ready, member.deleting)
        return key

    def _forget(self, uid: str, key: tuple[str, str]) -> None:
        self._group_of.pop(uid, None)
        members = self._by_group.get(key)
        if members is not None:
            members.pop(uid, None)
            if not members:
                del self._by_group[key]

    def counts(self, key: tuple[str, str]) -> MemberCounts:
        counts = MemberCounts()
        for member in self._by_group.get(key, {}).values():
            counts.total += 1
            if member.node_name:
                counts.scheduled += 1
            if member.deleting and member.phase not in ("Succeeded", "Failed"):
                continue  # lost: neither running nor pending (a lost node's pods look Running)
            if member.phase == "Running":
                counts.running += 1
                counts.ready += member.ready
            elif member.phase == "Pending":
                counts.pending += 1
            elif member.phase == "Succeeded":
                counts.succeeded += 1
            elif member.phase == "Failed":
                counts.failed += 1
        return counts


# Phases a gang passes through on its way to being bound, usually within a moment: the writer holds
# them back for ``settle_seconds`` so that the common path is one write, and writes them only if the
# group stays there (pods slow to be created, bindings slow to land). Scheduled is the truth once the
# members are bound: it is held only ``SCHEDULED_SETTLE_SECONDS`` from the moment it became due, so
# that containers starting at once make it one Running write, and ``kubectl get lpg`` agrees with the
# pods well within half a second of a gang's last binding. Running, Unschedulable and the other
# settled phases are never held.
PASSING_PHASES = frozenset({PodGroupPhase.PENDING.value, PodGroupPhase.SCHEDULING.value})
SCHEDULED_SETTLE_SECONDS = 0.2
# Counts that follow the containers, not the scheduler: when nothing else changed they are held for
# ``settle_seconds`` too, so members starting one by one make one write.
CONTAINER_COUNTS = frozenset({"running", "succeeded", "failed", "pending", "ready"})
# Waiting only for its own members, or the claims generated for them, to be created: a gang's pods
# arrive one by one, and kube-controller-manager makes their template claims a moment later.
MEMBERS_ARRIVING = "TooFewPods"
CLAIMS_BEING_MADE = "ClaimPending"
ARRIVING_CAUSES = frozenset({MEMBERS_ARRIVING, CLAIMS_BEING_MADE})
# How long a passing phase is held back (and a Waiting event for arriving members deferred).
SETTLE_SECONDS = 2.0
# Phases the scheduler itself ends, with no change in the cluster: Pending before the group's first
# attempt (it waits its turn behind a backlog, e.g. every group of a cluster at start-up) and
# Scheduling (placed, its bindings on their way). Under a backlog they outlast SETTLE_SECONDS and were
# written for most gangs, only to be overwritten by Scheduled a few seconds later (1,000 status writes
# for 625 gangs of 8 on a real API server); they are written only if they last this long.
BACKLOG_SETTLE_SECONDS = 10.0
# The phases a group is in before its first placement lands: only from these is a backlog held (a
# group that was bound and lost members says so at once).
BEFORE_PLACEMENT_PHASES = frozenset({None, "", PodGroupPhase.PENDING.value, PodGroupPhase.SCHEDULING.value})


# Where a waiting group stands in the queue: it moves whenever another group is tried, so a change of
# these alone is written at most every QUEUE_SETTLE_SECONDS per group (with any other change at once).
QUEUE_FIELDS = ("queuePosition", "waitingGroups", "expectedStart")
QUEUE_SETTLE_SECONDS = 30.0
UNKNOWN_START = "unknown"


def passing(status: Mapping[str, Any]) -> bool:
    """Whether a desired status is one a gang usually passes through within a moment."""
    if status["phase"] in PASSING_PHASES:
        return True
    reasons = status.get("unschedulableReasons") or ()
    return (
        status["phase"] == PodGroupPhase.WAITING.value
        and bool(reasons)
        and all(r["reason"] in ARRIVING_CAUSES for r in reasons)
    )


class Hold(Enum):
    """Why a desired status may wait for the next one (it is written when the hold's time is up)."""

    PASSING = "passing"  # a passing phase: settle_seconds from the first such status
    BACKLOG = "backlog"  # not attempted yet, or bindings landing: BACKLOG_SETTLE_SECONDS from then
    SCHEDULED = "scheduled"  # bound, containers starting: SCHEDULED_SETTLE_SECONDS from then
    CONTAINERS = "containers"  # only the container counts changed: settle_seconds from then
    QUEUE = "queue"  # only the place in the queue changed: QUEUE_SETTLE_SECONDS from then


def hold_for(current: Mapping[str, Any], desired: Mapping[str, Any]) -> Hold | None:
    """How the writer may hold ``desired`` back given the ``current`` status (None: write it now)."""
    if desired["phase"] == PodGroupPhase.SCHEDULING.value and _binding_waits(desired):
        return Hold.PASSING
    if (
        desired["phase"] == PodGroupPhase.SCHEDULING.value
        or (desired["phase"] == PodGroupPhase.PENDING.value and "lastAttemptTime" not in desired)
    ) and current.get("phase") in BEFORE_PLACEMENT_PHASES:
        return Hold.BACKLOG
    if passing(desired):
        return Hold.PASSING
    changes = set(status_changes(current, desired))
    if "conditions" in changes and _only_satisfied_message(current, desired):
        changes.discard("conditions")  # its message follows the container counts
    if changes <= CONTAINER_COUNTS:
        return Hold.CONTAINERS
    if changes <= set(QUEUE_FIELDS):
        return Hold.QUEUE
    if desired["phase"] == PodGroupPhase.SCHEDULED.value:
        return Hold.SCHEDULED
    return None


def _binding_waits(desired: Mapping[str, Any]) -> bool:
    """Whether a placed group's binding waits for a device driver (not for the scheduler's own
    bindings to land), which the user is to see as soon as a passing phase would be."""
    conditions = desired.get("conditions") or ()
    return any(
        c.get("type") == CONDITION_SCHEDULED and str(c.get("message", "")).startswith(BINDING_WAIT)
        for c in conditions
    )


BOUND_PHASES = frozenset({PodGroupPhase.SCHEDULED.value, PodGroupPhase.RUNNING.value})


def follows_containers(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``desired`` differs from a bound group's ``current`` status only in what its members'
    containers did since: Scheduled to Running, the container counts, PodGroupSatisfied. The bindings
    it shows (phase bound, ``scheduled``, PodGroupScheduled) are the same."""
    if current.get("phase") not in BOUND_PHASES or desired["phase"] not in BOUND_PHASES:
        return False

    def scheduling_conditions(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return [c for c in status.get("conditions") or () if c.get("type") != CONDITION_SATISFIED]

    changes = set(status_changes(current, desired))
    if "conditions" in changes and scheduling_conditions(current) == scheduling_conditions(desired):
        changes.discard("conditions")
    return changes <= CONTAINER_COUNTS | {"phase"}


def _only_satisfied_message(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether the conditions differ only in the message of PodGroupSatisfied (same status)."""

    def shown(status: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        return [
            {k: v for k, v in c.items() if k != "message"} if c.get("type") == CONDITION_SATISFIED else c
            for c in status.get("conditions") or ()
        ]

    return shown(current) == shown(desired)


def satisfied_condition(
    existing: Mapping[str, Any] | None, generation: int, min_count: int, counts: MemberCounts, now: datetime
) -> dict[str, Any]:
    """PodGroupSatisfied (KEP-6413's names): True while at least minCount members are running or
    have succeeded (a group whose members are finishing is not broken), False with the count below."""
    satisfied = counts.satisfying >= min_count
    status = "True" if satisfied else "False"
    message = (
        f"{counts.satisfying} of minCount {min_count} members running or succeeded "
        f"({counts.running} running, {counts.succeeded} succeeded, {counts.failed} failed)"
    )
    transition = (
        existing.get("lastTransitionTime")
        if existing is not None and existing.get("status") == status and existing.get("lastTransitionTime")
        else rfc3339(now)
    )
    return {
        "type": CONDITION_SATISFIED,
        "status": status,
        "reason": REASON_MIN_COUNT_SATISFIED if satisfied else REASON_BELOW_MIN_COUNT,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }


def _version(meta: Mapping[str, Any]) -> int | None:
    try:
        return int(meta.get("resourceVersion") or "")
    except ValueError:
        return None


def _not_newer(body: Mapping[str, Any], known: Mapping[str, Any]) -> bool:
    """Whether a watch event shows the same PodGroup at a version no newer than the writer's copy: its
    own patch answer can be ahead of the watch, and patching from the older copy would only earn a
    409. Versions compare as integers, as kube-scheduler's assume cache does; others count as newer."""
    meta, known_meta = body.get("metadata") or {}, known.get("metadata") or {}
    if not meta.get("uid") or meta.get("uid") != known_meta.get("uid"):
        return False
    theirs, ours = _version(meta), _version(known_meta)
    return theirs is not None and ours is not None and theirs <= ours


# Phases that only the scheduler's attempts decide; a new leader that has not attempted the group
# yet keeps them as its predecessor wrote them.
ATTEMPT_PHASES = frozenset({PodGroupPhase.WAITING, PodGroupPhase.UNSCHEDULABLE, PodGroupPhase.SCHEDULING})


def _phase(
    min_count: int, counts: MemberCounts, attempt: AttemptSummary | None, current: str | None
) -> PodGroupPhase:
    if counts.scheduled >= min_count:
        if counts.succeeded >= min_count:
            return PodGroupPhase.SUCCEEDED
        if counts.failed > 0 and counts.total - counts.failed < min_count:
            return PodGroupPhase.FAILED
        if counts.running + counts.succeeded >= min_count:
            return PodGroupPhase.RUNNING
        return PodGroupPhase.SCHEDULED
    if attempt is None:
        if current in ATTEMPT_PHASES:
            return PodGroupPhase(current)
        return PodGroupPhase.PENDING
    if attempt.result == AttemptResult.SCHEDULED:
        return PodGroupPhase.SCHEDULING  # the scheduler placed it, the bindings are still landing
    if attempt.result == AttemptResult.WAITING:
        return PodGroupPhase.WAITING
    if attempt.result in (AttemptResult.UNSCHEDULABLE, AttemptResult.TIMEOUT):
        return PodGroupPhase.UNSCHEDULABLE
    # AttemptResult.SCHEDULER_ERROR: nothing is known about the group's fit; it is retried.
    return PodGroupPhase.PENDING


def waiting_beyond_min_count(min_count: int, counts: MemberCounts) -> int:
    """Members of a gang not bound and not needed to reach minCount: those that bind one by one, as
    capacity allows, once the gang is at minCount (all of a gang's unbound members but the ones
    still missing from minCount)."""
    return max(0, counts.total - max(counts.scheduled, min_count))


def _bound_message(min_count: int, counts: MemberCounts, beyond: int, domain: str = "") -> str:
    message = f"{counts.scheduled} of {counts.total} pods bound (minCount {min_count})"
    message += f"; placed in {domain}" if domain else ""
    return message + (f"; {beyond} members beyond minCount waiting" if beyond else "")


def _scheduled_condition(
    current: list[Mapping[str, Any]],
    generation: int,
    min_count: int,
    counts: MemberCounts,
    attempt: AttemptSummary | None,
    now: datetime,
    beyond: int,
) -> dict[str, Any]:
    existing = next((c for c in current if c.get("type") == CONDITION_SCHEDULED), None)
    if existing is not None and existing.get("status") == "True":
        # Once True it stays True, as upstream (also when minCount is raised above the bound
        # members); its message follows the counts, which change in the same writes. Its
        # observedGeneration moves on only once the current spec's minCount is met: the
        # OnceSatisfied policy reads "True at this generation" as "satisfied at this minCount".
        domain = attempt.domain if attempt is not None else ""
        kept = {**existing, "message": _bound_message(min_count, counts, beyond, domain)}
        if counts.scheduled >= min_count:
            kept["observedGeneration"] = generation
        return kept
    if attempt is None and existing is not None and counts.scheduled < min_count:
        return dict(existing)  # not attempted by this process yet: keep what the last leader wrote
    if counts.scheduled >= min_count:
        status, reason = "True", "Scheduled"
        message = _bound_message(min_count, counts, beyond, attempt.domain if attempt is not None else "")
    elif attempt is None:
        status, reason = "False", "Pending"
        message = (
            f"{counts.total} pods exist, {counts.scheduled} bound; not attempted yet (minCount {min_count})"
        )
    else:
        status = "False"
        reason = attempt.result if attempt.result != AttemptResult.SCHEDULED else "Binding"
        message = attempt.message or f"{counts.scheduled} of minCount {min_count} pods bound"
        if beyond:
            message += f"; {beyond} members beyond minCount waiting"
    transition = (
        existing.get("lastTransitionTime")
        if existing is not None and existing.get("status") == status and existing.get("lastTransitionTime")
        else rfc3339(now)
    )
    return {
        "type": CONDITION_SCHEDULED,
        "status": status,
        "reason": reason,
        "message": message[:32768],
        "observedGeneration": generation,
        "lastTransitionTime": transition,
    }


def desired_status(
    podgroup: Mapping[str, Any],
    counts: MemberCounts,
    attempt: AttemptSummary | None,
    now: datetime,
    reservation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The status fields the writer owns (fields it clears are None). ``resourceClaimStatuses`` is
    not among them: the DRA side records it through its own port. ``reservation``: the capacity the
    scheduler holds for the group (``scheduler/reservation.py`` ``to_status``), None when it holds none."""
    meta = podgroup.get("metadata") or {}
    spec = podgroup.get("spec") or {}
    policy = spec.get("schedulingPolicy") or {}
    gang = policy.get("gang")
    min_count = int(gang.get("minCount", 1)) if isinstance(gang, Mapping) else 1
    generation = int(meta.get("generation") or 0)
    current = podgroup.get("status") or {}
    beyond = waiting_beyond_min_count(min_count, counts) if isinstance(gang, Mapping) else 0
    condition = _scheduled_condition(
        list(current.get("conditions") or []), generation, min_count, counts, attempt, now, beyond
    )
    mine = (CONDITION_SCHEDULED, CONDITION_SATISFIED)
    others = [c for c in current.get("conditions") or [] if c.get("type") not in mine]
    satisfied = satisfied_condition(
        next((c for c in current.get("conditions") or [] if c.get("type") == CONDITION_SATISFIED), None),
        generation,
        min_count,
        counts,
        now,
    )
    placed = counts.scheduled >= min_count
    reasons = [] if placed or attempt is None else list(attempt.reasons)[:MAX_REASONS]
    status: dict[str, Any] = {
        "phase": _phase(min_count, counts, attempt, current.get("phase")).value,
        "policy": "Gang" if isinstance(gang, Mapping) else "Basic",
        "observedGeneration": generation,
        "total": counts.total,
        "pending": counts.pending,
        "scheduled": counts.scheduled,
        "running": counts.running,
        "ready": counts.ready,
        "succeeded": counts.succeeded,
        "failed": counts.failed,
        "waitingBeyondMinCount": beyond if isinstance(gang, Mapping) else None,
        "conditions": [*others, satisfied, condition],
        "lastAttemptTime": rfc3339(attempt.attempted_at) if attempt is not None else None,
        "nextRetryTime": (
            rfc3339(attempt.next_retry_at)
            if attempt is not None and attempt.next_retry_at and not placed
            else None
        ),
        "unschedulableReasons": [
            {"reason": r.reason, "count": r.count, **({"message": r.message[:1024]} if r.message else {})}
            for r in reasons
        ],
        "reservation": dict(reservation) if reservation is not None else None,
        "queuePosition": None,
        "waitingGroups": None,
        "expectedStart": None,
    }
    if attempt is not None and attempt.queue_position is not None and not placed:
        status["queuePosition"], status["waitingGroups"] = attempt.queue_position
        status["expectedStart"] = attempt.expected_start or UNKNOWN_START
    if attempt is None and not placed:
        for key in ("lastAttemptTime", "nextRetryTime", "unschedulableReasons", *QUEUE_FIELDS):
            status.pop(key)  # the previous leader's last word stands until this process attempts
    return status


def status_changes(current: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """The fields of ``desired`` the current status does not show (None where a field is to be
    cleared): the body of the merge patch, not the whole status."""
    return {
        key: value
        for key, value in desired.items()
        if (current.get(key) is not None if value is None else current.get(key) != value)
    }


def status_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    return bool(status_changes(current, desired))


GroupRef = tuple[str, str]


class StatusWriter:
    """Coalesces status updates: ``mark(key)`` any number of times, one write per group per flush."""

    def __init__(
        self,
        client: KubeClient,
        members: GroupMembers,
        *,
        attempt_of: Callable[[GroupRef], AttemptSummary | None],
        reservation_of: Callable[[GroupRef], Mapping[str, Any] | None] = lambda key: None,
        flush_interval: float = 0.05,
        retry_delay: float = 1.0,
        settle_seconds: float = SETTLE_SECONDS,
        queue_settle_seconds: float = QUEUE_SETTLE_SECONDS,
        concurrency: int = 16,
        on_write: Callable[[str], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.client = client
        self.members = members
        self.attempt_of = attempt_of
        self.reservation_of = reservation_of
        self.flush_interval = flush_interval
        self.retry_delay = retry_delay
        self.settle_seconds = settle_seconds
        self.queue_settle_seconds = queue_settle_seconds
        # Groups whose desired status is held back: why, since when (loop time), and the timer that
        # marks the group when the hold is up.
        self._held: dict[GroupRef, tuple[Hold, float, asyncio.TimerHandle]] = {}
        self._retrying: set[GroupRef] = set()  # groups whose write is retried after retry_delay
        self._flushing = False  # shutting down: nothing is held, retries come at once
        self.on_write = on_write
        self.clock = clock
        self.writes = 0
        self.podgroups: dict[GroupRef, dict[str, Any]] = {}
        self._dirty: set[GroupRef] = set()
        self._writing: set[GroupRef] = set()
        self._wake = asyncio.Event()
        self._semaphore = asyncio.Semaphore(concurrency)
        self._idle = asyncio.Event()
        self._idle.set()
        self._flush_started = asyncio.Event()

    def observe_podgroup(self, event_type: str, body: Mapping[str, Any]) -> None:
        meta = body.get("metadata") or {}
        key = (str(meta.get("namespace") or "default"), str(meta.get("name")))
        if event_type == "DELETED":
            self.podgroups.pop(key, None)
            self._dirty.discard(key)
            self._release(key)
            return
        known = self.podgroups.get(key)
        if known is not None and _not_newer(body, known):
            return
        self.podgroups[key] = dict(body)
        self.mark(key)

    def mark(self, key: GroupRef) -> None:
        self._retrying.discard(key)
        if key in self.podgroups:
            self._dirty.add(key)
            self._idle.clear()
            self._wake.set()

    async def run(self) -> None:
        """Each interval, write every marked group not being written already (one written while it
        is marked again is written again after). A batch does not wait for the one before it to be
        done: behind the Pending writes of a large backlog (hundreds, 16 at a time), the statuses of
        gangs bound meanwhile waited seconds, and were still unwritten at a SIGTERM."""
        async with asyncio.TaskGroup() as writes:
            while True:
                await self._wake.wait()
                self._wake.clear()
                if not self._flushing:  # at shutdown nothing waits to be merged with what comes next
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._flush_started.wait(), self.flush_interval)
                batch = self._dirty - self._writing
                self._dirty -= batch
                self._writing |= batch
                for key in batch:
                    writes.create_task(self._write_marked(key))
                self._check_idle()

    async def _write_marked(self, key: GroupRef) -> None:
        try:
            await self._write(key)
        finally:
            self._writing.discard(key)
            if key in self._dirty:
                self._wake.set()
            self._check_idle()

    def _check_idle(self) -> None:
        if not self._dirty and not self._writing:
            self._idle.set()

    async def refresh_queue_positions(self) -> None:
        """Look again at every group that waits (or waited) in the queue every queue_settle_seconds:
        others moving ahead of it change its place without an event of its own."""
        while True:
            await asyncio.sleep(self.queue_settle_seconds)
            for key, body in list(self.podgroups.items()):
                attempt = self.attempt_of(key)
                if (body.get("status") or {}).get("queuePosition") or (attempt and attempt.queue_position):
                    self.mark(key)

    async def idle(self) -> None:
        """Wait until every marked group is written (for tests; held statuses are not)."""
        await self._idle.wait()

    async def flush(self) -> None:
        """Write every status that differs from what the API shows, held ones included but for
        passing phases and places in the queue, retrying failed writes at once, and return when
        nothing is left (shutdown; bound it with a timeout). Needs :meth:`run` running."""
        self._flushing = True
        self._flush_started.set()
        for timer in (timer for _, _, timer in self._held.values()):
            timer.cancel()
        self._held.clear()
        for key in list(self.podgroups):
            self.mark(key)
        while not self._idle.is_set() or self._retrying:
            await self._idle.wait()
            if self._retrying:
                await asyncio.sleep(0.05)

    async def _write(self, key: GroupRef) -> None:
        async with self._semaphore:
            for _ in range(3):
                body = self.podgroups.get(key)
                if body is None:
                    return
                desired = desired_status(
                    body,
                    self.members.counts(key),
                    self.attempt_of(key),
                    self.clock(),
                    self.reservation_of(key),
                )
                changes = status_changes(body.get("status") or {}, desired)
                if not changes:
                    self._release(key)
                    return
                if self._hold(key, body.get("status") or {}, desired):
                    return
                version = str((body.get("metadata") or {}).get("resourceVersion") or "")
                try:
                    written = await strict_merge_patch(
                        self.client,
                        POD_GROUPS,
                        key[0],
                        key[1],
                        version,
                        {"status": changes},
                        subresource="status",
                    )
                except ApiError as exc:
                    if exc.not_found:
                        self.podgroups.pop(key, None)
                        return
                    if not exc.conflict:
                        self._failed(key, str(exc), transient=exc.status == 429 or exc.status >= 500)
                        return
                    self._report("conflict")
                    if not await self._reread(key):
                        return
                    continue
                except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                    self._failed(key, str(exc) or repr(exc), transient=True)
                    return
                self._release(key)
                self.writes += 1
                self._report("written")
                if key in self.podgroups:
                    self.podgroups[key] = written
                log.info(
                    "podgroup status",
                    podgroup=f"{key[0]}/{key[1]}",
                    phase=desired["phase"],
                    scheduled=desired["scheduled"],
                    total=desired["total"],
                )
                return
            self._retry_later(key)  # the object kept changing under three attempts

    def _hold(self, key: GroupRef, current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
        """Whether to hold ``desired`` back (see :func:`hold_for`). A hold's time counts from when its
        reason began; when it is up the group is marked and the status written."""
        if self._flushing:
            # At shutdown a passing phase, a new place in the queue or what the containers of a
            # bound gang did since its status was written (Running, PodGroupSatisfied, the counts) is
            # left to the next leader, which writes every PodGroup's differences when it starts: the
            # backlog of Pending groups behind a large start took 20 s to flush on a loaded machine,
            # past the grace period (bench/startup.py --takeover term), and the Running writes were
            # most of what was left (--shutdown). What this process decided (bound, unschedulable,
            # failed) is written.
            self._release(key)
            return (
                passing(desired)
                or hold_for(current, desired) is Hold.QUEUE
                or follows_containers(current, desired)
            )
        hold = hold_for(current, desired)
        if hold is None:
            self._release(key)
            return False
        loop = asyncio.get_running_loop()
        held = self._held.get(key)
        since = held[1] if held is not None and held[0] is hold else loop.time()
        seconds = {
            Hold.SCHEDULED: SCHEDULED_SETTLE_SECONDS,
            Hold.QUEUE: self.queue_settle_seconds,
            Hold.BACKLOG: BACKLOG_SETTLE_SECONDS,
        }.get(hold, self.settle_seconds)
        remaining = since + seconds - loop.time()
        if remaining <= 0:
            return False  # held long enough; released once written
        if held is not None and held[0] is hold and held[2].when() > loop.time():
            return True  # its timer is still to come
        self._release(key)
        self._held[key] = (hold, since, loop.call_later(remaining, self.mark, key))
        return True

    def _release(self, key: GroupRef) -> None:
        held = self._held.pop(key, None)
        if held is not None:
            held[2].cancel()

    def _failed(self, key: GroupRef, error: str, *, transient: bool) -> None:
        self._report("error")
        log.warning(
            "podgroup status write failed", podgroup=f"{key[0]}/{key[1]}", error=error, retry=transient
        )
        if transient:
            self._retry_later(key)

    def _retry_later(self, key: GroupRef) -> None:
        self._retrying.add(key)
        delay = 0.05 if self._flushing else self.retry_delay
        asyncio.get_running_loop().call_later(delay, self.mark, key)

    async def _reread(self, key: GroupRef) -> bool:
        try:
            fresh = await self.client.get(POD_GROUPS, key[0], key[1])
        except ApiError as exc:
            if exc.not_found:
                self.podgroups.pop(key, None)
            return False
        if key in self.podgroups:
            self.podgroups[key] = fresh
        return True

    def _report(self, result: str) -> None:
        if self.on_write is not None:
            self.on_write(result)
