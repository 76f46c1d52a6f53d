"""The object store: one global resourceVersion, per-resource event windows and watch fan-out.

Stored objects are never mutated: a write builds a new dict, serializes it once with orjson and
shares those bytes between GET, LIST and every watcher. Writers never wait for watchers: each
watcher has its own buffer and a watcher that falls too far behind is closed (the client re-lists),
as kube-apiserver does with slow watch consumers.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import orjson

from lockstep.sim.selectors import FieldSelector, LabelSelector

JsonObject = dict[str, Any]
ObjectKey = tuple[str, str]  # (namespace or "", name)


class Stored:
    """One version of an object: the dict (treat as read-only) and its JSON bytes."""

    __slots__ = ("body", "obj", "rv")

    def __init__(self, obj: JsonObject, rv: int) -> None:
        self.obj = obj
        self.rv = rv
        self.body = orjson.dumps(obj)

    def copy(self) -> JsonObject:
        """A deep, mutable copy (orjson round trip: much faster than copy.deepcopy)."""
        result: JsonObject = orjson.loads(self.body)
        return result


class WatchEvent:
    """A change to one object; ``prev`` is the state before it (None for ADDED)."""

    __slots__ = ("_encoded", "current", "prev", "rv", "type")

    def __init__(self, event_type: str, current: Stored, prev: Stored | None) -> None:
        self.type = event_type
        self.current = current
        self.prev = prev
        self.rv = current.rv
        self._encoded: dict[tuple[str, str], bytes] = {}

    def encoded(self, event_type: str, which: str, view: View | None) -> bytes:
        """The event as one NDJSON line; ``which`` is "current" or "prev-stamped"
        (the previous state carrying this event's resourceVersion, sent when an update makes an
        object leave a watch's selector)."""
        view_name = view.name if view else ""
        cache_key = (event_type + which, view_name)
        line = self._encoded.get(cache_key)
        if line is None:
            if which == "current" and view is None:
                body = self.current.body
            else:
                obj = self.current.obj if which == "current" else _stamped(self.prev, self.rv)
                body = orjson.dumps(view.convert(obj) if view else obj)
            line = b'{"type":"' + event_type.encode() + b'","object":' + body + b"}\n"
            self._encoded[cache_key] = line
        return line


def _stamped(prev: Stored | None, rv: int) -> JsonObject:
    assert prev is not None
    obj = prev.copy()
    obj["metadata"]["resourceVersion"] = str(rv)
    return obj


class View:
    """A second API version served from the same storage (events.k8s.io/v1 over core/v1 Events)."""

    def __init__(
        self,
        name: str,
        convert: Callable[[JsonObject], JsonObject],
        revert: Callable[[JsonObject], JsonObject],
    ) -> None:
        self.name = name
        self.convert = convert
        self.revert = revert


class Watcher:
    """One open watch stream: its filters and the lines waiting to be written to the socket."""

    __slots__ = (
        "buffer",
        "buffered",
        "closed",
        "field_selector",
        "label_selector",
        "max_buffer",
        "namespace",
        "view",
        "wakeup",
    )

    def __init__(
        self,
        namespace: str | None,
        label_selector: LabelSelector,
        field_selector: FieldSelector,
        view: View | None,
        max_buffer: int,
    ) -> None:
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.view = view
        self.max_buffer = max_buffer
        self.buffer: list[bytes] = []
        self.buffered = 0
        self.closed = False
        self.wakeup = asyncio.Event()

    def matches(self, obj: JsonObject) -> bool:
        meta = obj["metadata"]
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        if not self.label_selector.empty and not self.label_selector.matches(meta.get("labels")):
            return False
        return self.field_selector.empty or self.field_selector.matches(obj)

    def offer(self, event: WatchEvent) -> None:
        """Queue the event if this watch should see it, translating selector transitions."""
        if self.closed:
            return
        now = self.matches(event.current.obj)
        before = event.prev is not None and event.type == "MODIFIED" and self.matches(event.prev.obj)
        if event.type == "MODIFIED":
            if now and before:
                line = event.encoded("MODIFIED", "current", self.view)
            elif now:
                line = event.encoded("ADDED", "current", self.view)
            elif before:
                line = event.encoded("DELETED", "prev-stamped", self.view)
            else:
                return
        elif now:
            line = event.encoded(event.type, "current", self.view)
        else:
            return
        self.push(line)

    def push(self, line: bytes) -> None:
        self.buffer.append(line)
        self.buffered += 1
        if self.buffered > self.max_buffer:
            self.close()
        self.wakeup.set()

    def take(self) -> list[bytes]:
        lines = self.buffer
        self.buffer = []
        self.buffered = 0
        self.wakeup.clear()
        return lines

    def close(self) -> None:
        self.closed = True
        self.buffer = []
        self.buffered = 0
        self.wakeup.set()


class ResourceStore:
    """Objects of one storage resource (e.g. pods), its bounded event window and its watchers."""

    def __init__(self, window_size: int, floor_rv: int) -> None:
        self.objects: dict[ObjectKey, Stored] = {}
        self.window: deque[WatchEvent] = deque()
        self.window_size = window_size
        # The oldest resourceVersion a watch may resume from; older ones are answered with 410.
        self.floor_rv = floor_rv
        self.watchers: set[Watcher] = set()

    def record(self, event: WatchEvent) -> None:
        self.window.append(event)
        while len(self.window) > self.window_size:
            dropped = self.window.popleft()
            self.floor_rv = max(self.floor_rv, dropped.rv)
        for watcher in self.watchers:
            watcher.offer(event)

    def compact(self, rv: int) -> None:
        self.window.clear()
        self.floor_rv = max(self.floor_rv, rv)

    def events_after(self, rv: int) -> Iterator[WatchEvent]:
        for event in self.window:
            if event.rv > rv:
                yield event

    def sorted_keys(self, namespace: str | None) -> list[ObjectKey]:
        if namespace is None:
            return sorted(self.objects)
        return sorted(k for k in self.objects if k[0] == namespace)

    def sorted_items(self, namespace: str | None) -> list[Stored]:
        return [self.objects[k] for k in self.sorted_keys(namespace)]
