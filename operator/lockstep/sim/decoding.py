"""The typed decoding kube-apiserver does before any strategy runs.

A built-in kind's body is decoded into its Go struct: a value of the wrong JSON type for a field (a
number where a string goes, an object where a list goes, an integer that overflows its field) stops
the request, naming the field, with Go's ``encoding/json`` message::

    json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string

A create or update answers it as 400 (``<Kind> in version "v1" cannot be handled as a <Kind>: ...``),
a patch as 422 on the field ``patch`` (see ``ApiServer._patch``). ``null`` decodes to the zero value
anywhere. The field types come from the upstream OpenAPI definitions the emulator also serves
(``openapi.builtin_schemas``); kinds without one (custom resources) are checked by their CRD's
structural schema instead. Unknown fields are dropped by :func:`drop_unknown_fields` for the kinds
whose strategy asks for it (``Strategy.drops_unknown_fields``; the server applies ``fieldValidation``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lockstep.sim import openapi
from lockstep.sim.versions import KubeVersion

Check = Callable[[Any], None]

REF_PREFIX = openapi.V3_REF_PREFIX
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class DecodeError(Exception):
    """A value Go's JSON decoder cannot put into its field. The field path is filled in while the
    error unwinds through the enclosing structs (the happy path builds no paths)."""

    def __init__(self, struct: str, got: str, go_type: str) -> None:
        super().__init__(got)
        self.struct, self.got, self.go_type = struct, got, go_type
        self.reversed_path: list[str] = []

    @property
    def field(self) -> str:
        return ".".join(reversed(self.reversed_path))

    @property
    def message(self) -> str:
        return (
            f"json: cannot unmarshal {self.got} into Go struct field {self.struct}.{self.field} "
            f"of type {self.go_type}"
        )

    def __str__(self) -> str:
        return self.message


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _go_name(definition: str) -> str:
    """``io.k8s.api.core.v1.Container`` -> ``v1.Container``, as Go prints a named type."""
    parts = definition.split(".")
    return ".".join(parts[-2:])


def _target(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema a property refers to (``$ref`` directly or wrapped in ``allOf``)."""
    if "$ref" in schema:
        return {"$ref": schema["$ref"]}
    all_of = schema.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and "$ref" in all_of[0]:
        return {"$ref": all_of[0]["$ref"]}
    return schema


def _go_type(schema: dict[str, Any]) -> str:
    schema = _target(schema)
    if "$ref" in schema:
        return _go_name(schema["$ref"][len(REF_PREFIX) :])
    kind, fmt = schema.get("type"), schema.get("format")
    if kind == "array":
        return "[]" + _go_type(schema.get("items") or {})
    if kind == "object":
        return "map[string]" + _go_type(schema.get("additionalProperties") or {})
    if kind == "integer":
        return fmt if fmt in INT_RANGES else "int"
    return {"boolean": "bool", "number": "float64", "string": "string"}.get(kind or "", "interface {}")


