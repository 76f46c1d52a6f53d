"""Simulated controllers, one module each: what kube-controller-manager, the kubelet and a DRA driver
do where lockstep relies on them."""

from __future__ import annotations

from lockstep.sim.watching import JsonObject


def object_event(
    involved: JsonObject, event_type: str, reason: str, message: str, source: JsonObject, when: str
) -> JsonObject:
    """A core/v1 Event about ``involved`` (a Pod, a Node or a Job), as a controller or the kubelet
    records one.

    Post it to the involved object's namespace (``default`` for a Node, as upstream's recorder does)."""
    meta = involved["metadata"]
    kind = str(involved.get("kind") or "Pod")
    reference: JsonObject = {
        "kind": kind,
        "apiVersion": str(involved.get("apiVersion") or "v1"),
        "name": meta["name"],
        "uid": meta.get("uid"),
    }
    if kind != "Node":
        reference["namespace"] = meta.get("namespace")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": reference,
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": source,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }


def events_path(involved: JsonObject) -> str:
    """Where an Event about ``involved`` is created."""
    namespace = involved["metadata"].get("namespace") or "default"
    return f"/api/v1/namespaces/{namespace}/events"


def pod_warning_event(
    pod: JsonObject, reason: str, message: str, source: JsonObject, when: str
) -> JsonObject:
    """A core/v1 Warning Event about ``pod``."""
    return object_event({"kind": "Pod", **pod}, "Warning", reason, message, source, when)
