"""resource.k8s.io/v1 models (bad input named, unknown fields kept) and the CEL layer's contract."""

from __future__ import annotations

from typing import Any

import pytest
from dra_builders import DRIVER, device, device_class, resource_slice

from lockstep.api.resource import (
    DeviceClass,
    ResourceClaim,
    ResourceModelError,
    ResourceSlice,
    parse_resource,
)
from lockstep.dra.cel import CELError, compile_selector, device_activation
from lockstep.dra.features import Features
from lockstep.dra.k8s_types import parse_quantity
from lockstep.dra.store import ResourceStore

CLAIM: dict[str, Any] = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {
        "name": "c",
        "namespace": "ns",
        "uid": "u",
        "resourceVersion": "7",
        "managedFields": [{"x": 1}],
    },
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"memory": "1Gi"}}},
                }
            ],
            "futureField": {"kept": True},
        }
    },
    "status": {"devices": [{"driver": "d", "pool": "p", "device": "x", "conditions": []}]},
}


def test_unknown_fields_survive_a_round_trip() -> None:
    claim = parse_resource(ResourceClaim, CLAIM)
    dumped = claim.dump()
    assert dumped["metadata"]["managedFields"] == [{"x": 1}]
    assert dumped["spec"]["devices"]["futureField"] == {"kept": True}
    assert dumped["spec"]["devices"]["requests"][0]["exactly"]["capacity"] == {"requests": {"memory": "1Gi"}}
    assert dumped["status"]["devices"][0]["device"] == "x"
    assert parse_resource(ResourceClaim, dumped).dump() == dumped


@pytest.mark.parametrize(
    ("model", "obj", "expected"),
    [
        (
            ResourceClaim,
            {
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {"devices": {"requests": [{"name": "r"}]}},
            },
            "ResourceClaim ns/c: spec.devices.requests[0]: request 'r': exactly one of exactly or "
            "firstAvailable",
        ),
        (
            ResourceClaim,
            {
                "metadata": {"name": "c", "namespace": "ns"},
                "spec": {
                    "devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "g", "count": 0}}]}
                },
            },
            "ResourceClaim ns/c: spec.devices.requests[0].exactly.count: Input should be greater than or "
            "equal to 1",
        ),
        (
            ResourceSlice,
            {
                "metadata": {"name": "s"},
                "spec": {
                    "driver": "d",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                    "nodeName": "n",
                    "devices": [{"name": "x", "attributes": {"a": {"int": 1, "string": "b"}}}],
                },
            },
            "ResourceSlice s: spec.devices[0].attributes.a: exactly one of int, bool, string, version",
        ),
        (
            ResourceSlice,
            {
                "metadata": {"name": "s"},
                "spec": {"driver": "d", "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}},
            },
            "ResourceSlice s: spec: exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection",
        ),
        (
            ResourceSlice,
            {
                "metadata": {"name": "s"},
                "spec": {
                    "driver": "d",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                    "allNodes": True,
                    "devices": [{"name": "x", "capacity": {"memory": {"value": "lots"}}}],
                },
            },
            "ResourceSlice s: spec.devices[0].capacity.memory: value 'lots': quantities must match",
        ),
        (
            DeviceClass,
            {"metadata": {"name": "k"}, "spec": {"selectors": [{"cel": {}}]}},
            "DeviceClass k: spec.selectors[0].cel.expression: Field required",
        ),
    ],
)
def test_bad_objects_are_rejected_naming_object_and_field(
    model: Any, obj: dict[str, Any], expected: str
) -> None:
    with pytest.raises(ResourceModelError) as caught:
        parse_resource(model, obj)
    assert expected in str(caught.value)


def _activation(list_types: bool) -> dict[str, Any]:
    return device_activation(
        DRIVER,
        {"model": {"string": "h100"}, "numa": {"ints": [0, 1]}},
        {"memory": parse_quantity("80Gi")},
        list_type_attributes=list_types,
    )


def test_list_attributes_are_invisible_without_list_type_attributes() -> None:
    expression = f'"numa" in device.attributes["{DRIVER}"]'
    assert compile_selector(expression, list_type_attributes=True).matches(_activation(True))
    assert not compile_selector(expression, list_type_attributes=False).matches(_activation(False))


def test_each_expression_is_compiled_once_per_feature_set() -> None:
    expression = f'device.attributes["{DRIVER}"].model == "h100"'
    assert compile_selector(expression) is compile_selector(expression)
    assert compile_selector(expression, True) is not compile_selector(expression, False)


def test_errors_quote_the_expression_and_never_escape_as_other_exceptions() -> None:
    with pytest.raises(CELError) as compile_error:
        compile_selector("device.driver ==")
    assert compile_error.value.expression == "device.driver =="
    assert str(compile_error.value).startswith("CEL expression 'device.driver ==': compilation failed")
    for expression, problem in [
        (f'device.attributes["{DRIVER}"].nope', "no such key: nope"),
        (f'device.attributes["{DRIVER}"].model', "could not be converted to bool"),
        ('quantity("abc").sign() == 0', "quantities must match"),
        ("1 / 0 == 1", ""),
        ("undefinedFunction(1)", ""),
    ]:
        with pytest.raises(CELError) as runtime_error:
            compile_selector(expression).matches(_activation(False))
        assert expression in str(runtime_error.value)
        assert problem in str(runtime_error.value)


def test_new_claims_and_released_allocations_notify_the_scheduler() -> None:
    events: list[str] = []
    store = ResourceStore(Features(), lambda: events.append("changed"))
    claim = parse_resource(ResourceClaim, CLAIM)
    store.upsert_claim(claim)
    assert events == ["changed"]
    allocated = parse_resource(
        ResourceClaim,
        {
            **CLAIM,
            "metadata": {**CLAIM["metadata"], "resourceVersion": "8"},
            "status": {
                "allocation": {
                    "devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "x"}]}
                }
            },
        },
    )
    store.upsert_claim(allocated)
    assert events == ["changed"] and store.device_in_use(("d", "p", "x"))
    store.delete_claim("ns", "c")
    assert events == ["changed", "changed"] and not store.device_in_use(("d", "p", "x"))


def test_a_resync_of_an_unchanged_slice_or_class_wakes_nobody() -> None:
    events: list[str] = []
    store = ResourceStore(Features(), lambda: events.append("changed"))
    store.upsert_slice(resource_slice("s", [device("gpu-0")], "node-a", rv="1"))
    store.upsert_class(device_class(rv="1"))
    version = store.inventory.version
    store.upsert_slice(resource_slice("s", [device("gpu-0")], "node-a", rv="1"))
    store.upsert_class(device_class(rv="1"))
    assert events == ["changed", "changed"] and store.inventory.version == version
    store.upsert_slice(resource_slice("s", [device("gpu-0"), device("gpu-1")], "node-a", rv="2"))
    assert events == ["changed"] * 3 and store.inventory.version == version + 1
