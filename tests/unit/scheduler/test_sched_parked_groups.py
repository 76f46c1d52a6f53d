"""A group no retry can help (a member larger than every node) is parked without a timer while other
gangs bind and run: only an event that could help it (a node added or grown, a change to its own pods
or PodGroup) brings it back."""

from __future__ import annotations

import dataclasses

from sched_helpers import FakeClock, MemoryPodAPI, gang, make_node, make_pod, make_scheduler, settle

from lockstep.scheduler.framework import GroupKey
from lockstep.scheduler.queue import GroupState
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

OVERSIZED = GroupKey("default", "oversized")
SHORT = GroupKey("default", "short")


def _attempts(scheduler: Scheduler, key: GroupKey) -> int:
    attempt = scheduler.attempts.get(key)
    return attempt.attempt if attempt is not None else 0


def _cluster() -> tuple[Scheduler, MemoryPodAPI, ClusterCache, FakeClock]:
    clock = FakeClock()
    scheduler, api, cache = make_scheduler(clock=clock)
    for i in range(4):
        cache.upsert_node(make_node(f"n{i}", cpu="4"))
    cache.upsert_podgroup(gang("oversized", 4))
    for i in range(3):
        api.add(make_pod(f"o{i}", cpu="1", group="oversized"))
    api.add(make_pod("o3", cpu="16", group="oversized"))  # larger than every node
    cache.upsert_podgroup(gang("short", 4))
    for i in range(3):
        api.add(make_pod(f"s{i}", cpu="1", group="short"))
    return scheduler, api, cache, clock


async def _run_a_gang(scheduler: Scheduler, api: MemoryPodAPI, clock: FakeClock, name: str) -> None:
    """Another gang arrives, binds, its pods start running, and later finish and are deleted."""
    scheduler.cache.upsert_podgroup(gang(name, 2))
    for i in range(2):
        api.add(make_pod(f"{name}-{i}", cpu="1", group=name))
    await settle(scheduler)
    for i in range(2):
        stored = api.pods[f"default/{name}-{i}"]
        assert stored.node_name, "the feasible gang binds"
        running = dataclasses.replace(
            stored, phase="Running", resource_version=str(int(stored.resource_version) + 1)
        )
        api.pods[stored.key] = running
        scheduler.cache.upsert_pod(running)
    clock.advance(1.5)
    await settle(scheduler)


async def test_a_group_no_retry_can_help_is_parked_without_a_timer_while_other_gangs_run() -> None:
    scheduler, api, _cache, clock = _cluster()
    await settle(scheduler)
    assert _attempts(scheduler, OVERSIZED) == 1
    assert _attempts(scheduler, SHORT) == 1
    # o3 is larger than every node (UnschedulableAndUnresolvable everywhere): no timed retry.
    assert scheduler.queue.state(OVERSIZED) is GroupState.PARKED
    assert scheduler.queue.ready_at(OVERSIZED) is None and scheduler.queue.parked() == 1
    attempt = scheduler.attempts[OVERSIZED]
    assert attempt.next_retry_at is None
    assert attempt.message.endswith(
        "parked (no timed retry) until the group's pods or PodGroup change, or a node is added, "
        "or a node changes"
    )
    for n in range(3):
        await _run_a_gang(scheduler, api, clock, f"fits-{n}")  # pods bind, run, finish
    clock.advance(600)  # far past any backoff
    await settle(scheduler)
    assert _attempts(scheduler, OVERSIZED) == 1
    assert _attempts(scheduler, SHORT) == 1  # gated until a member arrives or minCount is lowered


async def test_a_parked_group_comes_back_when_its_own_pods_change() -> None:
    scheduler, api, _cache, clock = _cluster()
    await settle(scheduler)
    clock.advance(1.0)
    api.add(dataclasses.replace(api.pods["default/o3"], requests={"cpu": 1000}))  # resized to fit
    await settle(scheduler)
    assert _attempts(scheduler, OVERSIZED) == 2
    assert all(api.pods[f"default/o{i}"].node_name for i in range(4))


async def test_a_parked_group_comes_back_when_a_node_that_could_fit_it_is_added() -> None:
    scheduler, api, cache, clock = _cluster()
    await settle(scheduler)
    clock.advance(1.0)
    cache.upsert_node(make_node("big", cpu="32"))
    await settle(scheduler)
    assert _attempts(scheduler, OVERSIZED) == 2
    assert all(api.pods[f"default/o{i}"].node_name for i in range(4))


async def test_a_short_group_comes_back_when_its_missing_member_arrives() -> None:
    scheduler, api, _cache, _clock = _cluster()
    await settle(scheduler)
    api.add(make_pod("s3", cpu="1", group="short"))
    await settle(scheduler)
    assert all(api.pods[f"default/s{i}"].node_name for i in range(4))


async def test_a_short_group_stays_gated_when_a_member_or_its_podgroup_changes_otherwise() -> None:
    scheduler, api, cache, clock = _cluster()
    await settle(scheduler)
    member = api.pods["default/s0"]
    api.add(dataclasses.replace(member, requests={"cpu": 2000}))  # a scheduling field changed
    cache.upsert_podgroup(gang("short", 4, timeout=60.0))  # updated, minCount unchanged
    cache.upsert_podgroup(gang("short", 5))  # minCount raised
    clock.advance(100)
    await settle(scheduler)
    assert _attempts(scheduler, SHORT) == 1
    cache.upsert_podgroup(gang("short", 3))  # minCount lowered to what is there
    await settle(scheduler)
    assert _attempts(scheduler, SHORT) == 2
    assert all(api.pods[f"default/s{i}"].node_name for i in range(3))
