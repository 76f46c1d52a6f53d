"""The operator process: watches, leader election, the scheduler, status, events, metrics, Kopf.

Start-up order: the API session, then every informer primed from a LIST (so the scheduler never
decides on a partial view: a restarted operator must see every bound pod and allocated claim
first), then the background tasks and the scheduler task, and only then ``kopf.operator`` (tasks
that exist before it starts are not Kopf's to cancel), once the first binding is answered
(``DEFERRED_START_SECONDS``). Shutdown (SIGTERM or the stop flag): stop taking new groups, let
binding cycles finish within the grace period (or unreserve them), write the last statuses, release
the lease, end our tasks, and stop Kopf last. Losing the lease aborts instead: no drain, no further
write, exit code 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import aiohttp

from lockstep.config import Settings
from lockstep.controller.core import SchedulerCore
from lockstep.controller.owner_gangs import OwnerWatches
from lockstep.controller.status import AttemptSummary, GroupMembers, GroupRef, StatusWriter
from lockstep.kube.client import (
    COMPOSITE_POD_GROUPS,
    COSCHEDULING_POD_GROUPS,
    CSI_NODES,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STORAGE_CLASSES,
    UPSTREAM_POD_GROUP_KINDS,
    VOLCANO_POD_GROUPS,
    ApiError,
    ConnectionInfo,
    KubeClient,
    ResourceKind,
    wait_for_server,
)
from lockstep.kube.credentials import load_connection_info
from lockstep.kube.events import EventRecorder
from lockstep.kube.lease import LeaderElector, LeaseNamespaceMissingError
from lockstep.kube.watch import EventSink, RawWatch
from lockstep.logging import get_logger
from lockstep.metrics import Metrics, listen_for_scrapes, serve_metrics
from lockstep.scheduler.framework import PodInfo

if TYPE_CHECKING:
    from aiohttp import web

log = get_logger("lockstep.controller")


class MissingApiError(RuntimeError):
    """The cluster does not serve a resource lockstep needs (e.g. the PodGroup CRD is missing)."""


class WatchMode(StrEnum):
    """How a kind is watched. Every kind defaults to RAW. bench/pod_watch.py measured operator CPU per
    pod: pods 0.75 ms raw against 2.8 ms through Kopf (1,000 pods, 20 nodes); with a template claim
    per pod, claims raw 3.9-4.3 ms against 4.7-5.2 ms through Kopf (500 pods, 100 nodes, a loaded
    2-core machine). The other kinds are not low-volume either: a PodGroup gets a watch event per
    status write, and Kopf's own LIST of 5,000 nodes, 0.6 ms per event, plus the re-list that catches
    deletions Kopf never reports, landed after start-up, while the first gangs were scheduled."""

    RAW = "raw"  # list+watch on the shared aiohttp session, parsed with orjson
    KOPF = "kopf"  # a Kopf on.event handler


# Connections of the client that writes PodGroup statuses and Events (16 status writers, 8 event
# writers, room for the re-reads after a conflict).
REPORTING_CONNECTIONS = 32

# Kopf's own start takes the event loop for a while: started together with the scheduler, it held the
# first placement's bindings back (0.07 s from placement to binding without it, 0.3 s with it, bench/
# startup.py on a loaded machine). Unless it watches a kind, it starts once the first binding is
# answered, or this long after scheduling could start; so does the HTTP server of /metrics (its port
# is bound before). Neither Kopf nor aiohttp.web is imported before then.
DEFERRED_START_SECONDS = 1.0

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

# The cyclic collector's thresholds once an operator owning its process has applied its initial
# lists (Python's are 700, 10, 10: a young collection every 700 allocations).
COLLECTOR_THRESHOLDS = (50_000, 20, 10)


@contextlib.contextmanager
def initial_lists_heap() -> Iterator[None]:
    """Apply the initial lists without the cyclic collector, then freeze what they built (the caches
    of every node and pod, most of it for good) out of every later collection, which then walks
    only what changed since. With Python's thresholds the collector took a third of the CPU of
    applying the lists at 1,000 nodes / 5,000 pods and most of it at 5,000 / 20,000, walking those
    caches again and again; the lists leave no garbage cycles to collect (bench/ingest.py). For an
    operator that owns its process only (on its main thread): not for tests or the demo."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    gc.disable()
    try:
        yield
        gc.freeze()
    finally:
        gc.set_threshold(*COLLECTOR_THRESHOLDS)
        gc.enable()


