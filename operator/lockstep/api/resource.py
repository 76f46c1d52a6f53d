"""resource.k8s.io/v1 models: ResourceClaim, ResourceClaimTemplate, ResourceSlice, DeviceClass.

Only the fields lockstep reads are declared; every other field is tolerated and preserved, so an object
read from the API can be written back without losing what a newer API server added. Parse API objects
with :func:`parse_resource`; a bad object raises :class:`ResourceModelError` naming the object and the
field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from lockstep.dra.k8s_types import Quantity, QuantityError, parse_quantity

API_GROUP = "resource.k8s.io"
API_VERSION = f"{API_GROUP}/v1"

# resourceapi.ResourceClaimReservedForMaxSize
RESERVED_FOR_MAX_SIZE = 256
# resourceapi.Finalizer: set by the scheduler before it writes an allocation, removed on deallocation.
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
ALLOCATION_MODE_EXACT_COUNT = "ExactCount"
ALLOCATION_MODE_ALL = "All"


class ResourceModelError(ValueError):
    """An API object does not have the shape lockstep needs; the message names object and field."""


class _Model(BaseModel):
    # Built at first use: a cluster without DRA objects never pays for it (~65 ms of start-up).
    model_config = ConfigDict(extra="allow", populate_by_name=True, defer_build=True)

    def dump(self) -> dict[str, Any]:
        """The object in API shape (camelCase), unknown fields included, fields never set left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_unset=True, exclude_none=True)


class OwnerReference(_Model):
    api_version: str = Field(alias="apiVersion")
    kind: str
    name: str
    uid: str
    controller: bool | None = None
    block_owner_deletion: bool | None = Field(None, alias="blockOwnerDeletion")


class ObjectMeta(_Model):
    name: str = ""
    generate_name: str | None = Field(None, alias="generateName")
    namespace: str = ""
    uid: str = ""
    resource_version: str = Field("", alias="resourceVersion")
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    owner_references: list[OwnerReference] = Field(default_factory=list, alias="ownerReferences")
    finalizers: list[str] = Field(default_factory=list)
    deletion_timestamp: datetime | None = Field(None, alias="deletionTimestamp")
    creation_timestamp: datetime | None = Field(None, alias="creationTimestamp")


# --- core/v1 NodeSelector (as used by allocations and slices) ---------------------------------------


class NodeSelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]
    values: list[str] = Field(default_factory=list)


class NodeSelectorTerm(_Model):
    match_expressions: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchExpressions")
    match_fields: list[NodeSelectorRequirement] = Field(default_factory=list, alias="matchFields")


class NodeSelector(_Model):
    node_selector_terms: list[NodeSelectorTerm] = Field(alias="nodeSelectorTerms")


# --- DeviceClass ------------------------------------------------------------------------------------


class CELDeviceSelector(_Model):
    expression: str


class DeviceSelector(_Model):
    cel: CELDeviceSelector | None = None


class DeviceClassSpec(_Model):
    selectors: list[DeviceSelector] = Field(default_factory=list)
    config: list[dict[str, Any]] = Field(default_factory=list)
    extended_resource_name: str | None = Field(None, alias="extendedResourceName")


class DeviceClass(_Model):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "DeviceClass"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: DeviceClassSpec = Field(default_factory=DeviceClassSpec)


# --- ResourceClaim ----------------------------------------------------------------------------------


