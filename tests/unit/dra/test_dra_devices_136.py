"""The allocator with the DRA features Kubernetes 1.36 turns on: device taints and tolerations,
partitionable devices (shared counters), binding conditions. Cases follow upstream's allocator tests
(``structured/internal/allocatortesting``): taints, tolerations, counters, incomplete pools."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from dra_builders import DRIVER, claim, device, device_class, exactly, partition, resource_slice, taint
from dra_memory_api import MemoryClaimAPI
from test_dra_plugin import Placed, by_name, place, pod

from lockstep.api.resource import ResourceClaim, ResourceSlice, parse_resource
from lockstep.config import KNOWN_FEATURE_GATES
from lockstep.dra.allocator import Allocator
from lockstep.dra.features import Features, allocator_features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import Code, PodGroupInfo, Status
from lockstep.scheduler.plugins.dynamic_resources import DynamicResources

FEATURES = allocator_features(KNOWN_FEATURE_GATES)
COUNTERS = {"gpu0": {"memory": "40Gi", "sm": "98"}}


def tainted(name: str, *taints: dict[str, str], **extra: Any) -> dict[str, Any]:
    return {**device(name), "taints": list(taints), **extra}


def make(
    slices: list[ResourceSlice], features: Features = FEATURES, in_use: set[DeviceID] | None = None
) -> tuple[Allocator, set[DeviceID]]:
    inventory = DeviceInventory()
    for published in slices:
        inventory.update_slice(published)
    taken = in_use if in_use is not None else set()
    return Allocator(features, inventory, {"gpu": device_class()}, taken.__contains__), taken


def chosen(allocator: Allocator, *claims: Any, node: str = "node-a") -> list[list[str]] | None:
    result = allocator.allocate([allocator.compile(c) for c in claims], node, {})
    return None if result is None else [[r.device for r in a.devices.results] for a in result]


def partitioned(
    *devices: dict[str, Any], counters: dict[str, dict[str, str]] = COUNTERS
) -> list[ResourceSlice]:
    """A two-slice pool on node-a: the counters slice and the devices slice."""
    return [
        resource_slice("counters", [], "node-a", pool="pool", slice_count=2, shared_counters=counters),
        resource_slice("devices", list(devices), "node-a", pool="pool", slice_count=2),
    ]


# --- taints ------------------------------------------------------------------------------------------


def test_a_tainted_device_is_skipped_and_a_tolerating_request_gets_it() -> None:
    allocator, _ = make(
        [resource_slice("s", [tainted("sick", taint("example.com/unhealthy", value="true"))], "node-a")]
    )
    assert chosen(allocator, claim("c", exactly("gpu"))) is None
    compiled = [allocator.compile(claim("c", exactly("gpu")))]
    explanation = allocator.explain(compiled, "node-a", {})
    assert "device sick tainted example.com/unhealthy:NoSchedule" in explanation
    tolerating = exactly("gpu", tolerations=[{"key": "example.com/unhealthy", "operator": "Exists"}])
    [allocation] = allocator.allocate([allocator.compile(claim("t", tolerating))], "node-a", {}) or []
    [result] = allocation.devices.results
    assert result.device == "sick"
    # The result records the request's tolerations, as upstream's does.
    assert [t.key for t in result.tolerations or []] == ["example.com/unhealthy"]


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        ({"key": "k", "operator": "Exists"}, True),
        ({"operator": "Exists"}, True),  # empty key with Exists: every taint
        ({"key": "k", "operator": "Equal", "value": "v"}, True),
        ({"key": "k", "value": "v"}, True),  # Equal is the default operator
        ({"key": "k", "operator": "Equal", "value": "other"}, False),
        ({"key": "k", "operator": "Exists", "effect": "NoSchedule"}, True),
        ({"key": "k", "operator": "Exists", "effect": "NoExecute"}, False),
        ({"key": "other", "operator": "Exists"}, False),
    ],
)
def test_toleration_matching_follows_upstream(toleration: dict[str, str], tolerated: bool) -> None:
    allocator, _ = make([resource_slice("s", [tainted("d", taint("k", value="v"))], "node-a")])
    result = chosen(allocator, claim("c", exactly("gpu", tolerations=[toleration])))
    assert (result == [["d"]]) is tolerated


def test_every_blocking_taint_must_be_tolerated_and_effect_none_blocks_nothing() -> None:
    two = tainted("d", taint("a"), taint("b", "NoExecute"))
    allocator, _ = make([resource_slice("s", [two, tainted("n", taint("x", "None"))], "node-a")])
    only_a = exactly("gpu", 2, tolerations=[{"key": "a", "operator": "Exists"}])
    assert chosen(allocator, claim("c", only_a)) is None
    both = exactly(
        "gpu", 2, tolerations=[{"key": "a", "operator": "Exists"}, {"key": "b", "operator": "Exists"}]
    )
    assert chosen(allocator, claim("c", both)) == [["d", "n"]]


def test_a_subrequest_tolerates_on_its_own() -> None:
    allocator, _ = make([resource_slice("s", [tainted("d", taint("k"))], "node-a")])
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "strict", "deviceClassName": "gpu"},
            {
                "name": "lenient",
                "deviceClassName": "gpu",
                "tolerations": [{"key": "k", "operator": "Exists"}],
            },
        ],
    }
    [allocation] = allocator.allocate([allocator.compile(claim("c", request))], "node-a", {}) or []
    assert [r.request for r in allocation.devices.results] == ["gpu/lenient"]


def test_with_device_taints_off_taints_are_ignored() -> None:
    allocator, _ = make(
        [resource_slice("s", [tainted("d", taint("k"))], "node-a")], replace(FEATURES, device_taints=False)
    )
    assert chosen(allocator, claim("c", exactly("gpu"))) == [["d"]]


# --- partitionable devices -------------------------------------------------------------------------


def test_two_partitions_of_one_counter_are_never_allocated_together() -> None:
    allocator, taken = make(partitioned(partition("a", memory="40Gi"), partition("b", memory="40Gi")))
    assert chosen(allocator, claim("c", exactly("gpu", 2))) is None  # one claim, two partitions
    assert chosen(allocator, claim("c1", exactly("gpu")), claim("c2", exactly("gpu"))) is None  # one pod
    assert chosen(allocator, claim("c1", exactly("gpu"))) == [["a"]]
    taken.add((DRIVER, "pool", "a"))  # allocated or in flight
    assert chosen(allocator, claim("c2", exactly("gpu"))) is None
    explanation = allocator.explain([allocator.compile(claim("c2", exactly("gpu")))], "node-a", {})
    assert 'device b needs 40Gi of counter "memory" in counter set "gpu0", 0 left' in explanation
    taken.clear()
    assert chosen(allocator, claim("c2", exactly("gpu"))) == [["a"]]


def test_partitions_fill_a_counter_exactly_and_every_counter_counts() -> None:
    devices = [partition(f"half-{i}", memory="20Gi", sm="49") for i in range(3)] + [
        partition("sm-hog", memory="1Gi", sm="50")
    ]
    allocator, taken = make(partitioned(*devices))
    assert chosen(allocator, claim("c", exactly("gpu", 2))) == [["half-0", "half-1"]]
    assert chosen(allocator, claim("c", exactly("gpu", 3))) is None
    taken.add((DRIVER, "pool", "half-0"))
    # 20Gi and 49 sm left: sm-hog needs 50 sm.
    assert chosen(allocator, claim("c", exactly("gpu", 2))) is None
    assert chosen(allocator, claim("c", exactly("gpu"))) == [["half-1"]]


def test_busy_devices_of_a_simulation_consume_counters() -> None:
    allocator, _ = make(partitioned(partition("a", memory="40Gi"), partition("b", memory="40Gi")))
    compiled = [allocator.compile(claim("c", exactly("gpu")))]
    assert allocator.find(compiled, "node-a", {}, busy={(DRIVER, "pool", "a")}) is None


def test_reserve_rechecks_counters_taken_since_filter() -> None:
    allocator, taken = make(partitioned(partition("a", memory="40Gi"), partition("b", memory="40Gi")))
    found = allocator.find([allocator.compile(claim("c", exactly("gpu")))], "node-a", {})
    assert found is not None and allocator.still_available(found)
    taken.add((DRIVER, "pool", "b"))  # a sibling partition went to another pod meanwhile
    assert not allocator.still_available(found)


def test_an_incomplete_pool_is_not_used() -> None:
    devices_only = resource_slice(
        "devices", [partition("a", memory="1Gi")], "node-a", pool="pool", slice_count=2
    )
    allocator, _ = make([devices_only])
    assert chosen(allocator, claim("c", exactly("gpu"))) is None


def test_a_device_consuming_an_unknown_counter_is_not_used() -> None:
    allocator, _ = make(partitioned(partition("a", "gpu9", memory="1Gi"), partition("b", memory="50Gi")))
    assert chosen(allocator, claim("c", exactly("gpu"))) is None


def test_with_partitionable_devices_off_consuming_devices_are_skipped() -> None:
    allocator, _ = make(
        partitioned(partition("a", memory="1Gi")), replace(FEATURES, partitionable_devices=False)
    )
    assert chosen(allocator, claim("c", exactly("gpu"))) is None
    explanation = allocator.explain([allocator.compile(claim("c", exactly("gpu")))], "node-a", {})
    assert "DRAPartitionableDevices" in explanation


# --- binding conditions ----------------------------------------------------------------------------


def test_with_binding_conditions_off_such_devices_are_not_allocated_and_explained() -> None:
    fabric = {"name": "fabric", "bindsToNode": True, "bindingConditions": ["example.com/attached"]}
    features = replace(FEATURES, device_binding_and_status=False)
    allocator, _ = make([resource_slice("s", [fabric], "node-a")], features)
    assert chosen(allocator, claim("c", exactly("gpu"))) is None
    explanation = allocator.explain([allocator.compile(claim("c", exactly("gpu")))], "node-a", {})
    assert "device fabric has bindingConditions, used only with the DRADeviceBindingConditions" in explanation


def test_binding_conditions_are_copied_and_bind_to_the_node() -> None:
    fabric = {
        "name": "fabric",
        "bindsToNode": True,
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/attach-failed"],
    }
    allocator, _ = make([resource_slice("s", [fabric], all_nodes=True, pool="p")])
    [allocation] = allocator.allocate([allocator.compile(claim("c", exactly("gpu")))], "node-b", {}) or []
    [result] = allocation.devices.results
    assert result.binding_conditions == ["example.com/attached"]
    assert result.binding_failure_conditions == ["example.com/attach-failed"]
    assert allocation.node_selector is not None
    assert allocation.node_selector.node_selector_terms[0].match_fields[0].values == ["node-b"]


# --- through the DynamicResources plugin -----------------------------------------------------------


def test_a_gang_never_gets_two_partitions_of_one_counter_in_one_cycle() -> None:
    store = ResourceStore(FEATURES)
    store.upsert_class(device_class())
    for published in partitioned(partition("a", memory="40Gi"), partition("b", memory="40Gi")):
        store.upsert_slice(published)
    api = MemoryClaimAPI(store)
    plugin = DynamicResources(store, api)
    for name in ("c1", "c2"):
        api.add(claim(name, exactly("gpu"), uid=f"uid-{name}"))
    group = PodGroupInfo(namespace="ns", name="g", uid="uid-g", min_count=2, is_gang=True)
    outcome = place(
        plugin, [pod("p1", by_name("c1"), group="g"), pod("p2", by_name("c2"), group="g")], group=group
    )
    assert isinstance(outcome[0], Placed)
    assert isinstance(outcome[1], Status) and outcome[1].code is Code.UNSCHEDULABLE
    assert 'counter "memory" in counter set "gpu0"' in outcome[1].message


# --- consumable capacity ---------------------------------------------------------------------------

NIC = {
    "name": "shared-nic",
    "allowMultipleAllocations": True,
    "capacity": {
        "bandwidth": {
            "value": "100G",
            "requestPolicy": {"default": "10G", "validRange": {"min": "1G", "max": "100G", "step": "1G"}},
        }
    },
}


def bandwidth(name: str, amount: str | None) -> Any:
    request = exactly("nic")
    if amount is not None:
        request["exactly"]["capacity"] = {"requests": {"bandwidth": amount}}
    return claim(name, request, uid=f"uid-{name}")


def nic_store() -> ResourceStore:
    store = ResourceStore(FEATURES)
    store.upsert_class(device_class())
    store.upsert_slice(resource_slice("s", [NIC], "node-a"))
    return store


def allocate_into(store: ResourceStore, *claims: Any) -> list[Any] | None:
    """Allocate the claims together on node-a and record the allocations as the informer would."""
    allocator = store.allocator
    results = allocator.allocate([allocator.compile(c) for c in claims], "node-a", {})
    if results is None:
        return None
    for c, allocation in zip(claims, results, strict=True):
        store.upsert_claim(
            c.model_copy(update={"status": c.status.model_copy(update={"allocation": allocation})})
        )
    return results


def test_multi_allocation_fills_a_device_up_to_its_capacity_and_no_further() -> None:
    store = nic_store()
    results = [allocate_into(store, bandwidth(f"c{i}", "25G")) for i in range(5)]
    assert all(r is not None for r in results[:4]) and results[4] is None
    [allocation] = results[0] or []
    [result] = allocation.devices.results
    assert result.device == "shared-nic" and result.consumed_capacity == {"bandwidth": "25G"}
    assert allocation.allocation_timestamp is not None
    assert result.share_id and len({r[0].devices.results[0].share_id for r in results[:4] if r}) == 4
    store.delete_claim("ns", "c0")  # a share released: 25G free again
    assert allocate_into(store, bandwidth("c5", "25G")) is not None


def test_capacity_requests_follow_the_request_policy() -> None:
    store = nic_store()
    [allocation] = allocate_into(store, bandwidth("rounded", "25500M")) or []
    assert allocation.devices.results[0].consumed_capacity == {"bandwidth": "26G"}  # step 1G rounds up
    [allocation] = allocate_into(store, bandwidth("default", None)) or []
    assert allocation.devices.results[0].consumed_capacity == {"bandwidth": "10G"}  # the policy default
    assert allocate_into(store, bandwidth("too-much", "101G")) is None  # above validRange.max
    other = exactly("nic")
    other["exactly"]["capacity"] = {"requests": {"latency": "1"}}
    assert allocate_into(store, claim("unknown", other)) is None  # a capacity the device lacks


def test_shares_taken_in_one_search_count_against_each_other() -> None:
    store = nic_store()
    assert allocate_into(store, bandwidth("a", "60G"), bandwidth("b", "40G")) is not None
    assert allocate_into(store, bandwidth("c", "1G")) is None
    store = nic_store()
    assert allocate_into(store, bandwidth("a", "60G"), bandwidth("b", "41G")) is None


def test_with_consumable_capacity_off_a_multi_allocatable_device_is_exclusive() -> None:
    allocator, taken = make(
        [resource_slice("s", [NIC], "node-a")], replace(FEATURES, consumable_capacity=False)
    )
    [allocation] = allocator.allocate([allocator.compile(claim("c", exactly("nic")))], "node-a", {}) or []
    assert allocation.devices.results[0].share_id is None
    taken.add((DRIVER, "node-a", "shared-nic"))
    assert chosen(allocator, claim("d", exactly("nic"))) is None


# --- binding conditions at PreBind -----------------------------------------------------------------


def fabric(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "bindsToNode": True,
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/attach-failed"],
    }


def binding_setup(*devices: dict[str, Any]) -> tuple[ResourceStore, MemoryClaimAPI, DynamicResources]:
    store = ResourceStore(FEATURES)
    store.upsert_class(device_class())
    store.upsert_slice(resource_slice("s", list(devices), "node-a"))
    api = MemoryClaimAPI(store, echo=True)
    return store, api, DynamicResources(store, api)


def report(api: MemoryClaimAPI, key: str, condition: str) -> None:
    """The driver sets a condition True on the claim's allocated device (status.devices)."""
    obj = api.objects[key]
    [result] = obj["status"]["allocation"]["devices"]["results"]
    obj["status"]["devices"] = [
        {
            "driver": result["driver"],
            "pool": result["pool"],
            "device": result["device"],
            "conditions": [{"type": condition, "status": "True", "reason": "Sim", "message": ""}],
        }
    ]
    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
    api.store.upsert_claim(parse_resource(ResourceClaim, obj))


