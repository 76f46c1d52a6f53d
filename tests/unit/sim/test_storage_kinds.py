"""StorageClasses, CSINodes, PersistentVolumes and PersistentVolumeClaims: the rules the scheduler and
the simulated PV controller rely on (the transcript volumes-jobs pins the create answers)."""

from __future__ import annotations

from typing import Any

from sim_helpers import NS, Client

MERGE = "application/merge-patch+json"
PVS = "/api/v1/persistentvolumes"
SCS = "/apis/storage.k8s.io/v1/storageclasses"
CSINODES = "/apis/storage.k8s.io/v1/csinodes"


def local_pv(name: str, node: str | None = "n1", **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "10Gi"},
            "accessModes": ["ReadWriteOnce"],
            "local": {"path": "/d"},
            **spec,
        },
    }
    if node is not None:
        term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
        body["spec"]["nodeAffinity"] = {"required": {"nodeSelectorTerms": [term]}}
    return body


def pvc(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}, **spec},
    }


async def test_storage_class_defaults_and_immutable_binding_mode(client: Client) -> None:
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"}}
    status, answer, _ = await client.call("POST", SCS, {**body, "provisioner": "example.com/fast"})
    assert status == 201, answer
    assert (answer["reclaimPolicy"], answer["volumeBindingMode"]) == ("Delete", "Immediate")
    status, answer, _ = await client.call(
        "PATCH", f"{SCS}/fast", {"volumeBindingMode": "WaitForFirstConsumer"}, MERGE
    )
    assert status == 422 and answer["details"]["causes"][0]["field"] == "volumeBindingMode"
    status, answer, _ = await client.call("POST", SCS, {**body, "metadata": {"name": "x"}})
    assert status == 422 and answer["details"]["causes"][0]["field"] == "provisioner"


async def test_csinode_allocatable_count_is_validated(client: Client) -> None:
    driver = {"name": "csi.example.com", "nodeID": "n1", "allocatable": {"count": -1}}
    body = {"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n1"}}
    status, answer, _ = await client.call("POST", CSINODES, {**body, "spec": {"drivers": [driver]}})
    assert status == 422
    assert answer["details"]["causes"][0]["field"] == "spec.drivers[0].allocatable.count"
    driver["allocatable"] = {"count": 2}
    status, answer, _ = await client.call("POST", CSINODES, {**body, "spec": {"drivers": [driver]}})
    assert status == 201, answer


async def test_pv_needs_a_source_and_local_needs_node_affinity(client: Client) -> None:
    status, answer, _ = await client.call("POST", PVS, local_pv("no-affinity", node=None))
    assert status == 422 and answer["details"]["causes"][0]["field"] == "spec.nodeAffinity"
    bare = local_pv("bare")
    del bare["spec"]["local"]
    status, answer, _ = await client.call("POST", PVS, bare)
    assert status == 422
    assert answer["message"].endswith("spec: Required value: must specify a volume type")


async def test_pv_phase_change_stamps_transition_time_and_source_is_immutable(client: Client) -> None:
    status, created, _ = await client.call("POST", PVS, local_pv("pv1"))
    assert status == 201
    assert created["metadata"]["finalizers"] == ["kubernetes.io/pv-protection"]
    assert created["status"]["phase"] == "Pending"
    status, answer, _ = await client.call(
        "PATCH", f"{PVS}/pv1/status", {"status": {"phase": "Available"}}, MERGE
    )
    assert status == 200 and answer["status"]["phase"] == "Available"
    assert answer["status"]["lastPhaseTransitionTime"]
    status, answer, _ = await client.call("PATCH", f"{PVS}/pv1", {"spec": {"local": {"path": "/e"}}}, MERGE)
    assert status == 422 and answer["details"]["causes"][0]["field"] == "spec.persistentvolumesource"


async def test_pvc_volume_name_is_set_once_and_the_rest_of_the_spec_is_immutable(client: Client) -> None:
    status, created, _ = await client.call("POST", f"{NS}/persistentvolumeclaims", pvc("data"))
    assert status == 201, created
    assert created["spec"]["volumeMode"] == "Filesystem"
    assert created["status"] == {"phase": "Pending"}
    assert created["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]
    path = f"{NS}/persistentvolumeclaims/data"
    status, answer, _ = await client.call("PATCH", path, {"spec": {"volumeName": "pv1"}}, MERGE)
    assert status == 200 and answer["spec"]["volumeName"] == "pv1"
    status, answer, _ = await client.call("PATCH", path, {"spec": {"volumeName": "pv2"}}, MERGE)
    assert status == 422 and answer["details"]["causes"][0]["field"] == "spec"
    status, answer, _ = await client.call("POST", f"{NS}/persistentvolumeclaims", pvc("bad", accessModes=[]))
    assert status == 422
    assert answer["details"]["causes"][0]["message"] == "Required value: at least 1 access mode is required"
