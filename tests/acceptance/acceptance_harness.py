"""A simulated cluster with lockstep running in-process against it over HTTP, plus the helpers the
acceptance and operator integration tests share."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from lockstep import POD_GROUP_LABEL
from lockstep.config import Settings, load_settings
from lockstep.controller.runtime import Operator, OperatorThread, RuntimeOptions, WatchMode
from lockstep.kube.client import (
    NAMESPACES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    STORAGE_CLASSES,
    ApiError,
    ConnectionInfo,
    KubeClient,
)
from lockstep.kube.watch import RawWatch
from lockstep.sim.cluster import SimCluster
from lockstep.sim.invariants import BindingHistory, check_state, fetch_cluster_state

NAMESPACE = "acceptance"
DEVICE_CLASS = "gpu.sim.lockstep.dev"
T = TypeVar("T")

GPU_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}
    },
}


def operator_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "leader_elect": False,
        "metrics_bind_address": "127.0.0.1:0",
        "health_bind_address": "127.0.0.1:0",
        "log_format": "json",
        "log_level": "info",
        "backoff_initial_seconds": 0.2,
        "backoff_max_seconds": 1.0,
        "lease_namespace": "default",
        "lease_duration_seconds": 1.5,
        "renew_deadline_seconds": 1.0,
        "retry_period_seconds": 0.2,
    }
    values.update(overrides)
    return load_settings(**values)


def pod(
    name: str,
    group: str | None = None,
    *,
    cpu: str = "500m",
    memory: str = "128Mi",
    claims: list[dict[str, str]] | None = None,
    scheduler: str = "lockstep",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [
            {
                "name": "main",
                "image": "busybox",
                "resources": {
                    "requests": {"cpu": cpu, "memory": memory},
                    **({"claims": [{"name": c["name"]} for c in claims]} if claims else {}),
                },
            }
        ],
    }
    if claims:
        spec["resourceClaims"] = claims
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {POD_GROUP_LABEL: group} if group else {},
        },
        "spec": spec,
    }


def podgroup(
    name: str, min_count: int, *, claims: list[dict[str, str]] | None = None, timeout: int = 300
) -> dict:
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "scheduleTimeoutSeconds": timeout,
    }
    if claims:
        spec["resourceClaims"] = claims
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def claim(name: str, *, count: int = 1, constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS, "count": count}}]
    }
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": devices},
    }


@dataclass
class Env:
    cluster: SimCluster
    client: KubeClient
    operators: list[OperatorThread] = field(default_factory=list)

    @property
    def operator(self) -> Operator:
        """The first operator's runtime (read its state; it lives on another thread)."""
        operator = self.operators[0].operator
        assert operator is not None
        return operator

    async def start_operator(self, settings: Settings | None = None, **options: Any) -> OperatorThread:
        thread = OperatorThread(
            settings or operator_settings(),
            connection=ConnectionInfo(server=self.cluster.url, insecure=True),
            options=RuntimeOptions(shutdown_grace_seconds=5.0, watch_retry_delay=0.1, **options),
        )
        self.operators.append(thread)
        await asyncio.to_thread(thread.start)
        return thread

    async def stop_operators(self) -> None:
        for thread in self.operators:
            if thread.alive:
                await asyncio.to_thread(thread.stop, 15)
        self.operators.clear()

    async def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        kind = {
            "Pod": PODS,
            "PodGroup": POD_GROUPS,
            "ResourceClaim": RESOURCE_CLAIMS,
            "ResourceClaimTemplate": RESOURCE_CLAIM_TEMPLATES,
            "PersistentVolume": PERSISTENT_VOLUMES,
            "PersistentVolumeClaim": PERSISTENT_VOLUME_CLAIMS,
            "StorageClass": STORAGE_CLASSES,
        }[obj["kind"]]
        return await self.client.create(kind, NAMESPACE, obj)

    async def pods(self, group: str | None = None) -> list[dict[str, Any]]:
        selector = f"{POD_GROUP_LABEL}={group}" if group else None
        return list((await self.client.list(PODS, NAMESPACE, label_selector=selector)).get("items") or [])

    async def podgroup_status(self, name: str) -> dict[str, Any]:
        return dict((await self.client.get(POD_GROUPS, NAMESPACE, name)).get("status") or {})

    async def claim(self, name: str) -> dict[str, Any]:
        return await self.client.get(RESOURCE_CLAIMS, NAMESPACE, name)

    async def bound(self, group: str) -> int:
        return sum(1 for p in await self.pods(group) if p["spec"].get("nodeName"))

    async def invariant_violations(self) -> list[str]:
        async with self.cluster_session() as (session, url):
            state = await fetch_cluster_state(session, url)
        return [str(v) for v in check_state(state) if not v.transient]

    @contextlib.asynccontextmanager
    async def cluster_session(self) -> AsyncIterator[tuple[Any, str]]:
        import aiohttp

        async with aiohttp.ClientSession() as session:
            yield session, self.cluster.url


