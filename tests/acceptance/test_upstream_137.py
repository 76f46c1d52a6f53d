"""What Kubernetes 1.37 changed in upstream's PodGroup (scheduling.k8s.io/v1beta1), against the
emulator as a 1.37 cluster with the operator running: a mutable gang.minCount, the group's own
preemptionPolicy (gate PodGroupPreemptionPolicy), the object-shaped disruptionMode, and Jobs with
spec.scheduling (gate WorkloadWithJob) beside lockstep's own label gangs.

The simulated node has 31.5 allocatable cpus."""

from __future__ import annotations

import asyncio
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, simulated_cluster

from lockstep import POD_GROUP_LABEL
from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION
from lockstep.kube.client import JOBS, POD_GROUPS, PODS, UPSTREAM_POD_GROUPS, PatchType, ResourceKind

PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)


def v1beta1_podgroup(name: str, min_count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def member(name: str, group: str, cpu: str, **spec: Any) -> dict[str, Any]:
    manifest = pod(name, cpu=cpu)
    manifest["spec"]["schedulingGroup"] = {"podGroupName": group}
    manifest["spec"].update(spec)
    return manifest


async def bound(env: Env, prefix: str) -> set[str]:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return {
        p["metadata"]["name"]
        for p in pods
        if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
    }


async def set_min_count(env: Env, name: str, min_count: int) -> None:
    body = {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
    await env.client.patch(UPSTREAM_POD_GROUPS, NAMESPACE, name, body, PatchType.MERGE)


async def test_a_raised_min_count_waits_for_the_whole_difference_and_a_lowered_one_proceeds() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0, kube_version="1.37") as env:
        await env.client.create(UPSTREAM_POD_GROUPS, NAMESPACE, v1beta1_podgroup("elastic", 2))
        for i in range(2):
            await env.create(member(f"elastic-{i}", "elastic", cpu="10"))
        first = await eventually(
            lambda: _when(bound(env, "elastic"), lambda b: len(b) == 2), what="minCount 2 bound"
        )
        # 4 now: two more members are needed together, and only one more fits (31.5 cpus, 10 each)
        await set_min_count(env, "elastic", 4)
        for i in (2, 3):
            await env.create(member(f"elastic-{i}", "elastic", cpu="10"))
        await asyncio.sleep(2.0)
        assert await bound(env, "elastic") == first, "one member bound although minCount 4 needs two"
        await set_min_count(env, "elastic", 3)
        now = await eventually(
            lambda: _when(bound(env, "elastic"), lambda b: len(b) == 3), within=5.0, what="a third bound"
        )
        assert first < now, "the bound members stayed where they were"


async def _when(value: Any, test: Any) -> Any:
    result = await value
    return result if test(result) else None


async def test_a_podgroup_that_says_never_preempts_nobody_though_its_pods_would() -> None:
    gates = "PodGroupPreemptionPolicy=true"
    async with simulated_cluster(
        nodes=1, devices_per_node=0, kube_version="1.37", feature_gates=gates, kubelet_delete_delay=None
    ) as env:
        for name, value in (("low", 10), ("high", 1000)):
            body = {"metadata": {"name": name}, "value": value, "preemptionPolicy": "PreemptLowerPriority"}
            await env.client.create(PRIORITY_CLASSES, None, body)
        low = pod("filler-0", cpu="30")
        low["spec"]["priorityClassName"] = "low"
        await env.create(low)
        await eventually(lambda: _when(bound(env, "filler"), bool), what="the low-priority pod bound")
        group = v1beta1_podgroup("polite", 1, preemptionPolicy="Never", disruptionMode={"all": {}})
        await env.client.create(UPSTREAM_POD_GROUPS, NAMESPACE, group)
        await env.create(member("polite-0", "polite", cpu="10", priorityClassName="high"))

        async def refused() -> dict[str, Any] | None:
            group = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "polite")
            conditions = (group.get("status") or {}).get("conditions") or []
            return next(
                (
                    c
                    for c in conditions
                    if c["type"] == "PodGroupInitiallyScheduled" and c["status"] == "False"
                ),
                None,
            )

        condition = await eventually(refused, what="PodGroupInitiallyScheduled=False")
        assert condition["reason"] == "Unschedulable"
        await asyncio.sleep(1.5)
        filler = await env.client.get(PODS, NAMESPACE, "filler-0")
        assert "deletionTimestamp" not in filler["metadata"], "the low-priority pod was preempted"
        assert not any(c["type"] == "DisruptionTarget" for c in filler["status"].get("conditions") or []), (
            "the low-priority pod was marked as a victim"
        )
        assert await bound(env, "polite") == set()


