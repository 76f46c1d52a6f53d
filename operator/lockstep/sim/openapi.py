"""OpenAPI v3 documents for the API server emulator, enough for real ``kubectl``.

``/openapi/v3`` lists one document per served group-version; ``/openapi/v3/<api|apis/...>`` is
that document: the paths of every served resource (with ``x-kubernetes-group-version-kind`` and the
``fieldValidation`` parameter kubectl looks for before it asks for server-side validation) and the
transitive closure of the schemas they use. kubectl uses these for ``explain``, for the query
parameter check of ``apply``/``create``/``patch``, and for client-side apply's strategic merge
patch (``x-kubernetes-patch-merge-key`` / ``x-kubernetes-patch-strategy``).

Built-in schemas are not written here: they come from the upstream OpenAPI definitions that the
``kubernetes-validate`` package ships (converted from its JSON-schema form back to OpenAPI: refs,
nullable type lists, Quantity/IntOrString). Custom resources get a schema built from their CRD's
``openAPIV3Schema`` the way kube-apiextensions-apiserver does (``metadata`` as ObjectMeta, the
``x-kubernetes-group-version-kind`` extension, a ``<Kind>List`` schema).

``/openapi/v2`` (JSON, or gnostic protobuf which is all client-go asks for) is the union of the v3
documents in v2 form; kubectl 1.27 and 1.28 still read it for ``explain``.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson
from aiohttp import web

from lockstep.sim.resources import ResourceType
from lockstep.sim.store import ResourceStore
from lockstep.sim.versions import KubeVersion, kube_version

JsonObject = dict[str, Any]

V3_REF_PREFIX = "#/components/schemas/"
SOURCE_REF_PREFIX = "#/$defs/"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
OBJECT_META = META + "ObjectMeta"
LIST_META = META + "ListMeta"
PATCH_SCHEMA = META + "Patch"
STATUS_SCHEMA = META + "Status"
DELETE_OPTIONS = META + "DeleteOptions"

API_VERSION_DESCRIPTION = (
    "APIVersion defines the versioned schema of this representation of an object. Servers should "
    "convert recognized schemas to the latest internal value, and may reject unrecognized values. "
    "More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"
)
KIND_DESCRIPTION = (
    "Kind is a string value representing the REST resource this object represents. Servers may infer "
    "this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)
METADATA_DESCRIPTION = (
    "Standard object's metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"
)
LIST_METADATA_DESCRIPTION = (
    "Standard list metadata. More info: "
    "https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"
)

PATCH_CONTENT_TYPES = (
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
)


@dataclass(frozen=True)
class ApiResource:
    """One entry of an APIResourceList: ``name`` is the plural, or ``plural/subresource``."""

    group: str
    version: str
    name: str
    kind: str
    namespaced: bool
    verbs: tuple[str, ...]


def resources_from_discovery(group_version: str, resource_list: Mapping[str, Any]) -> list[ApiResource]:
    """The resources of one ``/api/v1`` or ``/apis/<group>/<version>`` discovery document."""
    group, _, version = group_version.rpartition("/")
    return [
        ApiResource(
            group=str(entry.get("group", group) or group),
            version=str(entry.get("version", version) or version),
            name=str(entry["name"]),
            kind=str(entry["kind"]),
            namespaced=bool(entry.get("namespaced")),
            verbs=tuple(entry.get("verbs") or ()),
        )
        for entry in resource_list.get("resources") or []
    ]


def document_path(group: str, version: str) -> str:
    """The key of a group-version in ``/openapi/v3``: ``api/v1`` or ``apis/<group>/<version>``."""
    return f"api/{version}" if not group else f"apis/{group}/{version}"


# --- built-in schemas ---------------------------------------------------------------------------


def _convert(node: Any) -> Any:
    """kubernetes-validate's JSON-schema form -> OpenAPI v3 (as kube-apiserver publishes it)."""
    if isinstance(node, list):
        return [_convert(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: JsonObject = {}
    for key, value in node.items():
        if key == "$ref":
            continue
        if key == "type" and isinstance(value, list):
            kinds = [kind for kind in value if kind != "null"]
            out["type"] = kinds[0] if len(kinds) == 1 else kinds
        elif key == "properties":
            out[key] = {name: _convert_property(name, schema) for name, schema in value.items()}
        else:
            out[key] = _convert(value)
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(SOURCE_REF_PREFIX):
        target = {"$ref": V3_REF_PREFIX + ref[len(SOURCE_REF_PREFIX) :]}
        # OpenAPI 3.0 ignores siblings of $ref; kube-apiserver wraps the ref in allOf instead.
        return {"allOf": [target], **out} if out else target
    return out


def _convert_property(name: str, schema: Any) -> Any:
    converted = _convert(schema)
    # The JSON-schema set pins apiVersion/kind of each kind with an enum; the API's schemas do not.
    if name in ("apiVersion", "kind") and isinstance(converted, dict):
        converted.pop("enum", None)
    return converted


SCALAR_OVERRIDES: dict[str, JsonObject] = {
    "io.k8s.apimachinery.pkg.api.resource.Quantity": {"type": "string", "format": "quantity"},
    "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
}


def builtin_schemas(kube: str | KubeVersion | None = None) -> dict[str, JsonObject]:
    """Every upstream definition of a kube version (None: the default one), converted to OpenAPI v3
    component schemas."""
    return _schema_set(kube_version(kube).schema_set)


@functools.cache
def _schema_set(schema_set: str) -> dict[str, JsonObject]:
    # find_spec locates the package without importing it (its import pulls in jsonschema: seconds).
    spec = importlib.util.find_spec("kubernetes_validate")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "kubernetes-validate is not installed: the emulator serves its schemas "
            "(pip install 'lockstep[sim]')"
        )
    source = Path(
        spec.submodule_search_locations[0], "kubernetes-json-schema", schema_set, "_definitions.json"
    )
    definitions: dict[str, Any] = orjson.loads(source.read_bytes())["$defs"]
    schemas = {name: _convert(schema) for name, schema in definitions.items()}
    for name, override in SCALAR_OVERRIDES.items():
        description = schemas.get(name, {}).get("description")
        schemas[name] = {**override, **({"description": description} if description else {})}
    return schemas


def builtin_kinds(kube: str | KubeVersion | None = None) -> dict[tuple[str, str, str], str]:
    """(group, version, kind) -> schema name, from ``x-kubernetes-group-version-kind``."""
    return _kinds_of(kube_version(kube).schema_set)


@functools.cache
def _kinds_of(schema_set: str) -> dict[tuple[str, str, str], str]:
    kinds: dict[tuple[str, str, str], str] = {}
    for name, schema in _schema_set(schema_set).items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            kinds.setdefault((gvk["group"], gvk["version"], gvk["kind"]), name)
    return kinds


# --- custom resources ---------------------------------------------------------------------------


def _reversed_group(group: str) -> str:
    return ".".join(reversed(group.split(".")))


def crd_schemas(crd: Mapping[str, Any]) -> dict[tuple[str, str, str], tuple[str, JsonObject]]:
    """(group, version, kind) -> (schema name, schema) for each served version of ``crd``.

    Includes the ``<Kind>List`` of each version.
    """
    spec = crd.get("spec") or {}
    group = str(spec.get("group", ""))
    names = spec.get("names") or {}
    kind = str(names.get("kind", ""))
    list_kind = str(names.get("listKind") or f"{kind}List")
    out: dict[tuple[str, str, str], tuple[str, JsonObject]] = {}
    for version in spec.get("versions") or []:
        if not version.get("served"):
            continue
        version_name = str(version["name"])
        prefix = f"{_reversed_group(group)}.{version_name}."
        schema: JsonObject = orjson.loads(
            orjson.dumps((version.get("schema") or {}).get("openAPIV3Schema") or {"type": "object"})
        )
        properties = schema.setdefault("properties", {})
        properties["apiVersion"] = {"type": "string", "description": API_VERSION_DESCRIPTION}
        properties["kind"] = {"type": "string", "description": KIND_DESCRIPTION}
        properties["metadata"] = {
            "allOf": [{"$ref": V3_REF_PREFIX + OBJECT_META}],
            "description": METADATA_DESCRIPTION,
        }
        schema.setdefault("type", "object")
        schema["x-kubernetes-group-version-kind"] = [{"group": group, "kind": kind, "version": version_name}]
        out[(group, version_name, kind)] = (prefix + kind, schema)
        out[(group, version_name, list_kind)] = (
            prefix + list_kind,
            {
                "description": f"{list_kind} is a list of {kind}",
                "type": "object",
                "required": ["items"],
                "properties": {
                    "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
                    "items": {
                        "type": "array",
                        "description": f"List of {names.get('plural', kind.lower())}. More info: "
                        "https://git.k8s.io/community/contributors/devel/api-conventions.md",
                        "items": {"$ref": V3_REF_PREFIX + prefix + kind},
                    },
                    "kind": {"type": "string", "description": KIND_DESCRIPTION},
                    "metadata": {
                        "allOf": [{"$ref": V3_REF_PREFIX + LIST_META}],
                        "description": LIST_METADATA_DESCRIPTION,
                    },
                },
                "x-kubernetes-group-version-kind": [
                    {"group": group, "kind": list_kind, "version": version_name}
                ],
            },
        )
    return out


# --- documents ----------------------------------------------------------------------------------


def _ref(name: str) -> JsonObject:
    return {"$ref": V3_REF_PREFIX + name}


def _json_response(schema_name: str) -> JsonObject:
    return {
        "description": "OK",
        "content": {
            media: {"schema": _ref(schema_name)}
            for media in ("application/json", "application/yaml", "application/vnd.kubernetes.protobuf")
        },
    }


def _query(name: str, description: str, kind: str = "string") -> JsonObject:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": kind, "uniqueItems": True},
    }


