"""What Kubernetes 1.37 changed in upstream's PodGroup (scheduling.k8s.io/v1beta1), against the
emulator as a 1.37 cluster with the operator running: a mutable gang.minCount, the group's own
preemptionPolicy (gate PodGroupPreemptionPolicy) and the object-shaped disruptionMode.

The simulated node has 31.5 allocatable cpus."""

from __future__ import annotations

import asyncio
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, simulated_cluster

from lockstep.kube.client import PODS, UPSTREAM_POD_GROUPS, PatchType, ResourceKind

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
