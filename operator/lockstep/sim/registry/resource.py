"""resource.k8s.io/v1 kinds: ResourceClaim, ResourceClaimTemplate, ResourceSlice and DeviceClass."""

from __future__ import annotations

import functools
from typing import Any

import orjson

from lockstep.dra.cel import SELECTOR_MAX_COST, CELError, CELSyntaxError, compile_selector
from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.features import FeatureGates
from lockstep.sim.objectmeta import (
    DNS1123_LABEL,
    LABEL_MESSAGE,
    LABEL_VALUE,
    LABEL_VALUE_MESSAGE,
    now_rfc3339,
    qualified_name_errors,
    validate_name,
)
from lockstep.sim.registry.core_resources import is_extended_resource_name
from lockstep.sim.resources import METADATA_FIELDS, ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "resource.k8s.io"
MAX_RESERVED_FOR = 256
DEVICE_REQUESTS_MAX = 32  # DeviceRequestsMaxSize: kube-scheduler's extended-resource claim meets it too
ALLOCATION_RESULTS_MAX = 32  # AllocationResultsMaxSize
CEL_SELECTOR_MAX_LENGTH = 10240  # CELSelectorExpressionMaxLength, in bytes
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
# validDeviceTaintEffects, as sets.List sorts them.
TAINT_EFFECTS = ["NoExecute", "NoSchedule", "None"]
TOLERATION_OPERATORS = ["Equal", "Exists"]
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
            errors.extend(_validate_tolerations(request["exactly"].get("tolerations"), f"{rpath}.exactly"))
        for j, sub in enumerate(request.get("firstAvailable") or []):
            if isinstance(sub, dict):
                errors.extend(
                    validate_selectors(sub.get("selectors"), f"{rpath}.firstAvailable[{j}].selectors")
                )
                errors.extend(_validate_tolerations(sub.get("tolerations"), f"{rpath}.firstAvailable[{j}]"))
    if len(requests) > DEVICE_REQUESTS_MAX:
        errors.append(fe.too_many(f"{path}.devices.requests", len(requests), DEVICE_REQUESTS_MAX))
    return errors


def _label_value_errors(field: str, value: Any) -> list[FieldError]:
    if not isinstance(value, str) or len(value) > 63:
        return [fe.invalid(field, value, "must be no more than 63 characters")]
    return [] if LABEL_VALUE.match(value) else [fe.invalid(field, value, LABEL_VALUE_MESSAGE)]


def _validate_tolerations(tolerations: Any, path: str) -> list[FieldError]:
    """Upstream validateDeviceToleration."""
    errors: list[FieldError] = []
    for i, toleration in enumerate(tolerations or []):
        tpath = f"{path}.tolerations[{i}]"
        toleration = toleration if isinstance(toleration, dict) else {}
        key, value = toleration.get("key") or "", toleration.get("value") or ""
        if key:
            errors.extend(qualified_name_errors(f"{tpath}.key", key))
        operator = toleration.get("operator") or ""
        if operator == "Exists":
            if value:
                errors.append(fe.invalid(f"{tpath}.value", value, "must be empty for operator `Exists`"))
        elif operator == "Equal":
            errors.extend(_label_value_errors(f"{tpath}.value", value))
        elif not operator:
            errors.append(fe.required(f"{tpath}.operator"))
        else:
            errors.append(fe.not_supported(f"{tpath}.operator", operator, TOLERATION_OPERATORS))
        effect = toleration.get("effect") or ""
        if effect and effect not in TAINT_EFFECTS:
            errors.append(fe.not_supported(f"{tpath}.effect", effect, TAINT_EFFECTS))
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
        field = f"{path}[{i}].cel.expression"
        if len(str(expression).encode()) > CEL_SELECTOR_MAX_LENGTH:
            errors.append(fe.too_long(field, CEL_SELECTOR_MAX_LENGTH))
        elif problem := cel_compile_error(expression):
            errors.append(fe.invalid(field, expression, problem))
        elif compile_selector(expression, list_type_attributes=True).estimated_cost() > SELECTOR_MAX_COST:
            errors.append(fe.forbidden(field, "too complex, exceeds cost limit"))
    return errors