def gang_of(plugin: DynamicResources, api: MemoryClaimAPI, *claim_names: str) -> list[Placed]:
    for name in claim_names:
        api.add(claim(name, exactly("gpu"), uid=f"uid-{name}"))
    group = PodGroupInfo(namespace="ns", name="g", uid="uid-g", min_count=len(claim_names), is_gang=True)
    members = [pod(f"p-{name}", by_name(name), group="g") for name in claim_names]
    return [p for p in place(plugin, members, group=group) if isinstance(p, Placed)]


async def test_a_binding_condition_delays_the_gang_then_allows_it() -> None:
    _, api, plugin = binding_setup(fabric("f1"), device("plain"))
    notes: list[tuple[Any, str]] = []
    plugin.note_binding = lambda key, message: notes.append((key, message))
    placements = gang_of(plugin, api, "c1", "c2")  # c1 gets fabric f1, c2 the plain device
    assert len(placements) == 2
    binding = asyncio.gather(*(plugin.pre_bind(p.state, p.pod, p.node) for p in placements))
    await asyncio.sleep(0.2)
    assert not binding.done()  # both wait, the member without conditions too
    assert "ResourceClaim ns/c1 device f1 (example.com/attached)" in plugin.binding_waits["PodGroup ns/g"]
    report(api, "ns/c1", "example.com/attached")
    assert await asyncio.wait_for(binding, 2) == [Status(), Status()]
    assert not plugin.binding_waits
    # The group's status was told what its binding waited for.
    waited = "waiting for binding conditions: ResourceClaim ns/c1 device f1 (example.com/attached)"
    assert [(key.namespace, key.name, message) for key, message in notes] == [
        ("ns", "g", waited),
        ("ns", "g", "binding conditions met, binding"),
    ]


