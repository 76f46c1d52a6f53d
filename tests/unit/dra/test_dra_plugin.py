"""The DynamicResources plugin: shared claims, behaviours 1 and 4, reservedFor limit, group claims."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest
from dra_builders import DRIVER, claim, device, device_class, exactly, resource_slice
from dra_memory_api import MemoryClaimAPI

from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import (
    DELETE_PROTECTION_FINALIZER,
    ResourceClaim,
    ResourceClaimTemplate,
    parse_resource,
)
from lockstep.dra.features import Features
from lockstep.dra.ports import WriteResult
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import (
    Code,
    CycleState,
    NodeInfo,
    PodClaimRef,
    PodGroupInfo,
    PodInfo,
    Status,
)
from lockstep.scheduler.plugins.dynamic_resources import DynamicResources
from lockstep.state.assume_cache import AssumeCache

FEATURES = Features(admin_access=True, prioritized_list=True, list_type_attributes=True)
NODES = [NodeInfo(name=f"node-{n}", labels={"zone": "z1"}) for n in "ab"]


@dataclass
class Placed:
    pod: PodInfo
    node: str
    state: CycleState


def setup(
    devices_per_node: int = 2, echo: bool = False
) -> tuple[ResourceStore, MemoryClaimAPI, DynamicResources]:
    store = ResourceStore(FEATURES)
    store.upsert_class(device_class())
    for node in NODES:
        store.upsert_slice(
            resource_slice(
                f"slice-{node.name}", [device(f"gpu-{i}") for i in range(devices_per_node)], node.name
            )
        )
    api = MemoryClaimAPI(store, echo=echo)
    return store, api, DynamicResources(store, api)


def pod(
    name: str, *claims: PodClaimRef, statuses: dict[str, str | None] | None = None, group: str = ""
) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        group_name=group,
        claims=claims,
        claim_statuses=statuses or {},
    )


def by_name(claim_name: str, entry: str = "gpu") -> PodClaimRef:
    return PodClaimRef(entry, resource_claim_name=claim_name)


def place(
    plugin: DynamicResources,
    pods: list[PodInfo],
    nodes: list[NodeInfo] = NODES,
    group: PodGroupInfo | None = None,
) -> list[Placed | Status]:
    """A group cycle reduced to DRA: per pod PreFilter, Filter until a node fits, Reserve."""
    group_data: dict[str, object] = {}
    outcome: list[Placed | Status] = []
    for member in pods:
        state = CycleState(group, group_data)
        status = plugin.pre_filter(state, member)
        if status.code is Code.SKIP:
            outcome.append(Placed(member, nodes[0].name, state))
            continue
        if not status.ok:
            outcome.append(status)
            continue
        verdicts = [(node, plugin.filter(state, member, node)) for node in nodes]
        feasible = [node for node, verdict in verdicts if verdict.ok]
        if not feasible:
            outcome.append(verdicts[0][1])
            continue
        status = plugin.reserve(state, member, feasible[0].name)
        if not status.ok:
            plugin.unreserve(state, member, feasible[0].name)
            outcome.append(status)
            continue
        outcome.append(Placed(member, feasible[0].name, state))
    return outcome


def placed(outcome: list[Placed | Status]) -> list[Placed]:
    assert all(isinstance(p, Placed) for p in outcome), outcome
    return [p for p in outcome if isinstance(p, Placed)]


async def pre_bind_all(plugin: DynamicResources, placements: list[Placed]) -> list[Status]:
    return list(await asyncio.gather(*(plugin.pre_bind(p.state, p.pod, p.node) for p in placements)))


def reserved(api: MemoryClaimAPI, key: str) -> list[str]:
    return [ref["name"] for ref in api.objects[key].get("status", {}).get("reservedFor", [])]


def test_pod_without_claims_is_skipped() -> None:
    _, _, plugin = setup()
    assert plugin.pre_filter(CycleState(), pod("plain")).code is Code.SKIP


async def test_single_pod_claim_is_allocated_and_reserved_in_one_write() -> None:
    store, api, plugin = setup()
    api.add(claim("c", exactly("gpu", 2), uid="uid-c"))
    [p] = placed(place(plugin, [pod("p", by_name("c"))]))
    assert store.in_flight.sharers("uid-c") == 1
    assert store.device_in_use((DRIVER, p.node, "gpu-0"))  # in-flight devices are taken for later pods
    assert await pre_bind_all(plugin, [p]) == [Status()]
    [(key, status)] = api.status_writes
    assert key == "ns/c"
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]
    assert status["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert "uid-c" not in store.in_flight
    assigned = store.claims.get("ns/c")
    assert assigned is not None and assigned.allocated and store.claims.is_assumed("ns/c")


async def test_gang_sharing_a_claim_writes_it_once() -> None:
    """Behaviour 4 (docs/architecture.md): one strict patch with the allocation and every member's
    reservedFor."""
    store, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    members = [pod(f"m{i}", by_name("shared"), group="g") for i in range(5)]
    placements = placed(place(plugin, members))
    assert {p.node for p in placements} == {placements[0].node}  # later members reuse the pending allocation
    assert store.in_flight.sharers("uid-shared") == 5
    statuses = await pre_bind_all(plugin, placements)
    assert all(s.ok for s in statuses)
    assert len(api.status_writes) == 1
    # The delete-protection finalizer went on once, in a write of the claim before its status.
    assert api.finalizer_writes == [("ns/shared", [DELETE_PROTECTION_FINALIZER])]
    assert reserved(api, "ns/shared") == [f"m{i}" for i in range(5)]
    assert "uid-shared" not in store.in_flight
    for p in placements:  # binding failures later: no double release, no restore of the written claim
        plugin.unreserve(p.state, p.pod, p.node)
    await plugin.wait_for_background()
    latest = store.claims.get("ns/shared")
    # The cache holds what lockstep wrote, never a restored stale copy: the last removal deallocated
    # the claim in the same write, since no member uses it any more.
    assert (
        latest is not None
        and latest.metadata.resource_version == api.objects["ns/shared"]["metadata"]["resourceVersion"]
    )
    assert not latest.allocated and not api.objects["ns/shared"]["status"].get("allocation")
    assert latest.status.reserved_for == [] and reserved(api, "ns/shared") == []
    assert len(api.status_writes) == 1 + len(placements)
    # ... and lockstep, having deallocated it, took its finalizer off again.
    assert api.finalizer_writes[1:] == [("ns/shared", [])]
    assert latest.metadata.finalizers == [] and "finalizers" not in api.objects["ns/shared"]["metadata"]


async def test_a_failed_finalizer_write_writes_no_allocation_and_unreserve_releases_once() -> None:
    store, api, plugin = setup()
    api.add(claim("c", exactly("gpu", 1), uid="uid-c"))
    [p] = placed(place(plugin, [pod("p", by_name("c"))]))
    api.fail_next(WriteResult.CONFLICT)
    status = await plugin.pre_bind(p.state, p.pod, p.node)
    assert status.code is Code.UNSCHEDULABLE and "delete-protection finalizer" in status.message
    assert api.status_writes == [] and store.in_flight.sharers("uid-c") == 1
    plugin.unreserve(p.state, p.pod, p.node)
    assert "uid-c" not in store.in_flight


async def test_a_claim_deleted_before_pre_bind_gets_no_allocation() -> None:
    store, api, plugin = setup()
    api.add(claim("c", exactly("gpu", 1), uid="uid-c"))
    [p] = placed(place(plugin, [pod("p", by_name("c"))]))
    deleting = api.objects["ns/c"]
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    deleting["metadata"]["resourceVersion"] = "999"
    store.upsert_claim(parse_resource(ResourceClaim, deleting))
    status = await plugin.pre_bind(p.state, p.pod, p.node)
    assert status.code is Code.UNSCHEDULABLE and "being deleted" in status.message
    assert api.status_writes == [] and api.finalizer_writes == []


async def test_reusing_a_pending_allocation_still_checks_the_node() -> None:
    """Upstream #140087: a later member may only go where the pending allocation's devices are."""
    _, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    [first] = placed(place(plugin, [pod("m0", by_name("shared"))]))
    state = CycleState()
    second = pod("m1", by_name("shared"))
    assert plugin.pre_filter(state, second).ok
    other = next(n for n in NODES if n.name != first.node)
    rejected = plugin.filter(state, second, other)
    assert rejected.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and rejected.cause == "ClaimNotOnNode"
    assert plugin.filter(state, second, next(n for n in NODES if n.name == first.node)).ok
    assert not plugin.reserve(state, second, other.name).ok


