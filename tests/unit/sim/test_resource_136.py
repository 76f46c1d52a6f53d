"""The emulator's validation of the DRA fields Kubernetes 1.36 serves, beyond the dra-136 transcript:
tolerations, request policies, counter names, binding condition overlap, and a taint's timeAdded."""

from __future__ import annotations

from typing import Any

from sim_helpers import Client, gated_client

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def slice_body(name: str, devices: list[dict[str, Any]] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "d.example.com",
            "nodeName": "n",
            "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
            **spec,
        },
    }
    if devices is not None:
        body["spec"]["devices"] = devices
    return body


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


async def test_a_taint_keeps_its_time_added_while_unchanged(client: Client) -> None:
    tainted = slice_body("s", [{"name": "d", "taints": [{"key": "k", "effect": "NoSchedule"}]}])
    status, created, _ = await client.call("POST", SLICES, tainted)
    assert status == 201, created
    stamp = created["spec"]["devices"][0]["taints"][0]["timeAdded"]
    created["spec"]["devices"][0]["taints"][0].pop("timeAdded")
    created["spec"]["devices"][0]["attributes"] = {"a": {"int": 1}}
    status, updated, _ = await client.call("PUT", f"{SLICES}/s", created)
    assert status == 200, updated
    assert updated["spec"]["devices"][0]["taints"][0]["timeAdded"] == stamp


async def test_bad_counters_policies_and_conditions_are_refused_naming_the_field(client: Client) -> None:
    status, body, _ = await client.call(
        "POST",
        SLICES,
        slice_body(
            "bad",
            [
                {
                    "name": "c",
                    "consumesCounters": [{"counterSet": "Bad_Name", "counters": {"m": {"value": "1"}}}],
                },
                {"name": "p", "capacity": {"bw": {"value": "1", "requestPolicy": {"default": "1"}}}},
                {"name": "b", "bindingConditions": ["x.io/a"], "bindingFailureConditions": ["x.io/a"]},
            ],
        ),
    )
    assert status == 422
    fields = [field for field, _ in causes(body)]
    assert fields == [
        "spec.devices[0].consumesCounters[0].counterSet",
        "spec.devices[1].capacity[bw].requestPolicy",
        "spec.devices[2].bindingFailureConditions[0]",
    ]
    status, body, _ = await client.call(
        "POST", SLICES, slice_body("empty", sharedCounters=[{"name": "gpu0"}])
    )
    assert status == 422 and causes(body) == [("spec.sharedCounters[0].counters", "Required value")]


async def test_claim_tolerations_are_validated(client: Client) -> None:
    request = {
        "name": "r",
        "exactly": {
            "deviceClassName": "c",
            "tolerations": [
                {"key": "k", "operator": "Exists", "value": "v"},
                {"key": "k", "operator": "Sometimes"},
                {"key": "k", "operator": "Equal", "effect": "PreferNoSchedule"},
            ],
        },
    }
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [request]}},
    }
    status, body, _ = await client.call("POST", CLAIMS, claim)
    assert status == 422
    assert causes(body) == [
        (
            "spec.devices.requests[0].exactly.tolerations[0].value",
            'Invalid value: "v": must be empty for operator `Exists`',
        ),
        (
            "spec.devices.requests[0].exactly.tolerations[1].operator",
            'Unsupported value: "Sometimes": supported values: "Equal", "Exists"',
        ),
        (
            "spec.devices.requests[0].exactly.tolerations[2].effect",
            'Unsupported value: "PreferNoSchedule": supported values: "NoExecute", "NoSchedule", "None"',
        ),
    ]


async def test_fields_of_a_disabled_gate_are_dropped_unless_already_stored() -> None:
    async with gated_client("DRADeviceTaints=false,DRAPartitionableDevices=false") as client:
        device = {
            "name": "d",
            "taints": [{"key": "k", "effect": "NoSchedule"}],
            "consumesCounters": [{"counterSet": "s", "counters": {"m": {"value": "1"}}}],
            "bindingConditions": ["x.io/a"],
            "bindingFailureConditions": ["x.io/b"],
        }
        status, created, _ = await client.call("POST", SLICES, slice_body("s", [device]))
        assert status == 201, created
        kept = created["spec"]["devices"][0]
        assert "taints" not in kept and "consumesCounters" not in kept
        assert kept["bindingConditions"] == ["x.io/a"]  # its gate is on
        status, created, _ = await client.call(
            "POST",
            SLICES,
            slice_body("c", sharedCounters=[{"name": "s", "counters": {"m": {"value": "1"}}}]),
        )
        assert status == 201 and "sharedCounters" not in created["spec"]


async def test_claim_and_class_fields_of_disabled_gates_are_dropped() -> None:
    gates = ",".join(
        f"{gate}=false"
        for gate in (
            "DRADeviceTaints",
            "DRAConsumableCapacity",
            "DRAExtendedResource",
            "DRAResourceClaimDeviceStatus",
        )
    )
    async with gated_client(gates) as client:
        exact = {
            "deviceClassName": "c",
            "tolerations": [{"key": "k", "operator": "Exists"}],
            "capacity": {"requests": {"bw": "1"}},
        }
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": exact}]}},
        }
        status, created, _ = await client.call("POST", CLAIMS, body)
        assert status == 201, created
        stored = created["spec"]["devices"]["requests"][0]["exactly"]
        assert "tolerations" not in stored and "capacity" not in stored
        result = {
            "request": "r",
            "driver": "d",
            "pool": "p",
            "device": "x",
            "shareID": "a1b2c3d4-0000-4000-8000-000000000001",
        }
        devices = [{"driver": "d", "pool": "p", "device": "x", "conditions": []}]
        patch = {"status": {"allocation": {"devices": {"results": [result]}}, "devices": devices}}
        status, patched, _ = await client.call(
            "PATCH", f"{CLAIMS}/c/status", patch, content_type="application/merge-patch+json"
        )
        assert status == 200, patched
        assert "shareID" not in patched["status"]["allocation"]["devices"]["results"][0]
        assert "devices" not in patched["status"]
        device_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "ext"},
            "spec": {"extendedResourceName": "example.com/gpu"},
        }
        status, created, _ = await client.call("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class)
        assert status == 201 and "extendedResourceName" not in created["spec"]
