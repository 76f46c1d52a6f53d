"""The preemption planner on the scheduler's cache, without a server: whom it picks and why."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from sched_helpers import FakeClock, gang, make_node, make_pod, make_scheduler, pod_dict, settle

from lockstep import POD_GROUP_LABEL
from lockstep.api.disruption_budget import parse_disruption_budget
from lockstep.api.pod import InvalidObjectError, parse_pod, preemption_message
from lockstep.scheduler.framework import DisruptionBudget, GroupKey, LabelRequirement
from lockstep.scheduler.ports import PatchOutcome, PatchResult
from lockstep.scheduler.preemption import REASON_GANG, REASON_POD, PlanResult, PlanVerdict
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache


def cluster(nodes: int = 2) -> tuple[Scheduler, ClusterCache]:
    scheduler, _, cache = make_scheduler()
    for i in range(nodes):
        cache.upsert_node(make_node(f"n{i}", cpu="4"))
    return scheduler, cache


def running_gang(cache: ClusterCache, name: str, nodes: list[str], min_count: int, priority: int) -> None:
    cache.upsert_podgroup(gang(name, min_count))
    for i, node in enumerate(nodes):
        cache.upsert_pod(make_pod(f"{name}-{i}", group=name, cpu="2", priority=priority, node_name=node))


def plan(
    scheduler: Scheduler, cache: ClusterCache, name: str, size: int, priority: int, **pod: Any
) -> PlanVerdict:
    cache.upsert_podgroup(gang(name, size))
    for i in range(size):
        cache.upsert_pod(make_pod(f"{name}-{i}", group=name, priority=priority, **{"cpu": "2", **pod}))
    key = GroupKey("default", name)
    return scheduler.planner.plan(key, cache.podgroup(key), cache.unscheduled_members(key), priority)


def victims(verdict: PlanVerdict) -> set[str]:
    assert verdict.plan is not None, verdict.message
    return {v.name for v in verdict.plan.victims}


def test_the_lowest_priority_that_suffices_then_the_fewest_pods() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "mid", ["n0", "n0"], 2, priority=50)
    running_gang(cache, "low-big", ["n1", "n1"], 2, priority=10)
    verdict = plan(scheduler, cache, "urgent", 2, priority=100)
    assert verdict.result is PlanResult.PLANNED
    assert victims(verdict) == {"low-big-0", "low-big-1"}  # never the priority-50 gang
    assert verdict.plan is not None and {node for _, node in verdict.plan.nominations} == {"n1"}
    assert set(verdict.plan.reasons.values()) == {REASON_GANG}


def test_a_gang_in_pod_mode_gives_what_it_can_spare_and_goes_whole_beyond() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "wide", ["n0", "n0", "n1", "n1"], 3, priority=10)  # one pod to spare
    one = plan(scheduler, cache, "one", 1, priority=100)
    assert len(victims(one)) == 1
    assert one.plan is not None and set(one.plan.reasons.values()) == {REASON_POD}
    two = plan(scheduler, cache, "two", 2, priority=100)
    assert victims(two) == {"wide-0", "wide-1", "wide-2", "wide-3"}  # two would leave it below minCount


def test_disruption_mode_pod_group_takes_the_whole_gang() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "wide", ["n0", "n0", "n1", "n1"], 1, priority=10)
    key = GroupKey("default", "wide")
    info = cache.podgroup(key)
    assert info is not None
    cache.upsert_podgroup(dataclasses.replace(info, disruption_mode="all"))
    verdict = plan(scheduler, cache, "one", 1, priority=100)
    assert victims(verdict) == {"wide-0", "wide-1", "wide-2", "wide-3"}


def test_a_podgroup_priority_outranks_its_members_priorities() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "important", ["n0", "n0", "n1", "n1"], 4, priority=10)
    info = cache.podgroup(GroupKey("default", "important"))
    assert info is not None
    cache.upsert_podgroup(dataclasses.replace(info, priority=500))  # its pods say 10, its PodGroup 500
    assert plan(scheduler, cache, "urgent", 1, priority=100).result is PlanResult.NO_PLAN


def test_a_plan_within_the_budgets_is_preferred() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "guarded", ["n0", "n0"], 2, priority=10)
    running_gang(cache, "free", ["n1", "n1"], 2, priority=10)
    cache.upsert_budget(
        DisruptionBudget(
            "default", "guard", True, (LabelRequirement(POD_GROUP_LABEL, "In", ("guarded",)),), 0
        )
    )
    verdict = plan(scheduler, cache, "urgent", 1, priority=100)
    assert victims(verdict) == {"free-0", "free-1"}
    assert verdict.plan is not None and verdict.plan.violated_budgets == ()

    cache.delete_pod("uid-default-free-0")
    cache.delete_pod("uid-default-free-1")
    cache.upsert_pod(make_pod("other", cpu="4", priority=500, node_name="n1"))
    forced = plan(scheduler, cache, "urgent2", 1, priority=100)
    assert victims(forced) == {"guarded-0", "guarded-1"}
    assert forced.plan is not None and forced.plan.violated_budgets == ("default/guard",)
    assert "violates PodDisruptionBudget default/guard" in forced.message


def test_equal_priority_never_and_unfit_plan_nothing() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "low", ["n0", "n0", "n1", "n1"], 4, priority=10)
    assert plan(scheduler, cache, "peer", 1, priority=10).result is PlanResult.NO_PLAN
    never = plan(scheduler, cache, "polite", 1, priority=100, preemptionPolicy="Never")
    assert never.result is PlanResult.NOT_ELIGIBLE
    unfit = plan(scheduler, cache, "huge", 1, priority=100, cpu="5")
    assert unfit.result is PlanResult.NO_PLAN
    assert "does not fit even with all 4 lower-priority pods preempted" in unfit.message


def test_a_podgroup_that_says_never_does_not_preempt_though_its_pods_would() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "low", ["n0", "n0", "n1", "n1"], 4, priority=10)
    assert plan(scheduler, cache, "eager", 1, priority=100).result is PlanResult.PLANNED
    key = GroupKey("default", "polite")
    cache.upsert_podgroup(dataclasses.replace(gang("polite", 1), preemption_policy="Never"))
    cache.upsert_pod(make_pod("polite-0", group="polite", priority=100, cpu="2"))
    verdict = scheduler.planner.plan(key, cache.podgroup(key), cache.unscheduled_members(key), 100)
    assert verdict.result is PlanResult.NOT_ELIGIBLE
    assert verdict.message == "the PodGroup's preemptionPolicy is Never: waits without preempting"


def test_pods_already_leaving_make_the_group_wait_instead_of_preempting_again() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "low-a", ["n0", "n0"], 2, priority=10)
    running_gang(cache, "low-b", ["n1", "n1"], 2, priority=10)
    for i in range(2):
        leaving = cache.get_pod(f"uid-default-low-a-{i}")
        assert leaving is not None
        cache.upsert_pod(dataclasses.replace(leaving, deleting=True))
    verdict = plan(scheduler, cache, "urgent", 2, priority=100)
    assert verdict.result is PlanResult.WAITING
    assert cache.get_pod("uid-default-low-b-0") is not None


def test_trials_leave_the_cache_as_it_was() -> None:
    scheduler, cache = cluster()
    running_gang(cache, "low", ["n0", "n0", "n1", "n1"], 4, priority=10)
    before = {name: dict(node.requested) for name, node in cache.nodes.items()}
    plan(scheduler, cache, "urgent", 2, priority=100)
    assert {name: dict(node.requested) for name, node in cache.nodes.items()} == before
    assert not any(cache.is_assumed(p.uid) for p in cache.pods.values())


def test_a_victim_names_its_preemptor_in_a_message_the_operator_reads_back() -> None:
    body = pod_dict("v", node_name="n0", preemptionPolicy="Never")
    body["status"]["nominatedNodeName"] = "n1"
    body["status"]["conditions"] = [
        {
            "type": "DisruptionTarget",
            "status": "True",
            "reason": "PreemptionByScheduler",
            "message": preemption_message(GroupKey("team", "urgent"), 1000),
        }
    ]
    pod = parse_pod(body)
    assert pod.preempted_by == GroupKey("team", "urgent")
    assert (pod.preemption_policy, pod.nominated_node_name) == ("Never", "n1")
    lone = preemption_message(GroupKey("team", "solo", pod_group=False), 5)
    assert lone == "lockstep: preempted by pod team/solo, priority 5"
    body["status"]["conditions"][0]["message"] = lone
    assert parse_pod(body).preempted_by == GroupKey("team", "solo", pod_group=False)
    body["status"]["conditions"][0]["reason"] = "EvictionByEvictionAPI"  # an eviction is not ours
    assert parse_pod(body).preempted_by is None


def test_a_pdb_covers_what_its_selector_matches_in_its_namespace_and_a_bad_operator_is_refused() -> None:
    def budget(selector: dict[str, Any] | None) -> dict[str, Any]:
        spec = {"minAvailable": 1} | ({"selector": selector} if selector is not None else {})
        return {
            "metadata": {"name": "b", "namespace": "default"},
            "spec": spec,
            "status": {"disruptionsAllowed": 2},
        }

    app = make_pod("a")
    selected = parse_disruption_budget(
        budget({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]})
    )
    assert selected.covers(app) and selected.disruptions_allowed == 2
    assert not parse_disruption_budget(budget(None)).covers(app)  # no selector: covers nothing
    assert parse_disruption_budget(budget({})).covers(app)  # empty selector: the whole namespace
    assert not parse_disruption_budget(budget({"matchLabels": {"app": "db"}})).covers(app)
    with pytest.raises(InvalidObjectError, match=r"spec\.selector\.matchExpressions\[0\]\.operator"):
        parse_disruption_budget(budget({"matchExpressions": [{"key": "x", "operator": "Like"}]}))


class FlakyPreemptionAPI:
    """Applies a preemption's writes to the cache as their watch events would; the first
    ``failing_deletes`` deletions answer an error."""

    def __init__(self, cache: ClusterCache, failing_deletes: int) -> None:
        self.cache = cache
        self.failing_deletes = failing_deletes
        self.marked: list[str] = []
        self.deleted: list[str] = []

    async def mark_disruption_target(self, pod: Any, message: str) -> PatchOutcome:
        self.marked.append(pod.name)
        body = pod_dict(
            pod.name, cpu="2", group=pod.group_name, priority=pod.priority, node_name=pod.node_name
        )
        body["status"]["conditions"] = [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": message,
            }
        ]
        self.cache.upsert_pod(parse_pod(body))
        return PatchOutcome(PatchResult.OK)

    async def delete_victim(self, pod: Any) -> PatchOutcome:
        if self.failing_deletes:
            self.failing_deletes -= 1
            return PatchOutcome(PatchResult.ERROR, "injected")
        self.deleted.append(pod.name)
        self.cache.delete_pod(pod.uid)
        return PatchOutcome(PatchResult.OK)

    async def nominate(self, pod: Any, node_name: str) -> PatchOutcome:
        current = self.cache.get_pod(pod.uid)
        if current is not None:
            self.cache.upsert_pod(dataclasses.replace(current, nominated_node_name=node_name))
        return PatchOutcome(PatchResult.OK)


async def test_a_victim_whose_deletion_failed_is_deleted_again_and_never_replaced_by_another() -> None:
    api = FlakyPreemptionAPI(ClusterCache("lockstep"), failing_deletes=1)
    clock = FakeClock()
    scheduler, pods, cache = make_scheduler(clock=clock, preemption_api=api)
    api.cache = cache
    for i in range(2):
        cache.upsert_node(make_node(f"n{i}", cpu="4"))
    running_gang(cache, "low-a", ["n0", "n0"], 2, priority=10)
    running_gang(cache, "low-b", ["n1", "n1"], 2, priority=10)
    cache.upsert_podgroup(gang("urgent", 1))
    pods.add(make_pod("urgent-0", group="urgent", cpu="2", priority=100))
    deadline = asyncio.get_running_loop().time() + 10
    while (
        asyncio.get_running_loop().time() < deadline and not cache.get_pod("uid-default-urgent-0").node_name
    ):
        await settle(scheduler)
        await asyncio.sleep(0.05)
        clock.advance(0.5)  # backoffs expire
    assert cache.get_pod("uid-default-urgent-0").node_name, "the preemptor was never bound"
    assert len(api.marked) == 2 and sorted(api.deleted) == sorted(api.marked)  # one plan, its two victims
    assert {name.rsplit("-", 1)[0] for name in api.marked} in ({"low-a"}, {"low-b"})