async def test_claim_already_allocated_records_nothing_in_flight() -> None:
    """Behaviour 1 (#140269): a late member finds the claim allocated in the assume cache."""
    store, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    [first] = placed(place(plugin, [pod("m0", by_name("shared"))]))
    assert (await plugin.pre_bind(first.state, first.pod, first.node)).ok
    assert store.claims.is_assumed("ns/shared")
    [late] = placed(place(plugin, [pod("m1", by_name("shared"))]))
    assert "uid-shared" not in store.in_flight
    plugin.unreserve(late.state, late.pod, late.node)  # nothing to release, nothing restored
    latest = store.claims.get("ns/shared")
    assert latest is not None and latest.allocated
    [again] = placed(place(plugin, [pod("m1", by_name("shared"))]))
    assert (await plugin.pre_bind(again.state, again.pod, again.node)).ok
    assert reserved(api, "ns/shared") == ["m0", "m1"]
    assert len(api.status_writes) == 2  # the late member adds only its reservation


async def test_member_already_reserved_writes_nothing() -> None:
    store, api, plugin = setup(echo=True)
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    placements = placed(place(plugin, [pod("m0", by_name("shared")), pod("m1", by_name("shared"))]))
    assert (await plugin.pre_bind(placements[0].state, placements[0].pod, placements[0].node)).ok
    assert (await plugin.pre_bind(placements[1].state, placements[1].pod, placements[1].node)).ok
    assert len(api.status_writes) == 1
    assert not store.claims.is_assumed("ns/shared")  # the echo replaced the assumed copy


