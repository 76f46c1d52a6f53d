"""DRA extended resources (DRAExtendedResource): a pod asking for ``example.com/gpu`` gets devices of the
DeviceClass naming that resource, through a claim the scheduler creates at PreBind, as kube-scheduler
1.36 does; a node advertising the resource itself (a device plugin) is left to NodeResourcesFit."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from dra_builders import DRIVER, device, resource_slice
from dra_memory_api import MemoryClaimAPI
from test_dra_plugin import NODES, Placed, place, placed

from lockstep.api.pod import parse_pod
from lockstep.api.resource import DELETE_PROTECTION_FINALIZER, DeviceClass, parse_resource
from lockstep.config import KNOWN_FEATURE_GATES
from lockstep.dra.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    is_dra_extended_resource_name,
    requests_and_mappings,
)
from lockstep.dra.features import allocator_features
from lockstep.dra.ports import WriteResult
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import Code, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugins.dynamic_resources import DynamicResources
from lockstep.scheduler.plugins.node_resources import NodeResourcesFit
from lockstep.state.cluster import ClusterCache

FEATURES = allocator_features(KNOWN_FEATURE_GATES)


def gpu_class(name: str = "gpu", resource: str | None = "example.com/gpu", created: str = "") -> DeviceClass:
    metadata: dict[str, Any] = {"name": name, "resourceVersion": "1"}
    if created:
        metadata["creationTimestamp"] = created
    spec = {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}
    if resource:
        spec["extendedResourceName"] = resource
    return parse_resource(DeviceClass, {"metadata": metadata, "spec": spec})


def container(name: str, restart: str | None = None, **requests: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "image": "busybox", "resources": {"requests": dict(requests)}}
    if restart:
        body["restartPolicy"] = restart
    return body


def gpu_pod(
    name: str = "p", containers: list[dict[str, Any]] | None = None, init: list[dict[str, Any]] | None = None
) -> PodInfo:
    spec: dict[str, Any] = {
        "containers": containers or [container("main", cpu="100m", **{"example.com/gpu": "1"})]
    }
    if init:
        spec["initContainers"] = init
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}"}, "spec": spec})


def setup(devices_per_node: int = 2) -> tuple[ResourceStore, MemoryClaimAPI, DynamicResources]:
    store = ResourceStore(FEATURES)
    store.upsert_class(gpu_class())
    for node in NODES:
        devices = [device(f"gpu-{i}") for i in range(devices_per_node)]
        store.upsert_slice(resource_slice(f"slice-{node.name}", devices, node.name))
    api = MemoryClaimAPI(store, echo=True)
    return store, api, DynamicResources(store, api)


def mapping(container_name: str, request: str, resource: str = "example.com/gpu") -> dict[str, str]:
    return {"containerName": container_name, "resourceName": resource, "requestName": request}


# --- names and requests ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "extended"),
    [
        ("example.com/gpu", True),
        ("deviceclass.resource.kubernetes.io/gpu", True),
        ("cpu", False),
        ("hugepages-2Mi", False),
        ("kubernetes.io/something", False),
        ("requests.example.com/gpu", False),
        ("example.com/", False),
    ],
)
def test_which_names_are_dra_extended_resources(name: str, extended: bool) -> None:
    assert is_dra_extended_resource_name(name) is extended


def test_one_request_per_container_named_by_container_and_sorted_resource_index() -> None:
    pod = gpu_pod(
        containers=[
            container("a", cpu="1", memory="1Gi", **{"example.com/gpu": "2"}),
            container("b", **{"example.com/gpu": "1"}),
            container("c", cpu="1"),
        ]
    )
    plan = requests_and_mappings(pod.containers, {"example.com/gpu": "gpu"})
    # In container a the sorted requests are cpu, example.com/gpu, memory: the gpu is index 1.
    assert [(r["name"], r["exactly"]["count"]) for r in plan.requests] == [
        ("container-0-request-1", 2),
        ("container-1-request-0", 1),
    ]
    assert all(
        r["exactly"] | {"count": 1} == {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 1}
        for r in plan.requests
    )
    assert list(plan.mappings) == [
        mapping("a", "container-0-request-1"),
        mapping("b", "container-1-request-0"),
    ]


def test_init_containers_reuse_the_devices_of_the_containers_that_start_after_them() -> None:
    pod = gpu_pod(
        init=[
            container("setup", **{"example.com/gpu": "4"}),  # 1 of its own on top of proxy's and main's
            container("warmup", **{"example.com/gpu": "1"}),  # the sidecar's device is enough
            container("proxy", restart="Always", **{"example.com/gpu": "1"}),  # a sidecar: its own
        ],
        containers=[container("main", **{"example.com/gpu": "2"})],
    )
    plan = requests_and_mappings(pod.containers, {"example.com/gpu": "gpu"})
    assert [(r["name"], r["exactly"]["count"]) for r in plan.requests] == [
        ("container-0-request-0", 1),
        ("container-2-request-0", 1),
        ("container-3-request-0", 2),
    ]
    assert list(plan.mappings) == [
        mapping("proxy", "container-2-request-0"),
        mapping("main", "container-3-request-0"),
        mapping("setup", "container-2-request-0"),
        mapping("setup", "container-3-request-0"),
        mapping("setup", "container-0-request-0"),
        mapping("warmup", "container-2-request-0"),
    ]


def test_only_the_largest_init_request_is_kept_and_the_others_are_pointed_at_it() -> None:
    pod = gpu_pod(
        init=[container("one", **{"example.com/gpu": "1"}), container("two", **{"example.com/gpu": "2"})],
        containers=[container("main", cpu="1")],
    )
    plan = requests_and_mappings(pod.containers, {"example.com/gpu": "gpu"})
    assert [(r["name"], r["exactly"]["count"]) for r in plan.requests] == [("container-1-request-0", 2)]
    assert list(plan.mappings) == [
        mapping("one", "container-1-request-0"),
        mapping("two", "container-1-request-0"),
    ]


def test_the_newest_class_naming_a_resource_provides_it() -> None:
    store = ResourceStore(FEATURES)
    store.upsert_class(gpu_class("old", created="2026-01-01T00:00:00Z"))
    store.upsert_class(gpu_class("new", created="2026-06-01T00:00:00Z"))
    assert store.extended_resource_class_name("example.com/gpu") == "new"
    assert store.extended_resource_class_name("deviceclass.resource.kubernetes.io/old") == "old"
    store.delete_class("new")
    assert store.extended_resource_class_name("example.com/gpu") == "old"


# --- the plugin ---------------------------------------------------------------------------------------


async def test_a_pod_gets_devices_through_a_claim_created_at_pre_bind() -> None:
    store, api, plugin = setup()
    pod = gpu_pod(containers=[container("main", cpu="100m", **{"example.com/gpu": "2"})])
    [p] = placed(place(plugin, [pod]))
    assert store.device_in_use((DRIVER, p.node, "gpu-0")) and store.device_in_use((DRIVER, p.node, "gpu-1"))
    assert await plugin.pre_bind(p.state, p.pod, p.node) == Status()
    [created] = api.creates
    assert created["metadata"]["generateName"] == "p-extended-resources-"
    assert created["metadata"]["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert created["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "uid-p", "controller": True}
    ]
    assert created["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-1",  # its requests sorted: cpu, example.com/gpu
            "exactly": {"deviceClassName": "gpu", "allocationMode": "ExactCount", "count": 2},
        }
    ]
    # Created with the delete-protection finalizer: no claim whose devices are in use can vanish.
    assert created["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER] and api.finalizer_writes == []
    [(key, status)] = api.status_writes
    assert status["reservedFor"] == [{"resource": "pods", "name": "p", "uid": "uid-p"}]
    assert [r["device"] for r in status["allocation"]["devices"]["results"]] == ["gpu-0", "gpu-1"]
    assert api.pod_statuses["ns/p"] == {
        "requestMappings": [mapping("main", "container-0-request-1")],
        "resourceClaimName": key.split("/")[1],
    }
    assert len(store.in_flight) == 0  # the devices are now held by the claim in the cache
    claim = store.claims.get(key)
    assert claim is not None and claim.allocated and store.device_in_use((DRIVER, p.node, "gpu-0"))


def test_a_node_without_enough_devices_is_rejected_naming_the_claim() -> None:
    _, _, plugin = setup(devices_per_node=1)
    pod = gpu_pod(containers=[container("main", **{"example.com/gpu": "2"})])
    [status] = place(plugin, [pod])
    assert isinstance(status, Status) and status.code is Code.UNSCHEDULABLE
    assert "ns/p-extended-resources" in status.message


def test_the_devices_of_one_pod_are_not_given_to_the_next() -> None:
    _, _, plugin = setup(devices_per_node=1)
    outcome = place(plugin, [gpu_pod(f"p{i}") for i in range(3)])
    assert sorted(p.node for p in outcome if isinstance(p, Placed)) == ["node-a", "node-b"]
    assert isinstance(outcome[2], Status) and outcome[2].code is Code.UNSCHEDULABLE


async def test_a_node_advertising_the_resource_uses_its_device_plugin_and_no_claim_is_made() -> None:
    store, api, plugin = setup()
    device_plugin_node = NodeInfo(name="dp-node", allocatable={"example.com/gpu": 4, "cpu": 4000})
    pod = gpu_pod()
    [p] = placed(place(plugin, [pod], nodes=[device_plugin_node]))
    assert await plugin.pre_bind(p.state, p.pod, p.node) == Status()
    assert api.creates == [] and api.pod_statuses == {}
    # NodeResourcesFit counts it there, and leaves it to DRA on a node that does not advertise it.
    fit = NodeResourcesFit(lambda resource: store.extended_resource_class(resource) is not None)
    assert fit.filter(CycleState(), pod, device_plugin_node).ok
    full = replace(device_plugin_node, requested={"example.com/gpu": 4})
    assert fit.filter(CycleState(), pod, full).code is Code.UNSCHEDULABLE
    dra_node = NodeInfo(name="node-a", allocatable={"cpu": 4000})
    assert fit.filter(CycleState(), pod, dra_node).ok
    assert NodeResourcesFit().filter(CycleState(), pod, dra_node).code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


async def test_a_failed_pre_bind_deletes_the_created_claim() -> None:
    store, api, plugin = setup()
    [p] = placed(place(plugin, [gpu_pod()]))
    api.failures = [None, None, WriteResult.ERROR]  # create and claim status pass; pod status fails
    status = await plugin.pre_bind(p.state, p.pod, p.node)
    assert status.code is Code.ERROR and "status.extendedResourceClaimStatus" in status.message
    plugin.unreserve(p.state, p.pod, p.node)
    await plugin.wait_for_background()
    assert api.objects == {} and len(api.deletes) == 1
    assert not store.device_in_use((DRIVER, p.node, "gpu-0"))


async def test_a_left_over_claim_is_deleted_before_the_pod_is_scheduled_again() -> None:
    store, api, plugin = setup()
    [p] = placed(place(plugin, [gpu_pod()]))
    assert (await plugin.pre_bind(p.state, p.pod, p.node)).ok
    [key] = api.objects  # as after a crash between PreBind and the binding
    status = plugin.pre_filter(CycleState(), gpu_pod())
    assert status.code is Code.WAIT and key in status.message
    await plugin.wait_for_background()
    assert api.objects == {} and store.claims.get(key) is None
    assert plugin.pre_filter(CycleState(), gpu_pod()).ok


def test_without_the_gate_or_a_class_the_resource_is_not_dra_s() -> None:
    store, _, plugin = setup()
    assert (
        plugin.pre_filter(CycleState(), gpu_pod(containers=[container("c", **{"example.com/nic": "1"})])).code
        is Code.SKIP
    )
    off = DynamicResources(ResourceStore(replace(FEATURES, extended_resource=False)), None)
    off.store.upsert_class(store.classes["gpu"])
    assert off.pre_filter(CycleState(), gpu_pod()).code is Code.SKIP


def test_the_implicit_class_name_works_too() -> None:
    _, _, plugin = setup()
    pod = gpu_pod(containers=[container("c", **{"deviceclass.resource.kubernetes.io/gpu": "1"})])
    [p] = placed(place(plugin, [pod]))
    assert p.node == "node-a"


def test_a_pod_needing_more_than_a_claim_holds_is_refused_with_the_limit() -> None:
    _, _, plugin = setup(devices_per_node=40)
    many = gpu_pod(containers=[container(f"c{i}", **{"example.com/gpu": "1"}) for i in range(33)])
    [status] = place(plugin, [many])
    assert isinstance(status, Status) and status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "33 requests for 33 devices" in status.message and "at most 32" in status.message
    [status] = place(plugin, [gpu_pod(containers=[container("c", **{"example.com/gpu": "33"})])])
    assert isinstance(status, Status) and "1 request for 33 devices" in status.message


def test_only_nodes_with_a_free_device_or_the_resource_advertised_are_tried() -> None:
    _, _, plugin = setup()
    cache = ClusterCache("lockstep")
    for name, allocatable in (("node-a", {}), ("node-b", {}), ("dp-node", {"example.com/gpu": 2})):
        cache.upsert_node(NodeInfo(name=name, allocatable={"cpu": 4000, **allocatable}))
    plugin.cache = cache
    [p] = placed(place(plugin, [gpu_pod(containers=[container("c", **{"example.com/gpu": "2"})])]))
    assert p.node == "node-a"  # both its devices are now in flight
    state = CycleState()
    assert plugin.pre_filter(state, gpu_pod("next")).ok
    assert set(plugin.candidate_nodes(state, gpu_pod("next")) or ()) == {"node-b", "dp-node"}