async def eventually(probe: Callable[[], Awaitable[T]], within: float = 20.0, what: str = "condition") -> T:
    """Poll ``probe`` until it returns something truthy; fail with ``what`` and the last value."""
    last: T | None = None
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while loop.time() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out after {within}s waiting for {what}; last value: {last!r}")


@contextlib.asynccontextmanager
async def simulated_cluster(
    *,
    nodes: int = 4,
    devices_per_node: int = 2,
    start_operator: bool = True,
    settings: Settings | None = None,
    pod_watch: WatchMode = WatchMode.RAW,
    extra_namespaces: tuple[str, ...] = (),
    operator_options: dict[str, Any] | None = None,
    **cluster_options: Any,
) -> AsyncIterator[Env]:
    cluster = SimCluster(
        nodes,
        devices_per_node,
        kubelet_start_delay=cluster_options.pop("kubelet_start_delay", 0.05),
        kubelet_delete_delay=cluster_options.pop("kubelet_delete_delay", 0.05),
        **cluster_options,
    )
    await cluster.start()
    client = KubeClient(ConnectionInfo(server=cluster.url, insecure=True))
    env = Env(cluster, client)
    try:
        for namespace in (NAMESPACE, *extra_namespaces):
            try:
                await client.create(
                    NAMESPACES,
                    None,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
                )
            except ApiError as exc:
                if not exc.conflict:
                    raise
        if start_operator:
            await env.start_operator(settings, pod_watch=pod_watch, **(operator_options or {}))
        yield env
    finally:
        await env.stop_operators()
        await client.close()
        await cluster.stop()


class PodEvents:
    """Follows every pod watch event during a test: bound-twice and nodeName-with-PodScheduled=False
    are checked on each event, not just at the end."""

    def __init__(self, client: KubeClient) -> None:
        self.history = BindingHistory()
        self.bound_but_unscheduled: list[str] = []
        self.events = 0
        self._synced = asyncio.Event()
        self._watch = RawWatch(client, PODS, self._observe, namespace=NAMESPACE, on_synced=self._synced.set)
        self._task: asyncio.Task[None] | None = None

    def _observe(self, event_type: str, pod: dict[str, Any]) -> None:
        self.events += 1
        if event_type == "DELETED":
            return
        self.history.observe(pod)
        conditions = (pod.get("status") or {}).get("conditions") or []
        scheduled = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
        if pod["spec"].get("nodeName") and scheduled is not None and scheduled.get("status") == "False":
            self.bound_but_unscheduled.append(
                f"{pod['metadata']['name']} on {pod['spec']['nodeName']} has PodScheduled=False "
                f"({scheduled.get('reason')}) at resourceVersion {pod['metadata'].get('resourceVersion')}"
            )

    async def __aenter__(self) -> PodEvents:
        self._task = asyncio.create_task(self._watch.run())
        await asyncio.wait_for(self._synced.wait(), 10)
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def violations(self) -> list[str]:
        return [str(v) for v in self.history.violations()] + self.bound_but_unscheduled


def write_kubeconfig(url: str, path: Path) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "sim", "cluster": {"server": url}}],
                "users": [{"name": "sim", "user": {"token": "sim"}}],
                "contexts": [{"name": "sim", "context": {"cluster": "sim", "user": "sim"}}],
                "current-context": "sim",
            }
        )
    )
    return path