@pytest.mark.parametrize("failure", [WriteResult.CONFLICT, WriteResult.ERROR, WriteResult.INVALID])
async def test_failed_pre_bind_releases_nothing_and_unreserve_releases_once(
    failure: WriteResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Behaviour 4 (#139418): exactly one release per successful signal, whatever fails where."""
    store, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    placements = placed(place(plugin, [pod(f"m{i}", by_name("shared")) for i in range(3)]))
    assert store.in_flight.sharers("uid-shared") == 3
    api.fail_next(failure)
    first = await plugin.pre_bind(placements[0].state, placements[0].pod, placements[0].node)
    assert not first.ok and "ns/shared" in first.message and failure.value in first.message
    assert store.in_flight.sharers("uid-shared") == 3  # PreBind released nothing
    restored: list[str] = []
    original = AssumeCache.restore

    def recording_restore(cache: AssumeCache[ResourceClaim], key: str) -> None:
        restored.append(key)
        original(cache, key)

    monkeypatch.setattr(AssumeCache, "restore", recording_restore)
    for p in placements:
        plugin.unreserve(p.state, p.pod, p.node)
        plugin.unreserve(p.state, p.pod, p.node)  # a second unreserve of the same pod is a no-op
    assert "uid-shared" not in store.in_flight
    assert restored == ["ns/shared"]
    assert not store.device_in_use((DRIVER, placements[0].node, "gpu-0"))


async def test_after_a_failed_write_the_next_member_writes_without_the_failed_pod() -> None:
    _, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    placements = placed(place(plugin, [pod(f"m{i}", by_name("shared")) for i in range(3)]))
    api.fail_next(WriteResult.ERROR)
    statuses = await pre_bind_all(plugin, placements)
    assert [s.ok for s in statuses] == [False, True, True]
    assert reserved(api, "ns/shared") == ["m1", "m2"]


async def test_conflict_when_someone_else_changed_the_claim() -> None:
    store, api, plugin = setup()
    api.add(claim("c", exactly("gpu", 1), uid="uid-c"))
    [p] = placed(place(plugin, [pod("p", by_name("c"))]))
    api.objects["ns/c"]["metadata"]["resourceVersion"] = "999"  # changed behind the informer's back
    status = await plugin.pre_bind(p.state, p.pod, p.node)
    assert status.code is Code.UNSCHEDULABLE and status.cause == "ClaimChanged"
    plugin.unreserve(p.state, p.pod, p.node)
    assert "uid-c" not in store.in_flight


def test_more_than_256_consumers_make_the_group_unschedulable_and_nothing_is_written() -> None:
    _, api, plugin = setup()
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    outcome = place(plugin, [pod(f"m{i}", by_name("shared"), group="big") for i in range(257)])
    assert all(isinstance(o, Placed) for o in outcome[:256])
    last = outcome[256]
    assert isinstance(last, Status) and last.code is Code.UNSCHEDULABLE and last.cause == "ReservedForLimit"
    assert (
        "at most 256" in last.message and "kubelet only prepares claims reserved for its pod" in last.message
    )
    assert "ns/shared" in last.message and "ns/m256" in last.message
    assert api.status_writes == []


async def test_claim_reserved_for_many_already_counts_toward_the_limit() -> None:
    _, api, plugin = setup()
    reserved_for = [{"resource": "pods", "name": f"old{i}", "uid": f"old{i}"} for i in range(256)]
    api.add(claim("c", exactly("gpu", 1), uid="uid-c", status={"reservedFor": reserved_for}))
    [status] = place(plugin, [pod("p", by_name("c"))])
    assert isinstance(status, Status) and status.cause == "ReservedForLimit"


def test_template_claim_waits_for_the_generated_name_and_ownership() -> None:
    _, api, plugin = setup()
    ref = PodClaimRef("gpu", resource_claim_template_name="tmpl")
    waiting = plugin.pre_filter(CycleState(), pod("p", ref))
    assert (
        waiting.code is Code.WAIT
        and waiting.cause == "ClaimPending"
        and "status.resourceClaimStatuses" in waiting.message
    )
    not_needed = pod("p", ref, statuses={"gpu": None})
    assert plugin.pre_filter(CycleState(), not_needed).code is Code.SKIP
    api.add(claim("p-gpu-x1", exactly("gpu"), uid="uid-gen"))
    foreign = plugin.pre_filter(CycleState(), pod("p", ref, statuses={"gpu": "p-gpu-x1"}))
    assert foreign.cause == "ClaimNotOwned" and "was not created for pod ns/p" in foreign.message
    owned = claim("p-gpu-x2", exactly("gpu"), uid="uid-gen2")
    owned.metadata.owner_references = [
        parse_resource(
            ResourceClaim,
            {
                "metadata": {
                    "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p"}]
                }
            },
        ).metadata.owner_references[0]
    ]
    api.add(owned)
    assert plugin.pre_filter(CycleState(), pod("p", ref, statuses={"gpu": "p-gpu-x2"})).ok


