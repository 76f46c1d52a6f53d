"""The group queue: order, exponential backoff, and which events hurry a parked group."""

from __future__ import annotations

import random

from lockstep.scheduler.framework import GroupKey
from lockstep.scheduler.queue import GroupQueue, GroupState
from lockstep.scheduler.scheduler import hints_for
from lockstep.state.cluster import ClusterEvent

A, B, C = GroupKey("ns", "a"), GroupKey("ns", "b"), GroupKey("ns", "c")


def test_priority_first_then_first_seen() -> None:
    queue = GroupQueue(1, 60)
    queue.add(A, priority=0, now=0)
    queue.add(B, priority=10, now=0)
    queue.add(C, priority=0, now=0)
    assert [queue.pop(0), queue.pop(0), queue.pop(0), queue.pop(0)] == [B, A, C, None]


def test_first_seen_order_survives_a_retry() -> None:
    queue = GroupQueue(1, 60)
    queue.add(A, 0, 0)
    assert queue.pop(0) == A
    queue.park(A, now=0, hints=())
    queue.add(B, 0, 0)
    assert queue.pop(0.5) == B
    queue.add(C, 0, 0)
    assert queue.pop(1.0) == A  # due again, and seen before C
    assert queue.pop(1.0) == C


def test_backoff_doubles_up_to_the_maximum() -> None:
    queue = GroupQueue(1, 10)
    now = 0.0
    delays = []
    queue.add(A, 0, now)
    for _ in range(6):
        assert queue.pop(now) == A
        ready_at = queue.park(A, now, hints=())
        delays.append(ready_at - now)
        assert queue.pop(ready_at - 0.001) is None
        now = ready_at
    assert delays == [1, 2, 4, 8, 10, 10]
    assert queue.attempts(A) == 6
    queue.pop(now)
    queue.reset_attempts(A)  # a member bound
    assert queue.attempts(A) == 0
    assert queue.park(A, now, hints=()) == now + 1


def test_an_event_hurries_only_groups_it_can_help_and_not_sooner_than_the_initial_backoff() -> None:
    queue = GroupQueue(1, 60)
    for key in (A, B):
        queue.add(key, 0, 0)
        queue.pop(0)
    for _ in range(4):  # long backoffs: 8 s
        queue.park(A, 0, hints_for({"InsufficientCPU": 3}))
        queue.park(B, 0, hints_for({"Taint": 3}))
    assert queue.on_event(ClusterEvent.ASSIGNED_POD_REMOVED, now=0.2) == 1
    assert queue.pop(0.5) is None  # the event came too soon after the attempt
    assert queue.pop(1.0) == A
    assert queue.pop(1.0) is None
    assert queue.next_ready_at() == 8
    queue.on_event(ClusterEvent.NODE_ADDED, now=3)
    assert queue.pop(3) == B


def test_an_event_for_an_unknown_cause_hurries_the_group() -> None:
    queue = GroupQueue(1, 60)
    queue.add(A, 0, 0)
    queue.pop(0)
    queue.park(A, 0, hints_for({"ClaimUnallocatable": 1}))
    queue.park(A, 0, hints_for({"ClaimUnallocatable": 1}))
    assert queue.on_event(ClusterEvent.CLAIMS_CHANGED, now=1.5) == 1
    assert queue.pop(1.5) == A


def test_a_group_event_reactivates_gated_groups_and_hurries_backed_off_ones() -> None:
    queue = GroupQueue(1, 60)
    queue.add(A, 0, 0)
    queue.pop(0)
    queue.gate(A)
    assert queue.state(A) is GroupState.GATED and queue.pop(0) is None
    queue.add(A, 0, 5)
    assert queue.pop(5) == A
    for _ in range(3):
        queue.park(A, 5, ())
    queue.add(A, 0, 5.5)  # e.g. a new member: retry at the initial backoff, not at +4 s
    assert queue.ready_at(A) == 6
    assert queue.pop(6) == A


def test_a_binding_failure_does_not_lengthen_an_existing_backoff() -> None:
    queue = GroupQueue(1, 60)
    queue.add(A, 0, 0)
    queue.pop(0)
    first = queue.park(A, 0, ())
    second = queue.park(A, 0.1, (), new_attempt=False)
    assert first == second == 1 and queue.attempts(A) == 1


