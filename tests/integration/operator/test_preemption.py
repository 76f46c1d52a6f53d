"""Gang-aware preemption, the whole operator against the simulated cluster over HTTP.

Nodes have 31.5 allocatable cpus, so pods of 15 cpus fit two to a node. The simulated containers
ignore SIGTERM (``kubelet_delete_delay=None``): a victim stays, terminating, for its whole grace
period, so a test can see that nothing is bound into room a victim still holds.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any

from acceptance_harness import GPU_TEMPLATE, NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep import POD_GROUP_LABEL
from lockstep.kube.client import EVENTS, PODS, RESOURCE_CLAIMS, ResourceKind
from lockstep.sim.invariants import check_state, fetch_cluster_state

PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
PDBS = ResourceKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
GRACE = 1


@asynccontextmanager
async def cluster(**options: Any) -> AsyncIterator[Env]:
    async with simulated_cluster(nodes=2, kubelet_delete_delay=None, **options) as env:
        for name, value, policy in (
            ("low", 10, "PreemptLowerPriority"),
            ("high", 1000, "PreemptLowerPriority"),
            ("high-never", 1000, "Never"),
        ):
            await env.client.create(
                PRIORITY_CLASSES,
                None,
                {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy},
            )
        yield env


def member(
    name: str, group: str, priority_class: str, *, cpu: str = "15", grace: int = GRACE, **extra: Any
) -> dict[str, Any]:
    manifest = pod(name, group, cpu=cpu, **extra)
    manifest["spec"]["priorityClassName"] = priority_class
    manifest["spec"]["terminationGracePeriodSeconds"] = grace
    return manifest


async def gang(env: Env, name: str, size: int, min_count: int, priority_class: str, **extra: Any) -> None:
    await env.create(podgroup(name, min_count))
    for i in range(size):
        await env.create(member(f"{name}-{i}", name, priority_class, **extra))


async def running(env: Env, group: str, count: int) -> None:
    async def all_running() -> bool:
        pods = await env.pods(group)
        return sum(1 for p in pods if p["status"].get("phase") == "Running") == count

    await eventually(all_running, what=f"{count} pods of {group} running")


async def watch_victims(env: Env, victims_seen: set[str]) -> None:
    """Until cancelled: no snapshot breaks an invariant (a victim still terminating keeps its room, so a
    preemptor bound before the room is free overcommits the node), and collect the victims' names."""
    async with env.cluster_session() as (session, url):
        while True:
            state = await fetch_cluster_state(session, url)
            victims_seen |= {
                p["metadata"]["name"]
                for p in state.pods
                if any(
                    c.get("reason") == "PreemptionByScheduler" for c in p["status"].get("conditions") or []
                )
            }
            assert [str(v) for v in check_state(state) if not v.transient] == []
            await asyncio.sleep(0.02)


async def bound_after_victims(env: Env, preemptor: str, count: int) -> set[str]:
    """Wait until ``count`` pods of ``preemptor`` are bound, checking that none was bound into room a
    victim still held; return the names of the pods preempted on the way."""
    seen: set[str] = set()
    watcher = asyncio.create_task(watch_victims(env, seen))
    try:
        await eventually(lambda: _bound(env, preemptor, count), what=f"{count} pods of {preemptor} bound")
    finally:
        watcher.cancel()
        with suppress(asyncio.CancelledError):
            await watcher
    return seen


async def _bound(env: Env, group: str, count: int) -> bool:
    return await env.bound(group) >= count


async def remaining(env: Env) -> Counter[str]:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return Counter(p["metadata"].get("labels", {}).get(POD_GROUP_LABEL, "") for p in pods)


async def events(env: Env, reason: str) -> list[dict[str, Any]]:
    items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e for e in items if e.get("reason") == reason]


async def test_a_high_priority_gang_displaces_exactly_one_whole_low_priority_gang() -> None:
    async with cluster() as env:
        await gang(env, "low-a", 2, 2, "low")
        await gang(env, "low-b", 2, 2, "low")
        await running(env, "low-a", 2)
        await running(env, "low-b", 2)
        # one slot is needed, but a gang at its minCount is taken whole or not at all
        await gang(env, "urgent", 1, 1, "high")
        victims = await bound_after_victims(env, "urgent", 1)

        left = await remaining(env)
        assert sorted(left.items()) in ([("low-a", 2), ("urgent", 1)], [("low-b", 2), ("urgent", 1)])
        assert len(victims) == 2 and len({name.rsplit("-", 1)[0] for name in victims}) == 1
        urgent = (await env.client.get(PODS, NAMESPACE, "urgent-0"))["status"]
        assert urgent.get("nominatedNodeName")
        preempted = await events(env, "Preempted")
        assert {e["involvedObject"]["name"] for e in preempted} == victims
        assert all("preempted by group acceptance/urgent, priority 1000" in e["message"] for e in preempted)
        (preempting,) = await events(env, "Preempting")
        assert preempting["involvedObject"]["name"] == "urgent"
        assert "(2 pods)" in preempting["message"]


async def test_a_gang_in_pod_mode_loses_only_the_pod_it_must() -> None:
    async with cluster() as env:
        await gang(env, "wide", 4, 2, "low")  # two pods beyond its minCount
        await running(env, "wide", 4)
        await gang(env, "urgent", 1, 1, "high")
        victims = await bound_after_victims(env, "urgent", 1)
        assert len(victims) == 1
        assert (await remaining(env))["wide"] == 3