WRITE_PARAMETERS = [
    _query("dryRun", "When present, indicates that modifications should not be persisted."),
    _query(
        "fieldManager", "fieldManager is a name associated with the actor or entity making these changes."
    ),
    _query(
        "fieldValidation",
        "fieldValidation instructs the server on how to handle objects in the request containing unknown "
        "or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
    ),
]
PATCH_PARAMETERS = [*WRITE_PARAMETERS, _query("force", "Force is going to force Apply requests.", "boolean")]
LIST_PARAMETERS = [
    _query("labelSelector", "A selector to restrict the list of returned objects by their labels."),
    _query("fieldSelector", "A selector to restrict the list of returned objects by their fields."),
    _query("limit", "limit is a maximum number of responses to return for a list call.", "integer"),
    _query("continue", "The continue option should be set when retrieving more results from the server."),
    _query(
        "resourceVersion",
        "resourceVersion sets a constraint on what resource versions a request may be served from.",
    ),
    _query("watch", "Watch for changes to the described resources.", "boolean"),
]


def _operation(
    action: str, gvk: tuple[str, str, str], response: str, operation_id: str, *, strategic: bool = True
) -> JsonObject:
    group, version, kind = gvk
    operation: JsonObject = {
        "operationId": operation_id,
        "responses": {"200": _json_response(response), "401": {"description": "Unauthorized"}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": group, "version": version, "kind": kind},
    }
    if action in ("post", "put"):
        operation["parameters"] = list(WRITE_PARAMETERS)
        operation["requestBody"] = {"content": {"*/*": {"schema": _ref(response)}}, "required": True}
        if action == "post":
            operation["responses"]["201"] = _json_response(response)
    elif action == "patch":
        operation["parameters"] = list(PATCH_PARAMETERS)
        # Custom resources do not accept strategic merge patch.
        content_types = PATCH_CONTENT_TYPES if strategic else PATCH_CONTENT_TYPES[:-1]
        operation["requestBody"] = {
            "content": {media: {"schema": _ref(PATCH_SCHEMA)} for media in content_types},
            "required": True,
        }
    elif action == "list":
        operation["parameters"] = list(LIST_PARAMETERS)
    elif action in ("delete", "deletecollection"):
        operation["requestBody"] = {"content": {"*/*": {"schema": _ref(DELETE_OPTIONS)}}}
        operation["responses"]["202"] = _json_response(response)
    return operation


def _path_parameters(namespaced: bool, named: bool) -> list[JsonObject]:
    parameters = []
    if named:
        parameters.append(
            {
                "name": "name",
                "in": "path",
                "required": True,
                "description": "name of the object",
                "schema": {"type": "string", "uniqueItems": True},
            }
        )
    if namespaced:
        parameters.append(
            {
                "name": "namespace",
                "in": "path",
                "required": True,
                "description": "object name and auth scope",
                "schema": {"type": "string", "uniqueItems": True},
            }
        )
    parameters.append(_query("pretty", "If 'true', then the output is pretty printed."))
    return parameters


class SchemaIndex:
    """Schemas by name and by (group, version, kind): the built-ins plus the given CRDs."""

    def __init__(self, crds: Iterable[Mapping[str, Any]], kube: str | KubeVersion | None = None) -> None:
        self.kube = kube_version(kube)
        self.builtin = builtin_schemas(self.kube)
        self.schemas: dict[str, JsonObject] = dict(self.builtin)
        self.kinds: dict[tuple[str, str, str], str] = dict(builtin_kinds(self.kube))
        for crd in crds:
            for gvk, (name, schema) in crd_schemas(crd).items():
                self.schemas[name] = schema
                self.kinds[gvk] = name

    def closure(self, roots: Iterable[str]) -> dict[str, JsonObject]:
        """The named schemas and every schema they reference, transitively."""
        found: dict[str, JsonObject] = {}
        pending = [name for name in roots if name in self.schemas]
        while pending:
            name = pending.pop()
            if name in found:
                continue
            schema = self.schemas[name]
            found[name] = schema
            pending.extend(ref for ref in _refs(schema) if ref not in found and ref in self.schemas)
        return dict(sorted(found.items()))


def _refs(node: Any) -> Iterable[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(V3_REF_PREFIX):
            yield ref[len(V3_REF_PREFIX) :]
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def group_version_document(
    group: str, version: str, resources: Iterable[ApiResource], index: SchemaIndex
) -> JsonObject:
    """The OpenAPI v3 document of one group-version."""
    prefix = "/api/v1" if not group else f"/apis/{group}/{version}"
    paths: dict[str, JsonObject] = {}
    roots: set[str] = {STATUS_SCHEMA, DELETE_OPTIONS, PATCH_SCHEMA}
    resource_list = list(resources)
    kinds = {r.name: r.kind for r in resource_list if "/" not in r.name}
    for resource in resource_list:
        plural, _, subresource = resource.name.partition("/")
        gvk = (resource.group or group, resource.version or version, resource.kind)
        schema_name = index.kinds.get(gvk)
        if schema_name is None:
            continue
        roots.add(schema_name)
        builtin = schema_name in index.builtin
        parent_kind = kinds.get(plural, resource.kind)
        scope = f"{prefix}/namespaces/{{namespace}}/{plural}" if resource.namespaced else f"{prefix}/{plural}"
        op_base = f"{resource.name.replace('/', '_')}_{parent_kind}"
        verbs = set(resource.verbs)
        if subresource:
            item_path: JsonObject = {"parameters": _path_parameters(resource.namespaced, True)}
            for verb, action in (("get", "get"), ("update", "put"), ("patch", "patch"), ("create", "post")):
                if verb in verbs:
                    http_method = "post" if action == "post" else action
                    item_path[http_method] = _operation(
                        action, gvk, schema_name, f"{action}_{op_base}_{subresource}", strategic=builtin
                    )
            paths[f"{scope}/{{name}}/{subresource}"] = item_path
            continue
        list_gvk = (gvk[0], gvk[1], gvk[2] + "List")
        list_schema = index.kinds.get(list_gvk)
        if list_schema is not None:
            roots.add(list_schema)
        collection: JsonObject = {"parameters": _path_parameters(resource.namespaced, False)}
        if "list" in verbs and list_schema is not None:
            collection["get"] = _operation("list", list_gvk, list_schema, f"list_{op_base}")
            if resource.namespaced:
                paths[f"{prefix}/{plural}"] = {
                    "parameters": _path_parameters(False, False),
                    "get": _operation("list", list_gvk, list_schema, f"list_{op_base}_all"),
                }
        if "create" in verbs:
            collection["post"] = _operation("post", gvk, schema_name, f"create_{op_base}")
        if "deletecollection" in verbs:
            collection["delete"] = _operation(
                "deletecollection", gvk, STATUS_SCHEMA, f"deletecollection_{op_base}"
            )
        paths[scope] = collection
        item: JsonObject = {"parameters": _path_parameters(resource.namespaced, True)}
        for verb, action in (("get", "get"), ("update", "put"), ("patch", "patch"), ("delete", "delete")):
            if verb in verbs:
                response = STATUS_SCHEMA if action == "delete" else schema_name
                item[action] = _operation(action, gvk, response, f"{action}_{op_base}", strategic=builtin)
        paths[f"{scope}/{{name}}"] = item
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": index.kube.git_version},
        "paths": dict(sorted(paths.items())),
        "components": {"schemas": index.closure(roots)},
    }


class OpenApiDocuments:
    """The ``/openapi/v3`` root, the per group-version documents and ``/openapi/v2``, serialized."""

    def __init__(
        self,
        resources_by_group_version: Mapping[tuple[str, str], list[ApiResource]],
        crds: Iterable[Mapping[str, Any]],
        kube: str | KubeVersion | None = None,
    ) -> None:
        index = SchemaIndex(crds, kube)
        self.kube = index.kube
        self.documents: dict[str, bytes] = {}
        self.hashes: dict[str, str] = {}
        self._v3: list[JsonObject] = []
        for (group, version), resources in sorted(resources_by_group_version.items()):
            document = group_version_document(group, version, resources, index)
            self._v3.append(document)
            body = orjson.dumps(document)
            path = document_path(group, version)
            self.documents[path] = body
            self.hashes[path] = hashlib.sha512(body).hexdigest().upper()

    def root(self) -> bytes:
        return orjson.dumps(
            {
                "paths": {
                    path: {"serverRelativeURL": f"/openapi/v3/{path}?hash={digest}"}
                    for path, digest in self.hashes.items()
                }
            }
        )

    @functools.cached_property
    def v2(self) -> JsonObject:
        return v2_document(self._v3, self.kube)

    @functools.cached_property
    def v2_json(self) -> bytes:
        return orjson.dumps(self.v2)

    @functools.cached_property
    def v2_protobuf(self) -> bytes:
        return v2_protobuf(self.v2)


# --- OpenAPI v2 ---------------------------------------------------------------------------------
# kubectl 1.27 and 1.28 read /openapi/v2 (explain, and the fieldValidation check), and client-go
# asks for it only as gnostic protobuf (openapi.v2.Document). The v2 document is derived from the
# v3 ones; the encoder below writes the subset of gnostic's OpenAPIv2.proto that it needs.

V2_REF_PREFIX = "#/definitions/"
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
V3_ONLY_KEYS = frozenset({"anyOf", "oneOf", "not", "nullable"})


def v2_schema(schema: Any) -> Any:
    """An OpenAPI v3 schema in v2 form: refs to ``#/definitions/``, no allOf wrapper, no v3-only keys."""
    if isinstance(schema, list):
        return [v2_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out: JsonObject = {}
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        out["$ref"] = V2_REF_PREFIX + str(all_of[0]["$ref"])[len(V3_REF_PREFIX) :]
    for key, value in schema.items():
        if key in V3_ONLY_KEYS or (key == "allOf" and "$ref" in out):
            continue
        if key == "$ref":
            out[key] = V2_REF_PREFIX + str(value)[len(V3_REF_PREFIX) :]
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: v2_schema(sub) for name, sub in value.items()}
        elif key.startswith("x-") or key in ("default", "enum", "example"):
            out[key] = value
        else:
            out[key] = v2_schema(value)
    return out


def v2_document(v3_documents: Iterable[JsonObject], kube: str | KubeVersion | None = None) -> JsonObject:
    paths: JsonObject = {}
    definitions: JsonObject = {}
    for document in v3_documents:
        for path, item in document["paths"].items():
            paths[path] = {
                method: {
                    "operationId": operation["operationId"],
                    "parameters": [
                        {"name": p["name"], "in": p["in"], "type": p["schema"]["type"], "uniqueItems": True}
                        for p in operation.get("parameters") or []
                    ],
                    **{key: value for key, value in operation.items() if key.startswith("x-")},
                }
                for method, operation in item.items()
                if method in ("get", "put", "post", "delete", "patch")
            }
        for name, schema in document["components"]["schemas"].items():
            definitions[name] = v2_schema(schema)
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": kube_version(kube).git_version},
        "paths": dict(sorted(paths.items())),
        "definitions": dict(sorted(definitions.items())),
    }


