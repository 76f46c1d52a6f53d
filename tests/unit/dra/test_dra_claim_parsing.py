"""Parsing ResourceClaims and ResourceSlices at the edge: claims made from one template share one
validated spec, claims allocated on one node one node selector, devices of a kind their attribute and
capacity values; a bad object is still reported by object and field whether or not its parts were
seen before."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.api.resource import ResourceClaim, ResourceModelError, ResourceSlice, parse_resource
from lockstep.sim.controllers.dra_driver import resource_slice


def raw_claim(name: str, *, device_class: str = "gpu", rv: str = "1", **status: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "resourceVersion": rv},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": device_class,
                            "selectors": [{"cel": {"expression": 'device.driver == "d"'}}],
                        },
                    }
                ],
                "futureField": {"kept": True},
            }
        },
        "status": status,
    }


def test_claims_from_one_template_share_the_validated_spec_and_keep_unknown_fields() -> None:
    first = parse_resource(ResourceClaim, raw_claim("a-gpu-1"))
    second = parse_resource(
        ResourceClaim, raw_claim("b-gpu-2", reservedFor=[{"resource": "pods", "name": "b", "uid": "u"}])
    )
    assert second.spec is first.spec
    assert (second.metadata.name, second.status.reserved_for[0].name) == ("b-gpu-2", "b")
    assert second.dump()["spec"] == raw_claim("x")["spec"], "the API shape, unknown fields included"

    other = parse_resource(ResourceClaim, raw_claim("c-gpu-3", device_class="fpga"))
    assert other.spec is not first.spec
    assert other.spec.devices.requests[0].exactly is not None
    assert other.spec.devices.requests[0].exactly.device_class_name == "fpga"


def test_a_bad_claim_names_the_object_and_field_whether_its_spec_was_seen_or_not() -> None:
    parse_resource(ResourceClaim, raw_claim("ok"))
    bad_status = raw_claim("bad-status", reservedFor=[{"name": "p"}])
    with pytest.raises(
        ResourceModelError, match=r"ResourceClaim ns/bad-status: status\.reservedFor\[0\]\.resource"
    ):
        parse_resource(ResourceClaim, bad_status)

    bad_spec = raw_claim("bad-spec", device_class="")
    for _ in range(2):
        with pytest.raises(
            ResourceModelError,
            match=r"ResourceClaim ns/bad-spec: spec\.devices\.requests\[0\]\.exactly\.deviceClassName",
        ):
            parse_resource(ResourceClaim, bad_spec)


def allocated_on(node: str) -> dict[str, Any]:
    selector = {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    }
    return {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "d", "pool": node, "device": "gpu-0"}]},
            "nodeSelector": selector,
        }
    }


def test_claims_allocated_on_one_node_share_its_node_selector() -> None:
    first = parse_resource(ResourceClaim, raw_claim("a", **allocated_on("node-1")))
    second = parse_resource(ResourceClaim, raw_claim("b", **allocated_on("node-1")))
    elsewhere = parse_resource(ResourceClaim, raw_claim("c", **allocated_on("node-2")))
    assert first.status.allocation is not None and second.status.allocation is not None
    assert elsewhere.status.allocation is not None
    assert second.status.allocation.node_selector is first.status.allocation.node_selector
    assert elsewhere.status.allocation.node_selector is not first.status.allocation.node_selector
    assert second.dump()["status"] == allocated_on("node-1")


def test_devices_of_a_kind_share_their_attribute_and_capacity_models() -> None:
    one, two = (parse_resource(ResourceSlice, resource_slice(node, 4)) for node in ("node-1", "node-2"))
    first, second = one.spec.devices[0], two.spec.devices[0]
    assert second.attributes["model"] is first.attributes["model"]
    assert second.capacity["memory"] is first.capacity["memory"]
    assert one.spec.devices[1].attributes["index"] is not first.attributes["index"]
    assert two.dump()["spec"]["devices"] == resource_slice("node-2", 4)["spec"]["devices"]


def test_a_bad_device_value_names_the_slice_and_field_after_good_ones_were_shared() -> None:
    parse_resource(ResourceSlice, resource_slice("node-1", 2))
    bad = resource_slice("node-3", 2)
    bad["spec"]["devices"][1]["attributes"]["index"] = {"int": 1, "string": "one"}
    with pytest.raises(ResourceModelError, match=r"spec\.devices\[1\]\.attributes\.index: .*exactly one of"):
        parse_resource(ResourceSlice, bad)
    bad["spec"]["devices"][1]["attributes"]["index"] = {"int": 1}
    bad["spec"]["devices"][1]["capacity"]["memory"] = {"value": "lots"}
    with pytest.raises(ResourceModelError, match=r"spec\.devices\[1\]\.capacity\.memory: .*lots"):
        parse_resource(ResourceSlice, bad)
