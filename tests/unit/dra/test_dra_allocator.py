"""The structured-parameters allocator: requests, slices, constraints, features, CEL errors."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields, replace

import pytest
from dra_builders import (
    CLASS,
    DRIVER,
    claim,
    device,
    device_class,
    exactly,
    first_available,
    match,
    resource_slice,
)

from lockstep.api.resource import DeviceClass, ResourceClaim, ResourceSlice
from lockstep.config import KNOWN_FEATURE_GATES
from lockstep.dra.allocator import AllocationError, Allocator
from lockstep.dra.cel import Selector
from lockstep.dra.cel_fast import FastDevice, FastSelector
from lockstep.dra.features import (
    FEATURE_GATES,
    GATE_FEATURES,
    Features,
    allocator_features,
)
from lockstep.dra.inventory import DeviceID, DeviceInventory

ALL_ON = Features(admin_access=True, prioritized_list=True, list_type_attributes=True)


def make_allocator(
    slices: Iterable[ResourceSlice],
    classes: Iterable[DeviceClass] = (),
    features: Features = ALL_ON,
    in_use: set[DeviceID] | None = None,
) -> Allocator:
    inventory = DeviceInventory()
    for published in slices:
        inventory.update_slice(published)
    class_map = {c.metadata.name: c for c in (list(classes) or [device_class()])}
    busy = in_use if in_use is not None else set()
    return Allocator(features, inventory, class_map, busy.__contains__)


def allocate(
    allocator: Allocator,
    claims: list[ResourceClaim],
    node: str = "node-a",
    labels: dict[str, str] | None = None,
):  # type: ignore[no-untyped-def]
    return allocator.allocate([allocator.compile(c) for c in claims], node, labels or {})


def devices_of(result) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    return [(r.request, r.device) for r in result.devices.results]


GPUS = [device(f"gpu-{i}", index=i) for i in range(4)]


def test_exact_count_takes_node_local_devices_and_writes_a_node_selector() -> None:
    allocator = make_allocator([resource_slice("s-a", GPUS, "node-a"), resource_slice("s-b", GPUS, "node-b")])
    [result] = allocate(allocator, [claim("c", exactly("gpus", 2))], node="node-b")
    assert devices_of(result) == [("gpus", "gpu-0"), ("gpus", "gpu-1")]
    assert {r.pool for r in result.devices.results} == {"node-b"}
    assert result.dump()["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-b"]}]}
        ]
    }


def test_devices_in_use_are_not_available() -> None:
    busy = {(DRIVER, "node-a", "gpu-0"), (DRIVER, "node-a", "gpu-2")}
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")], in_use=busy)
    [result] = allocate(allocator, [claim("c", exactly("gpus", 2))])
    assert devices_of(result) == [("gpus", "gpu-1"), ("gpus", "gpu-3")]
    assert allocate(allocator, [claim("c", exactly("gpus", 3))]) is None


def test_claims_of_one_pod_never_share_a_device() -> None:
    allocator = make_allocator([resource_slice("s", GPUS[:3], "node-a")])
    first, second = allocate(allocator, [claim("c1", exactly("a", 2)), claim("c2", exactly("b", 1))])
    assert {d for _, d in devices_of(first)}.isdisjoint({d for _, d in devices_of(second)})
    assert allocate(allocator, [claim("c1", exactly("a", 2)), claim("c2", exactly("b", 2))]) is None


def test_request_and_class_selectors_both_apply() -> None:
    cls = device_class(CLASS, f'device.driver == "{DRIVER}"', f'device.attributes["{DRIVER}"].index >= 1')
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")], [cls])
    [result] = allocate(allocator, [claim("c", exactly("g", 1, f'device.attributes["{DRIVER}"].index != 1'))])
    assert devices_of(result) == [("g", "gpu-2")]


def test_allocation_mode_all_needs_every_matching_device_free() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    [result] = allocate(allocator, [claim("c", exactly("all", all_devices=True))])
    assert [d for _, d in devices_of(result)] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    busy = make_allocator([resource_slice("s", GPUS, "node-a")], in_use={(DRIVER, "node-a", "gpu-3")})
    assert allocate(busy, [claim("c", exactly("all", all_devices=True))]) is None
    empty = make_allocator([resource_slice("s", GPUS, "node-b")])
    assert allocate(empty, [claim("c", exactly("all", all_devices=True))]) is None


def test_first_available_falls_back_to_the_next_subrequest() -> None:
    allocator = make_allocator([resource_slice("s", GPUS[:2], "node-a")])
    request = first_available("gpu", ("four", 4, ""), ("two", 2, ""))
    [result] = allocate(allocator, [claim("c", request)])
    assert devices_of(result) == [("gpu/two", "gpu-0"), ("gpu/two", "gpu-1")]


def test_first_available_is_refused_without_prioritized_list() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")], features=Features())
    with pytest.raises(
        AllocationError, match=r"ns/c: spec.devices.requests\[0\].firstAvailable.*DRAPrioritizedList"
    ):
        allocator.compile(claim("c", first_available("gpu", ("one", 1, ""))))


def test_match_attribute_backtracks_over_an_early_choice() -> None:
    # gpu-0 is the first candidate for "a" but nothing else shares its numa value; the search must
    # undo that choice and take gpu-1 + gpu-2.
    devices = [device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=1)]
    allocator = make_allocator([resource_slice("s", devices, "node-a")])
    c = claim("c", exactly("a"), exactly("b"), constraints=[match(f"{DRIVER}/numa")])
    [result] = allocate(allocator, [c])
    assert devices_of(result) == [("a", "gpu-1"), ("b", "gpu-2")]


def test_match_attribute_only_covers_the_listed_requests() -> None:
    devices = [device("gpu-0", numa=0), device("gpu-1", numa=1), device("gpu-2", numa=2)]
    allocator = make_allocator([resource_slice("s", devices, "node-a")])
    scoped = claim(
        "c", exactly("a"), exactly("b"), exactly("c"), constraints=[match(f"{DRIVER}/numa", "a", "b")]
    )
    assert allocate(allocator, [scoped]) is None
    unscoped = claim("c", exactly("a"), exactly("b"), constraints=[match(f"{DRIVER}/numa", "a")])
    [result] = allocate(allocator, [unscoped])
    assert devices_of(result) == [("a", "gpu-0"), ("b", "gpu-1")]


def test_match_attribute_on_a_missing_attribute_fails() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    assert allocate(allocator, [claim("c", exactly("a", 2), constraints=[match(f"{DRIVER}/numa")])]) is None


LIST_DEVICES = [device("gpu-0", numa=[0, 1]), device("gpu-1", numa=[1, 2]), device("gpu-2", numa=[3])]


def test_list_type_attributes_gate_changes_the_allocation() -> None:
    """Behaviour 5: with the gate, list attributes match when the intersection is non-empty."""
    c = claim("c", exactly("a"), exactly("b"), constraints=[match(f"{DRIVER}/numa")])
    gated_on = make_allocator(
        [resource_slice("s", LIST_DEVICES, "node-a")],
        features=allocator_features({**KNOWN_FEATURE_GATES, "DRAListTypeAttributes": True}),
    )
    [result] = allocate(gated_on, [c])
    assert devices_of(result) == [("a", "gpu-0"), ("b", "gpu-1")]
    gated_off = make_allocator(
        [resource_slice("s", LIST_DEVICES, "node-a")],
        features=allocator_features({**KNOWN_FEATURE_GATES, "DRAListTypeAttributes": False}),
    )
    assert allocate(gated_off, [c]) is None


def test_list_intersection_narrows_across_three_devices() -> None:
    devices = [
        device("d0", numa=[0, 1]),
        device("d1", numa=[1, 2]),
        device("d2", numa=[2]),
        device("d3", numa=[1]),
    ]
    allocator = make_allocator([resource_slice("s", devices, "node-a")])
    c = claim("c", exactly("x", 3), constraints=[match(f"{DRIVER}/numa")])
    [result] = allocate(allocator, [c])
    assert [d for _, d in devices_of(result)] == ["d0", "d1", "d3"]  # {0,1}&{1,2}&{1} = {1}


def test_scalar_attribute_is_a_one_element_set_against_lists() -> None:
    devices = [device("d0", numa=[0, 1]), device("d1", numa=1)]
    allocator = make_allocator([resource_slice("s", devices, "node-a")])
    [result] = allocate(allocator, [claim("c", exactly("x", 2), constraints=[match(f"{DRIVER}/numa")])])
    assert len(result.devices.results) == 2


def test_includes_is_only_available_with_list_type_attributes() -> None:
    expression = f'device.attributes["{DRIVER}"].numa.includes(1)'
    on = make_allocator([resource_slice("s", LIST_DEVICES, "node-a")])
    [result] = allocate(on, [claim("c", exactly("a", 2, expression))])
    assert [d for _, d in devices_of(result)] == ["gpu-0", "gpu-1"]
    off = make_allocator(
        [resource_slice("s", LIST_DEVICES, "node-a")], features=Features(prioritized_list=True)
    )
    with pytest.raises(AllocationError, match="includes"):
        allocate(off, [claim("c", exactly("a", 2, expression))])


def test_admin_access_may_use_busy_devices_and_needs_its_gate() -> None:
    busy = {(DRIVER, "node-a", f"gpu-{i}") for i in range(4)}
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")], in_use=busy)
    [result] = allocate(allocator, [claim("c", exactly("monitor", 1, admin_access=True))])
    assert result.devices.results[0].admin_access is True
    assert allocate(allocator, [claim("c", exactly("plain", 1))]) is None
    no_gate = make_allocator([resource_slice("s", GPUS, "node-a")], features=Features(prioritized_list=True))
    with pytest.raises(AllocationError, match=r"requests\[0\].exactly.adminAccess.*DRAAdminAccess"):
        no_gate.compile(claim("c", exactly("monitor", 1, admin_access=True)))


def test_node_selector_and_all_nodes_slices() -> None:
    zone = {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["z1"]}]}]
    }
    allocator = make_allocator(
        [
            resource_slice("zonal", [device("net-0")], pool="zonal", node_selector=zone),
            resource_slice("global", [device("fabric-0")], pool="global", all_nodes=True),
        ]
    )
    c = claim("c", exactly("x", 2))
    [result] = allocate(allocator, [c], node="node-a", labels={"zone": "z1"})
    assert [d for _, d in devices_of(result)] == ["net-0", "fabric-0"]
    assert result.dump()["nodeSelector"] == zone
    assert allocate(allocator, [c], node="node-a", labels={"zone": "z2"}) is None
    [only_global] = allocate(allocator, [claim("c", exactly("x", 1))], node="node-b", labels={"zone": "z2"})
    assert devices_of(only_global) == [("x", "fabric-0")]


def test_all_nodes_devices_produce_no_node_selector() -> None:
    allocator = make_allocator(
        [resource_slice("global", [device("fabric-0")], pool="global", all_nodes=True)]
    )
    [result] = allocate(allocator, [claim("c", exactly("x"))])
    assert result.node_selector is None


def test_only_complete_pools_of_the_newest_generation_count() -> None:
    old = resource_slice("old", [device("old-0")], "node-a", pool="p", generation=1)
    new_part = resource_slice("new-1", [device("new-0")], "node-a", pool="p", generation=2, slice_count=2)
    allocator = make_allocator([old, new_part])
    assert allocate(allocator, [claim("c", exactly("x"))]) is None  # gen 2 incomplete, gen 1 outdated
    inventory_complete = make_allocator(
        [
            old,
            new_part,
            resource_slice("new-2", [device("new-1")], "node-a", pool="p", generation=2, slice_count=2),
        ]
    )
    [result] = allocate(inventory_complete, [claim("c", exactly("x", 2))])
    assert sorted(d for _, d in devices_of(result)) == ["new-0", "new-1"]


def test_slice_updates_and_deletions_change_the_candidates() -> None:
    inventory = DeviceInventory()
    inventory.update_slice(resource_slice("s", GPUS[:1], "node-a"))
    allocator = Allocator(ALL_ON, inventory, {CLASS: device_class()}, lambda _: False)
    assert allocate(allocator, [claim("c", exactly("x", 2))]) is None
    inventory.update_slice(resource_slice("s", GPUS[:2], "node-a", rv="2"))
    assert allocate(allocator, [claim("c", exactly("x", 2))]) is not None
    inventory.delete_slice("s")
    assert allocate(allocator, [claim("c", exactly("x", 1))]) is None


def test_unknown_device_class_names_the_field() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    with pytest.raises(
        AllocationError, match=r"ns/c: spec.devices.requests\[0\].exactly.deviceClassName.*'nope'"
    ):
        allocator.compile(claim("c", exactly("x", device_class_name="nope")))


def test_cel_compile_error_quotes_the_expression() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    with pytest.raises(AllocationError) as caught:
        allocator.compile(claim("c", exactly("x", 1, "device.driver ==")))
    message = str(caught.value)
    assert "ResourceClaim ns/c" in message
    assert "selectors[0]" in message
    assert "'device.driver =='" in message
    assert "compilation failed" in message


def test_cel_runtime_error_makes_the_claim_unallocatable_with_the_error() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    expression = f'device.attributes["{DRIVER}"].missing > 1'
    with pytest.raises(AllocationError) as caught:
        allocate(allocator, [claim("c", exactly("x", 1, expression))])
    assert expression in str(caught.value)
    assert "no such key: missing" in str(caught.value)


def test_non_bool_selector_result_is_an_error_not_a_crash() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    with pytest.raises(AllocationError, match="could not be converted to bool"):
        allocate(allocator, [claim("c", exactly("x", 1, f'device.attributes["{DRIVER}"].index'))])


def test_distinct_attribute_is_refused_clearly() -> None:
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    c = claim("c", exactly("x", 2), constraints=[{"distinctAttribute": f"{DRIVER}/index"}])
    with pytest.raises(AllocationError, match=r"constraints\[0\].distinctAttribute"):
        allocator.compile(c)


def test_selectors_run_once_per_device_content_however_many_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    evaluations = 0
    original = Selector.matches

    def counting(self: Selector, activation: object) -> bool:
        nonlocal evaluations
        evaluations += 1
        return original(self, activation)  # type: ignore[arg-type]

    original_fast = FastSelector.verdict

    def counting_fast(self: FastSelector, device: FastDevice) -> bool | None:
        nonlocal evaluations
        verdict = original_fast(self, device)
        evaluations += verdict is not None  # else today's evaluator runs, counted above
        return verdict

    monkeypatch.setattr(Selector, "matches", counting)
    monkeypatch.setattr(FastSelector, "verdict", counting_fast)
    expression = f'device.attributes["{DRIVER}"].index >= 0 && device.attributes["{DRIVER}"].index < 99'
    slices = [resource_slice(f"s-{n}", GPUS, f"node-{n}") for n in range(5)]
    allocator = make_allocator(slices)
    for i in range(50):
        for n in range(5):
            assert (
                allocate(allocator, [claim(f"c{i}", exactly("x", 1, expression))], node=f"node-{n}")
                is not None
            )
    # one class selector + one request selector per distinct device: the 5 nodes publish the same 4
    # devices (same attributes), so their verdicts are shared
    assert evaluations == 2 * 4


def test_search_budget_bounds_pathological_claims() -> None:
    devices = [device(f"d{i}", numa=i) for i in range(30)]
    inventory = DeviceInventory()
    inventory.update_slice(resource_slice("s", devices, "node-a"))
    bounded = replace(ALL_ON, filter_timeout=True)
    allocator = Allocator(bounded, inventory, {CLASS: device_class()}, lambda _: False, max_steps=100)
    c = claim("c", exactly("x", 5), constraints=[match(f"{DRIVER}/numa")])
    assert allocate(allocator, [c]) is None
    explanation = allocator.explain([allocator.compile(c)], "node-a", {})
    assert "gave up after 100 steps (DRASchedulerFilterTimeout)" in explanation
    assert Allocator(ALL_ON, inventory, {}, lambda _: False, max_steps=1000).max_steps == float("inf")


# --- features (behaviour 5) -------------------------------------------------------------------------


def test_every_gate_mapped_feature_is_populated_by_the_derivation() -> None:
    for feature, gates in FEATURE_GATES.items():
        assert all(gate in KNOWN_FEATURE_GATES for gate in gates), gates
        only_these = {name: name in gates for name in KNOWN_FEATURE_GATES}
        assert allocator_features(only_these).enabled() == {feature}
        for gate in gates:  # every one of its gates is needed
            assert feature not in allocator_features({**only_these, gate: False}).enabled()
    assert set(FEATURE_GATES) == {f.name for f in fields(Features)}


def test_every_known_gate_reaches_the_allocator() -> None:
    assert set(GATE_FEATURES) == set(KNOWN_FEATURE_GATES)


def test_defaults_follow_the_known_gate_defaults() -> None:
    features = allocator_features(KNOWN_FEATURE_GATES)
    assert features.enabled() == {f.name for f in fields(Features)} - {"list_type_attributes"}
    binding_without_status = {**KNOWN_FEATURE_GATES, "DRAResourceClaimDeviceStatus": False}
    assert not allocator_features(binding_without_status).device_binding_and_status


def test_a_changed_device_class_applies_to_claims_compiled_before() -> None:
    inventory = DeviceInventory()
    inventory.update_slice(resource_slice("s", GPUS, "node-a"))
    classes = {CLASS: device_class()}
    allocator = Allocator(ALL_ON, inventory, classes, lambda _: False)
    c = claim("c", exactly("x", 1), uid="uid-c", rv="1")
    [before] = allocator.allocate([allocator.compile(c)], "node-a", {})
    assert devices_of(before) == [("x", "gpu-0")]
    classes[CLASS] = device_class(CLASS, f'device.attributes["{DRIVER}"].index == 3', rv="2")
    [after] = allocator.allocate([allocator.compile(c)], "node-a", {})
    assert devices_of(after) == [("x", "gpu-3")]


def test_claims_with_one_spec_compile_once_and_each_keeps_its_own_name() -> None:
    """Claims from one template share their spec: compiling the second reuses the first's requests
    (no second CEL compile, no per-claim cache), but the result and its errors name its own claim."""
    allocator = make_allocator([resource_slice("s", GPUS, "node-a")])
    first, second = claim("a", exactly("x", 1)), claim("b", exactly("x", 1))
    assert first.spec is second.spec
    compiled_first, compiled_second = allocator.compile(first), allocator.compile(second)
    assert compiled_second.requests is compiled_first.requests
    assert (compiled_first.key, compiled_second.key) == ("ns/a", "ns/b")
    [result] = allocator.allocate([compiled_second], "node-a", {})
    assert devices_of(result) == [("x", "gpu-0")]
    for name in ("bad-1", "bad-2"):
        with pytest.raises(AllocationError, match=f"ns/{name}"):
            allocator.compile(claim(name, exactly("x", device_class_name="nope")))
