"""A waiting group's place in the queue and its expected start (issue 28, point 2): computed by the
queue in the order it tries groups, said in the PodGroup status, and written alone at a bounded rate."""

from __future__ import annotations

from datetime import UTC, datetime

from lockstep.controller.status import (
    QUEUE_FIELDS,
    AttemptResult,
    AttemptSummary,
    Hold,
    MemberCounts,
    desired_status,
    hold_for,
)
from lockstep.scheduler.framework import GroupKey
from lockstep.scheduler.queue import GroupQueue

NOW = datetime(2026, 12, 1, tzinfo=UTC)
PODGROUP = {
    "metadata": {"name": "g", "namespace": "ns", "generation": 1},
    "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
}


def test_position_follows_priority_then_first_seen_among_waiting_groups() -> None:
    queue = GroupQueue(1.0, 60.0)
    low, high, later, gated = (GroupKey("ns", n) for n in ("low", "high", "later", "gated"))
    queue.add(low, 0, 0.0)
    queue.add(later, 0, 0.0)
    queue.add(high, 10, 0.0)
    queue.gate(gated)
    assert queue.position(high) == (1, 3)
    assert queue.position(low) == (2, 3)
    assert queue.position(later) == (3, 3)
    assert queue.position(gated) is None  # waits for its own pods or PodGroup, not for a turn
    assert queue.pop(0.0) == high
    assert queue.position(high) is None  # being scheduled
    queue.park_until_event(high, 0.0, ())
    assert queue.position(high) == (1, 3)  # parked, it still waits, with its priority


def summary(position: tuple[int, int] | None, start: str | None = None) -> AttemptSummary:
    return AttemptSummary(
        AttemptResult.UNSCHEDULABLE, "no fit", NOW, queue_position=position, expected_start=start
    )


def test_status_says_the_place_and_an_unknown_start_without_a_reservation() -> None:
    counts = MemberCounts(total=2)
    status = desired_status(PODGROUP, counts, summary((2, 5)), NOW)
    assert (status["queuePosition"], status["waitingGroups"], status["expectedStart"]) == (2, 5, "unknown")
    known = desired_status(PODGROUP, counts, summary((1, 5), "2026-12-01T00:05:00Z"), NOW)
    assert known["expectedStart"] == "2026-12-01T00:05:00Z"
    placed = desired_status(PODGROUP, MemberCounts(total=2, scheduled=2), summary(None), NOW)
    assert all(placed[field] is None for field in QUEUE_FIELDS)  # cleared once it no longer waits


def test_a_change_of_place_alone_is_held_and_with_anything_else_written_at_once() -> None:
    counts = MemberCounts(total=2)
    current = desired_status(PODGROUP, counts, summary((3, 5)), NOW)
    moved = desired_status(PODGROUP, counts, summary((2, 5)), NOW)
    assert hold_for(current, moved) is Hold.QUEUE
    retried = desired_status(PODGROUP, counts, summary((2, 5)), datetime(2026, 12, 1, 0, 1, tzinfo=UTC))
    retried["lastAttemptTime"] = "2026-12-01T00:01:00Z"
    assert hold_for(current, retried) is None