class DeviceToleration(_Model):
    key: str = ""
    operator: Literal["Exists", "Equal"] = "Equal"
    value: str = ""
    effect: str = ""
    toleration_seconds: int | None = Field(None, alias="tolerationSeconds")

    def tolerates(self, taint: DeviceTaint) -> bool:
        """Upstream ``resourceclaim.ToleratesTaint``: empty effect and empty key (with Exists) match
        every taint; Exists ignores the value."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        return self.value == taint.value


class CapacityRequirements(_Model):
    requests: dict[str, str] = Field(default_factory=dict)


class _DeviceRequestCommon(_Model):
    device_class_name: str = Field(alias="deviceClassName", min_length=1)
    selectors: list[DeviceSelector] = Field(default_factory=list, max_length=32)
    allocation_mode: Literal["ExactCount", "All"] = Field("ExactCount", alias="allocationMode")
    count: int = Field(1, ge=1)
    tolerations: list[DeviceToleration] = Field(default_factory=list)
    capacity: CapacityRequirements | None = None


class ExactDeviceRequest(_DeviceRequestCommon):
    admin_access: bool | None = Field(None, alias="adminAccess")


class DeviceSubRequest(_DeviceRequestCommon):
    name: str = Field(min_length=1)


class DeviceRequest(_Model):
    name: str = Field(min_length=1)
    exactly: ExactDeviceRequest | None = None
    first_available: list[DeviceSubRequest] | None = Field(None, alias="firstAvailable", max_length=8)

    @model_validator(mode="after")
    def _exactly_one_kind(self) -> DeviceRequest:
        if (self.exactly is None) == (not self.first_available):
            raise ValueError(f"request {self.name!r}: exactly one of exactly or firstAvailable must be set")
        return self


class DeviceConstraint(_Model):
    requests: list[str] = Field(default_factory=list)
    match_attribute: str | None = Field(None, alias="matchAttribute")
    distinct_attribute: str | None = Field(None, alias="distinctAttribute")


class DeviceClaim(_Model):
    requests: list[DeviceRequest] = Field(default_factory=list, max_length=32)
    constraints: list[DeviceConstraint] = Field(default_factory=list, max_length=32)
    config: list[dict[str, Any]] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_request_names(self) -> DeviceClaim:
        names = [r.name for r in self.requests]
        if len(names) != len(set(names)):
            raise ValueError("request names must be unique")
        return self


class ResourceClaimSpec(_Model):
    devices: DeviceClaim = Field(default_factory=DeviceClaim)


class DeviceRequestAllocationResult(_Model):
    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = Field(None, alias="adminAccess")
    tolerations: list[DeviceToleration] | None = None
    binding_conditions: list[str] | None = Field(None, alias="bindingConditions")
    binding_failure_conditions: list[str] | None = Field(None, alias="bindingFailureConditions")
    share_id: str | None = Field(None, alias="shareID")
    consumed_capacity: dict[str, str] | None = Field(None, alias="consumedCapacity")


class DeviceAllocationResult(_Model):
    results: list[DeviceRequestAllocationResult] = Field(default_factory=list)
    config: list[dict[str, Any]] = Field(default_factory=list)


class AllocationResult(_Model):
    devices: DeviceAllocationResult = Field(default_factory=DeviceAllocationResult)
    node_selector: NodeSelector | None = Field(None, alias="nodeSelector")
    allocation_timestamp: datetime | None = Field(None, alias="allocationTimestamp")


class ResourceClaimConsumerReference(_Model):
    api_group: str | None = Field(None, alias="apiGroup")
    resource: str
    name: str
    uid: str


class DeviceCondition(_Model):
    type: str
    status: str


class AllocatedDeviceStatus(_Model):
    driver: str
    pool: str
    device: str
    share_id: str | None = Field(None, alias="shareID")
    conditions: list[DeviceCondition] = Field(default_factory=list)


class ResourceClaimStatus(_Model):
    allocation: AllocationResult | None = None
    reserved_for: list[ResourceClaimConsumerReference] = Field(default_factory=list, alias="reservedFor")
    devices: list[AllocatedDeviceStatus] = Field(default_factory=list)


class ResourceClaim(_Model):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "ResourceClaim"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)
    status: ResourceClaimStatus = Field(default_factory=ResourceClaimStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def allocated(self) -> bool:
        return self.status.allocation is not None

    def is_reserved_for(self, uid: str) -> bool:
        return any(ref.uid == uid for ref in self.status.reserved_for)


class ResourceClaimTemplateSpec(_Model):
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: ResourceClaimSpec = Field(default_factory=ResourceClaimSpec)


class ResourceClaimTemplate(_Model):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "ResourceClaimTemplate"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceClaimTemplateSpec = Field(default_factory=ResourceClaimTemplateSpec)


# --- ResourceSlice ----------------------------------------------------------------------------------


class DeviceAttribute(_Model):
    int_value: int | None = Field(None, alias="int")
    bool_value: bool | None = Field(None, alias="bool")
    string_value: str | None = Field(None, alias="string")
    version_value: str | None = Field(None, alias="version")
    int_values: list[int] | None = Field(None, alias="ints", min_length=1)
    bool_values: list[bool] | None = Field(None, alias="bools", min_length=1)
    string_values: list[str] | None = Field(None, alias="strings", min_length=1)
    version_values: list[str] | None = Field(None, alias="versions", min_length=1)

    @model_validator(mode="after")
    def _exactly_one_value(self) -> DeviceAttribute:
        set_fields = [name for name in _ATTRIBUTE_ALIASES if getattr(self, name) is not None]
        if len(set_fields) != 1:
            raise ValueError(
                "exactly one of int, bool, string, version, ints, bools, strings, versions must be set"
            )
        return self

    def as_api(self) -> dict[str, Any]:
        """{"int": 1} style, the shape the CEL layer reads."""
        for name, alias in _ATTRIBUTE_ALIASES.items():
            value = getattr(self, name)
            if value is not None:
                return {alias: value}
        return {}


_ATTRIBUTE_ALIASES = {
    "int_value": "int",
    "bool_value": "bool",
    "string_value": "string",
    "version_value": "version",
    "int_values": "ints",
    "bool_values": "bools",
    "string_values": "strings",
    "version_values": "versions",
}


def _check_quantity(text: str | None) -> None:
    if text is None:
        return
    try:
        parse_quantity(text)
    except QuantityError as exc:
        raise ValueError(f"value {text!r}: {exc}") from None


class CapacityRequestPolicyRange(_Model):
    min: str
    max: str | None = None
    step: str | None = None


class CapacityRequestPolicy(_Model):
    default: str | None = None
    valid_values: list[str] | None = Field(None, alias="validValues")
    valid_range: CapacityRequestPolicyRange | None = Field(None, alias="validRange")


class DeviceCapacity(_Model):
    value: str
    request_policy: CapacityRequestPolicy | None = Field(None, alias="requestPolicy")

    @model_validator(mode="after")
    def _valid_quantity(self) -> DeviceCapacity:
        _check_quantity(self.value)
        return self

    @property
    def quantity(self) -> Quantity:
        return parse_quantity(self.value)


class Counter(_Model):
    value: str

    @model_validator(mode="after")
    def _valid_quantity(self) -> Counter:
        _check_quantity(self.value)
        return self


class CounterSet(_Model):
    name: str = Field(min_length=1)
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceCounterConsumption(_Model):
    counter_set: str = Field(alias="counterSet", min_length=1)
    counters: dict[str, Counter] = Field(default_factory=dict)


class DeviceTaint(_Model):
    key: str
    value: str = ""
    effect: str


# Taint effects that keep a device from being allocated; others (None, future ones) do not.
BLOCKING_TAINT_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


class Device(_Model):
    name: str = Field(min_length=1)
    attributes: dict[str, DeviceAttribute] = Field(default_factory=dict)
    capacity: dict[str, DeviceCapacity] = Field(default_factory=dict)
    node_name: str | None = Field(None, alias="nodeName")
    node_selector: NodeSelector | None = Field(None, alias="nodeSelector")
    all_nodes: bool | None = Field(None, alias="allNodes")
    allow_multiple_allocations: bool | None = Field(None, alias="allowMultipleAllocations")
    consumes_counters: list[DeviceCounterConsumption] = Field(default_factory=list, alias="consumesCounters")
    taints: list[DeviceTaint] = Field(default_factory=list)
    binds_to_node: bool | None = Field(None, alias="bindsToNode")
    binding_conditions: list[str] = Field(default_factory=list, alias="bindingConditions")
    binding_failure_conditions: list[str] = Field(default_factory=list, alias="bindingFailureConditions")


class ResourcePool(_Model):
    name: str = Field(min_length=1)
    generation: int = Field(ge=0)
    resource_slice_count: int = Field(alias="resourceSliceCount", ge=1)


class ResourceSliceSpec(_Model):
    driver: str = Field(min_length=1)
    pool: ResourcePool
    node_name: str | None = Field(None, alias="nodeName")
    node_selector: NodeSelector | None = Field(None, alias="nodeSelector")
    all_nodes: bool | None = Field(None, alias="allNodes")
    per_device_node_selection: bool | None = Field(None, alias="perDeviceNodeSelection")
    devices: list[Device] = Field(default_factory=list)
    shared_counters: list[CounterSet] = Field(default_factory=list, alias="sharedCounters")

    @model_validator(mode="after")
    def _exactly_one_node_scope(self) -> ResourceSliceSpec:
        scopes = [
            bool(self.node_name),
            self.node_selector is not None,
            bool(self.all_nodes),
            bool(self.per_device_node_selection),
        ]
        if sum(scopes) != 1:
            raise ValueError(
                "exactly one of nodeName, nodeSelector, allNodes, perDeviceNodeSelection must be set"
            )
        return self


class ResourceSlice(_Model):
    api_version: str = Field(API_VERSION, alias="apiVersion")
    kind: str = "ResourceSlice"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: ResourceSliceSpec


# --- parsing at the edge ----------------------------------------------------------------------------

ResourceT = TypeVar("ResourceT", ResourceClaim, ResourceClaimTemplate, ResourceSlice, DeviceClass)


def _location(loc: tuple[int | str, ...]) -> str:
    path = ""
    for part in loc:
        if isinstance(part, int):
            path += f"[{part}]"
        else:
            path += f".{part}" if path else str(part)
    return path or "(object)"


class _Shared:
    """Validated parts of API objects by their JSON, for parts that many objects repeat and nobody
    modifies: a claim's spec (every claim made from one template has the same one), an allocation's
    node selector (the same for every claim on a node), a device's attribute and capacity values
    (the same model, version and memory on every device of a kind). Each is validated once, and
    the objects that repeat it share one model: the memory of one instead of one per object."""

    def __init__(self, model: type[BaseModel], kept: int) -> None:
        self.model = model
        self.kept = kept
        self._validated: dict[bytes, BaseModel] = {}

    def get(self, value: object) -> BaseModel | None:
        """The shared model of ``value`` (validated now if new), or None when it is not JSON or
        not valid: then the whole object is validated as it is, so the error names the field."""
        if not isinstance(value, dict):
            return None
        try:
            key = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:  # built in code, not read from the API: no sharing
            return None
        validated = self._validated.get(key)
        if validated is None:
            try:
                validated = self.model.model_validate(value)
            except ValidationError:
                return None
            if len(self._validated) >= self.kept:
                del self._validated[next(iter(self._validated))]
            self._validated[key] = validated
        return validated


_CLAIM_SPECS = _Shared(ResourceClaimSpec, 1024)
_NODE_SELECTORS = _Shared(NodeSelector, 16_384)
_ATTRIBUTES = _Shared(DeviceAttribute, 16_384)
_CAPACITIES = _Shared(DeviceCapacity, 1024)


def _shared_values(values: object, shared: _Shared) -> dict[str, Any] | None:
    """A copy of a map of values with each value its shared model; None if any cannot be shared."""
    if not isinstance(values, dict):
        return None
    out: dict[str, Any] = {}
    for name, value in values.items():
        model = shared.get(value)
        if model is None:
            return None
        out[name] = model
    return out


def _with_shared_claim_parts(obj: dict[str, Any]) -> dict[str, Any]:
    out = dict(obj)
    spec = _CLAIM_SPECS.get(obj.get("spec"))
    if spec is not None:
        out["spec"] = spec
    status = obj.get("status")
    allocation = status.get("allocation") if isinstance(status, dict) else None
    if isinstance(status, dict) and isinstance(allocation, dict) and "nodeSelector" in allocation:
        selector = _NODE_SELECTORS.get(allocation["nodeSelector"])
        if selector is not None:
            out["status"] = {**status, "allocation": {**allocation, "nodeSelector": selector}}
    return out


def _with_shared_device_values(obj: dict[str, Any]) -> dict[str, Any]:
    spec = obj.get("spec")
    devices = spec.get("devices") if isinstance(spec, dict) else None
    if not isinstance(spec, dict) or not isinstance(devices, list):
        return obj
    shared_devices: list[Any] = []
    for device in devices:
        if not isinstance(device, dict):
            return obj
        shared = dict(device)
        for field, values in (("attributes", _ATTRIBUTES), ("capacity", _CAPACITIES)):
            if field in device:
                models = _shared_values(device[field], values)
                if models is None:
                    return obj
                shared[field] = models
        shared_devices.append(shared)
    return {**obj, "spec": {**spec, "devices": shared_devices}}


def _validate(model: type[ResourceT], obj: dict[str, Any]) -> ResourceT:
    if not isinstance(obj, dict):
        return model.model_validate(obj)
    if model is ResourceClaim:
        return model.model_validate(_with_shared_claim_parts(obj))
    if model is ResourceSlice:
        return model.model_validate(_with_shared_device_values(obj))
    return model.model_validate(obj)


def parse_resource(model: type[ResourceT], obj: dict[str, Any]) -> ResourceT:
    """Validate an API object; on failure raise ResourceModelError naming the object and each field."""
    try:
        return _validate(model, obj)
    except ValidationError as exc:
        metadata = obj.get("metadata") if isinstance(obj, dict) else None
        metadata = metadata if isinstance(metadata, dict) else {}
        name = metadata.get("name") or "<unnamed>"
        namespace = metadata.get("namespace")
        who = f"{model.__name__} {namespace}/{name}" if namespace else f"{model.__name__} {name}"
        problems = "; ".join(
            f"{_location(err['loc'])}: {str(err['msg']).removeprefix('Value error, ')}"
            for err in exc.errors()
        )
        raise ResourceModelError(f"{who}: {problems}") from None
