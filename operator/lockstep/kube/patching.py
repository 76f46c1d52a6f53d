"""The single patching module: strict (resourceVersion-guarded) and loose patches, bindings.

A strict patch carries ``metadata.resourceVersion``; the API server answers 409 when the object
changed since that version, and the caller re-reads and decides again. A loose patch has no
precondition and is only used where last-writer-wins is right (event counts, leases we hold).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from lockstep.api.podgroup import Condition
from lockstep.kube.client import PODS, ApiError, KubeClient, Lane, PatchType, ResourceKind


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


async def write_conditions(
    client: KubeClient,
    kind: ResourceKind,
    namespace: str,
    name: str,
    resource_version: str,
    current: Iterable[Condition],
    written_now: Sequence[dict[str, Any]],
) -> dict[str, Any] | None:
    """Strict-merge-patch ``status.conditions``: ``written_now`` replaces the conditions of its types,
    the others in ``current`` stay. Returns the object as the server has it: the written one, or after
    a 409 the one re-read for the caller's next attempt; None if it is gone or cannot be re-read.
    Other errors of the write propagate."""
    replaced = {c["type"] for c in written_now}
    others = [
        c.model_dump(by_alias=True, mode="json", exclude_none=True) for c in current if c.type not in replaced
    ]
    try:
        return await strict_merge_patch(
            client,
            kind,
            namespace,
            name,
            resource_version,
            {"status": {"conditions": [*others, *written_now]}},
            subresource="status",
        )
    except ApiError as exc:
        if exc.not_found:
            return None
        if not exc.conflict:
            raise
    try:
        return await client.get(kind, namespace, name)
    except ApiError:
        return None


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


async def patch_pod_scheduled_false(
    client: KubeClient, namespace: str, name: str, resource_version: str, reason: str, message: str
) -> dict[str, Any]:
    """Strict strategic-merge patch of pods/status setting ``PodScheduled=False``.

    The resourceVersion precondition makes the API answer 409 when the pod changed since the
    scheduler looked, e.g. because a binding landed meanwhile; the caller then re-reads the pod and
    never writes False to a pod whose ``spec.nodeName`` is set (docs/architecture.md behaviour 3).
    """
    if not resource_version:
        raise ValueError(f"PodScheduled=False patch of pod {namespace}/{name} needs a resourceVersion")
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": now_rfc3339(),
    }
    body = {"metadata": {"resourceVersion": resource_version}, "status": {"conditions": [condition]}}
    return await client.patch(PODS, namespace, name, body, PatchType.STRATEGIC, subresource="status")


async def post_binding(client: KubeClient, namespace: str, name: str, uid: str, node_name: str) -> None:
    """POST pods/binding, with the pod's UID as precondition; failures raise :class:`ApiError`."""
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }
    await client.create(PODS, namespace, binding, name=name, subresource="binding", lane=Lane.BINDING)
