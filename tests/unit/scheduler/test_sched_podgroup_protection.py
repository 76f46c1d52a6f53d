"""PodGroupProtection, the first PreBind: one finalizer write per group (none once the PodGroup shows
it), one verdict per group cycle, nothing bound when the write fails or the group is terminating;
and a terminating group's cycle tells its pending pods why and holds the group."""

from __future__ import annotations

import asyncio
import dataclasses

from sched_helpers import FakeClock, MemoryPodAPI, gang, make_node, make_pod, settle

from lockstep.config import Settings
from lockstep.scheduler.framework import Code, GroupKey, PodGroupInfo
from lockstep.scheduler.plugins.podgroup_protection import PODGROUP_API_SERVICE
from lockstep.scheduler.ports import PatchOutcome, PatchResult
from lockstep.scheduler.queue import GroupState
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

KEY = GroupKey("default", "g")


class MemoryPodGroupAPI:
    """Adds the finalizer by showing the group as protected in the cache, as the watch echo would."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.calls: list[str] = []
        self.fail_with: PatchOutcome | None = None
        self.gate: asyncio.Event | None = None  # when set, each write waits for it

    async def protect(self, group: PodGroupInfo) -> PatchOutcome:
        self.calls.append(group.name)
        if self.gate is not None:
            await self.gate.wait()
        if self.fail_with is not None:
            return self.fail_with
        current = self.cache.podgroup(group.key)
        if current is not None:
            self.cache.upsert_podgroup(dataclasses.replace(current, protected=True))
        return PatchOutcome(PatchResult.OK)


def protected_scheduler() -> tuple[Scheduler, MemoryPodAPI, MemoryPodGroupAPI, ClusterCache]:
    settings = Settings(leader_elect=False)
    cache = ClusterCache(settings.scheduler_name)
    api = MemoryPodAPI(cache)
    groups = MemoryPodGroupAPI(cache)
    scheduler = Scheduler(
        settings, api, cache=cache, clock=FakeClock(), services={PODGROUP_API_SERVICE: groups}
    )
    return scheduler, api, groups, cache


async def test_a_gang_of_four_makes_one_finalizer_write_and_a_later_member_none() -> None:
    scheduler, api, groups, cache = protected_scheduler()
    cache.upsert_node(make_node("n0", cpu="16"))
    cache.upsert_podgroup(gang("g", 4))
    for i in range(4):
        api.add(make_pod(f"p{i}", group="g"))
    await settle(scheduler)
    assert groups.calls == ["g"]
    assert cache.scheduled_count(KEY) == 4
    assert cache.podgroup(KEY).protected  # type: ignore[union-attr]

    api.add(make_pod("p4", group="g"))
    await settle(scheduler)
    assert cache.scheduled_count(KEY) == 5
    assert groups.calls == ["g"]


async def test_a_refused_finalizer_write_binds_no_member_and_says_why() -> None:
    scheduler, api, groups, cache = protected_scheduler()
    cache.upsert_node(make_node("n0", cpu="16"))
    cache.upsert_podgroup(gang("g", 2))
    groups.fail_with = PatchOutcome(PatchResult.ERROR, "500 InternalError")
    for i in range(2):
        api.add(make_pod(f"p{i}", group="g"))
    await settle(scheduler)
    await scheduler.wait_for_tasks()
    assert groups.calls == ["g"]  # one write for the gang, whose members share its outcome
    assert api.bind_calls == []
    pod = api.pods["default/p0"]
    assert pod.scheduled_condition is not None and pod.scheduled_condition.status == "False"
    assert pod.scheduled_condition.message.startswith(
        "PodGroup default/g: could not add the finalizer scheduling.lockstep.dev/podgroup-protection "
        "(Error: 500 InternalError)"
    )


async def test_a_deletion_right_after_the_finalizer_write_does_not_split_the_gang() -> None:
    scheduler, api, groups, cache = protected_scheduler()
    cache.upsert_node(make_node("n0", cpu="16"))
    cache.upsert_podgroup(gang("g", 3))
    groups.gate = asyncio.Event()
    for i in range(3):
        api.add(make_pod(f"p{i}", group="g"))
    while scheduler.schedule_one() is not None:
        pass
    for _ in range(20):  # the binding tasks reach PreBind and wait there for the write
        await asyncio.sleep(0)
    assert groups.calls == ["g"]  # the first member writes; the others await the same verdict
    # Deleted as the write lands: the cycle's verdict is given, so every member binds.
    info = cache.podgroup(KEY)
    assert info is not None
    cache.upsert_podgroup(dataclasses.replace(info, terminating=True))
    groups.gate.set()
    await scheduler.wait_for_tasks()
    assert len(api.bind_calls) == 3


async def test_a_terminating_group_is_held_and_its_pending_pods_are_told_why() -> None:
    scheduler, api, groups, cache = protected_scheduler()
    cache.upsert_node(make_node("n0", cpu="1"))
    cache.upsert_podgroup(gang("g", 1))
    api.add(make_pod("p0", group="g"))
    await settle(scheduler)
    assert cache.scheduled_count(KEY) == 1
    info = cache.podgroup(KEY)
    assert info is not None
    cache.upsert_podgroup(dataclasses.replace(info, terminating=True))
    cache.upsert_node(make_node("n1", cpu="8"))  # room enough for the next member
    api.add(make_pod("p1", group="g"))
    await settle(scheduler)
    await scheduler.wait_for_tasks()
    assert [call[0] for call in api.bind_calls] == ["default/p0"]
    attempt = scheduler.attempts[KEY]
    assert attempt.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert attempt.causes == {"PodGroupDeleting": 1}
    condition = api.pods["default/p1"].scheduled_condition
    assert condition is not None
    assert condition.message == "PodGroup default/g is being deleted: no more of its pods are scheduled"
    assert scheduler.queue.state(KEY) is GroupState.GATED
    assert groups.calls == ["g"]  # only p0's cycle wrote
