"""A raw list+watch loop (the informer pattern) on the shared aiohttp session, parsed with orjson.

List (paged), deliver every object, then watch from the list's resourceVersion with bookmarks.
A dropped stream resumes from the last seen resourceVersion; 410 Gone (expired version) re-lists
and reports objects that vanished meanwhile as DELETED, so the consumer's cache converges.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import aiohttp

from lockstep.kube.client import ApiError, KubeClient, ResourceKind
from lockstep.logging import get_logger

log = get_logger("lockstep.kube.watch")

EventSink = Callable[[str, dict[str, Any]], None]


def _object_key(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


class RawWatch:
    """Feeds ``sink(event_type, object)`` with ADDED / MODIFIED / DELETED until cancelled."""

    def __init__(
        self,
        client: KubeClient,
        kind: ResourceKind,
        sink: EventSink,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        page_size: int = 500,
        timeout_seconds: int = 300,
        retry_delay: float = 0.5,
        on_synced: Callable[[], None] | None = None,
    ) -> None:
        self.client = client
        self.kind = kind
        self.sink = sink
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.page_size = page_size
        self.timeout_seconds = timeout_seconds
        self.retry_delay = retry_delay
        self.on_synced = on_synced
        self.relists = 0
        self._known: dict[str, str] = {}  # key -> uid of every object delivered and not deleted
        self._synced_at: str | None = None  # the resourceVersion of a :meth:`sync` not yet watched from

    async def sync(self) -> None:
        """The first LIST, delivered before :meth:`run` starts watching from where it ended. Unlike
        the LISTs inside :meth:`run`, its errors reach the caller (a kind the server does not serve
        is a start-up error, not something to retry forever)."""
        self._synced_at = await self._relist()

    async def run(self) -> None:
        synced = False
        while True:
            if self._synced_at is not None:
                resource_version, self._synced_at = self._synced_at, None
            else:
                try:
                    resource_version = await self._relist()
                except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as exc:
                    log.warning("list failed, retrying", resource=self.kind.plural, error=str(exc))
                    await asyncio.sleep(self.retry_delay)
                    continue
            if not synced:
                synced = True
                if self.on_synced is not None:
                    self.on_synced()
            while resource_version:
                opened = asyncio.get_running_loop().time()
                try:
                    resource_version = await self._watch_from(resource_version)
                    if asyncio.get_running_loop().time() - opened < self.retry_delay:
                        # Ended at once: back off instead of reconnecting in a tight loop.
                        await asyncio.sleep(self.retry_delay)
                except ApiError as exc:
                    if not exc.gone:
                        log.warning("watch failed", resource=self.kind.plural, error=str(exc))
                        await asyncio.sleep(self.retry_delay)
                    resource_version = ""
                except (TimeoutError, aiohttp.ClientError, OSError) as exc:
                    log.info("watch stream dropped, resuming", resource=self.kind.plural, error=str(exc))
                    await asyncio.sleep(self.retry_delay)

    def _deliver(self, event_type: str, obj: dict[str, Any]) -> None:
        """One object the consumer cannot digest must not stop the watch for every other one."""
        try:
            self.sink(event_type, obj)
        except Exception:
            log.exception("watch event not applied", resource=self.kind.plural, object=_object_key(obj))

    async def _relist(self) -> str:
        self.relists += 1
        seen: set[str] = set()
        resource_version = ""
        next_page: asyncio.Future[dict[str, Any]] | None = asyncio.ensure_future(self._list_page(None))
        while next_page is not None:
            page = await next_page
            meta = page.get("metadata", {})
            continue_token = meta.get("continue") or None
            # The server prepares the next page while this one is delivered (delivery is the slow part).
            # The request goes out before delivery starts: a task only runs once this one awaits, and
            # delivery never does, so it went out after delivery and the server's ~50-120 ms per page
            # of 500 pods (on 2 busy cores) came on top of every page's delivery (bench/startup.py).
            next_page = asyncio.ensure_future(self._list_page(continue_token)) if continue_token else None
            if next_page is not None:
                try:
                    await asyncio.sleep(0)
                except asyncio.CancelledError:
                    next_page.cancel()
                    raise
            for obj in page.get("items") or ():
                key = _object_key(obj)
                seen.add(key)
                event_type = "MODIFIED" if key in self._known else "ADDED"
                self._known[key] = obj.get("metadata", {}).get("uid", "")
                self._deliver(event_type, obj)
            if next_page is None:
                resource_version = str(meta.get("resourceVersion", ""))
        for key in [k for k in self._known if k not in seen]:
            namespace, _, name = key.partition("/")
            uid = self._known.pop(key)
            self._deliver("DELETED", {"metadata": {"namespace": namespace, "name": name, "uid": uid}})
        return resource_version

    async def _list_page(self, continue_token: str | None) -> dict[str, Any]:
        return await self.client.list(
            self.kind,
            self.namespace,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            limit=self.page_size,
            continue_token=continue_token,
        )

    async def _watch_from(self, resource_version: str) -> str:
        """Stream events; return the resourceVersion to resume from ("" means re-list)."""
        async for event in self.client.watch_stream(
            self.kind,
            self.namespace,
            resource_version=resource_version,
            label_selector=self.label_selector,
            field_selector=self.field_selector,
            timeout_seconds=self.timeout_seconds,
        ):
            event_type = event.get("type")
            obj = event.get("object") or {}
            if event_type == "ERROR":
                if obj.get("code") == 410:
                    return ""
                log.warning("watch error event", resource=self.kind.plural, status=obj)
                return ""
            version = obj.get("metadata", {}).get("resourceVersion")
            if version:
                resource_version = str(version)
            if event_type == "BOOKMARK":
                continue
            key = _object_key(obj)
            if event_type == "DELETED":
                self._known.pop(key, None)
            else:
                self._known[key] = obj.get("metadata", {}).get("uid", "")
            self._deliver(str(event_type), obj)
        return resource_version
