"""OpenAPI v3 documents built from kubernetes-validate's upstream schemas and the PodGroup CRD."""

from __future__ import annotations

from typing import Any

import orjson

from lockstep.sim.cluster import load_crd
from lockstep.sim.openapi import (
    V3_REF_PREFIX,
    ApiResource,
    OpenApiDocuments,
    SchemaIndex,
    builtin_schemas,
    group_version_document,
    resources_from_discovery,
)

POD_RESOURCES = resources_from_discovery(
    "v1",
    {
        "resources": [
            {
                "name": "pods",
                "namespaced": True,
                "kind": "Pod",
                "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
            },
            {"name": "pods/status", "namespaced": True, "kind": "Pod", "verbs": ["get", "patch", "update"]},
            {"name": "pods/binding", "namespaced": True, "kind": "Binding", "verbs": ["create"]},
        ]
    },
)
PODGROUP = ApiResource(
    group="scheduling.lockstep.dev",
    version="v1alpha1",
    name="podgroups",
    kind="PodGroup",
    namespaced=True,
    verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
)


def refs(node: Any) -> set[str]:
    found: set[str] = set()
    if isinstance(node, dict):
        if isinstance(node.get("$ref"), str):
            found.add(node["$ref"])
        for value in node.values():
            found |= refs(value)
    elif isinstance(node, list):
        for value in node:
            found |= refs(value)
    return found


def types(node: Any) -> list[Any]:
    """Every ``type`` value in a schema tree (a property called "type" is a dict and is skipped)."""
    if isinstance(node, dict):
        own = [node["type"]] if isinstance(node.get("type"), str | list) else []
        return own + [t for value in node.values() for t in types(value)]
    if isinstance(node, list):
        return [t for value in node for t in types(value)]
    return []


def test_builtin_schemas_keep_strategic_merge_keys_and_lose_json_schema_forms() -> None:
    schemas = builtin_schemas()
    containers = schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"]
    assert containers["x-kubernetes-patch-merge-key"] == "name"
    assert containers["x-kubernetes-patch-strategy"] == "merge"
    conditions = schemas["io.k8s.api.core.v1.PodStatus"]["properties"]["conditions"]
    assert conditions["x-kubernetes-patch-merge-key"] == "type"
    assert schemas["io.k8s.apimachinery.pkg.api.resource.Quantity"]["type"] == "string"
    assert schemas["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"] == "int-or-string"
    assert "enum" not in schemas["io.k8s.api.core.v1.Pod"]["properties"]["kind"]
    assert all(r.startswith(V3_REF_PREFIX) for r in refs(schemas))
    assert not [t for t in types(schemas["io.k8s.api.core.v1.Pod"]) if isinstance(t, list)]


