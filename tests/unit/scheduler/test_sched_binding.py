"""The binding cycle: Permit, PreBind, Bind through the port, exactly-once Unreserve on every
failure path, and the RV-guarded PodScheduled=False patch (docs/architecture.md behaviour 3)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

import pytest
from sched_helpers import MemoryPodAPI, RecordingPlugin, gang, make_node, make_pod, make_scheduler, settle

from lockstep.scheduler.framework import Code, GroupKey, PodCondition
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

KEY = GroupKey("default", "g")


def _gang_of_two(min_count: int = 1) -> tuple[Scheduler, MemoryPodAPI, ClusterCache, RecordingPlugin]:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", min_count))
    api.add(make_pod("p0", group="g"))
    api.add(make_pod("p1", group="g"))
    return scheduler, api, cache, recorder


def _no_usage(cache: ClusterCache) -> bool:
    node = cache.nodes["n0"]
    return node.requested.get("cpu", 0) == 0 and node.pod_count == 0


def _fail_permit(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    recorder.fail_permit.add("p1")


def _fail_pre_bind(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    recorder.fail_pre_bind.add("p1")


def _raise_in_pre_bind(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    recorder.raise_pre_bind.add("p1")


def _bind_conflict(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    api.inject_bind.append(BindOutcome(BindResult.CONFLICT, "409"))
    recorder.pre_bind_gate = None


def _bind_error(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    api.inject_bind.append(BindOutcome(BindResult.ERROR, "500 Internal Server Error"))


def _bind_raises(recorder: RecordingPlugin, api: MemoryPodAPI) -> None:
    api.inject_bind.append(ConnectionResetError("connection reset"))


@pytest.mark.parametrize(
    ("inject", "cause"),
    [
        (_fail_permit, "PermitRejected"),
        (_fail_pre_bind, "SchedulerError"),
        (_raise_in_pre_bind, "SchedulerError"),
        (_bind_conflict, "BindConflict"),
        (_bind_error, "SchedulerError"),
        (_bind_raises, "SchedulerError"),
    ],
    ids=["permit", "prebind-status", "prebind-raises", "bind-409", "bind-error", "bind-raises"],
)
async def test_each_failing_phase_releases_the_pod_exactly_once(
    inject: Callable[[RecordingPlugin, MemoryPodAPI], None], cause: str
) -> None:
    scheduler, api, cache, recorder = _gang_of_two()
    inject(recorder, api)
    await settle(scheduler)
    failed = [name for name in ("p0", "p1") if not api.pods[f"default/{name}"].node_name]
    assert failed, "one member must have failed"
    for name in ("p0", "p1"):
        expected = 1 if name in failed else 0
        assert recorder.releases(name) == expected, f"{name} released {recorder.releases(name)} times"
    for name in failed:
        pod = api.pods[f"default/{name}"]
        assert not cache.is_assumed(pod.uid)
        assert pod.scheduled_condition is not None and pod.scheduled_condition.status == "False"
    attempt = scheduler.attempts[KEY]
    assert attempt.causes.get(cause) == 1
    assert "did not bind" in attempt.message


async def test_a_failed_member_is_retried_while_its_sibling_waits_at_permit() -> None:
    scheduler, api, _cache, recorder = _gang_of_two(min_count=2)
    api.inject_bind.append(BindOutcome(BindResult.ERROR, "500"))
    await settle(scheduler)
    (failed,) = [n for n in ("p0", "p1") if not api.pods[f"default/{n}"].node_name and recorder.releases(n)]
    waiting = "p1" if failed == "p0" else "p0"
    assert scheduler.waiting.count(KEY) <= 1
    assert scheduler.attempts[KEY].causes.get("SchedulerError") == 1
    scheduler.clock.advance(1)  # type: ignore[attr-defined]
    await settle(scheduler)  # the retry places the failed member; Permit then lets both bind
    assert api.pods["default/p0"].node_name == api.pods["default/p1"].node_name == "n0"
    assert recorder.releases(failed) == 1 and recorder.releases(waiting) == 0


async def test_permit_timeout_rejects_and_releases_every_waiting_member() -> None:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 3, timeout=0.05))
    for i in range(3):
        api.add(make_pod(f"p{i}", group="g"))
    # The third member vanishes after the cycle placed it: the others wait for a minCount that
    # cannot be reached, until the timeout.
    scheduler.schedule_one()
    api.delete("default/p2")
    await scheduler.wait_for_tasks()
    await settle(scheduler)
    assert api.bind_calls == []
    assert recorder.releases("p0") == recorder.releases("p1") == recorder.releases("p2") == 1
    attempt = scheduler.attempts[KEY]
    assert attempt.causes.get("Timeout") == 2
    assert _no_usage(cache)
    assert len(scheduler.waiting) == 0


async def test_lowering_min_count_lets_waiting_members_bind() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 3, timeout=30))
    for i in range(3):
        api.add(make_pod(f"p{i}", group="g"))
    scheduler.schedule_one()
    api.delete("default/p2")
    for _ in range(5):
        await asyncio.sleep(0)
    assert scheduler.waiting.count(KEY) == 2
    cache.upsert_podgroup(gang("g", 2, timeout=30))
    await settle(scheduler)
    assert api.pods["default/p0"].node_name == api.pods["default/p1"].node_name == "n0"


async def test_raising_min_count_mid_flight_holds_members_until_the_new_count_is_reserved() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 2, timeout=30))
    api.add(make_pod("p0", group="g"))
    api.add(make_pod("p1", group="g"))
    scheduler.schedule_one()  # placed with minCount 2; the binding tasks have not run yet
    cache.upsert_podgroup(gang("g", 3, timeout=30))
    await settle(scheduler)
    assert scheduler.waiting.count(KEY) == 2 and api.bind_calls == []
    api.add(make_pod("p2", group="g"))  # the third member: its cycle needs only itself (S = 2)
    await settle(scheduler)
    assert all(p.node_name == "n0" for p in api.pods.values())
    assert scheduler.attempts[KEY].code is Code.SUCCESS


async def test_a_released_reservation_hurries_groups_waiting_for_capacity() -> None:
    recorder = RecordingPlugin()
    recorder.fail_pre_bind.add("holder")
    recorder.pre_bind_gate = asyncio.Event()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="2"))
    api.add(make_pod("holder", cpu="2"))
    scheduler.schedule_one()  # holder is reserved on n0 and hangs in PreBind, which will fail
    api.add(make_pod("waiter", cpu="2", priority=10))  # goes before holder's own retry
    waiter = GroupKey("default", "waiter", False)
    for backoff in (1, 2, 4):  # no room while holder's reservation stands; the backoff grows
        assert scheduler.schedule_one() == waiter
        assert scheduler.queue.ready_at(waiter) == scheduler.clock() + backoff
        scheduler.clock.advance(backoff if backoff < 4 else 0)  # type: ignore[attr-defined]
    recorder.pre_bind_gate.set()
    for _ in range(10):
        await asyncio.sleep(0)
    assert recorder.releases("holder") == 1
    # freed capacity: retry one initial backoff after the last attempt instead of 4 s
    assert scheduler.queue.ready_at(waiter) == scheduler.clock() + 1
    scheduler.clock.advance(1)  # type: ignore[attr-defined]
    await settle(scheduler)
    assert api.pods["default/waiter"].node_name == "n0"


async def test_deleting_the_podgroup_rejects_waiting_members() -> None:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 3, timeout=30))
    for i in range(3):
        api.add(make_pod(f"p{i}", group="g"))
    scheduler.schedule_one()
    api.delete("default/p2")
    for _ in range(5):
        await asyncio.sleep(0)
    cache.delete_podgroup("default", "g")
    await scheduler.wait_for_tasks()
    await settle(scheduler)
    assert api.bind_calls == []
    assert recorder.releases("p0") == recorder.releases("p1") == 1
    assert scheduler.attempts[KEY].code is Code.WAIT  # waits for its PodGroup again
    assert _no_usage(cache)


async def test_a_pod_deleted_during_prebind_is_released_once_and_not_patched() -> None:
    scheduler, api, _cache, recorder = _gang_of_two()
    recorder.pre_bind_gate = asyncio.Event()
    scheduler.schedule_one()
    for _ in range(5):
        await asyncio.sleep(0)
    assert sorted(recorder.pre_bound) == ["p0", "p1"]
    api.delete("default/p1")
    recorder.pre_bind_gate.set()
    await settle(scheduler)
    assert recorder.releases("p1") == 1 and recorder.releases("p0") == 0
    assert api.pods["default/p0"].node_name == "n0"
    assert [c for c in api.patch_calls if c[0] == "default/p1"] == []
    assert ("default/p1", "n0") not in api.bind_calls


async def test_bind_conflict_with_the_same_node_counts_as_bound() -> None:
    scheduler, api, _cache, recorder = _gang_of_two()

    async def bound_by_someone_else() -> None:  # e.g. an earlier attempt whose response was lost
        stored = api.pods["default/p0"]
        api.pods["default/p0"] = dataclasses.replace(stored, node_name="n0", resource_version="999")

    api.inject_bind.extend([bound_by_someone_else, BindOutcome(BindResult.CONFLICT, "already assigned")])
    await settle(scheduler)
    assert recorder.unreserved == []
    assert api.pods["default/p0"].node_name == api.pods["default/p1"].node_name == "n0"
    assert scheduler.attempts[KEY].code is Code.SUCCESS


async def test_a_bind_error_whose_write_landed_counts_as_bound() -> None:
    scheduler, api, _cache, recorder = _gang_of_two()

    async def landed() -> None:
        stored = api.pods["default/p0"]
        api.pods["default/p0"] = dataclasses.replace(stored, node_name="n0", resource_version="999")

    api.inject_bind.extend([landed, BindOutcome(BindResult.ERROR, "timeout reading response")])
    await settle(scheduler)
    assert recorder.unreserved == []
    assert [c for c in api.patch_calls if c[0] == "default/p0"] == []


async def test_delayed_failure_patch_from_cycle_one_does_not_overwrite_cycle_two_success() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("small", cpu="1"))
    api.add(make_pod("p", cpu="2"))
    release_patch = asyncio.Event()

    async def slow_network() -> None:
        await release_patch.wait()

    api.inject_patch.append(slow_network)
    scheduler.schedule_one()  # cycle 1 fails; its PodScheduled=False patch hangs on the network
    for _ in range(3):
        await asyncio.sleep(0)
    assert len(api.patch_calls) == 1
    stale_rv = api.patch_calls[0][1]
    cache.upsert_node(make_node("big", cpu="4"))
    scheduler.clock.advance(1)  # type: ignore[attr-defined]
    scheduler.schedule_one()  # cycle 2 places the pod on "big" and binds it
    for _ in range(5):
        await asyncio.sleep(0)
    assert api.pods["default/p"].node_name == "big"
    release_patch.set()  # now cycle 1's patch arrives, with its stale resourceVersion
    await settle(scheduler)
    pod = api.pods["default/p"]
    assert pod.node_name == "big"
    assert pod.scheduled_condition == PodCondition("True", "", "")
    assert [rv for _, rv, _ in api.patch_calls] == [stale_rv]  # 409, re-read, saw nodeName: stop
    assert api.get_calls == ["default/p"]


async def test_a_conflicting_patch_is_retried_with_the_fresh_resource_version() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("small", cpu="1"))
    api.add(make_pod("p", cpu="2"))
    api.echo = False  # the watch is slow: the cache still has the old resourceVersion

    async def label_change() -> None:
        stored = api.pods["default/p"]
        api.pods["default/p"] = dataclasses.replace(stored, resource_version="500", labels={"x": "y"})

    api.inject_patch.append(label_change)
    await settle(scheduler)
    sent = [rv for _, rv, _ in api.patch_calls]
    assert sent[1] == "500" and len(sent) == 2
    assert api.pods["default/p"].scheduled_condition is not None
    assert api.pods["default/p"].scheduled_condition.status == "False"


async def test_no_false_condition_is_written_to_a_pod_with_node_name() -> None:
    scheduler, api, _cache = make_scheduler()
    pod = api.add(make_pod("p"))
    bound = dataclasses.replace(pod, node_name="n0")
    await scheduler.report_unschedulable(bound, "Unschedulable", "late news")
    assert api.patch_calls == []
    api.inject_patch.append(PatchOutcome(PatchResult.CONFLICT))

    async def bound_meanwhile() -> None:
        stored = api.pods["default/p"]
        api.pods["default/p"] = dataclasses.replace(stored, node_name="n0", resource_version="777")

    api.inject_patch.insert(0, bound_meanwhile)
    await scheduler.report_unschedulable(pod, "Unschedulable", "late news")
    assert len(api.patch_calls) == 1
    assert api.pods["default/p"].scheduled_condition is None


async def test_bind_of_a_pod_already_gone_is_released_without_a_patch() -> None:
    scheduler, api, _cache, recorder = _gang_of_two()
    api.inject_bind.append(BindOutcome(BindResult.NOT_FOUND))
    await settle(scheduler)
    assert recorder.unreserved == ["p0"]
    assert [c for c in api.patch_calls if c[0] == "default/p0"] == []


async def test_cancelling_the_scheduler_releases_pods_in_flight_once() -> None:
    scheduler, _api, cache, recorder = _gang_of_two()
    recorder.pre_bind_gate = asyncio.Event()
    task = asyncio.create_task(scheduler.run())
    for _ in range(10):
        await asyncio.sleep(0)
    assert sorted(recorder.pre_bound) == ["p0", "p1"]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(recorder.unreserved) == ["p0", "p1"]
    assert _no_usage(cache)


async def _until(condition: Callable[[], bool]) -> None:
    """Poll the scheduler's state while it runs on its own (up to 10 s on a busy machine)."""
    for _ in range(2000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition not reached in 10 s")


async def test_run_loop_binds_and_retries_after_backoff_when_a_node_arrives() -> None:
    scheduler, api, cache = make_scheduler(clock=None)
    scheduler.clock = asyncio.get_running_loop().time
    scheduler.queue.backoff_initial = 0.01
    task = asyncio.create_task(scheduler.run())
    cache.upsert_node(make_node("n0", cpu="1"))
    cache.upsert_podgroup(gang("g", 2))
    api.add(make_pod("p0", cpu="1", group="g"))
    api.add(make_pod("p1", cpu="1", group="g"))
    await _until(lambda: KEY in scheduler.attempts)
    assert scheduler.attempts[KEY].code is Code.UNSCHEDULABLE
    cache.upsert_node(make_node("n1", cpu="1"))
    await _until(lambda: all(p.node_name for p in api.pods.values()))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(p.node_name for p in api.pods.values()) == ["n0", "n1"]


async def test_a_group_whose_binding_keeps_failing_backs_off_exponentially() -> None:
    recorder = RecordingPlugin()
    recorder.fail_pre_bind.add("p")
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0"))
    api.add(make_pod("p"))
    key = GroupKey("default", "p", False)
    delays = []
    for _ in range(4):
        await settle(scheduler)
        ready_at = scheduler.queue.ready_at(key)
        assert ready_at is not None
        delays.append(ready_at - scheduler.clock())
        scheduler.clock.advance(ready_at - scheduler.clock())  # type: ignore[attr-defined]
    assert delays == [1, 2, 4, 8]
    assert recorder.releases("p") == 4