def test_missing_claim_and_bad_selector_are_reported_with_names() -> None:
    _, api, plugin = setup()
    missing = plugin.pre_filter(CycleState(), pod("p", by_name("nope")))
    assert missing.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and "ResourceClaim ns/nope" in missing.message
    api.add(claim("bad", exactly("gpu", 1, "device.driver =="), uid="uid-bad"))
    bad = plugin.pre_filter(CycleState(), pod("p", by_name("bad")))
    assert bad.cause == "ClaimUnallocatable" and "'device.driver =='" in bad.message


def test_devices_in_flight_are_not_given_to_the_next_pod() -> None:
    _, api, plugin = setup(devices_per_node=1)
    for i in range(3):
        api.add(claim(f"c{i}", exactly("gpu"), uid=f"uid-c{i}"))
    outcome = place(plugin, [pod(f"p{i}", by_name(f"c{i}")) for i in range(3)])
    assert [o.node for o in outcome[:2] if isinstance(o, Placed)] == ["node-a", "node-b"]
    last = outcome[2]
    assert isinstance(last, Status) and last.cause == "InsufficientDevices"


async def test_group_level_template_claim_is_created_then_shared_and_reserved_for_the_group() -> None:
    store, api, plugin = setup()
    template = parse_resource(
        ResourceClaimTemplate,
        {
            "metadata": {"name": "tmpl", "namespace": "ns"},
            "spec": {
                "metadata": {"labels": {"team": "a"}},
                "spec": {"devices": {"requests": [exactly("gpu", 1)]}},
            },
        },
    )
    store.upsert_template(template)
    podgroup = PodGroup.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 3}},
                "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "tmpl"}],
            },
        }
    )
    group = PodGroupInfo(
        "ns", "g", "uid-g", min_count=3, is_gang=True, claims=(PodClaimRef("shared", None, "tmpl"),)
    )
    members = [pod(f"m{i}", group="g") for i in range(3)]
    [waiting, *_] = place(plugin, members, group=group)
    assert isinstance(waiting, Status) and "waiting for lockstep to create" in waiting.message

    report = await store.ensure_group_claims(podgroup, api)
    assert report.problems == [] and len(report.created) == 1
    [created] = api.creates
    assert created["metadata"]["ownerReferences"][0]["uid"] == "uid-g"
    assert created["metadata"]["labels"] == {"team": "a"}
    assert api.group_records == [("ns/g", [{"name": "shared", "resourceClaimName": report.created[0]}])]
    again = await store.ensure_group_claims(podgroup, api)  # idempotent: the claim exists, owned by g
    assert again.created == [] and again.problems == []

    placements = placed(place(plugin, members, group=group))
    statuses = await pre_bind_all(plugin, placements)
    assert all(s.ok for s in statuses)
    key = f"ns/{report.created[0]}"
    assert reserved(api, key) == ["g"]  # the PodGroup, once: the pods do not list the claim
    assert len(api.status_writes) == 1