def _pb_varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _pb_len(field_number: int, payload: bytes) -> bytes:
    return _pb_varint(field_number << 3 | 2) + _pb_varint(len(payload)) + payload


def _pb_str(field_number: int, text: str) -> bytes:
    return _pb_len(field_number, text.encode())


def _pb_int(field_number: int, value: int) -> bytes:
    return _pb_varint(field_number << 3) + _pb_varint(value)


def _pb_double(field_number: int, value: float) -> bytes:
    return _pb_varint(field_number << 3 | 1) + struct.pack("<d", float(value))


def _pb_any(field_number: int, value: Any) -> bytes:
    # gnostic's Any keeps a value as YAML text; JSON is YAML.
    return _pb_len(field_number, _pb_str(2, orjson.dumps(value).decode()))


def _pb_named_any(field_number: int, name: str, value: Any) -> bytes:
    return _pb_len(field_number, _pb_str(1, name) + _pb_any(2, value))


SCHEMA_STRINGS = (("format", 2), ("title", 3), ("description", 4), ("pattern", 13), ("discriminator", 26))
SCHEMA_DOUBLES = (("multipleOf", 6), ("maximum", 7), ("minimum", 9))
SCHEMA_INTS = (
    ("maxLength", 11),
    ("minLength", 12),
    ("maxItems", 14),
    ("minItems", 15),
    ("maxProperties", 17),
    ("minProperties", 18),
)
SCHEMA_BOOLS = (("exclusiveMaximum", 8), ("exclusiveMinimum", 10), ("uniqueItems", 16), ("readOnly", 27))


