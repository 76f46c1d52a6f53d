"""PlacementFeasible (docs/architecture.md behaviour 2): upstream's TestPlacementFeasible cases, same codes.

Each case feeds per-pod outcomes in order; after each pod, S grows on success and R shrinks, and
the status must be the expected one (the table stops where upstream's stops). Upstream's mock does
not say how many pods of the group exist in total, so these cases have at least minCount (other
members may be elsewhere in the queue); the "too few pods in total" case is tested on its own.
"""

from __future__ import annotations

import pytest

from lockstep.scheduler.cycle import placement_feasible
from lockstep.scheduler.framework import Code, PlacementProgress

S, W, U, UU = Code.SUCCESS, Code.WAIT, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE

# name, minCount (0: basic group), unscheduled pods, per-pod outcomes, expected codes, already scheduled
UPSTREAM_CASES = [
    ("All pods succeed, minCount met at end", 2, 2, [S, S], [W, S], 0),
    ("First pod fails, minCount not satisfiable", 3, 3, [U], [U], 0),
    ("Second pod fails, minCount not satisfiable", 2, 2, [S, U], [W, U], 0),
    ("Non-gang pod group ignored", 0, 1, [U], [S], 0),
    ("More than minCount pods, all succeed", 2, 3, [S, S, S], [W, S, S], 0),
    ("More than minCount pods, first fails", 2, 3, [U, S, S], [W, W, S], 0),
    ("More than minCount pods, minCount not satisfiable", 2, 3, [U, U, S], [W, U, U], 0),
    ("1 pod scheduled, 2 unscheduled pods succeed, minCount 3 met", 3, 2, [S, S], [W, S], 1),
    ("minCount already met by scheduled pods", 2, 1, [U], [S], 2),
    ("1 pod scheduled, minCount 3, first unscheduled fails, not enough remaining", 3, 2, [U], [U], 1),
    ("1 pod scheduled, minCount 4, first unscheduled succeeds, not enough remaining", 4, 2, [S], [U], 1),
]


@pytest.mark.parametrize(
    ("min_count", "pods", "outcomes", "expected", "scheduled"),
    [case[1:] for case in UPSTREAM_CASES],
    ids=[case[0] for case in UPSTREAM_CASES],
)
def test_upstream_placement_feasible_cases(
    min_count: int, pods: int, outcomes: list[Code], expected: list[Code], scheduled: int
) -> None:
    is_gang = min_count > 0
    remaining = pods
    total = max(pods + scheduled, min_count)
    got = []
    for outcome in outcomes:
        remaining -= 1
        if outcome is S:
            scheduled += 1
        progress = PlacementProgress(scheduled, remaining, max(min_count, 1), total)
        got.append(placement_feasible(progress, is_gang).code)
    assert got == expected


def test_too_few_pods_in_total_is_unresolvable() -> None:
    status = placement_feasible(PlacementProgress(scheduled=1, remaining=2, min_count=4, total_pods=3))
    assert status.code is UU
    assert status.cause == "TooFewPods"
    assert "minCount (4) cannot be satisfied: only 3 pods exist" in status.message


def test_messages_follow_upstream_wording() -> None:
    wait = placement_feasible(PlacementProgress(1, 2, 3, 3))
    fail = placement_feasible(PlacementProgress(0, 1, 3, 3))
    assert wait.message == "minCount (3) is not yet satisfied: 1 scheduled, 2 remaining"
    assert fail.message == "minCount (3) cannot be satisfied: 0 scheduled, 1 remaining"
