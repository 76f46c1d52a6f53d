"""Load generator, completion watcher and the ceiling client that binds pods to pre-decided nodes."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence
from typing import Any

from harness.api import ApiClient, ApiError
from harness.tracker import Tracker
from harness.workloads import (
    GANGS_IN_FLIGHT,
    NAMESPACE,
    PODGROUP_API_VERSION,
    SCHEDULER_NAME,
    GangSpec,
    NodeShape,
    Workload,
    namespace_manifest,
    pod_manifest,
    pod_name,
    podgroup_manifest,
    replacement,
)

PODS_PATH = f"/api/v1/namespaces/{NAMESPACE}/pods"
PODGROUPS_PATH = f"/apis/{PODGROUP_API_VERSION}/namespaces/{NAMESPACE}/podgroups"
GONE = 410


def setup_path(manifest: dict[str, object]) -> str:
    """Collection path of a setup object (namespace, DeviceClass, ResourceClaimTemplate, ...)."""
    kind = manifest["kind"]
    paths = {
        "Namespace": "/api/v1/namespaces",
        "DeviceClass": "/apis/resource.k8s.io/v1/deviceclasses",
        "ResourceClaimTemplate": f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates",
        "ResourceClaim": f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
    }
    if kind not in paths:
        raise ValueError(f"setup object of kind {kind!r} is not supported by the load generator")
    return paths[str(kind)]


async def create_setup(client: ApiClient, workload: Workload) -> None:
    for manifest in (namespace_manifest(), *workload.setup):
        try:
            await client.create(setup_path(manifest), manifest)
        except ApiError as exc:
            if exc.status != 409:
                raise


class LoadGenerator:
    """Creates each gang's PodGroup, then its pods concurrently; a few gangs are in flight at once."""

    def __init__(
        self,
        client: ApiClient,
        tracker: Tracker,
        shape: NodeShape,
        ceiling: CeilingBinder | None = None,
    ) -> None:
        self.client = client
        self.tracker = tracker
        self.shape = shape
        self.ceiling = ceiling  # binds each gang as soon as all its pods exist (the ceiling phase)
        self.created_gangs: list[GangSpec] = []

    async def create_gang(self, gang: GangSpec) -> None:
        self.tracker.add_gang(gang)
        if gang.scheduler == SCHEDULER_NAME and gang.pod_group:
            await self.client.create(PODGROUPS_PATH, podgroup_manifest(gang))
        await asyncio.gather(*(self._create_pod(gang, i) for i in range(gang.pods)))
        self.created_gangs.append(gang)
        if self.ceiling is not None:
            self.ceiling.gang_created(gang)

    async def _create_pod(self, gang: GangSpec, index: int) -> None:
        manifest = pod_manifest(gang, index, self.shape)
        try:
            await self.client.create(PODS_PATH, manifest)
        except ApiError as exc:
            raise ApiError(
                "POST", f"{PODS_PATH} (pod {pod_name(gang, index)})", exc.status, exc.body
            ) from None
        self.tracker.created(pod_name(gang, index))

    async def delete_gang(self, gang: GangSpec) -> None:
        self.tracker.remove_gang(gang)
        if self.ceiling is not None:
            self.ceiling.forget_gang(gang)
        self.created_gangs.remove(gang)
        await asyncio.gather(
            *(self.client.delete(f"{PODS_PATH}/{pod_name(gang, i)}") for i in range(gang.pods))
        )
        await self.client.delete(f"{PODGROUPS_PATH}/{gang.name}")

    async def run(self, gangs: Sequence[GangSpec], in_flight: int = GANGS_IN_FLIGHT) -> None:
        queue: asyncio.Queue[GangSpec] = asyncio.Queue()
        for gang in gangs:
            queue.put_nowait(gang)

        async def worker() -> None:
            while not queue.empty():
                await self.create_gang(queue.get_nowait())

        await asyncio.gather(*(worker() for _ in range(min(in_flight, len(gangs)))))


async def churn(generator: LoadGenerator, workload: Workload, creation: asyncio.Task[None]) -> int:
    """Replace whole gangs while scheduling: delete a created gang, create a new one in its place.

    Returns how many gangs were replaced; at least one replacement starts even if creation was quick.
    """
    spec = workload.churn
    if spec is None:
        return 0
    rng = random.Random(spec.seed)
    replaced = 0
    while replaced < spec.gangs:
        await asyncio.sleep(spec.interval_seconds)
        candidates = [g for g in generator.created_gangs if g.counted]
        if not candidates:
            if creation.done():
                break
            continue
        victim = rng.choice(candidates)
        await generator.delete_gang(victim)
        await generator.create_gang(replacement(victim, replaced + 1))
        replaced += 1
    return replaced