def route_stop_signals(stop: asyncio.Event, on_signal: Callable[[], None] | None = None) -> None:
    """SIGTERM/SIGINT set our stop flag, so that the scheduler drains before Kopf stops (in the main
    thread only, where signals arrive). Kopf installs handlers of its own as it starts, which would
    stop it at once and cancel our binding cycles 5 s later: the loop keeps ours instead. Taking them
    back once Kopf said it was ready left a window in which a SIGTERM went to Kopf. ``on_signal``
    runs first, in the signal's own callback: the flag's waiter resumes some loop iterations later."""
    if threading.current_thread() is not threading.main_thread():
        return
    loop = asyncio.get_running_loop()
    add_signal_handler = loop.add_signal_handler

    def stop_now() -> None:
        if on_signal is not None:
            on_signal()
        stop.set()

    for signum in STOP_SIGNALS:
        add_signal_handler(signum, stop_now)

    def keep_ours(signum: int, callback: Callable[..., object], *args: Any) -> None:
        if signum not in STOP_SIGNALS:
            add_signal_handler(signum, callback, *args)

    setattr(loop, "add_signal_handler", keep_ours)  # noqa: B010 - mypy refuses assigning to a method


@dataclass(slots=True)
class RuntimeOptions:
    identity: str = ""
    pod_watch: WatchMode = WatchMode.RAW
    claim_watch: WatchMode = WatchMode.RAW
    other_watch: WatchMode = WatchMode.RAW
    shutdown_grace_seconds: float = 20.0
    status_flush_interval: float = 0.05
    status_retry_seconds: float = 1.0
    watch_retry_delay: float = 0.5
    resync_delay_seconds: float = 2.0
    # how often API discovery is asked again whether upstream's and other schedulers' PodGroups are
    # served (or still are)
    discovery_interval_seconds: float = 30.0


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def liveness_url(address: str) -> str | None:
    """Kopf's liveness endpoint for ``host:port``. Port 0 means any free port: Kopf itself would
    read it as "no port" and bind to 80, so a free one is picked here."""
    if not address:
        return None
    host, _, port = address.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"--health-bind-address {address!r}: expected host:port")
    host = host or "0.0.0.0"
    if int(port) == 0:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((host, 0))
            port = str(probe.getsockname()[1])
    return f"http://{host}:{port}/healthz"


