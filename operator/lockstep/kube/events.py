"""Kubernetes Events, aggregated like client-go's EventCorrelator so a stuck group cannot flood the API.

- The same (object, type, reason, message) again becomes a PATCH of ``count``/``lastTimestamp`` on
  the existing Event instead of a new object.
- More than ``similar_limit`` different messages for one (object, type, reason) within
  ``similar_window`` seconds collapse into one "(combined from similar events)" Event.
- A token bucket per object (``burst`` events, one more every ``refill_seconds``) drops the rest.

``record`` never blocks and never raises: events are written by background writers, up to
``concurrency`` at a time. An event goes to the writer with the shortest queue, unless its object
already has an event queued: then to that writer, behind it, so the aggregation above sees each
earlier write of the object finished.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from lockstep.kube.client import EVENTS, ApiError, KubeClient
from lockstep.kube.patching import loose_merge_patch, now_rfc3339
from lockstep.logging import get_logger

log = get_logger("lockstep.kube.events")

NORMAL = "Normal"
WARNING = "Warning"


@dataclass(frozen=True, slots=True)
class ObjectReference:
    kind: str
    namespace: str
    name: str
    uid: str
    api_version: str

    def as_api(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "namespace": self.namespace,
            "name": self.name,
            "uid": self.uid,
            "apiVersion": self.api_version,
        }


@dataclass(slots=True)
class _Emitted:
    event_name: str
    count: int
    first_timestamp: str


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


@dataclass(slots=True)
class _Similar:
    messages: set[str] = field(default_factory=set)
    window_start: float = 0.0


@dataclass(frozen=True, slots=True)
class _Pending:
    involved: ObjectReference
    event_type: str
    reason: str
    message: str
    sequence: int

    @property
    def object_key(self) -> str:
        return self.involved.uid or f"{self.involved.namespace}/{self.involved.name}"


class EventRecorder:
    def __init__(
        self,
        client: KubeClient,
        component: str,
        *,
        burst: int = 25,
        refill_seconds: float = 300.0,
        similar_limit: int = 10,
        similar_window: float = 600.0,
        max_tracked: int = 4096,
        concurrency: int = 8,
        max_queued: int = 10000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.component = component
        self.burst = burst
        self.refill_seconds = refill_seconds
        self.similar_limit = similar_limit
        self.similar_window = similar_window
        self.max_tracked = max_tracked
        self.clock = clock
        self.dropped = 0
        self.created = 0
        self.updated = 0
        per_writer = max(1, max_queued // concurrency)
        self._queues: list[asyncio.Queue[_Pending]] = [
            asyncio.Queue(maxsize=per_writer) for _ in range(concurrency)
        ]
        self._queued: dict[str, tuple[int, int]] = {}  # object key -> (writer, events queued or in flight)
        self._emitted: OrderedDict[tuple[str, str, str, str], _Emitted] = OrderedDict()
        self._buckets: OrderedDict[str, _Bucket] = OrderedDict()
        self._similar: OrderedDict[tuple[str, str, str], _Similar] = OrderedDict()
        self._recorded = itertools.count()
        # (object key, reason) -> the last recorded sequence withdrawn (see withdraw_unsent)
        self._withdrawn: dict[tuple[str, str], int] = {}

    def record(self, involved: ObjectReference, event_type: str, reason: str, message: str) -> None:
        pending = _Pending(involved, event_type, reason, message[:1024], next(self._recorded))
        key = pending.object_key
        if not self._take_token(key):
            self.dropped += 1
            return
        writer, queued = self._queued.get(key) or (
            min(range(len(self._queues)), key=lambda i: self._queues[i].qsize()),
            0,
        )
        try:
            self._queues[writer].put_nowait(pending)
        except asyncio.QueueFull:
            self.dropped += 1
            return
        self._queued[key] = (writer, queued + 1)

    def withdraw_unsent(self, involved: ObjectReference, reason: str) -> None:
        """The events of ``reason`` about ``involved`` recorded so far and not yet written are not
        written (a gang's Scheduled, when its placement was withdrawn at shutdown)."""
        key = _Pending(involved, "", reason, "", 0).object_key
        self._withdrawn[(key, reason)] = next(self._recorded)

    def _take_token(self, key: str) -> bool:
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._buckets[key] = bucket
            self._trim(self._buckets)
        else:
            bucket.tokens = min(
                float(self.burst), bucket.tokens + (now - bucket.updated) / self.refill_seconds
            )
            bucket.updated = now
        if bucket.tokens < 1.0:
            return False
        bucket.tokens -= 1.0
        return True

    def _trim(self, table: OrderedDict[Any, Any]) -> None:
        while len(table) > self.max_tracked:
            table.popitem(last=False)

    def _aggregate(self, pending: _Pending) -> str:
        key = (pending.involved.uid, pending.event_type, pending.reason)
        now = self.clock()
        similar = self._similar.get(key)
        if similar is None or now - similar.window_start > self.similar_window:
            similar = _Similar(window_start=now)
            self._similar[key] = similar
            self._trim(self._similar)
        similar.messages.add(pending.message)
        if len(similar.messages) > self.similar_limit:
            return f"(combined from similar events): {pending.message}"
        return pending.message

    async def run(self) -> None:
        await asyncio.gather(*(self._writer(queue) for queue in self._queues))

    async def _writer(self, queue: asyncio.Queue[_Pending]) -> None:
        while True:
            pending = await queue.get()
            withdrawn = self._withdrawn.get((pending.object_key, pending.reason))
            try:
                if withdrawn is None or pending.sequence > withdrawn:
                    await self._write(pending)
            except Exception as exc:  # an event is best effort: never take the operator down
                log.warning("event write failed", reason=pending.reason, error=str(exc))
            finally:
                queue.task_done()
                writer, queued = self._queued.pop(pending.object_key)
                if queued > 1:
                    self._queued[pending.object_key] = (writer, queued - 1)

    async def flush(self) -> None:
        """Wait until everything recorded so far is written (needs :meth:`run` running)."""
        await asyncio.gather(*(queue.join() for queue in self._queues))

    async def _write(self, pending: _Pending) -> None:
        message = self._aggregate(pending)
        involved = pending.involved
        key = (involved.uid, pending.event_type, pending.reason, message)
        now = now_rfc3339()
        emitted = self._emitted.get(key)
        if emitted is not None:
            emitted.count += 1
            try:
                await loose_merge_patch(
                    self.client,
                    EVENTS,
                    involved.namespace,
                    emitted.event_name,
                    {"count": emitted.count, "lastTimestamp": now, "message": message},
                )
                self.updated += 1
                self._emitted.move_to_end(key)
                return
            except ApiError as exc:
                if not exc.not_found:
                    raise
        event_name = f"{involved.name}.{time.time_ns():x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name, "namespace": involved.namespace},
            "involvedObject": involved.as_api(),
            "reason": pending.reason,
            "message": message,
            "type": pending.event_type,
            "count": 1,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": self.component},
            "reportingComponent": self.component,
            "reportingInstance": self.component,
        }
        await self.client.create(EVENTS, involved.namespace, body)
        self.created += 1
        self._emitted[key] = _Emitted(event_name, 1, now)
        self._trim(self._emitted)
