"""The one HTTP session lockstep writes through: aiohttp keep-alive, the loaded credentials, orjson.

Every non-2xx answer becomes an :class:`ApiError` naming the verb, the object and the API's own
message. Nothing here retries a write: a failed write is reported to the caller, who knows whether
re-reading and trying again is right (a 409 on a status patch) or wrong (a failed PreBind).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum, StrEnum
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson
from yarl import URL

from lockstep import GROUP, VERSION
from lockstep.api import owners
from lockstep.api.composite_podgroup import GROUP as COMPOSITE_GROUP
from lockstep.api.composite_podgroup import KIND as COMPOSITE_KIND
from lockstep.api.composite_podgroup import PLURAL as COMPOSITE_PLURAL
from lockstep.api.composite_podgroup import VERSION as COMPOSITE_VERSION
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.api.upstream_podgroup import PLURAL as UPSTREAM_PLURAL
from lockstep.api.upstream_podgroup import V1ALPHA2 as UPSTREAM_V1ALPHA2
from lockstep.api.upstream_podgroup import V1BETA1 as UPSTREAM_V1BETA1
from lockstep.scheduler.ports import BINDING_CYCLE


@dataclass(frozen=True, slots=True)
class ResourceKind:
    group: str  # "" for the core API
    version: str
    plural: str
    kind: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        base = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            base += f"/namespaces/{quote(namespace, safe='')}"
        base += f"/{self.plural}"
        if name is not None:
            base += f"/{quote(name, safe='')}"
            if subresource:
                base += f"/{subresource}"
        return base


@dataclass(frozen=True, slots=True, kw_only=True)
class ConnectionInfo:
    """One API server and the credentials for it, as :mod:`lockstep.kube.credentials` loads them: the
    session here and Kopf's login (``lockstep.controller.handlers``) both use it. Certificates are
    files (a kubeconfig's embedded data is written to temporary files)."""

    server: str  # e.g. "https://10.0.0.1:6443"
    ca_path: str | None = None
    insecure: bool = False  # no verification of the server's certificate
    username: str | None = None
    password: str | None = None
    scheme: str | None = None  # of the Authorization header: "Bearer", ...
    token: str | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None

    def http_headers(self) -> dict[str, str]:
        """The ``Authorization`` header, if there are credentials for one."""
        if self.username and self.password:
            return {"Authorization": aiohttp.BasicAuth(self.username, self.password).encode()}
        if self.token:
            return {"Authorization": f"{self.scheme or 'Bearer'} {self.token}"}
        if self.scheme:
            return {"Authorization": self.scheme}
        return {}

    def ssl_context(self) -> ssl.SSLContext:
        """Verification against ``ca_path`` (the system's CAs without one), the client certificate."""
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.certificate_path:
            context.load_cert_chain(self.certificate_path, self.private_key_path)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


PODS = ResourceKind("", "v1", "pods", "Pod")
NODES = ResourceKind("", "v1", "nodes", "Node", namespaced=False)
EVENTS = ResourceKind("", "v1", "events", "Event")
NAMESPACES = ResourceKind("", "v1", "namespaces", "Namespace", namespaced=False)
LEASES = ResourceKind("coordination.k8s.io", "v1", "leases", "Lease")
RESOURCE_CLAIMS = ResourceKind("resource.k8s.io", "v1", "resourceclaims", "ResourceClaim")
RESOURCE_CLAIM_TEMPLATES = ResourceKind(
    "resource.k8s.io", "v1", "resourceclaimtemplates", "ResourceClaimTemplate"
)
RESOURCE_SLICES = ResourceKind("resource.k8s.io", "v1", "resourceslices", "ResourceSlice", namespaced=False)
DEVICE_CLASSES = ResourceKind("resource.k8s.io", "v1", "deviceclasses", "DeviceClass", namespaced=False)
POD_GROUPS = ResourceKind(GROUP, VERSION, "podgroups", "PodGroup")
PERSISTENT_VOLUMES = ResourceKind("", "v1", "persistentvolumes", "PersistentVolume", namespaced=False)
PERSISTENT_VOLUME_CLAIMS = ResourceKind("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim")
STORAGE_CLASSES = ResourceKind("storage.k8s.io", "v1", "storageclasses", "StorageClass", namespaced=False)
CSI_NODES = ResourceKind("storage.k8s.io", "v1", "csinodes", "CSINode", namespaced=False)
POD_DISRUPTION_BUDGETS = ResourceKind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")
# upstream's Workload API PodGroup (gate GenericWorkload) in every version lockstep reads, newest first:
# lockstep watches the first one the cluster serves (v1beta1 on Kubernetes 1.37, v1alpha2 on 1.36)
UPSTREAM_POD_GROUPS = ResourceKind(UPSTREAM_GROUP, UPSTREAM_V1BETA1, UPSTREAM_PLURAL, "PodGroup")
UPSTREAM_POD_GROUPS_V1ALPHA2 = ResourceKind(UPSTREAM_GROUP, UPSTREAM_V1ALPHA2, UPSTREAM_PLURAL, "PodGroup")
UPSTREAM_POD_GROUP_KINDS = (UPSTREAM_POD_GROUPS, UPSTREAM_POD_GROUPS_V1ALPHA2)
# upstream's CompositePodGroup (KEP-6012, alpha in 1.37, gate CompositePodGroup): watched while served
COMPOSITE_POD_GROUPS = ResourceKind(COMPOSITE_GROUP, COMPOSITE_VERSION, COMPOSITE_PLURAL, COMPOSITE_KIND)
# other schedulers' PodGroups, watched while their CRD is installed (API discovery, as upstream's)
COSCHEDULING_POD_GROUPS = ResourceKind("scheduling.x-k8s.io", "v1alpha1", "podgroups", "PodGroup")
VOLCANO_POD_GROUPS = ResourceKind("scheduling.volcano.sh", "v1beta1", "podgroups", "PodGroup")
DIALECT_POD_GROUP_KINDS = (COSCHEDULING_POD_GROUPS, VOLCANO_POD_GROUPS)
# the owners whose specs gangs are inferred from (lockstep reads them; RBAC: list and watch)
JOBS = ResourceKind(owners.JOB.group, owners.JOB.version, owners.JOB.plural, owners.JOB.kind)
JOBSETS = ResourceKind(owners.JOBSET.group, owners.JOBSET.version, owners.JOBSET.plural, owners.JOBSET.kind)
LEADER_WORKER_SETS = ResourceKind(
    owners.LEADER_WORKER_SET.group,
    owners.LEADER_WORKER_SET.version,
    owners.LEADER_WORKER_SET.plural,
    owners.LEADER_WORKER_SET.kind,
)
PYTORCH_JOBS = ResourceKind(
    owners.PYTORCH_JOB.group, owners.PYTORCH_JOB.version, owners.PYTORCH_JOB.plural, owners.PYTORCH_JOB.kind
)
RAY_CLUSTERS = ResourceKind(
    owners.RAY_CLUSTER.group, owners.RAY_CLUSTER.version, owners.RAY_CLUSTER.plural, owners.RAY_CLUSTER.kind
)
# applied by the demo and tests; lockstep reads TrainJobs through the JobSets they own
TRAIN_JOBS = ResourceKind(
    owners.TRAIN_JOB.group, owners.TRAIN_JOB.version, owners.TRAIN_JOB.plural, owners.TRAIN_JOB.kind
)
PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)


