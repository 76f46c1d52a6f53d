"""Joint placement with devices: members whose device choices block each other (upstream #138765)."""

from __future__ import annotations

from typing import Any

from dra_builders import DRIVER, claim, device, device_class, exactly, first_available, match, resource_slice
from dra_memory_api import MemoryClaimAPI

from lockstep import SCHEDULER_NAME
from lockstep.config import Settings
from lockstep.dra.features import allocator_features
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.cycle import GroupCycle
from lockstep.scheduler.framework import GroupKey, NodeInfo, PodClaimRef, PodGroupInfo, PodInfo
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.plugins.dynamic_resources import CLAIM_API_SERVICE, STORE_SERVICE
from lockstep.scheduler.profile import build_profile
from lockstep.scheduler.search import SearchResult
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache


def one_node(
    devices: list[dict[str, Any]], search_budget: int = 5000, **slice_options: Any
) -> tuple[ClusterCache, ResourceStore, MemoryClaimAPI, GroupCycle]:
    settings = Settings()
    cache = ClusterCache(SCHEDULER_NAME)
    store = ResourceStore(allocator_features(settings.feature_gates), cache.on_claims_changed)
    store.upsert_class(device_class())
    cache.upsert_node(NodeInfo(name="node-0", allocatable={"cpu": 10**6, "memory": 2**40, "pods": 1000}))
    store.upsert_slice(resource_slice("slice-0", devices, "node-0", **slice_options))
    api = MemoryClaimAPI(store)
    ctx = PluginContext(settings, cache, WaitingPods(), {STORE_SERVICE: store, CLAIM_API_SERVICE: api})
    cycle = GroupCycle(
        cache, build_profile(ctx), feasible_nodes_to_find=100, spread=True, search_budget=search_budget
    )
    return cache, store, api, cycle


def gang_with_claims(cache: ClusterCache, api: MemoryClaimAPI, *claims: Any) -> PodGroupInfo:
    group = PodGroupInfo("ns", "g", "uid-g", min_count=len(claims), is_gang=True)
    cache.upsert_podgroup(group)
    for i, made in enumerate(claims):
        api.add(made)
        cache.upsert_pod(
            PodInfo(
                uid=f"uid-m{i}",
                namespace="ns",
                name=f"m{i}",
                scheduler_name=SCHEDULER_NAME,
                group_name="g",
                requests={"cpu": 100},
                claims=(PodClaimRef("dev", resource_claim_name=made.metadata.name),),
            )
        )
    return group


def devices_of(store: ResourceStore, uid: str) -> list[str]:
    pending = store.in_flight.get(uid)
    assert pending is not None
    return [result.device for result in pending.devices.results]


def test_upstream_reproducer_a_prioritized_list_over_one_partitionable_device() -> None:
    """kubernetes PR #140097: one device usable whole (2 widgets) or as two halves (1 each) of a
    shared counter; each member's claim prefers whole and accepts half. First fit gives the first
    member the whole device and starves the second; lockstep gives each a half."""
    size = f'device.attributes["{DRIVER}"].size'
    whole = {"name": "whole", "attributes": {"size": {"string": "whole"}}}
    halves = [{"name": f"half-{i}", "attributes": {"size": {"string": "half"}}} for i in range(2)]
    whole["consumesCounters"] = [{"counterSet": "widgets", "counters": {"widgets": {"value": "2"}}}]
    for half in halves:
        half["consumesCounters"] = [{"counterSet": "widgets", "counters": {"widgets": {"value": "1"}}}]
    cache, store, api, cycle = one_node([whole, *halves], shared_counters={"widgets": {"widgets": "2"}})
    prefer_whole = first_available(
        "dev", ("whole", 1, f'{size} == "whole"'), ("half", 1, f'{size} == "half"')
    )
    group = gang_with_claims(cache, api, *(claim(f"c{i}", prefer_whole, uid=f"uid-c{i}") for i in range(2)))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    assert sorted(devices_of(store, "uid-c0") + devices_of(store, "uid-c1")) == ["half-0", "half-1"]


def coupled_node() -> list[dict[str, Any]]:
    """numa 0: gpu-0, gpu-1, nic-0; numa 1: gpu-2, nic-1 (slice order)."""
    return [
        device("gpu-0", numa=0, kind="gpu"),
        device("gpu-1", numa=0, kind="gpu"),
        device("gpu-2", numa=1, kind="gpu"),
        device("nic-0", numa=0, kind="nic"),
        device("nic-1", numa=1, kind="nic"),
    ]


def coupled_claims() -> list[Any]:
    """m0: a gpu and a nic on one numa node; m1: two gpus on one numa node (matchAttribute numa)."""
    kind = f'device.attributes["{DRIVER}"].kind'
    numa = f"{DRIVER}/numa"
    return [
        claim(
            "c0",
            exactly("gpu", 1, f'{kind} == "gpu"'),
            exactly("nic", 1, f'{kind} == "nic"'),
            constraints=[match(numa, "gpu", "nic")],
            uid="uid-c0",
        ),
        claim("c1", exactly("gpus", 2, f'{kind} == "gpu"'), constraints=[match(numa)], uid="uid-c1"),
    ]


def test_members_coupled_by_match_attribute_bind_where_greedy_leaves_them_pending() -> None:
    """Greedy gives m0 gpu-0 + nic-0 (numa 0), leaving m1 one gpu per numa node. The search takes
    m0's next choices until gpu-2 + nic-1, and m1 gets gpu-0 + gpu-1."""
    cache, store, api, cycle = one_node(coupled_node(), search_budget=0)
    group = gang_with_claims(cache, api, *coupled_claims())
    greedy = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert not greedy.status.ok

    cache, store, api, cycle = one_node(coupled_node())
    searches: list[SearchResult] = []
    cycle.on_search = searches.append
    group = gang_with_claims(cache, api, *coupled_claims())
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    assert devices_of(store, "uid-c0") == ["gpu-2", "nic-1"]
    assert devices_of(store, "uid-c1") == ["gpu-0", "gpu-1"]
    assert [s.found for s in searches] == [True]


def test_a_search_that_runs_out_of_budget_leaves_nothing_reserved() -> None:
    cache, store, api, cycle = one_node(coupled_node(), search_budget=2)
    searches: list[SearchResult] = []
    cycle.on_search = searches.append
    group = gang_with_claims(cache, api, *coupled_claims())
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert not outcome.status.ok
    assert (
        "joint search gave up: its budget of 2 node evaluations (joint_search_budget"
        in outcome.status.message
    )
    assert [s.exhausted for s in searches] == [True]
    assert store.in_flight.get("uid-c0") is None and store.in_flight.get("uid-c1") is None
    assert not any(cache.is_assumed(f"uid-m{i}") for i in range(2))
