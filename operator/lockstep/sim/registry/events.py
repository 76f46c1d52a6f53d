"""Events: core/v1 and events.k8s.io/v1, one storage with the field mapping of the real conversion."""

from __future__ import annotations

from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import (
    check_micro_time,
)
from lockstep.sim.resources import METADATA_FIELDS, ResourceType, Strategy, WriteContext, storage_version_hash
from lockstep.sim.store import View

JsonObject = dict[str, Any]

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


def event_types() -> list[ResourceType]:
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
    ]
