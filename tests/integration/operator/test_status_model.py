"""PodGroup status computation: what the API shows bounds what the status claims."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.api.podgroup import PodGroupStatus
from lockstep.controller.status import (
    AttemptResult,
    AttemptSummary,
    GroupMembers,
    MemberCounts,
    ReasonCount,
    desired_status,
    status_differs,
)

NOW = datetime(2026, 11, 29, 21, 0, tzinfo=UTC)


def podgroup(min_count: int = 4, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "g", "generation": 3, "resourceVersion": "7"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        "status": status or {},
    }


def pod(name: str, node: str = "", phase: str = "Pending", group: str = "g") -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"uid-{name}",
            "labels": {POD_GROUP_LABEL: group},
        },
        "spec": {"nodeName": node} if node else {},
        "status": {"phase": phase},
    }


def test_scheduled_only_when_api_shows_min_count_node_names() -> None:
    placed = AttemptSummary(AttemptResult.SCHEDULED, "placed", NOW)
    status = desired_status(podgroup(4), MemberCounts(total=4, scheduled=3), placed, NOW)
    assert status["phase"] == "Scheduling"
    assert status["conditions"][-1]["status"] == "False"

    status = desired_status(podgroup(4), MemberCounts(total=4, scheduled=4), placed, NOW)
    assert status["phase"] == "Scheduled"
    assert status["conditions"][-1] | {"lastTransitionTime": None} == {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "4 of 4 pods bound (minCount 4)",
        "observedGeneration": 3,
        "lastTransitionTime": None,
    }
    PodGroupStatus.model_validate(status)


def test_condition_once_true_stays_true_and_keeps_transition_time() -> None:
    true_condition = {
        "type": "PodGroupScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "4 of 4 pods bound (minCount 4)",
        "observedGeneration": 3,
        "lastTransitionTime": "2026-11-29T20:00:00Z",
    }
    group = podgroup(4, {"conditions": [true_condition]})
    failing = AttemptSummary(AttemptResult.UNSCHEDULABLE, "no room", NOW)
    status = desired_status(group, MemberCounts(total=4, scheduled=1), failing, NOW)
    assert status["conditions"][-1] == {**true_condition, "message": "1 of 4 pods bound (minCount 4)"}
    assert [c["type"] for c in status["conditions"]] == ["PodGroupSatisfied", "PodGroupScheduled"]


def test_unschedulable_carries_reason_breakdown_and_retry_time() -> None:
    attempt = AttemptSummary(
        AttemptResult.UNSCHEDULABLE,
        "minCount (4) cannot be satisfied: 2 scheduled, 0 remaining",
        NOW,
        next_retry_at=NOW + timedelta(seconds=5),
        reasons=(ReasonCount("InsufficientCPU", 6, "6 nodes have too little cpu"), ReasonCount("Taint", 2)),
    )
    status = desired_status(podgroup(4), MemberCounts(total=4), attempt, NOW)
    assert status["phase"] == "Unschedulable"
    assert status["nextRetryTime"] == "2026-11-29T21:00:05Z"
    assert status["unschedulableReasons"] == [
        {"reason": "InsufficientCPU", "count": 6, "message": "6 nodes have too little cpu"},
        {"reason": "Taint", "count": 2},
    ]
    condition = status["conditions"][-1]
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "cannot be satisfied" in condition["message"]
    PodGroupStatus.model_validate(status)


def test_running_and_succeeded_phases_follow_member_phases() -> None:
    assert desired_status(podgroup(2), MemberCounts(2, 2, running=2), None, NOW)["phase"] == "Running"
    assert desired_status(podgroup(2), MemberCounts(2, 2, succeeded=2), None, NOW)["phase"] == "Succeeded"
    assert (
        desired_status(podgroup(2), MemberCounts(2, 2, running=1, failed=1), None, NOW)["phase"] == "Failed"
    )
    assert desired_status(podgroup(2), MemberCounts(0), None, NOW)["phase"] == "Pending"


def test_unchanged_status_needs_no_write() -> None:
    attempt = AttemptSummary(AttemptResult.WAITING, "waiting for 1 more pod", NOW)
    first = desired_status(podgroup(2), MemberCounts(total=1), attempt, NOW)
    later = desired_status(podgroup(2, first), MemberCounts(total=1), attempt, NOW + timedelta(minutes=1))
    assert not status_differs(first, later)
    moved = desired_status(podgroup(2, first), MemberCounts(total=2), attempt, NOW)
    assert status_differs(first, moved)


def test_group_members_follow_pod_events() -> None:
    members = GroupMembers()
    assert members.observe("ADDED", pod("a")) == [("ns", "g")]
    assert members.observe("ADDED", pod("a")) == []  # nothing changed
    assert members.observe("MODIFIED", pod("a", node="n1")) == [("ns", "g")]
    members.observe("ADDED", pod("b", node="n2", phase="Running"))
    assert members.counts(("ns", "g")) == MemberCounts(total=2, scheduled=2, running=1, pending=1)
    # a pod relabelled into another group leaves the first one
    assert members.observe("MODIFIED", pod("b", node="n2", group="h")) == [("ns", "g"), ("ns", "h")]
    assert members.counts(("ns", "g")).total == 1
    assert members.observe("DELETED", pod("a", node="n1")) == [("ns", "g")]
    assert members.counts(("ns", "g")) == MemberCounts()
    assert members.observe("ADDED", {"metadata": {"namespace": "ns", "name": "x", "uid": "x"}}) == []


def test_a_scheduler_error_leaves_the_group_pending_with_the_error_as_reason() -> None:
    attempt = AttemptSummary(AttemptResult.SCHEDULER_ERROR, "PATCH resourceclaims/status: 500", NOW)
    status = desired_status(podgroup(2), MemberCounts(total=2), attempt, NOW)
    assert status["phase"] == "Pending"
    condition = status["conditions"][-1]
    assert (condition["status"], condition["reason"]) == ("False", "SchedulerError")
    assert condition["message"] == "PATCH resourceclaims/status: 500"


def _condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")


def test_members_beyond_min_count_waiting_are_counted_and_said() -> None:
    placed = AttemptSummary(AttemptResult.SCHEDULED, "minCount (4) met with 4 scheduled", NOW)
    status = desired_status(podgroup(4), MemberCounts(total=6, scheduled=4, running=4), placed, NOW)
    assert status["waitingBeyondMinCount"] == 2
    assert status["phase"] == "Running" and _condition(status)["status"] == "True"
    assert (
        _condition(status)["message"] == "4 of 6 pods bound (minCount 4); 2 members beyond minCount waiting"
    )
    PodGroupStatus.model_validate(status)

    # The next extra binds: the count and the True condition's message follow in the same write.
    bound = desired_status(podgroup(4, status), MemberCounts(total=6, scheduled=5, running=4), placed, NOW)
    assert bound["waitingBeyondMinCount"] == 1
    assert _condition(bound)["lastTransitionTime"] == _condition(status)["lastTransitionTime"]
    assert _condition(bound)["message"].endswith("; 1 members beyond minCount waiting")
    everyone = desired_status(podgroup(4, bound), MemberCounts(total=6, scheduled=6, running=6), placed, NOW)
    assert everyone["waitingBeyondMinCount"] == 0
    assert _condition(everyone)["message"] == "6 of 6 pods bound (minCount 4)"


def test_a_raised_min_count_counts_only_members_beyond_it() -> None:
    running = desired_status(podgroup(4), MemberCounts(total=4, scheduled=4, running=4), None, NOW)
    waiting = AttemptSummary(
        AttemptResult.UNSCHEDULABLE, "minCount (6) cannot be satisfied: 4 scheduled, 0 remaining", NOW
    )
    # 4 -> 6 with 8 members: 2 of the 4 unbound are needed for minCount, 2 are beyond it.
    status = desired_status(podgroup(6, running), MemberCounts(total=8, scheduled=4, running=4), waiting, NOW)
    assert status["waitingBeyondMinCount"] == 2
    assert status["phase"] == "Unschedulable"
    condition = _condition(status)
    assert condition["status"] == "True"  # once True it stays True, as upstream
    assert condition["message"] == "4 of 8 pods bound (minCount 6); 2 members beyond minCount waiting"
    # 4 -> 6 with 6 members: every unbound member is needed.
    status = desired_status(podgroup(6, running), MemberCounts(total=6, scheduled=4, running=4), waiting, NOW)
    assert status["waitingBeyondMinCount"] == 0


def test_a_gang_not_yet_at_min_count_says_how_many_wait_beyond_it() -> None:
    failing = AttemptSummary(AttemptResult.UNSCHEDULABLE, "minCount (4) cannot be satisfied", NOW)
    status = desired_status(podgroup(4), MemberCounts(total=7), failing, NOW)
    assert status["waitingBeyondMinCount"] == 3
    assert _condition(status)["message"] == (
        "minCount (4) cannot be satisfied; 3 members beyond minCount waiting"
    )


def test_a_basic_group_has_no_waiting_beyond_min_count() -> None:
    group = {**podgroup(), "spec": {"schedulingPolicy": {"basic": {}}}}
    status = desired_status(group, MemberCounts(total=3, scheduled=1), None, NOW)
    assert status["waitingBeyondMinCount"] is None  # cleared, if an earlier gang status had it


def _satisfied(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "PodGroupSatisfied")


def test_satisfied_follows_running_and_succeeded_members_in_both_directions() -> None:
    counts = MemberCounts(total=4, scheduled=4, running=4, ready=3)
    status = desired_status(podgroup(4), counts, None, NOW)
    assert (status["running"], status["ready"], status["pending"]) == (4, 3, 0)
    up = _satisfied(status)
    assert (up["status"], up["reason"]) == ("True", "MinCountSatisfied")
    assert up["message"] == "4 of minCount 4 members running or succeeded (4 running, 0 succeeded, 0 failed)"
    PodGroupStatus.model_validate(status)

    # one failed: below minCount, with the count; then finishing members keep it True
    later = NOW + timedelta(seconds=5)
    failed = desired_status(
        podgroup(4, status), MemberCounts(total=4, scheduled=4, running=3, failed=1), None, later
    )
    down = _satisfied(failed)
    assert (down["status"], down["reason"]) == ("False", "BelowMinCount")
    assert down["message"].startswith("3 of minCount 4 members running or succeeded")
    assert down["lastTransitionTime"] != up["lastTransitionTime"]
    finishing = desired_status(
        podgroup(4, failed),
        MemberCounts(total=5, scheduled=5, running=2, succeeded=2, pending=1),
        None,
        later,
    )
    assert _satisfied(finishing)["status"] == "True"
    assert finishing["pending"] == 1


def test_a_satisfied_message_that_follows_the_counts_is_held_like_the_counts() -> None:
    from lockstep.controller.status import Hold, hold_for

    first = desired_status(podgroup(2), MemberCounts(total=3, scheduled=3, running=2), None, NOW)
    more = desired_status(podgroup(2, first), MemberCounts(total=3, scheduled=3, running=3), None, NOW)
    assert hold_for(first, more) is Hold.CONTAINERS  # no write per member starting
    fewer = desired_status(podgroup(2, first), MemberCounts(total=3, scheduled=3, running=1), None, NOW)
    assert hold_for(first, fewer) is not Hold.CONTAINERS  # a transition is not held as a count


def test_a_binding_that_waits_for_a_driver_is_held_like_a_passing_phase_not_the_backlog() -> None:
    from lockstep.controller.status import Hold, hold_for

    landing = AttemptSummary(AttemptResult.SCHEDULED, "minCount (2) met with 2 scheduled", NOW)
    attaching = AttemptSummary(
        AttemptResult.SCHEDULED, "waiting for binding conditions: m0 (example.com/attached)", NOW
    )
    before = desired_status(podgroup(2), MemberCounts(total=2), None, NOW)
    assert (
        hold_for(before, desired_status(podgroup(2, before), MemberCounts(total=2), landing, NOW))
        is Hold.BACKLOG
    )
    assert (
        hold_for(before, desired_status(podgroup(2, before), MemberCounts(total=2), attaching, NOW))
        is Hold.PASSING
    )


def test_a_running_gang_that_falls_back_to_binding_is_not_held_as_a_backlog() -> None:
    from lockstep.controller.status import Hold, hold_for

    placed = AttemptSummary(AttemptResult.SCHEDULED, "minCount (2) met with 2 scheduled", NOW)
    running = desired_status(podgroup(2), MemberCounts(total=2, scheduled=2, running=2), placed, NOW)
    assert running["phase"] == "Running"
    lost = desired_status(podgroup(2, running), MemberCounts(total=1, scheduled=1, running=1), placed, NOW)
    assert lost["phase"] == "Scheduling"
    assert hold_for(running, lost) is not Hold.BACKLOG  # a member lost is shown at once, not after 10 s


def test_what_containers_did_after_the_bindings_is_told_apart_from_what_the_scheduler_did() -> None:
    """The shutdown flush leaves the former to the next leader and writes the latter."""
    from lockstep.controller.status import follows_containers

    bound = desired_status(podgroup(4), MemberCounts(total=5, scheduled=4, pending=5), None, NOW)
    assert bound["phase"] == "Scheduled"
    running = desired_status(
        podgroup(4, bound), MemberCounts(total=5, scheduled=4, running=4, ready=4, pending=1), None, NOW
    )
    assert (running["phase"], _satisfied(running)["status"]) == ("Running", "True")
    assert follows_containers(bound, running)
    one_more_bound = desired_status(
        podgroup(4, bound), MemberCounts(total=5, scheduled=5, running=4, pending=1), None, NOW
    )
    assert not follows_containers(bound, one_more_bound)  # a binding: scheduled and its condition
    failed = desired_status(
        podgroup(4, running), MemberCounts(total=5, scheduled=5, running=1, failed=4), None, NOW
    )
    assert failed["phase"] == "Failed" and not follows_containers(running, failed)
    never_written = desired_status(podgroup(4), MemberCounts(total=5, scheduled=4, running=4), None, NOW)
    assert not follows_containers({}, never_written)  # the API does not show it bound yet
