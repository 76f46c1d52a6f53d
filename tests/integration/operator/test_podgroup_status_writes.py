"""PodGroup status writes on the happy path: a gang that binds and starts within a moment goes
straight to Running (one write), not Scheduling, Scheduled and Running in turn; a gang whose
containers are slow to start still shows Scheduled while it waits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import POD_GROUPS
from lockstep.kube.watch import RawWatch


@contextlib.asynccontextmanager
async def phases_written(env: Env, group: str) -> AsyncIterator[list[str]]:
    """Every status phase the API shows for PodGroup ``group``, in order, as the watch sees it."""
    phases: list[str] = []

    def observe(event_type: str, body: dict[str, Any]) -> None:
        phase = (body.get("status") or {}).get("phase")
        if body["metadata"]["name"] == group and phase and (not phases or phases[-1] != phase):
            phases.append(phase)

    synced = asyncio.Event()
    watch = RawWatch(env.client, POD_GROUPS, observe, namespace=NAMESPACE, on_synced=synced.set)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(synced.wait(), 10)
        yield phases
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_gang_that_binds_and_runs_at_once_skips_the_passing_phases() -> None:
    # Containers start 0.9 s after binding: past the writer's 0.5 s flush, within its settle window.
    async with (
        simulated_cluster(nodes=2, kubelet_start_delay=0.9) as env,
        phases_written(env, "quick") as phases,
    ):
        await env.create(podgroup("quick", 4))
        for i in range(4):
            await env.create(pod(f"quick-{i}", "quick"))
        await eventually(lambda: asyncio.sleep(0, "Running" in phases), what="PodGroup quick Running")
        await asyncio.sleep(1.5)  # past the hold: nothing else is written
        assert phases[-1] == "Running"
        assert not {"Scheduling", "Scheduled"} & set(phases), phases
        # Before the pods arrived the group may have said Pending or Waiting: one write each at most.
        assert env.operator.status is not None and env.operator.status.writes == len(phases)


async def test_a_gang_slow_to_start_shows_scheduled_while_it_waits() -> None:
    async with (
        simulated_cluster(nodes=2, kubelet_start_delay=3.0) as env,
        phases_written(env, "slow") as phases,
    ):
        await env.create(podgroup("slow", 4))
        for i in range(4):
            await env.create(pod(f"slow-{i}", "slow"))
        await eventually(lambda: asyncio.sleep(0, "Scheduled" in phases), what="PodGroup slow Scheduled")
        status = await env.podgroup_status("slow")
        assert status["scheduled"] == 4 and status["running"] == 0
        await eventually(lambda: asyncio.sleep(0, "Running" in phases), what="PodGroup slow Running")
        assert phases[-2:] == ["Scheduled", "Running"]
