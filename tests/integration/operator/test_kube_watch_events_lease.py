"""kube/: the raw list+watch loop, the aggregated event recorder and Lease leader election."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from kube_harness import NAMESPACE, pod_manifest

from lockstep.kube.client import EVENTS, LEASES, PODS, KubeClient
from lockstep.kube.events import WARNING, EventRecorder, ObjectReference
from lockstep.kube.lease import LeaderElector
from lockstep.kube.patching import loose_merge_patch, now_micro
from lockstep.kube.watch import RawWatch
from lockstep.sim.apiserver import ApiServer
from lockstep.sim.faults import FaultRule


async def eventually(predicate: Callable[[], bool], within: float = 5.0) -> None:
    async with asyncio.timeout(within):
        while not predicate():  # noqa: ASYNC110 - polling a plain callback, there is no event to wait on
            await asyncio.sleep(0.02)


async def test_raw_watch_lists_then_streams_with_the_server_side_selector(kube: KubeClient) -> None:
    await kube.create(PODS, NAMESPACE, pod_manifest("before"))
    await kube.create(PODS, NAMESPACE, pod_manifest("theirs", scheduler="default-scheduler"))
    seen: list[tuple[str, str]] = []
    synced = asyncio.Event()
    watch = RawWatch(
        kube,
        PODS,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        field_selector="spec.schedulerName=lockstep",
        on_synced=synced.set,
    )
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(synced.wait(), 5)
        assert seen == [("ADDED", "before")]
        await kube.create(PODS, NAMESPACE, pod_manifest("after"))
        await loose_merge_patch(kube, PODS, NAMESPACE, "after", {"metadata": {"labels": {"x": "1"}}})
        await kube.delete(PODS, NAMESPACE, "before")
        await eventually(lambda: ("DELETED", "before") in seen)
        # A pod's deletion is graceful: deletionTimestamp first (MODIFIED), then DELETED.
        assert seen[1:3] == [("ADDED", "after"), ("MODIFIED", "after")]
        assert seen[-1] == ("DELETED", "before")
        assert all(name != "theirs" for _, name in seen)
        assert watch.relists == 1
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_raw_watch_resumes_after_a_drop_and_relists_after_410(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    seen: list[tuple[str, str]] = []
    synced = asyncio.Event()
    watch = RawWatch(
        kube,
        PODS,
        lambda kind, obj: seen.append((kind, obj["metadata"]["name"])),
        retry_delay=0.05,
        on_synced=synced.set,
    )
    await kube.create(PODS, NAMESPACE, pod_manifest("doomed"))
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.wait_for(synced.wait(), 5)
        apiserver.drop_watches()
        await kube.create(PODS, NAMESPACE, pod_manifest("while-resuming"))
        await eventually(lambda: ("ADDED", "while-resuming") in seen)
        assert watch.relists == 1  # resumed from its resourceVersion, no new list

        # The stream ends, and before the watch is re-established (delayed by an injected latency)
        # the pod is deleted and the server forgets those events: resuming gets 410, the loop
        # re-lists and reports the pod that vanished meanwhile as DELETED.
        apiserver.faults.add(FaultRule(verb="watch", resource="pods", latency=0.5))
        apiserver.drop_watches()
        await kube.delete(PODS, NAMESPACE, "doomed")
        apiserver.compact()
        await eventually(lambda: ("DELETED", "doomed") in seen)
        assert watch.relists == 2
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_object_the_consumer_rejects_does_not_stop_the_watch(kube: KubeClient) -> None:
    seen: list[str] = []

    def picky(_: str, obj: dict[str, Any]) -> None:
        if obj["metadata"]["name"] == "poison":
            raise ValueError("cannot digest this one")
        seen.append(obj["metadata"]["name"])

    for name in ("before", "poison"):
        await kube.create(PODS, NAMESPACE, pod_manifest(name))
    synced = asyncio.Event()
    task = asyncio.create_task(RawWatch(kube, PODS, picky, on_synced=synced.set).run())
    try:
        await asyncio.wait_for(synced.wait(), 5)
        await kube.create(PODS, NAMESPACE, pod_manifest("after"))
        await eventually(lambda: "after" in seen)
        assert seen == ["before", "after"]
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def reference(name: str) -> ObjectReference:
    return ObjectReference("PodGroup", NAMESPACE, name, f"uid-{name}", "scheduling.lockstep.dev/v1alpha1")


async def list_events(kube: KubeClient) -> list[dict[str, Any]]:
    return list((await kube.list(EVENTS, NAMESPACE)).get("items") or [])


async def test_repeated_events_are_counted_not_duplicated_and_a_flood_is_capped(kube: KubeClient) -> None:
    recorder = EventRecorder(kube, "lockstep", burst=5, refill_seconds=3600, similar_limit=3)
    task = asyncio.create_task(recorder.run())
    try:
        for _ in range(3):
            recorder.record(reference("stuck"), WARNING, "FailedScheduling", "0/3 nodes are available")
        await recorder.flush()
        events = await list_events(kube)
        assert len(events) == 1
        assert events[0]["count"] == 3
        assert events[0]["involvedObject"]["name"] == "stuck"
        assert events[0]["reason"] == "FailedScheduling"

        # Different messages beyond the similarity limit collapse into one combined event.
        for i in range(4):
            recorder.record(reference("noisy"), WARNING, "FailedScheduling", f"attempt {i}")
        await recorder.flush()
        noisy = [e for e in await list_events(kube) if e["involvedObject"]["name"] == "noisy"]
        assert len(noisy) == 4
        assert sum(e["message"].startswith("(combined from similar events)") for e in noisy) == 1

        # The per-object bucket (burst 5) drops what exceeds it; other objects are unaffected.
        for _ in range(10):
            recorder.record(reference("flood"), WARNING, "FailedScheduling", "same")
        await recorder.flush()
        flood = [e for e in await list_events(kube) if e["involvedObject"]["name"] == "flood"]
        assert [e["count"] for e in flood] == [5]
        assert recorder.dropped == 5  # "stuck" and "noisy" stayed within their own buckets
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class Candidate:
    def __init__(self, kube: KubeClient, identity: str) -> None:
        self.leading = asyncio.Event()
        self.lost = asyncio.Event()
        self.elector = LeaderElector(
            kube,
            namespace=NAMESPACE,
            name="lockstep",
            identity=identity,
            lease_duration=1.0,
            renew_deadline=0.6,
            retry_period=0.1,
            on_started_leading=self.leading.set,
            on_stopped_leading=self.lost.set,
        )
        self.task = asyncio.create_task(self.elector.run())

    async def crash(self) -> None:
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task


async def test_one_leader_at_a_time_and_takeover_after_expiry_or_release(kube: KubeClient) -> None:
    first = Candidate(kube, "first")
    await asyncio.wait_for(first.leading.wait(), 5)
    second = Candidate(kube, "second")
    try:
        await asyncio.sleep(1.5)  # longer than the lease: the renewing leader keeps it
        assert not second.leading.is_set()

        loop = asyncio.get_running_loop()
        crashed_at = loop.time()
        await first.crash()  # no release: the follower must wait for the lease to expire
        await asyncio.wait_for(second.leading.wait(), 5)
        assert loop.time() - crashed_at >= 0.9

        third = Candidate(kube, "third")
        await asyncio.sleep(0.3)
        assert not third.leading.is_set()
        released_at = loop.time()
        await second.crash()
        await second.elector.release()
        await asyncio.wait_for(third.leading.wait(), 5)
        assert loop.time() - released_at < 0.9  # a released lease is taken at once
        await third.crash()
    finally:
        await first.crash()
        await second.crash()


async def test_release_after_a_renewal_whose_answer_was_lost_still_frees_the_lease(kube: KubeClient) -> None:
    """SIGTERM cancels the elector mid-renewal: the API server may have taken the write the elector
    never saw answered, so its resourceVersion is stale when it releases."""
    leader = Candidate(kube, "leader")
    await asyncio.wait_for(leader.leading.wait(), 5)
    await leader.crash()
    lease = await kube.get(LEASES, NAMESPACE, "lockstep")
    lease["spec"]["renewTime"] = now_micro()  # the renewal the cancelled elector never saw answered
    await kube.replace(LEASES, NAMESPACE, "lockstep", lease)

    await leader.elector.release()

    spec = (await kube.get(LEASES, NAMESPACE, "lockstep"))["spec"]
    assert spec["holderIdentity"] == ""
    assert not leader.elector.is_leader


async def test_release_leaves_a_lease_another_candidate_took_alone(kube: KubeClient) -> None:
    leader = Candidate(kube, "leader")
    await asyncio.wait_for(leader.leading.wait(), 5)
    await leader.crash()
    lease = await kube.get(LEASES, NAMESPACE, "lockstep")
    lease["spec"]["holderIdentity"] = "other"
    await kube.replace(LEASES, NAMESPACE, "lockstep", lease)

    await leader.elector.release()

    assert (await kube.get(LEASES, NAMESPACE, "lockstep"))["spec"]["holderIdentity"] == "other"
