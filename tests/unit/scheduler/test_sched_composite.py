"""CompositePodGroups (KEP-6012): hierarchies of gangs placed in one cycle, top-down.

The trees are upstream's: ``test/integration/scheduler/podgroup`` ``TestCPGHierarchicalScheduling``,
``TestCPGMinGroupCount``, ``TestCPGBasicWithGangChildren``, and KEP-6012's multi-level topology example
(a block holding two gangs of a rack each), at their own sizes."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
from pydantic import ValidationError
from sched_helpers import FakeClock, gang, make_node, make_pod, make_scheduler, settle
from test_preemption_planner import FlakyPreemptionAPI

from lockstep.api.composite_podgroup import CompositePodGroup
from lockstep.api.groups import UnknownPriorityClassError, from_composite, from_lockstep, from_upstream
from lockstep.api.podgroup import PodGroup
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.scheduler.composite import COMPOSITE_NOT_FOUND, INVALID_HIERARCHY, root_of
from lockstep.scheduler.framework import Code, CompositeInfo, GroupKey, PodGroupInfo
from lockstep.scheduler.preemption import PreemptionPlan
from lockstep.state.cluster import ClusterCache

BLOCK = "example.com/block"
RACK = "example.com/rack"


def composite(name: str, min_groups: int | None, parent: str = "", **kwargs: object) -> CompositeInfo:
    """A gang composite of ``min_groups`` (None: basic)."""
    return CompositeInfo(
        "default",
        name,
        uid=f"uid-{name}",
        parent=parent,
        is_gang=min_groups is not None,
        min_group_count=min_groups or 1,
        **kwargs,  # type: ignore[arg-type]
    )


def child(name: str, min_count: int | None, parent: str, **kwargs: object) -> PodGroupInfo:
    group = gang(name, min_count or 1)
    if min_count is None:
        group = dataclasses.replace(group, is_gang=False)
    return dataclasses.replace(group, parent=parent, **kwargs)  # type: ignore[arg-type]


def pods(api: object, group: str, count: int, cpu: str = "1") -> None:
    for i in range(count):
        api.add(make_pod(f"{group}-pod-{i}", cpu=cpu, group=group))  # type: ignore[attr-defined]


def bound(api: object, group: str) -> int:
    return sum(1 for p in api.pods.values() if p.name.startswith(f"{group}-") and p.node_name)  # type: ignore[attr-defined]


async def test_hierarchical_scheduling_three_levels_with_gang_and_basic_composites() -> None:
    """TestCPGHierarchicalScheduling: cpg-root (gang 2) over cpg-sub1 (gang 2: pg1 S, pg2 S, pg3 F),
    cpg-sub2 (basic: pg4 basic S, pg5 S) and cpg-sub3 (gang 2: pg6 S, pg7 F). pg6 is not placed: its
    parent cannot reach minGroupCount."""
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    cache.upsert_composite(composite("cpg-root", 2))
    for name, min_groups in (("cpg-sub1", 2), ("cpg-sub2", None), ("cpg-sub3", 2)):
        cache.upsert_composite(composite(name, min_groups, parent="cpg-root"))
    layout = {
        "pg1": (3, "cpg-sub1", "1"),
        "pg2": (3, "cpg-sub1", "1"),
        "pg3": (3, "cpg-sub1", "100"),
        "pg4": (None, "cpg-sub2", "1"),
        "pg5": (3, "cpg-sub2", "1"),
        "pg6": (3, "cpg-sub3", "1"),
        "pg7": (3, "cpg-sub3", "100"),
    }
    for name, (min_count, parent, cpu) in layout.items():
        cache.upsert_podgroup(child(name, min_count, parent))
        pods(api, name, 3, cpu)
    await settle(scheduler)
    assert {name: bound(api, name) for name in layout} == {
        "pg1": 3, "pg2": 3, "pg3": 0, "pg4": 3, "pg5": 3, "pg6": 0, "pg7": 0,
    }  # fmt: skip
    verdicts = scheduler.composite_verdicts
    assert verdicts[("default", "cpg-root")].status.ok
    assert verdicts[("default", "cpg-root")].placed_whole == 2
    assert verdicts[("default", "cpg-sub3")].status.code is Code.UNSCHEDULABLE
    assert (
        "minGroupCount 2: 1 of 2 child groups placed whole"
        in verdicts[("default", "cpg-sub3")].status.message
    )
    pg6 = scheduler.attempts[GroupKey("default", "pg6")]
    assert pg6.code is Code.UNSCHEDULABLE
    assert "CompositePodGroup default/cpg-sub3" in pg6.message


async def test_min_group_count_binds_the_children_that_fit_whole() -> None:
    """TestCPGMinGroupCount: root gang 2 over pg1 (S), pg2 (S), pg3 (F: one member asks for 100 cpu)."""
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    cache.upsert_composite(composite("cpg-root", 2))
    for name in ("pg1", "pg2", "pg3"):
        cache.upsert_podgroup(child(name, 3, "cpg-root"))
    pods(api, "pg1", 3)
    pods(api, "pg2", 3)
    api.add(make_pod("pg3-pod-0", cpu="100", group="pg3"))
    for i in (1, 2):
        api.add(make_pod(f"pg3-pod-{i}", cpu="1", group="pg3"))
    await settle(scheduler)
    assert (bound(api, "pg1"), bound(api, "pg2"), bound(api, "pg3")) == (3, 3, 0)
    assert scheduler.composite_verdicts[("default", "cpg-root")].status.ok


async def test_min_group_count_not_met_places_nothing_of_the_hierarchy() -> None:
    """The same tree with minGroupCount 3: all or nothing, pg1's and pg2's members stay pending."""
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    cache.upsert_composite(composite("cpg-root", 3))
    for name, cpu in (("pg1", "1"), ("pg2", "1"), ("pg3", "100")):
        cache.upsert_podgroup(child(name, 3, "cpg-root"))
        pods(api, name, 3, cpu)
    await settle(scheduler)
    assert not api.bind_calls
    verdict = scheduler.composite_verdicts[("default", "cpg-root")]
    assert verdict.status.code is Code.UNSCHEDULABLE and verdict.placed_whole == 2
    attempt = scheduler.attempts[GroupKey("default", "pg1")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert (
        "CompositePodGroup default/cpg-root: minGroupCount 3: 2 of 3 child groups placed whole"
        in attempt.message
    )


async def test_basic_composite_lets_its_gangs_schedule_independently() -> None:
    """TestCPGBasicWithGangChildren: a basic root over pg1 (S) and pg2 (F)."""
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    cache.upsert_composite(composite("cpg-root", None))
    for name, cpu in (("pg1", "1"), ("pg2", "100")):
        cache.upsert_podgroup(child(name, 3, "cpg-root"))
        pods(api, name, 3, cpu)
    await settle(scheduler)
    assert (bound(api, "pg1"), bound(api, "pg2")) == (3, 0)


def _blocks(cache: object, layout: dict[str, int]) -> None:
    """layout: "block/rack" -> nodes of one slot each."""
    for path, count in layout.items():
        block, rack = path.split("/")
        for i in range(count):
            node = make_node(f"{block}-{rack}-{i}", cpu="1", labels={BLOCK: block, RACK: rack})
            cache.upsert_node(node)  # type: ignore[attr-defined]


async def test_kep_example_each_child_in_a_rack_all_in_one_block() -> None:
    """KEP-6012 "Multi-level topology-aware scheduling", Example: CPG-root (gang 2, block) over PG-1
    and PG-2 (gangs of 5, rack). block-A has racks of 3 and 5 slots, block-B two racks of 5: block-A
    holds PG-1 only, so both go to block-B, one rack each."""
    scheduler, api, cache = make_scheduler()
    _blocks(cache, {"a/a1": 3, "a/a2": 5, "b/b1": 5, "b/b2": 5})
    cache.upsert_composite(composite("cpg-root", 2, topology_keys=(BLOCK,)))
    for name in ("pg-1", "pg-2"):
        cache.upsert_podgroup(child(name, 5, "cpg-root", topology_keys=(RACK,)))
        pods(api, name, 5)
    await settle(scheduler)
    racks = {
        name: {p.node_name.rsplit("-", 1)[0] for p in api.pods.values() if p.name.startswith(name)}
        for name in ("pg-1", "pg-2")
    }
    assert len(racks["pg-1"]) == 1 and len(racks["pg-2"]) == 1  # each child in one rack
    assert racks["pg-1"] | racks["pg-2"] == {"b-b1", "b-b2"}  # its own rack, both in block b
    verdict = scheduler.composite_verdicts[("default", "cpg-root")]
    # upstream simulates both blocks and scores the feasible one; best fit tries block b first, the
    # only one with room for all 10 members, and it holds both children
    assert [(t.domain, t.chosen) for t in verdict.topology] == [(f"{BLOCK}=b", True)]


async def test_a_block_without_room_for_all_is_still_tried_and_released_when_a_child_does_not_fit() -> None:
    """Block a has 10 slots but racks of 5 and 3+2: PG-2 finds no rack there; block a is released and
    block b (racks 5 and 5, one node more) takes both."""
    scheduler, api, cache = make_scheduler()
    _blocks(cache, {"a/a1": 5, "a/a2": 3, "a/a3": 2, "b/b1": 5, "b/b2": 6})
    cache.upsert_composite(composite("cpg-root", 2, topology_keys=(BLOCK,)))
    for name in ("pg-1", "pg-2"):
        cache.upsert_podgroup(child(name, 5, "cpg-root", topology_keys=(RACK,)))
        pods(api, name, 5)
    await settle(scheduler)
    assert {p.node_name.split("-")[0] for p in api.pods.values()} == {"b"}
    tries = scheduler.composite_verdicts[("default", "cpg-root")].topology
    assert [(t.domain, t.chosen) for t in tries] == [(f"{BLOCK}=a", False), (f"{BLOCK}=b", True)]
    assert "PodGroup default/pg-2" in tries[0].verdict


async def test_no_block_holds_the_children_nothing_is_placed_and_the_status_names_the_blocks() -> None:
    scheduler, api, cache = make_scheduler()
    _blocks(cache, {"a/a1": 5, "a/a2": 2, "b/b1": 5, "b/b2": 2})
    cache.upsert_composite(composite("cpg-root", 2, topology_keys=(BLOCK,)))
    for name in ("pg-1", "pg-2"):
        cache.upsert_podgroup(child(name, 5, "cpg-root", topology_keys=(RACK,)))
        pods(api, name, 5)
    await settle(scheduler)
    assert not api.bind_calls
    message = scheduler.composite_verdicts[("default", "cpg-root")].status.message
    assert f"no single {BLOCK} domain holds its child groups" in message
    assert f"{BLOCK}=a" in message and f"{BLOCK}=b" in message


async def test_a_child_naming_a_missing_composite_waits_and_its_pods_are_told_the_field() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    cache.upsert_podgroup(child("pg1", 2, "nowhere"))
    pods(api, "pg1", 2)
    await settle(scheduler)
    assert not api.bind_calls
    attempt = scheduler.attempts[GroupKey("default", "pg1")]
    assert attempt.code is Code.WAIT
    assert (
        "spec.parentCompositePodGroupName: CompositePodGroup default/nowhere does not exist"
        in attempt.message
    )
    told = {pod for pod, _, reason in api.patch_calls if reason == COMPOSITE_NOT_FOUND}
    assert told == {"default/pg1-pod-0", "default/pg1-pod-1"}
    assert "does not exist" in api.pods["default/pg1-pod-0"].scheduled_condition.message
    cache.upsert_composite(composite("nowhere", 1))
    await settle(scheduler)
    assert bound(api, "pg1") == 2


def test_cycles_and_depth_are_invalid_hierarchies() -> None:
    _, _, cache = make_scheduler()
    cache.upsert_composite(composite("a", 1, parent="b"))
    cache.upsert_composite(composite("b", 1, parent="a"))
    problem = root_of(cache, child("pg", 1, "a"))
    assert not isinstance(problem, CompositeInfo) and problem.cause == INVALID_HIERARCHY
    assert "cycle: a -> b -> a" in problem.message
    for name, parent in (("c1", "c2"), ("c2", "c3"), ("c3", "c4"), ("c4", "")):
        cache.upsert_composite(composite(name, 1, parent=parent))
    deep = root_of(cache, child("pg", 1, "c1"))
    assert not isinstance(deep, CompositeInfo) and "deeper than 4 levels" in deep.message
    assert root_of(cache, child("pg", 1, "c2")) == cache.composite("default", "c4")


# --- preemption (scheduler_perf/cpg: CPGPreemptionBasic, CPGPreemptionCPG, at their 2-node sizes) ----


async def _until_bound(scheduler: object, api: object, clock: FakeClock, names: list[str]) -> None:
    deadline = asyncio.get_running_loop().time() + 10
    while asyncio.get_running_loop().time() < deadline:
        await settle(scheduler)  # type: ignore[arg-type]
        if all(api.pods[f"default/{name}"].node_name for name in names):  # type: ignore[attr-defined]
            return
        await asyncio.sleep(0.05)
        clock.advance(0.5)  # backoffs expire
    raise AssertionError(f"not bound: {names}")


async def test_a_composite_preempts_lower_priority_pods_for_its_whole_tree() -> None:
    """CPGPreemptionBasic: 2 nodes full of low-priority pods; a CPG (gang 2) of two one-pod gangs of
    nearly a node each preempts what it needs and binds both children."""
    clock = FakeClock()
    preemption = FlakyPreemptionAPI(ClusterCache("lockstep"), failing_deletes=0)
    scheduler, api, cache = make_scheduler(clock=clock, preemption_api=preemption)
    preemption.cache = cache
    for node in ("n0", "n1"):
        cache.upsert_node(make_node(node, cpu="4"))
        for i in range(2):
            cache.upsert_pod(make_pod(f"low-{node}-{i}", cpu="2", priority=10, node_name=node))
    cache.upsert_composite(composite("cpg", 2, priority=100))
    for name in ("pg-0", "pg-1"):
        cache.upsert_podgroup(child(name, 1, "cpg"))
        api.add(make_pod(f"{name}-pod-0", cpu="3", group=name, priority=100))
    await _until_bound(scheduler, api, clock, ["pg-0-pod-0", "pg-1-pod-0"])
    assert len(preemption.deleted) == 4  # 3 cpu on each node: both low pods of each node go


async def test_a_composite_in_disruption_mode_all_is_preempted_whole() -> None:
    """CPGPreemptionCPG: a low-priority CPG in disruptionMode all over two one-pod gangs, one on each
    node; the preemptor needs one node only, yet the whole low CPG goes (KEP-6012: the highest ancestor
    in mode all is the preemption unit), while a single-mode CPG loses only the child in the way."""
    for mode, expected in (("all", {"low-0-pod-0", "low-1-pod-0"}), ("single", None)):
        clock = FakeClock()
        preemption = FlakyPreemptionAPI(ClusterCache("lockstep"), failing_deletes=0)
        scheduler, api, cache = make_scheduler(clock=clock, preemption_api=preemption)
        preemption.cache = cache
        plans: list[PreemptionPlan] = []
        scheduler.on_preempted = plans.append
        cache.upsert_composite(composite("low", 2, priority=10, disruption_mode=mode))
        for i, node in enumerate(("n0", "n1")):
            cache.upsert_node(make_node(node, cpu="4"))
            cache.upsert_podgroup(child(f"low-{i}", 1, "low"))
            cache.upsert_pod(
                make_pod(f"low-{i}-pod-0", cpu="2", group=f"low-{i}", priority=10, node_name=node)
            )
            cache.upsert_pod(make_pod(f"filler-{i}", cpu="2", priority=50, node_name=node))
        cache.upsert_composite(composite("high", 1, priority=100))
        cache.upsert_podgroup(child("urgent", 1, "high"))
        api.add(make_pod("urgent-pod-0", cpu="2", group="urgent", priority=100))
        await _until_bound(scheduler, api, clock, ["urgent-pod-0"])
        if expected is not None:
            assert set(preemption.deleted) == expected
            assert plans[0].composites == (("default", "low"),)  # its DisruptionTarget is written
        else:
            assert plans[0].composites == ()
            assert len(preemption.deleted) == 1 and preemption.deleted[0].startswith("low-")


# --- the adapters: both PodGroup shapes name the parent; a CompositePodGroup is a group of groups ----


def test_both_podgroup_shapes_carry_the_parent_and_a_composite_parses_into_the_group_of_groups() -> None:
    spec = {"parentCompositePodGroupName": "training", "schedulingPolicy": {"gang": {"minCount": 2}}}
    meta = {"name": "r0", "namespace": "demo"}
    upstream = UpstreamPodGroup.model_validate(
        {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta, "spec": spec}
    )
    assert from_upstream(upstream, {}).parent == "training"
    own = PodGroup.model_validate(
        {"apiVersion": "scheduling.lockstep.dev/v1alpha1", "kind": "PodGroup", "metadata": meta, "spec": spec}
    )
    assert from_lockstep(own, {}).parent == "training"
    raw = {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": "training", "namespace": "demo", "uid": "u1", "generation": 1},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "t"},
            "schedulingPolicy": {"gang": {"minGroupCount": 3}},
            "schedulingConstraints": {"topology": [{"key": BLOCK}]},
            "disruptionMode": {"all": {}},
            "priorityClassName": "high",
        },
        "status": {
            "conditions": [
                {
                    "type": "CompositePodGroupInitiallyScheduled",
                    "status": "True",
                    "reason": "Scheduled",
                    "message": "",
                    "lastTransitionTime": "2026-12-01T00:00:00Z",
                }
            ]
        },
    }
    info = from_composite(CompositePodGroup.model_validate(raw), {"high": 1000})
    assert (info.is_gang, info.min_group_count, info.topology_keys) == (True, 3, (BLOCK,))
    assert (info.disruption_mode, info.priority, info.once_scheduled) == ("all", 1000, True)
    basic = dict(raw, spec={**raw["spec"], "schedulingPolicy": {"basic": {}}, "priorityClassName": None})
    assert not from_composite(CompositePodGroup.model_validate(basic), {}).is_gang
    with pytest.raises(
        UnknownPriorityClassError, match=r"CompositePodGroup demo/training: spec\.priorityClassName"
    ):
        from_composite(CompositePodGroup.model_validate(raw), {})
    bad = dict(raw, spec={**raw["spec"], "schedulingPolicy": {"gang": {"minGroupCount": 0}}})
    with pytest.raises(ValidationError, match="minGroupCount"):
        CompositePodGroup.model_validate(bad)


async def test_a_refused_composite_refuses_its_hierarchy_naming_the_field() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("node1", cpu="20"))
    refusal = "CompositePodGroup default/bad: spec.schedulingPolicy.gang.minGroupCount: must be >= 1"
    cache.upsert_composite(CompositeInfo("default", "bad", refusal=refusal))
    cache.upsert_podgroup(child("pg1", 1, "bad"))
    pods(api, "pg1", 1)
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "pg1")]
    assert attempt.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "spec.parentCompositePodGroupName" in attempt.message and "minGroupCount" in attempt.message
    assert not api.bind_calls


async def test_a_child_s_racks_are_the_composite_block_s_even_where_rack_names_repeat() -> None:
    """Rack r1 in block a and rack r1 in block b are two racks: inside block a a child sees only a's r1.
    Each block has one rack of 3, so two gangs of 3 each in a rack cannot share a block: none binds."""
    scheduler, api, cache = make_scheduler()
    _blocks(cache, {"a/r1": 3, "b/r1": 3})
    cache.upsert_composite(composite("cpg-root", 2, topology_keys=(BLOCK,)))
    for name in ("pg-1", "pg-2"):
        cache.upsert_podgroup(child(name, 3, "cpg-root", topology_keys=(RACK,)))
        pods(api, name, 3)
    await settle(scheduler)
    assert not api.bind_calls
