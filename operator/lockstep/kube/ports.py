"""The scheduler's and the DRA side's ports (``lockstep.scheduler.ports``, ``lockstep.dra.ports``)
implemented over the shared HTTP session."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from pydantic import ValidationError

from lockstep.api.pod import DISRUPTION_TARGET, PREEMPTION_BY_SCHEDULER, InvalidObjectError, parse_pod
from lockstep.api.podgroup import PROTECTION_FINALIZER, PodGroup
from lockstep.api.resource import ResourceClaim, ResourceModelError, parse_resource
from lockstep.api.volume import (
    SELECTED_NODE_ANNOTATION,
    PersistentVolume,
    PersistentVolumeClaim,
    parse_persistent_volume,
    parse_persistent_volume_claim,
)
from lockstep.dra.ports import ClaimWriteOutcome, WriteResult
from lockstep.kube.client import (
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIMS,
    ApiError,
    KubeClient,
    PatchType,
)
from lockstep.kube.patching import now_rfc3339, patch_pod_scheduled_false, post_binding, strict_merge_patch
from lockstep.logging import get_logger
from lockstep.scheduler.framework import PodGroupInfo, PodInfo
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult, VolumeWriteOutcome

log = get_logger("lockstep.kube.ports")

TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)
PODGROUP_WRITE_ATTEMPTS = 3


class KubePodAPI:
    """``PodAPI``: bindings, fresh pod reads and strict failure-condition patches."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        try:
            await post_binding(self.client, pod.namespace, pod.name, pod.uid, node_name)
            return BindOutcome(BindResult.BOUND)
        except ApiError as exc:
            if exc.not_found:
                return BindOutcome(BindResult.NOT_FOUND, str(exc))
            if not exc.conflict:
                return BindOutcome(BindResult.ERROR, str(exc))
            conflict = exc
        except TRANSPORT_ERRORS as exc:
            return BindOutcome(BindResult.ERROR, f"POST pods/binding {pod.key}: {exc!r}")
        # 409: either a lost race or an earlier POST of ours that succeeded but whose answer was lost.
        current = await self.get_pod(pod.namespace, pod.name)
        if current is None:
            return BindOutcome(BindResult.NOT_FOUND, str(conflict))
        if current.uid == pod.uid and current.node_name == node_name:
            return BindOutcome(BindResult.ALREADY_BOUND, str(conflict))
        return BindOutcome(BindResult.CONFLICT, str(conflict))

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        try:
            raw = await self.client.get(PODS, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return parse_pod(raw)

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        return await _pod_write(
            f"PATCH pods/status {pod.key}",
            patch_pod_scheduled_false(
                self.client, pod.namespace, pod.name, resource_version, reason, message
            ),
        )


async def _pod_write(what: str, write: Awaitable[object]) -> PatchOutcome:
    try:
        await write
        return PatchOutcome(PatchResult.OK)
    except ApiError as exc:
        if exc.conflict:
            return PatchOutcome(PatchResult.CONFLICT, str(exc))
        if exc.not_found:
            return PatchOutcome(PatchResult.NOT_FOUND, str(exc))
        return PatchOutcome(PatchResult.ERROR, str(exc))
    except TRANSPORT_ERRORS as exc:
        return PatchOutcome(PatchResult.ERROR, f"{what}: {exc!r}")


class KubeEvictionAPI:
    """``EvictionAPI``: the DisruptionTarget condition, then the Eviction API (PDBs respected)."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def evict(self, pod: PodInfo, reason: str, message: str) -> PatchOutcome:
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        # Guarded by the resourceVersion the decision saw: a member that finished since (its
        # failure is what made the gang stale, or it completed) is never marked (409, Conflict).
        metadata = {"uid": pod.uid}
        if pod.resource_version:
            metadata["resourceVersion"] = pod.resource_version
        body = {"metadata": metadata, "status": {"conditions": [condition]}}
        marked = await _pod_write(
            f"PATCH pods/status {pod.key}",
            self.client.patch(PODS, pod.namespace, pod.name, body, PatchType.STRATEGIC, subresource="status"),
        )
        if marked.result is not PatchResult.OK:
            return marked
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod.name, "namespace": pod.namespace},
            "deleteOptions": {"preconditions": {"uid": pod.uid}},
        }
        try:
            await self.client.create(PODS, pod.namespace, eviction, name=pod.name, subresource="eviction")
        except ApiError as exc:
            if exc.status == 429:
                return PatchOutcome(PatchResult.TOO_MANY_REQUESTS, str(exc))
            if exc.not_found:
                return PatchOutcome(PatchResult.NOT_FOUND, str(exc))
            return PatchOutcome(PatchResult.ERROR, str(exc))
        except TRANSPORT_ERRORS as exc:
            return PatchOutcome(PatchResult.ERROR, f"POST pods/eviction {pod.key}: {exc!r}")
        return PatchOutcome(PatchResult.OK)


class KubePreemptionAPI:
    """``PreemptionAPI``: the victims' DisruptionTarget condition and deletion, the nominations."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def mark_disruption_target(self, pod: PodInfo, message: str) -> PatchOutcome:
        condition = {
            "type": DISRUPTION_TARGET,
            "status": "True",
            "reason": PREEMPTION_BY_SCHEDULER,
            "message": message,
            "lastTransitionTime": now_rfc3339(),
        }
        body = {"metadata": {"uid": pod.uid}, "status": {"conditions": [condition]}}
        return await _pod_write(
            f"PATCH pods/status {pod.key}",
            self.client.patch(PODS, pod.namespace, pod.name, body, PatchType.STRATEGIC, subresource="status"),
        )

    async def delete_victim(self, pod: PodInfo) -> PatchOutcome:
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": pod.uid}}
        return await _pod_write(
            f"DELETE pods {pod.key}", self.client.delete(PODS, pod.namespace, pod.name, body=options)
        )

    async def nominate(self, pod: PodInfo, node_name: str) -> PatchOutcome:
        body = {"metadata": {"uid": pod.uid}, "status": {"nominatedNodeName": node_name or None}}
        return await _pod_write(
            f"PATCH pods/status {pod.key}",
            self.client.patch(PODS, pod.namespace, pod.name, body, PatchType.MERGE, subresource="status"),
        )


def _write_failure(exc: ApiError) -> WriteResult:
    if exc.conflict:
        return WriteResult.CONFLICT
    if exc.not_found:
        return WriteResult.NOT_FOUND
    if exc.status == 422:
        return WriteResult.INVALID
    return WriteResult.ERROR


def _claim_outcome(raw: dict[str, Any]) -> ClaimWriteOutcome:
    try:
        return ClaimWriteOutcome(WriteResult.WRITTEN, parse_resource(ResourceClaim, raw))
    except ResourceModelError as exc:  # written, but the answer is unreadable: say so, do not guess
        return ClaimWriteOutcome(WriteResult.ERROR, None, str(exc))


class KubeClaimAPI:
    """``ClaimStatusAPI``, ``GroupClaimAPI`` and ``ExtendedClaimAPI``: strict claim writes (status,
    finalizers), claim creation and deletion, the pod's extended resource claim status."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def write_claim_status(self, claim: ResourceClaim, status: dict[str, Any]) -> ClaimWriteOutcome:
        meta = claim.metadata
        try:
            raw = await strict_merge_patch(
                self.client,
                RESOURCE_CLAIMS,
                meta.namespace,
                meta.name,
                meta.resource_version,
                {"status": status},
                subresource="status",
            )
        except ApiError as exc:
            return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(
                WriteResult.ERROR, None, f"PATCH resourceclaims/status {claim.key}: {exc!r}"
            )
        return _claim_outcome(raw)

    async def write_claim_finalizers(self, claim: ResourceClaim, finalizers: list[str]) -> ClaimWriteOutcome:
        meta = claim.metadata
        try:
            raw = await strict_merge_patch(
                self.client,
                RESOURCE_CLAIMS,
                meta.namespace,
                meta.name,
                meta.resource_version,
                {"metadata": {"finalizers": finalizers or None}},
            )
        except ApiError as exc:
            return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(WriteResult.ERROR, None, f"PATCH resourceclaims {claim.key}: {exc!r}")
        return _claim_outcome(raw)

    async def create_claim(self, claim: dict[str, Any]) -> ClaimWriteOutcome:
        meta = claim.get("metadata") or {}
        namespace = str(meta.get("namespace") or "")
        try:
            raw = await self.client.create(RESOURCE_CLAIMS, namespace, claim)
        except ApiError as exc:
            if not exc.conflict or not meta.get("name"):
                return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
            try:
                existing = parse_resource(
                    ResourceClaim, await self.client.get(RESOURCE_CLAIMS, namespace, str(meta["name"]))
                )
            except (ApiError, ResourceModelError, *TRANSPORT_ERRORS):
                existing = None
            return ClaimWriteOutcome(WriteResult.CONFLICT, existing, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(WriteResult.ERROR, None, f"POST resourceclaims in {namespace}: {exc!r}")
        return _claim_outcome(raw)

    async def delete_claim(self, claim: ResourceClaim) -> ClaimWriteOutcome:
        meta = claim.metadata
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": meta.uid}}
        try:
            await self.client.delete(RESOURCE_CLAIMS, meta.namespace, meta.name, body=options)
        except ApiError as exc:
            return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(WriteResult.ERROR, None, f"DELETE resourceclaims {claim.key}: {exc!r}")
        return ClaimWriteOutcome(WriteResult.WRITTEN)

    async def record_extended_claim(self, pod: PodInfo, status: dict[str, Any]) -> ClaimWriteOutcome:
        body = {"metadata": {"uid": pod.uid}, "status": {"extendedResourceClaimStatus": status}}
        try:
            await self.client.patch(
                PODS, pod.namespace, pod.name, body, PatchType.STRATEGIC, subresource="status"
            )
        except ApiError as exc:
            return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(WriteResult.ERROR, None, f"PATCH pods/status {pod.key}: {exc!r}")
        return ClaimWriteOutcome(WriteResult.WRITTEN)

    async def record_group_claims(
        self, podgroup: PodGroup, statuses: list[dict[str, str]]
    ) -> ClaimWriteOutcome:
        meta = podgroup.metadata
        try:
            await strict_merge_patch(
                self.client,
                POD_GROUPS,
                meta.namespace,
                meta.name,
                meta.resource_version,
                {"status": {"resourceClaimStatuses": statuses}},
                subresource="status",
            )
        except ApiError as exc:
            return ClaimWriteOutcome(_write_failure(exc), None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return ClaimWriteOutcome(
                WriteResult.ERROR, None, f"PATCH podgroups/status {podgroup.key}: {exc!r}"
            )
        return ClaimWriteOutcome(WriteResult.WRITTEN)


def _patch_failure(exc: ApiError) -> PatchResult:
    if exc.conflict:
        return PatchResult.CONFLICT
    if exc.not_found:
        return PatchResult.NOT_FOUND
    return PatchResult.ERROR


class KubeVolumeAPI:
    """``VolumeAPI``: VolumeBinding's pre-binding writes, each guarded by the object's resourceVersion."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def set_claim_ref(
        self, volume: PersistentVolume, claim: PersistentVolumeClaim | None
    ) -> VolumeWriteOutcome:
        claim_ref = None
        if claim is not None:
            claim_ref = {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim.metadata.namespace,
                "name": claim.metadata.name,
                "uid": claim.metadata.uid,
            }
        meta = volume.metadata
        try:
            raw = await strict_merge_patch(
                self.client,
                PERSISTENT_VOLUMES,
                None,
                meta.name,
                meta.resource_version,
                {"spec": {"claimRef": claim_ref}},
            )
            return VolumeWriteOutcome(PatchResult.OK, parse_persistent_volume(raw))
        except ApiError as exc:
            return VolumeWriteOutcome(_patch_failure(exc), None, str(exc))
        except InvalidObjectError as exc:
            return VolumeWriteOutcome(PatchResult.OK, None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return VolumeWriteOutcome(
                PatchResult.ERROR, None, f"PATCH persistentvolumes {meta.name}: {exc!r}"
            )

    async def set_selected_node(
        self, claim: PersistentVolumeClaim, node_name: str | None
    ) -> VolumeWriteOutcome:
        meta = claim.metadata
        patch = {"metadata": {"annotations": {SELECTED_NODE_ANNOTATION: node_name}}}
        try:
            raw = await strict_merge_patch(
                self.client, PERSISTENT_VOLUME_CLAIMS, meta.namespace, meta.name, meta.resource_version, patch
            )
            return VolumeWriteOutcome(PatchResult.OK, parse_persistent_volume_claim(raw))
        except ApiError as exc:
            return VolumeWriteOutcome(_patch_failure(exc), None, str(exc))
        except InvalidObjectError as exc:
            return VolumeWriteOutcome(PatchResult.OK, None, str(exc))
        except TRANSPORT_ERRORS as exc:
            return VolumeWriteOutcome(
                PatchResult.ERROR, None, f"PATCH persistentvolumeclaims {claim.key}: {exc!r}"
            )


class KubePodGroupAPI:
    """``PodGroupAPI``, and the removal of the finalizer it adds: strict patches of a lockstep
    PodGroup's ``metadata.finalizers`` (the whole list, guarded by the resourceVersion, so no other
    controller's finalizer is lost), re-read and retried after a conflict.

    ``latest`` is the PodGroup as the watch last showed it; ``written`` is told of every PodGroup a
    write answered with, so that the next strict write (a status write, too) starts from it."""

    def __init__(
        self,
        client: KubeClient,
        latest: Callable[[str, str], PodGroup | None],
        written: Callable[[dict[str, Any]], None],
    ) -> None:
        self.client = client
        self.latest = latest
        self.written = written

    async def protect(self, group: PodGroupInfo) -> PatchOutcome:
        return await self._write_finalizers(group.namespace, group.name, group.uid, add=True)

    async def unprotect(self, podgroup: PodGroup) -> PatchOutcome:
        """Remove lockstep's finalizer (the PodGroup then goes, unless other finalizers hold it)."""
        meta = podgroup.metadata
        return await self._write_finalizers(meta.namespace, meta.name, meta.uid, add=False)

    async def _write_finalizers(self, namespace: str, name: str, uid: str, *, add: bool) -> PatchOutcome:
        what = f"PATCH podgroups {namespace}/{name} metadata.finalizers"
        podgroup = self.latest(namespace, name)
        outcome = PatchOutcome(PatchResult.CONFLICT, f"{what}: no attempt made")
        for _ in range(PODGROUP_WRITE_ATTEMPTS):
            if podgroup is None or podgroup.metadata.uid != uid:
                return PatchOutcome(PatchResult.NOT_FOUND, f"PodGroup {namespace}/{name} (uid {uid}) is gone")
            finalizers = podgroup.metadata.finalizers
            if (PROTECTION_FINALIZER in finalizers) is add:
                return PatchOutcome(PatchResult.OK)
            if add and podgroup.metadata.deletion_timestamp is not None:
                # The API refuses new finalizers on an object being deleted.
                return PatchOutcome(PatchResult.ERROR, f"PodGroup {namespace}/{name} is being deleted")
            wanted = (
                [*finalizers, PROTECTION_FINALIZER]
                if add
                else [f for f in finalizers if f != PROTECTION_FINALIZER]
            )
            try:
                raw = await strict_merge_patch(
                    self.client,
                    POD_GROUPS,
                    namespace,
                    name,
                    podgroup.metadata.resource_version,
                    {"metadata": {"finalizers": wanted or None}},
                )
            except ApiError as exc:
                if exc.not_found:
                    return PatchOutcome(PatchResult.NOT_FOUND, str(exc))
                if not exc.conflict:
                    return PatchOutcome(PatchResult.ERROR, str(exc))
                outcome = PatchOutcome(PatchResult.CONFLICT, str(exc))
            except TRANSPORT_ERRORS as exc:
                return PatchOutcome(PatchResult.ERROR, f"{what}: {exc!r}")
            else:
                if add or (raw.get("metadata") or {}).get("finalizers"):
                    # Removing the last finalizer deletes the PodGroup: the watch says so, not this answer.
                    self.written(raw)
                return PatchOutcome(PatchResult.OK)
            try:
                podgroup = await self._reread(namespace, name)
            except (ApiError, ValidationError, *TRANSPORT_ERRORS) as exc:
                return PatchOutcome(
                    PatchResult.ERROR, f"GET podgroups {namespace}/{name} after a conflict: {exc}"
                )
        return outcome

    async def _reread(self, namespace: str, name: str) -> PodGroup | None:
        try:
            raw = await self.client.get(POD_GROUPS, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return PodGroup.model_validate(raw)