class Operator:
    """One lockstep operator instance. ``run`` returns when stopped (exit code)."""

    def __init__(
        self,
        settings: Settings,
        connection: ConnectionInfo,
        options: RuntimeOptions | None = None,
        *,
        reload_credentials: Callable[[], Awaitable[ConnectionInfo]] | None = None,
    ) -> None:
        self.settings = settings
        self.connection = connection
        # Re-reads the credentials (rotated service-account tokens) on 401s and Kopf re-logins.
        self.reload_credentials = reload_credentials
        self.options = options or RuntimeOptions()
        self.identity = self.options.identity or default_identity()
        self.metrics = Metrics()
        self.members = GroupMembers()
        self.leading = asyncio.Event()
        self.stopped_leading = False
        self.failed = False
        self.aborted = False
        self.started = asyncio.Event()
        self.first_bound = asyncio.Event()
        self.client: KubeClient | None = None
        self.core: SchedulerCore | None = None
        self.status: StatusWriter | None = None
        self.events: EventRecorder | None = None
        self.elector: LeaderElector | None = None
        self.metrics_port: int | None = None
        self.health_url: str | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._lead_task: asyncio.Task[Any] | None = None
        self._writers: list[asyncio.Task[Any]] = []
        # the watches of kinds followed while API discovery finds them served, by what they watch
        self._discovered: dict[str, asyncio.Task[Any]] = {}
        self._owner_watches: OwnerWatches | None = None
        self._metrics_runner: web.AppRunner | None = None
        self._signalled_at: float | None = None

    # --- ingest: one synchronous call per watch event ------------------------------------------------

    def _on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        assert self.core is not None and self.status is not None
        pod = self.core.owner_gangs.on_pod(event_type, pod)  # the label of a gang inferred from its owner
        for key in self.members.observe(event_type, pod):
            self.status.mark(key)
        self.core.on_pod(event_type, pod)

    def _on_bound(self, pod: PodInfo, node_name: str) -> None:
        # The binding's 201 counts at once: the status need not wait for the pod's watch event, and a
        # shutdown right after the last binding still writes every bound member.
        assert self.status is not None
        self.first_bound.set()
        key = self.members.bound(pod.uid, node_name)
        if key is not None:
            self.status.mark(key)

    def _on_podgroup(self, event_type: str, podgroup: dict[str, Any]) -> None:
        assert self.core is not None and self.status is not None
        self.status.observe_podgroup(event_type, podgroup)
        self.core.on_podgroup(event_type, podgroup)

    def _sinks(self) -> dict[ResourceKind, EventSink]:
        assert self.core is not None
        return {
            PODS: self._on_pod,
            POD_GROUPS: self._on_podgroup,
            NODES: self.core.on_node,
            NAMESPACES: self.core.on_namespace,
            RESOURCE_CLAIMS: self.core.on_claim,
            RESOURCE_SLICES: self.core.on_slice,
            DEVICE_CLASSES: self.core.on_device_class,
            RESOURCE_CLAIM_TEMPLATES: self.core.on_claim_template,
            PERSISTENT_VOLUMES: self.core.on_volume,
            PERSISTENT_VOLUME_CLAIMS: self.core.on_volume_claim,
            STORAGE_CLASSES: self.core.on_storage_class,
            CSI_NODES: self.core.on_csinode,
            POD_DISRUPTION_BUDGETS: self.core.on_pdb,
            PRIORITY_CLASSES: self.core.on_priority_class,
        }

    async def _login(self) -> ConnectionInfo:
        if self.reload_credentials is None:
            return self.connection
        return await self.reload_credentials()

    def _attempt(self, key: GroupRef) -> AttemptSummary | None:
        return self.core.attempt_summary(key) if self.core is not None else None

    def probe(self) -> Mapping[str, Any]:
        core = self.core
        return {
            "leader": self.leading.is_set(),
            "queue_depth": core.queue_depth() if core is not None else 0,
            "last_successful_cycle": (
                datetime.fromtimestamp(core.last_cycle_at, UTC).isoformat()
                if core is not None and core.last_cycle_at
                else None
            ),
        }

    # --- lifecycle ------------------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> int:
        self._stop = stop
        client = KubeClient(
            self.connection,
            on_response=self.metrics.observe_response,
            refresh_credentials=self.reload_credentials,
        )
        self.client = client
        # PodGroup statuses and Events get connections of their own: behind a burst of bindings and
        # claim writes in the shared pool they waited seconds (measured: no status write for 8 s
        # while 400 gangs with template claims bound).
        reporting = KubeClient(
            self.connection,
            on_response=self.metrics.observe_response,
            refresh_credentials=self.reload_credentials,
            connection_limit=REPORTING_CONNECTIONS,
        )
        metrics_socket = None
        kopf_task: asyncio.Task[None] | None = None
        kopf_stop = asyncio.Event()
        try:
            await wait_for_server(client)
            self._build(client, reporting)
            metrics_socket = listen_for_scrapes(self.settings.metrics_bind_address)
            if metrics_socket is not None:
                self.metrics_port = metrics_socket.getsockname()[1]
            # owners before pods: a restarted operator knows the gang of every bound pod
            assert self.core is not None
            self._owner_watches = OwnerWatches(
                client,
                self.core.owner_gangs,
                list(self.settings.namespaces) or [None],
                self._spawn,
                self.options.watch_retry_delay,
            )
            await self._owner_watches.discover()
            # the kinds API discovery decides on are listed while the informers' lists are
            kopf_sinks, _ = await asyncio.gather(self._start_informers(), self._follow_served_kinds())
            self._spawn(self._rediscover(), "discovery")
            self.health_url = liveness_url(self.settings.health_bind_address)
            route_stop_signals(stop, self.stop_placing)
            self._lead_task = self._spawn(self._lead(), "leader-election")
            self._spawn(self._schedule_while_leading(), "scheduler")
            if metrics_socket is not None:
                self._spawn(self._serve_metrics(metrics_socket, stop), "metrics")
            self.started.set()
            kopf_ready = asyncio.Event()
            self._spawn(self._resync(kopf_ready, kopf_sinks), "resync")
            # Kopf cancels every task created after it started when it stops, so the scheduler is
            # drained first and Kopf stopped last.
            kopf_task = asyncio.create_task(
                self._kopf(kopf_sinks, kopf_stop, kopf_ready), name="lockstep-kopf"
            )
            stop_requested = asyncio.create_task(stop.wait(), name="lockstep-stop-flag")
            await asyncio.wait({kopf_task, stop_requested}, return_when=asyncio.FIRST_COMPLETED)
            stop_requested.cancel()
            if kopf_task.done() and not kopf_task.cancelled() and kopf_task.exception() is not None:
                log.error("kopf stopped with an error", error=repr(kopf_task.exception()))
                self.failed = True
            if self.aborted:
                if self.core is not None:
                    # No new cycle while close() waits for the cancelled ones: its bindings would go on.
                    self.core.stop_accepting()
                    await self.core.scheduler.close()
            else:
                await self._shutdown()
        finally:
            closing = time.monotonic()
            steps: dict[str, float] = {}
            # Our tasks end first: Kopf waits up to 5 s for any task created after it started.
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._tasks = []
            steps["tasks_seconds"] = time.monotonic() - closing
            if kopf_task is not None and not kopf_task.done():
                # Its stop flag first (cancelled without it, Kopf SIGKILLs its process), then cancelled:
                # stopped gracefully, Kopf waits 5 s for every task it has not seen finish, and stopped
                # while it starts, its own API scans, retrying against closed connections, are such.
                kopf_stop.set()
                kopf_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, TimeoutError, Exception):
                    await asyncio.wait_for(kopf_task, 10)
            steps["kopf_seconds"] = time.monotonic() - closing - sum(steps.values())
            if self._metrics_runner is not None:
                await self._metrics_runner.cleanup()
            if metrics_socket is not None:
                metrics_socket.close()
            await client.close()
            await reporting.close()
            steps["sessions_seconds"] = time.monotonic() - closing - sum(steps.values())
            log.info("closed", **{step: round(seconds, 3) for step, seconds in steps.items()})
        return 1 if self.stopped_leading or self.failed else 0

    def _build(self, client: KubeClient, reporting: KubeClient) -> None:
        self.events = EventRecorder(reporting, self.settings.scheduler_name)
        self.core = SchedulerCore(self.settings, client, self.events, self.metrics)
        self.status = StatusWriter(
            reporting,
            self.members,
            attempt_of=self._attempt,
            reservation_of=self.core.reservation_status,
            flush_interval=self.options.status_flush_interval,
            retry_delay=self.options.status_retry_seconds,
            on_write=lambda result: self.metrics.podgroup_status_writes.labels(result).inc(),
        )
        self.core.on_attempt = self.status.mark
        self.core.on_bound = self._on_bound
        self.core.owner_gangs.replay = self._on_pod
        status = self.status
        self.core.on_podgroup_written = lambda podgroup: status.observe_podgroup("MODIFIED", podgroup)

    async def _start_informers(self) -> dict[ResourceKind, TrackedSink]:
        """Prime the Kopf-watched kinds and start the raw watches; return the Kopf-watched sinks."""
        sinks = self._sinks()
        per_pod = {PODS: self.options.pod_watch, RESOURCE_CLAIMS: self.options.claim_watch}
        raw_kinds = [kind for kind in sinks if per_pod.get(kind, self.options.other_watch) is WatchMode.RAW]
        kopf_sinks = {kind: TrackedSink(sink) for kind, sink in sinks.items() if kind not in raw_kinds}
        await self._prime(kopf_sinks)
        await self._start_raw_watches({kind: sinks[kind] for kind in raw_kinds})
        return kopf_sinks

    async def _after_first_binding(self, stop: asyncio.Event, imports: str) -> bool:
        """Wait until the first binding is answered (at most ``DEFERRED_START_SECONDS``), then import
        module ``imports`` on a worker thread: the bindings in flight keep the event loop meanwhile.
        False if ``stop`` was set in the meantime."""
        waits = {asyncio.ensure_future(self.first_bound.wait()), asyncio.ensure_future(stop.wait())}
        try:
            await asyncio.wait(waits, timeout=DEFERRED_START_SECONDS, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waits:
                waiter.cancel()
        if not stop.is_set():
            await asyncio.to_thread(importlib.import_module, imports)
        return not stop.is_set()

    async def _serve_metrics(self, listening: socket.socket, stop: asyncio.Event) -> None:
        if await self._after_first_binding(stop, "aiohttp.web"):
            self._metrics_runner = await serve_metrics(self.metrics, listening)

    async def _kopf(
        self, sinks: Mapping[ResourceKind, TrackedSink], stop: asyncio.Event, ready: asyncio.Event
    ) -> None:
        if sinks:  # Kopf delivers some kind's watch events: no deferral
            await asyncio.to_thread(importlib.import_module, "lockstep.controller.handlers")
        elif not await self._after_first_binding(stop, "lockstep.controller.handlers"):
            return
        import kopf

        from lockstep.controller.handlers import build_registry, build_settings

        # Kopf SIGKILLs the process when it is cancelled without its stop flag; only a process of
        # its own may be killed that way, never a test or demo hosting it.
        in_main_thread = threading.current_thread() is threading.main_thread()
        kopf_settings = build_settings(
            self.settings.scheduler_name,
            exit_timeout=self.options.shutdown_grace_seconds + 10 if in_main_thread else None,
            watch_pods_with_kopf=PODS in sinks,
        )
        namespaces = self.settings.namespaces
        await kopf.operator(
            registry=build_registry(self._login, sinks, self.probe),
            settings=kopf_settings,
            standalone=True,
            clusterwide=not namespaces,
            namespaces=namespaces,
            liveness_endpoint=self.health_url,
            stop_flag=stop,
            ready_flag=ready,
        )

    def _spawn(self, coroutine: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine, name=f"lockstep-{name}")
        task.add_done_callback(self._task_done)
        self._tasks.append(task)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            if isinstance(error, LeaseNamespaceMissingError):
                log.error("cannot start", error=str(error))
            else:
                log.error("background task failed, stopping", task=task.get_name(), error=repr(error))
            self.failed = True
            if self._stop is not None:
                self._stop.set()

    async def _list_all(self, kind: ResourceKind) -> list[dict[str, Any]]:
        """Every object of ``kind`` lockstep watches (paged; per namespace when restricted)."""
        assert self.client is not None
        items: list[dict[str, Any]] = []
        namespaces: list[str | None] = list(self.settings.namespaces) if kind.namespaced else []
        selector = f"spec.schedulerName={self.settings.scheduler_name}" if kind is PODS else None
        for namespace in namespaces or [None]:
            continue_token: str | None = None
            while True:
                try:
                    page = await self.client.list(
                        kind, namespace, field_selector=selector, limit=500, continue_token=continue_token
                    )
                except ApiError as exc:
                    if exc.not_found:
                        raise _missing_api(kind) from exc
                    raise
                for obj in page.get("items") or ():
                    obj.setdefault("apiVersion", kind.api_version)
                    obj.setdefault("kind", kind.kind)
                    items.append(obj)
                continue_token = (page.get("metadata") or {}).get("continue") or None
                if not continue_token:
                    break
        return items

    async def _prime(self, sinks: Mapping[ResourceKind, TrackedSink]) -> None:
        """LIST every Kopf-watched kind once before scheduling starts, so the first cycle sees the
        whole cluster (Kopf gives no signal when its initial listing is done)."""

        async def prime(kind: ResourceKind, sink: TrackedSink) -> None:
            for obj in await self._list_all(kind):
                sink("ADDED", obj)

        await asyncio.gather(*(prime(kind, sink) for kind, sink in sinks.items()))

    async def _resync(self, kopf_ready: asyncio.Event, sinks: Mapping[ResourceKind, TrackedSink]) -> None:
        """Once Kopf runs, LIST again: an object deleted between the priming LIST and Kopf's own
        initial LIST is never reported by Kopf, so it is reported DELETED here."""
        await kopf_ready.wait()
        pending = dict(sinks)
        while pending:
            await asyncio.sleep(self.options.resync_delay_seconds)
            for kind, sink in list(pending.items()):
                known = set(sink.keys)
                try:
                    present = {_object_key(obj) for obj in await self._list_all(kind)}
                except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                    log.warning("resync list failed, retrying", resource=kind.plural, error=str(exc))
                    continue
                for key in known - present:
                    namespace, _, name = key.partition("/")
                    sink("DELETED", {"metadata": {"namespace": namespace or None, "name": name}})
                del pending[kind]

    async def _start_raw_watches(self, sinks: Mapping[ResourceKind, EventSink]) -> None:
        """Start the raw watches and wait for their initial lists. Besides the kinds in ``sinks``,
        bound pods of other schedulers are always watched (cluster-wide): they use node capacity."""
        assert self.client is not None and self.core is not None
        watches: list[tuple[ResourceKind, EventSink, str | None, str | None]] = []
        for kind, sink in sinks.items():
            namespaces: list[str | None] = list(self.settings.namespaces) if kind.namespaced else []
            selector = f"spec.schedulerName={self.settings.scheduler_name}" if kind is PODS else None
            watches += [(kind, sink, namespace, selector) for namespace in namespaces or [None]]
        foreign = f"spec.schedulerName!={self.settings.scheduler_name},spec.nodeName!="
        watches.append((PODS, self.core.on_pod, None, foreign))
        informers = [
            RawWatch(
                self.client,
                kind,
                _with_kind(kind, sink),
                namespace=namespace,
                field_selector=selector,
                retry_delay=self.options.watch_retry_delay,
            )
            for kind, sink, namespace, selector in watches
        ]

        async def sync(watch: RawWatch) -> None:
            try:
                await watch.sync()
            except ApiError as exc:
                if exc.not_found:
                    raise _missing_api(watch.kind) from exc
                raise

        with initial_lists_heap():
            await asyncio.gather(*(sync(watch) for watch in informers))
        for watch in informers:
            self._spawn(watch.run(), f"watch-{watch.kind.plural}")

    def _served_kinds(self) -> list[tuple[str, tuple[ResourceKind, ...], EventSink]]:
        """What API discovery decides to watch: upstream's PodGroups in the newest version served
        (v1beta1 on 1.37, v1alpha2 on 1.36), and each other scheduler's PodGroup whose CRD is
        installed. A kind not served costs one discovery request per interval, nothing else."""
        assert self.core is not None
        dialects = self.core.dialects
        return [
            ("upstream PodGroups", UPSTREAM_POD_GROUP_KINDS, self.core.on_upstream_podgroup),
            # rbac: list compositepodgroups.scheduling.k8s.io
            # rbac: watch compositepodgroups.scheduling.k8s.io
            ("CompositePodGroups", (COMPOSITE_POD_GROUPS,), self.core.on_composite_podgroup),
            ("coscheduling PodGroups", (COSCHEDULING_POD_GROUPS,), TrackedSink(dialects.on_coscheduling)),
            ("Volcano PodGroups", (VOLCANO_POD_GROUPS,), TrackedSink(dialects.on_volcano)),
        ]

    async def _follow_served_kinds(self) -> None:
        await asyncio.gather(
            *(self._follow_served(name, kinds, sink) for name, kinds, sink in self._served_kinds())
        )

    async def _follow_served(self, name: str, kinds: tuple[ResourceKind, ...], sink: EventSink) -> None:
        """Watch the first of ``kinds`` the cluster serves, while it does. No flag: API discovery
        decides, at start and every ``discovery_interval_seconds``; a watch whose kind stops being
        served ends, and the next discovery follows what is served then."""
        assert self.client is not None
        running = self._discovered.get(name)
        if running is not None and not running.done():
            return
        kind = await self.client.first_served(kinds)
        if kind is None:
            return
        namespaces: list[str | None] = list(self.settings.namespaces) or [None]
        watches = [
            RawWatch(
                self.client,
                kind,
                _with_kind(kind, sink),
                namespace=namespace,
                retry_delay=self.options.watch_retry_delay,
            )
            for namespace in namespaces
        ]
        try:
            await asyncio.gather(*(watch.sync() for watch in watches))
        except ApiError as exc:
            if exc.not_found:  # gone again between discovery and the list
                return
            raise
        log.info(f"watching {name}", api=kind.api_version)

        async def follow() -> None:
            try:
                await asyncio.gather(*(watch.run() for watch in watches))
            except ApiError as exc:
                if not exc.not_found:
                    raise
                log.info(f"{name} no longer served", api=kind.api_version)

        self._discovered[name] = self._spawn(follow(), f"watch-{name.replace(' ', '-').lower()}")

    async def _rediscover(self) -> None:
        while True:
            await asyncio.sleep(self.options.discovery_interval_seconds)
            try:
                await self._follow_served_kinds()
                if self._owner_watches is not None:
                    await self._owner_watches.discover()
            except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
                log.warning("API discovery failed, retrying", error=str(exc))

    async def _lead(self) -> None:
        settings = self.settings
        if not settings.leader_elect:
            self._became_leader()
            return
        assert self.client is not None
        self.elector = LeaderElector(
            self.client,
            namespace=settings.resolved_lease_namespace(),
            name=settings.lease_name,
            identity=self.identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            on_started_leading=self._became_leader,
            on_stopped_leading=self._lost_leadership,
        )
        await self.elector.run()

    def abort(self) -> None:
        """Stop now, as a crash would: no drain, no status flush, no lease release."""
        self.aborted = True
        if self._stop is not None:
            self._stop.set()

    def stop_placing(self) -> None:
        """The stop is asked for (SIGTERM): no new placement from here on, before the stop flag is
        set. Under load the flag's waiter resumed tens of ms later, and every gang placed meanwhile
        was only withdrawn by the drain."""
        self._signalled_at = time.monotonic()
        if self.core is not None:
            self.core.stop_accepting()

    def _became_leader(self) -> None:
        self.metrics.is_leader.set(1)
        self.leading.set()

    def _lost_leadership(self) -> None:
        # The in-memory assumptions of a former leader cannot be trusted once another process may
        # have scheduled: exit and let the restart rebuild everything from the API.
        self.metrics.is_leader.set(0)
        self.stopped_leading = True
        self.leading.clear()
        for writer in self._writers:
            writer.cancel()  # another process may lead now: not one more write from this one
        if self.core is not None:
            self.core.stop_accepting()
        self.abort()  # binding cycles in flight are cancelled, not drained

    async def _schedule_while_leading(self) -> None:
        """Followers keep their caches warm and write nothing: status, events and scheduling start
        with leadership."""
        await self.leading.wait()
        assert self.core is not None and self.status is not None and self.events is not None
        log.info("scheduling", identity=self.identity, scheduler=self.settings.scheduler_name)
        self.core.start_leading()
        self._writers = [
            self._spawn(self.status.run(), "status-writer"),
            self._spawn(self.status.refresh_queue_positions(), "queue-positions"),
            self._spawn(self.events.run(), "event-recorder"),
        ]
        await self.core.run()

    async def _shutdown(self) -> None:
        """Stop taking new groups, finish or withdraw binding cycles, flush statuses and events."""
        started = time.monotonic()
        grace = self.options.shutdown_grace_seconds

        def left() -> float:
            return max(0.5, grace - (time.monotonic() - started))

        steps: dict[str, float] = {}
        writing = self.leading.is_set() and self.status is not None and self.events is not None
        # The statuses already due are written while the last bindings land (bindings go first on
        # the client's connections); what those bindings change is written by the second flush.
        early = asyncio.ensure_future(self.status.flush()) if writing and self.status is not None else None
        if self.core is not None:
            self.core.stop_accepting()
            await self.core.drain(grace)
        steps["drain_seconds"] = time.monotonic() - started
        if writing and self.status is not None and self.events is not None:
            # Every status that differs from the API but for what the next leader writes anyway
            # (status.py ``_hold``), then every queued Event, within what is left of the grace period.
            try:
                await asyncio.wait_for(self.status.flush(), left())
            except TimeoutError:
                log.warning("podgroup statuses still unwritten at the end of the grace period")
            steps["status_flush_seconds"] = time.monotonic() - started - sum(steps.values())
            try:
                await asyncio.wait_for(self.events.flush(), left())
            except TimeoutError:
                log.warning("events still unwritten at the end of the grace period")
            steps["event_flush_seconds"] = time.monotonic() - started - sum(steps.values())
        if early is not None:
            early.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await early
        if self._lead_task is not None:
            self._lead_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, LeaseNamespaceMissingError):
                await self._lead_task
        if self.elector is not None and not self.stopped_leading:
            await self.elector.release()
        steps["release_seconds"] = time.monotonic() - started - sum(steps.values())
        if self._signalled_at is not None:
            steps["signal_seconds"] = started - self._signalled_at
        log.info(
            "stopped",
            identity=self.identity,
            seconds=round(time.monotonic() - started, 3),
            **{step: round(seconds, 3) for step, seconds in steps.items()},
        )


