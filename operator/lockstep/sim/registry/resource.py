"""resource.k8s.io/v1 kinds: ResourceClaim, ResourceClaimTemplate, ResourceSlice and DeviceClass."""

from __future__ import annotations

import functools
from typing import Any

import orjson

from lockstep.dra.cel import CELError, CELSyntaxError, compile_selector
from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import validate_name
from lockstep.sim.resources import METADATA_FIELDS, ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "resource.k8s.io"
MAX_RESERVED_FOR = 256
ATTRIBUTE_VALUE_FIELDS = (
    ("int", "IntValue"),
    ("bool", "BoolValue"),
    ("string", "StringValue"),
    ("version", "VersionValue"),
    ("ints", "IntValues"),
    ("bools", "BoolValues"),
    ("strings", "StringValues"),
    ("versions", "VersionValues"),
)
CEL_EOF_EXPECTING = (
    "{'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', "
    "NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}"
)


def _go_struct(value: Any, fields: tuple[tuple[str, str, Any], ...]) -> dict[str, Any]:
    """Render a JSON object with Go's field names and nil zero values, like ``%#v`` of the struct
    in kube-apiserver's 'Invalid value' messages."""
    value = value if isinstance(value, dict) else {}
    out: dict[str, Any] = {}
    for json_name, go_name, sub in fields:
        item = value.get(json_name)
        if sub is None or item is None:
            out[go_name] = item
        elif isinstance(item, list):
            out[go_name] = [_go_struct(i, sub) for i in item]
        else:
            out[go_name] = _go_struct(item, sub)
    return out


_NODE_SELECTOR_REQUIREMENT = (
    ("key", "Key", None),
    ("operator", "Operator", None),
    ("values", "Values", None),
)
_NODE_SELECTOR = (
    (
        "nodeSelectorTerms",
        "NodeSelectorTerms",
        (
            ("matchExpressions", "MatchExpressions", _NODE_SELECTOR_REQUIREMENT),
            ("matchFields", "MatchFields", _NODE_SELECTOR_REQUIREMENT),
        ),
    ),
)
_ALLOCATION = (
    (
        "devices",
        "Devices",
        (
            (
                "results",
                "Results",
                (
                    ("request", "Request", None),
                    ("driver", "Driver", None),
                    ("pool", "Pool", None),
                    ("device", "Device", None),
                    ("adminAccess", "AdminAccess", None),
                    ("tolerations", "Tolerations", None),
                    ("bindingConditions", "BindingConditions", None),
                    ("bindingFailureConditions", "BindingFailureConditions", None),
                    ("shareID", "ShareID", None),
                    ("consumedCapacity", "ConsumedCapacity", None),
                ),
            ),
            ("config", "Config", None),
        ),
    ),
    ("nodeSelector", "NodeSelector", _NODE_SELECTOR),
    ("allocationTimestamp", "AllocationTimestamp", None),
)
_EXACT_REQUEST = (
    ("deviceClassName", "DeviceClassName", None),
    ("selectors", "Selectors", None),
    ("allocationMode", "AllocationMode", None),
    ("count", "Count", None),
    ("adminAccess", "AdminAccess", None),
    ("tolerations", "Tolerations", None),
    ("capacity", "Capacity", None),
)
_CLAIM_SPEC = (
    (
        "devices",
        "Devices",
        (
            (
                "requests",
                "Requests",
                (
                    ("name", "Name", None),
                    ("exactly", "Exactly", _EXACT_REQUEST),
                    ("firstAvailable", "FirstAvailable", None),
                ),
            ),
            ("constraints", "Constraints", None),
            ("config", "Config", None),
        ),
    ),
)


def _immutable(field: str, value: Any, fields: tuple[tuple[str, str, Any], ...]) -> FieldError:
    rendered = orjson.dumps(_go_struct(value, fields)).decode()
    return FieldError("FieldValueInvalid", field, f"Invalid value: {rendered}: field is immutable")


def _default_exact(request: JsonObject) -> None:
    mode = request.setdefault("allocationMode", "ExactCount")
    if mode == "ExactCount":
        request.setdefault("count", 1)


