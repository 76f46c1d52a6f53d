"""Ports: everything the binding cycle does to the API, as protocols the operator implements over
HTTP (``lockstep.kube``) and tests implement in memory, with failures injected."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, runtime_checkable

from lockstep.api.volume import PersistentVolume, PersistentVolumeClaim
from lockstep.scheduler.framework import PodGroupInfo, PodInfo

# The binding cycle the running task belongs to, as (placement, member): set by the scheduler for each
# binding cycle, inherited by the tasks it starts. The operator's API client sends the writes of
# binding cycles (PreBind's finalizer and claim writes) an earlier placement's first, and bindings
# before all of them, so a pod whose PreBind is done never waits behind other pods' claim writes.
BINDING_CYCLE: ContextVar[tuple[int, int] | None] = ContextVar("lockstep_binding_cycle", default=None)


class BindResult(Enum):
    BOUND = "Bound"
    ALREADY_BOUND = "AlreadyBound"  # 409, and the pod's spec.nodeName already is the target node
    CONFLICT = "Conflict"  # 409 otherwise: bound elsewhere or changed meanwhile (a lost race)
    NOT_FOUND = "NotFound"  # the pod is gone
    ERROR = "Error"  # anything else (the write may or may not have happened)


class PatchResult(Enum):
    OK = "OK"
    CONFLICT = "Conflict"  # 409: the resourceVersion precondition failed
    NOT_FOUND = "NotFound"
    ERROR = "Error"
    TOO_MANY_REQUESTS = "TooManyRequests"  # 429: an eviction a PodDisruptionBudget refuses for now


@dataclass(frozen=True, slots=True)
class BindOutcome:
    result: BindResult
    message: str = ""


@dataclass(frozen=True, slots=True)
class PatchOutcome:
    result: PatchResult
    message: str = ""


class PodAPI(Protocol):
    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        """POST pods/binding for ``pod`` (namespace, name, uid) to ``node_name``."""
        ...

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        """A fresh read of the pod from the API (not a cache); None when it does not exist."""
        ...

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        """Set condition PodScheduled=False (reason, message) with a strict patch carrying
        ``metadata.resourceVersion``: the API answers 409 if the pod changed since."""
        ...


@dataclass(frozen=True, slots=True)
class VolumeWriteOutcome:
    """A volume write's answer: the object the API returned when it was written (``ok``)."""

    result: PatchResult
    written: PersistentVolume | PersistentVolumeClaim | None = None
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.result is PatchResult.OK


@runtime_checkable
class VolumeAPI(Protocol):
    async def set_claim_ref(
        self, volume: PersistentVolume, claim: PersistentVolumeClaim | None
    ) -> VolumeWriteOutcome:
        """Pre-bind ``volume`` to ``claim`` (its ``spec.claimRef``, as kube-scheduler's VolumeBinding
        writes it) or, with None, take the claimRef away again; a patch carrying the volume's
        ``metadata.resourceVersion`` (409 if it changed)."""
        ...

    async def set_selected_node(
        self, claim: PersistentVolumeClaim, node_name: str | None
    ) -> VolumeWriteOutcome:
        """Set (or, with None, remove) the claim's ``volume.kubernetes.io/selected-node`` annotation;
        a patch carrying the claim's ``metadata.resourceVersion``."""
        ...


class PreemptionAPI(Protocol):
    """The writes of a preemption. Without one, the scheduler never preempts."""

    async def mark_disruption_target(self, pod: PodInfo, message: str) -> PatchOutcome:
        """Condition DisruptionTarget=True, reason PreemptionByScheduler, on a victim (pods/status)."""
        ...

    async def delete_victim(self, pod: PodInfo) -> PatchOutcome:
        """DELETE the victim (its own grace period), guarded by its uid; NOT_FOUND when already gone."""
        ...

    async def nominate(self, pod: PodInfo, node_name: str) -> PatchOutcome:
        """``status.nominatedNodeName`` of a preemptor pod; ``""`` clears it."""
        ...


class EvictionAPI(Protocol):
    async def evict(self, pod: PodInfo, reason: str, message: str) -> PatchOutcome:
        """Mark ``pod`` DisruptionTarget=True (``reason``, ``message``), then POST its pods/eviction
        (PodDisruptionBudgets respected: TOO_MANY_REQUESTS when one refuses it for now)."""
        ...


@runtime_checkable
class PodGroupAPI(Protocol):
    """The PodGroup writes of the binding cycle. Without one, no finalizer is written (a scheduler
    run in memory, as the unit tests do)."""

    async def protect(self, group: PodGroupInfo) -> PatchOutcome:
        """Put lockstep's protection finalizer on the group's PodGroup (the one with ``group.uid``):
        no write when it is there already, else a patch carrying the PodGroup's resourceVersion,
        re-read and retried after a conflict. NOT_FOUND when the PodGroup is gone or was replaced."""
        ...
