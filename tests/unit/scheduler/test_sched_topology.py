"""Topology in depth: the best-fit domain rule, preferred and multi-level constraints, and joint
placement (backtracking) where greedy member-by-member placement leaves a gang pending."""

from __future__ import annotations

import dataclasses
from typing import Any

from sched_helpers import gang, make_node, make_pod, make_scheduler, settle

from lockstep.config import Settings
from lockstep.explain import describe_topology
from lockstep.scheduler.framework import Code, GroupKey, NodeInfo
from lockstep.scheduler.topology import (
    Domain,
    DomainIndex,
    best_fit,
    domains_of,
    levels,
    member_slots,
    roomiest_first,
)
from lockstep.state.cluster import ClusterCache

ZONE = "topology.kubernetes.io/zone"
BLOCK = "example.com/block"
RACK = "example.com/rack"


def domain(name: str, slots: int, free_cpu: int = 0, nodes: tuple[str, ...] = ()) -> Domain:
    return Domain(((ZONE, name),), frozenset(nodes or (f"{name}-0",)), slots, free_cpu)


# --- the domain-choice rule -------------------------------------------------------------------------


def test_best_fit_fills_the_tightest_domain_first_and_roomiest_first_does_not() -> None:
    domains = [domain("big", 10, 10_000), domain("exact", 4, 4_000), domain("mid", 6, 6_000)]
    assert [d.name for d in best_fit(domains, 4, 4)] == [f"{ZONE}=exact", f"{ZONE}=mid", f"{ZONE}=big"]
    assert roomiest_first(domains, 4, 4)[0].name == f"{ZONE}=big"


def test_best_fit_leaves_out_domains_too_small_and_tries_partial_ones_roomiest_first() -> None:
    # 6 members wanted, 4 needed (minCount): whole fits first, then those holding >= 4, none below
    domains = [domain("tiny", 3), domain("four", 4), domain("five", 5), domain("whole", 9)]
    assert [d.name.split("=")[1] for d in best_fit(domains, 4, 6)] == ["whole", "five", "four"]


def test_best_fit_keeps_a_group_in_the_domain_holding_its_members() -> None:
    domains = [domain("a", 9, nodes=("a-0", "a-1")), domain("b", 2, nodes=("b-0",))]
    assert [d.name for d in best_fit(domains, 2, 2, placed={"a-1"})] == [f"{ZONE}=a"]
    assert best_fit(domains, 2, 2, placed={"a-1", "b-0"}) == []  # spread over two: no domain holds it


def test_member_slots_bound_every_counted_resource_and_the_pod_count() -> None:
    node = NodeInfo("n", allocatable={"cpu": 8000, "memory": 10, "pods": 3}, requested={"cpu": 1000})
    assert member_slots(node, {"cpu": 2000}) == 3  # 7000 // 2000, also 3 pods
    assert member_slots(node, {"cpu": 1000, "memory": 5}) == 2
    assert member_slots(node, {"nvidia.com/gpu": 1}) == 0


def test_domains_are_named_by_every_level_above_so_equal_rack_names_stay_apart() -> None:
    nodes = [
        NodeInfo(f"n{i}", labels={BLOCK: f"b{i // 2}", RACK: "r1"}, allocatable={"cpu": 1000})
        for i in range(4)
    ]
    found = domains_of(nodes, (BLOCK, RACK), {n.name: 1 for n in nodes})
    assert sorted(d.name for d in found) == [f"{BLOCK}=b0,{RACK}=r1", f"{BLOCK}=b1,{RACK}=r1"]
    assert [(level.key, level.preferred) for level in levels((ZONE,), (BLOCK, RACK))] == [
        (RACK, True),
        (BLOCK, True),
        (ZONE, False),
    ]


def test_the_domain_index_answers_as_domains_of_while_usage_and_labels_change() -> None:
    cache = ClusterCache("lockstep")
    for i in range(6):
        cache.upsert_node(make_node(f"n{i}", cpu="4", labels={ZONE: f"z{i % 2}", RACK: f"r{i // 4}"}))
    index = DomainIndex(cache)
    units = ({"cpu": 1000}, {"cpu": 2000, "memory": 2**30})

    def agrees() -> None:
        for unit in units:
            slots = {name: member_slots(node, unit) for name, node in cache.nodes.items()}
            zones = domains_of(cache.nodes.values(), (ZONE,), slots)
            above = {d.labels: d.slots for d in zones}
            assert index.domains((ZONE,), unit) == zones
            assert index.domains((ZONE, RACK), unit, above) == domains_of(
                cache.nodes.values(), (ZONE, RACK), slots, above
            )

    agrees()
    pod = make_pod("p", cpu="3")
    cache.upsert_pod(pod)
    cache.assume(pod, "n1")  # usage changes: the room of n1's domains follows
    agrees()
    cache.forget(pod.uid)
    cache.assume(pod, "n4")
    agrees()
    cache.upsert_node(make_node("n0", cpu="4", labels={ZONE: "z1", RACK: "r0"}))  # relabelled
    cache.upsert_node(make_node("n5", cpu="16", labels={ZONE: "z1", RACK: "r1"}))  # more capacity
    cache.delete_node("n2")
    cache.upsert_node(make_node("n9", cpu="4", labels={ZONE: "z2"}))  # no rack: zone level only
    agrees()