def _missing_api(kind: ResourceKind) -> MissingApiError:
    """What a 404 on a LIST means (listing an unknown namespace is empty, not 404)."""
    return MissingApiError(
        f"the API server does not serve {kind.plural}.{kind.group or 'core'}/{kind.version}"
        + (" (install crds/ first)" if kind is POD_GROUPS else "")
    )


def _object_key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or ''}/{meta.get('name')}"


class TrackedSink:
    """An event sink that remembers which objects it has been told exist, and logs (instead of
    raising) when one object cannot be applied."""

    def __init__(self, sink: EventSink) -> None:
        self.sink = sink
        self.keys: set[str] = set()

    def __call__(self, event_type: str, obj: dict[str, Any]) -> None:
        key = _object_key(obj)
        if event_type == "DELETED":
            self.keys.discard(key)
        else:
            self.keys.add(key)
        try:
            self.sink(event_type, obj)
        except Exception:
            log.exception("watch event not applied", kind=obj.get("kind"), object=key)


def _with_kind(kind: ResourceKind, sink: EventSink) -> EventSink:
    """Watch events of a list carry no apiVersion/kind per item; models expect them."""

    def deliver(event_type: str, obj: dict[str, Any]) -> None:
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        sink(event_type, obj)

    return deliver


class OperatorThread:
    """An operator on its own thread and event loop, for tests, ``lockstep demo`` and benchmarks.

    Kopf treats every task of its event loop as its own and cancels them when it stops, so an
    operator must not share a loop with a simulated cluster or with another operator. The blocking
    methods are meant for ``asyncio.to_thread`` when called from async code."""

    def __init__(
        self,
        settings: Settings,
        *,
        connection: ConnectionInfo | None = None,
        options: RuntimeOptions | None = None,
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.options = options or RuntimeOptions()
        self.operator: Operator | None = None
        self.exit_code: int | None = None
        self.error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._runner: asyncio.Task[int] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="lockstep-operator", daemon=True)

    def start(self, ready_seconds: float = 30.0) -> OperatorThread:
        """Start and return once the informers are primed and the tasks run."""
        self._thread.start()
        if not self._ready.wait(ready_seconds):
            self.kill()
            raise TimeoutError(f"operator did not start within {ready_seconds}s")
        if self.error is not None:
            raise RuntimeError(f"operator failed to start: {self.error!r}") from self.error
        return self

    def stop(self, wait_seconds: float = 30.0) -> int | None:
        """Graceful stop, as on SIGTERM; returns the exit code."""
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            if self.operator is not None:
                self._loop.call_soon_threadsafe(self.operator.stop_placing)
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(wait_seconds)
        return self.exit_code

    def kill(self, wait_seconds: float = 10.0) -> None:
        """Abrupt stop: no drain, no status flush, no lease release (what SIGKILL leaves behind)."""
        if self._loop is not None and self.operator is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self.operator.abort)
        self._thread.join(wait_seconds)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    @property
    def native_thread_id(self) -> int | None:
        """The OS thread id (for per-thread CPU accounting in benchmarks)."""
        return self._thread.native_id

    def _main(self) -> None:
        try:
            asyncio.run(self._run())
        except BaseException as exc:  # reported through start() / error
            self.error = self.error or exc
        finally:
            self._ready.set()

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        kubeconfig = self.settings.kubeconfig
        reload = None if self.connection is not None else lambda: load_connection_info(kubeconfig)
        info = self.connection or await load_connection_info(kubeconfig)
        self.operator = Operator(self.settings, info, self.options, reload_credentials=reload)
        self._runner = asyncio.create_task(self.operator.run(self._stop), name="lockstep-operator")
        started = asyncio.create_task(self.operator.started.wait())
        await asyncio.wait({self._runner, started}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        if self._runner.done() and not self._runner.cancelled() and self._runner.exception() is not None:
            self.error = self._runner.exception()
        self._ready.set()
        with contextlib.suppress(asyncio.CancelledError):
            self.exit_code = await self._runner
