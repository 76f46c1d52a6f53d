"""PodGroup protection: a lockstep PodGroup gets ``scheduling.lockstep.dev/podgroup-protection`` before
its first member binds, so deleting it leaves it Terminating, its PodGroup-level claim allocated and
reserved, while its bound members run; nothing more of it is scheduled. Upstream PodGroups (whose
finalizer the API server adds) are held to the same: no new member bound, no claim released while
they terminate. Against the emulator, with the operator running."""

from __future__ import annotations

import asyncio
from typing import Any

from acceptance_harness import (
    GPU_TEMPLATE,
    NAMESPACE,
    Env,
    PodEvents,
    eventually,
    pod,
    podgroup,
    simulated_cluster,
)

from lockstep.api.podgroup import PROTECTION_FINALIZER
from lockstep.kube.client import (
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIMS,
    UPSTREAM_POD_GROUPS,
    ApiError,
    ResourceKind,
)
from lockstep.sim.faults import FaultRule
from lockstep.sim.invariants import check_devices_allocated_once, fetch_cluster_state

TEMPLATE_CLAIM = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
FINALIZER_WRITE = "patch podgroups"  # the request stats' key of a PodGroup's metadata patch


async def gone(env: Env, kind: ResourceKind, name: str) -> bool:
    try:
        await env.client.get(kind, NAMESPACE, name)
    except ApiError as exc:
        return exc.not_found
    return False


async def group_claim(env: Env, group: str, kind: ResourceKind = POD_GROUPS) -> dict[str, Any]:
    """The claim generated for the group's one ``spec.resourceClaims`` entry."""
    status = (await env.client.get(kind, NAMESPACE, group)).get("status") or {}
    statuses = status.get("resourceClaimStatuses") or []
    name = statuses[0].get("resourceClaimName") if statuses else None
    return await env.claim(name) if name else {}


async def scheduled_false(env: Env, name: str) -> dict[str, Any]:
    raw = await env.client.get(PODS, NAMESPACE, name)
    conditions = (raw.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), {})


async def devices_allocated_once(env: Env) -> None:
    async with env.cluster_session() as (session, url):
        state = await fetch_cluster_state(session, url)
    assert check_devices_allocated_once(state.claims) == []


async def test_a_deleted_podgroup_keeps_its_device_until_its_pods_are_gone_then_another_gang_binds() -> None:
    # One node with ONE device: gang B's PodGroup claim can only get it once gang A's is released.
    async with simulated_cluster(nodes=1, devices_per_node=1) as env, PodEvents(env.client) as events:
        await env.create(GPU_TEMPLATE)
        await env.create(podgroup("a", 2, claims=TEMPLATE_CLAIM))
        for i in range(2):
            await env.create(pod(f"a-{i}", "a", cpu="100m"))
        await eventually(lambda: _equals(env.bound("a"), 2), what="gang A bound")
        a = await env.client.get(POD_GROUPS, NAMESPACE, "a")
        assert a["metadata"]["finalizers"] == [PROTECTION_FINALIZER]
        a_claim = await group_claim(env, "a")
        assert a_claim["status"]["allocation"]
        assert [r["uid"] for r in a_claim["status"]["reservedFor"]] == [a["metadata"]["uid"]]

        await env.client.delete(POD_GROUPS, NAMESPACE, "a")  # what `kubectl delete lpg a` sends
        await env.create(podgroup("b", 2, claims=TEMPLATE_CLAIM))
        for i in range(2):
            await env.create(pod(f"b-{i}", "b", cpu="100m"))
        await eventually(lambda: group_claim(env, "b"), what="gang B's claim created")
        for _ in range(15):  # 3 s: gang B would have bound within a fraction of that before the fix
            terminating = await env.client.get(POD_GROUPS, NAMESPACE, "a")
            assert terminating["metadata"].get("deletionTimestamp")
            held = await env.claim(a_claim["metadata"]["name"])
            assert held["status"]["allocation"], "the deleted PodGroup's claim was released under its pods"
            assert [r["uid"] for r in held["status"]["reservedFor"]] == [a["metadata"]["uid"]]
            assert await env.bound("b") == 0, "gang B was bound to the device gang A still holds"
            await devices_allocated_once(env)
            await asyncio.sleep(0.2)

        for i in range(2):
            await env.client.delete(PODS, NAMESPACE, f"a-{i}")
        await eventually(
            lambda: gone(env, POD_GROUPS, "a"), what="PodGroup A finalized once its pods were gone"
        )

        async def a_claim_released() -> bool:
            try:
                released = await env.claim(a_claim["metadata"]["name"])
            except ApiError as exc:
                return exc.not_found  # released, then garbage-collected with its PodGroup
            return not (released.get("status") or {}).get("allocation")

        await eventually(a_claim_released, what="gang A's claim released")
        await eventually(lambda: _equals(env.bound("b"), 2), what="gang B bound to the freed device")
        await devices_allocated_once(env)
        assert events.violations() == []
        assert await env.invariant_violations() == []