def _pb_schema(schema: JsonObject) -> bytes:
    """openapi.v2.Schema"""
    out = bytearray()
    if "$ref" in schema:
        out += _pb_str(1, str(schema["$ref"]))
    for key, number in SCHEMA_STRINGS:
        if isinstance(schema.get(key), str):
            out += _pb_str(number, schema[key])
    if "default" in schema:
        out += _pb_any(5, schema["default"])
    for key, number in SCHEMA_DOUBLES:
        if isinstance(schema.get(key), int | float):
            out += _pb_double(number, schema[key])
    for key, number in SCHEMA_INTS:
        if isinstance(schema.get(key), int):
            out += _pb_int(number, schema[key])
    for key, number in SCHEMA_BOOLS:
        if schema.get(key) is True:
            out += _pb_int(number, 1)
    for required in schema.get("required") or []:
        out += _pb_str(19, str(required))
    for value in schema.get("enum") or []:
        out += _pb_any(20, value)
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        out += _pb_len(21, _pb_len(1, _pb_schema(additional)))
    elif isinstance(additional, bool):
        out += _pb_len(21, _pb_int(2, int(additional)))
    kinds = schema.get("type")
    if kinds:
        out += _pb_len(
            22, b"".join(_pb_str(1, kind) for kind in ([kinds] if isinstance(kinds, str) else kinds))
        )
    items = schema.get("items")
    if isinstance(items, dict):
        out += _pb_len(23, _pb_len(1, _pb_schema(items)))
    for member in schema.get("allOf") or []:
        out += _pb_len(24, _pb_schema(member))
    properties = schema.get("properties")
    if isinstance(properties, dict):
        named = b"".join(
            _pb_len(1, _pb_str(1, name) + _pb_len(2, _pb_schema(sub))) for name, sub in properties.items()
        )
        out += _pb_len(25, named)
    for key, value in schema.items():
        if key.startswith("x-"):
            out += _pb_named_any(31, key, value)
    return bytes(out)