def default_claim_spec(spec: Any) -> None:
    if not isinstance(spec, dict):
        return
    for request in (spec.get("devices") or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        if isinstance(request.get("exactly"), dict):
            _default_exact(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                _default_exact(sub)


def validate_claim_spec(spec: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    requests = ((spec or {}).get("devices") or {}).get("requests") or []
    names: set[str] = set()
    for i, request in enumerate(requests):
        rpath = f"{path}.devices.requests[{i}]"
        if not isinstance(request, dict):
            errors.append(fe.invalid(rpath, request, "must be an object"))
            continue
        name = request.get("name")
        if not name:
            errors.append(fe.required(f"{rpath}.name"))
        elif name in names:
            errors.append(fe.duplicate(f"{rpath}.name", name))
        else:
            names.add(name)
        has_exactly, has_first = request.get("exactly") is not None, request.get("firstAvailable") is not None
        if has_exactly == has_first:
            errors.append(fe.required(rpath, "exactly one of `exactly` or `firstAvailable` is required"))
        elif has_exactly and not request["exactly"].get("deviceClassName"):
            errors.append(fe.required(f"{rpath}.exactly.deviceClassName"))
        if isinstance(request.get("exactly"), dict):
            errors.extend(
                validate_selectors(request["exactly"].get("selectors"), f"{rpath}.exactly.selectors")
            )
        for j, sub in enumerate(request.get("firstAvailable") or []):
            if isinstance(sub, dict):
                errors.extend(
                    validate_selectors(sub.get("selectors"), f"{rpath}.firstAvailable[{j}].selectors")
                )
    return errors


def validate_selectors(selectors: Any, path: str) -> list[FieldError]:
    """Device selectors whose CEL expression does not compile (DeviceClasses and claim requests)."""
    errors: list[FieldError] = []
    for i, selector in enumerate(selectors or []):
        expression = (
            ((selector or {}).get("cel") or {}).get("expression") if isinstance(selector, dict) else None
        )
        if expression is None:
            continue
        problem = cel_compile_error(expression)
        if problem:
            errors.append(fe.invalid(f"{path}[{i}].cel.expression", expression, problem))
    return errors


class ResourceClaimStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        default_claim_spec(obj.get("spec"))
        obj.setdefault("status", {})

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        if old is None:
            return validate_name(obj["metadata"].get("name")) + validate_claim_spec(obj.get("spec"), "spec")
        if not ctx.subresource:
            if obj.get("spec") != old.get("spec"):
                return [_immutable("spec", obj.get("spec"), _CLAIM_SPEC)]
            return []
        return self._validate_status(obj.get("status") or {}, old.get("status") or {})

    @staticmethod
    def _validate_status(status: JsonObject, old_status: JsonObject) -> list[FieldError]:
        errors: list[FieldError] = []
        allocation = status.get("allocation")
        reserved = status.get("reservedFor") or []
        if reserved and not allocation:
            errors.append(
                fe.forbidden("status.reservedFor", "may not be specified when `allocated` is not set")
            )
        if len(reserved) > MAX_RESERVED_FOR:
            errors.append(fe.too_many("status.reservedFor", len(reserved), MAX_RESERVED_FOR))
        seen: set[str] = set()
        for i, ref in enumerate(reserved):
            ref = ref if isinstance(ref, dict) else {}
            for key in ("resource", "name"):
                if not ref.get(key):
                    errors.append(fe.required(f"status.reservedFor[{i}].{key}"))
            uid = ref.get("uid")
            if not uid:
                errors.append(fe.required(f"status.reservedFor[{i}].uid"))
            elif uid in seen:
                errors.append(fe.duplicate(f"status.reservedFor[{i}]", uid))
            else:
                seen.add(uid)
        old_allocation = old_status.get("allocation")
        if old_allocation and allocation and allocation != old_allocation:
            errors.append(_immutable("status.allocation", allocation, _ALLOCATION))
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


class ResourceClaimTemplateStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        default_claim_spec((obj.get("spec") or {}).get("spec"))

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        if old is None:
            inner = (obj.get("spec") or {}).get("spec")
            return validate_name(obj["metadata"].get("name")) + validate_claim_spec(inner, "spec.spec")
        if obj.get("spec") != old.get("spec"):
            return [fe.invalid("spec", "", "field is immutable")]
        return []

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


class ResourceSliceStrategy(Strategy):
    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        spec = obj.get("spec") or {}
        if not spec.get("driver"):
            errors.append(fe.required("spec.driver"))
        if not (spec.get("pool") or {}).get("name"):
            errors.append(fe.required("spec.pool.name"))
        node_fields = [
            k for k in ("nodeName", "nodeSelector", "allNodes", "perDeviceNodeSelection") if spec.get(k)
        ]
        if len(node_fields) != 1:
            errors.append(
                fe.required(
                    "spec",
                    "exactly one of `nodeName`, `nodeSelector`, `allNodes`, `perDeviceNodeSelection` "
                    "is required",
                )
            )
        for i, device in enumerate(spec.get("devices") or []):
            attributes = (device or {}).get("attributes") or {}
            for name, attribute in attributes.items():
                apath = f"spec.devices[{i}].attributes[{name}]"
                present = [
                    json_name
                    for json_name, _ in ATTRIBUTE_VALUE_FIELDS
                    if (attribute or {}).get(json_name) is not None
                ]
                if len(present) != 1:
                    dump = {go: (attribute or {}).get(js) for js, go in ATTRIBUTE_VALUE_FIELDS}
                    rendered = orjson.dumps(dump).decode()
                    errors.append(
                        FieldError(
                            "FieldValueInvalid",
                            apath,
                            f"Invalid value: {rendered}: exactly one value must be specified",
                        )
                    )
                for list_name in ("ints", "bools", "strings", "versions"):
                    values = (attribute or {}).get(list_name)
                    if values is not None and len(values) == 0:
                        errors.append(
                            fe.invalid(f"{apath}.{list_name}", values, "must not be empty if specified")
                        )
        return errors


@functools.lru_cache(maxsize=1024)
def cel_compile_error(expression: str) -> str | None:
    """cel-go's message for an expression that does not compile in the DRA environment, or None.

    Cached: every claim made from a template carries the template's selectors, and parsing one costs
    about a millisecond."""
    try:
        compile_selector(expression, list_type_attributes=True)
    except CELSyntaxError as error:
        column = error.column or len(expression)
        if column >= len(expression.rstrip()):
            position = len(expression)
            return (
                f"compilation failed: ERROR: <input>:1:{position + 1}: "
                "Syntax error: mismatched input '<EOF>' "
                f"expecting {CEL_EOF_EXPECTING}\n | {expression}\n | {'.' * position}^"
            )
        return (
            f"compilation failed: ERROR: <input>:1:{column}: Syntax error: {error.detail}\n"
            f" | {expression}\n | {'.' * (column - 1)}^"
        )
    except CELError as error:
        return error.problem
    return None


class DeviceClassStrategy(Strategy):
    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        return errors + validate_selectors((obj.get("spec") or {}).get("selectors"), "spec.selectors")


def dra_types() -> list[ResourceType]:
    slice_fields = {**METADATA_FIELDS, "spec.nodeName": "spec.nodeName", "spec.driver": "spec.driver"}
    claim_lists: dict[tuple[str, ...], str] = {
        ("status", "reservedFor"): "uid",
        ("status", "devices"): "driver,pool,device",
    }
    return [
        ResourceType(
            GROUP,
            "v1",
            "deviceclasses",
            "deviceclass",
            "DeviceClass",
            False,
            DeviceClassStrategy(),
            has_generation=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceclaims",
            "resourceclaim",
            "ResourceClaim",
            True,
            ResourceClaimStrategy(),
            subresources=("status",),
            smp_lists=claim_lists,
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceclaimtemplates",
            "resourceclaimtemplate",
            "ResourceClaimTemplate",
            True,
            ResourceClaimTemplateStrategy(),
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceslices",
            "resourceslice",
            "ResourceSlice",
            False,
            ResourceSliceStrategy(),
            has_generation=True,
            field_labels=slice_fields,
            smp_lists={},
        ),
    ]
