"""The operator process: watches, leader election, the scheduler, status, events, metrics, Kopf.

Start-up order: the API session, then every informer primed from a LIST (so the scheduler never
decides on a partial view: a restarted operator must see every bound pod and allocated claim
first), then the background tasks and the scheduler task, and only then ``kopf.operator`` (tasks
created after it starts would be cancelled by Kopf). Shutdown (SIGTERM or the stop flag): stop
taking new groups, let binding cycles finish within the grace period (or unreserve them), write the
last statuses, release the lease.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Coroutine, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

import kopf

from lockstep.config import Settings
from lockstep.controller.core import SchedulerCore
from lockstep.controller.handlers import build_registry, build_settings
from lockstep.controller.status import AttemptSummary, GroupMembers, GroupRef, StatusWriter
from lockstep.kube.client import (
    DEVICE_CLASSES,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    KubeClient,
    ResourceKind,
    wait_for_server,
)
from lockstep.kube.events import EventRecorder
from lockstep.kube.lease import LeaderElector
from lockstep.kube.watch import EventSink, RawWatch
from lockstep.logging import get_logger
from lockstep.metrics import Metrics, bound_port, start_metrics_server

log = get_logger("lockstep.controller")


class WatchMode(StrEnum):
    RAW = "raw"  # list+watch on the shared aiohttp session, parsed with orjson (the default for pods)
    KOPF = "kopf"  # a Kopf on.event handler


@dataclass(slots=True)
class RuntimeOptions:
    identity: str = ""
    pod_watch: WatchMode = WatchMode.RAW
    other_watch: WatchMode = WatchMode.KOPF
    shutdown_grace_seconds: float = 20.0
    status_flush_interval: float = 0.05
    watch_retry_delay: float = 0.5


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{uuid.uuid4().hex[:6]}"


def liveness_url(address: str) -> str | None:
    if not address:
        return None
    host, _, port = address.rpartition(":")
    return f"http://{host or '0.0.0.0'}:{port}/healthz"


class Operator:
    """One lockstep operator instance. ``run`` returns when stopped (exit code)."""

    def __init__(
        self, settings: Settings, connection: kopf.ConnectionInfo, options: RuntimeOptions | None = None
    ) -> None:
        self.settings = settings
        self.connection = connection
        self.options = options or RuntimeOptions()
        self.identity = self.options.identity or default_identity()
        self.metrics = Metrics()
        self.members = GroupMembers()
        self.leading = asyncio.Event()
        self.stopped_leading = False
        self.started = asyncio.Event()
        self.client: KubeClient | None = None
        self.core: SchedulerCore | None = None
        self.status: StatusWriter | None = None
        self.events: EventRecorder | None = None
        self.elector: LeaderElector | None = None
        self.metrics_port: int | None = None
        self._stop: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._lead_task: asyncio.Task[Any] | None = None

    # --- ingest: one synchronous call per watch event ------------------------------------------------

    def _on_pod(self, event_type: str, pod: dict[str, Any]) -> None:
        assert self.core is not None and self.status is not None
        for key in self.members.observe(event_type, pod):
            self.status.mark(key)
        self.core.on_pod(event_type, pod)

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
            RESOURCE_CLAIMS: self.core.on_claim,
            RESOURCE_SLICES: self.core.on_slice,
            DEVICE_CLASSES: self.core.on_device_class,
            RESOURCE_CLAIM_TEMPLATES: self.core.on_claim_template,
        }

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
        settings = self.settings
        client = KubeClient(self.connection, on_response=self.metrics.observe_response)
        self.client = client
        metrics_runner = None
        try:
            await wait_for_server(client)
            self.events = EventRecorder(client, settings.scheduler_name)
            self.core = SchedulerCore(settings, client, self.events, self.metrics)
            self.status = StatusWriter(
                client,
                self.members,
                attempt_of=self._attempt,
                flush_interval=self.options.status_flush_interval,
                on_write=lambda result: self.metrics.podgroup_status_writes.labels(result).inc(),
            )
            self.core.on_attempt = self.status.mark
            metrics_runner = await start_metrics_server(self.metrics, settings.metrics_bind_address)
            if metrics_runner is not None:
                self.metrics_port = bound_port(metrics_runner)
            sinks = self._sinks()
            raw_kinds = [PODS] if self.options.pod_watch is WatchMode.RAW else []
            if self.options.other_watch is WatchMode.RAW:
                raw_kinds += [kind for kind in sinks if kind is not PODS]
            kopf_sinks = {kind: sink for kind, sink in sinks.items() if kind not in raw_kinds}
            await self._prime(kopf_sinks)
            await self._start_raw_watches({kind: sinks[kind] for kind in raw_kinds})
            self._spawn(self.status.run(), "status-writer")
            self._spawn(self.events.run(), "event-recorder")
            self._lead_task = self._spawn(self._lead(), "leader-election")
            self._spawn(self._schedule_while_leading(), "scheduler")
            self.started.set()
            registry = build_registry(self.connection, kopf_sinks, self.probe)
            kopf_settings = build_settings(
                settings.scheduler_name,
                exit_timeout=self.options.shutdown_grace_seconds + 10,
                watch_pods_with_kopf=PODS in kopf_sinks,
            )
            namespaces = settings.namespaces
            await kopf.operator(
                registry=registry,
                settings=kopf_settings,
                standalone=True,
                clusterwide=not namespaces,
                namespaces=namespaces,
                liveness_endpoint=liveness_url(settings.health_bind_address),
                stop_flag=stop,
            )
            await self._shutdown()
        finally:
            for task in self._tasks:
                task.cancel()
            for task in self._tasks:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            self._tasks = []
            if metrics_runner is not None:
                await metrics_runner.cleanup()
            await client.close()
        return 1 if self.stopped_leading else 0

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
            log.error("background task failed, stopping", task=task.get_name(), error=repr(error))
            if self._stop is not None:
                self._stop.set()

    async def _prime(self, sinks: Mapping[ResourceKind, EventSink]) -> None:
        """LIST every Kopf-watched kind once before scheduling starts, so the first cycle sees the
        whole cluster (Kopf gives no signal when its initial listing is done)."""
        assert self.client is not None
        client = self.client

        async def prime(kind: ResourceKind, sink: EventSink) -> None:
            namespaces: list[str | None] = list(self.settings.namespaces) if kind.namespaced else []
            for namespace in namespaces or [None]:
                continue_token: str | None = None
                while True:
                    field_selector = (
                        f"spec.schedulerName={self.settings.scheduler_name}" if kind is PODS else None
                    )
                    page = await client.list(
                        kind,
                        namespace,
                        field_selector=field_selector,
                        limit=500,
                        continue_token=continue_token,
                    )
                    for obj in page.get("items") or ():
                        obj.setdefault("apiVersion", kind.api_version)
                        obj.setdefault("kind", kind.kind)
                        sink("ADDED", obj)
                    continue_token = (page.get("metadata") or {}).get("continue") or None
                    if not continue_token:
                        break

        await asyncio.gather(*(prime(kind, sink) for kind, sink in sinks.items()))

    async def _start_raw_watches(self, sinks: Mapping[ResourceKind, EventSink]) -> None:
        assert self.client is not None
        synced: list[asyncio.Event] = []
        for kind, sink in sinks.items():
            namespaces: list[str | None] = list(self.settings.namespaces) if kind.namespaced else []
            for namespace in namespaces or [None]:
                done = asyncio.Event()
                synced.append(done)
                watch = RawWatch(
                    self.client,
                    kind,
                    _with_kind(kind, sink),
                    namespace=namespace,
                    field_selector=f"spec.schedulerName={self.settings.scheduler_name}"
                    if kind is PODS
                    else None,
                    retry_delay=self.options.watch_retry_delay,
                    on_synced=done.set,
                )
                self._spawn(watch.run(), f"watch-{kind.plural}")
        await asyncio.gather(*(event.wait() for event in synced))

    async def _lead(self) -> None:
        settings = self.settings
        if not settings.leader_elect:
            self._became_leader()
            return
        assert self.client is not None
        self.elector = LeaderElector(
            self.client,
            namespace=settings.lease_namespace,
            name=settings.lease_name,
            identity=self.identity,
            lease_duration=settings.lease_duration_seconds,
            renew_deadline=settings.renew_deadline_seconds,
            retry_period=settings.retry_period_seconds,
            on_started_leading=self._became_leader,
            on_stopped_leading=self._lost_leadership,
        )
        await self.elector.run()

    def _became_leader(self) -> None:
        self.metrics.is_leader.set(1)
        self.leading.set()

    def _lost_leadership(self) -> None:
        # The in-memory assumptions of a former leader cannot be trusted once another process may
        # have scheduled: exit and let the restart rebuild everything from the API.
        self.metrics.is_leader.set(0)
        self.stopped_leading = True
        self.leading.clear()
        if self.core is not None:
            self.core.stop_accepting()
        if self._stop is not None:
            self._stop.set()

    async def _schedule_while_leading(self) -> None:
        await self.leading.wait()
        assert self.core is not None
        log.info("scheduling", identity=self.identity, scheduler=self.settings.scheduler_name)
        await self.core.run()

    async def _shutdown(self) -> None:
        """Stop taking new groups, finish or unreserve binding cycles, flush statuses and events."""
        started = time.monotonic()
        grace = self.options.shutdown_grace_seconds
        if self.core is not None:
            self.core.stop_accepting()
            await self.core.drain(grace)
        remaining = max(0.5, grace - (time.monotonic() - started))
        if self.status is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.status.idle(), remaining)
        if self.events is not None:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.events.flush(), 1.0)
        if self._lead_task is not None:
            self._lead_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lead_task
        if self.elector is not None and not self.stopped_leading:
            await self.elector.release()
        log.info("stopped", identity=self.identity, seconds=round(time.monotonic() - started, 3))


def _with_kind(kind: ResourceKind, sink: EventSink) -> EventSink:
    """Watch events of a list carry no apiVersion/kind per item; models expect them."""

    def deliver(event_type: str, obj: dict[str, Any]) -> None:
        obj.setdefault("apiVersion", kind.api_version)
        obj.setdefault("kind", kind.kind)
        sink(event_type, obj)

    return deliver


@dataclass(slots=True)
class RunningOperator:
    """An operator started in the current event loop (tests, ``lockstep demo``, benchmarks)."""

    operator: Operator
    task: asyncio.Task[int]
    stop_flag: asyncio.Event

    async def stop(self, wait_seconds: float = 30.0) -> int:
        self.stop_flag.set()
        return await asyncio.wait_for(asyncio.shield(self.task), wait_seconds)

    async def kill(self) -> None:
        """Cancel without a graceful shutdown: what SIGKILL leaves behind, minus the process."""
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.task


async def start_operator(
    settings: Settings,
    *,
    connection: kopf.ConnectionInfo | None = None,
    options: RuntimeOptions | None = None,
    ready_timeout: float = 30.0,
) -> RunningOperator:
    """Start an operator in this event loop against ``connection`` (or ``settings.kubeconfig``) and
    return once its caches are primed and its tasks run."""
    from lockstep.kube.credentials import load_connection_info

    info = connection or await load_connection_info(settings.kubeconfig)
    operator = Operator(settings, info, options)
    stop_flag = asyncio.Event()
    task = asyncio.create_task(operator.run(stop_flag), name="lockstep-operator")
    started = asyncio.create_task(operator.started.wait())
    done, _ = await asyncio.wait({task, started}, timeout=ready_timeout, return_when=asyncio.FIRST_COMPLETED)
    if started not in done:
        started.cancel()
        if task in done:
            task.result()  # re-raise the start-up error
        task.cancel()
        raise TimeoutError(f"operator did not start within {ready_timeout}s")
    return RunningOperator(operator, task, stop_flag)
