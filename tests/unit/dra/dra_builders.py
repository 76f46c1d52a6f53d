"""Builders of resource.k8s.io/v1 objects in API shape for the DRA tests."""

from __future__ import annotations

import itertools
from typing import Any

from lockstep.api.resource import DeviceClass, ResourceClaim, ResourceSlice, parse_resource

DRIVER = "gpu.example.com"
CLASS = "gpu"
_uids = itertools.count(1)


def device(name: str, **attributes: Any) -> dict[str, Any]:
    """A device; keyword values become attributes: int/bool/str scalars, lists become list attributes."""
    rendered: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, bool):
            rendered[key] = {"bool": value}
        elif isinstance(value, int):
            rendered[key] = {"int": value}
        elif isinstance(value, str):
            rendered[key] = {"string": value}
        elif isinstance(value, list) and value and isinstance(value[0], int):
            rendered[key] = {"ints": value}
        elif isinstance(value, list):
            rendered[key] = {"strings": value}
        else:
            raise TypeError(f"attribute {key}: unsupported value {value!r}")
    return {"name": name, "attributes": rendered, "capacity": {"memory": {"value": "80Gi"}}}


def resource_slice(
    name: str,
    devices: list[dict[str, Any]],
    node: str | None = None,
    *,
    pool: str | None = None,
    generation: int = 1,
    slice_count: int = 1,
    node_selector: dict[str, Any] | None = None,
    all_nodes: bool = False,
    driver: str = DRIVER,
    rv: str = "1",
    shared_counters: dict[str, dict[str, str]] | None = None,
) -> ResourceSlice:
    """``shared_counters``: counter set -> counter -> quantity (a counters slice: pass no devices)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {"name": pool or node or name, "generation": generation, "resourceSliceCount": slice_count},
        "devices": devices,
    }
    if shared_counters is not None:
        spec["sharedCounters"] = [
            {"name": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
            for set_name, counters in shared_counters.items()
        ]
    if node is not None:
        spec["nodeName"] = node
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if all_nodes:
        spec["allNodes"] = True
    return parse_resource(ResourceSlice, {"metadata": {"name": name, "resourceVersion": rv}, "spec": spec})


def partition(name: str, counter_set: str = "gpu0", **counters: str) -> dict[str, Any]:
    """A device consuming shared counters (memory="40Gi")."""
    consumed = {k: {"value": v} for k, v in counters.items()}
    return {"name": name, "consumesCounters": [{"counterSet": counter_set, "counters": consumed}]}


def taint(key: str, effect: str = "NoSchedule", value: str = "") -> dict[str, str]:
    return {"key": key, "value": value, "effect": effect} if value else {"key": key, "effect": effect}


def device_class(name: str = CLASS, *expressions: str, rv: str = "1") -> DeviceClass:
    selectors = [{"cel": {"expression": e}} for e in expressions or (f'device.driver == "{DRIVER}"',)]
    return parse_resource(
        DeviceClass, {"metadata": {"name": name, "resourceVersion": rv}, "spec": {"selectors": selectors}}
    )


def exactly(
    name: str,
    count: int = 1,
    *selectors: str,
    device_class_name: str = CLASS,
    all_devices: bool = False,
    admin_access: bool = False,
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    request: dict[str, Any] = {"deviceClassName": device_class_name, "count": count}
    if all_devices:
        request = {"deviceClassName": device_class_name, "allocationMode": "All"}
    if tolerations:
        request["tolerations"] = tolerations
    if selectors:
        request["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin_access:
        request["adminAccess"] = True
    return {"name": name, "exactly": request}


def first_available(name: str, *subrequests: tuple[str, int, str]) -> dict[str, Any]:
    """Sub-requests as (name, count, selector expression or "")."""
    subs = []
    for sub_name, count, expression in subrequests:
        sub: dict[str, Any] = {"name": sub_name, "deviceClassName": CLASS, "count": count}
        if expression:
            sub["selectors"] = [{"cel": {"expression": expression}}]
        subs.append(sub)
    return {"name": name, "firstAvailable": subs}


def claim(
    name: str,
    *requests: dict[str, Any],
    constraints: list[dict[str, Any]] | None = None,
    namespace: str = "ns",
    uid: str | None = None,
    rv: str = "1",
    status: dict[str, Any] | None = None,
) -> ResourceClaim:
    obj: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid or f"uid-{name}-{next(_uids)}",
            "resourceVersion": rv,
        },
        "spec": {"devices": {"requests": list(requests), "constraints": constraints or []}},
    }
    if status is not None:
        obj["status"] = status
    return parse_resource(ResourceClaim, obj)


def match(attribute: str, *requests: str) -> dict[str, Any]:
    return {"matchAttribute": attribute, "requests": list(requests)}