async def test_group_claim_problems_are_reported_with_the_field() -> None:
    store, api, _ = setup()
    podgroup = PodGroup.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
            "spec": {
                "schedulingPolicy": {"basic": {}},
                "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "missing"}],
            },
        }
    )
    report = await store.ensure_group_claims(podgroup, api)
    assert report.problems == [
        "PodGroup ns/g spec.resourceClaims[0].resourceClaimTemplateName: "
        "ResourceClaimTemplate ns/missing not found"
    ]
    assert api.creates == [] and api.group_records == []


async def test_pre_bind_without_a_claim_api_is_an_error_not_a_silent_success() -> None:
    store, api, _ = setup()
    plugin = DynamicResources(store, None)
    api.add(claim("c", exactly("gpu"), uid="uid-c"))
    [p] = placed(place(plugin, [pod("p", by_name("c"))]))
    status = await plugin.pre_bind(p.state, p.pod, p.node)
    assert status.code is Code.ERROR and "no claim API" in status.message


def test_candidate_nodes_follow_free_devices_and_pending_allocations() -> None:
    store, api, plugin = setup(devices_per_node=1)
    for i in range(3):
        api.add(claim(f"c{i}", exactly("gpu"), uid=f"uid-c{i}"))
    state = CycleState()
    first = pod("p0", by_name("c0"))
    assert plugin.pre_filter(state, first).ok
    assert plugin.candidate_nodes(state, first) == {"node-a", "node-b"}
    [p0] = placed(place(plugin, [first]))
    later = CycleState()
    assert plugin.pre_filter(later, pod("p1", by_name("c1"))).ok
    assert plugin.candidate_nodes(later, pod("p1", by_name("c1"))) == {"node-a", "node-b"} - {p0.node}
    sharer = CycleState()
    assert plugin.pre_filter(sharer, pod("q", by_name("c0"))).ok  # reuses p0's pending allocation
    assert plugin.candidate_nodes(sharer, pod("q", by_name("c0"))) == {p0.node}
    [p1] = placed(place(plugin, [pod("p1", by_name("c1"))]))
    full = plugin.pre_filter(CycleState(), pod("p2", by_name("c2")))
    assert full.code is Code.UNSCHEDULABLE and "no node has a free device" in full.message
    plugin.unreserve(p1.state, p1.pod, p1.node)
    assert store.nodes_with_free_devices() == {p1.node}


