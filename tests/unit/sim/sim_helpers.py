"""A tiny JSON client for the API server emulator tests."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import orjson

from lockstep.sim.apiserver import ApiServer

JsonObject = dict[str, Any]
NS = "/api/v1/namespaces/default"


class Client:
    """Minimal HTTP helper: every call returns (status, parsed body, headers)."""

    def __init__(self, session: aiohttp.ClientSession, url: str) -> None:
        self.session = session
        self.url = url

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        params: dict[str, str] | None = None,
        accept: str = "application/json",
    ) -> tuple[int, Any, Any]:
        data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
        headers = {"Accept": accept}
        if data is not None:
            headers["Content-Type"] = content_type
        async with self.session.request(
            method, self.url + path, data=data, headers=headers, params=params
        ) as resp:
            raw = await resp.read()
            parsed = orjson.loads(raw) if raw and "json" in resp.headers.get("Content-Type", "") else raw
            return resp.status, parsed, resp.headers

    async def watch(self, path: str, params: dict[str, str]) -> list[JsonObject]:
        """Run a watch until the server ends it (give ``timeoutSeconds``) and return its events."""
        async with self.session.get(self.url + path, params={"watch": "true", **params}) as resp:
            assert resp.status == 200, await resp.text()
            return [orjson.loads(line) async for line in resp.content if line.strip()]


def pod(name: str, **spec: Any) -> JsonObject:
    labels = spec.pop("labels", None)
    body: JsonObject = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **({"labels": labels} if labels else {})},
        "spec": {
            "schedulerName": "lockstep",
            "containers": [{"name": "main", "image": "pause:3.10"}],
            **spec,
        },
    }
    return body


GROUP_PATH = "/apis/scheduling.lockstep.dev/v1alpha1/namespaces/default/podgroups"

# The PodGroup CRD as recorded in the conformance transcripts (default, minimum, CEL rule, list map).
PODGROUP_CRD: JsonObject = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "podgroups.scheduling.lockstep.dev"},
    "spec": {
        "group": "scheduling.lockstep.dev",
        "scope": "Namespaced",
        "names": {"plural": "podgroups", "singular": "podgroup", "kind": "PodGroup", "shortNames": ["lpg"]},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {
                        "name": "MinCount",
                        "type": "integer",
                        "jsonPath": ".spec.schedulingPolicy.gang.minCount",
                    },
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "required": ["schedulingPolicy"],
                                "properties": {
                                    "schedulingPolicy": {
                                        "type": "object",
                                        "properties": {
                                            "basic": {"type": "object"},
                                            "gang": {
                                                "type": "object",
                                                "required": ["minCount"],
                                                "properties": {"minCount": {"type": "integer", "minimum": 1}},
                                            },
                                        },
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "has(self.basic) != has(self.gang)",
                                                "message": "exactly one of basic or gang",
                                            }
                                        ],
                                    },
                                    "scheduleTimeoutSeconds": {
                                        "type": "integer",
                                        "minimum": 0,
                                        "default": 300,
                                    },
                                    "resourceClaims": {
                                        "type": "array",
                                        "x-kubernetes-list-type": "map",
                                        "x-kubernetes-list-map-keys": ["name"],
                                        "items": {
                                            "type": "object",
                                            "required": ["name"],
                                            "properties": {"name": {"type": "string"}},
                                        },
                                    },
                                },
                            },
                            "status": {
                                "type": "object",
                                "properties": {"phase": {"type": "string", "enum": ["Pending", "Scheduled"]}},
                            },
                        },
                    }
                },
            }
        ],
    },
}


def podgroup(name: str, spec: JsonObject | None) -> JsonObject:
    body: JsonObject = {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
    }
    if spec is not None:
        body["spec"] = spec
    return body


@contextlib.asynccontextmanager
async def gated_client(gates: str, kube_version: str | None = None) -> AsyncIterator[Client]:
    """A client of an emulator of its own started with ``--feature-gates gates`` (and
    ``--kube-version``)."""
    server = ApiServer(feature_gates=gates, kube_version=kube_version)
    await server.start()
    try:
        async with aiohttp.ClientSession() as session:
            yield Client(session, server.url)
    finally:
        await server.stop()


async def wait_for(check: Callable[[], Awaitable[bool]], what: str) -> None:
    deadline = asyncio.get_running_loop().time() + 10.0
    while asyncio.get_running_loop().time() < deadline:
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")
