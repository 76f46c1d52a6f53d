"""The simulated cluster's storage controllers over HTTP: the PV controller completes bindings, the
provisioner provisions on the selected node, and kubelets do not start pods with unbound claims."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_sim_cluster import NS, PODS, eventually, get_or_none

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.provisioner import PROVISIONER_NAME, SELECTED_NODE

PVCS = f"/api/v1/namespaces/{NS}/persistentvolumeclaims"
PVS = "/api/v1/persistentvolumes"


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    sim = SimCluster(nodes=2, devices_per_node=0, kubelet_start_delay=0.02, kubelet_delete_delay=0.02)
    await sim.start()
    try:
        await sim.http.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
        yield sim
    finally:
        await sim.stop()


def claim(name: str, storage_class: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": storage_class,
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def storage_class(name: str, provisioner: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


async def phase(cluster: SimCluster, path: str) -> str | None:
    obj = await get_or_none(cluster.http, path)
    return None if obj is None else obj.get("status", {}).get("phase")


async def test_pre_bound_local_volume_is_bound_and_released_when_its_claim_goes(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(
        "/apis/storage.k8s.io/v1/storageclasses", storage_class("local", "kubernetes.io/no-provisioner")
    )
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-001"]}]}
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "disk-1"},
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "local": {"path": "/mnt/disk1"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }
    await http.create(PVS, pv)
    await eventually(lambda: _is(phase(cluster, f"{PVS}/disk-1"), "Available"), "PV Available")
    created = await http.create(PVCS, claim("data", "local"))
    ref = {"kind": "PersistentVolumeClaim", "apiVersion": "v1", "namespace": NS, "name": "data"}
    await http.patch(f"{PVS}/disk-1", {"spec": {"claimRef": ref}})
    await eventually(lambda: _is(phase(cluster, f"{PVCS}/data"), "Bound"), "PVC Bound")
    bound_claim = await http.get(f"{PVCS}/data")
    assert bound_claim["spec"]["volumeName"] == "disk-1"
    assert bound_claim["status"]["capacity"] == {"storage": "5Gi"}
    volume = await http.get(f"{PVS}/disk-1")
    assert volume["status"]["phase"] == "Bound"
    assert volume["spec"]["claimRef"]["uid"] == created["metadata"]["uid"]

    await http.delete(f"{PVCS}/data")  # no pod uses it: the protection finalizer goes
    await eventually(lambda: _is(phase(cluster, f"{PVS}/disk-1"), "Released"), "PV Released")
    assert await get_or_none(http, f"{PVCS}/data") is None


async def test_provisioner_creates_a_volume_on_the_selected_node(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create("/apis/storage.k8s.io/v1/storageclasses", storage_class("dynamic", PROVISIONER_NAME))
    created = await http.create(PVCS, claim("scratch", "dynamic"))
    await http.patch(f"{PVCS}/scratch", {"metadata": {"annotations": {SELECTED_NODE: "node-000"}}})
    await eventually(lambda: _is(phase(cluster, f"{PVCS}/scratch"), "Bound"), "PVC Bound")
    volume = await http.get(f"{PVS}/pvc-{created['metadata']['uid']}")
    terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"][0]["values"] == ["node-000"]
    assert volume["spec"]["capacity"] == {"storage": "1Gi"}
    assert volume["status"]["phase"] == "Bound"


async def test_kubelet_waits_for_the_claim_to_be_bound(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create("/apis/storage.k8s.io/v1/storageclasses", storage_class("dynamic", PROVISIONER_NAME))
    await http.create(PVCS, claim("late", "dynamic"))
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "user"},
        "spec": {
            "schedulerName": "lockstep",
            "automountServiceAccountToken": False,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "late"}}],
        },
    }
    await http.create(PODS, pod)
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "user"},
        "target": {"kind": "Node", "name": "node-000"},
    }
    await http.create(f"{PODS}/user/binding", binding)

    async def failed_mount() -> bool:
        events = (await http.get(f"/api/v1/namespaces/{NS}/events"))["items"]
        return any(e["reason"] == "FailedMount" and e["involvedObject"]["name"] == "user" for e in events)

    await eventually(failed_mount, "a FailedMount event")
    assert await phase(cluster, f"{PODS}/user") == "Pending"
    await http.patch(f"{PVCS}/late", {"metadata": {"annotations": {SELECTED_NODE: "node-000"}}})
    await eventually(lambda: _is(phase(cluster, f"{PODS}/user"), "Running"), "the pod Running")


async def _is(value: Any, expected: str) -> bool:
    return await value == expected