PATH_ITEM_FIELDS = {"get": 2, "put": 3, "post": 4, "delete": 5, "patch": 8}


def _pb_operation(operation: JsonObject) -> bytes:
    """openapi.v2.Operation with query parameters as NonBodyParameter.QueryParameterSubSchema."""
    out = bytearray(_pb_str(5, str(operation["operationId"])))
    for parameter in operation.get("parameters") or []:
        query = (
            _pb_str(2, str(parameter["in"]))
            + _pb_str(4, str(parameter["name"]))
            + _pb_str(6, str(parameter["type"]))
            + _pb_int(20, 1)
        )
        out += _pb_len(8, _pb_len(1, _pb_len(2, _pb_len(3, query))))
    for key, value in operation.items():
        if key.startswith("x-"):
            out += _pb_named_any(13, key, value)
    return bytes(out)


def v2_protobuf(document: JsonObject) -> bytes:
    """openapi.v2.Document, as client-go's discovery client reads ``/openapi/v2``."""
    info = _pb_str(1, document["info"]["title"]) + _pb_str(2, document["info"]["version"])
    paths = b"".join(
        _pb_len(
            2,
            _pb_str(1, path)
            + _pb_len(
                2,
                b"".join(_pb_len(PATH_ITEM_FIELDS[method], _pb_operation(op)) for method, op in item.items()),
            ),
        )
        for path, item in document["paths"].items()
    )
    definitions = b"".join(
        _pb_len(1, _pb_str(1, name) + _pb_len(2, _pb_schema(schema)))
        for name, schema in document["definitions"].items()
    )
    return _pb_str(1, document["swagger"]) + _pb_len(2, info) + _pb_len(8, paths) + _pb_len(9, definitions)


