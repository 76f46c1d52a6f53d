"""The emulator's kube-apiserver feature gates: what each one changes in what is served or accepted."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from sim_helpers import Client, gated_client

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.cluster import SimCluster
from lockstep.sim.features import GATES_1_36, FeatureGates

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
PODGROUPS = "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups"


def numa_slice(name: str, **numa: object) -> dict[str, object]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": "node-a",
            "pool": {"name": "node-a", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0", "attributes": {"numaNodes": numa}}],
        },
    }


@pytest.fixture
async def gates_off() -> AsyncIterator[Client]:
    async with gated_client("DRAListTypeAttributes=false,GenericWorkload=false", "1.36") as client:
        yield client


def test_unknown_gate_or_value_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match="unknown feature gate 'GenericWorkloads'"):
        FeatureGates("GenericWorkloads=true")
    with pytest.raises(ValueError, match="unknown feature gate 'Nope'"):
        ApiServer(feature_gates={"Nope": True})
    with pytest.raises(ValueError, match="'DRAListTypeAttributes' has no value"):
        FeatureGates("DRAListTypeAttributes")


def test_defaults_and_flag_syntax() -> None:
    gates = FeatureGates("GenericWorkload=false", "1.36")
    assert dict(gates) == {**GATES_1_36, "GenericWorkload": False}
    assert str(gates).endswith(
        ",DRAListTypeAttributes=false,DRAPartitionableDevices=true,"
        "DRAResourceClaimDeviceStatus=true,GenericWorkload=false,PodLevelResources=true"
    )
    assert FeatureGates(str(gates), "1.36") == gates


async def test_list_attribute_without_the_gate_is_dropped_then_refused(gates_off: Client) -> None:
    status, body, _ = await gates_off.call("POST", SLICES, numa_slice("lists", ints=[0, 1]))
    assert status == 422, body
    assert body["reason"] == "Invalid"
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value: exactly one value must be specified",
            "field": "spec.devices[0].attributes[numaNodes]",
        }
    ]
    assert body["message"] == (
        'ResourceSlice.resource.k8s.io "lists" is invalid: spec.devices[0].attributes[numaNodes]: '
        "Required value: exactly one value must be specified"
    )
    # Next to a scalar the list is dropped, as kube-apiserver drops a disabled gate's fields.
    status, body, _ = await gates_off.call("POST", SLICES, numa_slice("both", int=0, ints=[0, 1]))
    assert status == 201, body
    assert body["spec"]["devices"][0]["attributes"]["numaNodes"] == {"int": 0}


async def test_list_attribute_with_the_gate_is_stored() -> None:
    async with gated_client("DRAListTypeAttributes=true") as client:
        status, body, _ = await client.call("POST", SLICES, numa_slice("lists", ints=[0, 1]))
        assert status == 201, body
        assert body["spec"]["devices"][0]["attributes"]["numaNodes"] == {"ints": [0, 1]}


async def test_generic_workload_gates_the_alpha_api_not_priority_classes(gates_off: Client) -> None:
    status, _, _ = await gates_off.call("GET", PODGROUPS)
    assert status == 404
    status, body, _ = await gates_off.call("GET", "/apis/scheduling.k8s.io")
    assert status == 200
    assert [v["version"] for v in body["versions"]] == ["v1"]
    status, _, _ = await gates_off.call("GET", "/apis/scheduling.k8s.io/v1/priorityclasses")
    assert status == 200
    async with gated_client("GenericWorkload=true", "1.36") as client:
        status, body, _ = await client.call("GET", PODGROUPS)
        assert status == 200, body


async def test_cluster_without_list_attributes_publishes_slices_without_them() -> None:
    gates = "DRAListTypeAttributes=false"
    async with SimCluster(nodes=1, devices_per_node=2, feature_gates=gates) as cluster:
        slices = await cluster.http.get(SLICES)
        attributes = slices["items"][0]["spec"]["devices"][0]["attributes"]
        assert "numaNodes" not in attributes and "model" in attributes


def test_lockstep_sim_and_lockstep_run_default_to_the_same_gates() -> None:
    """kube's defaults on both sides, for every emulated version: the README's two-terminal path needs
    no flag for the operator to allocate what the API server serves (issue 28, point 4)."""
    from lockstep.config import KNOWN_FEATURE_GATES
    from lockstep.sim.features import GATES_BY_VERSION

    for version, table in GATES_BY_VERSION.items():
        shared = set(table) & set(KNOWN_FEATURE_GATES)
        assert "DRAListTypeAttributes" in shared
        differing = {gate: (table[gate], KNOWN_FEATURE_GATES[gate]) for gate in shared}
        assert {g: v for g, v in differing.items() if v[0] != v[1]} == {}, version