async def test_fragmentation_a_gang_of_4_takes_the_zone_of_4_so_a_gang_of_8_fits_the_zone_of_10() -> None:
    """The issue's example: roomiest-first would put the 4 in the zone of 10 and leave the 8 pending."""
    scheduler, api, cache = make_scheduler()
    for zone, count in (("a", 10), ("b", 4)):
        for i in range(count):
            cache.upsert_node(make_node(f"{zone}-{i}", cpu="4", labels={ZONE: zone}))
    for name, size in (("four", 4), ("eight", 8)):
        cache.upsert_podgroup(dataclasses.replace(gang(name, size), topology_keys=(ZONE,)))
        for i in range(size):
            api.add(make_pod(f"{name}-{i}", cpu="4", group=name))
        await settle(scheduler)
    zones = {p.name: p.node_name.split("-")[0] for p in api.pods.values()}
    assert {zone for name, zone in zones.items() if name.startswith("four")} == {"b"}
    assert {zone for name, zone in zones.items() if name.startswith("eight")} == {"a"}
    assert len(api.bind_calls) == 12


# --- levels -----------------------------------------------------------------------------------------


def racks(cache: Any, layout: dict[str, int], cpu: str = "1") -> None:
    """layout: "zone/block/rack" -> nodes."""
    for path, count in layout.items():
        zone, block, rack = path.split("/")
        for i in range(count):
            labels = {ZONE: zone, BLOCK: block, RACK: rack}
            cache.upsert_node(make_node(f"{zone}-{block}-{rack}-{i}", cpu=cpu, labels=labels))


async def test_preferred_rack_inside_a_required_zone_takes_the_smallest_rack_that_holds_the_gang() -> None:
    scheduler, api, cache = make_scheduler()
    racks(cache, {"a/b1/r1": 2, "a/b1/r2": 3, "a/b2/r1": 6, "b/b1/r1": 3})
    group = dataclasses.replace(gang("g", 3), topology_keys=(ZONE,), preferred_topology_keys=(BLOCK, RACK))
    cache.upsert_podgroup(group)
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    nodes = {p.node_name.rsplit("-", 1)[0] for p in api.pods.values()}
    assert len(nodes) == 1 and nodes <= {"a-b1-r2", "b-b1-r1"}  # a rack of exactly 3


async def test_preferred_falls_back_a_level_up_and_stays_inside_the_required_domain() -> None:
    scheduler, api, cache = make_scheduler()
    # no rack holds 4; block a/b1 does (2 + 2); zone b has one rack of 5 but is not required... it is
    racks(cache, {"a/b1/r1": 2, "a/b1/r2": 2, "a/b2/r1": 1, "a/b2/r2": 1})
    group = dataclasses.replace(gang("g", 4), topology_keys=(ZONE,), preferred_topology_keys=(BLOCK, RACK))
    cache.upsert_podgroup(group)
    for i in range(4):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert {p.node_name.split("-")[1] for p in api.pods.values()} == {"b1"}
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.SUCCESS


async def test_preferred_without_required_may_use_the_whole_cluster() -> None:
    scheduler, api, cache = make_scheduler()
    racks(cache, {"a/b1/r1": 2, "b/b1/r1": 2})
    cache.upsert_podgroup(dataclasses.replace(gang("g", 4), preferred_topology_keys=(RACK,)))
    for i in range(4):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert len(api.bind_calls) == 4


async def test_two_required_levels_keep_the_gang_in_one_value_of_each() -> None:
    scheduler, api, cache = make_scheduler()
    racks(cache, {"a/b1/r1": 2, "a/b2/r1": 2, "b/b1/r1": 1})
    group = dataclasses.replace(gang("g", 3), topology_keys=(ZONE, BLOCK))
    cache.upsert_podgroup(group)
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert api.bind_calls == []
    message = scheduler.attempts[GroupKey("default", "g")].message
    assert message.startswith("no single domain fits: 3 domains tried: ")
    assert f"{ZONE}=a,{BLOCK}=b2 (too small: room for at most 2 of the 3 members needed)" in message
    assert f"{ZONE}=b,{BLOCK}=b1 (too small: room for at most 1 of the 3 members needed)" in message
    assert "joint search" not in message  # no domain has room: nothing to search


# --- joint placement ----------------------------------------------------------------------------------

