"""The simulated DRA driver's ResourceSlices and DeviceClass."""

from __future__ import annotations

import kubernetes_validate
import pytest

from lockstep.sim.controllers.dra_driver import DRIVER_NAME, device_class, numa_nodes, resource_slice


def test_slice_is_one_node_local_pool_per_node() -> None:
    obj = resource_slice("node-003", 4)
    spec = obj["spec"]
    assert spec["driver"] == DRIVER_NAME
    assert spec["nodeName"] == "node-003"
    assert spec["pool"] == {"name": "node-003", "generation": 1, "resourceSliceCount": 1}
    assert [d["name"] for d in spec["devices"]] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    gpu2 = spec["devices"][2]
    assert gpu2["attributes"]["index"] == {"int": 2}
    assert gpu2["attributes"]["model"] == {"string": "sim-a100"}
    assert gpu2["attributes"]["driverVersion"] == {"version": "1.2.0"}
    assert gpu2["capacity"] == {"memory": {"value": "80Gi"}}


def test_numa_lists_overlap_only_at_the_boundary() -> None:
    assert [numa_nodes(i, 8) for i in range(8)] == [[0], [0], [0], [0, 1], [1], [1], [1], [0, 1]]
    lists = {
        d["name"]: set(d["attributes"]["numaNodes"]["ints"])
        for d in resource_slice("n", 8)["spec"]["devices"]
    }
    assert lists["gpu-3"] & lists["gpu-4"], "neighbours across the boundary share a NUMA node"
    assert not lists["gpu-0"] & lists["gpu-4"]


def test_slice_and_class_pass_upstream_schema_validation() -> None:
    # kubernetes-validate bundles the upstream OpenAPI schemas of resource.k8s.io/v1.
    kubernetes_validate.validate(resource_slice("node-000", 8), "1.36", strict=True)
    kubernetes_validate.validate(device_class(), "1.36", strict=True)
    assert device_class()["spec"]["selectors"][0]["cel"]["expression"] == f'device.driver == "{DRIVER_NAME}"'


def test_zero_devices_is_rejected_with_the_slice_name() -> None:
    with pytest.raises(ValueError, match=r"ResourceSlice node-1-gpu.sim.lockstep.dev: devices per node"):
        resource_slice("node-1", 0)
