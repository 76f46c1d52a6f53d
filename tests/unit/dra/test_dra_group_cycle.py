"""DynamicResources inside the real group cycle and default profile (scheduler core + DRA together)."""

from __future__ import annotations

import asyncio

from dra_builders import claim, device, device_class, exactly, first_available, match, resource_slice
from dra_memory_api import MemoryClaimAPI

from lockstep import SCHEDULER_NAME
from lockstep.config import Settings
from lockstep.dra.features import allocator_features
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.cycle import GroupCycle
from lockstep.scheduler.framework import Code, GroupKey, NodeInfo, PodClaimRef, PodGroupInfo, PodInfo
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.plugins.dynamic_resources import CLAIM_API_SERVICE, STORE_SERVICE, DynamicResources
from lockstep.scheduler.profile import build_profile
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache


def cluster(
    nodes: int, devices_per_node: int, gates: dict[str, bool] | None = None
) -> tuple[ClusterCache, ResourceStore, MemoryClaimAPI, GroupCycle]:
    settings = Settings(feature_gates=gates or {})
    cache = ClusterCache(SCHEDULER_NAME)
    store = ResourceStore(allocator_features(settings.feature_gates), cache.on_claims_changed)
    store.upsert_class(device_class())
    for n in range(nodes):
        name = f"node-{n}"
        cache.upsert_node(NodeInfo(name=name, allocatable={"cpu": 10**6, "memory": 2**40, "pods": 1000}))
        devices = [device(f"gpu-{i}", numa=[i // 2, (i + 1) // 2]) for i in range(devices_per_node)]
        store.upsert_slice(resource_slice(f"slice-{name}", devices, name))
    api = MemoryClaimAPI(store)
    ctx = PluginContext(settings, cache, WaitingPods(), {STORE_SERVICE: store, CLAIM_API_SERVICE: api})
    return cache, store, api, GroupCycle(cache, build_profile(ctx), feasible_nodes_to_find=100, spread=True)


def member(name: str, group: str, *claims: PodClaimRef) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        scheduler_name=SCHEDULER_NAME,
        group_name=group,
        requests={"cpu": 100},
        claims=claims,
    )


def add_group(
    cache: ClusterCache, name: str, size: int, min_count: int, *claims: PodClaimRef
) -> PodGroupInfo:
    group = PodGroupInfo("ns", name, f"uid-{name}", min_count=min_count, is_gang=True, claims=claims)
    cache.upsert_podgroup(group)
    for i in range(size):
        cache.upsert_pod(member(f"{name}-{i}", name))
    return group


def dra_plugin(cycle: GroupCycle) -> DynamicResources:
    plugin = cycle.profile.get(DynamicResources.name)
    assert isinstance(plugin, DynamicResources)
    return plugin


async def test_gang_with_a_group_claim_places_all_members_with_one_claim_write() -> None:
    cache, _, api, cycle = cluster(nodes=3, devices_per_node=2)
    api.add(claim("shared", exactly("gpu", 2), uid="uid-shared"))
    group = add_group(cache, "g", 6, 6, PodClaimRef("shared", resource_claim_name="shared"))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    assert len({p.node_name for p in outcome.placements}) == 1  # the claim's devices are node-local
    plugin = dra_plugin(cycle)
    statuses = await asyncio.gather(
        *(plugin.pre_bind(p.state, p.pod, p.node_name) for p in outcome.placements)
    )
    assert all(s.ok for s in statuses)
    assert len(api.status_writes) == 1
    # A PodGroup claim is reserved once, for the PodGroup (as upstream does for PodGroup claims).
    assert api.objects["ns/shared"]["status"]["reservedFor"] == [
        {"apiGroup": "scheduling.lockstep.dev", "resource": "podgroups", "name": "g", "uid": "uid-g"}
    ]


async def test_a_claim_the_members_list_themselves_is_reserved_for_each_of_them_in_one_write() -> None:
    cache, _, api, cycle = cluster(nodes=3, devices_per_node=2)
    api.add(claim("shared", exactly("gpu", 2), uid="uid-shared"))
    shared = PodClaimRef("gpu", resource_claim_name="shared")
    group = PodGroupInfo("ns", "g", "uid-g", min_count=6, is_gang=True, claims=(shared,))
    cache.upsert_podgroup(group)
    for i in range(6):
        cache.upsert_pod(member(f"g-{i}", "g", shared))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    plugin = dra_plugin(cycle)
    statuses = await asyncio.gather(
        *(plugin.pre_bind(p.state, p.pod, p.node_name) for p in outcome.placements)
    )
    assert all(s.ok for s in statuses)
    assert len(api.status_writes) == 1
    # Listed by the pods (and the PodGroup too): the kubelet needs each pod in reservedFor.
    reserved = api.objects["ns/shared"]["status"]["reservedFor"]
    assert sorted(ref["name"] for ref in reserved) == [f"g-{i}" for i in range(6)]
    assert {ref["resource"] for ref in reserved} == {"pods"}


async def test_a_podgroup_claim_shared_by_1000_members_is_written_once() -> None:
    """Upstream's SharedPodGroupResourceClaimTemplate workload (#140263): no per-pod entries, so the
    256-entry limit of reservedFor does not cap the group."""
    cache, store, api, cycle = cluster(nodes=2, devices_per_node=1)
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    group = add_group(cache, "big", 1000, 1000, PodClaimRef("gpu", resource_claim_name="shared"))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "big")))
    assert outcome.status.ok, outcome.status
    assert len(outcome.placements) == 1000
    plugin = dra_plugin(cycle)
    statuses = await asyncio.gather(
        *(plugin.pre_bind(p.state, p.pod, p.node_name) for p in outcome.placements)
    )
    assert all(s.ok for s in statuses)
    assert len(api.status_writes) == 1
    assert [ref["name"] for ref in api.objects["ns/shared"]["status"]["reservedFor"]] == ["big"]
    assert len(store.in_flight) == 0


