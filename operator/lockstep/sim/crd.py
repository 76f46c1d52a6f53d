"""CustomResourceDefinitions and the custom resources they serve: structural schema validation,
defaulting, pruning of unknown fields and ``x-kubernetes-validations`` CEL rules."""

from __future__ import annotations

import copy
import re
from collections import OrderedDict
from functools import lru_cache
from typing import Any

import celpy
import orjson

from lockstep.dra.cel_syntax import install_optional_syntax
from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import validate_name
from lockstep.sim.resources import ResourceType, Strategy, WriteContext, storage_version_hash

JsonObject = dict[str, Any]

CRD_GROUP = "apiextensions.k8s.io"
# Errors after which CEL rules are not evaluated (upstream ``hasBlockingErr``).
BLOCKING_REASONS = {
    "FieldValueNotSupported",
    "FieldValueRequired",
    "FieldValueTooLong",
    "FieldValueTooMany",
    "FieldValueTypeInvalid",
}
RULES_SKIPPED = FieldError(
    "FieldValueInvalid",
    "<nil>",
    "Invalid value: null: some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)
CUSTOM_RESOURCE_VERBS = ("delete", "deletecollection", "get", "list", "patch", "create", "update", "watch")
STRING_FORMATS = {
    "date-time": re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"),
    "date": re.compile(r"^\d{4}-\d{2}-\d{2}$"),
}
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
INTEGER_FORMATS = {"int32": (-(2**31), 2**31 - 1), "int64": (INT64_MIN, INT64_MAX)}
JSON_FLOAT_INTEGER_MAX = 2**53 - 1  # go-openapi's IsFloat64AJSONInteger
JSON_TYPE_NAMES = {
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
}


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    return JSON_TYPE_NAMES.get(type(value), "object")


def _type_ok(expected: str, value: Any) -> bool:
    if expected == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if expected == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected == "boolean":
        return isinstance(value, bool)
    if expected == "string":
        return isinstance(value, str)
    if expected == "object":
        return isinstance(value, dict)
    if expected == "array":
        return isinstance(value, list)
    return True


@lru_cache(maxsize=512)
def _cel_program(rule: str) -> Any:
    install_optional_syntax()  # the process's one parser: CEL with optional syntax, as Kubernetes'
    env = celpy.Environment()
    return env.program(env.compile(rule))


_VERDICTS: OrderedDict[bytes, tuple[bool, str | None]] = OrderedDict()
MAX_VERDICTS = 4096


def _verdict(expression: str, value: Any, old: Any) -> tuple[bool, str | None]:
    """(passed, evaluation error) of one rule on one value. CEL is deterministic, so verdicts are
    remembered by expression and values: the interpreted evaluation costs about a third of a
    millisecond, and objects of one kind repeat the same small values (a gang policy, a claim entry)."""
    try:
        key = orjson.dumps([expression, value, old], option=orjson.OPT_SORT_KEYS)
    except TypeError:  # e.g. an integer beyond 64 bits: evaluate without remembering
        key = None
    if key is not None and (known := _VERDICTS.get(key)) is not None:
        _VERDICTS.move_to_end(key)
        return known
    activation = {"self": celpy.json_to_cel(value)}
    if old is not None:
        activation["oldSelf"] = celpy.json_to_cel(old)
    try:
        result = _cel_program(expression).evaluate(activation)
        verdict: tuple[bool, str | None] = (
            result is True or (isinstance(result, celpy.celtypes.BoolType) and bool(result)),
            None,
        )
    except Exception as error:  # celpy raises several internal types for evaluation errors
        verdict = (False, str(error))
    if key is not None:
        _VERDICTS[key] = verdict
        if len(_VERDICTS) > MAX_VERDICTS:
            _VERDICTS.popitem(last=False)
    return verdict


def _child(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


class SchemaValidator:
    """Validation of one value against a structural OpenAPI v3 schema, with kube-apiserver's messages."""

    def __init__(self) -> None:
        self.errors: list[FieldError] = []
        self.has_rules = False

    def validate(self, value: Any, schema: JsonObject, path: str) -> None:
        if schema.get("x-kubernetes-validations"):
            self.has_rules = True
        if value is None and schema.get("nullable"):
            return
        expected = schema.get("type")
        if expected and not schema.get("x-kubernetes-int-or-string") and not _type_ok(expected, value):
            actual = json_type(value)
            self.errors.append(
                fe.type_invalid(
                    path, actual, f"{path} in body must be of type {expected}: {fe.go_value(actual)}"
                )
            )
            return
        if "enum" in schema and value not in schema["enum"]:
            self.errors.append(fe.not_supported(path, value, schema["enum"]))
        if isinstance(value, int | float) and not isinstance(value, bool):
            self._numbers(value, schema, path)
        elif isinstance(value, str):
            self._string(value, schema, path)
        elif isinstance(value, list):
            self._array(value, schema, path)
        elif isinstance(value, dict):
            self._object(value, schema, path)

    def _numbers(self, value: float, schema: JsonObject, path: str) -> None:
        bounds = INTEGER_FORMATS.get(schema.get("format", ""))
        if bounds is not None and not bounds[0] <= value <= bounds[1]:
            detail = f"{path} in body must be of type {schema['format']}: {fe.go_value(value)}"
            self.errors.append(fe.type_invalid(path, value, detail))
        checks = (
            ("minimum", "exclusiveMinimum", lambda v, m: v < m, lambda v, m: v <= m, "greater than"),
            ("maximum", "exclusiveMaximum", lambda v, m: v > m, lambda v, m: v >= m, "less than"),
        )
        for key, exclusive_key, fails, fails_exclusive, words in checks:
            if key not in schema:
                continue
            bound = schema[key]
            if schema.get(exclusive_key):
                if fails_exclusive(value, bound):
                    self.errors.append(fe.invalid(path, value, f"{path} in body should be {words} {bound}"))
            elif fails(value, bound):
                self.errors.append(
                    fe.invalid(path, value, f"{path} in body should be {words} or equal to {bound}")
                )

    def _string(self, value: str, schema: JsonObject, path: str) -> None:
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            self.errors.append(fe.too_long(path, schema["maxLength"]))
        if "minLength" in schema and len(value) < schema["minLength"]:
            self.errors.append(
                fe.invalid(path, value, f"{path} in body should be at least {schema['minLength']} chars long")
            )
        if "pattern" in schema and not re.search(schema["pattern"], value):
            self.errors.append(fe.invalid(path, value, f"{path} in body should match '{schema['pattern']}'"))
        checker = STRING_FORMATS.get(schema.get("format", ""))
        if checker is not None and not checker.match(value):
            detail = f"{path} in body must be of type {schema['format']}: {fe.go_value(value)}"
            self.errors.append(fe.type_invalid(path, value, detail))

    def _array(self, value: list[Any], schema: JsonObject, path: str) -> None:
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            self.errors.append(fe.too_many(path, len(value), schema["maxItems"]))
            return
        if "minItems" in schema and len(value) < schema["minItems"]:
            self.errors.append(
                fe.invalid(path, value, f"{path} in body should have at least {schema['minItems']} items")
            )
        items = schema.get("items") or {}
        for i, item in enumerate(value):
            self.validate(item, items, f"{path}[{i}]")
        list_type = schema.get("x-kubernetes-list-type")
        if list_type == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen: set[tuple[Any, ...]] = set()
            for i, item in enumerate(value):
                if not isinstance(item, dict):
                    continue
                key = tuple(repr(item.get(k)) for k in keys)
                if key in seen:
                    shown = {k: item.get(k) for k in keys}
                    self.errors.append(fe.duplicate(f"{path}[{i}]", shown))
                seen.add(key)
        elif list_type == "set":
            seen_values: list[Any] = []
            for i, item in enumerate(value):
                if item in seen_values:
                    self.errors.append(fe.duplicate(f"{path}[{i}]", item))
                seen_values.append(item)

    def _object(self, value: JsonObject, schema: JsonObject, path: str) -> None:
        for name in schema.get("required") or []:
            if name not in value:
                self.errors.append(fe.required(_child(path, name)))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            self.errors.append(fe.too_many(path, len(value), schema["maxProperties"]))
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            if key in properties:
                self.validate(item, properties[key], _child(path, key))
            elif isinstance(additional, dict):
                self.validate(item, additional, _child(path, key))


def _has_transition_rules(schema: JsonObject) -> bool:
    """Whether a rule at or below this schema node reads ``oldSelf`` (memoized per schema node)."""
    known = _TRANSITION_RULES.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    found = any("oldSelf" in rule.get("rule", "") for rule in schema.get("x-kubernetes-validations") or [])
    children = [
        *(schema.get("properties") or {}).values(),
        schema.get("additionalProperties"),
        schema.get("items"),
    ]
    found = found or any(isinstance(child, dict) and _has_transition_rules(child) for child in children)
    _TRANSITION_RULES[id(schema)] = (schema, found)  # the node is kept, so its id is not reused
    return found


_TRANSITION_RULES: dict[int, tuple[JsonObject, bool]] = {}


def run_cel_rules(value: Any, old: Any, schema: JsonObject, path: str, errors: list[FieldError]) -> None:
    """Evaluate ``x-kubernetes-validations`` at every schema node that holds a value. A value equal to
    the old object's is not validated again (CRD validation ratcheting, GA in 1.33: errors on
    unchanged values are ignored), unless a rule below reads ``oldSelf``: a status write does not
    re-run the spec's rules."""
    if value is None:
        return
    if old is not None and value == old and not _has_transition_rules(schema):
        return
    for rule in schema.get("x-kubernetes-validations") or []:
        expression = rule.get("rule", "")
        uses_old = "oldSelf" in expression
        if uses_old and old is None:
            continue
        passed, failure = _verdict(expression, value, old if uses_old else None)
        if failure is not None:
            errors.append(fe.invalid_no_value(path, f"rule evaluation failed: {failure}"))
            continue
        if not passed:
            message = rule.get("message") or f"failed rule: {expression}"
            field = path + rule["fieldPath"] if rule.get("fieldPath") else path
            errors.append(fe.invalid_no_value(field, message))
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        for key, item in value.items():
            sub = properties.get(key) or (additional if isinstance(additional, dict) else None)
            if sub:
                old_item = old.get(key) if isinstance(old, dict) else None
                run_cel_rules(item, old_item, sub, _child(path, key), errors)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            run_cel_rules(item, None, schema["items"], f"{path}[{i}]", errors)


def prune(value: Any, schema: JsonObject, path: str, unknown: list[str]) -> Any:
    """Drop fields the schema does not know (recording their paths), like the structural pruner.
    An integral JSON float where the schema wants an integer is stored as an integer, as the real
    decoder does (``1.0`` is a valid integer), within the range go-openapi takes a float for an integer
    (2^53); an integer beyond int64 is a float, as Go's JSON decoder makes it."""
    if isinstance(value, int) and not isinstance(value, bool) and not INT64_MIN <= value <= INT64_MAX:
        return float(value)
    if (
        schema.get("type") == "integer"
        and isinstance(value, float)
        and value.is_integer()
        and abs(value) <= JSON_FLOAT_INTEGER_MAX
    ):
        return int(value)
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value
    if isinstance(value, dict) and schema.get("type", "object") == "object":
        properties = schema.get("properties")
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            return {
                k: prune(v, additional, _child(path, k), unknown)
                for k, v in value.items()
                if v is not None or additional.get("nullable")
            }
        if additional is True:
            return value
        result = {}
        for key, item in value.items():
            if properties and key in properties:
                if item is None and not properties[key].get("nullable"):
                    continue  # nulls of non-nullable fields are dropped (then defaulted if they have one)
                result[key] = prune(item, properties[key], _child(path, key), unknown)
            else:
                unknown.append(_child(path, key))
        return result
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"], f"{path}[{i}]", unknown) for i, item in enumerate(value)]
    return value


def apply_defaults(value: Any, schema: JsonObject) -> None:
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(value[key], sub)
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for item in value.values():
                apply_defaults(item, additional)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for item in value:
            apply_defaults(item, schema["items"])


class CustomResourceStrategy(Strategy):
    def __init__(self, schema: JsonObject, status_subresource: bool) -> None:
        self.schema = schema or {}
        # metadata.generation ignores status changes only when status is a subresource
        self.generation_ignores = ("metadata", "status") if status_subresource else ("metadata",)

    def _body_schema(self) -> JsonObject:
        properties = dict(self.schema.get("properties") or {})
        for key in ("apiVersion", "kind", "metadata"):
            properties.pop(key, None)
        return {**self.schema, "properties": properties}

    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        unknown: list[str] = []
        body_schema = self._body_schema()
        for key in list(obj):
            if key in ("apiVersion", "kind", "metadata"):
                continue
            sub = (body_schema.get("properties") or {}).get(key)
            if sub is None:
                if not body_schema.get("x-kubernetes-preserve-unknown-fields"):
                    unknown.append(key)
                    del obj[key]
                continue
            if obj[key] is None and not sub.get("nullable"):
                del obj[key]
                continue
            obj[key] = prune(obj[key], sub, key, unknown)
        unknown.sort()
        ctx.report_unknown_fields(rt.kind, rt.version, unknown)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        apply_defaults(obj, self._body_schema())

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        body_schema = self._body_schema()
        validator = SchemaValidator()
        for key in body_schema.get("required") or []:
            if key not in obj and key not in ("apiVersion", "kind", "metadata"):
                validator.errors.append(fe.required(key))
        for key, sub in (body_schema.get("properties") or {}).items():
            if key in obj:
                validator.validate(obj[key], sub, key)
        errors.extend(validator.errors)
        if not validator.has_rules and not _has_rules(body_schema):
            return errors
        if any(e.reason in BLOCKING_REASONS for e in errors):
            errors.append(RULES_SKIPPED)
            return errors
        for key, sub in (body_schema.get("properties") or {}).items():
            if key in obj:
                run_cel_rules(obj[key], (old or {}).get(key), sub, key, errors)
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        ignored = self.generation_ignores
        return {k: v for k, v in new.items() if k not in ignored} != {
            k: v for k, v in old.items() if k not in ignored
        }


def _has_rules(schema: Any) -> bool:
    if isinstance(schema, dict):
        if schema.get("x-kubernetes-validations"):
            return True
        return any(_has_rules(v) for v in schema.values())
    if isinstance(schema, list):
        return any(_has_rules(v) for v in schema)
    return False


class CrdStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        names = spec.setdefault("names", {})
        if names.get("kind"):
            names.setdefault("singular", names["kind"].lower())
            names.setdefault("listKind", names["kind"] + "List")
        spec.setdefault("conversion", {"strategy": "None"})
        if old is None:
            storage = [
                v["name"] for v in spec.get("versions") or [] if isinstance(v, dict) and v.get("storage")
            ]
            obj["status"] = {
                "conditions": None,
                "acceptedNames": {"plural": "", "kind": ""},
                "storedVersions": storage,
            }

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        if not spec.get("group"):
            errors.append(fe.required("spec.group"))
        if not names.get("plural"):
            errors.append(fe.required("spec.names.plural"))
        if not names.get("kind"):
            errors.append(fe.required("spec.names.kind"))
        if spec.get("scope") not in ("Namespaced", "Cluster"):
            errors.append(fe.not_supported("spec.scope", spec.get("scope", ""), ["Cluster", "Namespaced"]))
        versions = spec.get("versions") or []
        if not versions or sum(1 for v in versions if v.get("storage")) != 1:
            errors.append(
                fe.invalid(
                    "spec.versions", versions, "must have exactly one version marked as storage version"
                )
            )
        name = obj["metadata"].get("name")
        if (
            old is None
            and names.get("plural")
            and spec.get("group")
            and name != f"{names['plural']}.{spec['group']}"
        ):
            errors.append(fe.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
        if old is not None and spec.get("group") != (old.get("spec") or {}).get("group"):
            errors.append(fe.invalid("spec.group", spec.get("group"), "field is immutable"))
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return new.get("spec") != old.get("spec")


def crd_type() -> ResourceType:
    return ResourceType(
        CRD_GROUP,
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        False,
        CrdStrategy(),
        short_names=("crd", "crds"),
        categories=("api-extensions",),
        subresources=("status",),
        has_generation=True,
        unconditional_update=False,
        smp_lists={},
    )


def established_status(crd: JsonObject, now: str) -> JsonObject:
    names = dict((crd.get("spec") or {}).get("names") or {})
    return {
        "conditions": [
            {
                "type": "NamesAccepted",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "NoConflicts",
                "message": "no conflicts found",
            },
            {
                "type": "Established",
                "status": "True",
                "lastTransitionTime": now,
                "reason": "InitialNamesAccepted",
                "message": "the initial names have been accepted",
            },
        ],
        "acceptedNames": names,
        "storedVersions": (crd.get("status") or {}).get("storedVersions") or [],
    }


def custom_types(crd: JsonObject) -> list[tuple[ResourceType, list[JsonObject]]]:
    """The ResourceTypes a CRD serves, one per served version, with its printer columns."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    storage = next((v["name"] for v in spec.get("versions") or [] if v.get("storage")), "")
    out = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        schema = ((version.get("schema") or {}).get("openAPIV3Schema")) or {}
        has_status = "status" in (version.get("subresources") or {})
        rt = ResourceType(
            spec["group"],
            version["name"],
            names["plural"],
            names.get("singular") or names["kind"].lower(),
            names["kind"],
            spec.get("scope") == "Namespaced",
            CustomResourceStrategy(schema, has_status),
            short_names=tuple(names.get("shortNames") or ()),
            categories=tuple(names.get("categories") or ()),
            subresources=("status",) if has_status else (),
            verbs=CUSTOM_RESOURCE_VERBS,
            has_generation=True,
            unconditional_update=False,
            storage=f"{spec['group']}/{names['plural']}",
            smp_lists=None,
            custom=True,
        )
        rt.storage_hash = storage_version_hash(spec["group"], storage, names["kind"])
        out.append((rt, list(version.get("additionalPrinterColumns") or [])))
    return out
