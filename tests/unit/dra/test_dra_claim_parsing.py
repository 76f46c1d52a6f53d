"""Parsing ResourceClaims at the edge: claims made from one template share one validated spec, and a
bad claim is still reported by object and field whether or not its spec was seen before."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.api.resource import ResourceClaim, ResourceModelError, parse_resource


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
