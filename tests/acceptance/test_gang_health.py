"""Gangs after they start, on the emulator with the operator running: the PodGroupSatisfied condition
in both directions, KeepMinCount replacements of members lost with a node (taint eviction) landing in
the survivors' zone, a gang Job whose indexes finish at different times completing after a member
failed (kubernetes #142330), and opt-in recovery of a stale gang (PDBs respected) that never touches a
gang whose members are finishing (KAI-Scheduler #1968)."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep import POD_GROUP_LABEL
from lockstep.kube.client import EVENTS, JOBS, PODS, PatchType, ResourceKind
from lockstep.sim.workload import EXIT_CODE, RUN_SECONDS

ZONE = "topology.kubernetes.io/zone"
PDBS = ResourceKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
FAST_NODES = {"node_monitor_grace_period": 0.5, "node_monitor_period": 0.1, "pod_gc_period": 0.2}
# members of a lost node are evicted at once (the default toleration is 300 s)
LOST_AT_ONCE = [
    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 0}
    for key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")
]


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == kind), {})


async def _satisfied(env: Env, name: str, wanted: str) -> dict[str, Any] | None:
    status = await env.podgroup_status(name)
    return status if _condition(status, "PodGroupSatisfied").get("status") == wanted else None


def _job(
    name: str, group: str, template_spec: dict[str, Any], annotations: dict[str, str], **spec: Any
) -> dict:
    template = {
        "metadata": {"labels": {POD_GROUP_LABEL: group}, "annotations": annotations},
        "spec": {"schedulerName": "lockstep", "restartPolicy": "Never", **template_spec},
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {**spec, "template": template},
    }


def _container(cpu: str) -> list[dict[str, Any]]:
    return [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}}}]


async def test_keep_min_count_replaces_members_lost_with_a_node_in_the_survivors_zone() -> None:
    # containers start 1 s after binding: the replacements are Pending long enough to see the dip
    nodes_options = {"zones": 2, "rack_size": 2, "kubelet_start_delay": 1.0, **FAST_NODES}
    async with simulated_cluster(nodes=4, devices_per_node=0, **nodes_options) as env:
        group = podgroup("train", 4)
        group["spec"] |= {
            "satisfactionPolicy": "KeepMinCount",
            "schedulingConstraints": {"topology": [{"key": ZONE}]},
        }
        await env.create(group)
        spec = {"containers": _container("7"), "tolerations": LOST_AT_ONCE}
        await env.client.create(
            JOBS, NAMESPACE, _job("train", "train", spec, {}, parallelism=4, completions=4)
        )
        up = await eventually(lambda: _satisfied(env, "train", "True"), what="the gang satisfied")
        assert _condition(up, "PodGroupSatisfied")["reason"] == "MinCountSatisfied"
        assert (up["running"], up["pending"]) == (4, 0)
        nodes = {n["metadata"]["name"]: n for n in (await env.cluster.http.get("/api/v1/nodes"))["items"]}
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in await env.pods("train")}
        zones = {nodes[n]["metadata"]["labels"][ZONE] for n in placed.values()}
        assert len(zones) == 1
        lost = sorted(placed.values())[0]
        await env.cluster.lose_node(lost)

        down = await eventually(lambda: _satisfied(env, "train", "False"), what="the gang below minCount")
        below = _condition(down, "PodGroupSatisfied")
        assert (
            below["reason"] == "BelowMinCount"
            and "of minCount 4 members running or succeeded" in below["message"]
        )
        back = await eventually(lambda: _satisfied(env, "train", "True"), within=30, what="the gang restored")
        assert back["running"] == 4
        live = [p for p in await env.pods("train") if not p["metadata"].get("deletionTimestamp")]
        assert len(live) == 4
        assert {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][ZONE] for p in live} == zones
        assert lost not in {p["spec"]["nodeName"] for p in live}
        assert await env.invariant_violations() == []


async def test_a_gang_job_completes_when_a_member_fails_after_another_index_completed() -> None:
    """kubernetes #142330: index 0 succeeds, then index 1 fails; the Job retries index 1 (backoffLimit)
    and lockstep places the retry although only one member of minCount 2 is left unfinished."""
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        await env.create(podgroup("indexed", 2))
        # gated, so that index 1 can be told to fail before the gang starts
        spec = {"containers": _container("500m"), "schedulingGates": [{"name": "example.com/hold"}]}
        job = _job(
            "indexed",
            "indexed",
            spec,
            {RUN_SECONDS: "0.3"},
            parallelism=2,
            completions=2,
            completionMode="Indexed",
            backoffLimit=2,
        )
        await env.client.create(JOBS, NAMESPACE, job)
        pods = await eventually(lambda: _exactly(env.pods("indexed"), 2), what="the Job's two pods")
        second = next(p for p in pods if p["metadata"]["annotations"][INDEX] == "1")["metadata"]["name"]
        # index 1 fails after index 0 completed; its retry (from the template) succeeds
        failing = {"metadata": {"annotations": {EXIT_CODE: "1", RUN_SECONDS: "1"}}}
        await env.client.patch(PODS, NAMESPACE, second, failing, PatchType.MERGE)
        for member in pods:
            ungate = {"spec": {"schedulingGates": None}}
            await env.client.patch(PODS, NAMESPACE, member["metadata"]["name"], ungate, PatchType.MERGE)
        await eventually(lambda: _gates_lifted(env), what="the retry of index 1 created")

        async def complete() -> dict[str, Any] | None:
            found = await env.client.get(JOBS, NAMESPACE, "indexed")
            done = any(c["type"] == "Complete" for c in found["status"].get("conditions") or [])
            return found if done else None

        found = await eventually(complete, within=30, what="the Job Complete")
        assert (found["status"]["succeeded"], found["status"]["failed"]) == (2, 1)
        status = await eventually(lambda: _phase(env, "indexed", "Succeeded"), what="the group Succeeded")
        assert _condition(status, "PodGroupSatisfied")["status"] == "True"


INDEX = "batch.kubernetes.io/job-completion-index"


async def _gates_lifted(env: Env) -> bool:
    """Lift the gate of every pod of the Job (its retries are made from the gated template too);
    true once a third pod (the retry of index 1) exists."""
    pods = await env.pods("indexed")
    for member in pods:
        if member["spec"].get("schedulingGates"):
            ungate = {"spec": {"schedulingGates": None}}
            await env.client.patch(PODS, NAMESPACE, member["metadata"]["name"], ungate, PatchType.MERGE)
    return len(pods) >= 3


async def _exactly(pods: Any, count: int) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = await pods
    return items if len(items) == count else None


async def _phase(env: Env, name: str, phase: str) -> dict[str, Any] | None:
    status = await env.podgroup_status(name)
    return status if status.get("phase") == phase else None


def _member(name: str, group: str, **annotations: str) -> dict[str, Any]:
    body = pod(name, group)
    body["metadata"]["annotations"] = annotations
    body["spec"]["restartPolicy"] = "Never"
    return body


async def _counter(env: Env, result: str) -> bool:
    return bool(env.operator.metrics.stale_gang_evictions.labels(result)._value.get() >= 1)


async def _stale_events(env: Env) -> list[dict[str, Any]]:
    events = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e for e in events if e.get("reason") == "StaleGang"]


async def test_a_stale_gang_has_its_unfinished_members_evicted_and_a_budget_is_respected() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        group = podgroup("stale", 3)
        group["spec"]["staleGracePeriodSeconds"] = 1
        await env.create(group)
        await env.create(_member("s0", "stale", **{EXIT_CODE: "1", RUN_SECONDS: "0.3"}))  # fails
        await env.create(_member("s1", "stale"))
        guarded = _member("s2", "stale")
        guarded["metadata"]["labels"]["guard"] = "yes"
        await env.create(guarded)
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "guard", "namespace": NAMESPACE},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"guard": "yes"}}},
        }
        await env.client.create(PDBS, NAMESPACE, budget)
        await eventually(lambda: _satisfied(env, "stale", "False"), what="the gang below minCount")

        async def gone(name: str) -> bool:
            return name not in {p["metadata"]["name"] for p in await env.pods("stale")}

        await eventually(lambda: gone("s1"), within=10, what="s1 evicted")
        events = await eventually(lambda: _stale_events(env), what="a StaleGang event")
        assert "below minCount 3" in events[0]["message"] and events[0]["type"] == "Warning"
        s0 = await env.client.get(PODS, NAMESPACE, "s0")
        assert s0["status"]["phase"] == "Failed"  # a finished member is never evicted
        assert not any(c["type"] == "DisruptionTarget" for c in s0["status"].get("conditions") or [])

        async def refused() -> dict[str, Any] | None:
            s2 = await env.client.get(PODS, NAMESPACE, "s2")
            return s2 if _condition(s2["status"], "DisruptionTarget") else None

        s2 = await eventually(refused, what="s2 marked")  # the budget refuses (429): it stays
        marked = _condition(s2["status"], "DisruptionTarget")
        assert marked["reason"] == "StaleGang" and "PodGroup acceptance/stale" in marked["message"]
        await eventually(
            lambda: _counter(env, "refused"), what="a refused eviction counted"
        )  # retried, and refused again while the budget stands
        assert not s2["metadata"].get("deletionTimestamp")
        await env.client.delete(PDBS, NAMESPACE, "guard")
        await eventually(lambda: gone("s2"), within=10, what="s2 evicted once its budget is gone")
        assert env.operator.metrics.stale_gang_recoveries._value.get() >= 1


async def test_a_gang_whose_members_finish_one_by_one_is_never_stale() -> None:
    """KAI-Scheduler #1968: succeeded members count as satisfied, so a completing gang is left alone."""
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        group = podgroup("finishing", 3)
        group["spec"]["staleGracePeriodSeconds"] = 1
        await env.create(group)
        for index, seconds in enumerate(("0.3", "1.5", "3")):
            await env.create(_member(f"f{index}", "finishing", **{RUN_SECONDS: seconds}))
        await eventually(lambda: _phase(env, "finishing", "Succeeded"), within=15, what="every member done")
        pods = await env.pods("finishing")
        assert sorted(p["status"]["phase"] for p in pods) == ["Succeeded"] * 3
        for member in pods:
            assert not _condition(member["status"], "DisruptionTarget"), member["metadata"]["name"]
        assert await _stale_events(env) == []
        assert env.operator.metrics.stale_gang_recoveries._value.get() == 0
