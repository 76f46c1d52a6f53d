"""The single patching module: strict (resourceVersion-guarded) and loose patches, bindings.

A strict patch carries ``metadata.resourceVersion``; the API server answers 409 when the object
changed since that version, and the caller re-reads and decides again. A loose patch has no
precondition and is only used where last-writer-wins is right (event counts, leases we hold).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from lockstep.kube.client import PODS, ApiError, KubeClient, PatchType, ResourceKind


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def strict_merge_patch(
    client: KubeClient,
    kind: ResourceKind,
    namespace: str | None,
    name: str,
    resource_version: str,
    patch: dict[str, Any],
    *,
    subresource: str | None = None,
) -> dict[str, Any]:
    """Merge patch that fails with 409 unless the object is still at ``resource_version``."""
    if not resource_version:
        raise ValueError(f"strict patch of {kind.plural} {namespace}/{name} needs a resourceVersion")
    body = dict(patch)
    body["metadata"] = {**patch.get("metadata", {}), "resourceVersion": resource_version}
    return await client.patch(kind, namespace, name, body, PatchType.MERGE, subresource=subresource)


async def loose_merge_patch(
    client: KubeClient,
    kind: ResourceKind,
    namespace: str | None,
    name: str,
    patch: dict[str, Any],
    *,
    subresource: str | None = None,
) -> dict[str, Any]:
    return await client.patch(kind, namespace, name, patch, PatchType.MERGE, subresource=subresource)


class ConditionWrite(StrEnum):
    WRITTEN = "written"
    POD_BOUND = "pod-bound"  # spec.nodeName is set: the False condition must not be written
    POD_GONE = "pod-gone"
    NOT_OURS = "not-ours"


@dataclass(frozen=True, slots=True)
class PodSchedulingFailure:
    reason: str  # Unschedulable, SchedulerError, ...
    message: str


async def patch_pod_unschedulable(
    client: KubeClient,
    namespace: str,
    name: str,
    resource_version: str,
    failure: PodSchedulingFailure,
    *,
    scheduler_name: str,
    attempts: int = 3,
) -> ConditionWrite:
    """Write ``PodScheduled=False`` to a pending pod (behaviour 3).

    The patch is strict. On 409 the pod is re-read: if it has ``spec.nodeName`` now, nothing is
    written (the binding won the race and the node name is the truth); otherwise the write is tried
    again at the new resourceVersion.
    """
    version = resource_version
    for _ in range(attempts):
        if version:
            condition = {
                "type": "PodScheduled",
                "status": "False",
                "reason": failure.reason,
                "message": failure.message[:1024],
                "lastTransitionTime": now_rfc3339(),
            }
            body = {"metadata": {"resourceVersion": version}, "status": {"conditions": [condition]}}
            try:
                await client.patch(PODS, namespace, name, body, PatchType.STRATEGIC, subresource="status")
                return ConditionWrite.WRITTEN
            except ApiError as exc:
                if exc.not_found:
                    return ConditionWrite.POD_GONE
                if not exc.conflict:
                    raise
        try:
            pod = await client.get(PODS, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return ConditionWrite.POD_GONE
            raise
        spec = pod.get("spec", {})
        if spec.get("nodeName"):
            return ConditionWrite.POD_BOUND
        if spec.get("schedulerName") != scheduler_name:
            return ConditionWrite.NOT_OURS
        if pod.get("metadata", {}).get("deletionTimestamp"):
            return ConditionWrite.POD_GONE
        version = str(pod.get("metadata", {}).get("resourceVersion", ""))
    raise ApiError(
        409,
        "Conflict",
        f"still conflicting after {attempts} attempts",
        f"PATCH pods/status {namespace}/{name}",
    )


class BindOutcome(StrEnum):
    BOUND = "bound"
    ALREADY_BOUND_HERE = "already-bound-here"  # an earlier POST succeeded but its answer was lost


async def bind_pod(client: KubeClient, namespace: str, name: str, uid: str, node_name: str) -> BindOutcome:
    """POST pods/binding. A 409 whose pod already sits on ``node_name`` counts as success; any other
    failure raises :class:`ApiError`."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }
    try:
        await client.create(PODS, namespace, binding, name=name, subresource="binding")
        return BindOutcome.BOUND
    except ApiError as exc:
        if not exc.conflict:
            raise
        try:
            pod = await client.get(PODS, namespace, name)
        except ApiError:
            raise exc from None
        if pod.get("spec", {}).get("nodeName") == node_name and pod.get("metadata", {}).get("uid") == uid:
            return BindOutcome.ALREADY_BOUND_HERE
        raise
