"""The simulated cluster over HTTP: nodes, DRA slices, resourceclaim controller and kubelets."""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.dra_driver import DEVICE_CLASS_NAME, DRIVER_NAME
from lockstep.sim.controllers.resourceclaim import DELETE_PROTECTION_FINALIZER
from lockstep.sim.watching import ApiError, KubeHttp

NS = "it"
PODS = f"/api/v1/namespaces/{NS}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
TEMPLATES = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates"
WAIT_SECONDS = 10.0


async def eventually(probe: Callable[[], Awaitable[Any]], what: str) -> Any:
    """Poll ``probe`` until it returns something truthy."""
    deadline = asyncio.get_running_loop().time() + WAIT_SECONDS
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}")


async def get_or_none(http: KubeHttp, path: str) -> dict[str, Any] | None:
    try:
        return await http.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    sim = SimCluster(nodes=3, devices_per_node=2, kubelet_start_delay=0.02, kubelet_delete_delay=0.02)
    await sim.start()
    try:
        await sim.http.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
        yield sim
    finally:
        await sim.stop()


def pod_manifest(name: str, claims: list[dict[str, str]]) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
    spec: dict[str, Any] = {
        "schedulerName": "lockstep",
        "automountServiceAccountToken": False,
        "containers": [container],
    }
    if claims:
        container["resources"] = {"claims": [{"name": c["name"]} for c in claims]}
        spec["resourceClaims"] = claims
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def test_cluster_publishes_ready_nodes_slices_device_class_and_crd(cluster: SimCluster) -> None:
    http = cluster.http
    nodes = (await http.get("/api/v1/nodes"))["items"]
    assert [n["metadata"]["name"] for n in nodes] == ["node-000", "node-001", "node-002"]
    for node in nodes:
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}["Ready"]
        assert ready == "True"
        assert node["status"]["allocatable"]["pods"] == "110"
    slices = (
        await http.get(
            "/apis/resource.k8s.io/v1/resourceslices", params={"fieldSelector": f"spec.driver={DRIVER_NAME}"}
        )
    )["items"]
    assert sorted(s["spec"]["nodeName"] for s in slices) == ["node-000", "node-001", "node-002"]
    assert all(len(s["spec"]["devices"]) == 2 for s in slices)
    assert await http.get(f"/apis/resource.k8s.io/v1/deviceclasses/{DEVICE_CLASS_NAME}")
    crd = await http.get(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.lockstep.dev"
    )
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]}["Established"] == "True"


async def test_deleted_slice_is_published_again(cluster: SimCluster) -> None:
    http = cluster.http
    path = f"/apis/resource.k8s.io/v1/resourceslices/node-001-{DRIVER_NAME}"
    old = await http.get(path)
    await http.delete(path)

    async def republished() -> bool:
        current = await get_or_none(http, path)
        return current is not None and current["metadata"]["uid"] != old["metadata"]["uid"]

    await eventually(republished, "the DRA driver to publish node-001's slice again")


async def test_pod_claim_lifecycle_from_template_to_cleanup(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(
        TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}]
                    }
                }
            },
        },
    )
    pod = await http.create(
        PODS, pod_manifest("worker", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
    )
    uid = pod["metadata"]["uid"]

    async def recorded_claim() -> str | None:
        statuses = (await http.get(f"{PODS}/worker")).get("status", {}).get("resourceClaimStatuses") or []
        return statuses[0]["resourceClaimName"] if statuses else None

    claim_name = await eventually(recorded_claim, "the claim to be recorded in the pod status")
    assert claim_name.startswith("worker-gpu-") and len(claim_name) == len("worker-gpu-") + 5
    claim = await http.get(f"{CLAIMS}/{claim_name}")
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/pod-claim-name"] == "gpu"
    owner = claim["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == ("Pod", "worker", uid, True)
    assert claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] == DEVICE_CLASS_NAME

    # What a scheduler does: allocate and reserve in one status write, then bind.
    await http.patch(
        f"{CLAIMS}/{claim_name}/status",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER_NAME, "pool": "node-001", "device": "gpu-0"}
                        ]
                    },
                    "nodeSelector": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {"key": "metadata.name", "operator": "In", "values": ["node-001"]}
                                ]
                            }
                        ]
                    },
                },
                "reservedFor": [{"resource": "pods", "name": "worker", "uid": uid}],
            }
        },
    )
    await http.create(
        f"{PODS}/worker/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "worker"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-001"},
        },
    )

    async def running() -> dict[str, Any] | None:
        current = await http.get(f"{PODS}/worker")
        return current if current["status"].get("phase") == "Running" else None

    status = (await eventually(running, "the kubelet to mark the pod Running"))["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {
        "PodScheduled": "True",
        "PodReadyToStartContainers": "True",
        "Initialized": "True",
        "Ready": "True",
        "ContainersReady": "True",
    }
    assert ipaddress.ip_address(status["podIP"]) in ipaddress.ip_network("10.64.1.0/24")
    assert status["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert status["startTime"]

    await http.delete(f"{PODS}/worker")
    await eventually(lambda: _is_gone(http, f"{PODS}/worker"), "the kubelet to finish deleting the pod")
    await eventually(lambda: _is_gone(http, f"{CLAIMS}/{claim_name}"), "the generated claim to be deleted")


async def _is_gone(http: KubeHttp, path: str) -> bool:
    return await get_or_none(http, path) is None


async def test_shared_claim_of_a_podgroup_loses_stale_reservations_but_is_never_deleted(
    cluster: SimCluster,
) -> None:
    http = cluster.http
    claim = await http.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {
                "name": "group-gpu",
                # As a scheduler sets it before writing the allocation; the controller deallocates
                # only claims carrying it.
                "finalizers": [DELETE_PROTECTION_FINALIZER],
                "ownerReferences": [
                    {
                        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
                        "kind": "PodGroup",
                        "name": "train",
                        "uid": "0b7c5a9e-1111-4222-8333-444455556666",
                        "controller": True,
                    }
                ],
            },
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}]}
            },
        },
    )
    members = [
        await http.create(PODS, pod_manifest(f"m-{i}", [{"name": "gpu", "resourceClaimName": "group-gpu"}]))
        for i in range(2)
    ]
    await http.patch(
        f"{CLAIMS}/group-gpu/status",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER_NAME, "pool": "node-000", "device": "gpu-1"}
                        ]
                    }
                },
                "reservedFor": [
                    {"resource": "pods", "name": m["metadata"]["name"], "uid": m["metadata"]["uid"]}
                    for m in members
                ],
            }
        },
    )
    await http.delete(f"{PODS}/m-0")

    async def one_left() -> dict[str, Any] | None:
        current = await http.get(f"{CLAIMS}/group-gpu")
        return current if len(current["status"].get("reservedFor") or []) == 1 else None

    kept = await eventually(one_left, "the deleted member's reservation to be dropped")
    assert kept["status"]["reservedFor"][0]["name"] == "m-1"
    assert kept["status"]["allocation"], "still reserved by m-1, so still allocated"

    await http.delete(f"{PODS}/m-1")

    async def deallocated() -> dict[str, Any] | None:
        current = await http.get(f"{CLAIMS}/group-gpu")
        return current if not current["status"].get("allocation") else None

    final = await eventually(deallocated, "the unused claim to be deallocated")
    assert not final["status"].get("reservedFor")

    async def unprotected() -> dict[str, Any] | None:
        current = await http.get(f"{CLAIMS}/group-gpu")
        return current if not current["metadata"].get("finalizers") else None

    final = await eventually(unprotected, "the delete-protection finalizer to be removed")
    assert final["metadata"]["uid"] == claim["metadata"]["uid"], (
        "a PodGroup's claim is not the controller's to delete"
    )
    await asyncio.sleep(0.2)
    assert await get_or_none(http, f"{CLAIMS}/group-gpu") is not None


