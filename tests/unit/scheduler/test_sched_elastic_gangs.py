"""Elastic gangs (Kubernetes 1.37 made gang.minCount mutable): members beyond minCount bind as capacity
allows without a new barrier; a raised minCount waits for the difference, all-or-nothing over it; a
lowered one lets the group go at once. Bound members are never unbound or placed again."""

from __future__ import annotations

from sched_helpers import (
    FakeClock,
    MemoryPodAPI,
    RecordingPlugin,
    gang,
    make_node,
    make_pod,
    make_scheduler,
    settle,
)

from lockstep.scheduler.framework import Code, GroupKey
from lockstep.scheduler.queue import GroupState
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

KEY = GroupKey("default", "g")


def _cluster(
    min_count: int, pods: int, node_cpu: str = "4"
) -> tuple[Scheduler, MemoryPodAPI, ClusterCache, FakeClock, RecordingPlugin]:
    clock = FakeClock()
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(clock=clock, extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu=node_cpu))
    cache.upsert_podgroup(gang("g", min_count, timeout=30))
    for i in range(pods):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    return scheduler, api, cache, clock, recorder


def _bound(api: MemoryPodAPI) -> dict[str, str]:
    return {pod.name: pod.node_name for pod in api.pods.values() if pod.node_name}


async def test_members_beyond_min_count_bind_later_one_by_one_without_touching_the_bound() -> None:
    scheduler, api, cache, clock, recorder = _cluster(min_count=3, pods=6)
    await settle(scheduler)
    first = _bound(api)
    assert len(first) == 4  # minCount together, then one more that fits on the same snapshot
    attempt = scheduler.attempts[KEY]
    assert attempt.code is Code.SUCCESS
    assert "2 members beyond minCount wait" in attempt.message

    # No capacity yet: the retry places nothing; the gang stays satisfied and says why the rest wait.
    clock.advance(1)
    await settle(scheduler)
    waiting = scheduler.attempts[KEY]
    assert waiting.code is Code.SUCCESS and waiting.placed == ()
    assert "minCount (3) met with 4 scheduled; 2 members beyond minCount wait" in waiting.message
    assert scheduler.queue.state(KEY) is GroupState.BACKOFF

    # One more pod's worth of room: exactly one extra binds, alone, with no Permit wait.
    clock.advance(1)
    cache.upsert_node(make_node("n1", cpu="1"))
    await settle(scheduler)
    second = _bound(api)
    assert len(second) == 5 and {k: second[k] for k in first} == first
    assert len(scheduler.waiting) == 0

    clock.advance(2)
    cache.upsert_node(make_node("n2", cpu="1"))
    await settle(scheduler)
    third = _bound(api)
    assert len(third) == 6 and {k: third[k] for k in second} == second
    assert sorted(name for name, _ in api.bind_calls) == sorted(api.pods)  # each pod bound once
    assert recorder.unreserved == []


async def test_raising_min_count_waits_for_the_difference_all_or_nothing() -> None:
    scheduler, api, cache, clock, recorder = _cluster(min_count=4, pods=4)
    await settle(scheduler)
    bound = _bound(api)
    assert len(bound) == 4
    api.add(make_pod("p4", cpu="1", group="g"))
    api.add(make_pod("p5", cpu="1", group="g"))
    cache.upsert_podgroup(gang("g", 6, timeout=30))
    await settle(scheduler)
    attempt = scheduler.attempts[KEY]
    assert attempt.code is Code.UNSCHEDULABLE
    assert "minCount (6) cannot be satisfied" in attempt.message

    # Room for one of the two missing members: neither is bound (all-or-nothing over the difference).
    clock.advance(1)
    cache.upsert_node(make_node("n1", cpu="1"))
    await settle(scheduler)
    assert _bound(api) == bound
    assert "p4" in recorder.unreserved or "p5" in recorder.unreserved
    assert scheduler.attempts[KEY].code is Code.UNSCHEDULABLE

    # Room for both: they bind together; the four bound members were never touched.
    clock.advance(2)
    cache.upsert_node(make_node("n2", cpu="1"))
    await settle(scheduler)
    now = _bound(api)
    assert len(now) == 6 and {k: now[k] for k in bound} == bound
    assert scheduler.attempts[KEY].code is Code.SUCCESS
    assert not set(recorder.unreserved) & set(bound)


async def test_lowering_min_count_lets_a_backed_off_gang_proceed_at_once() -> None:
    # minCount 6, 2 bound (bound under an earlier minCount 2), 4 pending of which 3 fit: unschedulable.
    scheduler, api, cache, _clock, _ = _cluster(min_count=2, pods=2, node_cpu="5")
    await settle(scheduler)
    assert len(_bound(api)) == 2
    cache.upsert_podgroup(gang("g", 6, timeout=30))
    for i in range(2, 6):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert len(_bound(api)) == 2
    assert scheduler.queue.state(KEY) is GroupState.BACKOFF
    attempts = scheduler.attempts[KEY].attempt

    cache.upsert_podgroup(gang("g", 3, timeout=30))  # no time passes: the change alone wakes it
    await settle(scheduler)
    assert scheduler.attempts[KEY].attempt == attempts + 1
    assert len(_bound(api)) == 5
    assert scheduler.attempts[KEY].code is Code.SUCCESS


async def test_lowering_min_count_wakes_a_parked_gang_at_once() -> None:
    scheduler, api, cache, _clock, _ = _cluster(min_count=3, pods=2)
    api.add(make_pod("huge", cpu="64", group="g"))  # larger than every node: parked
    await settle(scheduler)
    assert scheduler.queue.state(KEY) is GroupState.PARKED
    cache.upsert_podgroup(gang("g", 2, timeout=30))
    await settle(scheduler)
    assert set(_bound(api)) == {"p0", "p1"}


async def test_lowering_min_count_lifts_the_too_few_pods_gate_at_once() -> None:
    scheduler, api, cache, _clock, _ = _cluster(min_count=6, pods=3)
    await settle(scheduler)
    assert scheduler.attempts[KEY].causes.get("TooFewPods") == 3
    cache.upsert_podgroup(gang("g", 3, timeout=30))
    await settle(scheduler)
    assert len(_bound(api)) == 3