class PatchType(StrEnum):
    MERGE = "application/merge-patch+json"
    STRATEGIC = "application/strategic-merge-patch+json"
    JSON = "application/json-patch+json"


class Lane(IntEnum):
    """Which waiting request gets a freed connection first: the lowest lane, then (in the binding
    cycles' lane) the earliest placement and member, then the first to ask."""

    BINDING = 0  # pods/binding: its PreBind is done, and its gang's siblings are on their way too
    OTHER = 1  # everything outside a binding cycle (reads, PodScheduled=False, preemption)
    BINDING_CYCLE = 2  # PreBind's writes (finalizers, claims), an earlier placement's first


class _Admission:
    """At most ``limit`` requests on the wire; a freed slot goes to the waiting request with the
    smallest key. Under a backlog of claim writes a binding so waits only for a request on the wire
    to finish, not behind every write that asked before it (measured: 5,000 claim finalizer and status
    writes went out before all but 216 of 5,000 bindings when the slots were first come, first served)."""

    def __init__(self, limit: int) -> None:
        self._free = limit
        self._waiting: list[tuple[tuple[int, int, int], int, asyncio.Future[None]]] = []
        self._arrivals = itertools.count()

    async def acquire(self, key: tuple[int, int, int]) -> None:
        if self._free > 0 and not self._waiting:
            self._free -= 1
            return
        granted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (key, next(self._arrivals), granted))
        try:
            await granted
        except asyncio.CancelledError:
            if granted.done() and not granted.cancelled():
                self.release()  # the slot was handed over as the waiter was cancelled
            raise

    def release(self) -> None:
        while self._waiting:
            _, _, granted = heapq.heappop(self._waiting)
            if not granted.done():  # a cancelled waiter's future is done
                granted.set_result(None)
                return
        self._free += 1