async def test_deleting_the_podgroup_releases_its_claims() -> None:
    cache, _, api, cycle = cluster(nodes=1, devices_per_node=1)
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    api.add(claim("other", exactly("gpu", 1), uid="uid-other"))
    group = add_group(cache, "g", 2, 2, PodClaimRef("gpu", resource_claim_name="shared"))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    plugin = dra_plugin(cycle)
    await asyncio.gather(*(plugin.pre_bind(p.state, p.pod, p.node_name) for p in outcome.placements))
    assert api.objects["ns/shared"]["status"]["allocation"]

    plugin.release_podgroup("ns", "g", "uid-g")
    await plugin.wait_for_background()
    status = api.objects["ns/shared"]["status"]
    assert not status.get("reservedFor") and not status.get("allocation")  # nobody else held it
    assert len(api.status_writes) == 2  # the claim nobody reserved was not touched


def test_gang_that_cannot_get_devices_is_released_completely() -> None:
    cache, store, api, cycle = cluster(nodes=2, devices_per_node=2)
    refs = []
    for i in range(5):
        api.add(claim(f"c{i}", exactly("gpu", 1), uid=f"uid-c{i}"))
        refs.append(PodClaimRef("gpu", resource_claim_name=f"c{i}"))
    group = PodGroupInfo("ns", "g", "uid-g", min_count=5, is_gang=True)
    cache.upsert_podgroup(group)
    for i, ref in enumerate(refs):
        cache.upsert_pod(member(f"g-{i}", "g", ref))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.code is Code.UNSCHEDULABLE
    assert len(store.in_flight) == 0  # every member's pending allocation was released
    assert not any(
        store.device_in_use(("gpu.example.com", f"node-{n}", f"gpu-{i}")) for n in (0, 1) for i in (0, 1)
    )
    assert api.status_writes == []


