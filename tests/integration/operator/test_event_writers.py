"""Events of different objects are written concurrently, a bounded number at a time, so a burst of
gangs scheduled together does not leave their Events queued behind one another."""

from __future__ import annotations

import asyncio
import contextlib
import time

from kube_harness import NAMESPACE

from lockstep.kube.client import EVENTS, KubeClient
from lockstep.kube.events import NORMAL, EventRecorder, ObjectReference
from lockstep.sim.apiserver import ApiServer
from lockstep.sim.faults import FaultRule

LATENCY = 0.3


def group(name: str) -> ObjectReference:
    return ObjectReference("PodGroup", NAMESPACE, name, f"uid-{name}", "scheduling.lockstep.dev/v1alpha1")


async def test_events_of_many_objects_go_out_a_bounded_number_at_a_time(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    apiserver.faults.add(FaultRule(verb="create", resource="events", latency=LATENCY))
    recorder = EventRecorder(kube, "lockstep", concurrency=4)
    task = asyncio.create_task(recorder.run())
    try:
        started = time.monotonic()
        for i in range(12):
            recorder.record(group(f"gang-{i}"), NORMAL, "Scheduled", f"placed gang-{i}")
        await recorder.flush()
        elapsed = time.monotonic() - started
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    events = (await kube.list(EVENTS, NAMESPACE))["items"]
    assert sorted(e["involvedObject"]["name"] for e in events) == sorted(f"gang-{i}" for i in range(12))
    # One writer would need 12 rounds of 0.3 s; 4 writers share the objects out 3 each, so 3 rounds
    # (no more than 4 at a time), and up to 8 for a slow machine.
    assert 3 * LATENCY <= elapsed < 8 * LATENCY, elapsed


async def test_events_of_one_object_stay_in_order_and_aggregate(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    apiserver.faults.add(FaultRule(verb="create", resource="events", latency=0.05))
    recorder = EventRecorder(kube, "lockstep", concurrency=4)
    task = asyncio.create_task(recorder.run())
    try:
        for _ in range(3):
            recorder.record(group("stuck"), NORMAL, "Waiting", "waiting for pods: 1 of minCount 2 present")
        await recorder.flush()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    [event] = (await kube.list(EVENTS, NAMESPACE))["items"]
    assert event["count"] == 3


async def test_withdrawn_events_not_yet_written_are_dropped_and_later_ones_are_not(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    apiserver.faults.add(FaultRule(verb="create", resource="events", latency=LATENCY))
    recorder = EventRecorder(kube, "lockstep", concurrency=1)
    task = asyncio.create_task(recorder.run())
    try:
        recorder.record(group("first"), NORMAL, "Scheduled", "placed first")  # on the wire at once
        recorder.record(group("withdrawn"), NORMAL, "Scheduled", "placed withdrawn")  # queued behind it
        recorder.record(group("withdrawn"), NORMAL, "Waiting", "waiting for pods")
        await asyncio.sleep(LATENCY / 3)
        recorder.withdraw_unsent(group("first"), "Scheduled")  # too late: it is being written
        recorder.withdraw_unsent(group("withdrawn"), "Scheduled")
        recorder.record(group("withdrawn"), NORMAL, "Scheduled", "placed withdrawn again")
        await recorder.flush()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    events = (await kube.list(EVENTS, NAMESPACE))["items"]
    assert sorted((e["involvedObject"]["name"], e["reason"], e["message"]) for e in events) == [
        ("first", "Scheduled", "placed first"),
        ("withdrawn", "Scheduled", "placed withdrawn again"),
        ("withdrawn", "Waiting", "waiting for pods"),
    ]
