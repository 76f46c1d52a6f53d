"""Built-in kinds: defaulting, normalization and validation the way kube-apiserver 1.36 does them."""

from __future__ import annotations

import random
import re
import time
from datetime import UTC, datetime
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError, bad_request
from lockstep.sim.resources import METADATA_FIELDS, ResourceType, Strategy, WriteContext, storage_version_hash
from lockstep.sim.store import View

JsonObject = dict[str, Any]

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


_last_stamp: tuple[int, str] = (0, "")


def now_rfc3339() -> str:
    """The current second as RFC 3339 (formatted once per second: it is on every write)."""
    global _last_stamp
    second = int(time.time())
    if _last_stamp[0] != second:
        _last_stamp = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _last_stamp[1]


def random_suffix(length: int = 5) -> str:
    # the alphabet of apimachinery's rand.String: no vowels, no confusable digits
    return "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=length))


def validate_name(name: Any, label: bool = False) -> list[FieldError]:
    if not name:
        return [fe.required("metadata.name", "name or generateName is required")]
    pattern, message, limit = (
        (DNS1123_LABEL, LABEL_MESSAGE, 63) if label else (DNS1123_SUBDOMAIN, SUBDOMAIN_MESSAGE, 253)
    )
    if not isinstance(name, str) or len(name) > limit or not pattern.match(name):
        return [fe.invalid("metadata.name", name, message)]
    return []


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_MESSAGE = "prefix part " + SUBDOMAIN_MESSAGE


def _qualified_name_errors(field: str, key: Any) -> list[FieldError]:
    if not isinstance(key, str) or not key:
        return [fe.invalid(field, key, NAME_PART_MESSAGE)]
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return [fe.invalid(field, key, PREFIX_MESSAGE)]
    if len(name) > 63:
        return [fe.invalid(field, key, "name part must be no more than 63 characters")]
    if not NAME_PART.match(name):
        return [fe.invalid(field, key, NAME_PART_MESSAGE)]
    return []


def validate_object_meta(meta: JsonObject) -> list[FieldError]:
    """Label keys and values and annotation keys, as ``ValidateObjectMeta`` checks them for every kind."""
    errors: list[FieldError] = []
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [fe.invalid("metadata.labels", labels, "must be a map of strings")]
    for key, value in labels.items():
        errors.extend(_qualified_name_errors("metadata.labels", key))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            message = (
                LABEL_VALUE_MESSAGE
                if isinstance(value, str) and len(value) <= 63
                else "must be no more than 63 characters"
            )
            errors.append(fe.invalid("metadata.labels", value, message))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*errors, fe.invalid("metadata.annotations", annotations, "must be a map of strings")]
    for key in annotations:
        errors.extend(
            _qualified_name_errors("metadata.annotations", key.lower() if isinstance(key, str) else key)
        )
    return errors


def check_micro_time(rt: ResourceType, obj: JsonObject, path: tuple[str, ...]) -> None:
    """MicroTime fields need exactly six fractional digits, or the decoder answers 400."""
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None or (isinstance(value, str) and MICRO_TIME.match(value)):
        return
    text = str(value)
    rest = text[19:] if len(text) >= 19 else text
    raise bad_request(
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: parsing time "{text}" as '
        f'"2006-01-02T15:04:05.000000Z07:00": cannot parse "{rest}" as ".000000"'
    )


# ---------------------------------------------------------------- namespaces


class NamespaceStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        meta = obj["metadata"]
        labels = meta.setdefault("labels", {})
        labels["kubernetes.io/metadata.name"] = meta.get("name", "")
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj.setdefault("status", {}).setdefault("phase", "Active")

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name"), label=True) if old is None else []


# ---------------------------------------------------------------- nodes


class NodeStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        obj.setdefault("spec", {})
        obj.setdefault("status", {})

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name")) if old is None else []


# ---------------------------------------------------------------- pods