async def test_a_failure_condition_fails_the_whole_gang_and_clears_the_allocation() -> None:
    store, api, plugin = binding_setup(fabric("f1"), device("plain"))
    placements = gang_of(plugin, api, "c1", "c2")
    binding = asyncio.gather(*(plugin.pre_bind(p.state, p.pod, p.node) for p in placements))
    await asyncio.sleep(0.1)
    report(api, "ns/c1", "example.com/attach-failed")
    statuses = await asyncio.wait_for(binding, 2)
    assert [s.cause for s in statuses] == ["BindingConditionFailed"] * 2
    assert "binding failure condition example.com/attach-failed is True" in statuses[0].message
    for p in placements:
        plugin.unreserve(p.state, p.pod, p.node)
    await plugin.wait_for_background()
    assert "allocation" not in api.objects["ns/c1"]["status"]
    assert "devices" not in api.objects["ns/c1"]["status"]
    assert not store.device_in_use((DRIVER, "node-a", "f1"))


async def test_binding_conditions_time_out() -> None:
    _, api, plugin = binding_setup(fabric("f1"))
    plugin.binding_timeout = 0.2
    [placement] = gang_of(plugin, api, "c1")
    status = await asyncio.wait_for(plugin.pre_bind(placement.state, placement.pod, placement.node), 2)
    assert status.cause == "BindingTimeout" and "example.com/attached" in status.message