async def test_pods_finish_after_the_configured_run_time() -> None:
    async with SimCluster(nodes=1, devices_per_node=0, kubelet_start_delay=0.01, pod_run_seconds=0.1) as sim:
        http = sim.http
        await http.create(
            "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}
        )
        manifest = pod_manifest("job", [])
        manifest["spec"]["restartPolicy"] = "Never"  # Always would start the exited container again
        await http.create(PODS, manifest)
        await http.create(
            f"{PODS}/job/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": "job"},
                "target": {"kind": "Node", "name": "node-000"},
            },
        )

        async def succeeded() -> bool:
            return (await http.get(f"{PODS}/job"))["status"].get("phase") == "Succeeded"

        await eventually(succeeded, "the pod to succeed")


async def test_components_survive_dropped_watches_and_expired_resource_versions(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(
        TEMPLATES,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}]
                    }
                }
            },
        },
    )
    # Every watch is cut, and the event window is emptied so that resuming gets 410 and must re-list.
    cluster.server.compact()
    assert cluster.server.drop_watches() >= 3
    for index in range(3):
        await http.create(
            PODS, pod_manifest(f"claimer-{index}", [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}])
        )
        await http.create(PODS, pod_manifest(f"runner-{index}", []))
        await http.create(
            f"{PODS}/runner-{index}/binding",
            {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": f"runner-{index}"},
                "target": {"kind": "Node", "name": "node-002"},
            },
        )
        cluster.server.compact()
        cluster.server.drop_watches()

    async def claims_recorded_and_runners_running() -> bool:
        pods = {p["metadata"]["name"]: p for p in (await http.get(PODS))["items"]}
        return all(
            pods[f"claimer-{i}"]["status"].get("resourceClaimStatuses")
            and pods[f"runner-{i}"]["status"].get("phase") == "Running"
            for i in range(3)
        )

    await eventually(
        claims_recorded_and_runners_running, "the controller and kubelets to catch up after re-lists"
    )
    claims = (await http.get(CLAIMS))["items"]
    assert len(claims) == 3, "one claim per pod, none duplicated by a re-list"


async def test_kubelet_waits_until_the_claim_is_reserved_for_the_pod(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(
        CLAIMS,
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "late"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}]}
            },
        },
    )
    pod = await http.create(PODS, pod_manifest("early", [{"name": "gpu", "resourceClaimName": "late"}]))
    await http.create(
        f"{PODS}/early/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "early"},
            "target": {"kind": "Node", "name": "node-000"},
        },
    )
    await asyncio.sleep(0.3)
    assert (await http.get(f"{PODS}/early"))["status"]["phase"] == "Pending", (
        "started with an unprepared claim"
    )

    await http.patch(
        f"{CLAIMS}/late/status",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {"request": "gpu", "driver": DRIVER_NAME, "pool": "node-000", "device": "gpu-0"}
                        ]
                    }
                },
                "reservedFor": [{"resource": "pods", "name": "early", "uid": pod["metadata"]["uid"]}],
            }
        },
    )

    async def running() -> bool:
        return (await http.get(f"{PODS}/early"))["status"].get("phase") == "Running"

    await eventually(running, "the pod to start once its claim is allocated and reserved for it")
