"""What a graceful stop leaves in the API when binding cycles are under way: a gang whose bindings or
claim writes have started binds whole; a placed gang with nothing of it sent yet is withdrawn and left
pending for the next leader."""

from __future__ import annotations

import asyncio
from typing import Any

from acceptance_harness import GPU_TEMPLATE, NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import EVENTS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from lockstep.sim.faults import FaultRule

ONE_GPU = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]


async def create_gang_pods(env: Env, name: str, size: int, **pod_options: Any) -> None:
    await env.create(podgroup(name, size))
    for i in range(size):
        await env.create(pod(f"{name}-{i}", name, **pod_options))


async def scheduled_events(env: Env) -> set[str]:
    events = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return {
        e["involvedObject"]["name"]
        for e in events
        if e["involvedObject"]["kind"] == "PodGroup" and e["reason"] == "Scheduled"
    }


async def test_sigterm_withdraws_placed_gangs_with_nothing_sent_and_binds_the_started_ones_whole() -> None:
    # 12 gangs of 4 with each binding held 1 s: the 32 binding workers take 8 gangs' bindings, the
    # other 4 gangs are placed and wait for a worker (or for their PodGroup's finalizer) at the stop.
    gangs, size = 12, 4
    async with simulated_cluster(nodes=4, devices_per_node=0, kubelet_start_delay=60) as env:
        env.cluster.server.faults.add(
            FaultRule(verb="create", resource="pods", subresource="binding", latency=1.0)
        )
        for g in range(gangs):
            await create_gang_pods(env, f"g{g}", size, cpu="100m")

        def placed() -> int:
            core = env.operator.core
            assert core is not None
            return sum(1 for key in list(core.scheduler.attempts) if key.name.startswith("g"))

        async def all_placed_and_binding() -> bool:
            sent = env.cluster.server.stats().get("create pods/binding", 0)
            return placed() == gangs and sent > 0

        await eventually(all_placed_and_binding, what="every gang placed, bindings on the wire")
        assert await asyncio.to_thread(env.operators[0].stop, 30) == 0
        env.operators.clear()

        bound = {f"g{g}": await env.bound(f"g{g}") for g in range(gangs)}
        assert set(bound.values()) <= {0, size}, f"a gang bound in part: {bound}"
        withdrawn = {name for name, count in bound.items() if count == 0}
        assert withdrawn, f"every placed gang was bound before the exit: {bound}"
        assert len(withdrawn) < gangs, "the gangs whose bindings were on the wire were not finished"
        for name in withdrawn:
            status = await env.podgroup_status(name)
            assert status.get("phase") in (None, "Pending"), f"{name}: {status}"
        assert await env.invariant_violations() == []

        # The next leader finds them pending and binds them.
        env.cluster.server.faults.clear()
        await env.start_operator()
        for name in withdrawn:
            await eventually(lambda name=name: _bound_whole(env, name, size), what=f"{name} bound")
        await eventually(lambda: _all_announced(env, withdrawn), what="Scheduled Events of the withdrawn")
        assert await env.invariant_violations() == []


async def test_sigterm_finishes_a_gang_whose_claim_writes_have_started() -> None:
    """Its claims are allocated and reserved for its pods when the stop comes: a next leader could only
    place those pods on the allocations' nodes, so the gang is bound whole rather than left half written."""
    size = 4
    async with simulated_cluster(nodes=4, devices_per_node=2, kubelet_start_delay=60) as env:
        await env.client.create(RESOURCE_CLAIM_TEMPLATES, NAMESPACE, GPU_TEMPLATE)
        env.cluster.server.faults.add(
            FaultRule(verb="patch", resource="resourceclaims", subresource="status", latency=1.5)
        )
        await create_gang_pods(env, "a", size, claims=ONE_GPU)

        async def claim_write_sent() -> bool:
            return env.cluster.server.stats().get("patch resourceclaims/status", 0) > 0

        await eventually(claim_write_sent, what="the first claim's allocation on the wire")
        assert await env.bound("a") == 0
        assert await asyncio.to_thread(env.operators[0].stop, 30) == 0
        env.operators.clear()

        assert await env.bound("a") == size
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE)).get("items") or []
        for member in await env.pods("a"):
            uid = member["metadata"]["uid"]
            held = [
                c
                for c in claims
                if uid in [ref["uid"] for ref in (c.get("status") or {}).get("reservedFor") or []]
            ]
            assert len(held) == 1 and held[0]["status"].get("allocation"), (member["metadata"]["name"], held)
        assert await env.invariant_violations() == []


async def _bound_whole(env: Env, name: str, size: int) -> bool:
    return await env.bound(name) == size


async def _all_announced(env: Env, names: set[str]) -> bool:
    return names <= await scheduled_events(env)