def test_a_device_class_change_hurries_a_group_short_of_an_extended_resource_but_not_of_cpu() -> None:
    """A DeviceClass that starts providing ``example.com/gpu`` lets DRA serve it (DRAExtendedResource),
    as upstream's NodeResourcesFit requeues on DeviceClass events; cpu it cannot help."""
    assert ClusterEvent.CLAIMS_CHANGED in hints_for({"Insufficient[example.com/gpu]": 1})
    assert ClusterEvent.CLAIMS_CHANGED not in hints_for({"InsufficientCPU": 1})


def test_a_lowered_min_count_makes_a_backed_off_or_parked_group_active_at_once() -> None:
    queue = GroupQueue(1, 60)
    for key in (A, B):
        queue.add(key, 0, now=0)
        assert queue.pop(0) == key
    queue.park(A, now=0, hints=())
    queue.park_until_event(B, now=0, hints=())
    queue.add(A, 0, now=0.1, event=ClusterEvent.GROUP_UPDATED)
    queue.add(B, 0, now=0.1, event=ClusterEvent.GROUP_UPDATED)
    assert queue.pop(0.1) is None  # hurried, but not sooner than the initial backoff
    queue.add(A, 0, now=0.1, event=ClusterEvent.GROUP_MIN_COUNT_LOWERED, at_once=True)
    queue.add(B, 0, now=0.1, event=ClusterEvent.GROUP_MIN_COUNT_LOWERED, at_once=True)
    assert [queue.pop(0.1), queue.pop(0.1), queue.pop(0.1)] == [A, B, None]


WAITING = (GroupState.ACTIVE, GroupState.BACKOFF, GroupState.PARKED)


def _walked_position(queue: GroupQueue, key: GroupKey) -> tuple[int, int] | None:
    """The place by definition: a walk over every group, as the queue computed it before its index."""
    waiting = [
        k
        for k in queue._entries
        if queue.state(k) in (GroupState.ACTIVE, GroupState.BACKOFF, GroupState.PARKED)
    ]
    if key not in waiting:
        return None
    order = sorted(waiting, key=lambda k: (-queue._entries[k].priority, queue._entries[k].seq))
    return order.index(key) + 1, len(order)


def test_places_counts_and_hurried_groups_match_a_walk_over_every_group() -> None:
    """The queue's indexes (place in line, counts by state, groups by the events that hurry them)
    agree with walking every group after each of 3,000 operations of a fixed random sequence."""
    rng = random.Random(29)
    queue = GroupQueue(1, 60)
    keys = [GroupKey("ns", f"g{i}") for i in range(40)]
    events = list(ClusterEvent)
    now = 0.0
    for _ in range(3000):
        now += rng.random()
        key = rng.choice(keys)
        hints = rng.sample(events, rng.randint(0, 3))
        op = rng.randrange(9)
        if op == 0:
            queue.add(
                key, rng.choice((0, 0, 5, 10)), now, rng.choice((None, *events)), at_once=rng.random() < 0.2
            )
        elif op == 1:
            queue.pop(now)
        elif op == 2:
            queue.park(key, now, hints, new_attempt=rng.random() < 0.7)
        elif op == 3:
            queue.park_until_event(key, now, hints)
        elif op == 4:
            queue.gate(key, hints)
        elif op == 5:
            queue.remove(key)
        elif op == 6:
            event, source = rng.choice(events), rng.choice((None, key))
            expected = sum(
                1
                for k in queue._entries
                if queue.state(k) in (GroupState.BACKOFF, GroupState.PARKED)
                and event in queue._entries[k].hints
                and k != source
            )
            assert queue.on_event(event, now, source) == expected
        elif op == 7:
            queue.add(key, 0, now)
        else:
            queue.retry_by(key, now + rng.random())
        states = [queue.state(k) for k in keys]
        assert len(queue) == sum(s in (GroupState.ACTIVE, GroupState.BACKOFF) for s in states)
        assert queue.parked() == states.count(GroupState.PARKED)
        for k in keys:
            assert queue.position(k) == _walked_position(queue, k)