SPECIAL = "example.com/special"


def soft_affinity_gang(api: Any, cache: Any) -> None:
    """The issue's case: the first member prefers (soft affinity) the only node the second fits on."""
    cache.upsert_node(make_node("plain", cpu="1"))
    cache.upsert_node(make_node("special", cpu="1", labels={SPECIAL: "yes"}))
    cache.upsert_podgroup(gang("g", 2))
    prefers = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "preference": {"matchExpressions": [{"key": SPECIAL, "operator": "In", "values": ["yes"]}]},
            }
        ]
    }
    api.add(make_pod("first", cpu="1", group="g", affinity={"nodeAffinity": prefers}))
    api.add(make_pod("second", cpu="1", group="g", nodeSelector={SPECIAL: "yes"}))


async def test_joint_search_places_the_member_preferring_the_node_another_needs_elsewhere() -> None:
    scheduler, api, cache = make_scheduler()
    soft_affinity_gang(api, cache)
    await settle(scheduler)
    assert sorted(api.bind_calls) == [("default/first", "plain"), ("default/second", "special")]


async def test_without_the_search_greedy_leaves_the_same_gang_pending() -> None:
    scheduler, api, cache = make_scheduler(settings=Settings(leader_elect=False, joint_search_budget=0))
    soft_affinity_gang(api, cache)
    await settle(scheduler)
    assert api.bind_calls == []


async def test_an_exhausted_search_budget_is_said_in_the_status_naming_the_budget() -> None:
    scheduler, api, cache = make_scheduler(settings=Settings(leader_elect=False, joint_search_budget=2))
    searches: list[Any] = []
    scheduler.cycle.on_search = searches.append
    soft_affinity_gang(api, cache)
    await settle(scheduler)
    assert api.bind_calls == []
    message = scheduler.attempts[GroupKey("default", "g")].message
    assert "joint search gave up: its budget of 2 node evaluations (joint_search_budget" in message
    assert [(s.found, s.exhausted) for s in searches] == [(False, True)]


async def test_a_gang_too_big_for_the_cluster_is_not_searched() -> None:
    scheduler, api, cache = make_scheduler()
    searches: list[Any] = []
    scheduler.cycle.on_search = searches.append
    cache.upsert_node(make_node("n0", cpu="2"))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert api.bind_calls == []
    assert [(s.found, s.exhausted, s.evaluations) for s in searches] == [(False, False, 0)]


# --- explain ------------------------------------------------------------------------------------------


def test_explain_shows_the_domains_tried_per_level_and_the_one_chosen() -> None:
    scheduler, api, cache = make_scheduler()
    racks(cache, {"a/b1/r1": 2, "a/b1/r2": 2, "b/b1/r1": 1})
    group = dataclasses.replace(gang("g", 3), topology_keys=(ZONE,), preferred_topology_keys=(RACK,))
    cache.upsert_podgroup(group)
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    outcome = scheduler.cycle.run(group, cache.unscheduled_members(GroupKey("default", "g")))
    assert outcome.status.ok
    assert describe_topology(outcome) == [
        f"  topology level {RACK} (preferred):",
        f"    tried {ZONE}=a,{RACK}=r1: too small: room for at most 2 of the 3 members needed",
        f"    tried {ZONE}=a,{RACK}=r2: too small: room for at most 2 of the 3 members needed",
        f"    tried {ZONE}=b,{RACK}=r1: too small: room for at most 1 of the 3 members needed",
        f"  topology level {ZONE} (required):",
        f"    chose {ZONE}=a: best fit: the only domain with room for all 3 members, 1 member slot left"
        f" over; no {RACK} domain could take the group",
    ]


async def test_the_status_names_the_chosen_domain_of_every_level_and_why() -> None:
    scheduler, api, cache = make_scheduler()
    racks(cache, {"a/b1/r1": 4, "a/b1/r2": 3, "b/b1/r1": 6})
    group = dataclasses.replace(gang("g", 2), topology_keys=(ZONE,), preferred_topology_keys=(BLOCK, RACK))
    cache.upsert_podgroup(group)
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    message = scheduler.attempts[GroupKey("default", "g")].message
    assert message == (
        f"3 pods placed, 3 of minCount 2 scheduled; placed in {ZONE}=a, {BLOCK}=b1, {RACK}=r2 (best fit: 0"
        " member slots left over, the fewest of the 3 domains with room for all 3 members)"
    )
    api.add(make_pod("p3", cpu="1", group="g"))  # beyond minCount: its domain is the one holding the rest
    await settle(scheduler)
    message = scheduler.attempts[GroupKey("default", "g")].message
    assert message.endswith(
        f"placed in {ZONE}=a, {BLOCK}=b1 (already holds the group's placed members, on 3 nodes;"
        f" no {RACK} domain could take the group)"
    )