async def test_a_gang_in_podgroup_mode_goes_whole_though_it_could_spare_pods() -> None:
    async with cluster() as env:
        together = podgroup("together", 2)
        together["spec"]["disruptionMode"] = "PodGroup"
        await env.create(together)
        for i in range(4):
            await env.create(member(f"together-{i}", "together", "low"))
        await running(env, "together", 4)
        await gang(env, "urgent", 1, 1, "high")
        victims = await bound_after_victims(env, "urgent", 1)
        assert victims == {f"together-{i}" for i in range(4)}
        assert (await remaining(env))["together"] == 0


async def test_a_pdb_is_respected_while_another_plan_exists() -> None:
    async with cluster() as env:
        await gang(env, "guarded", 2, 2, "low")
        await gang(env, "free", 2, 2, "low")
        await env.client.create(
            PDBS,
            NAMESPACE,
            {
                "metadata": {"name": "guard"},
                "spec": {"minAvailable": 2, "selector": {"matchLabels": {POD_GROUP_LABEL: "guarded"}}},
            },
        )
        await running(env, "guarded", 2)
        await running(env, "free", 2)
        await gang(env, "urgent", 1, 1, "high")
        victims = await bound_after_victims(env, "urgent", 1)
        assert victims == {"free-0", "free-1"}
        assert (await remaining(env))["guarded"] == 2


async def test_never_equal_and_unfit_preempt_nothing() -> None:
    async with cluster() as env:
        await gang(env, "low-a", 2, 2, "low")
        await gang(env, "low-b", 2, 2, "low")
        await running(env, "low-a", 2)
        await running(env, "low-b", 2)
        await gang(env, "polite", 1, 1, "high-never")  # preemptionPolicy: Never waits
        await gang(env, "peer", 1, 1, "low")  # equal priority is never preempted
        await gang(env, "huge", 1, 1, "high", cpu="40")  # would not fit even on an empty cluster

        async def all_tried() -> bool:
            statuses = [await env.podgroup_status(name) for name in ("polite", "peer", "huge")]
            return all(s.get("phase") == "Unschedulable" for s in statuses)

        await eventually(all_tried, what="the three groups tried and unschedulable")
        await asyncio.sleep(1.5)  # a few more attempts with backoff
        left = await remaining(env)
        assert (left["low-a"], left["low-b"]) == (2, 2)
        assert await events(env, "Preempted") == []
        for name in ("polite", "peer", "huge"):
            assert await env.bound(name) == 0


async def test_two_high_priority_gangs_competing_each_displace_one_gang_and_never_each_other() -> None:
    async with cluster() as env:
        await gang(env, "low-a", 2, 2, "low")
        await gang(env, "low-b", 2, 2, "low")
        await running(env, "low-a", 2)
        await running(env, "low-b", 2)
        await gang(env, "urgent-a", 2, 2, "high")
        await gang(env, "urgent-b", 2, 2, "high")
        await eventually(lambda: _bound(env, "urgent-a", 2), what="urgent-a bound")
        await eventually(lambda: _bound(env, "urgent-b", 2), what="urgent-b bound")
        left = await remaining(env)
        assert (left["low-a"], left["low-b"], left["urgent-a"], left["urgent-b"]) == (0, 0, 2, 2)
        assert len(await events(env, "Preempted")) == 4


async def test_claims_freed_by_victims_are_reallocated_with_no_device_twice() -> None:
    async with cluster(devices_per_node=2) as env:
        await env.create(GPU_TEMPLATE)
        gpu = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
        await gang(env, "low", 4, 4, "low", cpu="1", claims=gpu)  # every device of both nodes
        await running(env, "low", 4)
        await gang(env, "urgent", 2, 2, "high", cpu="1", claims=gpu)
        await bound_after_victims(env, "urgent", 2)

        async def urgent_running() -> bool:
            pods = await env.pods("urgent")
            return all(p["status"].get("phase") == "Running" for p in pods)

        await eventually(urgent_running, what="urgent running with its devices")
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE)).get("items") or []
        devices = [
            (r["pool"], r["device"])
            for c in claims
            if (c.get("status") or {}).get("allocation")
            for r in c["status"]["allocation"]["devices"]["results"]
        ]
        assert len(devices) == len(set(devices)), f"a device allocated twice: {devices}"
        assert await env.invariant_violations() == []


async def test_a_restart_mid_preemption_neither_loses_nor_repeats_it() -> None:
    async with cluster() as env:
        # the victims terminate for 10 s: the operator is replaced meanwhile (stopping it takes seconds)
        await gang(env, "low-a", 2, 2, "low", grace=10)
        await gang(env, "low-b", 2, 2, "low", grace=10)
        await running(env, "low-a", 2)
        await running(env, "low-b", 2)
        await gang(env, "urgent", 2, 2, "high")

        async def terminating() -> set[str]:
            pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
            names = {p["metadata"]["name"] for p in pods if p["metadata"].get("deletionTimestamp")}
            return names if len(names) == 2 else set()

        victims = await eventually(terminating, what="victims terminating")
        await env.stop_operators()
        assert await terminating() == victims, "the victims were gone before the new operator started"
        await env.start_operator()
        await bound_after_victims(env, "urgent", 2)
        left = await remaining(env)
        assert left["urgent"] == 2 and left["low-a"] + left["low-b"] == 2
        assert {e["involvedObject"]["name"] for e in await events(env, "Preempted")} == victims