# Gate -> the fields of a device request (``exactly`` or a ``firstAvailable`` entry) it serves.
REQUEST_FIELD_GATES: dict[str, tuple[str, ...]] = {
    "DRADeviceTaints": ("tolerations",),
    "DRAConsumableCapacity": ("capacity",),
}
# Gate -> the fields of an allocation result it serves.
RESULT_FIELD_GATES: dict[str, tuple[str, ...]] = {
    "DRADeviceTaints": ("tolerations",),
    "DRADeviceBindingConditions": ("bindingConditions", "bindingFailureConditions"),
    "DRAConsumableCapacity": ("shareID", "consumedCapacity"),
}


def _device_requests(spec: Any) -> list[JsonObject]:
    requests = []
    for request in ((spec if isinstance(spec, dict) else {}).get("devices") or {}).get("requests") or []:
        if isinstance(request, dict):
            if isinstance(request.get("exactly"), dict):
                requests.append(request["exactly"])
            requests.extend(sub for sub in request.get("firstAvailable") or [] if isinstance(sub, dict))
    return requests


def _results(status: Any) -> list[JsonObject]:
    allocation = (status if isinstance(status, dict) else {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    return [result for result in results if isinstance(result, dict)]


def _drop_disabled(
    gates: FeatureGates, table: dict[str, tuple[str, ...]], items: list[JsonObject], old: list[JsonObject]
) -> None:
    """kube-apiserver drops the fields of a disabled gate unless the stored object already uses them."""
    for gate, names in table.items():
        if gates[gate] or any(item.get(name) is not None for item in old for name in names):
            continue
        for item in items:
            for name in names:
                item.pop(name, None)


def drop_disabled_claim_spec_fields(gates: FeatureGates, spec: Any, old_spec: Any) -> None:
    _drop_disabled(gates, REQUEST_FIELD_GATES, _device_requests(spec), _device_requests(old_spec))


class ResourceClaimStrategy(Strategy):
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        drop_disabled_claim_spec_fields(self.gates, obj.get("spec"), (old or {}).get("spec"))
        default_claim_spec(obj.get("spec"))
        status = obj.setdefault("status", {})
        old_status = (old or {}).get("status") or {}
        _drop_disabled(self.gates, RESULT_FIELD_GATES, _results(status), _results(old_status))
        if (
            isinstance(status, dict)
            and not self.gates["DRAResourceClaimDeviceStatus"]
            and not old_status.get("devices")
        ):
            status.pop("devices", None)

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
        results = ((allocation or {}).get("devices") or {}).get("results") or []
        if len(results) > ALLOCATION_RESULTS_MAX:
            field = "status.allocation.devices.results"
            errors.append(fe.too_many(field, len(results), ALLOCATION_RESULTS_MAX))
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
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        old_spec = ((old or {}).get("spec") or {}).get("spec")
        drop_disabled_claim_spec_fields(self.gates, (obj.get("spec") or {}).get("spec"), old_spec)
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


def _counter_name_errors(field: str, name: Any) -> list[FieldError]:
    if not isinstance(name, str) or len(name) > 63 or not DNS1123_LABEL.match(name):
        return [fe.invalid(field, name, LABEL_MESSAGE)]
    return []


def _validate_counters(counters: Any, path: str) -> list[FieldError]:
    if not counters:
        return [fe.required(path)]
    errors: list[FieldError] = []
    for name in counters:
        errors.extend(_counter_name_errors(path, name))
    return errors


def _validate_counter_holder(holder: Any, name_key: str, path: str) -> list[FieldError]:
    """A CounterSet (``name``) or a DeviceCounterConsumption (``counterSet``) with its counters."""
    holder = holder if isinstance(holder, dict) else {}
    name = holder.get(name_key)
    errors = (
        [fe.required(f"{path}.{name_key}")] if not name else _counter_name_errors(f"{path}.{name_key}", name)
    )
    return errors + _validate_counters(holder.get("counters"), f"{path}.counters")


def _validate_taint(taint: Any, path: str) -> list[FieldError]:
    taint = taint if isinstance(taint, dict) else {}
    key = taint.get("key")
    errors = [fe.required(f"{path}.key")] if not key else qualified_name_errors(f"{path}.key", key)
    if taint.get("value"):
        errors.extend(_label_value_errors(f"{path}.value", taint["value"]))
    effect = taint.get("effect")
    if not effect:
        errors.append(fe.required(f"{path}.effect"))
    elif effect not in TAINT_EFFECTS:
        errors.append(fe.not_supported(f"{path}.effect", effect, TAINT_EFFECTS))
    return errors


def _validate_binding_conditions(device: JsonObject, path: str) -> list[FieldError]:
    """Upstream validateDeviceBindingParameters."""
    conditions = device.get("bindingConditions") or []
    failures = device.get("bindingFailureConditions") or []
    errors: list[FieldError] = []
    for kind, values in (("bindingConditions", conditions), ("bindingFailureConditions", failures)):
        seen: set[str] = set()
        for i, condition in enumerate(values):
            errors.extend(qualified_name_errors(f"{path}.{kind}[{i}]", condition))
            if condition in seen:
                errors.append(fe.duplicate(f"{path}.{kind}[{i}]", condition))
            seen.add(condition)
    for i, condition in enumerate(failures):
        if condition in conditions:
            errors.append(
                fe.invalid(
                    f"{path}.bindingFailureConditions[{i}]",
                    condition,
                    "bindingFailureConditions must not overlap with bindingConditions",
                )
            )
    if not conditions and failures:
        errors.append(
            fe.invalid(
                f"{path}.bindingConditions",
                None,
                "bindingConditions are required to use bindingFailureConditions",
            )
        )
    if conditions and not failures:
        errors.append(
            fe.invalid(
                f"{path}.bindingFailureConditions",
                None,
                "bindingFailureConditions are required to use bindingConditions",
            )
        )
    return errors


def _validate_device_136(device: JsonObject, path: str) -> list[FieldError]:
    """What validateDevice checks of the fields 1.36 serves: capacity request policies, taints,
    counter consumption, binding conditions."""
    errors: list[FieldError] = []
    if not device.get("allowMultipleAllocations"):
        for name, capacity in (device.get("capacity") or {}).items():
            if isinstance(capacity, dict) and capacity.get("requestPolicy") is not None:
                errors.append(
                    fe.forbidden(
                        f"{path}.capacity[{name}].requestPolicy", "allowMultipleAllocations must be true"
                    )
                )
    for i, taint in enumerate(device.get("taints") or []):
        errors.extend(_validate_taint(taint, f"{path}.taints[{i}]"))
    for i, consumption in enumerate(device.get("consumesCounters") or []):
        errors.extend(_validate_counter_holder(consumption, "counterSet", f"{path}.consumesCounters[{i}]"))
    return errors + _validate_binding_conditions(device, path)


def _stamp_taints(spec: Any, old_spec: Any) -> None:
    """The server sets a device taint's timeAdded when the writer left it out; an unchanged taint keeps
    the time it had."""
    old_times: dict[tuple[Any, ...], str] = {}
    for device in (old_spec or {}).get("devices") or []:
        for taint in (device or {}).get("taints") or []:
            if isinstance(taint, dict) and taint.get("timeAdded"):
                old_times[(device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))] = (
                    taint["timeAdded"]
                )
    for device in (spec or {}).get("devices") or []:
        if not isinstance(device, dict):
            continue
        for taint in device.get("taints") or []:
            if isinstance(taint, dict) and not taint.get("timeAdded"):
                key = (device.get("name"), taint.get("key"), taint.get("value"), taint.get("effect"))
                taint["timeAdded"] = old_times.get(key) or now_rfc3339()


LIST_ATTRIBUTE_FIELDS = ("ints", "bools", "strings", "versions")
# Gate -> the fields of a ResourceSlice device it serves; ``sharedCounters`` sits in the spec.
DEVICE_FIELD_GATES: dict[str, tuple[str, ...]] = {
    "DRADeviceTaints": ("taints",),
    "DRAPartitionableDevices": ("consumesCounters",),
    "DRADeviceBindingConditions": ("bindsToNode", "bindingConditions", "bindingFailureConditions"),
    "DRAConsumableCapacity": ("allowMultipleAllocations",),
}


def _devices(slice_: JsonObject | None) -> list[JsonObject]:
    devices = ((slice_ or {}).get("spec") or {}).get("devices") or []
    return [device for device in devices if isinstance(device, dict)]


def _drop_disabled_device_fields(gates: FeatureGates, obj: JsonObject, old: JsonObject | None) -> None:
    """kube-apiserver drops the fields of a disabled gate unless the stored slice already uses them."""
    for gate, names in DEVICE_FIELD_GATES.items():
        if gates[gate] or any(device.get(name) for device in _devices(old) for name in names):
            continue
        for device in _devices(obj):
            for name in names:
                device.pop(name, None)
            if gate == "DRAConsumableCapacity":
                for capacity in (device.get("capacity") or {}).values():
                    if isinstance(capacity, dict):
                        capacity.pop("requestPolicy", None)
    spec, old_spec = obj.get("spec"), (old or {}).get("spec") or {}
    if not gates["DRAPartitionableDevices"] and isinstance(spec, dict) and not old_spec.get("sharedCounters"):
        spec.pop("sharedCounters", None)


def uses_list_attributes(slice_: JsonObject | None) -> bool:
    devices = ((slice_ or {}).get("spec") or {}).get("devices") or []
    return any(
        isinstance(attribute, dict) and any(attribute.get(f) is not None for f in LIST_ATTRIBUTE_FIELDS)
        for device in devices
        if isinstance(device, dict)
        for attribute in (device.get("attributes") or {}).values()
    )


class ResourceSliceStrategy(Strategy):
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        _drop_disabled_device_fields(self.gates, obj, old)
        _stamp_taints(obj.get("spec"), (old or {}).get("spec"))
        # kube-apiserver drops the fields of a disabled gate unless the stored slice already uses them.
        if not self.gates["DRAListTypeAttributes"] and not uses_list_attributes(old):
            for device in (obj.get("spec") or {}).get("devices") or []:
                for attribute in ((device or {}).get("attributes") or {}).values():
                    for list_name in LIST_ATTRIBUTE_FIELDS:
                        if isinstance(attribute, dict):
                            attribute.pop(list_name, None)

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
        if spec.get("sharedCounters") is not None and spec.get("devices") is not None:
            errors.append(fe.invalid("spec", "", "only one of `sharedCounters` or `devices` is allowed"))
        for i, counter_set in enumerate(spec.get("sharedCounters") or []):
            errors.extend(_validate_counter_holder(counter_set, "name", f"spec.sharedCounters[{i}]"))
        for i, device in enumerate(spec.get("devices") or []):
            attributes = (device or {}).get("attributes") or {}
            for name, attribute in attributes.items():
                apath = f"spec.devices[{i}].attributes[{name}]"
                present = [
                    json_name
                    for json_name, _ in ATTRIBUTE_VALUE_FIELDS
                    if (attribute or {}).get(json_name) is not None
                ]
                if not present:
                    errors.append(fe.required(apath, "exactly one value must be specified"))
                elif len(present) > 1:
                    dump = {go: (attribute or {}).get(js) for js, go in ATTRIBUTE_VALUE_FIELDS}
                    rendered = orjson.dumps(dump).decode()
                    errors.append(
                        FieldError(
                            "FieldValueInvalid",
                            apath,
                            f"Invalid value: {rendered}: exactly one value must be specified",
                        )
                    )
                for list_name in LIST_ATTRIBUTE_FIELDS:
                    values = (attribute or {}).get(list_name)
                    if values is not None and len(values) == 0:
                        errors.append(
                            fe.invalid(f"{apath}.{list_name}", values, "must not be empty if specified")
                        )
            if isinstance(device, dict):
                errors.extend(_validate_device_136(device, f"spec.devices[{i}]"))
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
    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec, old_spec = obj.get("spec"), (old or {}).get("spec") or {}
        if (
            not self.gates["DRAExtendedResource"]
            and isinstance(spec, dict)
            and not old_spec.get("extendedResourceName")
        ):
            spec.pop("extendedResourceName", None)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        spec = obj.get("spec") or {}
        errors.extend(validate_selectors(spec.get("selectors"), "spec.selectors"))
        name = spec.get("extendedResourceName")
        if name is not None and not is_extended_resource_name(str(name)):
            errors.append(
                fe.invalid("spec.extendedResourceName", name, "must be a valid extended resource name")
            )
        return errors


def dra_types(gates: FeatureGates) -> list[ResourceType]:
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
            DeviceClassStrategy(gates),
            has_generation=True,
            returns_deleted_object=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceclaims",
            "resourceclaim",
            "ResourceClaim",
            True,
            ResourceClaimStrategy(gates),
            subresources=("status",),
            returns_deleted_object=True,
            smp_lists=claim_lists,
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceclaimtemplates",
            "resourceclaimtemplate",
            "ResourceClaimTemplate",
            True,
            ResourceClaimTemplateStrategy(gates),
            returns_deleted_object=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1",
            "resourceslices",
            "resourceslice",
            "ResourceSlice",
            False,
            ResourceSliceStrategy(gates),
            has_generation=True,
            field_labels=slice_fields,
            returns_deleted_object=True,
            smp_lists={},
        ),
    ]
