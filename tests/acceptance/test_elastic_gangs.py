"""Elastic gangs on the emulator with the operator running: gang.minCount is mutable (Kubernetes 1.37).

One node of 31.5 allocatable cpu; lone "blocker" pods hold capacity and are deleted to free it.
Members beyond minCount bind one by one as capacity frees; a raised minCount waits until the whole
difference fits; a lowered one lets a backed-off group proceed at once; the status counts the
members waiting beyond minCount (an upstream PodGroup in its condition message); switching between
basic and gang is refused by the API.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from acceptance_harness import (
    NAMESPACE,
    Env,
    eventually,
    operator_settings,
    pod,
    podgroup,
    simulated_cluster,
)

from lockstep.kube.client import POD_GROUPS, PODS, UPSTREAM_POD_GROUPS, ApiError, PatchType


async def _set_min_count(env: Env, name: str, min_count: int) -> None:
    body = {"spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}}}
    await env.client.patch(POD_GROUPS, NAMESPACE, name, body, PatchType.MERGE)


async def _bound_pods(env: Env, group: str) -> dict[str, tuple[str, str]]:
    """name -> (uid, nodeName) of the group's bound members."""
    return {
        p["metadata"]["name"]: (p["metadata"]["uid"], p["spec"]["nodeName"])
        for p in await env.pods(group)
        if p["spec"].get("nodeName")
    }


async def _bound_count(env: Env, group: str, count: int) -> dict[str, tuple[str, str]] | None:
    bound = await _bound_pods(env, group)
    return bound if len(bound) == count else None


async def _blocker(env: Env, name: str, cpu: str) -> None:
    await env.create(pod(name, cpu=cpu))
    await eventually(lambda: _lone_bound(env, name), what=f"{name} bound")


async def _lone_bound(env: Env, name: str) -> bool:
    return bool((await env.client.get(PODS, NAMESPACE, name))["spec"].get("nodeName"))


async def _status_where(env: Env, name: str, **wanted: Any) -> dict[str, Any] | None:
    status = await env.podgroup_status(name)
    return status if all(status.get(k) == v for k, v in wanted.items()) else None


def _condition(status: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")


async def test_members_beyond_min_count_bind_as_capacity_frees_without_disturbing_the_bound() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        await _blocker(env, "blocker", "7")
        await env.create(podgroup("elastic", 3))
        for i in range(5):
            await env.create(pod(f"elastic-{i}", "elastic", cpu="7"))
        first = await eventually(lambda: _bound_count(env, "elastic", 3), what="minCount members bound")
        status = await eventually(
            lambda: _status_where(env, "elastic", scheduled=3, waitingBeyondMinCount=2),
            what="status counting 2 members beyond minCount",
        )
        assert _condition(status)["status"] == "True"
        assert "2 members beyond minCount waiting" in _condition(status)["message"]

        await env.client.delete(PODS, NAMESPACE, "blocker")  # room for one more member
        second = await eventually(lambda: _bound_count(env, "elastic", 4), what="a fourth member bound")
        assert {name: second[name] for name in first} == first  # same pods, same nodes
        await eventually(
            lambda: _status_where(env, "elastic", scheduled=4, waitingBeyondMinCount=1),
            what="status counting 1 member beyond minCount",
        )
        await asyncio.sleep(1.0)
        assert await _bound_pods(env, "elastic") == second  # the fifth still does not fit
        assert await env.invariant_violations() == []


async def test_a_raised_min_count_waits_for_the_whole_difference_then_binds_it() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        await _blocker(env, "blocker-a", "7")
        await _blocker(env, "blocker-b", "7")
        await env.create(podgroup("scaled", 2))
        for i in range(2):
            await env.create(pod(f"scaled-{i}", "scaled", cpu="7"))
        bound = await eventually(lambda: _bound_count(env, "scaled", 2), what="the first 2 bound")
        await eventually(lambda: _status_where(env, "scaled", phase="Running"), what="the gang Running")

        await _set_min_count(env, "scaled", 4)
        for i in range(2, 4):
            await env.create(pod(f"scaled-{i}", "scaled", cpu="7"))
        waiting = await eventually(
            lambda: _status_where(env, "scaled", phase="Unschedulable", observedGeneration=2),
            what="the raised gang Unschedulable",
        )
        assert _condition(waiting)["status"] == "True"  # once True it stays True, as upstream
        assert _condition(waiting)["message"].startswith("2 of 4 pods bound (minCount 4)")
        assert waiting["waitingBeyondMinCount"] == 0

        await env.client.delete(PODS, NAMESPACE, "blocker-a")  # room for one of the two missing
        await asyncio.sleep(1.5)  # several retries (backoff 0.2 s to 1 s)
        assert await _bound_pods(env, "scaled") == bound

        await env.client.delete(PODS, NAMESPACE, "blocker-b")  # room for both
        now = await eventually(lambda: _bound_count(env, "scaled", 4), what="the difference bound together")
        assert {name: now[name] for name in bound} == bound
        await eventually(
            lambda: _status_where(env, "scaled", phase="Running", scheduled=4), what="the gang Running again"
        )


async def test_a_lowered_min_count_lets_a_backed_off_gang_proceed_at_once() -> None:
    slow_retries = operator_settings(backoff_initial_seconds=30.0, backoff_max_seconds=60.0)
    async with simulated_cluster(nodes=1, devices_per_node=0, settings=slow_retries) as env:
        await _blocker(env, "blocker", "6500m")
        await env.create(podgroup("shrunk", 2))
        for i in range(2):
            await env.create(pod(f"shrunk-{i}", "shrunk", cpu="5"))
        await eventually(lambda: _bound_count(env, "shrunk", 2), what="the first 2 bound")
        await _set_min_count(env, "shrunk", 6)
        for i in range(2, 6):  # 15 cpu left: 3 of the 4 fit, minCount 6 cannot be met
            await env.create(pod(f"shrunk-{i}", "shrunk", cpu="5"))
        status = await eventually(
            lambda: _status_where(env, "shrunk", phase="Unschedulable"), what="minCount 6 Unschedulable"
        )
        assert status["nextRetryTime"]  # backing off for 30 s

        await _set_min_count(env, "shrunk", 3)
        await eventually(lambda: _bound_count(env, "shrunk", 5), within=5.0, what="5 bound well before 30 s")
        await eventually(
            lambda: _status_where(env, "shrunk", scheduled=5, waitingBeyondMinCount=1),
            what="1 member beyond minCount waiting",
        )


async def _upstream_condition(env: Env, name: str, wanted: str) -> dict[str, Any] | None:
    """The PodGroup once its scheduling condition says ``wanted`` and its two members run (their
    PodGroupSatisfied=True is a write of its own, not one per retry)."""
    group = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, name)
    conditions = {c["type"]: c for c in (group.get("status") or {}).get("conditions") or []}
    scheduled = conditions.get("PodGroupInitiallyScheduled", {})
    satisfied = conditions.get("PodGroupSatisfied", {}).get("status") == "True"
    return group if satisfied and wanted in scheduled.get("message", "") else None