# --- HTTP ---------------------------------------------------------------------------------------

CRD_TYPE_KEY = ("apiextensions.k8s.io", "v1", "customresourcedefinitions")
V2_PROTOBUF_RESPONSE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"


class ServedApi(Protocol):
    """What the documents are built from: the server's kube version, served types and stores (the
    ``ApiServer``; a protocol so that this module does not import the server, which imports it)."""

    @property
    def kube_version(self) -> KubeVersion: ...

    @property
    def types(self) -> dict[tuple[str, str, str], ResourceType]: ...

    @property
    def stores(self) -> dict[str, ResourceStore]: ...


class _DocumentCache:
    """Rebuilds the documents only when the served types or the CRDs changed."""

    def __init__(self, server: ServedApi) -> None:
        self.server = server
        self._fingerprint: tuple[Any, ...] = ()
        self._documents: OpenApiDocuments | None = None

    def current(self) -> OpenApiDocuments:
        server = self.server
        crd_type = server.types.get(CRD_TYPE_KEY)
        crd_items = server.stores[crd_type.storage].sorted_items(None) if crd_type is not None else []
        fingerprint = (
            tuple(sorted(server.types)),
            tuple((s.obj["metadata"]["name"], s.rv) for s in crd_items),
        )
        if self._documents is None or fingerprint != self._fingerprint:
            by_group_version: dict[tuple[str, str], list[ApiResource]] = {}
            for (group, version, _), resource_type in sorted(server.types.items()):
                group_version = f"{group}/{version}" if group else version
                by_group_version.setdefault((group, version), []).extend(
                    resources_from_discovery(group_version, {"resources": resource_type.discovery()})
                )
            self._documents = OpenApiDocuments(
                by_group_version, [s.obj for s in crd_items], server.kube_version
            )
            self._fingerprint = fingerprint
        return self._documents


