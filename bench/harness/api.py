"""The benchmark's own API client: one aiohttp keep-alive session, orjson, a bounded connection pool.

It counts every request it sends by (verb, resource), the way the API server's stats count them, so
the figures can subtract the load generator's own traffic from what the server saw.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import orjson
import yaml

JsonObject = dict[str, Any]
USER_AGENT = "lockstep-bench"


class ApiError(Exception):
    """A non-2xx answer; the message names the request and, when there is one, the object."""

    def __init__(self, method: str, path: str, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{method} {path}: HTTP {status}: {message}")


@dataclass(frozen=True)
class ApiTarget:
    """Where the API server is and how to authenticate, read from a kubeconfig."""

    server: str
    token: str | None = None
    ssl_context: ssl.SSLContext | None = None


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / str(entry[key])).read_bytes()
    return None


def load_kubeconfig(path: Path) -> ApiTarget:
    """The current context's server, bearer token and TLS settings of the kubeconfig at ``path``."""
    try:
        config = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise ValueError(f"kubeconfig {path}: cannot read: {exc}") from None
    if not isinstance(config, dict):
        raise ValueError(f"kubeconfig {path}: not a YAML mapping")

    def named(section: str, name: str | None) -> Mapping[str, Any]:
        entries = config.get(section) or []
        for entry in entries:
            if name is None or entry.get("name") == name:
                return entry.get(section[:-1]) or {}
        raise ValueError(f"kubeconfig {path}: {section}: no entry named {name!r}")

    context = named("contexts", config.get("current-context") or None)
    cluster = named("clusters", context.get("cluster"))
    user = named("users", context["user"]) if context.get("user") else {}
    server = cluster.get("server")
    if not server:
        raise ValueError(f"kubeconfig {path}: clusters[{context.get('cluster')}].server is missing")
    ssl_context = None
    if urlsplit(str(server)).scheme == "https":
        ssl_context = ssl.create_default_context()
        ca = _data_or_file(cluster, "certificate-authority", path.parent)
        if cluster.get("insecure-skip-tls-verify"):
            ssl_context.check_hostname = False
            ssl_context.verify_mode = ssl.CERT_NONE
        elif ca is not None:
            ssl_context.load_verify_locations(cadata=ca.decode())
        cert = _data_or_file(user, "client-certificate", path.parent)
        key = _data_or_file(user, "client-key", path.parent)
        if cert is not None and key is not None:
            with tempfile.TemporaryDirectory() as tmp:
                cert_file, key_file = Path(tmp, "cert.pem"), Path(tmp, "key.pem")
                cert_file.write_bytes(cert)
                key_file.write_bytes(key)
                ssl_context.load_cert_chain(cert_file, key_file)
    return ApiTarget(server=str(server).rstrip("/"), token=user.get("token"), ssl_context=ssl_context)


def classify(method: str, path: str, params: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(verb, resource) of a request as the API server's request info names them.

    ``/api/v1/namespaces/ns/pods/p/binding`` POST is ("create", "pods/binding"); a GET on a
    collection is "list", or "watch" with ``watch=true``.
    """
    parts = [p for p in urlsplit(path).path.split("/") if p]
    if parts[:1] == ["api"]:
        rest = parts[2:]
    elif parts[:1] == ["apis"]:
        rest = parts[3:]
    else:
        raise ValueError(f"not a Kubernetes resource path: {path}")
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    elif len(rest) == 2 and rest[0] == "namespaces":
        rest = ["namespaces", rest[1]]
    if not rest:
        raise ValueError(f"not a Kubernetes resource path: {path}")
    resource = rest[0] if len(rest) < 3 else f"{rest[0]}/{rest[2]}"
    has_name = len(rest) >= 2
    method = method.upper()
    watching = (params or {}).get("watch", "").lower() in ("1", "true")
    if method == "GET":
        verb = "watch" if watching else ("get" if has_name else "list")
    elif method == "DELETE":
        verb = "delete" if has_name else "deletecollection"
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())
    return verb, resource


class ApiClient:
    """JSON over one keep-alive session with at most ``connections`` connections in flight."""

    def __init__(self, target: ApiTarget, connections: int = 16) -> None:
        if connections < 1:
            raise ValueError(f"ApiClient connections: must be at least 1, got {connections}")
        self.target = target
        self.connections = connections
        self.sent: Counter[str] = Counter()
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(connections)

    async def __aenter__(self) -> ApiClient:
        headers = {"Accept": "application/json", "User-Agent": USER_AGENT}
        if self.target.token:
            headers["Authorization"] = f"Bearer {self.target.token}"
        self._session = aiohttp.ClientSession(
            headers=headers,
            connector=aiohttp.TCPConnector(limit=self.connections + 4, ssl=self.target.ssl_context or False),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            read_bufsize=1 << 20,
        )
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            raise RuntimeError("ApiClient used outside 'async with'")
        return self._session

    async def request(
        self, method: str, path: str, body: Any = None, params: Mapping[str, str] | None = None
    ) -> JsonObject:
        self.sent[" ".join(classify(method, path, params))] += 1
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else None
        async with (
            self._slots,
            self.session.request(
                method, self.target.server + path, data=data, params=params, headers=headers
            ) as response,
        ):
            raw = await response.read()
        try:
            parsed: Any = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            parsed = raw.decode(errors="replace")
        if response.status >= 300:
            raise ApiError(method, path, response.status, parsed)
        return parsed if isinstance(parsed, dict) else {}

    async def create(self, path: str, body: JsonObject) -> JsonObject:
        return await self.request("POST", path, body)

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> JsonObject:
        return await self.request("GET", path, params=params)

    async def delete(self, path: str) -> JsonObject:
        return await self.request("DELETE", path, {"gracePeriodSeconds": 0})

    async def bind(self, namespace: str, name: str, node: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        await self.create(f"/api/v1/namespaces/{namespace}/pods/{name}/binding", body)

    async def admin(self, path: str) -> JsonObject:
        """GET an emulator admin endpoint (``/__sim/...``); not a Kubernetes request, so not counted."""
        async with self.session.get(self.target.server + path) as response:
            raw = await response.read()
            if response.status >= 300:
                raise ApiError("GET", path, response.status, raw.decode(errors="replace"))
        parsed = orjson.loads(raw)
        if not isinstance(parsed, dict):
            raise ApiError("GET", path, response.status, "expected a JSON object")
        return parsed

    async def watch(
        self, path: str, resource_version: str, timeout_seconds: int = 3600
    ) -> AsyncIterator[tuple[str, JsonObject]]:
        """(type, object) events of one watch stream from ``resource_version`` until it ends."""
        params = {
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        self.sent[" ".join(classify("GET", path, params))] += 1
        async with self.session.get(self.target.server + path, params=params) as response:
            if response.status >= 300:
                raise ApiError("GET", path, response.status, (await response.read()).decode(errors="replace"))
            async for line in response.content:
                if not line.strip():
                    continue
                event = orjson.loads(line)
                yield event.get("type", ""), event.get("object") or {}
