"""Simulated controllers, one module each: what kube-controller-manager, the kubelet and a DRA driver
do where lockstep relies on them."""

from __future__ import annotations

from lockstep.sim.watching import JsonObject


def pod_warning_event(
    pod: JsonObject, reason: str, message: str, source: JsonObject, when: str
) -> JsonObject:
    """A core/v1 Warning Event about ``pod``, as a controller or the kubelet records one."""
    meta = pod["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{meta['name']}."},
        "involvedObject": {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta.get("namespace"),
            "name": meta["name"],
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": source,
        "firstTimestamp": when,
        "lastTimestamp": when,
        "count": 1,
    }
