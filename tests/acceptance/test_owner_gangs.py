"""Gangs from owners through the emulator with the operator running: JobSets, LeaderWorkerSets,
RayClusters and PyTorchJobs become gangs with no PodGroup written, their minCount from the owner's
spec; bad specs are reported on the owner and nothing of them is bound; a CRD installed after
lockstep started is picked up."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, operator_settings, simulated_cluster

from lockstep import POD_GROUP_LABEL
from lockstep.kube.client import (
    EVENTS,
    JOBSETS,
    LEADER_WORKER_SETS,
    POD_GROUPS,
    PODS,
    PYTORCH_JOBS,
    RAY_CLUSTERS,
    ApiError,
)

CONTAINER = {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "1"}}}


def pod_template(cpu: str = "1", labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {}},
        "spec": {
            "schedulerName": "lockstep",
            "restartPolicy": "Never",
            "containers": [{**CONTAINER, "resources": {"requests": {"cpu": cpu}}}],
        },
    }


def jobset(
    name: str, shape: list[tuple[str, int, int]], *, cpu: str = "1", group: str | None = None
) -> dict[str, Any]:
    """A JobSet of (replicatedJob, replicas, parallelism); ``group`` labels every pod template."""
    labels = {POD_GROUP_LABEL: group} if group else {}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicatedJobs": [
                {
                    "name": rj,
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "template": pod_template(cpu, labels),
                        }
                    },
                }
                for rj, replicas, parallelism in shape
            ]
        },
    }


async def _podgroup(env: Env, name: str) -> dict[str, Any] | None:
    try:
        return await env.client.get(POD_GROUPS, NAMESPACE, name)
    except ApiError:
        return None


async def _pods_of(env: Env, label: str, value: str) -> list[dict[str, Any]]:
    listed = await env.client.list(PODS, NAMESPACE, label_selector=f"{label}={value}")
    return list(listed.get("items") or [])


async def _bound(env: Env, label: str, value: str) -> int:
    return sum(1 for p in await _pods_of(env, label, value) if p["spec"].get("nodeName"))


async def _events(env: Env, reason: str) -> list[dict[str, Any]]:
    items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e for e in items if e.get("reason") == reason]


JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"


async def test_a_jobset_is_one_gang_of_every_replicated_job_without_a_podgroup() -> None:
    settings = operator_settings(infer_gangs="JobSet")
    async with simulated_cluster(settings=settings, owner_crds=("JobSet",)) as env:
        created = await env.client.create(
            JOBSETS, NAMESPACE, jobset("train", [("leader", 1, 1), ("workers", 2, 2)])
        )

        async def all_bound() -> bool:
            return await _bound(env, JOBSET_NAME, "train") == 5

        await eventually(all_bound, what="the JobSet's 5 pods bound")
        group = await _podgroup(env, "train")
        assert group is not None
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
        (owner,) = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("JobSet", "train", created["metadata"]["uid"])
        assert all(
            p["metadata"]["labels"].get(POD_GROUP_LABEL) is None
            for p in await _pods_of(env, JOBSET_NAME, "train")
        ), "lockstep never writes the label it infers"


async def test_a_jobset_that_does_not_fit_binds_nothing() -> None:
    settings = operator_settings(infer_gangs="JobSet")
    async with simulated_cluster(settings=settings, owner_crds=("JobSet",)) as env:
        # 4 nodes of 31.5 allocatable cpus hold 4 pods of 20 cpus: the fifth never fits
        await env.client.create(JOBSETS, NAMESPACE, jobset("big", [("workers", 1, 5)], cpu="20"))

        async def unschedulable() -> dict[str, Any] | None:
            group = await _podgroup(env, "big")
            status = (group or {}).get("status") or {}
            return status if status.get("phase") == "Unschedulable" else None

        status = await eventually(unschedulable, what="the JobSet's gang Unschedulable")
        assert (
            "minCount (5)"
            in next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")["message"]
        )
        assert len(await _pods_of(env, JOBSET_NAME, "big")) == 5
        assert await _bound(env, JOBSET_NAME, "big") == 0


async def test_a_labelled_jobset_gets_its_min_count_from_the_spec_without_the_flag() -> None:
    async with simulated_cluster(owner_crds=("JobSet",)) as env:
        await env.client.create(
            JOBSETS, NAMESPACE, jobset("labelled", [("a", 2, 1), ("b", 1, 2)], group="lab")
        )
        await eventually(lambda: _bound_is(env, POD_GROUP_LABEL, "lab", 4), what="the 4 labelled pods bound")
        group = await _podgroup(env, "lab")
        assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
        assert group["metadata"]["ownerReferences"][0]["kind"] == "JobSet"


async def test_a_jobset_with_zero_replicas_is_reported_naming_the_field_and_nothing_binds() -> None:
    settings = operator_settings(infer_gangs="JobSet")
    async with simulated_cluster(settings=settings, owner_crds=("JobSet",)) as env:
        await env.client.create(JOBSETS, NAMESPACE, jobset("empty", [("none", 0, 1), ("some", 1, 2)]))

        async def reported() -> list[dict[str, Any]]:
            return [
                e for e in await _events(env, "InvalidGangSpec") if e["involvedObject"]["name"] == "empty"
            ]

        (event,) = await eventually(reported, what="an InvalidGangSpec event on the JobSet")
        assert event["involvedObject"]["kind"] == "JobSet"
        assert "JobSet acceptance/empty: spec.replicatedJobs[0].replicas is 0" in event["message"]
        await eventually(lambda: _count_is(env, JOBSET_NAME, "empty", 2), what="the 2 pods of 'some'")
        assert await _bound(env, JOBSET_NAME, "empty") == 0
        assert await _podgroup(env, "empty") is None


async def test_a_crd_installed_after_lockstep_started_is_picked_up() -> None:
    settings = operator_settings(infer_gangs="JobSet")
    async with simulated_cluster(
        settings=settings, operator_options={"discovery_interval_seconds": 0.5}
    ) as env:
        await env.cluster.install_owner_crd("JobSet")
        await env.client.create(JOBSETS, NAMESPACE, jobset("late", [("workers", 1, 3)]))
        await eventually(
            lambda: _bound_is(env, JOBSET_NAME, "late", 3), what="the late JobSet's 3 pods bound"
        )
        group = await _podgroup(env, "late")
        assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}


async def _bound_is(env: Env, label: str, value: str, count: int) -> bool:
    return await _bound(env, label, value) == count


async def _count_is(env: Env, label: str, value: str, count: int) -> bool:
    return len(await _pods_of(env, label, value)) == count


LWS_NAME = "leaderworkerset.sigs.k8s.io/name"


def leaderworkerset(name: str, replicas: int, size: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": pod_template()},
            **spec,
        },
    }


async def test_each_replica_group_of_a_leaderworkerset_is_its_own_gang() -> None:
    settings = operator_settings(infer_gangs="LeaderWorkerSet")
    async with simulated_cluster(settings=settings, owner_crds=("LeaderWorkerSet",)) as env:
        created = await env.client.create(LEADER_WORKER_SETS, NAMESPACE, leaderworkerset("serve", 2, 3))
        await eventually(lambda: _bound_is(env, LWS_NAME, "serve", 6), what="both groups of 3 bound")
        for index in (0, 1):
            group = await _podgroup(env, f"serve-{index}")
            assert group is not None
            assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
            assert group["metadata"]["ownerReferences"][0]["uid"] == created["metadata"]["uid"]
        assert await _podgroup(env, "serve") is None


async def test_a_leaderworkerset_group_that_does_not_fit_binds_nothing_while_the_other_runs() -> None:
    settings = operator_settings(infer_gangs="LeaderWorkerSet")
    async with simulated_cluster(settings=settings, owner_crds=("LeaderWorkerSet",), nodes=3) as env:
        # 3 nodes of 31.5 cpus: one group of 3 pods of 20 cpus fits, the second group finds no room
        manifest = leaderworkerset("wide", 2, 3)
        manifest["spec"]["leaderWorkerTemplate"]["workerTemplate"] = pod_template("20")
        await env.client.create(LEADER_WORKER_SETS, NAMESPACE, manifest)
        await eventually(lambda: _bound_is(env, LWS_NAME, "wide", 3), what="one group bound")
        await eventually(lambda: _count_is(env, LWS_NAME, "wide", 6), what="both groups' pods")

        async def one_unschedulable() -> bool:
            phases = [
                ((await _podgroup(env, f"wide-{i}")) or {}).get("status", {}).get("phase") for i in (0, 1)
            ]
            return "Unschedulable" in phases and ("Running" in phases or "Scheduled" in phases)

        await eventually(one_unschedulable, what="one group running, the other Unschedulable")
        pods = await _pods_of(env, LWS_NAME, "wide")
        by_group: dict[str, int] = {}
        for item in pods:
            if item["spec"].get("nodeName"):
                index = item["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/group-index"]
                by_group[index] = by_group.get(index, 0) + 1
        assert list(by_group.values()) == [3], f"a whole group or nothing: {by_group}"


async def test_a_leaderworkerset_of_size_zero_is_reported_naming_the_field() -> None:
    settings = operator_settings(infer_gangs="LeaderWorkerSet")
    async with simulated_cluster(settings=settings, owner_crds=("LeaderWorkerSet",)) as env:
        await env.client.create(LEADER_WORKER_SETS, NAMESPACE, leaderworkerset("none", 1, 0))

        async def reported() -> list[dict[str, Any]]:
            return [e for e in await _events(env, "InvalidGangSpec") if e["involvedObject"]["name"] == "none"]

        (event,) = await eventually(reported, what="an InvalidGangSpec event on the LeaderWorkerSet")
        assert "spec.leaderWorkerTemplate.size is 0" in event["message"]
        assert event["involvedObject"]["kind"] == "LeaderWorkerSet"


async def test_a_raycluster_is_a_gang_of_its_head_and_the_workers_min_replicas() -> None:
    settings = operator_settings(infer_gangs="RayCluster")
    async with simulated_cluster(settings=settings, owner_crds=("RayCluster",)) as env:
        cluster = {
            "apiVersion": "ray.io/v1",
            "kind": "RayCluster",
            "metadata": {"name": "ray", "namespace": NAMESPACE},
            "spec": {
                "headGroupSpec": {"rayStartParams": {}, "template": pod_template()},
                "workerGroupSpecs": [
                    {"groupName": "gpu", "replicas": 3, "minReplicas": 2, "template": pod_template()},
                    {"groupName": "idle", "replicas": 2, "suspend": True, "template": pod_template()},
                ],
            },
        }
        await env.client.create(RAY_CLUSTERS, NAMESPACE, cluster)
        await eventually(
            lambda: _bound_is(env, "ray.io/cluster", "ray", 4), what="the head and 3 workers bound"
        )
        group = await _podgroup(env, "ray")
        assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        assert group["metadata"]["ownerReferences"][0]["kind"] == "RayCluster"


async def test_a_pytorchjob_is_a_gang_of_all_its_replicas() -> None:
    settings = operator_settings(infer_gangs="PyTorchJob")
    async with simulated_cluster(settings=settings, owner_crds=("PyTorchJob",)) as env:
        job = {
            "apiVersion": "kubeflow.org/v1",
            "kind": "PyTorchJob",
            "metadata": {"name": "torch", "namespace": NAMESPACE},
            "spec": {
                "pytorchReplicaSpecs": {
                    "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod_template()},
                    "Worker": {"replicas": 3, "restartPolicy": "OnFailure", "template": pod_template()},
                }
            },
        }
        await env.client.create(PYTORCH_JOBS, NAMESPACE, job)
        label = "training.kubeflow.org/job-name"
        await eventually(lambda: _bound_is(env, label, "torch", 4), what="the master and 3 workers bound")
        group = await _podgroup(env, "torch")
        assert group is not None and group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}


async def test_an_indexed_job_in_an_upstream_podgroup_is_not_inferred_again() -> None:
    from test_upstream_137 import job_pods, scheduled_job

    from lockstep.kube.client import JOBS

    settings = operator_settings(infer_gangs="Job")
    async with simulated_cluster(
        settings=settings,
        nodes=2,
        devices_per_node=0,
        kube_version="1.37",
        feature_gates="WorkloadWithJob=true",
    ) as env:
        job = scheduled_job("upstream", 3, {"policy": {"gang": {"minCount": 3}}})
        await env.client.create(JOBS, NAMESPACE, job)

        async def bound() -> bool:
            pods = await job_pods(env, "upstream")
            return len(pods) == 3 and all(p["spec"].get("nodeName") for p in pods)

        await eventually(bound, what="the Job's 3 pods bound through its upstream PodGroup")
        assert await _podgroup(env, "upstream") is None, "no lockstep PodGroup beside the upstream one"