async def test_a_pending_member_of_a_terminating_podgroup_is_not_bound_and_its_condition_says_why() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        await env.create(podgroup("a", 1))
        await env.create(pod("a-0", "a", cpu="100m"))
        await eventually(lambda: _equals(env.bound("a"), 1), what="the first member bound")
        await env.client.delete(POD_GROUPS, NAMESPACE, "a")
        await env.create(pod("a-1", "a", cpu="100m"))

        condition = await eventually(lambda: scheduled_false(env, "a-1"), what="PodScheduled=False on a-1")
        assert condition["reason"] == "Unschedulable"
        assert condition["message"] == (
            f"PodGroup {NAMESPACE}/a is being deleted: no more of its pods are scheduled"
        )
        await asyncio.sleep(1.0)  # several backoff periods of the operator under test
        assert not (await env.client.get(PODS, NAMESPACE, "a-1"))["spec"].get("nodeName")
        # a-0 still runs: the PodGroup stays
        assert (await env.client.get(POD_GROUPS, NAMESPACE, "a"))["metadata"]["deletionTimestamp"]


async def test_the_finalizer_costs_one_write_per_group_and_none_once_it_is_there() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        stats = env.cluster.server.request_stats
        # The first finalizer write loses a race (409): it is re-read and written again.
        env.cluster.server.faults.add(
            FaultRule(verb="patch", resource="podgroups", subresource="", name="big", status=409, count=1)
        )
        await env.create(podgroup("big", 4))
        for i in range(4):
            await env.create(pod(f"big-{i}", "big", cpu="100m"))
        await eventually(lambda: _equals(env.bound("big"), 4), what="the gang of 4 bound")
        assert (await env.client.get(POD_GROUPS, NAMESPACE, "big"))["metadata"]["finalizers"] == [
            PROTECTION_FINALIZER
        ]
        assert stats.snapshot().get(FINALIZER_WRITE) == 2  # the refused one and its retry, for 4 pods

        await env.create(pod("big-4", "big", cpu="100m"))  # a later member: the finalizer is there
        await eventually(lambda: _equals(env.bound("big"), 5), what="the fifth member bound")
        assert stats.snapshot().get(FINALIZER_WRITE) == 2


async def test_a_gang_whose_finalizer_cannot_be_written_is_not_bound_and_says_why() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        refusal = env.cluster.server.faults.add(
            FaultRule(verb="patch", resource="podgroups", subresource="", name="team", status=500)
        )
        await env.create(podgroup("team", 2))
        for i in range(2):
            await env.create(pod(f"team-{i}", "team", cpu="100m"))

        condition = await eventually(lambda: scheduled_false(env, "team-0"), what="PodScheduled=False")
        assert f"could not add the finalizer {PROTECTION_FINALIZER}" in condition["message"]
        assert f"PodGroup {NAMESPACE}/team" in condition["message"]
        assert await env.bound("team") == 0

        env.cluster.server.faults.remove(refusal.id)
        await eventually(
            lambda: _equals(env.bound("team"), 2), what="the gang bound once the write goes through"
        )


async def test_a_terminating_upstream_podgroup_keeps_its_claim_and_binds_no_new_member() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        await env.create(GPU_TEMPLATE)
        await env.client.create(
            UPSTREAM_POD_GROUPS,
            NAMESPACE,
            {
                "apiVersion": UPSTREAM_POD_GROUPS.api_version,
                "kind": "PodGroup",
                "metadata": {"name": "up", "namespace": NAMESPACE},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "resourceClaims": TEMPLATE_CLAIM},
            },
        )
        for i in range(2):
            await env.client.create(PODS, NAMESPACE, upstream_member(f"up-{i}", "up"))
        await eventually(lambda: _equals(bound_named(env, "up"), 2), what="the upstream gang bound")
        uid = (await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "up"))["metadata"]["uid"]
        up_claim = await group_claim(env, "up", UPSTREAM_POD_GROUPS)
        assert [r["uid"] for r in up_claim["status"]["reservedFor"]] == [uid]

        await env.client.delete(UPSTREAM_POD_GROUPS, NAMESPACE, "up")
        await env.client.create(PODS, NAMESPACE, upstream_member("up-2", "up"))
        condition = await eventually(lambda: scheduled_false(env, "up-2"), what="PodScheduled=False on up-2")
        assert f"PodGroup {NAMESPACE}/up is being deleted" in condition["message"]
        for _ in range(10):
            assert (await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "up"))["metadata"][
                "deletionTimestamp"
            ]
            held = await env.claim(up_claim["metadata"]["name"])
            assert held["status"]["allocation"], "the terminating upstream PodGroup's claim was released"
            assert [r["uid"] for r in held["status"]["reservedFor"]] == [uid]
            assert not (await env.client.get(PODS, NAMESPACE, "up-2"))["spec"].get("nodeName")
            await asyncio.sleep(0.2)

        for i in range(3):
            await env.client.delete(PODS, NAMESPACE, f"up-{i}")
        await eventually(lambda: gone(env, UPSTREAM_POD_GROUPS, "up"), what="the upstream PodGroup gone")

        async def released() -> bool:
            try:
                claim = await env.claim(up_claim["metadata"]["name"])
            except ApiError as exc:
                return exc.not_found
            return not (claim.get("status") or {}).get("allocation")

        await eventually(released, what="the upstream PodGroup's claim released once it was gone")
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE)).get("items") or []
        assert all(not (c.get("status") or {}).get("allocation") for c in claims)


async def bound_named(env: Env, prefix: str) -> int:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return sum(
        1 for p in pods if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
    )


def upstream_member(name: str, group: str) -> dict[str, Any]:
    member = pod(name, cpu="100m")
    member["spec"]["schedulingGroup"] = {"podGroupName": group}
    return member


async def _equals(value: Any, expected: Any) -> bool:
    return await value == expected