class _Compiler:
    def __init__(self, schemas: dict[str, dict[str, Any]]) -> None:
        self.schemas = schemas
        self.structs: dict[str, Check] = {}

    def struct(self, definition: str) -> Check:
        """The check of one definition, compiled once (definitions refer to each other, recursively)."""
        check = self.structs.get(definition)
        if check is not None:
            return check
        fields: dict[str, Check] = {}
        composite: set[str] = set()  # struct, list and map fields: null decodes to "absent"

        def check_struct(value: Any) -> None:
            if not isinstance(value, dict):
                return  # the caller checked the kind of value
            for key in [k for k, item in value.items() if item is None and k in composite]:
                del value[key]
            for key, item in value.items():
                field = fields.get(key)
                if field is not None and item is not None:
                    try:
                        field(item)
                    except DecodeError as error:
                        error.reversed_path.append(key)
                        raise

        self.structs[definition] = check_struct
        schema = self.schemas.get(definition) or {}
        struct_name = definition.rsplit(".", 1)[-1]
        for key, prop in (schema.get("properties") or {}).items():
            fields[key] = self.value(prop, struct_name)
            if self._is_composite(prop):
                composite.add(key)
        return check_struct

    def _resolved(self, schema: dict[str, Any]) -> dict[str, Any]:
        schema = _target(schema)
        return self.schemas.get(schema["$ref"][len(REF_PREFIX) :]) or {} if "$ref" in schema else schema

    def _is_composite(self, schema: dict[str, Any]) -> bool:
        return self._resolved(schema).get("type") in ("object", "array")

    def _is_struct(self, schema: dict[str, Any]) -> bool:
        return self._resolved(schema).get("type") == "object"

    def value(self, schema: dict[str, Any], struct: str) -> Check:
        """The check of a field of Go struct ``struct`` (its name appears in the message)."""
        schema = _target(schema)
        go_type = _go_type(schema)

        def refuse(value: Any, got: str | None = None) -> None:
            raise DecodeError(struct, got or _json_type(value), go_type)

        if "$ref" in schema:
            definition = schema["$ref"][len(REF_PREFIX) :]
            resolved = self.schemas.get(definition) or {}
            if resolved.get("type") != "object" or "properties" not in resolved:
                return self.value(resolved, struct) if resolved.get("type") else (lambda value: None)
            inner = self.struct(definition)

            def check_ref(value: Any) -> None:
                if not isinstance(value, dict):
                    refuse(value)
                inner(value)

            return check_ref
        kind, fmt = schema.get("type"), schema.get("format")
        if kind == "array":
            items = self.value(schema.get("items") or {}, struct)

            zero: dict[str, Any] | None = {} if self._is_struct(schema.get("items") or {}) else None

            def check_array(value: Any) -> None:
                if not isinstance(value, list):
                    refuse(value)
                for index, item in enumerate(value):
                    if item is None and zero is not None:
                        value[index] = item = dict(zero)  # Go decodes a null element to the zero struct
                    if item is not None:
                        items(item)

            return check_array
        if kind == "object":
            extra = schema.get("additionalProperties")
            values = self.value(extra, struct) if isinstance(extra, dict) else None

            def check_map(value: Any) -> None:
                if not isinstance(value, dict):
                    refuse(value)
                if values is not None:
                    for item in value.values():
                        if item is not None:
                            values(item)

            return check_map
        if kind == "string" and fmt in ("quantity", "int-or-string"):

            def check_number_or_string(value: Any) -> None:
                if isinstance(value, bool) or not isinstance(value, str | int | float):
                    refuse(value)

            return check_number_or_string
        if kind == "string":

            def check_string(value: Any) -> None:
                if not isinstance(value, str):
                    refuse(value)

            return check_string
        if kind == "integer":
            low, high = INT_RANGES.get(fmt or "", INT_RANGES["int64"])

            def check_integer(value: Any) -> None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    refuse(value)
                if isinstance(value, float) or not low <= value <= high:
                    refuse(value, f"number {value}")

            return check_integer
        if kind == "number":

            def check_number(value: Any) -> None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    refuse(value)

            return check_number
        if kind == "boolean":

            def check_bool(value: Any) -> None:
                if not isinstance(value, bool):
                    refuse(value)

            return check_bool
        return lambda value: None


@functools.cache
def _compiler(kube: KubeVersion) -> _Compiler:
    return _Compiler(openapi.builtin_schemas(kube))


@functools.cache
def kind_check(kube: KubeVersion, group: str, version: str, kind: str) -> Check | None:
    """The decoding check of a built-in kind of a kube version, or None when its upstream
    definitions lack it."""
    definition = openapi.builtin_kinds(kube).get((group, version, kind))
    return None if definition is None else _compiler(kube).struct(definition)


def check_definition(kube: KubeVersion, definition: str, obj: dict[str, Any]) -> None:
    """Raise DecodeError when ``obj`` cannot be decoded into the named upstream definition."""
    _compiler(kube).struct(definition)(obj)


def drop_unknown_fields(
    kube: KubeVersion, group: str, version: str, kind: str, obj: dict[str, Any]
) -> list[str]:
    """Drop the fields the kind's Go struct does not have, as Go's decoder does, and name them as
    kube-apiserver does (``spec.schedulingConstraints.topology[0].mode``), sorted. Structs without
    declared properties keep what they hold."""
    definition = openapi.builtin_kinds(kube).get((group, version, kind))
    if definition is None:
        return []
    unknown: list[str] = []
    _drop_unknown(openapi.builtin_schemas(kube), {"$ref": REF_PREFIX + definition}, obj, "", unknown)
    return sorted(unknown)


def _drop_unknown(
    schemas: dict[str, dict[str, Any]], schema: dict[str, Any], value: Any, path: str, unknown: list[str]
) -> None:
    schema = _target(schema)
    if "$ref" in schema:
        schema = schemas.get(schema["$ref"][len(REF_PREFIX) :]) or {}
    kind = schema.get("type")
    if kind == "array" and isinstance(value, list):
        for index, item in enumerate(value):
            _drop_unknown(schemas, schema.get("items") or {}, item, f"{path}[{index}]", unknown)
    elif kind == "object" and isinstance(value, dict):
        properties = schema.get("properties")
        extra = schema.get("additionalProperties")
        if properties:
            for key in list(value):
                where = f"{path}.{key}" if path else key
                if key not in properties:
                    del value[key]
                    unknown.append(where)
                else:
                    _drop_unknown(schemas, properties[key], value[key], where, unknown)
        elif isinstance(extra, dict):
            for key, item in value.items():
                _drop_unknown(schemas, extra, item, f"{path}[{key}]", unknown)


def check_decodable(kube: KubeVersion, group: str, version: str, kind: str, obj: dict[str, Any]) -> None:
    """Raise DecodeError when ``obj`` cannot be decoded into the kind's Go struct (as the kube
    version defines it)."""
    check = kind_check(kube, group, version, kind)
    if check is not None:
        check(obj)