class WatchFailed(RuntimeError):
    """The completion watch ended with an error other than an expired resourceVersion."""


class CompletionWatcher:
    """Watches the benchmark namespace's pods and marks each pod bound when spec.nodeName appears."""

    path = PODS_PATH

    def __init__(self, client: ApiClient, tracker: Tracker) -> None:
        self.client = client
        self.tracker = tracker
        self.resource_version = ""
        self.events = 0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self._list()
        self._task = asyncio.create_task(self._run(), name="bench-completion-watch")

    def check(self) -> None:
        """Raise what ended the watch, if it ended: a phase must not wait for a watcher that died."""
        if self._task is not None and self._task.done() and not self._task.cancelled():
            error = self._task.exception()
            raise WatchFailed(f"the completion watch on {self.path} ended: {error}") from error

    async def _list(self) -> None:
        listing = await self.client.get(self.path)
        self.resource_version = str(listing.get("metadata", {}).get("resourceVersion", ""))
        for pod in listing.get("items", []):
            self._see(pod)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _see(self, pod: dict[str, Any]) -> None:
        name = str(pod.get("metadata", {}).get("name", ""))
        if pod.get("spec", {}).get("nodeName"):
            self.tracker.bound(name)
        status = pod.get("status", {})
        if status.get("phase") == "Running":
            self.tracker.started(name)
        if status.get("resourceClaimStatuses"):
            self.tracker.claims_recorded(name)

    async def _run(self) -> None:
        """Watch from the last resourceVersion; when it is too old (410) list again, as informers do."""
        while True:
            try:
                await self._watch_once()
            except ApiError as exc:
                if exc.status != GONE:
                    raise
                await self._list()

    async def _watch_once(self) -> None:
        async for event_type, obj in self.client.watch(self.path, self.resource_version):
            self.events += 1
            if event_type == "ERROR":
                raise ApiError("GET", f"{self.path}?watch=true", int(obj.get("code", 500)), obj)
            self.resource_version = str(obj.get("metadata", {}).get("resourceVersion", self.resource_version))
            if event_type in ("ADDED", "MODIFIED"):
                self._see(obj)


class StatusWatcher(CompletionWatcher):
    """Watches the benchmark namespace's PodGroups: when each one's status first counts all its
    members scheduled (what ``kubectl get lpg`` shows)."""

    path = PODGROUPS_PATH

    def _see(self, podgroup: dict[str, Any]) -> None:
        name = str(podgroup.get("metadata", {}).get("name", ""))
        self.tracker.group_status(name, int(podgroup.get("status", {}).get("scheduled") or 0))


class CeilingBinder:
    """The ceiling: POSTs a binding for every pod to a node decided up front, and does nothing else.

    It binds each gang as soon as all its pods exist (the load generator calls :meth:`bind_gang`), so
    it runs under the same creation load as lockstep and both phases are timed from the first create:
    the ceiling is the fastest any scheduler could keep up with this load on this machine. Nodes are
    taken round-robin; only counted pods are bound, and where capacity limits the workload (fewer pods
    expected than counted) only that many.
    """

    def __init__(self, client: ApiClient, nodes: Sequence[str], limit: int) -> None:
        if not nodes:
            raise ValueError("CeilingBinder needs at least one node to bind to")
        self.client = client
        self.nodes = list(nodes)
        self.remaining = limit
        self._next_node = 0
        self._bound: dict[str, int] = {}  # gang -> pods bound
        self._tasks: set[asyncio.Task[None]] = set()

    def gang_created(self, gang: GangSpec) -> None:
        """Bind the gang in the background: the load generator goes on creating meanwhile."""
        task = asyncio.create_task(self.bind_gang(gang), name=f"ceiling-{gang.name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def wait(self) -> None:
        """Until every binding started so far is answered (raises the first that failed)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks))

    def forget_gang(self, gang: GangSpec) -> None:
        """The gang was deleted (churn): its pods no longer count against the limit."""
        self.remaining += self._bound.pop(gang.name, 0)

    async def bind_gang(self, gang: GangSpec) -> None:
        if not gang.counted:
            return
        count = min(gang.pods, self.remaining)
        self.remaining -= count
        self._bound[gang.name] = count
        targets = []
        for index in range(count):
            targets.append((pod_name(gang, index), self.nodes[self._next_node % len(self.nodes)]))
            self._next_node += 1
        await asyncio.gather(*(self.client.bind(NAMESPACE, name, node) for name, node in targets))
