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

Every state change goes through ``GroupQueue._move``, which keeps two indexes: the waiting groups in
the order they are tried (so a group's place costs O(log n), not a walk over every group) and the
backed-off and parked groups by the events that can hurry them (so a cluster event visits only those).
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
_HINTED = frozenset({GroupState.BACKOFF, GroupState.PARKED})


class _Counts:
    """How many of a set of sequence numbers (0, 1, 2, ...) are present, and how many below a given
    one: a Fenwick tree over a bitmap that doubles as the numbers grow (O(log n) per operation,
    amortized)."""

    __slots__ = ("_present", "_tree", "size")

    def __init__(self) -> None:
        self._present = bytearray()
        self._tree: list[int] = [0]
        self.size = 0

    def _grow(self, seq: int) -> None:
        capacity = max(2 * len(self._present), seq + 1, 64)
        self._present.extend(bytes(capacity - len(self._present)))
        tree = [0, *self._present]
        for i in range(1, len(tree)):
            parent = i + (i & -i)
            if parent < len(tree):
                tree[parent] += tree[i]
        self._tree = tree

    def _update(self, seq: int, delta: int) -> None:
        tree, i = self._tree, seq + 1
        while i < len(tree):
            tree[i] += delta
            i += i & -i

    def add(self, seq: int) -> None:
        if seq >= len(self._present):
            self._grow(seq)
        if not self._present[seq]:
            self._present[seq] = 1
            self.size += 1
            self._update(seq, 1)

    def discard(self, seq: int) -> None:
        if seq < len(self._present) and self._present[seq]:
            self._present[seq] = 0
            self.size -= 1
            self._update(seq, -1)

    def below(self, seq: int) -> int:
        tree, i, total = self._tree, min(seq, len(self._present)), 0
        while i > 0:
            total += tree[i]
            i -= i & -i
        return total


class _WaitingOrder:
    """The waiting groups by (priority, highest first; then sequence number): a group's place is the
    count of groups at higher priorities (few distinct values: PriorityClasses) plus those before it
    at its own."""

    __slots__ = ("_levels", "size")

    def __init__(self) -> None:
        self._levels: dict[int, _Counts] = {}
        self.size = 0

    def add(self, priority: int, seq: int) -> None:
        level = self._levels.get(priority)
        if level is None:
            level = self._levels[priority] = _Counts()
        level.add(seq)
        self.size += 1

    def discard(self, priority: int, seq: int) -> None:
        level = self._levels[priority]
        level.discard(seq)
        self.size -= 1
        if not level.size:
            del self._levels[priority]  # its bitmap spans every sequence number seen: drop it

    def place(self, priority: int, seq: int) -> int:
        ahead = sum(level.size for p, level in self._levels.items() if p > priority)
        return 1 + ahead + self._levels[priority].below(seq)


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
        self._active: list[tuple[int, int, int, GroupKey]] = []
        self._backoff: list[tuple[float, int, int, GroupKey]] = []
        self._seq = itertools.count()
        self._waiting = _WaitingOrder()
        self._hinted: dict[ClusterEvent, dict[GroupKey, _Entry]] = {}  # backed off or parked
        self._counts = dict.fromkeys(GroupState, 0)

    def _move(
        self,
        entry: _Entry,
        state: GroupState,
        priority: int | None = None,
        hints: frozenset[ClusterEvent] | None = None,
    ) -> None:
        """Change a group's state (and its priority or hints) and the indexes that depend on them."""
        old_state, old_priority, old_hints = entry.state, entry.priority, entry.hints
        new_priority = old_priority if priority is None else priority
        new_hints = old_hints if hints is None else hints
        was_waiting, waiting = old_state in _WAITING, state in _WAITING
        if was_waiting and (not waiting or new_priority != old_priority):
            self._waiting.discard(old_priority, entry.seq)
        if waiting and (not was_waiting or new_priority != old_priority):
            self._waiting.add(new_priority, entry.seq)
        was_hinted, hinted = old_state in _HINTED, state in _HINTED
        if was_hinted and (not hinted or new_hints != old_hints):
            for event in old_hints:
                self._hinted[event].pop(entry.key, None)
        if hinted and (not was_hinted or new_hints != old_hints):
            for event in new_hints:
                self._hinted.setdefault(event, {})[entry.key] = entry
        self._counts[old_state] -= 1
        self._counts[state] += 1
        entry.state, entry.priority, entry.hints = state, new_priority, new_hints

    def _entry(self, key: GroupKey) -> _Entry:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(key, next(self._seq))
            self._counts[GroupState.IDLE] += 1
        return entry

    def _push_active(self, entry: _Entry, priority: int | None = None) -> None:
        self._move(entry, GroupState.ACTIVE, priority)
        entry.token += 1
        heapq.heappush(self._active, (-entry.priority, entry.seq, entry.token, entry.key))

    def _push_backoff(
        self, entry: _Entry, ready_at: float, hints: frozenset[ClusterEvent] | None = None
    ) -> None:
        self._move(entry, GroupState.BACKOFF, hints=hints)
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
            self._push_active(entry, max(entry.priority, priority) if waiting else priority)
        elif waiting:
            if priority > entry.priority:
                self._move(entry, entry.state, priority)
            self._hurry(entry, now)

    def _hurry(self, entry: _Entry, now: float) -> None:
        earliest = max(now, entry.last_attempt + self.backoff_initial)
        if earliest < entry.ready_at:
            self._push_backoff(entry, earliest)

    def on_event(self, event: ClusterEvent, now: float, source: GroupKey | None = None) -> int:
        """A cluster-wide event: hurry the backed-off groups it could help, except the group whose
        own failure caused it (``source``). Returns how many."""
        helped = 0
        for entry in list(self._hinted.get(event, {}).values()):
            if entry.key != source:
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
            self._move(entry, entry.state, hints=entry.hints | frozenset(hints))
            return entry.ready_at
        entry.attempts += 1
        entry.last_attempt = now
        ready_at = now + self.backoff_for(entry.attempts)
        self._push_backoff(entry, ready_at, frozenset(hints))
        return ready_at

    def park_until_event(self, key: GroupKey, now: float, hints: Iterable[ClusterEvent]) -> None:
        """The group failed for good as the cluster is: no timed retry, only an event (see the module
        docstring) makes it due again."""
        entry = self._entry(key)
        entry.attempts += 1
        entry.last_attempt = now
        self._move(entry, GroupState.PARKED, hints=frozenset(hints))
        entry.ready_at = float("inf")
        entry.token += 1  # drop any earlier heap item

    def gate(self, key: GroupKey, until: Iterable[ClusterEvent] = frozenset(ClusterEvent)) -> None:
        """PreEnqueue failed: hold the group until one of the ``until`` group events (default: any)."""
        self._move(self._entry(key), GroupState.GATED, hints=frozenset(until))

    def reset_attempts(self, key: GroupKey) -> None:
        """A member bound: the next failure backs off from the initial delay again."""
        entry = self._entries.get(key)
        if entry is not None:
            entry.attempts = 0

    def remove(self, key: GroupKey) -> None:
        entry = self._entries.get(key)
        if entry is not None:
            self._move(entry, GroupState.IDLE)
            self._counts[GroupState.IDLE] -= 1
            del self._entries[key]

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
                self._move(entry, GroupState.IDLE)
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
        return self._counts[GroupState.ACTIVE] + self._counts[GroupState.BACKOFF]

    def position(self, key: GroupKey) -> tuple[int, int] | None:
        """(place, how many) of a group among the groups waiting to be placed (active, backing off
        or parked), in the order the queue tries them: priority, then first seen; None when the group
        does not wait (being scheduled, placed, or gated on its own pods or PodGroup)."""
        entry = self._entries.get(key)
        if entry is None or entry.state not in _WAITING:
            return None
        return self._waiting.place(entry.priority, entry.seq), self._waiting.size

    def parked(self) -> int:
        """How many groups wait for an event, with no timed retry."""
        return self._counts[GroupState.PARKED]
