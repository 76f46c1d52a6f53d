"""An in-process aiohttp server that behaves like kube-apiserver (v1.36, or the ``kube_version`` it is
given: ``lockstep.sim.versions``) where lockstep depends on it.

    server = ApiServer()                 # 127.0.0.1, a free port; ApiServer(kube_version="1.37")
    url = await server.start()           # "http://127.0.0.1:PORT"
    server.faults.add(FaultRule(verb="create", resource="pods", subresource="binding", status=500, count=3))
    await server.stop()

What is emulated, and the fault injection admin API under ``/__sim/``, is described in README.md.
"""

from __future__ import annotations

import asyncio
import base64
import bisect
import contextlib
import json
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import structlog
import yaml
from aiohttp import web
from multidict import CIMultiDict

from lockstep.sim import crd as crds
from lockstep.sim import errors as fe
from lockstep.sim import openapi, protobuf, tables
from lockstep.sim.decoding import DecodeError, check_decodable, check_definition, drop_unknown_fields
from lockstep.sim.errors import ApiError, FieldError, bad_request, generic_not_found, page_not_found
from lockstep.sim.faults import FaultRule, Faults, RequestStats
from lockstep.sim.features import FeatureGates
from lockstep.sim.objectmeta import (
    ensure_object_shape,
    now_rfc3339,
    random_name,
    validate_object_meta,
)
from lockstep.sim.patch import JsonPatchError, MergeKeyError, json_patch, merge_patch, strategic_merge
from lockstep.sim.registry import policy, served_types
from lockstep.sim.resources import ResourceType, WriteContext
from lockstep.sim.selectors import parse_field_selector, parse_label_selector
from lockstep.sim.store import ObjectKey, ResourceStore, Stored, View, Watcher, WatchEvent
from lockstep.sim.versions import KubeVersion

JsonObject = dict[str, Any]
log = structlog.get_logger("lockstep.sim.apiserver")

JSON = "application/json"
META_RENDERINGS = ("Table", "PartialObjectMetadata", "PartialObjectMetadataList")
AGGREGATED_DISCOVERY = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
CREATED_STATUS = b'{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success","code":201}'
PATCH_REJECTED = ApiError(
    422, "Invalid", "the server rejected our request due to an error in our request", {}
)
UNSUPPORTED_MEDIA = ApiError(415, "UnsupportedMediaType", "415: Unsupported Media Type", {})
CUSTOM_PATCH_TYPES = ApiError(
    415,
    "UnsupportedMediaType",
    "the body of the request was in an unknown format - accepted media types include: "
    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
)
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"
PROTOBUF = "application/vnd.kubernetes.protobuf"
BOOTSTRAP_NAMESPACES = ("default", "kube-node-lease", "kube-public", "kube-system")
SYSTEM_METADATA = (
    "uid",
    "creationTimestamp",
    "generation",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
)
WATCH_TIMEOUT_DEFAULT = 1800.0
MUTATING_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def _go_json_error(raw: bytes) -> str:
    """Go's encoding/json message for the first bad byte of a document that is not JSON."""
    text = raw.decode("utf-8", "replace").lstrip()
    if not text:
        return "unexpected end of JSON input"
    for literal in ("null", "true", "false"):
        if text[0] == literal[0]:
            for i, expected in enumerate(literal):
                if i >= len(text):
                    return "unexpected end of JSON input"
                if text[i] != expected:
                    return f"invalid character '{text[i]}' in literal {literal} (expecting '{expected}')"
    return f"invalid character '{text[0]}' looking for beginning of value"


