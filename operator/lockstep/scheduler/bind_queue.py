"""The binding queue: every pods/binding goes out in placement order, a gang's members together.

Binding tasks used to POST as soon as they reached Bind. Under a backlog the HTTP connection pool was
saturated, so a member that found a free connection went out at once while its siblings queued behind
hundreds of earlier requests: one gang of 8 bound over 1.3 s (on a real API server over 3 s) while its
first members held their nodes. And members whose PreBind writes their own claim reached Bind at
different times, so their bindings left seconds apart.

Here the members placed by one cycle (a *placement*) are held until every one of them has reached Bind
or left its binding cycle, and are then taken in ``(placement, member)`` order by a fixed number of
workers: no binding overtakes an earlier placement's, and a gang's members leave one after another.
The API client keeps that order on the wire and puts bindings first: a binding takes the next free
connection before any waiting claim or finalizer write (``kube/client.py``), so a pod whose PreBind
is done is not held behind other pods' PreBind writes.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from lockstep.scheduler.framework import PodInfo
from lockstep.scheduler.ports import BindOutcome

BindFunction = Callable[[PodInfo, str], Awaitable[BindOutcome]]
Order = tuple[int, int]  # (placement sequence, member index)
Entry = tuple[Order, int, PodInfo, str, "asyncio.Future[BindOutcome]"]


@dataclass(slots=True)
class _Placement:
    members: int
    arrived: list[Entry] = field(default_factory=list)
    done: set[int] = field(default_factory=set)  # member indexes that arrived or left

    @property
    def complete(self) -> bool:
        return len(self.done) >= self.members


class BindQueue:
    """``open(placement, members)`` announces a cycle's placed pods; each then either ``await
    bind((placement, index), pod, node)`` (the outcome of ``send(pod, node)``) or ``leave``s. Workers
    start on the first binding and stop with ``close``."""

    def __init__(
        self, send: BindFunction, workers: int = 32, on_send: Callable[[Order], None] | None = None
    ) -> None:
        if workers < 1:
            raise ValueError(f"BindQueue workers: at least 1, got {workers}")
        self._send = send
        self._on_send = on_send  # told of each binding as it goes to the API
        self._workers = workers
        self._held: dict[int, _Placement] = {}
        self._heap: list[Entry] = []
        self._tiebreak = itertools.count()
        self._ready = asyncio.Event()
        self._progress = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._in_flight = 0

    @property
    def backlog(self) -> int:
        """Bindings held for their siblings, waiting for a worker or on the wire."""
        held = sum(len(p.arrived) for p in self._held.values())
        return held + len(self._heap) + self._in_flight

    def open(self, placement: int, members: int) -> None:
        self._held[placement] = _Placement(members)

    def leave(self, order: Order) -> None:
        """Its siblings no longer wait for the member at ``order``: its binding cycle ended, or it waits
        at Permit (if it binds later, it goes on its own). Calling it after its binding is harmless."""
        held = self._held.get(order[0])
        if held is not None and order[1] not in held.done:
            held.done.add(order[1])
            self._release_if_complete(order[0], held)

    async def bind(self, order: Order, pod: PodInfo, node_name: str) -> BindOutcome:
        if not self._tasks:
            # A context of their own: not that of the binding cycle that happened to start them.
            self._tasks = [
                asyncio.get_running_loop().create_task(
                    self._work(), name=f"lockstep-binder-{i}", context=contextvars.Context()
                )
                for i in range(self._workers)
            ]
        future: asyncio.Future[BindOutcome] = asyncio.get_running_loop().create_future()
        entry: Entry = (order, next(self._tiebreak), pod, node_name, future)
        held = self._held.get(order[0])
        if held is None:
            self._push(entry)
        else:
            held.arrived.append(entry)
            held.done.add(order[1])
            self._release_if_complete(order[0], held)
        return await future

    def _release_if_complete(self, placement: int, held: _Placement) -> None:
        if held.complete:
            del self._held[placement]
            for entry in held.arrived:
                self._push(entry)

    def _push(self, entry: Entry) -> None:
        heapq.heappush(self._heap, entry)
        self._ready.set()

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
            order, _, pod, node_name, future = heapq.heappop(self._heap)
            if future.done():  # the binding cycle was cancelled meanwhile
                self._progress.set()
                continue
            if self._on_send is not None:
                self._on_send(order)
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
        waiting = [entry for held in self._held.values() for entry in held.arrived] + self._heap
        for _, _, _, _, future in waiting:
            if not future.done():
                future.cancel()
        self._held = {}
        self._heap = []