MUTABLE_POD_SPEC_MESSAGE = (
    "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,"
    "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),"
    "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)
DEFAULT_TOLERATIONS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
POD_SMP_LISTS = {
    ("spec", "containers"): "name",
    ("spec", "initContainers"): "name",
    ("spec", "ephemeralContainers"): "name",
    ("spec", "containers", "ports"): "containerPort",
    ("spec", "initContainers", "ports"): "containerPort",
    ("spec", "containers", "env"): "name",
    ("spec", "initContainers", "env"): "name",
    ("spec", "containers", "volumeMounts"): "mountPath",
    ("spec", "initContainers", "volumeMounts"): "mountPath",
    ("spec", "containers", "volumeDevices"): "devicePath",
    ("spec", "initContainers", "volumeDevices"): "devicePath",
    ("spec", "topologySpreadConstraints"): "topologyKey",
    ("spec", "volumes"): "name",
    ("spec", "imagePullSecrets"): "name",
    ("spec", "schedulingGates"): "name",
    ("spec", "resourceClaims"): "name",
    ("spec", "hostAliases"): "ip",
    ("status", "conditions"): "type",
    ("status", "podIPs"): "ip",
    ("status", "hostIPs"): "ip",
    ("status", "resourceClaimStatuses"): "name",
}


def _image_pull_policy(image: str) -> str:
    name = image.split("@", 1)[0]
    last = name.rsplit("/", 1)[-1]
    if "@" in image:
        return "IfNotPresent"
    if ":" not in last or last.endswith(":latest"):
        return "Always"
    return "IfNotPresent"


def _default_container(container: JsonObject) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    if isinstance(container.get("image"), str):
        container.setdefault("imagePullPolicy", _image_pull_policy(container["image"]))
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    resources = container.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, quantity in limits.items():
            requests.setdefault(name, quantity)


def qos_class(spec: JsonObject) -> str:
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        if requests or limits:
            any_set = True
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_SYNTAX = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")


def check_pod_quantities(rt: ResourceType, pod: JsonObject) -> None:
    """Resource quantities are parsed by the decoder: a malformed one is a 400 for the whole pod."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    for container in containers:
        resources = container.get("resources") if isinstance(container, dict) else None
        for section in ("requests", "limits"):
            for value in ((resources or {}).get(section) or {}).values():
                if not isinstance(value, int | float) and not (
                    isinstance(value, str) and QUANTITY.match(value) and QUANTITY_SYNTAX.match(value)
                ):
                    raise bad_request(
                        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
                        f"quantities must match the regular expression '{QUANTITY.pattern}'"
                    )


class PodStrategy(Strategy):
    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        check_pod_quantities(rt, obj)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        for list_name in ("initContainers", "containers", "ephemeralContainers"):
            for container in spec.get(list_name) or []:
                if isinstance(container, dict):
                    _default_container(container)
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("serviceAccountName", spec.get("serviceAccount") or "default")
        spec.setdefault("serviceAccount", spec["serviceAccountName"])
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("priority", 0)
        spec.setdefault("enableServiceLinks", True)
        spec.setdefault("preemptionPolicy", "PreemptLowerPriority")
        if old is not None:
            return
        tolerations = spec.setdefault("tolerations", [])
        for key in DEFAULT_TOLERATIONS:
            if not any(
                t.get("key") == key and t.get("effect") in (None, "", "NoExecute") for t in tolerations
            ):
                tolerations.append(
                    {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
                )
        if spec.get("automountServiceAccountToken") is not False:
            self._mount_service_account_token(spec)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status["qosClass"] = qos_class(spec)
        if spec.get("schedulingGates"):
            status["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "lastProbeTime": None,
                    "lastTransitionTime": now_rfc3339(),
                    "reason": "SchedulingGated",
                    "message": "Scheduling is blocked due to non-empty scheduling gates",
                }
            ]

    @staticmethod
    def _mount_service_account_token(spec: JsonObject) -> None:
        """What the ServiceAccount admission plugin adds (upstream sources: token, CA, namespace)."""
        volume_name = "kube-api-access-" + random_suffix()
        spec.setdefault("volumes", []).append(
            {
                "name": volume_name,
                "projected": {
                    "sources": [
                        {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                        {
                            "configMap": {
                                "name": "kube-root-ca.crt",
                                "items": [{"key": "ca.crt", "path": "ca.crt"}],
                            }
                        },
                        {
                            "downwardAPI": {
                                "items": [
                                    {
                                        "path": "namespace",
                                        "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    }
                                ]
                            }
                        },
                    ],
                    "defaultMode": 420,
                },
            }
        )
        mount = {
            "name": volume_name,
            "readOnly": True,
            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
        }
        for list_name in ("initContainers", "containers"):
            for container in spec.get(list_name) or []:
                container.setdefault("volumeMounts", []).append(dict(mount))

    def normalize(self, rt: ResourceType, obj: JsonObject) -> None:
        status = obj.get("status")
        if not isinstance(status, dict):
            return
        for condition in status.get("conditions") or []:
            if isinstance(condition, dict):
                condition.setdefault("lastProbeTime", None)
                condition.setdefault("lastTransitionTime", None)
        if status.get("podIP") and not status.get("podIPs"):
            status["podIPs"] = [{"ip": status["podIP"]}]

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if old is None:
            errors = validate_name(obj["metadata"].get("name"))
            containers = spec.get("containers")
            if not containers:
                errors.append(fe.required("spec.containers"))
            else:
                seen: set[str] = set()
                for i, container in enumerate(containers):
                    name = container.get("name") if isinstance(container, dict) else None
                    path = f"spec.containers[{i}]"
                    if not name:
                        errors.append(fe.required(f"{path}.name"))
                    elif name in seen:
                        errors.append(fe.duplicate(f"{path}.name", name))
                    elif not DNS1123_LABEL.match(name):
                        errors.append(fe.invalid(f"{path}.name", name, LABEL_MESSAGE))
                    else:
                        seen.add(name)
                    if isinstance(container, dict) and not container.get("image"):
                        errors.append(fe.required(f"{path}.image"))
            return errors
        if ctx.subresource:
            return self._validate_status(obj, old)
        return self._validate_spec_update(spec, old.get("spec") or {})

    @staticmethod
    def _validate_status(obj: JsonObject, old: JsonObject) -> list[FieldError]:
        old_phase = (old.get("status") or {}).get("phase")
        new_phase = (obj.get("status") or {}).get("phase")
        if old_phase in ("Succeeded", "Failed") and new_phase != old_phase:
            return [
                fe.forbidden(
                    "status.phase", f"cannot transition from terminal phase {old_phase} to {new_phase}"
                )
            ]
        return []

    @staticmethod
    def _validate_spec_update(spec: JsonObject, old_spec: JsonObject) -> list[FieldError]:
        for list_name in ("containers", "initContainers"):
            new_names = [c.get("name") for c in spec.get(list_name) or []]
            old_names = [c.get("name") for c in old_spec.get(list_name) or []]
            if len(new_names) != len(old_names):
                return [fe.forbidden(f"spec.{list_name}", "pod updates may not add or remove containers")]
        comparable_new, comparable_old = dict(spec), dict(old_spec)
        for s in (comparable_new, comparable_old):
            for list_name in ("containers", "initContainers"):
                s[list_name] = [{k: v for k, v in c.items() if k != "image"} for c in s.get(list_name) or []]
            for key in (
                "activeDeadlineSeconds",
                "tolerations",
                "terminationGracePeriodSeconds",
                "schedulingGates",
            ):
                s.pop(key, None)
        old_tolerations = old_spec.get("tolerations") or []
        new_tolerations = spec.get("tolerations") or []
        tolerations_ok = all(t in new_tolerations for t in old_tolerations)
        if comparable_new != comparable_old or not tolerations_ok:
            return [fe.forbidden("spec", MUTABLE_POD_SPEC_MESSAGE)]
        old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
        new_gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        if any(g not in old_gates for g in new_gates):
            return [
                fe.forbidden(
                    "spec.schedulingGates", "only deletion is allowed, but found new scheduling gate"
                )
            ]
        return []

    def bookmark(self, rt: ResourceType, rv: int) -> JsonObject:
        return {
            "kind": "Pod",
            "apiVersion": "v1",
            "metadata": {"resourceVersion": str(rv)},
            "spec": {"containers": None},
            "status": {},
        }


# ---------------------------------------------------------------- events

CORE_EVENT_OMIT_EMPTY = ("reason", "message", "type", "action", "count")


def normalize_core_event(obj: JsonObject) -> None:
    obj.setdefault("involvedObject", {})
    obj.setdefault("source", {})
    for key in ("firstTimestamp", "lastTimestamp", "eventTime"):
        obj.setdefault(key, None)
    obj.setdefault("reportingComponent", "")
    obj.setdefault("reportingInstance", "")
    for key in CORE_EVENT_OMIT_EMPTY:
        if key in obj and not obj[key]:
            del obj[key]


def core_event_to_events_v1(obj: JsonObject) -> JsonObject:
    out: JsonObject = {"kind": "Event", "apiVersion": "events.k8s.io/v1", "metadata": obj.get("metadata", {})}
    out["eventTime"] = obj.get("eventTime")
    pairs = (
        ("series", "series"),
        ("reportingController", "reportingComponent"),
        ("reportingInstance", "reportingInstance"),
        ("action", "action"),
        ("reason", "reason"),
    )
    for new, core in pairs:
        if obj.get(core):
            out[new] = obj[core]
    out["regarding"] = obj.get("involvedObject") or {}
    if obj.get("related"):
        out["related"] = obj["related"]
    if obj.get("message"):
        out["note"] = obj["message"]
    if obj.get("type"):
        out["type"] = obj["type"]
    out["deprecatedSource"] = obj.get("source") or {}
    out["deprecatedFirstTimestamp"] = obj.get("firstTimestamp")
    out["deprecatedLastTimestamp"] = obj.get("lastTimestamp")
    if obj.get("count"):
        out["deprecatedCount"] = obj["count"]
    return out


def events_v1_to_core_event(obj: JsonObject) -> JsonObject:
    out: JsonObject = {"kind": "Event", "apiVersion": "v1", "metadata": obj.get("metadata", {})}
    out["involvedObject"] = obj.get("regarding") or {}
    for core, new in (("reason", "reason"), ("message", "note"), ("type", "type"), ("action", "action")):
        if obj.get(new):
            out[core] = obj[new]
    out["source"] = obj.get("deprecatedSource") or {}
    out["firstTimestamp"] = obj.get("deprecatedFirstTimestamp")
    out["lastTimestamp"] = obj.get("deprecatedLastTimestamp")
    if obj.get("deprecatedCount"):
        out["count"] = obj["deprecatedCount"]
    out["eventTime"] = obj.get("eventTime")
    for key in ("series", "related"):
        if obj.get(key):
            out[key] = obj[key]
    out["reportingComponent"] = obj.get("reportingController") or ""
    out["reportingInstance"] = obj.get("reportingInstance") or ""
    return out


EVENTS_V1_VIEW = View("events.k8s.io/v1", core_event_to_events_v1, events_v1_to_core_event)


def validate_event(obj: JsonObject, strict: bool) -> list[FieldError]:
    """``ValidateEventCreate``: legacy rules for core/v1, plus the strict ones for events.k8s.io/v1."""
    errors: list[FieldError] = []
    namespace = obj["metadata"].get("namespace", "")
    involved_ns = (obj.get("involvedObject") or {}).get("namespace", "")
    controller_field = "reportingController" if strict else "reportingComponent"
    if not obj.get("eventTime"):
        if (not involved_ns and namespace not in ("", "default")) or (
            involved_ns and involved_ns != namespace
        ):
            errors.append(
                fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
            )
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errors.append(
                fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
            )
        if not obj.get("reportingComponent"):
            errors.append(fe.required(controller_field))
        if not obj.get("reportingInstance"):
            errors.append(fe.required("reportingInstance"))
        if not obj.get("action"):
            errors.append(fe.required("action"))
        if not obj.get("reason"):
            errors.append(fe.required("reason"))
    if not strict:
        return errors
    if not obj.get("eventTime"):
        errors.append(fe.required("eventTime"))
    if obj.get("type") not in ("Normal", "Warning"):
        errors.append(fe.invalid("type", "", f"has invalid value: {obj.get('type') or ''}"))
    return errors


class CoreEventStrategy(Strategy):
    strict = False

    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        check_micro_time(rt, obj, ("eventTime",))

    def normalize(self, rt: ResourceType, obj: JsonObject) -> None:
        normalize_core_event(obj)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_event(obj, self.strict) if old is None else []

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


class EventsV1Strategy(CoreEventStrategy):
    strict = True


# ---------------------------------------------------------------- leases


class LeaseStrategy(Strategy):
    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        for key in ("acquireTime", "renewTime"):
            check_micro_time(rt, obj, ("spec", key))

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            errors.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and transitions < 0:
            errors.append(
                fe.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
            )
        return errors


# ---------------------------------------------------------------- generic


class PlainStrategy(Strategy):
    """A kind with no defaulting or validation beyond names."""

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name")) if old is None else []


def core_types() -> list[ResourceType]:
    pod_fields = {
        **METADATA_FIELDS,
        **{
            f: f
            for f in (
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.nominatedNodeName",
            )
        },
    }
    event_fields = {
        **METADATA_FIELDS,
        **{
            f"involvedObject.{k}": f"involvedObject.{k}"
            for k in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
        },
        "reason": "reason",
        "reportingComponent": "reportingComponent",
        "source": "source.component",
        "type": "type",
    }
    events_v1_fields = {
        **event_fields,
        **{
            f"regarding.{k}": f"involvedObject.{k}"
            for k in ("kind", "namespace", "name", "uid", "apiVersion")
        },
        "reportingController": "reportingComponent",
    }
    core_event_hash = storage_version_hash("", "v1", "Event")
    return [
        ResourceType(
            "",
            "v1",
            "namespaces",
            "namespace",
            "Namespace",
            False,
            NamespaceStrategy(),
            short_names=("ns",),
            verbs=tuple(v for v in ("create", "delete", "get", "list", "patch", "update", "watch")),
            subresources=("status",),
            field_labels={**METADATA_FIELDS, "status.phase": "status.phase"},
            smp_lists={("spec", "finalizers"): "$set", ("status", "conditions"): "type"},
        ),
        ResourceType(
            "",
            "v1",
            "nodes",
            "node",
            "Node",
            False,
            NodeStrategy(),
            short_names=("no",),
            subresources=("status",),
            status_updates_metadata=True,
            field_labels={**METADATA_FIELDS, "spec.unschedulable": "spec.unschedulable"},
            smp_lists={
                ("status", "conditions"): "type",
                ("status", "addresses"): "type",
                ("spec", "podCIDRs"): "$set",
            },
        ),
        ResourceType(
            "",
            "v1",
            "pods",
            "pod",
            "Pod",
            True,
            PodStrategy(),
            short_names=("po",),
            categories=("all",),
            subresources=("binding", "status"),
            has_generation=True,
            returns_deleted_object=True,
            status_updates_metadata=True,
            field_labels=pod_fields,
            smp_lists=dict(POD_SMP_LISTS),
        ),
        ResourceType(
            "",
            "v1",
            "events",
            "event",
            "Event",
            True,
            CoreEventStrategy(),
            short_names=("ev",),
            storage="events",
            field_labels=event_fields,
            smp_lists={},
        ),
        ResourceType(
            "events.k8s.io",
            "v1",
            "events",
            "event",
            "Event",
            True,
            EventsV1Strategy(),
            short_names=("ev",),
            storage="events",
            view=EVENTS_V1_VIEW,
            field_labels=events_v1_fields,
            smp_lists={},
            storage_hash=core_event_hash,
        ),
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            True,
            LeaseStrategy(),
            unconditional_update=False,
            smp_lists={},
        ),
    ]


def random_name(prefix: str) -> str:
    return prefix + random_suffix()


def ensure_object_shape(rt: ResourceType, obj: Any) -> JsonObject:
    if not isinstance(obj, dict):
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: expected an object'
        )
    meta = obj.get("metadata")
    if meta is None:
        obj["metadata"] = {}
    elif not isinstance(meta, dict):
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            "metadata must be an object"
        )
    return obj
