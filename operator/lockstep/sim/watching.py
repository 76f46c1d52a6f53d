"""HTTP plumbing shared by the simulated cluster's components (kubelet, DRA driver, claim controller).

Each component talks to the API server over HTTP like a real controller: one aiohttp keep-alive
session, list-then-watch informers that resume from the last resourceVersion, re-list after a 410 or
a dropped connection, and a de-duplicating work queue whose workers retry failed keys.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import aiohttp
import orjson
import structlog

log = structlog.get_logger("lockstep.sim")

JsonObject = dict[str, Any]
EventHandler = Callable[[str, JsonObject], Awaitable[None] | None]

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_CONTENT = "application/json"

WATCH_TIMEOUT_SECONDS = 240
WATCH_INACTIVITY_SECONDS = 60
RETRY_DELAY_SECONDS = 0.2
MAX_RETRY_DELAY_SECONDS = 5.0


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.method = method
        self.path = path
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")

    @property
    def reason(self) -> str:
        return str(self.body.get("reason", "")) if isinstance(self.body, dict) else ""


class WatchExpired(Exception):
    """The resourceVersion a watch resumed from is gone (410): the informer must list again."""


def object_key(obj: JsonObject) -> str:
    metadata = obj.get("metadata") or {}
    namespace = metadata.get("namespace")
    name = metadata.get("name", "")
    return f"{namespace}/{name}" if namespace else str(name)


def new_session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=64, force_close=False),
        json_serialize=lambda value: orjson.dumps(value).decode(),
        read_bufsize=1 << 20,
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
    )


class KubeHttp:
    """A thin JSON client for the Kubernetes REST API (plain http, no auth)."""

    def __init__(self, base_url: str, session: aiohttp.ClientSession) -> None:
        self.base_url = base_url.rstrip("/")
        self.session = session

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: dict[str, str] | None = None,
        content_type: str = JSON_CONTENT,
    ) -> JsonObject:
        data = None if body is None else orjson.dumps(body)
        headers = {"Accept": JSON_CONTENT}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.base_url + path, data=data, params=params, headers=headers
        ) as response:
            raw = await response.read()
            try:
                parsed: Any = orjson.loads(raw) if raw else {}
            except orjson.JSONDecodeError:
                parsed = raw.decode(errors="replace")
            if response.status >= 300:
                raise ApiError(method, path, response.status, parsed)
            return parsed if isinstance(parsed, dict) else {}

    async def get(self, path: str, params: dict[str, str] | None = None) -> JsonObject:
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        return await self.request("POST", path, body=body)

    async def patch(self, path: str, body: JsonObject, content_type: str = MERGE_PATCH) -> JsonObject:
        return await self.request("PATCH", path, body=body, content_type=content_type)

    async def delete(self, path: str, body: JsonObject | None = None) -> JsonObject:
        return await self.request("DELETE", path, body=body)


class Informer:
    """List, then watch from the list's resourceVersion; keeps a cache and calls handlers per event.

    A dropped stream resumes from the last resourceVersion seen (bookmarks included); a 410 (HTTP
    status or ERROR event) or a failed resume lists again, and objects that vanished in between are
    reported as DELETED so handlers never miss a deletion.
    """

    def __init__(
        self,
        http: KubeHttp,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> None:
        self.http = http
        self.path = path
        self.cache: dict[str, JsonObject] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        self._handlers: list[EventHandler] = []
        self._params: dict[str, str] = {}
        if label_selector:
            self._params["labelSelector"] = label_selector
        if field_selector:
            self._params["fieldSelector"] = field_selector

    def add_handler(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    async def _dispatch(self, event_type: str, obj: JsonObject) -> None:
        for handler in self._handlers:
            result = handler(event_type, obj)
            if result is not None:
                await result

    async def run(self) -> None:
        failures = 0
        while True:
            try:
                if not self.resource_version:
                    await self._relist()
                await self._watch_once()
                failures = 0
            except WatchExpired:
                log.info("watch expired, listing again", path=self.path)
                self.resource_version = ""
            except Exception as exc:
                failures += 1
                delay = min(RETRY_DELAY_SECONDS * 2 ** min(failures, 5), MAX_RETRY_DELAY_SECONDS)
                expected = isinstance(exc, aiohttp.ClientError | ApiError | TimeoutError | ConnectionError)
                if expected:
                    log.info("watch interrupted", path=self.path, error=str(exc), retry_in=delay)
                else:
                    # A bug in a handler must not end the watch for good: report it and carry on.
                    log.exception("watch failed", path=self.path, retry_in=delay)
                await asyncio.sleep(delay)

    async def _relist(self) -> None:
        listing = await self.http.get(self.path, params=self._params)
        items = listing.get("items") or []
        fresh = {object_key(item): item for item in items}
        vanished = [key for key in self.cache if key not in fresh]
        previous = self.cache
        self.cache = fresh
        self.resource_version = str(listing.get("metadata", {}).get("resourceVersion", ""))
        for key in vanished:
            await self._dispatch("DELETED", previous[key])
        for key, item in fresh.items():
            old = previous.get(key)
            if old is None:
                await self._dispatch("ADDED", item)
            elif old.get("metadata", {}).get("resourceVersion") != item["metadata"].get("resourceVersion"):
                await self._dispatch("MODIFIED", item)
        self.synced.set()

    async def _watch_once(self) -> None:
        params = dict(self._params)
        params.update(
            watch="true",
            resourceVersion=self.resource_version,
            allowWatchBookmarks="true",
            timeoutSeconds=str(WATCH_TIMEOUT_SECONDS),
        )
        url = self.http.base_url + self.path
        # A stream that stays silent for too long (no event, no bookmark) is treated as dead and resumed.
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=WATCH_INACTIVITY_SECONDS)
        async with self.http.session.get(
            url, params=params, headers={"Accept": JSON_CONTENT}, timeout=timeout
        ) as response:
            if response.status == 410:
                raise WatchExpired()
            if response.status >= 300:
                raise ApiError("GET", self.path, response.status, await response.text())
            # Whole chunks split once: the server batches a burst of events into one write.
            partial = b""
            async for chunk in response.content.iter_any():
                lines = (partial + chunk if partial else chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    if line and not line.isspace():
                        await self._handle_event(orjson.loads(line))
            if partial and not partial.isspace():
                await self._handle_event(orjson.loads(partial))

    async def _handle_event(self, event: JsonObject) -> None:
        event_type = event.get("type", "")
        obj = event.get("object") or {}
        if event_type == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired()
            raise ApiError("WATCH", self.path, int(obj.get("code", 500)), obj)
        new_rv = obj.get("metadata", {}).get("resourceVersion")
        if new_rv:
            self.resource_version = str(new_rv)
        if event_type == "BOOKMARK":
            return
        key = object_key(obj)
        if event_type == "DELETED":
            self.cache.pop(key, None)
        else:
            self.cache[key] = obj
        await self._dispatch(event_type, obj)


SyncFunction = Callable[[str], Awaitable[None]]


class WorkQueue:
    """Keys to reconcile, each at most once in the queue; failed keys come back after a delay.

    As client-go's workqueue, a key is never synced by two workers at once: one added while it is
    being synced waits until that sync is over (a second worker would act on the same stale cache,
    creating a pod's claim twice, say).
    """

    def __init__(self, sync: SyncFunction, *, workers: int = 4, name: str = "work") -> None:
        self._sync = sync
        self._workers = workers
        self._name = name
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._pending: set[str] = set()
        self._processing: set[str] = set()
        self._failures: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._timers: set[asyncio.TimerHandle] = set()

    def add(self, key: str) -> None:
        if key not in self._pending:
            self._pending.add(key)
            if key not in self._processing:
                self._queue.put_nowait(key)

    def add_all(self, keys: Iterable[str]) -> None:
        for key in keys:
            self.add(key)

    def add_after(self, key: str, delay: float) -> None:
        loop = asyncio.get_running_loop()
        handle: asyncio.TimerHandle

        def fire() -> None:
            self._timers.discard(handle)
            self.add(key)

        handle = loop.call_later(delay, fire)
        self._timers.add(handle)

    def start(self) -> None:
        self._tasks = [
            asyncio.create_task(self._work(), name=f"{self._name}-{i}") for i in range(self._workers)
        ]

    async def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    async def _work(self) -> None:
        while True:
            key = await self._queue.get()
            self._pending.discard(key)
            self._processing.add(key)
            try:
                await self._sync(key)
                self._failures.pop(key, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures = self._failures.get(key, 0) + 1
                self._failures[key] = failures
                delay = min(RETRY_DELAY_SECONDS * 2 ** min(failures, 5), MAX_RETRY_DELAY_SECONDS)
                # Conflicts are routine (a cache behind the server); anything else deserves attention.
                report = log.debug if isinstance(exc, ApiError) and exc.status == 409 else log.warning
                report("sync failed, retrying", queue=self._name, key=key, error=str(exc), retry_in=delay)
                self.add_after(key, delay)
            finally:
                self._processing.discard(key)
                if key in self._pending:
                    self._queue.put_nowait(key)


class ObjectController:
    """A controller that reconciles one kind's objects: the informer's changes queue the object's key
    for ``sync`` (one worker); ``start`` runs the watch and the queue, ``stop`` ends both. A deleted
    object is not queued: what it made goes with it through the garbage collector."""

    def __init__(self, informer: Informer, name: str) -> None:
        self.informer = informer
        self.name = name
        self._queue = WorkQueue(self.sync, workers=1, name=name)
        self._task: asyncio.Task[None] | None = None
        informer.add_handler(self._on_object)

    def start(self) -> None:
        self._task = asyncio.create_task(self.informer.run(), name=f"sim-{self.name}-watch")
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_object(self, event_type: str, obj: JsonObject) -> None:
        if event_type != "DELETED":
            self._queue.add(object_key(obj))

    async def sync(self, key: str) -> None:
        raise NotImplementedError