def test_devices_not_bound_to_a_node_disable_node_narrowing() -> None:
    store, api, plugin = setup()
    store.upsert_slice(resource_slice("fabric", [device("fabric-0")], pool="fabric", all_nodes=True))
    api.add(claim("c", exactly("gpu"), uid="uid-c"))
    state = CycleState()
    assert plugin.pre_filter(state, pod("p", by_name("c"))).ok
    assert plugin.candidate_nodes(state, pod("p", by_name("c"))) is None


async def test_unreserve_after_a_written_reservation_removes_only_that_pod() -> None:
    """A member whose binding fails after PreBind must not keep the claim reserved."""
    _, api, plugin = setup(echo=True)
    api.add(claim("shared", exactly("gpu", 1), uid="uid-shared"))
    placements = placed(place(plugin, [pod(f"m{i}", by_name("shared")) for i in range(3)]))
    assert all(s.ok for s in await pre_bind_all(plugin, placements))
    api.fail_next(WriteResult.CONFLICT)  # the first removal attempt loses a race and is retried
    failed = placements[1]
    plugin.unreserve(failed.state, failed.pod, failed.node)
    await plugin.wait_for_background()
    assert reserved(api, "ns/shared") == ["m0", "m2"]
    assert api.objects["ns/shared"]["status"]["allocation"]  # the allocation stays for the others
    plugin.unreserve(failed.state, failed.pod, failed.node)  # nothing left to remove
    await plugin.wait_for_background()
    assert len(api.status_writes) == 3  # the gang's one write, one conflict, one removal


async def test_unreserving_the_last_consumer_deallocates_the_claim() -> None:
    """Nobody else will: the claim controller only deallocates when it drops the last reservation."""
    store, api, plugin = setup(echo=True)
    api.add(claim("solo", exactly("gpu", 1), uid="uid-solo"))
    [p] = placed(place(plugin, [pod("p", by_name("solo"))]))
    assert (await plugin.pre_bind(p.state, p.pod, p.node)).ok
    assert api.objects["ns/solo"]["status"]["allocation"]
    plugin.unreserve(p.state, p.pod, p.node)
    await plugin.wait_for_background()
    assert reserved(api, "ns/solo") == []
    assert not api.objects["ns/solo"]["status"].get("allocation")
    assert store.nodes_with_free_devices() == {"node-a", "node-b"}


async def test_a_deleted_group_claim_is_created_again() -> None:
    store, api, _ = setup()
    store.upsert_template(
        parse_resource(
            ResourceClaimTemplate,
            {
                "metadata": {"name": "tmpl", "namespace": "ns"},
                "spec": {"spec": {"devices": {"requests": [exactly("gpu")]}}},
            },
        )
    )
    spec = {
        "schedulingPolicy": {"basic": {}},
        "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "tmpl"}],
    }
    podgroup = PodGroup.model_validate(
        {"metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"}, "spec": spec}
    )
    [name] = (await store.ensure_group_claims(podgroup, api)).created
    recorded = PodGroup.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
            "spec": spec,
            "status": {"resourceClaimStatuses": [{"name": "shared", "resourceClaimName": name}]},
        }
    )
    assert (await store.ensure_group_claims(recorded, api)).created == []  # exists: nothing to do
    del api.objects[f"ns/{name}"]
    store.delete_claim("ns", name)
    again = await store.ensure_group_claims(recorded, api)
    assert again.created == [name] and again.problems == []
    assert len(api.group_records) == 1  # the status already names it: no second status write