def test_core_document_has_patchable_paths_with_field_validation_and_closed_schemas() -> None:
    document = group_version_document("", "v1", POD_RESOURCES, SchemaIndex([]))
    paths = document["paths"]
    patch = paths["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"]
    assert patch["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert "fieldValidation" in {p["name"] for p in patch["parameters"]}
    assert "application/strategic-merge-patch+json" in patch["requestBody"]["content"]
    binding = paths["/api/v1/namespaces/{namespace}/pods/{name}/binding"]["post"]
    assert binding["x-kubernetes-group-version-kind"]["kind"] == "Binding"
    assert "get" in paths["/api/v1/pods"]
    schemas = document["components"]["schemas"]
    missing = {r[len(V3_REF_PREFIX) :] for r in refs(document)} - set(schemas)
    assert not missing
    assert "io.k8s.api.core.v1.Container" in schemas
    assert "io.k8s.api.apps.v1.Deployment" not in schemas


def test_crd_document_describes_podgroup_for_explain() -> None:
    crd = load_crd()
    document = group_version_document(PODGROUP.group, PODGROUP.version, [PODGROUP], SchemaIndex([crd]))
    schemas = document["components"]["schemas"]
    podgroup = schemas["dev.lockstep.scheduling.v1alpha1.PodGroup"]
    assert podgroup["x-kubernetes-group-version-kind"] == [
        {"group": "scheduling.lockstep.dev", "kind": "PodGroup", "version": "v1alpha1"}
    ]
    assert podgroup["properties"]["metadata"]["allOf"] == [
        {"$ref": V3_REF_PREFIX + "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    assert (
        "minCount"
        in podgroup["properties"]["spec"]["properties"]["schedulingPolicy"]["properties"]["gang"][
            "properties"
        ]
    )
    assert "dev.lockstep.scheduling.v1alpha1.PodGroupList" in schemas
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    patch = document["paths"][
        "/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{namespace}/podgroups/{name}"
    ]["patch"]
    assert "application/strategic-merge-patch+json" not in patch["requestBody"]["content"]
    assert "application/merge-patch+json" in patch["requestBody"]["content"]


def test_root_lists_each_group_version_and_its_hash_follows_the_content() -> None:
    crd = load_crd()
    by_gv = {("", "v1"): POD_RESOURCES, (PODGROUP.group, PODGROUP.version): [PODGROUP]}
    first = OpenApiDocuments(by_gv, [crd])
    root = orjson.loads(first.root())["paths"]
    assert set(root) == {"api/v1", "apis/scheduling.lockstep.dev/v1alpha1"}
    assert root["api/v1"]["serverRelativeURL"].startswith("/openapi/v3/api/v1?hash=")
    changed = orjson.loads(orjson.dumps(crd))
    changed["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["description"] = (
        "changed"
    )
    second = OpenApiDocuments(by_gv, [changed])
    assert second.hashes["api/v1"] == first.hashes["api/v1"]
    assert (
        second.hashes["apis/scheduling.lockstep.dev/v1alpha1"]
        != first.hashes["apis/scheduling.lockstep.dev/v1alpha1"]
    )


def read_varint(data: bytes, offset: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, offset


def decode(data: bytes) -> list[tuple[int, Any]]:
    """Protobuf wire format -> [(field number, int | bytes)], one level deep."""
    fields: list[tuple[int, Any]] = []
    offset = 0
    while offset < len(data):
        key, offset = read_varint(data, offset)
        number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, offset = read_varint(data, offset)
        elif wire_type == 1:
            value, offset = data[offset : offset + 8], offset + 8
        elif wire_type == 2:
            length, offset = read_varint(data, offset)
            value, offset = data[offset : offset + length], offset + length
        else:
            raise AssertionError(f"unexpected wire type {wire_type}")
        fields.append((number, value))
    return fields


def named(entries: list[tuple[int, Any]]) -> dict[str, bytes]:
    """NamedX messages (1: name, 2: value) -> {name: encoded value}."""
    out = {}
    for _, entry in entries:
        parts = dict(decode(entry))
        out[parts[1].decode()] = parts[2]
    return out


def test_v2_protobuf_is_a_gnostic_document_with_merge_keys_and_crd_kinds() -> None:
    by_gv = {("", "v1"): POD_RESOURCES, (PODGROUP.group, PODGROUP.version): [PODGROUP]}
    documents = OpenApiDocuments(by_gv, [load_crd()])
    document = decode(documents.v2_protobuf)
    top = dict(document)
    assert top[1] == b"2.0"
    definitions = named(decode(top[9]))
    assert "dev.lockstep.scheduling.v1alpha1.PodGroup" in definitions
    # Schema.properties (25) -> Properties (repeated NamedSchema 1) -> "containers" -> vendor extensions (31)
    pod_spec = dict(decode(definitions["io.k8s.api.core.v1.PodSpec"]))
    containers = dict(decode(named(decode(pod_spec[25]))["containers"]))
    container_extensions = named(
        [(n, v) for n, v in decode(named(decode(pod_spec[25]))["containers"]) if n == 31]
    )
    assert dict(decode(container_extensions["x-kubernetes-patch-merge-key"]))[2] == b'"name"'
    assert containers[22] == b"\n\x05array"
    # A path's PATCH operation carries the GVK extension and the fieldValidation query parameter.
    paths = named([e for e in decode(top[8]) if e[0] == 2])
    item = dict(decode(paths["/api/v1/namespaces/{namespace}/pods/{name}"]))
    patch = decode(item[8])
    parameters = [decode(dict(decode(dict(decode(dict(decode(v))[1]))[2]))[3]) for n, v in patch if n == 8]
    assert (4, b"fieldValidation") in [field for parameter in parameters for field in parameter]
    assert "x-kubernetes-group-version-kind" in named([e for e in patch if e[0] == 13])
    assert orjson.loads(documents.v2_json)["definitions"].keys() == definitions.keys()