def _stamp_after(seconds: int) -> str:
    return (datetime.now(UTC) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _finalize(rt: ResourceType, obj: JsonObject) -> JsonObject:
    """Put kind and apiVersion first (LIST strips them from built-in items by slicing the bytes)."""
    kind, api_version = (rt.kind, rt.api_version) if rt.view is None else ("Event", "v1")
    out: JsonObject = {"kind": kind, "apiVersion": api_version}
    for key, value in obj.items():
        if key not in ("kind", "apiVersion"):
            out[key] = value
    return out


def _media_params(accept: str) -> list[dict[str, str]]:
    """The parameters of each media range of an Accept header."""
    ranges = []
    for clause in accept.split(","):
        params = {}
        for part in clause.split(";")[1:]:
            if "=" in part:
                key, value = part.split("=", 1)
                params[key.strip()] = value.strip()
        ranges.append(params)
    return ranges


def _wants_aggregated_discovery(request: web.Request) -> bool:
    """Only apidiscovery.k8s.io/v2 is served (v2beta1 is gone since 1.33): older clients fall back."""
    return any(
        p.get("as") == "APIGroupDiscoveryList" and p.get("v") == "v2" and p.get("g") == "apidiscovery.k8s.io"
        for p in _media_params(request.headers.get("Accept", ""))
    )


def _go_string_slice(values: list[str]) -> str:
    return "[]string{" + ", ".join(orjson.dumps(v).decode() for v in values) + "}"


PROPAGATION_POLICIES = ("Foreground", "Background", "Orphan")


class ResourceRequest:
    """What a resource request is about, parsed from the URL."""

    __slots__ = ("name", "namespace", "rt", "subresource", "verb")

    def __init__(
        self, rt: ResourceType, namespace: str | None, name: str | None, subresource: str, verb: str
    ) -> None:
        self.rt = rt
        self.namespace = namespace
        self.name = name
        self.subresource = subresource
        self.verb = verb


class ApiServer:
    """The emulated API server. ``faults`` and ``request_stats`` are the fault-injection and
    counting hooks; ``drop_watches()`` and ``compact()`` act on all open watches / event windows."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        watch_window: int = 10_000,
        watch_buffer: int = 200_000,
        bookmark_interval: float = 1.0,
        watch_linger: float = 0.005,
        feature_gates: str | Mapping[str, bool] | None = None,
        kube_version: str | KubeVersion | None = None,
        initial_resource_version: int = 1000,
        write_latency: float = 0.0,
    ) -> None:
        if host not in ("127.0.0.1", "localhost"):
            raise ValueError(f"ApiServer listens on loopback only, not {host!r}")
        if not write_latency >= 0:
            raise ValueError(f"ApiServer write_latency: must not be negative, got {write_latency}")
        self.host = host
        self.port = port
        self.feature_gates = FeatureGates(feature_gates, kube_version)
        self.kube_version = self.feature_gates.kube_version
        self.watch_window = watch_window
        self.watch_buffer = watch_buffer
        self.bookmark_interval = bookmark_interval
        # After a write to a watch stream, events gather this long before the next one: under load a
        # watcher gets a few large writes instead of one per event (fewer syscalls on both sides).
        self.watch_linger = watch_linger
        # Seconds each mutating request waits before it is applied, as kube-apiserver waits for etcd's
        # commit: the writer's connection stays busy that long while the event loop serves others.
        self.write_latency = write_latency
        self.faults = Faults()
        self.request_stats = RequestStats()
        self.rv = initial_resource_version
        self.types: dict[tuple[str, str, str], ResourceType] = {}
        self.group_versions: dict[str, list[str]] = {}
        self.stores: dict[str, ResourceStore] = {}
        self.storage_types: dict[str, ResourceType] = {}
        self.printer_columns: dict[str, list[JsonObject]] = {}
        self.owners: dict[str, set[tuple[str, ObjectKey]]] = {}
        self.url = ""
        self._runner: web.AppRunner | None = None
        self._drop_task: asyncio.Task[None] | None = None
        for rt in served_types(self.feature_gates):
            self._register(rt)
        for name in BOOTSTRAP_NAMESPACES:
            self.create_object(self.types[("", "v1", "namespaces")], {"metadata": {"name": name}}, None)
        # Watches may not resume from before the server existed (a fresh kube-apiserver on an old etcd).
        self.rv += 1
        for store in self.stores.values():
            store.compact(self.rv)

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> str:
        app = self.build_app()
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        self.url = f"http://{self.host}:{self.port}"
        return self.url

    async def stop(self) -> None:
        if self._drop_task is not None:
            self._drop_task.cancel()
            self._drop_task = None
        self.drop_watches()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def build_app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024**2)
        openapi.register(app, self)
        app.router.add_route("*", "/__sim/{what}", self._admin)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        return app

    # ------------------------------------------------------------------ test and benchmark hooks

    def drop_watches(self) -> int:
        """Close every open watch stream now (clients see the connection end and must resume)."""
        dropped = 0
        for store in self.stores.values():
            for watcher in list(store.watchers):
                watcher.close()
                dropped += 1
        return dropped

    def drop_watches_every(self, seconds: float | None) -> None:
        """Keep dropping all watch streams every ``seconds`` (None stops it)."""
        if self._drop_task is not None:
            self._drop_task.cancel()
            self._drop_task = None
        if seconds:
            self._drop_task = asyncio.get_running_loop().create_task(self._drop_periodically(seconds))

    async def _drop_periodically(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            self.drop_watches()

    def compact(self) -> int:
        """Forget every buffered watch event: resuming from any earlier resourceVersion gets 410."""
        for store in self.stores.values():
            store.compact(self.rv)
        return self.rv

    def stats(self) -> dict[str, int]:
        return self.request_stats.snapshot()

    # ------------------------------------------------------------------ type registry

    def _register(self, rt: ResourceType) -> None:
        self.types[(rt.group, rt.version, rt.plural)] = rt
        versions = self.group_versions.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
        if rt.storage not in self.stores:
            self.stores[rt.storage] = ResourceStore(self.watch_window, self.rv)
        if rt.view is None:
            self.storage_types.setdefault(rt.storage, rt)

    def _sync_custom_types(self, crd: JsonObject) -> None:
        """(Re)serve the resources of an established CRD."""
        spec = crd.get("spec") or {}
        self._unserve(spec.get("group", ""), (spec.get("names") or {}).get("plural", ""))
        for rt, columns in crds.custom_types(crd):
            self._register(rt)
            self.printer_columns[f"{rt.group}/{rt.version}/{rt.plural}"] = columns

    def _unserve(self, group: str, plural: str) -> None:
        for key in [k for k in self.types if k[0] == group and k[2] == plural]:
            del self.types[key]
            self.printer_columns.pop("/".join(key), None)
        remaining = {k[1] for k in self.types if k[0] == group}
        if group in self.group_versions:
            self.group_versions[group] = [v for v in self.group_versions[group] if v in remaining]
            if not self.group_versions[group]:
                del self.group_versions[group]

    # ------------------------------------------------------------------ HTTP entry points

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._dispatch(request)
        except ApiError as error:
            return self._error_response(error)
        except Exception as error:  # an emulator bug: answer like kube-apiserver does for a panic
            log.exception("request failed", method=request.method, path=request.path)
            return self._error_response(
                ApiError(
                    500, "InternalError", f"Internal error occurred: {type(error).__name__}: {error}", {}
                )
            )

    @staticmethod
    def _error_response(error: ApiError) -> web.Response:
        headers = CIMultiDict(error.headers)
        if error.text is not None:
            headers["Content-Type"] = "text/plain; charset=utf-8"
            return web.Response(status=error.code, body=error.text.encode(), headers=headers)
        headers["Content-Type"] = JSON
        return web.Response(status=error.code, body=orjson.dumps(error.status()), headers=headers)

    @staticmethod
    def _json(
        status: int, body: bytes | JsonObject, warnings: list[str] | None = None, content_type: str = JSON
    ) -> web.Response:
        headers: CIMultiDict[str] = CIMultiDict({"Content-Type": content_type})
        for warning in warnings or ():
            # ASCII-escaped: a warning quoting a client's field name must not break the header.
            headers.add("Warning", "299 - " + json.dumps(warning))
        data = body if isinstance(body, bytes) else orjson.dumps(body)
        return web.Response(status=status, body=data, headers=headers)

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if not parts:
            return self._json(200, {"paths": ["/api", "/api/v1", "/apis", "/version"]})
        head = parts[0]
        if head == "api":
            if len(parts) == 1:
                return self._api_versions(request)
            if parts[1] != "v1":
                raise page_not_found()
            return await self._resource_request(request, "", "v1", parts[2:])
        if head == "apis":
            if len(parts) == 1:
                return self._api_groups(request)
            group = parts[1]
            if group not in self.group_versions:
                raise page_not_found()
            if len(parts) == 2:
                return self._json(200, self._api_group(group))
            if parts[2] not in self.group_versions[group]:
                raise page_not_found()
            return await self._resource_request(request, group, parts[2], parts[3:])
        if head == "version" and len(parts) == 1:
            return self._json(200, self.kube_version.version_info())
        if head in ("healthz", "readyz", "livez"):
            return web.Response(status=200, text="ok", content_type="text/plain")
        raise page_not_found()

    # ------------------------------------------------------------------ discovery

    def _api_versions(self, request: web.Request) -> web.Response:
        if _wants_aggregated_discovery(request):
            return self._json(200, self._aggregated([""]), content_type=AGGREGATED_DISCOVERY)
        address = f"{self.host}:{self.port}"
        return self._json(
            200,
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
            },
        )

    def _api_group(self, group: str) -> JsonObject:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self.group_versions[group]]
        return {
            "kind": "APIGroup",
            "apiVersion": "v1",
            "name": group,
            "versions": versions,
            "preferredVersion": versions[0],
        }

    def _api_groups(self, request: web.Request) -> web.Response:
        groups = [g for g in self.group_versions if g]
        if _wants_aggregated_discovery(request):
            return self._json(200, self._aggregated(groups), content_type=AGGREGATED_DISCOVERY)
        listing = []
        for group in groups:
            entry = self._api_group(group)
            listing.append({k: entry[k] for k in ("name", "versions", "preferredVersion")})
        return self._json(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": listing})

    def _aggregated(self, groups: list[str]) -> JsonObject:
        items = []
        for group in groups:
            versions = []
            for version in self.group_versions.get(group, []):
                resources = [
                    rt.aggregated_discovery()
                    for k, rt in self.types.items()
                    if k[0] == group and k[1] == version
                ]
                versions.append({"version": version, "resources": resources, "freshness": "Current"})
            items.append({"metadata": {"name": group} if group else {}, "versions": versions})
        return {
            "kind": "APIGroupDiscoveryList",
            "apiVersion": "apidiscovery.k8s.io/v2",
            "metadata": {},
            "items": items,
        }

    def _resource_list(self, group: str, version: str) -> JsonObject:
        resources: list[JsonObject] = []
        for (g, v, _), rt in sorted(self.types.items()):
            if g == group and v == version:
                resources.extend(rt.discovery())
        doc: JsonObject = {
            "kind": "APIResourceList",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }
        if group:
            doc = {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                **{k: doc[k] for k in ("groupVersion", "resources")},
            }
        return doc

    # ------------------------------------------------------------------ resource requests

    def _parse(self, request: web.Request, group: str, version: str, rest: list[str]) -> ResourceRequest:
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            candidate = self.types.get((group, version, rest[2]))
            if candidate is not None and candidate.namespaced:
                namespace, rest = rest[1], rest[2:]
        rt = self.types.get((group, version, rest[0]))
        if rt is None or len(rest) > 3:
            raise generic_not_found()
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else ""
        if (namespace is not None and not rt.namespaced) or (
            subresource and subresource not in rt.subresources
        ):
            raise generic_not_found()
        if rt.namespaced and namespace is None and name is not None:
            raise generic_not_found()
        method = request.method
        query = request.query
        if method == "GET":
            verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
        elif method == "POST":
            verb = "create"
        elif method == "PUT":
            verb = "update"
        elif method == "PATCH":
            verb = "patch"
        elif method == "DELETE":
            verb = "delete" if name else "deletecollection"
        else:
            raise fe.method_not_allowed()
        return ResourceRequest(rt, namespace, name, subresource, verb)

    async def _resource_request(
        self, request: web.Request, group: str, version: str, rest: list[str]
    ) -> web.StreamResponse:
        if not rest:
            return self._json(200, self._resource_list(group, version))
        req = self._parse(request, group, version, rest)
        rt = req.rt
        self.request_stats.count(req.verb, rt.plural, req.subresource)
        if self.faults.rules:
            delay, injected = self.faults.decide(
                req.verb, rt.plural, req.subresource, req.namespace or "", req.name or ""
            )
            if delay:
                await asyncio.sleep(delay)
            if injected is not None:
                raise injected
        verb = req.verb
        if verb not in rt.verbs and not req.subresource:
            raise fe.method_not_allowed()
        if self.write_latency and verb in MUTATING_VERBS:
            await asyncio.sleep(self.write_latency)
        if verb == "get":
            return self._get(request, req)
        if verb == "list":
            return self._list(request, req)
        if verb == "watch":
            return await self._watch(request, req)
        if verb == "create":
            if req.name is None:
                if rt.kind == "Binding":
                    return await self._bind(request, req.namespace, None)
                return await self._create(request, req)
            if req.subresource == "binding":
                return await self._bind(request, req.namespace, req.name)
            if req.subresource == "eviction":
                return await self._evict(request, req)
            raise fe.method_not_allowed()
        if req.name is None:
            if verb == "deletecollection":
                return await self._delete_collection(request, req)
            raise fe.method_not_allowed()
        if verb == "update":
            return await self._update(request, req)
        if verb == "patch":
            return await self._patch(request, req)
        return await self._delete(request, req)

    # ------------------------------------------------------------------ helpers

    def _key(self, rt: ResourceType, namespace: str | None, name: str) -> ObjectKey:
        return (namespace or "", name) if rt.namespaced else ("", name)

    def _current(self, rt: ResourceType, namespace: str | None, name: str) -> Stored:
        stored = self.stores[rt.storage].objects.get(self._key(rt, namespace, name))
        if stored is None:
            raise fe.not_found(rt.plural, rt.group, name)
        return stored

    def _objects_of(self, storage: str) -> Iterable[JsonObject]:
        store = self.stores.get(storage)
        return (stored.obj for stored in store.objects.values()) if store is not None else ()

    def _render(self, rt: ResourceType, stored: Stored) -> bytes:
        if rt.view is not None:
            return orjson.dumps(rt.view.convert(stored.obj))
        if rt.custom and stored.obj.get("apiVersion") != rt.api_version:
            return orjson.dumps({**stored.obj, "apiVersion": rt.api_version})
        return stored.body

    def _render_obj(self, rt: ResourceType, obj: JsonObject) -> JsonObject:
        if rt.view is not None:
            return rt.view.convert(obj)
        return obj

    @staticmethod
    async def _body(request: web.Request) -> Any:
        raw = await request.read()
        content_type = request.headers.get("Content-Type", JSON).split(";")[0].strip()
        if content_type == PROTOBUF:
            try:
                return protobuf.decode(raw)
            except protobuf.ProtobufError as error:
                raise UNSUPPORTED_MEDIA from error
        if content_type in ("application/yaml", "application/x-yaml", APPLY_PATCH):
            try:
                return yaml.safe_load(raw)
            except yaml.YAMLError as error:
                raise bad_request(f"error decoding YAML: {error}") from error
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as error:
            raise bad_request(
                f"couldn't get version/kind; json parse error: {_go_json_error(raw)}"
            ) from error

    def _commit(
        self, rt: ResourceType, key: ObjectKey, obj: JsonObject, event_type: str, prev: Stored | None
    ) -> Stored:
        """Persist a new version (or a deletion) with the next resourceVersion and fan it out."""
        self.rv += 1
        obj["metadata"]["resourceVersion"] = str(self.rv)
        stored = Stored(obj, self.rv)
        store = self.stores[rt.storage]
        if event_type == "DELETED":
            store.objects.pop(key, None)
        else:
            store.objects[key] = stored
        self._index_owners(
            rt.storage, key, obj if event_type != "DELETED" else None, prev.obj if prev else None
        )
        store.record(WatchEvent(event_type, stored, prev))
        return stored

    def _index_owners(
        self, storage: str, key: ObjectKey, new: JsonObject | None, old: JsonObject | None
    ) -> None:
        new_refs = {r.get("uid") for r in (new or {}).get("metadata", {}).get("ownerReferences") or []}
        old_refs = {r.get("uid") for r in (old or {}).get("metadata", {}).get("ownerReferences") or []}
        for uid in old_refs - new_refs:
            dependents = self.owners.get(uid)
            if dependents is not None:
                dependents.discard((storage, key))
                if not dependents:
                    del self.owners[uid]
        for uid in new_refs - old_refs:
            if uid:
                self.owners.setdefault(uid, set()).add((storage, key))

    def _write_context(self, request: web.Request, subresource: str) -> WriteContext:
        mode = request.query.get("fieldValidation", "Warn")
        if mode not in ("Ignore", "Warn", "Strict"):
            raise bad_request(f"fieldValidation parameter unsupported: {mode}")
        dry_run = request.query.getall("dryRun", [])
        if any(value != "All" for value in dry_run):
            raise bad_request(f"dryRun parameter unsupported: {dry_run}; only All is")
        return WriteContext(field_validation=mode, subresource=subresource, dry_run=bool(dry_run))

    # ------------------------------------------------------------------ create

    async def _create(self, request: web.Request, req: ResourceRequest) -> web.Response:
        body = await self._body(request)
        ctx = self._write_context(request, "")
        stored = self.create_object(req.rt, body, req.namespace, ctx)
        return self._json(201, self._render(req.rt, stored), ctx.warnings)

    def create_object(
        self,
        rt: ResourceType,
        body: Any,
        namespace: str | None,
        ctx: WriteContext | None = None,
    ) -> Stored:
        """Create an object as a POST would (also used in-process, e.g. for bootstrap namespaces)."""
        ctx = ctx or WriteContext()
        obj = ensure_object_shape(rt, body)
        self._check_decodable(rt, obj)
        if rt.view is not None:
            obj = rt.view.revert(obj)
        meta = obj["metadata"]
        if rt.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace
            self._check_namespace_open(
                rt, namespace or "", meta.get("name") or meta.get("generateName") or ""
            )
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = random_name(meta["generateName"])
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        for field in (*SYSTEM_METADATA, "managedFields", "selfLink"):
            meta.pop(field, None)
        # as BeforeCreate: system fields first, so defaulting can use the uid (Job selectors do)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        self._drop_unknown_fields(rt, obj, ctx)
        rt.strategy.decode(rt, obj, ctx)
        ctx.objects_of = self._objects_of
        rt.strategy.admit(rt, obj, None, ctx)
        rt.strategy.default(rt, obj, None)
        rt.strategy.normalize(rt, obj)
        name = meta.get("name") or ""
        errors = validate_object_meta(meta) + rt.strategy.validate(rt, obj, None, ctx)
        if errors:
            # a converted view (events.k8s.io) reports errors of the stored kind (core Event)
            raise fe.unprocessable(rt.kind, "" if rt.view else rt.group, name, errors)
        key = self._key(rt, namespace, name)
        store = self.stores[rt.storage]
        if key in store.objects:
            raise fe.already_exists(rt.plural, rt.group, name)
        if rt.has_generation:
            meta["generation"] = 1
        obj = _finalize(rt, obj)
        if ctx.dry_run:
            return Stored(obj, self.rv)
        stored = self._commit(rt, key, obj, "ADDED", None)
        if rt.group == crds.CRD_GROUP and rt.plural == "customresourcedefinitions":
            established = stored.copy()
            established["status"] = crds.established_status(established, now_rfc3339())
            self._commit(rt, key, established, "MODIFIED", stored)
            self._sync_custom_types(established)
        return stored

    def _check_namespace_open(self, rt: ResourceType, namespace: str, name: str) -> None:
        ns = self.stores["/namespaces"].objects.get(("", namespace))
        if ns is None:
            raise fe.not_found("namespaces", "", namespace)
        if ns.obj["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                "Forbidden",
                f'{fe.qualified(rt.plural, rt.group)} "{name}" is forbidden: unable to create new content in '
                f"namespace {namespace} because it is being terminated",
                {"name": name, "group": rt.group, "kind": rt.plural}
                if rt.group
                else {"name": name, "kind": rt.plural},
            )

    # ------------------------------------------------------------------ read

    @staticmethod
    def _meta_format(request: web.Request) -> tuple[str, str] | None:
        """(``Table`` | ``PartialObjectMetadata`` | ``PartialObjectMetadataList``, version) when the
        first acceptable media range asks for a meta.k8s.io rendering, else None (plain JSON)."""
        for params in _media_params(request.headers.get("Accept", "")):
            if "as" not in params:
                return None
            if params.get("g", "meta.k8s.io") == "meta.k8s.io" and params["as"] in META_RENDERINGS:
                return params["as"], params.get("v", "v1")
        return None

    def _table_request(self, request: web.Request) -> tuple[str, str] | None:
        wanted = self._meta_format(request)
        if wanted is None or wanted[0] != "Table":
            return None
        return wanted[1], request.query.get("includeObject", "Metadata")

    def _partial_metadata(
        self, request: web.Request, items: list[Stored], list_meta: JsonObject | None
    ) -> JsonObject | None:
        wanted = self._meta_format(request)
        if wanted is None or wanted[0] == "Table":
            return None
        api_version = f"meta.k8s.io/{wanted[1]}"
        partial = [
            {"kind": "PartialObjectMetadata", "apiVersion": api_version, "metadata": s.obj["metadata"]}
            for s in items
        ]
        if list_meta is None:
            return partial[0]
        return {
            "kind": "PartialObjectMetadataList",
            "apiVersion": api_version,
            "metadata": list_meta,
            "items": partial,
        }

    def _table_layout(self, rt: ResourceType) -> tuple[list[JsonObject], Callable[[JsonObject], list[Any]]]:
        if rt.custom:
            return tables.custom_columns(self.printer_columns.get(f"{rt.group}/{rt.version}/{rt.plural}", []))
        return tables.BUILTIN_TABLES.get(f"{rt.group}/{rt.plural}", tables.DEFAULT_TABLE)

    def _get(self, request: web.Request, req: ResourceRequest) -> web.Response:
        assert req.name is not None
        stored = self._current(req.rt, req.namespace, req.name)
        wanted = self._table_request(request)
        if wanted is not None:
            definitions, cells = self._table_layout(req.rt)
            obj = self._render_obj(req.rt, stored.obj)
            doc = tables.table(definitions, cells, [obj], {"resourceVersion": str(stored.rv)}, *wanted)
            return self._json(200, doc)
        partial = self._partial_metadata(request, [stored], None)
        if partial is not None:
            return self._json(200, partial)
        return self._json(200, self._render(req.rt, stored))

    def _selectors(self, request: web.Request, rt: ResourceType) -> tuple[Any, Any]:
        labels = parse_label_selector(request.query.get("labelSelector"))
        fields = parse_field_selector(request.query.get("fieldSelector"), rt.field_labels)
        return labels, fields

    def _list(self, request: web.Request, req: ResourceRequest) -> web.Response:
        rt = req.rt
        query = request.query
        labels, fields = self._selectors(request, rt)
        list_rv = self._list_resource_version(query.get("resourceVersion"), query.get("resourceVersionMatch"))
        start_after: ObjectKey | None = None
        token = query.get("continue")
        if token:
            try:
                decoded = orjson.loads(base64.urlsafe_b64decode(token.encode()))
                list_rv = int(decoded["rv"])
                start_after = (decoded["start"][0], decoded["start"][1])
            except (ValueError, KeyError, TypeError, IndexError) as error:
                raise bad_request(f"continue key is not valid: {error}") from error
        try:
            limit = int(query.get("limit") or 0)
        except ValueError:
            raise bad_request(f'strconv.ParseInt: parsing "{query["limit"]}": invalid syntax') from None
        store = self.stores[rt.storage]
        keys = store.sorted_keys(req.namespace if rt.namespaced else None)
        # A page reads from the token's key on and only as far as it returns (each page of a large
        # list used to filter every object after it: paging through 5,000 pods took 6x one LIST).
        position = 0 if start_after is None else bisect.bisect_right(keys, start_after)
        matched: list[Stored] = []
        more = False
        while position < len(keys):
            stored = store.objects[keys[position]]
            obj = stored.obj
            # field labels of a view (events.k8s.io) are mapped to paths of the stored object
            if (labels.empty or labels.matches(obj["metadata"].get("labels"))) and (
                fields.empty or fields.matches(obj)
            ):
                if 0 < limit == len(matched):
                    more = True
                    break
                matched.append(stored)
            position += 1
        list_meta: JsonObject = {"resourceVersion": str(list_rv)}
        if more:
            last = matched[-1].obj["metadata"]
            next_token = {
                "rv": list_rv,
                "start": [last.get("namespace", "") if rt.namespaced else "", last["name"]],
            }
            list_meta["continue"] = base64.urlsafe_b64encode(orjson.dumps(next_token)).decode()
            if labels.empty and fields.empty:
                # kube-apiserver counts the rest only without selectors (it would count non-matches)
                list_meta["remainingItemCount"] = len(keys) - position
        elif rt.custom:
            list_meta["continue"] = ""
        wanted = self._table_request(request)
        if wanted is not None:
            definitions, cells = self._table_layout(rt)
            objects = [self._render_obj(rt, s.obj) for s in matched]
            return self._json(200, tables.table(definitions, cells, objects, list_meta, *wanted))
        partial = self._partial_metadata(request, matched, list_meta)
        if partial is not None:
            return self._json(200, partial)
        head = {"kind": rt.list_kind, "apiVersion": rt.api_version, "metadata": list_meta}
        return self._json(200, self._list_body(rt, head, matched))

    def _list_body(self, rt: ResourceType, head: JsonObject, items: list[Stored]) -> bytes:
        prefix = orjson.dumps(head)[:-1] + b',"items":['
        if rt.view is not None:
            parts = [
                orjson.dumps(
                    {k: v for k, v in rt.view.convert(s.obj).items() if k not in ("kind", "apiVersion")}
                )
                for s in items
            ]
        elif rt.custom:
            parts = [self._render(rt, s) for s in items]
        else:
            # Built-in list items carry no kind/apiVersion: cut the stored bytes' leading pair.
            lead = orjson.dumps({"kind": rt.kind, "apiVersion": rt.api_version})[:-1] + b","
            parts = [b"{" + s.body[len(lead) :] if s.body.startswith(lead) else s.body for s in items]
        return prefix + b",".join(parts) + b"]}"

    def _list_resource_version(self, rv: str | None, match: str | None) -> int:
        if not rv or rv == "0":
            if match == "Exact":
                raise bad_request('resourceVersionMatch "Exact" is forbidden for resourceVersion "0"')
            return self.rv
        try:
            wanted = int(rv)
        except ValueError as error:
            raise bad_request(f'Invalid value: "{rv}": resourceVersion must be an integer') from error
        if wanted > self.rv:
            raise ApiError(
                504,
                "Timeout",
                f"Too large resource version: {wanted}, current: {self.rv}",
                {
                    "causes": [
                        {"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}
                    ],
                    "retryAfterSeconds": 1,
                },
            )
        if match == "Exact" and wanted != self.rv:
            raise fe.expired("The resourceVersion for the provided list is too old.")
        return self.rv

    # ------------------------------------------------------------------ watch

    async def _watch(self, request: web.Request, req: ResourceRequest) -> web.StreamResponse:
        rt = req.rt
        query = request.query
        labels, fields = self._selectors(request, rt)
        store = self.stores[rt.storage]
        view = rt.view
        wanted = self._table_request(request)
        if wanted is not None:
            definitions, cells = self._table_layout(rt)
            base = rt.view

            def as_table(obj: JsonObject) -> JsonObject:
                rendered = base.convert(obj) if base is not None else obj
                return tables.table(
                    definitions,
                    cells,
                    [rendered],
                    {"resourceVersion": obj["metadata"].get("resourceVersion", "")},
                    *wanted,
                )

            view = View(f"table/{rt.group}/{rt.plural}/{wanted[0]}/{wanted[1]}", as_table, as_table)
        watcher = Watcher(req.namespace if rt.namespaced else None, labels, fields, view, self.watch_buffer)
        rv_param = query.get("resourceVersion")
        send_initial = query.get("sendInitialEvents") == "true"
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            timeout = float(query.get("timeoutSeconds") or WATCH_TIMEOUT_DEFAULT)
        except ValueError as error:
            raise bad_request(f"invalid timeoutSeconds: {query.get('timeoutSeconds')}") from error
        refusal: ApiError | None = None
        if send_initial or not rv_param or rv_param == "0":
            for stored in store.sorted_items(watcher.namespace):
                if watcher.matches(stored.obj):
                    watcher.push(WatchEvent("ADDED", stored, None).encoded("ADDED", "current", view))
            if send_initial:
                mark = rt.strategy.bookmark(rt, self.rv)
                mark["metadata"]["annotations"] = {"k8s.io/initial-events-end": "true"}
                watcher.push(b'{"type":"BOOKMARK","object":' + orjson.dumps(mark) + b"}\n")
        else:
            try:
                since = int(rv_param)
            except ValueError as error:
                raise bad_request(
                    f'Invalid value: "{rv_param}": resourceVersion must be an integer'
                ) from error
            if since < store.floor_rv:
                refusal = fe.expired(f"too old resource version: {rv_param} ({store.floor_rv})")
            elif since > self.rv:
                # the real watch cache waits a few seconds for an RV it has not reached, then gives up
                refusal = ApiError(
                    504,
                    "Timeout",
                    f"Too large resource version: {since}, current: {self.rv}",
                    {"retryAfterSeconds": 1},
                )
            else:
                for event in store.events_after(since):
                    watcher.offer(event)
        response = web.StreamResponse(
            status=200, headers={"Content-Type": JSON, "Cache-Control": "no-cache, private"}
        )
        if refusal is not None:
            await response.prepare(request)
            await response.write(b'{"type":"ERROR","object":' + orjson.dumps(refusal.status()) + b"}\n")
            await response.write_eof()
            return response
        store.watchers.add(watcher)
        try:
            await response.prepare(request)
            await self._stream(response, watcher, rt, timeout, bookmarks)
            await response.write_eof()
        except ConnectionResetError:
            pass  # the client went away
        finally:
            store.watchers.discard(watcher)
        return response

    async def _stream(
        self,
        response: web.StreamResponse,
        watcher: Watcher,
        rt: ResourceType,
        timeout_seconds: float,
        bookmarks: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_seconds
        next_bookmark = loop.time() + self.bookmark_interval
        while True:
            lines = watcher.take()
            if lines:
                await response.write(b"".join(lines))
                if self.watch_linger:
                    await asyncio.sleep(self.watch_linger)
            if watcher.closed:
                return
            now = loop.time()
            if now >= deadline:
                return
            if bookmarks and now >= next_bookmark:
                mark = orjson.dumps(rt.strategy.bookmark(rt, self.rv))
                await response.write(b'{"type":"BOOKMARK","object":' + mark + b"}\n")
                next_bookmark = now + self.bookmark_interval
            until = min(deadline, next_bookmark) if bookmarks else deadline
            if watcher.wakeup.is_set():
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.wakeup.wait(), max(until - loop.time(), 0.0))

    # ------------------------------------------------------------------ update and patch

    async def _update(self, request: web.Request, req: ResourceRequest) -> web.Response:
        rt = req.rt
        assert req.name is not None
        body = ensure_object_shape(rt, await self._body(request))
        self._check_decodable(rt, body)
        if rt.view is not None:
            body = rt.view.revert(body)
        meta = body["metadata"]
        if meta.get("name") != req.name:
            raise bad_request(
                f"the name of the object ({meta.get('name', '')}) does not match the name on the URL "
                f"({req.name})"
            )
        if rt.namespaced and meta.get("namespace") and meta["namespace"] != req.namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        current = self._current(rt, req.namespace, req.name)
        if not meta.get("resourceVersion") and not rt.unconditional_update:
            error = fe.invalid("metadata.resourceVersion", 0, "must be specified for an update")
            raise fe.unprocessable(rt.plural, rt.group, req.name, [error])
        ctx = self._write_context(request, req.subresource)
        response, stored = self.update_object(rt, current, body, ctx)
        return self._json(
            200,
            self._render(rt, stored) if response is None else orjson.dumps(self._render_obj(rt, response)),
            ctx.warnings,
        )

    async def _patch(self, request: web.Request, req: ResourceRequest) -> web.Response:
        rt = req.rt
        assert req.name is not None
        content_type = request.headers.get("Content-Type", "").split(";")[0].strip()
        if content_type not in (MERGE_PATCH, JSON_PATCH, STRATEGIC_PATCH, APPLY_PATCH):
            raise CUSTOM_PATCH_TYPES if rt.custom else UNSUPPORTED_MEDIA
        if content_type == STRATEGIC_PATCH and rt.smp_lists is None:
            raise CUSTOM_PATCH_TYPES
        raw = await request.read()
        if content_type == APPLY_PATCH:
            try:
                patch = yaml.safe_load(raw)
            except yaml.YAMLError as error:
                raise bad_request(f"error decoding YAML: {error}") from error
        else:
            try:
                patch = orjson.loads(raw)
            except orjson.JSONDecodeError as error:
                raise bad_request(f"error decoding patch: {_go_json_error(raw)}") from error
        ctx = self._write_context(request, req.subresource)
        store = self.stores[rt.storage]
        current = store.objects.get(self._key(rt, req.namespace, req.name))
        if current is None:
            if content_type == APPLY_PATCH and isinstance(patch, dict):
                created = self.create_object(rt, patch, req.namespace, ctx)
                return self._json(201, self._render(rt, created), ctx.warnings)
            raise fe.not_found(rt.plural, rt.group, req.name)
        # a fresh copy: merge and strategic patches share untouched subtrees with their input
        base = self._render_obj(rt, current.copy())
        if content_type == JSON_PATCH:
            try:
                new = json_patch(base, patch)
            except JsonPatchError as error:
                raise PATCH_REJECTED from error
        elif content_type == STRATEGIC_PATCH:
            if not isinstance(patch, dict):
                raise bad_request("error decoding patch: a strategic merge patch must be a JSON object")
            try:
                new = strategic_merge(base, patch, (), rt.smp_lists or {})
            except MergeKeyError as error:
                if rt.storage == "/pods" and error.path == ("status", "conditions"):
                    # kube-apiserver answers this one with a 500 (the smp-conditions transcript).
                    raise ApiError(500, None, error.message) from None
                field = ".".join(error.path) + f"[{error.index}]"
                problem = (
                    fe.required(f"{field}.{error.key}")
                    if isinstance(error.item, dict)
                    else fe.invalid(field, error.item, "must be an object")
                )
                raise fe.unprocessable(rt.kind, rt.group, req.name, [problem]) from None
        else:
            if not isinstance(patch, dict):
                raise bad_request("error decoding patch: a merge patch must be a JSON object")
            new = merge_patch(base, patch)
        if not isinstance(new, dict):
            raise PATCH_REJECTED
        new = ensure_object_shape(rt, new)
        try:
            check_decodable(self.kube_version, rt.group, rt.version, rt.kind, new)
        except DecodeError as error:
            # PATCH decodes the patched object: kube-apiserver reports it on the field "patch".
            value = orjson.dumps(patch).decode()
            raise ApiError(
                422,
                "Invalid",
                f' "" is invalid: patch: Invalid value: "{value}": {error.message}',
                {
                    "causes": [
                        {
                            "reason": "FieldValueInvalid",
                            "message": f'Invalid value: "{value}": {error.message}',
                            "field": "patch",
                        }
                    ]
                },
            ) from None
        if rt.view is not None:
            new = rt.view.revert(new)
        response, stored = self.update_object(rt, current, new, ctx)
        return self._json(
            200,
            self._render(rt, stored) if response is None else orjson.dumps(self._render_obj(rt, response)),
            ctx.warnings,
        )

    def update_object(
        self, rt: ResourceType, current: Stored, new: JsonObject, ctx: WriteContext
    ) -> tuple[JsonObject | None, Stored]:
        """Apply an update (PUT body or patched object) to ``current``; returns the object to answer
        with when it differs from the stored one (a finalized deletion) and the stored version."""
        old = current.obj
        old_meta = old["metadata"]
        name = old_meta["name"]
        meta = new.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise bad_request("metadata must be an object")
        given_rv = meta.get("resourceVersion")
        if given_rv and str(given_rv) != old_meta.get("resourceVersion"):
            raise fe.stale(rt.plural, rt.group, name)
        errors: list[FieldError] = []
        repeat = 2 if rt.plural == "pods" and not rt.group else 1
        if meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            errors.extend([fe.invalid("metadata.uid", meta["uid"], "field is immutable")] * repeat)
        self._drop_unknown_fields(rt, new, ctx)
        rt.strategy.decode(rt, new, ctx)
        # what the subresource keeps from the stored object is copied, never shared with it
        result = self._apply_subresource(rt, current.copy(), new, ctx.subresource)
        result_meta = result["metadata"]
        result_meta["name"] = name
        if rt.namespaced:
            result_meta["namespace"] = old_meta.get("namespace")
        for field in (*SYSTEM_METADATA, "resourceVersion"):
            if field in old_meta:
                result_meta[field] = old_meta[field]
            else:
                result_meta.pop(field, None)
        result_meta.pop("managedFields", None)
        if old_meta.get("deletionTimestamp"):
            added = [
                f for f in result_meta.get("finalizers") or [] if f not in (old_meta.get("finalizers") or [])
            ]
            if added:
                detail = (
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {_go_string_slice(added)}"
                )
                errors.extend([fe.forbidden("metadata.finalizers", detail)] * repeat)
        if not result_meta.get("finalizers"):
            result_meta.pop("finalizers", None)
        ctx.objects_of = self._objects_of
        rt.strategy.admit(rt, result, old, ctx)
        rt.strategy.default(rt, result, old)
        rt.strategy.normalize(rt, result)
        if not errors:
            errors = validate_object_meta(result_meta) + rt.strategy.validate(rt, result, old, ctx)
        if errors:
            raise fe.unprocessable(rt.kind, "" if rt.view else rt.group, name, errors)
        result = _finalize(rt, result)
        if result == old:
            return None, current
        if rt.has_generation and rt.strategy.spec_changed(result, old):
            result_meta["generation"] = int(old_meta.get("generation", 1)) + 1
        if ctx.dry_run:
            return result, current
        key = self._key(rt, old_meta.get("namespace"), name)
        if (
            old_meta.get("deletionTimestamp")
            and not result_meta.get("finalizers")
            and self._grace_over(result)
        ):
            # The last finalizer is gone: the update deletes the object. The answer is the updated
            # object at the previous resourceVersion; watchers get the previous state as DELETED.
            gone = current.copy()
            self._commit(rt, key, gone, "DELETED", current)
            self._collect_dependents(old_meta.get("uid", ""), "Background")
            return result, current
        stored = self._commit(rt, key, result, "MODIFIED", current)
        if rt.group == crds.CRD_GROUP:
            self._sync_custom_types(stored.obj)
        return None, stored

    @staticmethod
    def _grace_over(obj: JsonObject) -> bool:
        return not obj["metadata"].get("deletionGracePeriodSeconds")

    @staticmethod
    def _apply_subresource(
        rt: ResourceType, old: JsonObject, new: JsonObject, subresource: str
    ) -> JsonObject:
        if "status" not in rt.subresources:
            return new
        if subresource == "status":
            result = {k: v for k, v in old.items() if k != "status"}
            if "status" in new:
                result["status"] = new["status"]
            meta = dict(old["metadata"])
            if rt.status_updates_metadata:
                new_meta = new.get("metadata") or {}
                for key in ("labels", "annotations", "finalizers"):
                    if key in new_meta:
                        meta[key] = new_meta[key]
                    else:
                        meta.pop(key, None)
            result["metadata"] = meta
            return result
        result = {k: v for k, v in new.items() if k != "status"}
        if "status" in old:
            result["status"] = old["status"]
        return result

    def _check_decodable(self, rt: ResourceType, obj: JsonObject) -> None:
        """A create or update body that does not decode into the kind's Go struct is a 400."""
        try:
            check_decodable(self.kube_version, rt.group, rt.version, rt.kind, obj)
        except DecodeError as error:
            raise bad_request(
                f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error.message}'
            ) from None

    def _drop_unknown_fields(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        """Go's decoder drops fields its struct lacks; with fieldValidation=Strict the request fails
        naming them, with Warn (the server's default) each is a warning."""
        if not rt.strategy.drops_unknown_fields:
            return
        unknown = drop_unknown_fields(self.kube_version, rt.group, rt.version, rt.kind, obj)
        ctx.report_unknown_fields(rt.kind, rt.version, unknown)

    # ------------------------------------------------------------------ binding

    async def _bind(self, request: web.Request, namespace: str | None, url_name: str | None) -> web.Response:
        """BindingREST: ``pods/{name}/binding`` (``url_name`` set) or the legacy ``bindings`` collection
        (the pod named in the Binding's metadata). The Binding's uid and resourceVersion are
        preconditions, its annotations are merged onto the pod in the same write."""
        binding_rt = self.types[("", "v1", "bindings")]
        body = ensure_object_shape(binding_rt, await self._body(request))
        self._check_decodable(binding_rt, body)
        binding_meta = body["metadata"]
        name = binding_meta.get("name") or ""
        if url_name is not None and name != url_name:
            raise bad_request("name in URL does not match name in Binding object")
        if binding_meta.get("namespace") and binding_meta["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the request"
            )
        if not name:
            raise bad_request("Name parameter required.")
        annotations = binding_meta.get("annotations") or {}
        target = body.get("target") or {}
        errors = []
        if target.get("kind") not in (None, "", "Node"):
            errors.append(fe.not_supported("target.kind", target.get("kind"), ["Node", "<empty>"]))
        if not target.get("name"):
            errors.append(fe.required("target.name"))
        if errors:
            raise fe.unprocessable("Binding", "", name, errors)
        rt = self.types[("", "v1", "pods")]
        current = self._current(rt, namespace, name)
        pod = current.obj
        uid, resource_version = binding_meta.get("uid"), binding_meta.get("resourceVersion")
        if uid and uid != pod["metadata"].get("uid"):
            raise fe.conflict(
                "pods",
                "",
                name,
                f"Precondition failed: UID in precondition: {uid}, "
                f"UID in object meta: {pod['metadata'].get('uid')}",
            )
        if resource_version and resource_version != pod["metadata"].get("resourceVersion"):
            raise fe.conflict(
                "pods",
                "",
                name,
                f"Precondition failed: ResourceVersion in precondition: {resource_version}, "
                f"ResourceVersion in object meta: {pod['metadata'].get('resourceVersion')}",
            )
        if pod["metadata"].get("deletionTimestamp"):
            raise fe.conflict(
                "pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host"
            )
        node = (pod.get("spec") or {}).get("nodeName")
        if node:
            raise fe.conflict("pods/binding", "", name, f'pod {name} is already assigned to node "{node}"')
        if (pod.get("spec") or {}).get("schedulingGates"):
            raise fe.conflict("pods/binding", "", name, f"pod {name} has non-empty .spec.schedulingGates")
        if self._write_context(request, "binding").dry_run:
            return web.Response(status=201, body=CREATED_STATUS, headers={"Content-Type": JSON})
        target_name = target["name"]
        bound = current.copy()
        bound["spec"]["nodeName"] = target_name
        if annotations:
            bound["metadata"]["annotations"] = {**(bound["metadata"].get("annotations") or {}), **annotations}
        condition = {
            "type": "PodScheduled",
            "status": "True",
            "lastProbeTime": None,
            "lastTransitionTime": now_rfc3339(),
        }
        status = bound.setdefault("status", {})
        conditions = status.setdefault("conditions", [])
        for i, existing in enumerate(conditions):
            if existing.get("type") == "PodScheduled":
                conditions[i] = condition
                break
        else:
            conditions.append(condition)
        self._commit(rt, self._key(rt, namespace, name), bound, "MODIFIED", current)
        return web.Response(status=201, body=CREATED_STATUS, headers={"Content-Type": JSON})

    # ------------------------------------------------------------------ eviction

    async def _evict(self, request: web.Request, req: ResourceRequest) -> web.Response:
        assert req.name is not None and req.namespace is not None
        name, namespace = req.name, req.namespace
        body = await self._body(request)
        if isinstance(body, dict):
            try:
                check_decodable(self.kube_version, policy.GROUP, "v1", "Eviction", body)
            except DecodeError as error:
                raise bad_request(
                    f'Eviction in version "v1" cannot be handled as a Eviction: {error.message}'
                ) from None
        rt = req.rt
        pod = self._current(rt, namespace, name).obj
        pdb_rt = self.types[(policy.GROUP, "v1", "poddisruptionbudgets")]
        budgets = [
            b for b in self._objects_of(policy.PDB_STORAGE) if b["metadata"].get("namespace") == namespace
        ]

        def write_budget_status(budget: JsonObject, status: JsonObject) -> None:
            current = self._current(pdb_rt, namespace, budget["metadata"]["name"])
            updated = {**current.copy(), "status": status}
            updated["metadata"]["resourceVersion"] = budget["metadata"]["resourceVersion"]
            self.update_object(pdb_rt, current, updated, WriteContext(subresource="status"))

        def mark_and_delete(condition: JsonObject, options: JsonObject) -> None:
            current = self._current(rt, namespace, name)
            marked = current.copy()
            conditions = marked.setdefault("status", {}).setdefault("conditions", [])
            # podutil.UpdatePodCondition: an existing condition of the type is replaced in place,
            # else the new one goes after the pod's other conditions.
            at = next((i for i, c in enumerate(conditions) if c.get("type") == condition["type"]), None)
            if at is None:
                conditions.append(dict(condition))
            else:
                conditions[at] = dict(condition)
            self.update_object(rt, current, marked, WriteContext(subresource="status"))
            self.delete_object(rt, namespace, name, options)

        policy.evict(pod, body, budgets, write_budget_status, mark_and_delete)
        return web.Response(status=201, body=CREATED_STATUS, headers={"Content-Type": JSON})

    # ------------------------------------------------------------------ delete

    async def _delete_options(self, request: web.Request) -> JsonObject:
        options: JsonObject = {}
        if request.can_read_body:
            raw = await request.read()
            if raw.strip():
                try:
                    parsed = orjson.loads(raw)
                except orjson.JSONDecodeError as error:
                    raise bad_request(
                        f"couldn't get version/kind; json parse error: {_go_json_error(raw)}"
                    ) from error
                if not isinstance(parsed, dict):
                    raise bad_request(
                        "couldn't get version/kind; json parse error: json: cannot unmarshal "
                        f"{'array' if isinstance(parsed, list) else type(parsed).__name__} into Go value of "
                        'type struct { APIVersion string "json:\\"apiVersion,omitempty\\""; '
                        'Kind string "json:\\"kind,omitempty\\"" }'
                    )
                try:
                    check_definition(self.kube_version, openapi.DELETE_OPTIONS, parsed)
                except DecodeError as error:
                    raise bad_request(error.message) from None
                options = parsed
        query = request.query
        if "gracePeriodSeconds" in query:
            try:
                options["gracePeriodSeconds"] = int(query["gracePeriodSeconds"])
            except ValueError as error:
                raise bad_request(f"invalid gracePeriodSeconds: {query['gracePeriodSeconds']}") from error
        if "propagationPolicy" in query:
            options["propagationPolicy"] = query["propagationPolicy"]
        if query.get("orphanDependents") == "true":
            options["propagationPolicy"] = "Orphan"
        policy = options.get("propagationPolicy")
        if policy is not None and policy not in PROPAGATION_POLICIES:
            unsupported = fe.not_supported("propagationPolicy", policy, list(PROPAGATION_POLICIES))
            raise fe.unprocessable("DeleteOptions", "meta.k8s.io", "", [unsupported])
        return options

    async def _delete(self, request: web.Request, req: ResourceRequest) -> web.Response:
        assert req.name is not None
        options = await self._delete_options(request)
        if self._write_context(request, "").dry_run or options.get("dryRun"):
            current = self._current(req.rt, req.namespace, req.name)
            return self._json(200, self._render(req.rt, current))
        answer = self.delete_object(req.rt, req.namespace, req.name, options)
        return self._json(200, answer)

    def delete_object(
        self, rt: ResourceType, namespace: str | None, name: str, options: JsonObject
    ) -> JsonObject:
        """DELETE semantics: preconditions, graceful pod deletion, finalizers, namespace and CRD cleanup."""
        current = self._current(rt, namespace, name)
        meta = current.obj["metadata"]
        preconditions = options.get("preconditions") or {}
        if preconditions.get("uid") and preconditions["uid"] != meta.get("uid"):
            raise fe.conflict(
                rt.kind,
                rt.group,
                name,
                f"the UID in the precondition ({preconditions['uid']}) does not match the UID in record "
                f"({meta.get('uid')}). "
                "The object might have been deleted and then recreated",
            )
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta.get(
            "resourceVersion"
        ):
            raise fe.conflict(
                rt.kind,
                rt.group,
                name,
                f"the ResourceVersion in the precondition ({preconditions['resourceVersion']}) "
                f"does not match the ResourceVersion in record ({meta.get('resourceVersion')}). "
                "The object might have been modified",
            )
        key = self._key(rt, namespace, name)
        policy = options.get("propagationPolicy") or "Background"
        is_pod = rt.plural == "pods" and not rt.group
        if rt.plural == "namespaces" and not rt.group:
            return self._delete_namespace(rt, current)
        if rt.group == crds.CRD_GROUP:
            return self._delete_crd(rt, current)
        grace = 0
        if is_pod:
            spec = current.obj.get("spec") or {}
            requested = options.get("gracePeriodSeconds")
            grace = int(spec.get("terminationGracePeriodSeconds", 30) if requested is None else requested)
            phase = (current.obj.get("status") or {}).get("phase")
            if not spec.get("nodeName") or phase in ("Succeeded", "Failed"):
                grace = 0
            grace = max(int(grace), 0)
        finalizers = meta.get("finalizers") or []
        deleting = meta.get("deletionTimestamp")
        if deleting:
            current_grace = meta.get("deletionGracePeriodSeconds") or 0
            if is_pod and grace < current_grace and (grace > 0 or finalizers):
                shortened = current.copy()
                shortened["metadata"]["deletionGracePeriodSeconds"] = grace
                shortened["metadata"]["deletionTimestamp"] = _stamp_after(grace)
                current = self._commit(rt, key, shortened, "MODIFIED", current)
                return orjson.loads(self._render(rt, current))
            if finalizers or grace > 0 or (is_pod and current_grace > 0 and grace >= current_grace):
                return orjson.loads(self._render(rt, current))
        elif is_pod or finalizers:
            marked = current.copy()
            marked["metadata"]["deletionTimestamp"] = _stamp_after(grace)
            marked["metadata"]["deletionGracePeriodSeconds"] = grace
            if rt.has_generation:
                marked["metadata"]["generation"] = int(meta.get("generation", 1)) + 1
            current = self._commit(rt, key, marked, "MODIFIED", current)
            if finalizers or grace > 0:
                return orjson.loads(self._render(rt, current))
        if is_pod and (current.obj["metadata"].get("deletionGracePeriodSeconds") or 0) > 0:
            final = current.copy()
            final["metadata"]["deletionGracePeriodSeconds"] = 0
            current = self._commit(rt, key, final, "MODIFIED", current)
        gone = self._commit(rt, key, current.copy(), "DELETED", current)
        self._collect_dependents(meta.get("uid", ""), policy)
        if rt.returns_deleted_object:
            return orjson.loads(self._render(rt, gone))
        details: JsonObject = {"name": name}
        if rt.group:
            details["group"] = rt.group
        details["kind"] = rt.plural
        details["uid"] = meta.get("uid")
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _remove_now(self, rt: ResourceType, stored: Stored) -> None:
        meta = stored.obj["metadata"]
        key = self._key(rt, meta.get("namespace"), meta["name"])
        self._commit(rt, key, stored.copy(), "DELETED", stored)

    def _collect_dependents(self, owner_uid: str, policy: str) -> None:
        """The garbage collector's part: dependents of a deleted owner are deleted or orphaned."""
        for storage, key in sorted(self.owners.pop(owner_uid, set())):
            store = self.stores.get(storage)
            dependent = store.objects.get(key) if store else None
            rt = self.storage_types.get(storage)
            if dependent is None or rt is None:
                continue
            if policy == "Orphan":
                updated = dependent.copy()
                refs = [
                    r for r in updated["metadata"].get("ownerReferences") or [] if r.get("uid") != owner_uid
                ]
                if refs:
                    updated["metadata"]["ownerReferences"] = refs
                else:
                    updated["metadata"].pop("ownerReferences", None)
                self._commit(rt, key, updated, "MODIFIED", dependent)
            else:
                with contextlib.suppress(ApiError):
                    self.delete_object(rt, key[0] or None, key[1], {"propagationPolicy": policy})

    def _delete_namespace(self, rt: ResourceType, current: Stored) -> JsonObject:
        name = current.obj["metadata"]["name"]
        if current.obj["metadata"].get("deletionTimestamp"):
            return orjson.loads(current.body)
        terminating = current.copy()
        terminating["metadata"]["deletionTimestamp"] = now_rfc3339()
        terminating["metadata"]["deletionGracePeriodSeconds"] = 0
        terminating.setdefault("status", {})["phase"] = "Terminating"
        marked = self._commit(rt, ("", name), terminating, "MODIFIED", current)
        answer: JsonObject = orjson.loads(marked.body)
        for storage, store in self.stores.items():
            owner = self.storage_types.get(storage)
            if owner is None or not owner.namespaced:
                continue
            for stored in [s for k, s in sorted(store.objects.items()) if k[0] == name]:
                self._remove_now(owner, stored)
        self._remove_now(rt, marked)
        return answer

    def _delete_crd(self, rt: ResourceType, current: Stored) -> JsonObject:
        crd = current.copy()
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        crd["metadata"]["deletionTimestamp"] = now_rfc3339()
        crd["metadata"]["finalizers"] = ["customresourcecleanup.apiextensions.k8s.io"]
        conditions = [
            c for c in (crd.get("status") or {}).get("conditions") or [] if c.get("type") != "Terminating"
        ]
        conditions.append(
            {
                "type": "Terminating",
                "status": "True",
                "lastTransitionTime": now_rfc3339(),
                "reason": "InstanceDeletionPending",
                "message": "CustomResourceDefinition marked for deletion; "
                "CustomResource deletion will begin soon",
            }
        )
        crd.setdefault("status", {})["conditions"] = conditions
        marked = self._commit(rt, ("", crd["metadata"]["name"]), crd, "MODIFIED", current)
        answer: JsonObject = orjson.loads(marked.body)
        storage = f"{group}/{plural}"
        store = self.stores.get(storage)
        owner = self.storage_types.get(storage)
        if store is not None and owner is not None:
            for stored in [s for _, s in sorted(store.objects.items())]:
                self._remove_now(owner, stored)
            for watcher in list(store.watchers):
                watcher.close()
        self._unserve(group, plural)
        self.storage_types.pop(storage, None)
        self.stores.pop(storage, None)
        self._remove_now(rt, marked)
        return answer

    async def _delete_collection(self, request: web.Request, req: ResourceRequest) -> web.Response:
        rt = req.rt
        labels, fields = self._selectors(request, rt)
        options = await self._delete_options(request)
        store = self.stores[rt.storage]
        deleted: list[Any] = []
        for stored in store.sorted_items(req.namespace if rt.namespaced else None):
            if labels.matches(stored.obj["metadata"].get("labels")) and fields.matches(stored.obj):
                meta = stored.obj["metadata"]
                with contextlib.suppress(ApiError):
                    deleted.append(self.delete_object(rt, meta.get("namespace"), meta["name"], options))
        items = [d for d in deleted if d.get("kind") != "Status"]
        return self._json(
            200,
            {
                "kind": rt.list_kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self.rv)},
                "items": items,
            },
        )

    # ------------------------------------------------------------------ admin API

    async def _admin(self, request: web.Request) -> web.Response:
        what = request.match_info["what"]
        method = request.method
        try:
            if what == "faults":
                return await self._admin_faults(request, method)
            if what == "stats":
                if method == "DELETE":
                    self.request_stats.reset()
                return self._json(
                    200,
                    {
                        "requests": self.stats(),
                        "writes": self.request_stats.writes(),
                        "resourceVersion": str(self.rv),
                    },
                )
        except (ValueError, TypeError) as error:
            return self._json(400, {"error": str(error)})
        return self._json(404, {"error": f"unknown admin endpoint /__sim/{what}"})

    async def _admin_faults(self, request: web.Request, method: str) -> web.Response:
        if method == "GET":
            return self._json(200, {"rules": [r.to_json() for r in self.faults.rules]})
        if method == "DELETE":
            self.faults.clear()
            self.drop_watches_every(None)
            return self._json(200, {"rules": []})
        if method != "POST":
            return self._json(405, {"error": "use GET, POST or DELETE"})
        try:
            data = orjson.loads(await request.read())
        except orjson.JSONDecodeError as error:
            raise ValueError(f"fault request is not JSON: {error}") from error
        action = data.get("action", "add") if isinstance(data, dict) else "add"
        if action == "drop_watches":
            every = data.get("every")
            if every:
                self.drop_watches_every(float(every))
                return self._json(200, {"dropping_every": float(every)})
            return self._json(200, {"dropped": self.drop_watches()})
        if action == "compact":
            return self._json(200, {"compactedAt": str(self.compact())})
        if action == "remove":
            return self._json(200, {"removed": self.faults.remove(int(data["id"]))})
        if action != "add":
            raise ValueError(f"unknown fault action {action!r}: use add, remove, drop_watches or compact")
        rule = self.faults.add(FaultRule.from_json(data))
        return self._json(200, rule.to_json())
