"""The binding queue: every pods/binding goes out in placement order, a gang's members together.

Binding tasks used to POST as soon as they reached Bind. Under a backlog the HTTP connection pool was
saturated, so a member that found a free connection went out at once while its siblings queued behind
hundreds of earlier requests: one gang of 8 bound over 1.3 s (on a real API server over 3 s) while its
first members held their nodes. Here each binding waits its turn by ``(placement sequence, member
index)``, taken by a fixed number of workers, so no binding overtakes an earlier gang's and a gang's
members leave one after another.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable

from lockstep.scheduler.framework import PodInfo
from lockstep.scheduler.ports import BindOutcome

BindFunction = Callable[[PodInfo, str], Awaitable[BindOutcome]]


class BindQueue:
    """``await bind(order, pod, node)`` returns the outcome of ``send(pod, node)``, sent by one of
    ``workers`` workers in ascending ``order``. Workers start on the first call and stop with ``close``."""

    def __init__(self, send: BindFunction, workers: int = 32) -> None:
        if workers < 1:
            raise ValueError(f"BindQueue workers: at least 1, got {workers}")
        self._send = send
        self._workers = workers
        self._heap: list[tuple[tuple[int, int], int, PodInfo, str, asyncio.Future[BindOutcome]]] = []
        self._tiebreak = itertools.count()
        self._ready = asyncio.Event()
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight = 0

    @property
    def backlog(self) -> int:
        """Bindings waiting for a worker or on the wire."""
        return len(self._heap) + self._in_flight

    async def bind(self, order: tuple[int, int], pod: PodInfo, node_name: str) -> BindOutcome:
        if not self._tasks:
            self._tasks = [
                asyncio.get_running_loop().create_task(self._work(), name=f"lockstep-binder-{i}")
                for i in range(self._workers)
            ]
        future: asyncio.Future[BindOutcome] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (order, next(self._tiebreak), pod, node_name, future))
        self._ready.set()
        return await future

    async def wait_below(self, limit: int) -> None:
        """Return once the backlog is at most ``limit`` (the scheduler's brake: cycles that outrun the
        bindings only lengthen the queue every placed pod waits in)."""
        while self.backlog > limit:
            self._progress.clear()
            await self._progress.wait()

    async def _work(self) -> None:
        while True:
            while not self._heap:
                self._ready.clear()
                await self._ready.wait()
            _, _, pod, node_name, future = heapq.heappop(self._heap)
            if future.done():  # the binding cycle was cancelled meanwhile
                self._progress.set()
                continue
            self._in_flight += 1
            try:
                outcome = await self._send(pod, node_name)
            except BaseException as exc:
                if not future.done():
                    future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    raise
            else:
                if not future.done():
                    future.set_result(outcome)
            finally:
                self._in_flight -= 1
                self._progress.set()

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []
        for _, _, _, _, future in self._heap:
            if not future.done():
                future.cancel()
        self._heap = []