def test_list_type_attribute_gate_decides_whether_the_gang_fits() -> None:
    """Behaviour 5 end to end: Settings.feature_gates -> allocator features -> allocation outcome."""
    for enabled, fits in ((True, True), (False, False)):
        cache, _, api, cycle = cluster(nodes=1, devices_per_node=4, gates={"DRAListTypeAttributes": enabled})
        api.add(
            claim(
                "pair",
                exactly("a"),
                exactly("b"),
                constraints=[match("gpu.example.com/numa")],
                uid="uid-pair",
            )
        )
        group = add_group(cache, "g", 1, 1, PodClaimRef("pair", resource_claim_name="pair"))
        outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
        assert outcome.status.ok is fits, (enabled, outcome.status)


def test_gang_members_leave_devices_for_each_other() -> None:
    """Upstream #138765: each member prefers two devices and accepts one; a node has two. First fit
    would give the first member both and fail the gang; the lookahead gives each member one."""
    cache, store, api, cycle = cluster(nodes=1, devices_per_node=2)
    prefer_two = first_available("gpu", ("two", 2, ""), ("one", 1, ""))
    group = PodGroupInfo("ns", "g", "uid-g", min_count=2, is_gang=True)
    cache.upsert_podgroup(group)
    for i in range(2):
        api.add(claim(f"c{i}", prefer_two, uid=f"uid-c{i}"))
        cache.upsert_pod(member(f"g-{i}", "g", PodClaimRef("gpu", resource_claim_name=f"c{i}")))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    pending = [store.in_flight.get(f"uid-c{i}") for i in range(2)]
    assert [[r.request for r in p.devices.results] for p in pending if p] == [["gpu/one"], ["gpu/one"]]


def test_a_lone_pod_still_gets_its_preferred_alternative() -> None:
    cache, store, api, cycle = cluster(nodes=1, devices_per_node=2)
    api.add(claim("c", first_available("gpu", ("two", 2, ""), ("one", 1, "")), uid="uid-c"))
    group = add_group(cache, "solo", 1, 1, PodClaimRef("gpu", resource_claim_name="c"))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "solo")))
    assert outcome.status.ok
    pending = store.in_flight.get("uid-c")
    assert pending is not None and [r.request for r in pending.devices.results] == ["gpu/two", "gpu/two"]


def test_gang_of_257_listing_a_shared_claim_is_unschedulable_and_writes_nothing() -> None:
    cache, store, api, cycle = cluster(nodes=2, devices_per_node=1)
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    group = PodGroupInfo("ns", "big", "uid-big", min_count=257, is_gang=True)
    cache.upsert_podgroup(group)
    for i in range(257):
        cache.upsert_pod(member(f"big-{i}", "big", PodClaimRef("gpu", resource_claim_name="shared")))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "big")))
    assert outcome.status.code is Code.UNSCHEDULABLE
    [diagnosis] = outcome.diagnoses
    assert "status.reservedFor" in diagnosis.message and "at most 256" in diagnosis.message
    assert outcome.placements == [] and len(store.in_flight) == 0 and api.status_writes == []


def test_a_shared_node_local_claim_goes_where_all_its_pods_fit() -> None:
    """The first member's node decides where every member using the claim must run."""
    cache, _, api, cycle = cluster(nodes=2, devices_per_node=1)
    small = NodeInfo(name="node-0", allocatable={"cpu": 10**6, "memory": 2**40, "pods": 3})
    cache.upsert_node(small)  # node-0 sorts first and is as empty as node-1, but holds only 3 pods
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    group = add_group(cache, "g", 4, 4, PodClaimRef("shared", resource_claim_name="shared"))
    outcome = cycle.run(group, cache.unscheduled_members(GroupKey("ns", "g")))
    assert outcome.status.ok, outcome.status
    assert {p.node_name for p in outcome.placements} == {"node-1"}
