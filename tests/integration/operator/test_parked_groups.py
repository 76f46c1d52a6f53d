"""A verdict no cluster event can change parks the group: more pods of one gang listing one claim than
``status.reservedFor`` may hold. The PodGroup says so (a reason, no nextRetryTime), the operator counts
it in ``lockstep_parked_podgroups``, it is not retried on a timer, and a change to its own PodGroup
brings it back."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
from acceptance_harness import NAMESPACE, claim, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import POD_GROUPS
from lockstep.scheduler.framework import GroupKey
from lockstep.sim.cluster import NodeShape

MEMBERS = 260  # the API allows 256 reservedFor entries


async def test_a_gang_listing_one_claim_past_the_limit_is_parked_and_says_so() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1, shape=NodeShape(pods=400)) as env:
        await env.create(claim("one"))
        await env.create(podgroup("crowd", MEMBERS))
        listing = [{"name": "gpu", "resourceClaimName": "one"}]
        for i in range(MEMBERS):
            await env.create(pod(f"crowd-{i:03d}", "crowd", cpu="10m", memory="8Mi", claims=listing))

        async def unschedulable() -> dict[str, Any]:
            status = await env.podgroup_status("crowd")
            return status if status.get("phase") == "Unschedulable" else {}

        status = await eventually(unschedulable, within=30, what="PodGroup crowd Unschedulable")
        assert "nextRetryTime" not in status
        [reason] = status["unschedulableReasons"]
        assert reason["reason"] == "ReservedForLimit"
        # A PreFilter rejection names no nodes: the plugin's own words, no "of 0 nodes", no "(, ...)".
        assert reason["message"].startswith("pod acceptance/crowd-")
        assert (
            ": PreFilter DynamicResources: ResourceClaim acceptance/one cannot be reserved"
            in reason["message"]
        )
        assert " of 0 nodes" not in reason["message"] and "(, " not in reason["message"]
        condition = next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")
        assert condition["message"].endswith(
            "parked (no timed retry) until the group's pods or PodGroup change"
        ), condition["message"]

        operator = env.operator
        key = GroupKey(NAMESPACE, "crowd")
        assert operator.core is not None
        attempts = operator.core.scheduler.attempts[key].attempt

        async def writes_settled() -> int:  # the verdict's own pod patches and Event land first
            before = env.cluster.server.request_stats.writes()
            await asyncio.sleep(0.5)
            after = env.cluster.server.request_stats.writes()
            return after if after == before else 0

        writes = await eventually(writes_settled, within=30, what="the verdict's writes to land")
        await asyncio.sleep(3.0)  # backoff 0.2 s doubling to 1 s: before, 3-4 more attempts
        assert operator.core.scheduler.attempts[key].attempt == attempts
        assert env.cluster.server.request_stats.writes() == writes  # and no pod or status write
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{operator.metrics_port}/metrics") as response,
        ):
            assert "lockstep_parked_podgroups 1.0" in await response.text()

        # Its own PodGroup changing can change the verdict: 256 members may now bind.
        crowd = await env.client.get(POD_GROUPS, NAMESPACE, "crowd")
        crowd["spec"]["schedulingPolicy"]["gang"]["minCount"] = 256
        await env.client.replace(POD_GROUPS, NAMESPACE, "crowd", crowd)

        async def all_bound() -> bool:
            return await env.bound("crowd") == 256

        await eventually(all_bound, within=30, what="256 members bound")
        assert operator.core.scheduler.attempts[key].attempt > attempts
