"""In-memory implementations of the DRA ports, behaving like the API server where lockstep relies on
it.

Every write bumps ``metadata.resourceVersion``; a status or finalizer patch with a stale
resourceVersion answers CONFLICT; more than 256 ``reservedFor`` entries answer INVALID (as the API
server's 422); a create of an existing name answers CONFLICT with the existing object. Failures are
injected per call with ``fail_next`` or as a whole schedule in ``failures``. Writes are echoed to
the store's informer side only when ``echo`` is set, so tests can also check that the scheduler
works from its own assumed objects.
"""

from __future__ import annotations

import asyncio
from typing import Any

from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import RESERVED_FOR_MAX_SIZE, ResourceClaim, parse_resource
from lockstep.dra.ports import ClaimWriteOutcome, WriteResult
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import PodInfo


class MemoryClaimAPI:
    def __init__(self, store: ResourceStore, echo: bool = False, latency: float = 0.0) -> None:
        self.store = store
        self.objects: dict[str, dict[str, Any]] = {}
        self.status_writes: list[tuple[str, dict[str, Any]]] = []
        self.finalizer_writes: list[tuple[str, list[str]]] = []
        self.creates: list[dict[str, Any]] = []
        self.group_records: list[tuple[str, list[dict[str, str]]]] = []
        self.deletes: list[str] = []
        self.pod_statuses: dict[str, dict[str, Any]] = {}  # pod key -> extendedResourceClaimStatus
        # Outcomes for the next writes, in order: a WriteResult is injected, None lets the write through.
        self.failures: list[WriteResult | None] = []
        self.echo = echo
        self.latency = latency
        self._version = 100

    def add(self, claim: ResourceClaim) -> ResourceClaim:
        """Put a claim in the 'API server' and deliver it to the store as the informer would."""
        obj = claim.dump()
        self._version += 1
        obj["metadata"]["resourceVersion"] = str(self._version)
        self.objects[claim.key] = obj
        stored = parse_resource(ResourceClaim, obj)
        self.store.upsert_claim(stored)
        return stored

    def fail_next(self, result: WriteResult) -> None:
        self.failures.append(result)

    def _injected(self) -> ClaimWriteOutcome | None:
        injected = self.failures.pop(0) if self.failures else None
        return None if injected is None else ClaimWriteOutcome(injected, message="injected")

    async def write_claim_status(self, claim: ResourceClaim, status: dict[str, Any]) -> ClaimWriteOutcome:
        if self.latency:
            await asyncio.sleep(self.latency)
        self.status_writes.append((claim.key, status))
        if injected := self._injected():
            return injected
        current = self.objects.get(claim.key)
        if current is None:
            return ClaimWriteOutcome(WriteResult.NOT_FOUND)
        if current["metadata"]["resourceVersion"] != claim.metadata.resource_version:
            return ClaimWriteOutcome(WriteResult.CONFLICT, message="the object has been modified")
        if len(status.get("reservedFor") or []) > RESERVED_FOR_MAX_SIZE:
            return ClaimWriteOutcome(WriteResult.INVALID, message="status.reservedFor: Too many")
        self._version += 1
        # A merge patch: null deletes the field.
        merged = {**current.get("status", {}), **status}
        updated = {**current, "status": {k: v for k, v in merged.items() if v is not None}}
        updated["metadata"] = {**current["metadata"], "resourceVersion": str(self._version)}
        self.objects[claim.key] = updated
        written = parse_resource(ResourceClaim, updated)
        if self.echo:
            self.store.upsert_claim(written)
        return ClaimWriteOutcome(WriteResult.WRITTEN, written)

    async def write_claim_finalizers(self, claim: ResourceClaim, finalizers: list[str]) -> ClaimWriteOutcome:
        if self.latency:
            await asyncio.sleep(self.latency)
        self.finalizer_writes.append((claim.key, finalizers))
        if injected := self._injected():
            return injected
        current = self.objects.get(claim.key)
        if current is None:
            return ClaimWriteOutcome(WriteResult.NOT_FOUND)
        if current["metadata"]["resourceVersion"] != claim.metadata.resource_version:
            return ClaimWriteOutcome(WriteResult.CONFLICT, message="the object has been modified")
        self._version += 1
        metadata = {**current["metadata"], "resourceVersion": str(self._version), "finalizers": finalizers}
        if not finalizers:
            del metadata["finalizers"]
        updated = {**current, "metadata": metadata}
        self.objects[claim.key] = updated
        written = parse_resource(ResourceClaim, updated)
        if self.echo:
            self.store.upsert_claim(written)
        return ClaimWriteOutcome(WriteResult.WRITTEN, written)

    async def create_claim(self, claim: dict[str, Any]) -> ClaimWriteOutcome:
        self.creates.append(claim)
        if injected := self._injected():
            return injected
        if not claim["metadata"].get("name"):  # generateName: the API server's five random characters
            claim = {
                **claim,
                "metadata": {
                    **claim["metadata"],
                    "name": f"{claim['metadata']['generateName']}x{len(self.creates):04d}",
                },
            }
        key = f"{claim['metadata']['namespace']}/{claim['metadata']['name']}"
        if key in self.objects:
            return ClaimWriteOutcome(WriteResult.CONFLICT, parse_resource(ResourceClaim, self.objects[key]))
        self._version += 1
        obj = {
            **claim,
            "metadata": {**claim["metadata"], "uid": f"uid-{key}", "resourceVersion": str(self._version)},
        }
        self.objects[key] = obj
        created = parse_resource(ResourceClaim, obj)
        if self.echo:
            self.store.upsert_claim(created)
        return ClaimWriteOutcome(WriteResult.WRITTEN, created)

    async def delete_claim(self, claim: ResourceClaim) -> ClaimWriteOutcome:
        self.deletes.append(claim.key)
        if injected := self._injected():
            return injected
        current = self.objects.get(claim.key)
        if current is None or current["metadata"]["uid"] != claim.metadata.uid:
            return ClaimWriteOutcome(WriteResult.NOT_FOUND)
        if current["metadata"].get("finalizers"):
            return ClaimWriteOutcome(WriteResult.ERROR, message="test API: finalizers would keep it")
        del self.objects[claim.key]
        if self.echo:
            self.store.delete_claim(claim.metadata.namespace, claim.metadata.name)
        return ClaimWriteOutcome(WriteResult.WRITTEN)

    async def record_extended_claim(self, pod: PodInfo, status: dict[str, Any]) -> ClaimWriteOutcome:
        if injected := self._injected():
            return injected
        self.pod_statuses[pod.key] = status
        return ClaimWriteOutcome(WriteResult.WRITTEN)

    async def record_group_claims(
        self, podgroup: PodGroup, statuses: list[dict[str, str]]
    ) -> ClaimWriteOutcome:
        self.group_records.append((podgroup.key, statuses))
        if injected := self._injected():
            return injected
        return ClaimWriteOutcome(WriteResult.WRITTEN)
