"""Ports: every API write the DRA side makes, as protocols.

The operator implements them over HTTP (``lockstep.kube``); tests implement them in memory and inject
failures. Nothing in ``dra/`` or the DynamicResources plugin writes to the API any other way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import ResourceClaim
from lockstep.scheduler.framework import PodInfo


class WriteResult(Enum):
    WRITTEN = "Written"
    CONFLICT = "Conflict"  # 409: the resourceVersion precondition failed (or the name is taken on create)
    NOT_FOUND = "NotFound"
    INVALID = "Invalid"  # 422: the API server rejected the content
    ERROR = "Error"  # anything else; the write may or may not have happened


@dataclass(frozen=True, slots=True)
class ClaimWriteOutcome:
    result: WriteResult
    claim: ResourceClaim | None = None  # the object the API returned (WRITTEN), or the existing one
    message: str = ""


@runtime_checkable
class ClaimStatusAPI(Protocol):
    async def write_claim_status(self, claim: ResourceClaim, status: dict[str, Any]) -> ClaimWriteOutcome:
        """ONE strict patch of ``resourceclaims/<name>/status`` in ``claim``'s namespace:
        ``{"metadata": {"resourceVersion": claim.metadata.resource_version}, "status": status}`` where
        ``status`` holds ``reservedFor`` (the complete list) and, when the claim gets allocated by this
        write, ``allocation``; a null ``allocation`` (and ``devices``) clears them. The API answers 409
        if the claim changed since it was read."""
        ...

    async def write_claim_finalizers(self, claim: ResourceClaim, finalizers: list[str]) -> ClaimWriteOutcome:
        """ONE strict patch of the claim itself (not its status) setting ``metadata.finalizers`` to the
        complete list ``finalizers``, guarded by ``claim.metadata.resource_version`` like the status
        write (kube-scheduler adds its delete-protection finalizer with an Update before the status)."""
        ...


@runtime_checkable
class GroupClaimAPI(Protocol):
    async def create_claim(self, claim: dict[str, Any]) -> ClaimWriteOutcome:
        """POST a ResourceClaim (API shape, namespace in its metadata). CONFLICT when the name exists;
        then ``claim`` in the outcome is the existing object if the implementation could read it."""
        ...

    async def record_group_claims(
        self, podgroup: PodGroup, statuses: list[dict[str, str]]
    ) -> ClaimWriteOutcome:
        """Set the PodGroup's ``status.resourceClaimStatuses`` to ``statuses``
        (``[{"name": <entry>, "resourceClaimName": <claim>}]``)."""
        ...


@runtime_checkable
class ExtendedClaimAPI(Protocol):
    """The writes of a DRA extended resource claim, which the scheduler creates for a pod at PreBind
    (then writes its status through ``ClaimStatusAPI``)."""

    async def create_claim(self, claim: dict[str, Any]) -> ClaimWriteOutcome:
        """POST a ResourceClaim (API shape; ``metadata.generateName`` for a generated name)."""
        ...

    async def delete_claim(self, claim: ResourceClaim) -> ClaimWriteOutcome:
        """DELETE the claim, on condition that its UID is still ``claim.metadata.uid``."""
        ...

    async def record_extended_claim(self, pod: PodInfo, status: dict[str, Any]) -> ClaimWriteOutcome:
        """Patch the pod's ``status.extendedResourceClaimStatus`` to ``status`` (``requestMappings``
        and ``resourceClaimName``), on condition that its UID is still ``pod.uid``."""
        ...
