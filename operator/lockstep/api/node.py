"""Parse a raw Node (the API's JSON, as a dict) into the scheduler's ``NodeInfo``, once, at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.api.pod import InvalidObjectError, parse_resource_list
from lockstep.scheduler.framework import NodeInfo

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def parse_node(obj: Mapping[str, Any]) -> NodeInfo:
    """Build a NodeInfo (with nothing placed on it yet) from a Node; raise InvalidObjectError."""
    metadata = obj.get("metadata") or {}
    name = metadata.get("name") if isinstance(metadata, Mapping) else None
    if not isinstance(name, str) or not name:
        raise InvalidObjectError("Node", "?", "metadata.name", "must be a non-empty string")
    labels = metadata.get("labels") or {}
    if not isinstance(labels, Mapping):
        raise InvalidObjectError("Node", name, "metadata.labels", "must be an object")
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    if not isinstance(spec, Mapping) or not isinstance(status, Mapping):
        raise InvalidObjectError(
            "Node", name, "spec" if not isinstance(spec, Mapping) else "status", "must be an object"
        )
    source = "status.allocatable" if status.get("allocatable") is not None else "status.capacity"
    allocatable = parse_resource_list(status.get(source.split(".")[1]), "Node", name, source)
    taints = []
    for index, taint in enumerate(spec.get("taints") or []):
        if not isinstance(taint, Mapping) or not isinstance(taint.get("key"), str):
            raise InvalidObjectError("Node", name, f"spec.taints[{index}].key", "must be a string")
        if taint.get("effect") not in TAINT_EFFECTS:
            raise InvalidObjectError(
                "Node",
                name,
                f"spec.taints[{index}].effect",
                f"must be one of {', '.join(TAINT_EFFECTS)}, got {taint.get('effect')!r}",
            )
        taints.append(taint)
    images: dict[str, int] = {}
    for index, image in enumerate(status.get("images") or ()):
        if not isinstance(image, Mapping):
            raise InvalidObjectError("Node", name, f"status.images[{index}]", "must be an object")
        size = image.get("sizeBytes") or 0
        if isinstance(size, bool) or not isinstance(size, int):
            raise InvalidObjectError("Node", name, f"status.images[{index}].sizeBytes", "must be an integer")
        for image_name in image.get("names") or ():
            images[str(image_name)] = size
    return NodeInfo(
        name=name,
        labels={str(k): str(v) for k, v in labels.items()},
        allocatable=allocatable,
        taints=tuple(taints),
        unschedulable=bool(spec.get("unschedulable", False)),
        images=images,
    )
