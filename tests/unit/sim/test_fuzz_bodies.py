"""Malformed bodies on every route of every served kind: the emulator answers 4xx with a Status naming
the problem, never a 500 (kube-apiserver's own 500 for a pod condition without ``type`` under a
strategic merge patch is the one exception, pinned by the smp-conditions transcript).

Each kind gets one valid object; hypothesis then sends, to its create, update, patch (merge,
strategic, JSON patch), status, binding and eviction routes, bodies that are not JSON, not objects, or
the valid object with one value anywhere in it replaced by a value of another type (nulls, huge and
negative numbers, strings, lists, objects).
"""

from __future__ import annotations

import asyncio
import copy
import http.client
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sim_helpers import PODGROUP_CRD

from lockstep.sim.apiserver import ApiServer

NS = "fuzz"
CLAIM_SPEC = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}}
POD_SPEC = {"containers": [{"name": "main", "image": "pause:3.10", "resources": {"requests": {"cpu": "1"}}}]}

# One valid object per served kind: (collection path, body).
SEEDS: dict[str, tuple[str, dict[str, Any]]] = {
    "Namespace": ("/api/v1/namespaces", {"metadata": {"name": "fuzz-ns"}}),
    "Node": ("/api/v1/nodes", {"metadata": {"name": "n1", "labels": {"a": "b"}}, "spec": {}}),
    "Pod": (
        f"/api/v1/namespaces/{NS}/pods",
        {
            "metadata": {"name": "p"},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "pause:3.10",
                        "resources": {"requests": {"cpu": "1"}, "limits": {"example.com/gpu": "1"}},
                    }
                ],
                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "4", "memory": "1Gi"}},
            },
            # a create drops it; the status routes fuzz its validation
            "status": {
                "extendedResourceClaimStatus": {
                    "requestMappings": [
                        {
                            "containerName": "main",
                            "resourceName": "example.com/gpu",
                            "requestName": "container-0-request-1",
                        }
                    ],
                    "resourceClaimName": "p-extended-resources-x7k2p",
                }
            },
        },
    ),
    "Binding": (
        f"/api/v1/namespaces/{NS}/bindings",
        {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n1"}},
    ),
    "PersistentVolume": (
        "/api/v1/persistentvolumes",
        {
            "metadata": {"name": "pv"},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": "/tmp/pv"},
            },
        },
    ),
    "PersistentVolumeClaim": (
        f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
        {
            "metadata": {"name": "pvc"},
            "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        },
    ),
    "Event": (
        f"/api/v1/namespaces/{NS}/events",
        {"metadata": {"name": "e"}, "involvedObject": {"namespace": NS, "name": "p"}, "reason": "R"},
    ),
    "events.k8s.io/Event": (
        f"/apis/events.k8s.io/v1/namespaces/{NS}/events",
        {
            "metadata": {"name": "e2"},
            "eventTime": "2026-12-01T00:00:00.000000Z",
            "type": "Normal",
            "reason": "R",
            "action": "A",
            "reportingController": "x.example/c",
            "reportingInstance": "i",
            "regarding": {"namespace": NS, "name": "p"},
        },
    ),
    "Lease": (
        f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases",
        {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me", "leaseDurationSeconds": 10}},
    ),
    "StorageClass": (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc"}, "provisioner": "x.example/p"},
    ),
    "CSINode": (
        "/apis/storage.k8s.io/v1/csinodes",
        {"metadata": {"name": "n1"}, "spec": {"drivers": [{"name": "x.example", "nodeID": "n1"}]}},
    ),
    "DeviceClass": (
        "/apis/resource.k8s.io/v1/deviceclasses",
        {"metadata": {"name": "gpu"}, "spec": {"selectors": [{"cel": {"expression": "true"}}]}},
    ),
    "ResourceClaim": (
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims",
        {"metadata": {"name": "c"}, "spec": CLAIM_SPEC},
    ),
    "ResourceClaimTemplate": (
        f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaimtemplates",
        {"metadata": {"name": "t"}, "spec": {"spec": CLAIM_SPEC}},
    ),
    "ResourceSlice": (
        "/apis/resource.k8s.io/v1/resourceslices",
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "nodeName": "n1",
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "devices": [
                    {"name": "d0", "attributes": {"a": {"int": 1}}, "capacity": {"m": {"value": "1"}}}
                ],
            },
        },
    ),
    "PriorityClass": (
        "/apis/scheduling.k8s.io/v1/priorityclasses",
        {"metadata": {"name": "pc"}, "value": 10},
    ),
    "PodDisruptionBudget": (
        f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets",
        {"metadata": {"name": "pdb"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"a": "b"}}}},
    ),
    "Job": (
        f"/apis/batch/v1/namespaces/{NS}/jobs",
        {
            "metadata": {"name": "j"},
            "spec": {"template": {"spec": {**POD_SPEC, "restartPolicy": "Never"}}},
        },
    ),
    "CustomResourceDefinition": ("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PODGROUP_CRD),
    "scheduling.k8s.io/PodGroup": (
        f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/podgroups",
        {"metadata": {"name": "upg"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
    ),
    "Workload": (
        f"/apis/scheduling.k8s.io/v1alpha2/namespaces/{NS}/workloads",
        {
            "metadata": {"name": "w"},
            "spec": {"podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}}]},
        },
    ),
    "scheduling.lockstep.dev/PodGroup": (
        f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{NS}/podgroups",
        {"metadata": {"name": "lpg"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
    ),
}

# 1.37's Workload API, fuzzed on an emulator of that version (kube_version="1.37").
SEEDS_137: dict[str, tuple[str, dict[str, Any]]] = {
    "scheduling.k8s.io/v1beta1/PodGroup": (
        f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/podgroups",
        {
            "metadata": {"name": "upg"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "workloadRef": {"workloadName": "w", "templateName": "g"},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/zone"}]},
                "resourceClaims": [{"name": "c", "resourceClaimTemplateName": "t"}],
                "priority": 5,
            },
        },
    ),
    "scheduling.k8s.io/v1beta1/Workload": (
        f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NS}/workloads",
        {
            "metadata": {"name": "w"},
            "spec": {
                "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "j"},
                "podGroupTemplates": [{"name": "g", "schedulingPolicy": {"basic": {}}}],
            },
        },
    ),
    "scheduling.k8s.io/v1alpha3/CompositePodGroup": (
        f"/apis/scheduling.k8s.io/v1alpha3/namespaces/{NS}/compositepodgroups",
        {
            "metadata": {"name": "cpg"},
            "spec": {
                "workloadRef": {"workloadName": "w", "templateName": "c"},
                "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                "disruptionMode": {"all": {}},
            },
        },
    ),
}

# Examples per kind: fixed and derandomized in the suite; raise it to hunt (LOCKSTEP_FUZZ_EXAMPLES=2000).
EXAMPLES = int(os.environ.get("LOCKSTEP_FUZZ_EXAMPLES", "60"))
MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class Server:
    """The emulator on a thread's event loop, called with blocking HTTP (as hypothesis needs)."""

    def __init__(self, kube_version: str = "1.36") -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.api = ApiServer(kube_version=kube_version)
        url = asyncio.run_coroutine_threadsafe(self.api.start(), self.loop).result(10)
        self.port = int(url.rsplit(":", 1)[1])

    def call(self, method: str, path: str, body: bytes | None, content_type: str) -> tuple[int, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Content-Type": content_type, "Accept": "application/json"}
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            raw = response.read()
        finally:
            connection.close()
        try:
            return response.status, json.loads(raw) if raw else None
        except ValueError:
            return response.status, raw.decode(errors="replace")

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.api.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    running = Server()
    created = {}
    for kind in ("Namespace", "CustomResourceDefinition", "Node", "DeviceClass"):
        created[kind] = SEEDS[kind]
    running.call(
        "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NS}}).encode(), "application/json"
    )
    for kind, (collection, body) in SEEDS.items():
        if kind == "Binding":
            continue
        status, answer = running.call("POST", collection, json.dumps(body).encode(), "application/json")
        assert status == 201, (kind, answer)
    yield running
    running.close()


@pytest.fixture(scope="module")
def server_137() -> Iterator[Server]:
    running = Server("1.37")
    running.call(
        "POST", "/api/v1/namespaces", json.dumps({"metadata": {"name": NS}}).encode(), "application/json"
    )
    for kind, (collection, body) in SEEDS_137.items():
        status, answer = running.call("POST", collection, json.dumps(body).encode(), "application/json")
        assert status == 201, (kind, answer)
    yield running
    running.close()


def test_every_served_kind_has_a_seed(server: Server) -> None:
    served = {(rt.group, rt.kind) for rt in server.api.types.values()}
    seeded = {(k.split("/")[0] if "/" in k else "", k.split("/")[-1]) for k in SEEDS}
    unseeded = {
        (group, kind)
        for group, kind in served
        if (group, kind) not in seeded and ("", kind) not in seeded and (group, kind) != ("", "Binding")
    }
    assert not unseeded, f"add a valid object of these kinds to SEEDS: {sorted(unseeded)}"


JSON_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
)


def paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every position in a JSON document (object keys and list indexes)."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(paths(item, (*prefix, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.extend(paths(item, (*prefix, index)))
    return found


def replaced(document: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    copied = copy.deepcopy(document)
    node = copied
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return copied


@st.composite
def malformed(draw: st.DrawFn, seed: dict[str, Any], content_type: str) -> bytes:
    """A body that is not JSON or not an object, or ``seed`` with one value replaced (for a JSON patch:
    an ``add`` of that value at that position)."""
    if draw(st.integers(0, 4)) == 0:
        return draw(
            st.sampled_from([b"", b"{", b"nul", b"1e999", b"-1", b"null", b"[]", b'"text"', b"[{}]", b"\xff"])
        )
    path = draw(st.sampled_from(paths(seed)))
    value = draw(JSON_VALUES)
    if content_type == JSON_PATCH:
        pointer = "".join(f"/{step}" for step in path)
        return json.dumps([{"op": "add", "path": pointer, "value": value}]).encode()
    return json.dumps(replaced(seed, path, value)).encode()


BINDING = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": "n1"}}
EVICTION = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "p"}, "deleteOptions": {}}
DELETE_OPTIONS = {
    "apiVersion": "v1",
    "kind": "DeleteOptions",
    "gracePeriodSeconds": 0,
    "preconditions": {"uid": "u", "resourceVersion": "1"},
    "propagationPolicy": "Background",
    "dryRun": ["All"],
}

Route = tuple[str, str, str, dict[str, Any]]


def item_routes(collection: str, seed: dict[str, Any], subresources: tuple[str, ...]) -> list[Route]:
    """Create, update, the three patch types, DELETE (as a dry run, so the object stays) and the
    subresources, each with the valid body its malformed ones are made from."""
    item = f"{collection}/{seed['metadata']['name']}"
    routes: list[Route] = [
        ("POST", collection, "application/json", seed),
        ("PUT", item, "application/json", seed),
    ]
    routes += [("PATCH", item, t, seed) for t in (MERGE, SMP, JSON_PATCH)]
    routes.append(("DELETE", f"{item}?dryRun=All", "application/json", DELETE_OPTIONS))
    for sub in subresources:
        if sub == "status":
            routes += [("PUT", f"{item}/status", "application/json", seed)]
            routes += [("PATCH", f"{item}/status", t, seed) for t in (MERGE, SMP)]
        else:
            routes.append(
                ("POST", f"{item}/{sub}", "application/json", BINDING if sub == "binding" else EVICTION)
            )
    return routes


def allowed_500(path: str, content_type: str, answer: Any) -> bool:
    """kube-apiserver's own 500: a pod condition without ``type`` in a strategic merge patch."""
    return (
        "/pods/" in path
        and content_type == SMP
        and isinstance(answer, dict)
        and "does not contain declared merge key: type" in str(answer.get("message"))
    )


@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_malformed_bodies_get_a_4xx_status_never_a_500(server: Server, kind: str) -> None:
    fuzz_kind(server, kind, *SEEDS[kind])


@pytest.mark.parametrize("kind", sorted(SEEDS_137))
def test_malformed_137_workload_api_bodies_get_a_4xx_status_never_a_500(
    server_137: Server, kind: str
) -> None:
    fuzz_kind(server_137, kind, *SEEDS_137[kind])


def test_the_137_seeds_cover_its_scheduling_kinds(server_137: Server) -> None:
    served = {
        (rt.version, rt.kind) for rt in server_137.api.types.values() if rt.group == "scheduling.k8s.io"
    }
    seeded = {tuple(k.split("/")[1:]) for k in SEEDS_137}
    assert served - {("v1", "PriorityClass")} == seeded


def fuzz_kind(server: Server, kind: str, collection: str, seed: dict[str, Any]) -> None:
    rt = next(
        rt
        for rt in server.api.types.values()
        if collection.split("?")[0].rstrip("/").endswith(rt.plural)
        and (f"/{rt.group}/" in collection or (not rt.group and collection.startswith("/api/")))
    )
    routes = item_routes(collection, seed, rt.subresources)
    if kind == "Binding":
        routes = [("POST", collection, "application/json", seed)]

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        method, path, content_type, valid = data.draw(st.sampled_from(routes))
        body = data.draw(malformed(valid, content_type))
        status, answer = server.call(method, path, body, content_type)
        if status >= 500 and allowed_500(path, content_type, answer):
            return
        assert status < 500, (method, path, content_type, body[:300], answer)
        if status >= 400:
            assert isinstance(answer, dict) and answer.get("kind") == "Status", (method, path, answer)
            assert answer.get("message"), answer

    check()
