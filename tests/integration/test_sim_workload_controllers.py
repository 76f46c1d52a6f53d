"""The simulated kube-controller-manager parts behind upstream's Workload API and Jobs, over HTTP:
the Job controller, the podgroup-protection controller, and the resourceclaim controller's claims
for upstream PodGroups."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_sim_cluster import eventually, get_or_none

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.dra_driver import DEVICE_CLASS_NAME

NS = "wl"
PODS = f"/api/v1/namespaces/{NS}/pods"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
# The upstream PodGroups of each kube version the emulator can be.
PODGROUP_VERSIONS = {"1.36": "v1alpha2", "1.37": "v1beta1"}
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims"
TEMPLATES = f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates"
CONTAINER = {"name": "main", "image": "registry.k8s.io/pause:3.10"}


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    async for sim in _started(None):
        yield sim


@pytest.fixture
async def cluster_137() -> AsyncIterator[SimCluster]:
    async for sim in _started("1.37"):
        yield sim


@pytest.fixture(params=sorted(PODGROUP_VERSIONS))
async def versioned(request: pytest.FixtureRequest) -> AsyncIterator[tuple[SimCluster, str]]:
    """A cluster of each kube version, with the path of its upstream PodGroups."""
    async for sim in _started(request.param):
        yield sim, f"/apis/scheduling.k8s.io/{PODGROUP_VERSIONS[request.param]}/namespaces/{NS}/podgroups"


async def _started(kube_version: str | None) -> AsyncIterator[SimCluster]:
    sim = SimCluster(
        nodes=2,
        devices_per_node=1,
        kubelet_start_delay=0.02,
        kubelet_delete_delay=0.02,
        kube_version=kube_version,
    )
    await sim.start()
    try:
        await sim.http.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        yield sim
    finally:
        await sim.stop()


async def job_pods(sim: SimCluster, job_name: str) -> list[dict[str, Any]]:
    listed = await sim.http.get(PODS, {"labelSelector": f"batch.kubernetes.io/job-name={job_name}"})
    return list(listed["items"])


async def test_indexed_job_gets_parallelism_pods_with_indexes_and_an_owner(cluster: SimCluster) -> None:
    job = await cluster.http.create(
        JOBS,
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "parallelism": 3,
                "completions": 3,
                "completionMode": "Indexed",
                "template": {
                    "metadata": {"labels": {"app": "t"}},
                    "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
                },
            },
        },
    )

    async def three() -> list[dict[str, Any]] | None:
        pods = await job_pods(cluster, "trainer")
        return pods if len(pods) == 3 else None

    pods = await eventually(three, "three pods of the job")
    indexes = sorted(p["metadata"]["labels"]["batch.kubernetes.io/job-completion-index"] for p in pods)
    assert indexes == ["0", "1", "2"]
    for pod in pods:
        index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        assert pod["metadata"]["name"].startswith(f"trainer-{index}-")
        assert pod["spec"]["hostname"] == f"trainer-{index}"
        (owner,) = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"], owner["controller"]) == ("Job", job["metadata"]["uid"], True)

    await cluster.http.delete(f"{PODS}/{pods[0]['metadata']['name']}", {"gracePeriodSeconds": 0})

    async def replaced() -> bool:
        names = {p["metadata"]["name"] for p in await job_pods(cluster, "trainer")}
        return len(names) == 3 and pods[0]["metadata"]["name"] not in names

    await eventually(replaced, "the deleted pod replaced with its index")
    await cluster.http.delete(f"{JOBS}/trainer")
    await eventually(lambda: _none_left(cluster, "trainer"), "the job's pods collected with it")


async def _none_left(sim: SimCluster, job_name: str) -> bool:
    return not await job_pods(sim, job_name)


async def test_deleted_pod_group_stays_until_no_pod_names_it(versioned: tuple[SimCluster, str]) -> None:
    cluster, podgroups = versioned
    await cluster.http.create(
        podgroups, {"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"basic": {}}}}
    )
    await cluster.http.create(
        PODS,
        {
            "metadata": {"name": "member"},
            "spec": {"containers": [CONTAINER], "schedulingGroup": {"podGroupName": "g"}},
        },
    )
    deleted = await cluster.http.delete(f"{podgroups}/g")
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    assert await get_or_none(cluster.http, f"{podgroups}/g") is not None

    await cluster.http.delete(f"{PODS}/member", {"gracePeriodSeconds": 0})

    async def gone() -> bool:
        return await get_or_none(cluster.http, f"{podgroups}/g") is None

    await eventually(gone, "the PodGroup removed once its pod is gone")


async def test_pod_group_template_claim_is_generated_owned_and_recorded(
    versioned: tuple[SimCluster, str],
) -> None:
    cluster, podgroups = versioned
    await cluster.http.create(
        TEMPLATES,
        {
            "metadata": {"name": "gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [{"name": "g", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}]
                    }
                }
            },
        },
    )
    group = await cluster.http.create(
        podgroups,
        {
            "metadata": {"name": "trainer"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "gpu"}],
            },
        },
    )

    async def recorded() -> list[dict[str, Any]] | None:
        current = await cluster.http.get(f"{podgroups}/trainer")
        return (current.get("status") or {}).get("resourceClaimStatuses")

    (entry,) = await eventually(recorded, "status.resourceClaimStatuses")
    assert entry["name"] == "shared"
    claim = await cluster.http.get(f"{CLAIMS}/{entry['resourceClaimName']}")
    (owner,) = claim["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("PodGroup", group["metadata"]["uid"], True)
    assert claim["metadata"]["name"].startswith("trainer-shared-")
    listed = await cluster.http.get(CLAIMS)
    assert len(listed["items"]) == 1


async def test_deleted_composite_stays_until_no_group_names_it(cluster_137: SimCluster) -> None:
    """KEP-6012: a CompositePodGroup keeps its protection finalizer while a PodGroup or a child
    CompositePodGroup names it; the hierarchy goes from its leaves up."""
    cluster = cluster_137
    composites = f"/apis/scheduling.k8s.io/v1alpha3/namespaces/{NS}/compositepodgroups"
    podgroups = f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/podgroups"
    ref = {"workloadName": "w", "templateName": "t"}
    for name, parent in (("root", None), ("mid", "root")):
        spec: dict[str, Any] = {"workloadRef": ref, "schedulingPolicy": {"basic": {}}}
        if parent:
            spec["parentCompositePodGroupName"] = parent
        await cluster.http.create(composites, {"metadata": {"name": name}, "spec": spec})
    leaf = {"parentCompositePodGroupName": "mid", "workloadRef": ref, "schedulingPolicy": {"basic": {}}}
    await cluster.http.create(podgroups, {"metadata": {"name": "leaf"}, "spec": leaf})
    for name in ("root", "mid"):
        deleted = await cluster.http.delete(f"{composites}/{name}")
        assert deleted["metadata"]["finalizers"] == ["scheduling.k8s.io/compositepodgroup-protection"]
    assert await get_or_none(cluster.http, f"{composites}/root") is not None
    assert await get_or_none(cluster.http, f"{composites}/mid") is not None

    await cluster.http.delete(f"{podgroups}/leaf")  # no pod names it: gone at once

    async def gone(sim: SimCluster, path: str) -> bool:
        return await get_or_none(sim.http, path) is None

    await eventually(lambda: gone(cluster, f"{composites}/mid"), "mid removed once its PodGroup is gone")
    await eventually(lambda: gone(cluster, f"{composites}/root"), "root removed once mid is gone")