def scheduled_job(
    name: str, parallelism: int, scheduling: dict[str, Any] | None, **template: Any
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {
            "metadata": template.pop("metadata", {}),
            "spec": {
                "schedulerName": "lockstep",
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "10"}}}
                ],
            },
        },
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


async def job_pods(env: Env, job: str) -> list[dict[str, Any]]:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return [p for p in pods if (p["metadata"].get("labels") or {}).get("job-name") == job]


async def test_a_job_with_spec_scheduling_is_a_gang_through_the_podgroup_the_job_controller_makes() -> None:
    # 2 nodes of 31.5 cpus, members of 10: a gang of 6 fits, one of 7 does not
    async with simulated_cluster(
        nodes=2, devices_per_node=0, kube_version="1.37", feature_gates="WorkloadWithJob=true"
    ) as env:
        gang = {"schedulingPolicy": {"gang": {"minCount": 7}}}
        await env.client.create(JOBS, NAMESPACE, scheduled_job("toobig", 7, gang))

        async def refused() -> dict[str, Any] | None:
            """Unschedulable for want of room, once all 7 pods exist (not while it waits for them)."""
            groups = (await env.client.list(UPSTREAM_POD_GROUPS, NAMESPACE)).get("items") or []
            for group in groups:
                for condition in (group.get("status") or {}).get("conditions") or []:
                    if (
                        condition["type"] == "PodGroupInitiallyScheduled"
                        and condition["status"] == "False"
                        and "Insufficient cpu" in condition["message"]
                    ):
                        return group
            return None

        group = await eventually(refused, what="the Job's PodGroup Unschedulable")
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 7}}
        (owner,) = [o for o in group["metadata"]["ownerReferences"] if o.get("controller")]
        assert (owner["kind"], owner["name"]) == ("Job", "toobig")
        pods = await job_pods(env, "toobig")
        assert len(pods) == 7 and not any(p["spec"].get("nodeName") for p in pods), "all or nothing"
        assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {group["metadata"]["name"]}

        await env.client.delete(JOBS, NAMESPACE, "toobig")
        await env.client.create(
            JOBS, NAMESPACE, scheduled_job("fits", 6, {"policy": {"gang": {"minCount": 6}}})
        )

        async def all_bound() -> bool:
            pods = await job_pods(env, "fits")
            return len(pods) == 6 and all(p["spec"].get("nodeName") for p in pods)

        await eventually(all_bound, what="the gang Job's 6 pods bound")


async def test_lockstep_label_gangs_keep_working_beside_the_job_controllers_basic_podgroup() -> None:
    async with simulated_cluster(
        nodes=2, devices_per_node=0, kube_version="1.37", feature_gates="WorkloadWithJob=true"
    ) as env:
        metadata = {"labels": {POD_GROUP_LABEL: "labelled"}, "annotations": {MIN_COUNT_ANNOTATION: "4"}}
        await env.client.create(JOBS, NAMESPACE, scheduled_job("labelled", 4, None, metadata=metadata))

        async def all_bound() -> list[dict[str, Any]] | None:
            pods = await job_pods(env, "labelled")
            return pods if len(pods) == 4 and all(p["spec"].get("nodeName") for p in pods) else None

        pods = await eventually(all_bound, what="the label gang's 4 pods bound")
        # the Job controller gave them its Basic upstream PodGroup too; the label's gang decided
        assert all(p["spec"].get("schedulingGroup") for p in pods)
        lockstep_group = await env.client.get(POD_GROUPS, NAMESPACE, "labelled")
        assert lockstep_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 4}}
