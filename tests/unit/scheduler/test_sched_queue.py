"""The group queue: order, exponential backoff, and which events hurry a parked group."""

from __future__ import annotations

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