def _admission_key(lane: Lane | None) -> tuple[int, int, int]:
    if lane is None:
        cycle = BINDING_CYCLE.get()
        if cycle is not None:
            return (Lane.BINDING_CYCLE, *cycle)
        lane = Lane.OTHER
    return (lane, 0, 0)


class ApiError(Exception):
    """A non-2xx answer from the API server."""

    def __init__(self, status: int, reason: str, message: str, what: str) -> None:
        super().__init__(f"{what}: {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.api_message = message
        self.what = what

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410


def _describe(
    method: str, kind: ResourceKind, namespace: str | None, name: str | None, sub: str | None
) -> str:
    target = kind.plural
    if sub:
        target += f"/{sub}"
    if name is not None:
        target += f" {namespace}/{name}" if namespace else f" {name}"
    elif namespace:
        target += f" in namespace {namespace}"
    return f"{method} {target}"


class KubeClient:
    """An aiohttp session to one API server. Create inside the running event loop."""

    def __init__(
        self,
        info: ConnectionInfo,
        *,
        request_timeout: float = 30.0,
        on_response: Callable[[str, str, int], None] | None = None,
        refresh_credentials: Callable[[], Awaitable[ConnectionInfo]] | None = None,
        connection_limit: int = 64,
    ) -> None:
        self.info = info
        self.server = info.server.rstrip("/")
        ssl_context = info.ssl_context() if self.server.startswith("https") else False
        # At most ``connection_limit`` requests on the wire, admitted by lane (:class:`Lane`). aiohttp's
        # own limit does not keep an order: it hands a freed connection to whichever request asks next,
        # so under a backlog a woken waiter finds it taken and queues again, over and over (a gang
        # member's binding re-queued 40 times, 1.9 s, while its siblings, sent with it, went at once).
        # The pool itself is unbounded: the slots bound the requests, and watches keep their
        # connections without taking a slot.
        self._slots = _Admission(connection_limit)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_context, limit=0),
            headers={"Accept": "application/json", "User-Agent": "lockstep"},
            timeout=aiohttp.ClientTimeout(total=request_timeout),
            json_serialize=lambda obj: orjson.dumps(obj).decode(),
        )
        self._auth = info.http_headers()
        self._on_response = on_response
        self._refresh_credentials = refresh_credentials

    async def _reauthenticate(self) -> bool:
        """After a 401: reload the credentials (service-account tokens rotate); True if they changed."""
        if self._refresh_credentials is None:
            return False
        info = await self._refresh_credentials()
        auth = info.http_headers()
        if auth == self._auth:
            return False
        self.info, self._auth = info, auth
        return True

    async def close(self) -> None:
        await self._session.close()

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        params: Mapping[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        lane: Lane | None = None,
    ) -> dict[str, Any]:
        """``lane``: None for the binding cycle's lane inside one (``BINDING_CYCLE``), else OTHER."""
        data = None if body is None else orjson.dumps(body)
        key = _admission_key(lane)
        for _ in range(2):
            headers = dict(self._auth)
            if data is not None:
                headers["Content-Type"] = content_type
            await self._slots.acquire(key)
            try:
                async with self._session.request(
                    # Paths are quoted by ResourceKind.path: yarl need not encode them again.
                    method,
                    URL(self.server + path, encoded=True),
                    params=params,
                    data=data,
                    headers=headers,
                ) as response:
                    raw = await response.read()
                    status = response.status
            finally:
                self._slots.release()
            if self._on_response is not None:
                self._on_response(method, path, status)
            if status != 401 or not await self._reauthenticate():
                break
        if status >= 400:
            raise _error_from(status, raw, what)
        if not raw:
            return {}
        result: dict[str, Any] = orjson.loads(raw)
        return result

    async def get(self, kind: ResourceKind, namespace: str | None, name: str) -> dict[str, Any]:
        return await self.request(
            "GET", kind.path(namespace, name), what=_describe("GET", kind, namespace, name, None)
        )

    async def list(
        self,
        kind: ResourceKind,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, str] = {}
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        if limit:
            params["limit"] = str(limit)
        if continue_token:
            params["continue"] = continue_token
        return await self.request(
            "GET", kind.path(namespace), params=params, what=_describe("LIST", kind, namespace, None, None)
        )

    async def create(
        self,
        kind: ResourceKind,
        namespace: str | None,
        body: Mapping[str, Any],
        *,
        name: str | None = None,
        subresource: str | None = None,
        lane: Lane | None = None,
    ) -> dict[str, Any]:
        return await self.request(
            "POST",
            kind.path(namespace, name, subresource),
            body=body,
            what=_describe("POST", kind, namespace, name, subresource),
            lane=lane,
        )

    async def first_served(self, kinds: Sequence[ResourceKind]) -> ResourceKind | None:
        """The first of ``kinds`` that the API server serves now, or None."""
        for kind in kinds:
            if await self.serves(kind):
                return kind
        return None

    async def serves(self, kind: ResourceKind) -> bool:
        """Whether the API server serves ``kind`` now (API discovery of its group version)."""
        base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
        try:
            resources = await self.request("GET", base, what=f"GET {base}")
        except ApiError as exc:
            if exc.not_found:
                return False
            raise
        return any(r.get("name") == kind.plural for r in resources.get("resources") or [])

    async def patch(
        self,
        kind: ResourceKind,
        namespace: str | None,
        name: str,
        body: Any,
        patch_type: PatchType,
        *,
        subresource: str | None = None,
    ) -> dict[str, Any]:
        return await self.request(
            "PATCH",
            kind.path(namespace, name, subresource),
            body=body,
            content_type=patch_type.value,
            what=_describe("PATCH", kind, namespace, name, subresource),
        )

    async def replace(
        self, kind: ResourceKind, namespace: str | None, name: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        """PUT; the body's metadata.resourceVersion makes it conditional (409 when stale)."""
        return await self.request(
            "PUT", kind.path(namespace, name), body=body, what=_describe("PUT", kind, namespace, name, None)
        )

    async def delete(
        self, kind: ResourceKind, namespace: str | None, name: str, *, body: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """DELETE; ``body``: DeleteOptions (preconditions, gracePeriodSeconds)."""
        return await self.request(
            "DELETE",
            kind.path(namespace, name),
            body=body,
            what=_describe("DELETE", kind, namespace, name, None),
        )

    async def watch_stream(
        self,
        kind: ResourceKind,
        namespace: str | None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[dict[str, Any]]:
        """Raw watch events (``{"type": ..., "object": ...}``) until the server ends the stream."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        what = _describe("WATCH", kind, namespace, None, None)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=timeout_seconds + 30)
        async with self._session.get(
            self.server + kind.path(namespace), params=params, timeout=timeout, headers=self._auth
        ) as response:
            if response.status == 401:
                await self._reauthenticate()  # the caller's retry uses the new credentials
            if response.status >= 400:
                raise _error_from(response.status, await response.read(), what)
            partial = b""  # the start of a line whose end is still to come
            async for chunk in response.content.iter_any():
                lines = (partial + chunk if partial else chunk).split(b"\n")
                partial = lines.pop()
                for line in lines:
                    if line and not line.isspace():
                        yield orjson.loads(line)
            if partial and not partial.isspace():
                yield orjson.loads(partial)


def _error_from(status: int, raw: bytes, what: str) -> ApiError:
    reason = ""
    message = raw.decode(errors="replace")[:500]
    try:
        parsed = orjson.loads(raw) if raw else {}
    except orjson.JSONDecodeError:
        parsed = {}
    if isinstance(parsed, dict):
        reason = str(parsed.get("reason") or "")
        message = str(parsed.get("message") or message)
    return ApiError(status, reason, message, what)


async def wait_for_server(client: KubeClient, attempts: int = 150) -> None:
    """Block until the API server answers discovery (used at start-up), 0.2 s between attempts."""
    for attempt in range(attempts):
        try:
            await client.request("GET", "/api", what="GET /api")
            return
        except (aiohttp.ClientError, ApiError, OSError):
            if attempt == attempts - 1:
                raise
            await asyncio.sleep(0.2)
