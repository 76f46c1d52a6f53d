"""The filter and score plugins, one behaviour per test, plus how node verdicts become a pod's code."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import gang, make_node, make_pod, make_scheduler, settle

from lockstep.config import ScoreStrategy, Settings
from lockstep.scheduler.framework import Code, CycleState, PodInfo
from lockstep.scheduler.plugins.gang import GangTopology
from lockstep.scheduler.plugins.node_affinity import NodeAffinity
from lockstep.scheduler.plugins.node_basics import NodeName, NodeUnschedulable, TaintToleration, tolerates
from lockstep.scheduler.plugins.node_resources import (
    NodeResourcesBalancedAllocation,
    NodeResourcesFit,
    NodeResourcesScore,
)
from lockstep.state.cluster import ClusterCache


def test_resources_fit_names_the_missing_resource() -> None:
    fit = NodeResourcesFit()
    state = CycleState()
    node = make_node("n", cpu="4", memory="8Gi", pods=2, extra={"nvidia.com/gpu": "2"})
    node.requested = {"cpu": 2000, "memory": 4 * 2**30, "nvidia.com/gpu": 1}
    assert fit.filter(state, make_pod("ok", cpu="2", memory="4Gi"), node).ok
    gpus = [{"name": "a", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]
    cases = {
        "InsufficientCPU": make_pod("cpu", cpu="2001m"),
        "InsufficientMemory": make_pod("mem", memory="5Gi"),
        "Insufficient[nvidia.com/gpu]": make_pod("gpu", cpu=None, memory=None, containers=gpus),
    }
    for cause, pod in cases.items():
        status = fit.filter(state, pod, node)
        assert (status.code, status.cause) == (Code.UNSCHEDULABLE, cause)
    node.pod_count = 2
    status = fit.filter(state, make_pod("one-more", cpu="1m"), node)
    assert status.cause == "InsufficientPods"


def test_a_pod_larger_than_the_node_is_unresolvable_there() -> None:
    status = NodeResourcesFit().filter(CycleState(), make_pod("huge", cpu="5"), make_node("n", cpu="4"))
    assert (status.code, status.cause) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "InsufficientCPU")
    assert "node allocatable 4000" in status.message


def test_resources_fit_counts_what_is_already_requested() -> None:
    node = make_node("n", cpu="4")
    node.requested = {"cpu": 3500}
    assert not NodeResourcesFit().filter(CycleState(), make_pod("p", cpu="501m"), node).ok
    assert NodeResourcesFit().filter(CycleState(), make_pod("p", cpu="500m"), node).ok


@pytest.mark.parametrize(
    ("tolerations", "taint", "tolerated"),
    [
        ([], {"key": "gpu", "effect": "NoSchedule"}, False),
        (
            [{"key": "gpu", "operator": "Exists"}],
            {"key": "gpu", "value": "a100", "effect": "NoSchedule"},
            True,
        ),
        ([{"key": "gpu", "value": "a100"}], {"key": "gpu", "value": "a100", "effect": "NoExecute"}, True),
        ([{"key": "gpu", "value": "h100"}], {"key": "gpu", "value": "a100", "effect": "NoSchedule"}, False),
        (
            [{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}],
            {"key": "gpu", "effect": "NoSchedule"},
            False,
        ),
        ([{"operator": "Exists"}], {"key": "anything", "effect": "NoExecute"}, True),
        ([{"key": "other", "operator": "Exists"}], {"key": "gpu", "effect": "NoSchedule"}, False),
    ],
)
def test_toleration_matching(
    tolerations: list[dict[str, str]], taint: dict[str, str], tolerated: bool
) -> None:
    assert tolerates(tuple(tolerations), taint) is tolerated


def test_taints_block_only_no_schedule_and_no_execute() -> None:
    plugin = TaintToleration()
    pod = make_pod("p")
    soft = make_node("soft", taints=[{"key": "k", "effect": "PreferNoSchedule"}])
    hard = make_node("hard", taints=[{"key": "k", "value": "v", "effect": "NoExecute"}])
    assert plugin.filter(CycleState(), pod, soft).ok
    status = plugin.filter(CycleState(), pod, hard)
    assert (status.code, status.cause) == (Code.UNSCHEDULABLE_AND_UNRESOLVABLE, "Taint")
    assert "k=v:NoExecute" in status.message


def test_cordoned_node_takes_only_pods_tolerating_the_unschedulable_taint() -> None:
    node = make_node("n", unschedulable=True)
    plugin = NodeUnschedulable()
    assert plugin.filter(CycleState(), make_pod("p"), node).cause == "NodeUnschedulable"
    tolerant = make_pod("t", tolerations=[{"key": "node.kubernetes.io/unschedulable", "operator": "Exists"}])
    assert plugin.filter(CycleState(), tolerant, node).ok


def test_node_name_pins_the_pod() -> None:
    plugin = NodeName()
    pinned = make_pod("p", node_name="n2")
    assert plugin.pre_filter(CycleState(), make_pod("free")).code is Code.SKIP
    assert plugin.filter(CycleState(), pinned, make_node("n2")).ok
    assert plugin.filter(CycleState(), pinned, make_node("n1")).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def _affinity(*terms: dict[str, Any]) -> dict[str, Any]:
    return {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": list(terms)}}
    }


def _expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"matchExpressions": [{"key": key, "operator": operator, "values": list(values)}]}


NODES = {
    "a": {"zone": "z1", "cores": "8", "disk": "ssd"},
    "b": {"zone": "z2", "cores": "32"},
    "c": {"zone": "z3", "cores": "64", "disk": "hdd"},
}


def _matching(pod: PodInfo) -> set[str]:
    cache = ClusterCache("lockstep")
    for name, labels in NODES.items():
        cache.upsert_node(make_node(name, labels=labels))
    plugin = NodeAffinity(cache)
    state = CycleState()
    assert plugin.pre_filter(state, pod).ok
    matched = {name for name, node in cache.nodes.items() if plugin.filter(state, pod, node).ok}
    candidates = plugin.candidate_nodes(state, pod)
    if candidates is not None:  # the index may narrow, never exclude a matching node
        assert matched <= set(candidates)
    return matched


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (_affinity(_expr("zone", "In", "z1", "z3")), {"a", "c"}),
        (_affinity(_expr("zone", "NotIn", "z1")), {"b", "c"}),
        (_affinity(_expr("disk", "Exists")), {"a", "c"}),
        (_affinity(_expr("disk", "DoesNotExist")), {"b"}),
        (_affinity(_expr("cores", "Gt", "16")), {"b", "c"}),
        (_affinity(_expr("cores", "Lt", "32")), {"a"}),
        (_affinity(_expr("zone", "In", "z1"), _expr("disk", "In", "hdd")), {"a", "c"}),  # terms are ORed
        (
            _affinity(
                {
                    "matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["z1", "z2"]},
                        {"key": "cores", "operator": "Gt", "values": ["10"]},
                    ]
                }
            ),
            {"b"},  # requirements of a term are ANDed
        ),
        (_affinity({"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}), {"b"}),
        (
            _affinity({"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["b"]}]}),
            {"a", "c"},
        ),
        (_affinity({}), set()),  # an empty term matches nothing
    ],
)
def test_required_node_affinity_operators(affinity: dict[str, Any], expected: set[str]) -> None:
    assert _matching(make_pod("p", affinity=affinity)) == expected


def test_node_selector_and_affinity_must_both_match() -> None:
    pod = make_pod("p", nodeSelector={"disk": "ssd"}, affinity=_affinity(_expr("zone", "In", "z1", "z2")))
    assert _matching(pod) == {"a"}


@pytest.mark.parametrize(
    ("affinity", "field"),
    [
        (_affinity(_expr("cores", "Gt", "many")), "matchExpressions[0].values"),
        (_affinity(_expr("zone", "Near", "z1")), "matchExpressions[0].operator"),
        (_affinity(_expr("zone", "In")), "matchExpressions[0].values"),
        (
            _affinity({"matchFields": [{"key": "metadata.uid", "operator": "In", "values": ["x"]}]}),
            "matchFields[0].key",
        ),
    ],
)
def test_invalid_affinity_is_unresolvable_and_names_the_field(affinity: dict[str, Any], field: str) -> None:
    plugin = NodeAffinity(ClusterCache("lockstep"))
    status = plugin.pre_filter(CycleState(), make_pod("p", affinity=affinity))
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "pod default/p" in status.message and field in status.message


def test_scores_prefer_empty_nodes_or_full_ones_by_strategy() -> None:
    empty, busy = make_node("empty", cpu="8"), make_node("busy", cpu="8")
    busy.requested = {"cpu": 6000, "memory": 16 * 2**30}
    pod = make_pod("p", cpu="1")
    least = NodeResourcesScore(ScoreStrategy.LEAST_ALLOCATED)
    most = NodeResourcesScore(ScoreStrategy.MOST_ALLOCATED)
    assert least.score(CycleState(), pod, empty) > least.score(CycleState(), pod, busy)
    assert most.score(CycleState(), pod, busy) > most.score(CycleState(), pod, empty)


@pytest.mark.parametrize("strategy", list(ScoreStrategy))
def test_resource_scores_of_all_feasible_nodes_in_one_call_are_each_nodes_scores(
    strategy: ScoreStrategy,
) -> None:
    nodes = [make_node("empty"), make_node("half"), make_node("full"), make_node("no-memory", memory="0")]
    nodes[1].requested = {"cpu": 4000, "memory": 4 * 2**30}
    nodes[2].requested = {"cpu": 8000, "memory": 32 * 2**30}
    pod = make_pod("p", cpu="500m")
    for plugin in (NodeResourcesScore(strategy), NodeResourcesBalancedAllocation()):
        scores = plugin.score_nodes(CycleState(), pod, nodes)
        assert scores == [plugin.score(CycleState(), pod, node) for node in nodes]


def test_gang_topology_is_not_scored_when_every_feasible_node_would_score_alike() -> None:
    cache = ClusterCache("lockstep", "zone")
    a1, a2, b1 = (make_node(n, labels={"zone": n[0]}) for n in ("a1", "a2", "b1"))
    for node in (a1, a2, b1):
        cache.upsert_node(node)
    cache.upsert_podgroup(gang("g", 2))
    member = make_pod("m0", group="g", node_name="a1")
    cache.upsert_pod(member)
    plugin = GangTopology(cache, "zone")
    incoming = make_pod("m1", group="g")
    state = CycleState(gang("g", 2))
    assert plugin.pre_score(state, incoming, [a1, a2]).code is Code.SKIP  # all in the gang's zone
    assert plugin.pre_score(state, incoming, [b1]).code is Code.SKIP  # none in it
    assert plugin.pre_score(state, incoming, [a1, b1]).code is Code.SUCCESS
    assert [plugin.score(state, incoming, n) for n in (a1, b1)] == [100, 0]
    assert plugin.pre_score(CycleState(), incoming, [a1, b1]).code is Code.SKIP  # no gang: no domain


@pytest.mark.parametrize(("strategy", "expected"), [("least-allocated", "empty"), ("most-allocated", "busy")])
async def test_score_strategy_from_settings_decides_the_node(strategy: str, expected: str) -> None:
    scheduler, api, cache = make_scheduler(
        Settings(leader_elect=False, score_strategy=ScoreStrategy(strategy))
    )
    cache.upsert_node(make_node("empty", cpu="8"))
    cache.upsert_node(make_node("busy", cpu="8"))
    api.add(make_pod("resident", cpu="5", node_name="busy", scheduler="default-scheduler"))
    api.add(make_pod("p", cpu="1"))
    await settle(scheduler)
    assert api.pods["default/p"].node_name == expected


async def test_a_selector_no_node_can_match_is_unresolvable_but_a_full_match_is_not() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("small", cpu="4", labels={"disk": "ssd"}))
    cache.upsert_node(make_node("big", cpu="16"))
    api.add(make_pod("resident", cpu="3", node_name="small", scheduler="default-scheduler"))
    api.add(make_pod("nowhere", nodeSelector={"disk": "nvme"}))
    api.add(make_pod("too-big", cpu="2", nodeSelector={"disk": "ssd"}))
    await settle(scheduler)
    nowhere = next(a for k, a in scheduler.attempts.items() if k.name == "nowhere").pods[0]
    too_big = next(a for k, a in scheduler.attempts.items() if k.name == "too-big").pods[0]
    assert nowhere.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert dict(nowhere.causes) == {"NodeSelectorMismatch": 2}
    assert too_big.code is Code.UNSCHEDULABLE  # freeing cpu on "small" would fix it
    assert dict(too_big.causes) == {"NodeSelectorMismatch": 1, "InsufficientCPU": 1}
    assert (
        too_big.message
        == "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) didn't match Pod's node affinity/selector."
    )
