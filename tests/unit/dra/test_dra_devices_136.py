"""The allocator with the DRA features Kubernetes 1.36 turns on: device taints and tolerations,
partitionable devices (shared counters), binding conditions. Cases follow upstream's allocator tests
(``structured/internal/allocatortesting``): taints, tolerations, counters, incomplete pools."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from dra_builders import DRIVER, claim, device, device_class, exactly, partition, resource_slice, taint
from dra_memory_api import MemoryClaimAPI
from test_dra_plugin import Placed, by_name, place, pod

from lockstep.api.resource import DeviceClass, ResourceSlice, parse_resource
from lockstep.config import KNOWN_FEATURE_GATES
from lockstep.dra.allocator import Allocator
from lockstep.dra.features import Features, allocator_features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import Code, CycleState, PodGroupInfo, PodInfo, Status
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


def test_devices_with_binding_conditions_are_not_allocated_and_explained() -> None:
    fabric = {"name": "fabric", "bindsToNode": True, "bindingConditions": ["example.com/attached"]}
    allocator, _ = make([resource_slice("s", [fabric], "node-a")])
    assert chosen(allocator, claim("c", exactly("gpu"))) is None
    explanation = allocator.explain([allocator.compile(claim("c", exactly("gpu")))], "node-a", {})
    assert "device fabric has bindingConditions" in explanation


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


def test_a_pod_asking_for_a_dra_extended_resource_is_refused_naming_the_field() -> None:
    store = ResourceStore(FEATURES)
    store.upsert_class(
        parse_resource(
            DeviceClass,
            {
                "metadata": {"name": "gpu", "resourceVersion": "1"},
                "spec": {"extendedResourceName": "example.com/gpu"},
            },
        )
    )
    plugin = DynamicResources(store, None)
    asking = PodInfo(uid="u", namespace="ns", name="p", requests={"cpu": 100, "example.com/gpu": 1})
    status = plugin.pre_filter(CycleState(), asking)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "requests[example.com/gpu]" in status.message and "DeviceClass gpu" in status.message
    implicit = PodInfo(
        uid="u", namespace="ns", name="p", requests={"deviceclass.resource.kubernetes.io/gpu": 1}
    )
    assert plugin.pre_filter(CycleState(), implicit).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    off = DynamicResources(ResourceStore(replace(FEATURES, extended_resource=False)), None)
    off.store.upsert_class(store.classes["gpu"])
    assert off.pre_filter(CycleState(), asking).code is Code.SKIP