def register(app: web.Application, server: ServedApi) -> None:
    """Serve ``/openapi/v2``, ``/openapi/v3`` and ``/openapi/v3/<group-version>`` from ``server``'s types."""
    cache = _DocumentCache(server)

    async def v2(request: web.Request) -> web.Response:
        documents = cache.current()
        if "protobuf" in request.headers.get("Accept", ""):
            return web.Response(body=documents.v2_protobuf, headers={"Content-Type": V2_PROTOBUF_RESPONSE})
        return web.Response(body=documents.v2_json, content_type="application/json")

    async def v3_root(request: web.Request) -> web.Response:
        return web.Response(body=cache.current().root(), content_type="application/json")

    async def v3_document(request: web.Request) -> web.Response:
        documents = cache.current()
        path = request.match_info["path"]
        body = documents.documents.get(path)
        if body is None:
            return web.Response(status=404, text="404 page not found\n")
        digest = documents.hashes[path]
        immutable = request.query.get("hash") == digest
        headers = {
            "Content-Type": "application/json",
            "Etag": f'"{digest}"',
            "Cache-Control": "public, immutable" if immutable else "no-cache, private",
        }
        return web.Response(body=body, headers=headers)

    app.router.add_get("/openapi/v2", v2)
    app.router.add_get("/openapi/v3", v3_root)
    app.router.add_get("/openapi/v3/{path:.+}", v3_document)
