"""The binding queue sends in placement order, bounded in concurrency, and never loses an outcome."""

from __future__ import annotations

import asyncio

import pytest
from sched_helpers import make_pod

from lockstep.scheduler.bind_queue import BindQueue
from lockstep.scheduler.framework import PodInfo
from lockstep.scheduler.ports import BindOutcome, BindResult


class RecordingBinder:
    """Answers each binding after ``gate`` opens and records the order and the concurrency."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.in_flight = 0
        self.most_in_flight = 0
        self.gate = asyncio.Event()
        self.gate.set()
        self.fail: set[str] = set()

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        self.sent.append(pod.name)
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.gate.wait()
            await asyncio.sleep(0)
            if pod.name in self.fail:
                raise RuntimeError(f"transport failed for {pod.name}")
            return BindOutcome(BindResult.BOUND)
        finally:
            self.in_flight -= 1


async def test_a_later_gangs_binding_never_overtakes_an_earlier_gangs() -> None:
    binder = RecordingBinder()
    binder.gate.clear()
    queue = BindQueue(binder.bind, workers=2)
    # The workers are busy with two bindings; gang 1's members arrive before gang 0's last member.
    calls = [queue.bind((0, 0), make_pod("g0-0"), "n"), queue.bind((0, 1), make_pod("g0-1"), "n")]
    tasks = [asyncio.ensure_future(c) for c in calls]
    await asyncio.sleep(0.01)
    for index in range(3):
        tasks.append(asyncio.ensure_future(queue.bind((1, index), make_pod(f"g1-{index}"), "n")))
    tasks.append(asyncio.ensure_future(queue.bind((0, 2), make_pod("g0-2"), "n")))
    await asyncio.sleep(0.01)
    binder.gate.set()
    outcomes = await asyncio.gather(*tasks)
    await queue.close()
    assert all(o.result is BindResult.BOUND for o in outcomes)
    assert binder.sent == ["g0-0", "g0-1", "g0-2", "g1-0", "g1-1", "g1-2"]


async def test_concurrency_is_bounded_by_the_workers() -> None:
    binder = RecordingBinder()
    queue = BindQueue(binder.bind, workers=3)
    await asyncio.gather(*(queue.bind((i, 0), make_pod(f"p{i}"), "n") for i in range(20)))
    await queue.close()
    assert len(binder.sent) == 20
    assert binder.most_in_flight == 3


async def test_a_failed_send_reaches_its_caller_and_the_worker_goes_on() -> None:
    binder = RecordingBinder()
    binder.fail = {"bad"}
    queue = BindQueue(binder.bind, workers=1)
    bad = asyncio.ensure_future(queue.bind((0, 0), make_pod("bad"), "n"))
    good = asyncio.ensure_future(queue.bind((1, 0), make_pod("good"), "n"))
    with pytest.raises(RuntimeError, match="transport failed for bad"):
        await bad
    assert (await good).result is BindResult.BOUND
    await queue.close()


async def test_a_cancelled_binding_cycle_is_not_sent() -> None:
    binder = RecordingBinder()
    binder.gate.clear()
    queue = BindQueue(binder.bind, workers=1)
    first = asyncio.ensure_future(queue.bind((0, 0), make_pod("first"), "n"))
    gone = asyncio.ensure_future(queue.bind((1, 0), make_pod("gone"), "n"))
    await asyncio.sleep(0.01)
    gone.cancel()
    binder.gate.set()
    await first
    await asyncio.sleep(0.01)
    await queue.close()
    assert binder.sent == ["first"]


async def test_each_binding_is_announced_as_it_goes_to_the_api_and_a_cancelled_one_is_not() -> None:
    binder = RecordingBinder()
    binder.gate.clear()
    announced: list[tuple[int, int]] = []
    queue = BindQueue(binder.bind, workers=1, on_send=announced.append)
    first = asyncio.ensure_future(queue.bind((0, 0), make_pod("first"), "n"))
    queued = asyncio.ensure_future(queue.bind((1, 0), make_pod("queued"), "n"))
    gone = asyncio.ensure_future(queue.bind((2, 0), make_pod("gone"), "n"))
    await asyncio.sleep(0.01)
    assert announced == [(0, 0)]  # the others wait for the worker: not announced yet
    gone.cancel()
    binder.gate.set()
    await asyncio.gather(first, queued)
    await queue.close()
    assert announced == [(0, 0), (1, 0)]


async def test_a_placements_members_leave_together_once_every_sibling_reached_bind_or_left() -> None:
    binder = RecordingBinder()
    queue = BindQueue(binder.bind, workers=4)
    queue.open(0, 3)
    queue.open(1, 1)
    first = asyncio.ensure_future(queue.bind((0, 0), make_pod("g0-0"), "n"))
    later = asyncio.ensure_future(queue.bind((1, 0), make_pod("g1-0"), "n"))
    await asyncio.sleep(0.01)
    # g0-0 waits for its siblings (one still in PreBind, one that will fail); g1-0 is complete.
    assert binder.sent == ["g1-0"]
    assert not first.done()
    queue.leave((0, 2))  # failed before Bind
    await asyncio.sleep(0.01)
    assert not first.done()
    last = asyncio.ensure_future(queue.bind((0, 1), make_pod("g0-1"), "n"))
    outcomes = await asyncio.gather(first, last, later)
    queue.leave((0, 0))  # after its binding: changes nothing
    await queue.close()
    assert all(o.result is BindResult.BOUND for o in outcomes)
    assert binder.sent == ["g1-0", "g0-0", "g0-1"]


async def test_closing_cancels_members_still_held_for_their_siblings() -> None:
    binder = RecordingBinder()
    queue = BindQueue(binder.bind, workers=1)
    queue.open(0, 2)
    held = asyncio.ensure_future(queue.bind((0, 0), make_pod("held"), "n"))
    await asyncio.sleep(0.01)
    await queue.close()
    with pytest.raises(asyncio.CancelledError):
        await held
    assert binder.sent == []


async def test_wait_below_returns_once_the_backlog_drains() -> None:
    binder = RecordingBinder()
    binder.gate.clear()
    queue = BindQueue(binder.bind, workers=1)
    tasks = [asyncio.ensure_future(queue.bind((i, 0), make_pod(f"p{i}"), "n")) for i in range(5)]
    await asyncio.sleep(0.01)
    assert queue.backlog == 5
    waiter = asyncio.ensure_future(queue.wait_below(2))
    await asyncio.sleep(0.01)
    assert not waiter.done()
    binder.gate.set()
    await asyncio.wait_for(waiter, 1)
    assert queue.backlog <= 2
    await asyncio.gather(*tasks)
    await queue.close()
