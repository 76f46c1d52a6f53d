"""A gang whose pods are still being created passes through Pending and Waiting (TooFewPods): both
are held back like Scheduling (Scheduled only for a moment), so a gang that is created, bound and
started within the settle window gets one status write and no Waiting event; a gang that stays short
of members still shows Waiting (TooFewPods) and gets its Waiting event once the window has passed."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime
from typing import Any

from acceptance_harness import NAMESPACE, eventually, pod, podgroup, simulated_cluster
from test_podgroup_status_writes import phases_written

from lockstep import POD_GROUP_LABEL
from lockstep.controller.status import (
    AttemptResult,
    AttemptSummary,
    GroupMembers,
    Hold,
    StatusWriter,
    hold_for,
    passing,
    status_changes,
)
from lockstep.kube.client import EVENTS, POD_GROUPS, ConnectionInfo, KubeClient, PatchType


async def events_of(client: KubeClient, name: str) -> list[str]:
    items = (await client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e["reason"] for e in items if e["involvedObject"]["name"] == name]


async def test_a_gang_created_member_by_member_writes_no_passing_phase_and_no_waiting_event() -> None:
    async with simulated_cluster(nodes=2) as env, phases_written(env, "arriving") as phases:
        await env.create(podgroup("arriving", 4))
        for i in range(4):
            await env.create(pod(f"arriving-{i}", "arriving"))
            await asyncio.sleep(0.1)  # the scheduler sees the gang short of members in between
        await eventually(lambda: asyncio.sleep(0, "Running" in phases), what="PodGroup arriving Running")
        await asyncio.sleep(1.5)  # past the settle window: nothing else is written
        # Scheduled is held only a moment for the containers: a busy machine may start them later.
        assert phases in (["Running"], ["Scheduled", "Running"])
        assert env.operator.status is not None and env.operator.status.writes == len(phases)
        await eventually(
            lambda: events_of(env.client, "arriving"), what="the Scheduled event of PodGroup arriving"
        )
        assert await events_of(env.client, "arriving") == ["Scheduled"]


async def test_a_gang_short_of_members_shows_waiting_and_gets_its_event_after_the_window() -> None:
    async with simulated_cluster(nodes=2) as env, phases_written(env, "short") as phases:
        await env.create(podgroup("short", 3))
        for i in range(2):
            await env.create(pod(f"short-{i}", "short"))

        async def waiting() -> dict[str, Any]:
            status = await env.podgroup_status("short")
            return status if status.get("phase") == "Waiting" else {}

        status = await eventually(waiting, what="PodGroup short Waiting")
        assert [r["reason"] for r in status["unschedulableReasons"]] == ["TooFewPods"]

        async def written() -> list[str]:  # the phases watch may deliver the write after the GET
            return list(phases)

        assert await eventually(written, within=5.0, what="the Waiting write on the watch") == ["Waiting"]
        await eventually(lambda: events_of(env.client, "short"), what="the Waiting event of PodGroup short")
        assert await events_of(env.client, "short") == ["Waiting"]


def podgroup_at(version: str, phase: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": NAMESPACE, "name": "g", "uid": "u-1", "resourceVersion": version},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        "status": {"phase": phase},
    }


async def test_a_watch_event_older_than_the_writers_own_patch_answer_is_not_taken() -> None:
    async with KubeClient(ConnectionInfo(server="http://127.0.0.1:9")) as unused:
        writer = StatusWriter(unused, GroupMembers(), attempt_of=lambda _: None)
        key = (NAMESPACE, "g")
        writer.observe_podgroup("ADDED", podgroup_at("5", ""))
        writer.podgroups[key] = podgroup_at("7", "Running")  # what the writer's patch answered
        writer.observe_podgroup("MODIFIED", podgroup_at("6", "Pending"))  # still in flight on the watch
        assert writer.podgroups[key]["metadata"]["resourceVersion"] == "7"
        writer.observe_podgroup("MODIFIED", podgroup_at("8", "Running"))
        assert writer.podgroups[key]["metadata"]["resourceVersion"] == "8"
        recreated = podgroup_at("3", "")
        recreated["metadata"]["uid"] = "u-2"  # deleted and created again: a new object, whatever its version
        writer.observe_podgroup("ADDED", recreated)
        assert writer.podgroups[key]["metadata"]["uid"] == "u-2"


def test_a_status_patch_carries_only_what_changed() -> None:
    current = {"phase": "Waiting", "total": 1, "scheduled": 0, "nextRetryTime": "2026-01-01T00:00:00Z"}
    desired = {
        "phase": "Running",
        "total": 1,
        "scheduled": 1,
        "nextRetryTime": None,
        "unschedulableReasons": None,
    }
    assert status_changes(current, desired) == {"phase": "Running", "scheduled": 1, "nextRetryTime": None}


def test_waiting_for_members_or_their_claims_is_a_passing_phase_and_other_waits_are_not() -> None:
    def waiting(*reasons: str) -> dict[str, object]:
        return {"phase": "Waiting", "unschedulableReasons": [{"reason": r, "count": 1} for r in reasons]}

    assert passing(waiting("TooFewPods"))
    assert passing(waiting("ClaimPending"))
    assert passing(waiting("TooFewPods", "ClaimPending"))
    assert not passing(waiting("ClaimPending", "InsufficientDevices"))
    assert not passing(waiting())


def test_only_phases_on_the_way_to_binding_wait_the_settle_window() -> None:
    pending = {"phase": "Pending", "total": 4, "scheduled": 0}
    # the phases the scheduler ends by itself wait longest: a backlog of gangs costs one write each
    assert hold_for({}, {"phase": "Scheduling", "total": 4, "scheduled": 2}) is Hold.BACKLOG
    assert hold_for({}, pending) is Hold.BACKLOG  # not attempted yet: waiting its turn
    errored = {
        **pending,
        "lastAttemptTime": "2026-12-02T00:00:00Z",
        "unschedulableReasons": [{"reason": "E"}],
    }
    assert hold_for({}, errored) is Hold.PASSING  # a scheduler error is no backlog
    arriving = {"phase": "Waiting", "unschedulableReasons": [{"reason": "TooFewPods", "count": 1}]}
    assert hold_for({}, arriving) is Hold.PASSING
    scheduled = {"phase": "Scheduled", "total": 4, "scheduled": 4, "running": 0}
    assert hold_for(pending, scheduled) is Hold.SCHEDULED  # a moment for the containers, no more
    assert hold_for(scheduled, {**scheduled, "running": 2}) is Hold.CONTAINERS
    running = {"phase": "Running", "total": 4, "scheduled": 4, "running": 4}
    assert hold_for(scheduled, running) is None
    unschedulable = {"phase": "Unschedulable", "unschedulableReasons": [{"reason": "ReservedForLimit"}]}
    assert hold_for(pending, unschedulable) is None
    assert hold_for({"phase": "Running", "total": 4}, {"phase": "Running", "total": 3}) is None


def test_a_confirmed_binding_counts_before_its_watch_event_and_is_never_taken_back() -> None:
    members = GroupMembers()
    unbound = {
        "metadata": {"uid": "u1", "namespace": NAMESPACE, "name": "p", "labels": {POD_GROUP_LABEL: "g"}},
        "spec": {},
        "status": {"phase": "Pending"},
    }
    members.observe("ADDED", unbound)
    assert members.bound("u1", "node-a") == (NAMESPACE, "g")
    assert members.bound("u1", "node-a") is None
    assert members.bound("unknown", "node-a") is None
    members.observe("MODIFIED", unbound)  # an event from before the binding, late on the watch
    assert members.counts((NAMESPACE, "g")).scheduled == 1


async def test_a_gang_failing_again_for_the_same_causes_gets_no_second_event() -> None:
    """One Event per group per outcome: retries that end as the last attempt did (the status carries
    their time and message) write no Event, not even a count update."""
    async with simulated_cluster(nodes=2) as env:
        await env.create(podgroup("crowded", 5))
        for i in range(5):  # two fit on each node: minCount 5 never does
            await env.create(pod(f"crowded-{i}", "crowded", cpu="12"))
        await eventually(lambda: events_of(env.client, "crowded"), what="the FailedScheduling event")
        core = env.operator.core
        assert core is not None
        key = next(k for k in core.scheduler.attempts if k.name == "crowded")
        first = core.scheduler.attempts[key].timestamp
        for retry in range(2):  # a PodGroup update wakes the group: tried again, same causes
            await env.client.patch(
                POD_GROUPS,
                NAMESPACE,
                "crowded",
                {"metadata": {"labels": {"retry": str(retry)}}},
                PatchType.MERGE,
            )

            async def tried_again(since: float = first) -> bool:
                return core.scheduler.attempts[key].timestamp > since

            await eventually(tried_again, what="another attempt of PodGroup crowded")
            first = core.scheduler.attempts[key].timestamp
        assert "Insufficient cpu" in core.scheduler.attempts[key].message
        await asyncio.sleep(0.5)  # the event writers are asynchronous
        items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
        mine = [e for e in items if e["involvedObject"]["name"] == "crowded"]
        assert [(e["reason"], e["count"]) for e in mine] == [("FailedScheduling", 1)]


async def test_the_shutdown_flush_does_not_wait_out_the_interval_that_merges_writes() -> None:
    """The interval that lets a burst of marks go out as one write per group is for a running
    leader; at shutdown it only delayed each batch of the flush (SIGTERM -> exit)."""
    async with simulated_cluster(nodes=1, devices_per_node=0, start_operator=False) as env:
        created = await env.client.create(POD_GROUPS, NAMESPACE, podgroup("g", 2))
        failed = AttemptSummary(AttemptResult.UNSCHEDULABLE, "0/1 nodes are available", datetime.now(UTC))
        writer = StatusWriter(env.client, GroupMembers(), attempt_of=lambda _: failed, flush_interval=60.0)
        task = asyncio.create_task(writer.run())
        try:
            writer.observe_podgroup("ADDED", created)  # the writer now waits out its interval
            await asyncio.sleep(0.1)
            await asyncio.wait_for(writer.flush(), 10)
            written = await env.client.get(POD_GROUPS, NAMESPACE, "g")
            assert written["status"]["phase"] == "Unschedulable"
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
