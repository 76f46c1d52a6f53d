"""The typed decoding kube-apiserver does before any strategy runs.

A built-in kind's body is decoded into its Go struct: a value of the wrong JSON type for a field (a
number where a string goes, an object where a list goes, an integer that overflows its field) stops
the request, naming the field, with Go's ``encoding/json`` message::

    json: cannot unmarshal number into Go struct field ObjectMeta.metadata.name of type string

A create or update answers it as 400 (``<Kind> in version "v1" cannot be handled as a <Kind>: ...``),
a patch as 422 on the field ``patch`` (see ``ApiServer._patch``). ``null`` decodes to the zero value
anywhere, and unknown fields are not this module's business. The field types come from the upstream
OpenAPI definitions the emulator also serves (``openapi.builtin_schemas``); kinds without one (custom
resources) are checked by their CRD's structural schema instead.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from lockstep.sim import openapi

Check = Callable[[Any, tuple[str, ...]], None]

REF_PREFIX = openapi.V3_REF_PREFIX
INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


class DecodeError(Exception):
    """A value Go's JSON decoder cannot put into its field."""

    def __init__(self, struct: str, path: tuple[str, ...], got: str, go_type: str) -> None:
        self.field = ".".join(path)
        message = f"json: cannot unmarshal {got} into Go struct field {struct}.{self.field} of type {go_type}"
        super().__init__(message)
        self.message = message


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

        def check_struct(value: Any, path: tuple[str, ...]) -> None:
            if not isinstance(value, dict):
                return  # the caller checked the kind of value
            for key, item in value.items():
                field = fields.get(key)
                if field is not None and item is not None:
                    field(item, (*path, key))

        self.structs[definition] = check_struct
        schema = self.schemas.get(definition) or {}
        struct_name = definition.rsplit(".", 1)[-1]
        for key, prop in (schema.get("properties") or {}).items():
            fields[key] = self.value(prop, struct_name)
        return check_struct

    def value(self, schema: dict[str, Any], struct: str) -> Check:
        """The check of a field of Go struct ``struct`` (its name appears in the message)."""
        schema = _target(schema)
        go_type = _go_type(schema)

        def refuse(value: Any, path: tuple[str, ...], got: str | None = None) -> None:
            raise DecodeError(struct, path, got or _json_type(value), go_type)

        if "$ref" in schema:
            definition = schema["$ref"][len(REF_PREFIX) :]
            resolved = self.schemas.get(definition) or {}
            if resolved.get("type") != "object" or "properties" not in resolved:
                return self.value(resolved, struct) if resolved.get("type") else (lambda value, path: None)
            inner = self.struct(definition)

            def check_ref(value: Any, path: tuple[str, ...]) -> None:
                if not isinstance(value, dict):
                    refuse(value, path)
                inner(value, path)

            return check_ref
        kind, fmt = schema.get("type"), schema.get("format")
        if kind == "array":
            items = self.value(schema.get("items") or {}, struct)

            def check_array(value: Any, path: tuple[str, ...]) -> None:
                if not isinstance(value, list):
                    refuse(value, path)
                for item in value:
                    if item is not None:
                        items(item, path)

            return check_array
        if kind == "object":
            extra = schema.get("additionalProperties")
            values = self.value(extra, struct) if isinstance(extra, dict) else None

            def check_map(value: Any, path: tuple[str, ...]) -> None:
                if not isinstance(value, dict):
                    refuse(value, path)
                if values is not None:
                    for item in value.values():
                        if item is not None:
                            values(item, path)

            return check_map
        if kind == "string" and fmt in ("quantity", "int-or-string"):

            def check_number_or_string(value: Any, path: tuple[str, ...]) -> None:
                if isinstance(value, bool) or not isinstance(value, str | int | float):
                    refuse(value, path)

            return check_number_or_string
        if kind == "string":

            def check_string(value: Any, path: tuple[str, ...]) -> None:
                if not isinstance(value, str):
                    refuse(value, path)

            return check_string
        if kind == "integer":
            low, high = INT_RANGES.get(fmt or "", INT_RANGES["int64"])

            def check_integer(value: Any, path: tuple[str, ...]) -> None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    refuse(value, path)
                if isinstance(value, float) or not low <= value <= high:
                    refuse(value, path, f"number {value}")

            return check_integer
        if kind == "number":

            def check_number(value: Any, path: tuple[str, ...]) -> None:
                if isinstance(value, bool) or not isinstance(value, int | float):
                    refuse(value, path)

            return check_number
        if kind == "boolean":

            def check_bool(value: Any, path: tuple[str, ...]) -> None:
                if not isinstance(value, bool):
                    refuse(value, path)

            return check_bool
        return lambda value, path: None


@functools.cache
def _compiler() -> _Compiler:
    return _Compiler(openapi.builtin_schemas())


@functools.cache
def kind_check(group: str, version: str, kind: str) -> Check | None:
    """The decoding check of a built-in kind, or None when the upstream definitions lack it."""
    definition = openapi.builtin_kinds().get((group, version, kind))
    return None if definition is None else _compiler().struct(definition)


def check_decodable(group: str, version: str, kind: str, obj: dict[str, Any]) -> None:
    """Raise DecodeError when ``obj`` cannot be decoded into the kind's Go struct."""
    check = kind_check(group, version, kind)
    if check is not None:
        check(obj, ())
