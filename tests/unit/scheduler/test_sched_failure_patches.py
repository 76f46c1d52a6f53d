"""PodScheduled=False is written only when it says something new: an equivalent condition (same
status and reason, a message differing at most in counts; any Waiting for Waiting) is not rewritten,
and a write still in flight is not repeated."""

from __future__ import annotations

import asyncio

from sched_helpers import make_pod, make_scheduler

from lockstep.scheduler.framework import PodCondition


async def test_a_message_that_differs_only_in_counts_is_not_written_again() -> None:
    scheduler, api, cache = make_scheduler()
    pod = api.add(make_pod("p"))
    await scheduler.report_unschedulable(pod, "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu")
    await asyncio.sleep(0)  # the echo reaches the cache
    pod = cache.get_pod(pod.uid) or pod
    await scheduler.report_unschedulable(pod, "Unschedulable", "0/5 nodes are available: 5 Insufficient cpu")
    assert len(api.patch_calls) == 1
    await scheduler.report_unschedulable(pod, "Unschedulable", "0/5 nodes are available: 5 node(s) tainted")
    assert len(api.patch_calls) == 2
    await asyncio.sleep(0)
    assert cache.get_pod(pod.uid).scheduled_condition == PodCondition(  # type: ignore[union-attr]
        "False", "Unschedulable", "0/5 nodes are available: 5 node(s) tainted"
    )


async def test_a_pod_waiting_for_its_claim_gets_one_waiting_condition() -> None:
    scheduler, api, _cache = make_scheduler()
    pod = api.add(make_pod("p"))
    await scheduler.report_unschedulable(
        pod, "Waiting", "pod default/p: ResourceClaim for gpu not created yet"
    )
    await asyncio.sleep(0)
    await scheduler.report_unschedulable(
        pod, "Waiting", "waiting for ResourceClaim default/p-gpu-x7k2q (template gpu) to appear"
    )
    assert [reason for _, _, reason in api.patch_calls] == ["Waiting"]
    await scheduler.report_unschedulable(pod, "Unschedulable", "0/3 nodes are available")
    assert [reason for _, _, reason in api.patch_calls] == ["Waiting", "Unschedulable"]


async def test_an_equivalent_write_in_flight_is_not_repeated() -> None:
    scheduler, api, _cache = make_scheduler()
    pod = api.add(make_pod("p"))
    api.echo = False  # the watch is slow: the cache does not show the first write yet
    release = asyncio.Event()
    api.inject_patch.append(release.wait)
    first = asyncio.create_task(scheduler.report_unschedulable(pod, "Unschedulable", "2 pods did not fit"))
    await asyncio.sleep(0)
    await scheduler.report_unschedulable(pod, "Unschedulable", "3 pods did not fit")
    release.set()
    await first
    assert len(api.patch_calls) == 1