async def test_an_upstream_gang_names_members_beyond_min_count_in_its_condition_not_per_retry() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        group = {
            "apiVersion": UPSTREAM_POD_GROUPS.api_version,
            "kind": "PodGroup",
            "metadata": {"name": "upstream", "namespace": NAMESPACE},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        }
        await env.client.create(UPSTREAM_POD_GROUPS, NAMESPACE, group)
        for i in range(3):  # 12 cpu each: two fit on the node's 31.5
            member = pod(f"upstream-{i}", cpu="12")
            member["spec"]["schedulingGroup"] = {"podGroupName": "upstream"}
            await env.create(member)
        # The placing attempt says "2 pods placed, ..."; the first retry, which places nothing, says
        # "minCount (2) met with 2 scheduled; 1 members beyond minCount wait (...)": one more write.
        written = await eventually(
            lambda: _upstream_condition(
                env, "upstream", "met with 2 scheduled; 1 members beyond minCount wait"
            ),
            what="PodGroupInitiallyScheduled naming the member beyond minCount",
        )
        conditions = written["status"]["conditions"]
        condition = next(c for c in conditions if c["type"] == "PodGroupInitiallyScheduled")
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
        await asyncio.sleep(1.5)  # further retries of the third member (backoff 0.2 s to 1 s) write nothing
        again = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "upstream")
        assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


@pytest.mark.parametrize(
    ("created", "patch"),
    [
        ({"basic": {}}, {"basic": None, "gang": {"minCount": 2}}),
        ({"gang": {"minCount": 2}}, {"gang": None, "basic": {}}),
    ],
    ids=["basic-to-gang", "gang-to-basic"],
)
async def test_switching_between_basic_and_gang_is_refused(
    created: dict[str, Any], patch: dict[str, Any]
) -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0, start_operator=False) as env:
        group = podgroup("fixed", 2)
        group["spec"]["schedulingPolicy"] = created
        await env.create(group)
        body = {"spec": {"schedulingPolicy": patch}}
        with pytest.raises(ApiError) as refused:
            await env.client.patch(POD_GROUPS, NAMESPACE, "fixed", body, PatchType.MERGE)
        assert refused.value.status == 422
        assert "spec.schedulingPolicy: Invalid value" in refused.value.api_message
        assert "cannot switch between basic and gang" in refused.value.api_message
        stored = await env.client.get(POD_GROUPS, NAMESPACE, "fixed")
        assert stored["spec"]["schedulingPolicy"] == created