async def test_a_gang_member_failing_before_binding_fails_the_waiting_ones() -> None:
    _, api, plugin = binding_setup(fabric("f1"), device("plain"))
    first, second = gang_of(plugin, api, "c1", "c2")
    waiting = asyncio.ensure_future(plugin.pre_bind(first.state, first.pod, first.node))
    await asyncio.sleep(0.1)
    plugin.unreserve(second.state, second.pod, second.node)  # e.g. its Bind failed
    status = await asyncio.wait_for(waiting, 2)
    assert status.cause == "GangMemberFailed"


async def test_a_cancelled_binding_wait_stops_polling() -> None:
    _, api, plugin = binding_setup(fabric("f1"))
    [placement] = gang_of(plugin, api, "c1")
    waiting = asyncio.ensure_future(plugin.pre_bind(placement.state, placement.pod, placement.node))
    await asyncio.sleep(0.1)
    assert plugin.binding_waits  # polling the claim
    waiting.cancel()  # the operator shuts down
    await asyncio.sleep(0.1)
    assert not plugin.binding_waits


def test_allocation_mode_all_waits_for_an_incomplete_pool() -> None:
    complete = resource_slice("a", [device("a0")], "node-a", pool="a")
    partial = resource_slice("b1", [device("b0")], "node-a", pool="b", slice_count=2)
    allocator, _ = make([complete, partial])
    every = claim("c", exactly("gpu", all_devices=True))
    assert chosen(allocator, every) is None  # not just the devices of the complete pool
    explanation = allocator.explain([allocator.compile(every)], "node-a", {})
    assert "resource pool gpu.example.com/b is being updated (1 of 2 slices published)" in explanation
    assert chosen(allocator, claim("d", exactly("gpu"))) == [["a0"]]  # ExactCount still uses complete pools
    elsewhere = resource_slice("e", [device("e0")], "node-b", pool="e")
    allocator, _ = make([elsewhere, partial])
    assert chosen(allocator, every, node="node-b") == [["e0"]]
