"""PodGroup status writes on the happy path: a gang that binds and starts within a moment goes
straight to Running (one write), not Scheduling, Scheduled and Running in turn; a gang whose
containers are slow to start shows Scheduled, within half a second of its last binding."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import POD_GROUPS
from lockstep.kube.watch import RawWatch
from lockstep.scheduler.framework import PodInfo


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
    async with (
        simulated_cluster(nodes=2, kubelet_start_delay=0.05) as env,
        phases_written(env, "quick") as phases,
    ):
        await env.create(podgroup("quick", 4))
        for i in range(4):
            await env.create(pod(f"quick-{i}", "quick"))
        await eventually(lambda: asyncio.sleep(0, "Running" in phases), what="PodGroup quick Running")
        await asyncio.sleep(1.5)  # past the hold: nothing else is written
        assert phases[-1] == "Running"
        assert "Scheduling" not in phases, phases
        # Scheduled is held only a moment for the containers (SCHEDULED_SETTLE_SECONDS): a busy
        # machine may start them later, and then it is written first.
        assert phases[-2:] in (
            ["Running"],
            ["Pending", "Running"],
            ["Waiting", "Running"],
            ["Scheduled", "Running"],
        )
        assert env.operator.status is not None and env.operator.status.writes == len(phases)


async def test_the_status_agrees_with_the_pods_within_half_a_second_of_the_last_bind() -> None:
    """Scheduled is the truth once the gang is bound: it is not held for the 2 s settle window. Timed
    in the operator, from the last binding's 201 to the next status write (every write after it says
    scheduled 4): what the API and the watches add is not lockstep's, and on a loaded machine it made
    the lag seen through the watches vary by more than the target."""
    async with (
        simulated_cluster(nodes=2, kubelet_start_delay=3.0) as env,
        phases_written(env, "prompt") as phases,
    ):
        operator = env.operator
        assert operator.core is not None and operator.status is not None
        moments: list[tuple[str, float]] = []  # ("bound" or a write result, when), on the operator's thread
        confirm, report = operator.core.on_bound, operator.status.on_write
        assert confirm is not None and report is not None

        def on_bound(pod: PodInfo, node_name: str) -> None:
            moments.append(("bound", time.monotonic()))
            confirm(pod, node_name)

        def on_write(result: str) -> None:
            moments.append((result, time.monotonic()))
            report(result)

        operator.core.on_bound, operator.status.on_write = on_bound, on_write
        await env.create(podgroup("prompt", 4))
        for i in range(4):
            await env.create(pod(f"prompt-{i}", "prompt"))
        await eventually(lambda: asyncio.sleep(0, "Scheduled" in phases), what="PodGroup prompt Scheduled")
        status = await env.podgroup_status("prompt")
        assert status["scheduled"] == 4 and status["running"] == 0
        bound = [at for what, at in moments if what == "bound"]
        assert len(bound) == 4
        written = min(at for what, at in moments if what == "written" and at > max(bound))
        lag = written - max(bound)
        # The target is 0.2 s (SCHEDULED_SETTLE_SECONDS) and a flush; held for the settle window, as it
        # was, it is 2 s at least, however fast the machine.
        assert lag < 1.5, f"the PodGroup said scheduled 4 only {lag:.2f} s after the last bind"
        assert phases[-1] == "Scheduled"


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
