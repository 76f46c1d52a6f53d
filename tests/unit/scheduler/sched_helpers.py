"""Builders and an in-memory pod API for the scheduler core tests.

``MemoryPodAPI`` behaves like the API server where the binding cycle depends on it: every write
bumps ``metadata.resourceVersion``; a binding of a pod that already has ``spec.nodeName`` answers
409; a status patch with a stale resourceVersion answers 409; each write is echoed back to the cache
as a watch event would be. Failures are injected per call.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.api.node import parse_node
from lockstep.api.pod import parse_pod
from lockstep.config import Settings
from lockstep.scheduler.framework import CycleState, NodeInfo, PodCondition, PodGroupInfo, PodInfo, Status
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult
from lockstep.scheduler.scheduler import Scheduler, SchedulerOptions
from lockstep.state.cluster import ClusterCache


def pod_dict(
    name: str,
    cpu: str | None = "1",
    memory: str | None = "1Gi",
    group: str | None = None,
    namespace: str = "default",
    scheduler: str = "lockstep",
    priority: int = 0,
    node_name: str = "",
    **spec: Any,
) -> dict[str, Any]:
    requests = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    labels = {POD_GROUP_LABEL: group} if group else {}
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": f"uid-{namespace}-{name}",
            "labels": labels,
        },
        "spec": {
            "schedulerName": scheduler,
            "priority": priority,
            "containers": [{"name": "main", "resources": {"requests": requests}}],
            **spec,
        },
        "status": {"phase": "Pending"},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    body["metadata"]["resourceVersion"] = "1"
    return body


def make_pod(name: str, **kwargs: Any) -> PodInfo:
    return parse_pod(pod_dict(name, **kwargs))


def make_node(
    name: str,
    cpu: str = "8",
    memory: str = "32Gi",
    pods: int = 110,
    labels: dict[str, str] | None = None,
    taints: list[dict[str, str]] | None = None,
    unschedulable: bool = False,
    extra: dict[str, str] | None = None,
) -> NodeInfo:
    return parse_node(
        {
            "metadata": {"name": name, "labels": labels or {}},
            "spec": {"taints": taints or [], "unschedulable": unschedulable},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": str(pods), **(extra or {})}},
        }
    )


def gang(name: str, min_count: int, namespace: str = "default", timeout: float = 300.0) -> PodGroupInfo:
    return PodGroupInfo(
        namespace, name, uid=f"pg-{name}", min_count=min_count, is_gang=True, schedule_timeout_seconds=timeout
    )


Injected = BindOutcome | PatchOutcome | Exception | Callable[[], Awaitable[None]]


class MemoryPodAPI:
    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.pods: dict[str, PodInfo] = {}
        self.rv = 100
        self.bind_calls: list[tuple[str, str]] = []
        self.patch_calls: list[tuple[str, str, str]] = []  # (pod, resourceVersion sent, reason)
        self.get_calls: list[str] = []
        self.inject_bind: list[Injected] = []
        self.inject_patch: list[Injected] = []
        self.echo = True

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def add(self, pod: PodInfo) -> PodInfo:
        stored = dataclasses.replace(pod, resource_version=self._next_rv())
        self.pods[pod.key] = stored
        self.cache.upsert_pod(stored)
        return stored

    def delete(self, key: str) -> None:
        pod = self.pods.pop(key)
        self.cache.delete_pod(pod.uid)

    def _store(self, pod: PodInfo) -> None:
        self.pods[pod.key] = pod
        if self.echo:
            asyncio.get_running_loop().call_soon(self.cache.upsert_pod, pod)

    async def _injected(self, queue: list[Injected]) -> BindOutcome | PatchOutcome | None:
        while queue:
            item = queue.pop(0)
            if isinstance(item, Exception):
                raise item
            if isinstance(item, BindOutcome | PatchOutcome):
                return item
            await item()  # a delay or a side effect, then go on
        return None

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        self.bind_calls.append((pod.key, node_name))
        injected = await self._injected(self.inject_bind)
        if isinstance(injected, BindOutcome):
            return injected
        stored = self.pods.get(pod.key)
        if stored is None or stored.uid != pod.uid:
            return BindOutcome(BindResult.NOT_FOUND)
        if stored.node_name:
            return BindOutcome(
                BindResult.CONFLICT, f"pod {pod.key} is already assigned to node {stored.node_name}"
            )
        self._store(
            dataclasses.replace(
                stored,
                node_name=node_name,
                resource_version=self._next_rv(),
                scheduled_condition=PodCondition("True", "", ""),
            )
        )
        return BindOutcome(BindResult.BOUND)

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        self.get_calls.append(f"{namespace}/{name}")
        return self.pods.get(f"{namespace}/{name}")

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        self.patch_calls.append((pod.key, resource_version, reason))
        injected = await self._injected(self.inject_patch)
        if isinstance(injected, PatchOutcome):
            return injected
        stored = self.pods.get(pod.key)
        if stored is None:
            return PatchOutcome(PatchResult.NOT_FOUND)
        if stored.resource_version != resource_version:
            return PatchOutcome(PatchResult.CONFLICT, "the object has been modified")
        self._store(
            dataclasses.replace(
                stored,
                resource_version=self._next_rv(),
                scheduled_condition=PodCondition("False", reason, message),
            )
        )
        return PatchOutcome(PatchResult.OK)


class FakeClock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def make_scheduler(
    settings: Settings | None = None, clock: FakeClock | None = None, **kwargs: Any
) -> tuple[Scheduler, MemoryPodAPI, ClusterCache]:
    settings = settings or Settings(leader_elect=False)
    cache = ClusterCache(settings.scheduler_name)
    api = MemoryPodAPI(cache)
    scheduler = Scheduler(
        settings,
        api,
        cache=cache,
        clock=clock or FakeClock(),
        options=kwargs.pop("options", SchedulerOptions()),
        **kwargs,
    )
    return scheduler, api, cache


async def settle(scheduler: Scheduler) -> None:
    """Run due cycles and let binding tasks and echoed watch events run, until only pods waiting
    at Permit (if any) are left. Time does not pass: backoffs and Permit timeouts do not expire."""
    for _ in range(100):
        while scheduler.schedule_one() is not None:
            pass
        for _ in range(10):
            await asyncio.sleep(0)
        if not scheduler.queue.has_active() and scheduler.busy_tasks == len(scheduler.waiting):
            return
    raise AssertionError("the scheduler did not settle")


class RecordingPlugin:
    """Reserve, Permit and PreBind that count their calls and fail on demand (per pod name)."""

    name = "Recording"

    def __init__(self) -> None:
        self.reserved: list[str] = []
        self.unreserved: list[str] = []
        self.pre_bound: list[str] = []
        self.fail_reserve: set[str] = set()
        self.fail_permit: set[str] = set()
        self.fail_pre_bind: set[str] = set()
        self.raise_pre_bind: set[str] = set()
        self.pre_bind_gate: asyncio.Event | None = None  # when set, PreBind waits for it

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.reserved.append(pod.name)
        if pod.name in self.fail_reserve:
            return Status.unschedulable(self.name, "ReserveFailed", "reserve refused")
        return Status()

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        self.unreserved.append(pod.name)

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        if pod.name in self.fail_permit:
            return Status.unschedulable(self.name, "PermitRejected", "permit refused"), 0.0
        return Status(), 0.0

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        self.pre_bound.append(pod.name)
        if self.pre_bind_gate is not None:
            await self.pre_bind_gate.wait()
        if pod.name in self.raise_pre_bind:
            raise RuntimeError("driver exploded")
        if pod.name in self.fail_pre_bind:
            return Status.error(self.name, "claim write failed")
        return Status()

    def releases(self, pod_name: str) -> int:
        return self.unreserved.count(pod_name)
