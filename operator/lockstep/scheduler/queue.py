"""The group queue: which PodGroup's cycle runs next.

A group is in one of four states:
  active   waiting for its turn; ordered by priority (highest first), then first-seen time;
  backoff  its last attempt failed; it becomes active when its backoff expires (initial * 2^n,
           capped) or earlier when an event that could help arrives, but never sooner than the
           initial backoff after its last attempt, so a busy cluster cannot make it spin;
  gated    PreEnqueue failed (PodGroup or members missing): waits for a group event that can lift the
           gate (a member added, the PodGroup created or its minCount lowered);
  parked   its last attempt failed with a verdict no retry can change (every failed pod was
           UnschedulableAndUnresolvable on every node): no timer, it waits for an event that could
           change the verdict, any change of the group itself (its pods or PodGroup) or one of the
           cluster-wide events it was parked with, and then backs off as above (a lowered minCount
           makes a backed-off or parked group active at once);
  idle     nothing to do, or being scheduled right now.
A group's own cycle never re-activates it.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Iterable
from enum import Enum

from lockstep.scheduler.framework import GroupKey
from lockstep.state.cluster import ClusterEvent


class GroupState(Enum):
    IDLE = "idle"
    ACTIVE = "active"
    BACKOFF = "backoff"
    GATED = "gated"
    PARKED = "parked"


_WAITING = frozenset({GroupState.ACTIVE, GroupState.BACKOFF, GroupState.PARKED})


class _Entry:
    __slots__ = ("attempts", "hints", "key", "last_attempt", "priority", "ready_at", "seq", "state", "token")

    def __init__(self, key: GroupKey, seq: int) -> None:
        self.key = key
        self.seq = seq
        self.priority = 0
        self.state = GroupState.IDLE
        self.attempts = 0
        self.ready_at = 0.0
        self.last_attempt = float("-inf")
        self.hints: frozenset[ClusterEvent] = frozenset()
        self.token = 0  # bumped whenever the entry is (re)pushed; older heap items are stale


class GroupQueue:
    def __init__(self, backoff_initial: float, backoff_max: float) -> None:
        self.backoff_initial = backoff_initial
        self.backoff_max = backoff_max
        self._entries: dict[GroupKey, _Entry] = {}
        # the entries backing off or parked, the only ones a cluster-wide event can hurry: walking every
        # entry for each such event cost a start-up 1,250 groups times 5,000 NODE_ADDED
        self._held: dict[GroupKey, _Entry] = {}
        self._active: list[tuple[int, int, int, GroupKey]] = []
        self._backoff: list[tuple[float, int, int, GroupKey]] = []
        self._seq = itertools.count()

    def _entry(self, key: GroupKey) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key, next(self._seq))
        return entry

    def _push_active(self, entry: _Entry) -> None:
        entry.state = GroupState.ACTIVE
        self._held.pop(entry.key, None)
        entry.token += 1
        heapq.heappush(self._active, (-entry.priority, entry.seq, entry.token, entry.key))

    def _push_backoff(self, entry: _Entry, ready_at: float) -> None:
        entry.state = GroupState.BACKOFF
        self._held[entry.key] = entry
        entry.ready_at = ready_at
        entry.token += 1
        heapq.heappush(self._backoff, (ready_at, entry.seq, entry.token, entry.key))

    def state(self, key: GroupKey) -> GroupState:
        entry = self._entries.get(key)
        return entry.state if entry is not None else GroupState.IDLE

    def attempts(self, key: GroupKey) -> int:
        entry = self._entries.get(key)
        return entry.attempts if entry is not None else 0

    def ready_at(self, key: GroupKey) -> float | None:
        entry = self._entries.get(key)
        return entry.ready_at if entry is not None and entry.state is GroupState.BACKOFF else None

    def add(
        self,
        key: GroupKey,
        priority: int,
        now: float,
        event: ClusterEvent | None = None,
        at_once: bool = False,
    ) -> None:
        """Something about the group itself changed (new member, PodGroup created or relaxed). A
        gated group stays gated unless ``event`` is one that lifts its gate (None: always). A group
        backing off or parked is hurried, no sooner than the initial backoff after its last attempt;
        ``at_once`` (its PodGroup asks for less: minCount lowered) makes it active now."""
        entry = self._entry(key)
        if entry.state is GroupState.GATED and event is not None and event not in entry.hints:
            return
        idle = entry.state in (GroupState.IDLE, GroupState.GATED)
        waiting = entry.state in (GroupState.BACKOFF, GroupState.PARKED)
        if idle or (waiting and at_once) or (entry.state is GroupState.ACTIVE and priority > entry.priority):
            entry.priority = max(entry.priority, priority) if waiting else priority
            self._push_active(entry)
        elif waiting:
            entry.priority = max(entry.priority, priority)
            self._hurry(entry, now)

    def _hurry(self, entry: _Entry, now: float) -> None:
        earliest = max(now, entry.last_attempt + self.backoff_initial)
        if earliest < entry.ready_at:
            self._push_backoff(entry, earliest)

    def on_event(self, event: ClusterEvent, now: float, source: GroupKey | None = None) -> int:
        """A cluster-wide event: hurry the backed-off groups it could help, except the group whose
        own failure caused it (``source``). Returns how many."""
        helped = 0
        for entry in self._held.values():
            if event in entry.hints and entry.key != source:
                self._hurry(entry, now)
                helped += 1
        return helped

    def retry_by(self, key: GroupKey, at: float) -> None:
        """A backed-off group is due again at ``at`` at the latest (a reservation's delay or timeout)."""
        entry = self._entries.get(key)
        if entry is not None and entry.state is GroupState.BACKOFF and at < entry.ready_at:
            self._push_backoff(entry, at)

    def backoff_for(self, attempts: int) -> float:
        return min(self.backoff_initial * 2 ** max(attempts - 1, 0), self.backoff_max)

    def park(
        self, key: GroupKey, now: float, hints: Iterable[ClusterEvent], new_attempt: bool = True
    ) -> float:
        """The group failed: back off. ``new_attempt=False`` (a member's binding failed after a
        successful cycle) keeps an existing backoff instead of lengthening it."""
        entry = self._entry(key)
        if not new_attempt and entry.state is GroupState.BACKOFF:
            entry.hints = entry.hints | frozenset(hints)
            return entry.ready_at
        entry.attempts += 1
        entry.last_attempt = now
        entry.hints = frozenset(hints)
        ready_at = now + self.backoff_for(entry.attempts)
        self._push_backoff(entry, ready_at)
        return ready_at

    def park_until_event(self, key: GroupKey, now: float, hints: Iterable[ClusterEvent]) -> None:
        """The group failed for good as the cluster is: no timed retry, only an event (see the module
        docstring) makes it due again."""
        entry = self._entry(key)
        entry.attempts += 1
        entry.last_attempt = now
        entry.hints = frozenset(hints)
        entry.state = GroupState.PARKED
        self._held[key] = entry
        entry.ready_at = float("inf")
        entry.token += 1  # drop any earlier heap item

    def gate(self, key: GroupKey, until: Iterable[ClusterEvent] = frozenset(ClusterEvent)) -> None:
        """PreEnqueue failed: hold the group until one of the ``until`` group events (default: any)."""
        entry = self._entry(key)
        entry.state = GroupState.GATED
        self._held.pop(key, None)
        entry.hints = frozenset(until)

    def reset_attempts(self, key: GroupKey) -> None:
        """A member bound: the next failure backs off from the initial delay again."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.attempts = 0

    def remove(self, key: GroupKey) -> None:
        self._entries.pop(key, None)
        self._held.pop(key, None)

    def _promote_due(self, now: float) -> None:
        backoff = self._backoff
        while backoff and backoff[0][0] <= now:
            _, _, token, key = heapq.heappop(backoff)
            entry = self._entries.get(key)
            if entry is not None and entry.token == token and entry.state is GroupState.BACKOFF:
                self._push_active(entry)

    def pop(self, now: float) -> GroupKey | None:
        """The next group to schedule (now idle until it is queued again), or None."""
        self._promote_due(now)
        active = self._active
        while active:
            _, _, token, key = heapq.heappop(active)
            entry = self._entries.get(key)
            if entry is not None and entry.token == token and entry.state is GroupState.ACTIVE:
                entry.state = GroupState.IDLE
                return key
        return None

    def next_ready_at(self) -> float | None:
        """When the earliest backed-off group becomes due (None: nothing is backing off)."""
        backoff = self._backoff
        while backoff:
            ready_at, _, token, key = backoff[0]
            entry = self._entries.get(key)
            if entry is not None and entry.token == token and entry.state is GroupState.BACKOFF:
                return ready_at
            heapq.heappop(backoff)
        return None

    def has_active(self) -> bool:
        return any(
            (entry := self._entries.get(key)) is not None
            and entry.token == token
            and entry.state is GroupState.ACTIVE
            for _, _, token, key in self._active
        )

    def __len__(self) -> int:
        return sum(1 for e in self._entries.values() if e.state in (GroupState.ACTIVE, GroupState.BACKOFF))

    def position(self, key: GroupKey) -> tuple[int, int] | None:
        """(place, how many) of a group among the groups waiting to be placed (active, backing off
        or parked), in the order the queue tries them: priority, then first seen; None when the group
        does not wait (being scheduled, placed, or gated on its own pods or PodGroup)."""
        entry = self._entries.get(key)
        if entry is None or entry.state not in _WAITING:
            return None
        mine = (-entry.priority, entry.seq)
        waiting = [e for e in self._entries.values() if e.state in _WAITING]
        return 1 + sum(1 for e in waiting if (-e.priority, e.seq) < mine), len(waiting)

    def parked(self) -> int:
        """How many groups wait for an event, with no timed retry."""
        return sum(1 for e in self._entries.values() if e.state is GroupState.PARKED)
