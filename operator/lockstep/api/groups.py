"""Adapters into the core's one group model (``PodGroupInfo``): lockstep's own
``scheduling.lockstep.dev/v1alpha1`` PodGroup and upstream's ``scheduling.k8s.io`` PodGroup (``v1beta1``
on Kubernetes 1.37, ``v1alpha2`` on 1.36: one model parses both, ``lockstep.api.upstream_podgroup``)
here, and upstream's ``v1alpha3`` CompositePodGroup into the core's group of groups (``CompositeInfo``);
the other schedulers' shapes each in their own module: ``lockstep.api.coscheduling``
(scheduler-plugins), ``lockstep.api.volcano``, ``lockstep.api.kueue`` (plain pod groups).

A group's priority is ``spec.priority`` when set, else the value of ``spec.priorityClassName``
(looked up in ``priority_classes``, name -> value), else None: the highest priority of its members.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lockstep.api.composite_podgroup import CONDITION_INITIALLY_SCHEDULED, CompositePodGroup
from lockstep.api.podgroup import (
    CONDITION_SCHEDULED,
    MAX_RESERVATION_TIMEOUT_SECONDS,
    MAX_STALE_GRACE_PERIOD_SECONDS,
    PROTECTION_FINALIZER,
    RESERVATION_POLICIES,
    SATISFACTION_POLICIES,
    Condition,
    PodGroup,
)
from lockstep.api.upstream_podgroup import (
    SATISFACTION_POLICY_ANNOTATION,
    STALE_GRACE_PERIOD_ANNOTATION,
    UpstreamPodGroup,
)
from lockstep.scheduler.framework import ONCE_SATISFIED, CompositeInfo, PodClaimRef, PodGroupInfo

# Upstream's PodGroup has no field for lockstep's capacity reservation: these annotations stand for
# lockstep's spec.reservation.policy and spec.reservation.timeoutSeconds.
RESERVATION_POLICY_ANNOTATION = "scheduling.lockstep.dev/reservation-policy"
RESERVATION_TIMEOUT_ANNOTATION = "scheduling.lockstep.dev/reservation-timeout-seconds"


class UnknownPriorityClassError(ValueError):
    """``spec.priorityClassName`` names a PriorityClass that does not exist."""


class InvalidAnnotationError(ValueError):
    """An annotation lockstep reads has a value it cannot use; the message names it."""


def reservation_annotations(key: str, annotations: Mapping[str, str]) -> tuple[str, float | None]:
    """(policy, timeout) of an upstream PodGroup from its annotations."""
    policy = annotations.get(RESERVATION_POLICY_ANNOTATION, "IfNeeded")
    if policy not in RESERVATION_POLICIES:
        raise InvalidAnnotationError(
            f"PodGroup {key}: metadata.annotations[{RESERVATION_POLICY_ANNOTATION}]: must be one of "
            f"{', '.join(RESERVATION_POLICIES)}, got {policy!r}"
        )
    raw = annotations.get(RESERVATION_TIMEOUT_ANNOTATION)
    if raw is None:
        return policy, None
    try:
        timeout = int(raw)
    except ValueError:
        timeout = 0
    if not 1 <= timeout <= MAX_RESERVATION_TIMEOUT_SECONDS:
        raise InvalidAnnotationError(
            f"PodGroup {key}: metadata.annotations[{RESERVATION_TIMEOUT_ANNOTATION}]: must be a whole "
            f"number of seconds from 1 to {MAX_RESERVATION_TIMEOUT_SECONDS}, got {raw!r}"
        )
    return policy, float(timeout)


def _scheduled_at_generation(conditions: Sequence[Condition], condition_type: str, generation: int) -> bool:
    """Whether the scheduling condition turned True at the current generation (its observedGeneration
    is kept from that transition on). A server that keeps no generation (0) tells nothing."""
    condition = next((c for c in conditions if c.type == condition_type), None)
    return (
        generation > 0
        and condition is not None
        and condition.status == "True"
        and (condition.observed_generation or 0) == generation
    )


def _upstream_policy(podgroup: UpstreamPodGroup) -> tuple[str, float | None]:
    annotations = podgroup.metadata.annotations
    policy = annotations.get(SATISFACTION_POLICY_ANNOTATION, ONCE_SATISFIED)
    if policy not in SATISFACTION_POLICIES:
        raise InvalidAnnotationError(
            f"PodGroup {podgroup.key}: metadata.annotations[{SATISFACTION_POLICY_ANNOTATION}]: "
            f"{policy!r} is not one of {', '.join(SATISFACTION_POLICIES)}"
        )
    raw = annotations.get(STALE_GRACE_PERIOD_ANNOTATION)
    if raw is None:
        return policy, None
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_STALE_GRACE_PERIOD_SECONDS:
        raise InvalidAnnotationError(
            f"PodGroup {podgroup.key}: metadata.annotations[{STALE_GRACE_PERIOD_ANNOTATION}]: {raw!r} "
            f"is not a whole number of seconds from 1 to {MAX_STALE_GRACE_PERIOD_SECONDS}"
        )
    return policy, float(raw)


def dialect_identity(raw: Mapping[str, Any], dialect: str) -> PodGroupInfo:
    """A group of another scheduler's PodGroup object (coscheduling, Volcano) with only what its
    metadata says: the adapter adds what its spec says, or why it is refused."""
    meta = raw.get("metadata") or {}
    return PodGroupInfo(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name")),
        uid=str(meta.get("uid") or ""),
        generation=int(meta.get("generation") or 0),
        terminating=meta.get("deletionTimestamp") is not None,
        dialect=dialect,
    )


def group_priority(
    key: str,
    priority: int | None,
    class_name: str | None,
    priority_classes: Mapping[str, int],
    kind: str = "PodGroup",
) -> int | None:
    if priority is not None or not class_name:
        return priority
    if class_name not in priority_classes:
        raise UnknownPriorityClassError(
            f"{kind} {key}: spec.priorityClassName: no PriorityClass named {class_name!r}"
        )
    return priority_classes[class_name]


def from_lockstep(podgroup: PodGroup, priority_classes: Mapping[str, int]) -> PodGroupInfo:
    spec = podgroup.spec
    return PodGroupInfo(
        namespace=podgroup.metadata.namespace or "default",
        name=podgroup.metadata.name,
        uid=podgroup.metadata.uid,
        generation=podgroup.metadata.generation,
        min_count=spec.min_count,
        is_gang=spec.is_gang,
        schedule_timeout_seconds=float(spec.schedule_timeout_seconds),
        claims=tuple(
            PodClaimRef(claim.name, claim.resource_claim_name, claim.resource_claim_template_name)
            for claim in spec.resource_claims
        ),
        priority=group_priority(podgroup.key, spec.priority, spec.priority_class_name, priority_classes),
        topology_keys=spec.topology_keys,
        preferred_topology_keys=spec.preferred_topology_keys,
        disruption_mode=spec.disruption_mode,
        preemption_policy=spec.preemption_policy,
        reservation_policy=spec.reservation.policy,
        reservation_timeout_seconds=(
            float(spec.reservation.timeout_seconds) if spec.reservation.timeout_seconds is not None else None
        ),
        satisfaction_policy=spec.satisfaction_policy,
        stale_grace_seconds=(
            float(spec.stale_grace_period_seconds) if spec.stale_grace_period_seconds is not None else None
        ),
        once_satisfied=_scheduled_at_generation(
            podgroup.status.conditions, CONDITION_SCHEDULED, podgroup.metadata.generation
        ),
        terminating=podgroup.metadata.deletion_timestamp is not None,
        parent=spec.parent_composite_pod_group_name or "",
        protected=PROTECTION_FINALIZER in podgroup.metadata.finalizers,
    )


def from_upstream(
    podgroup: UpstreamPodGroup, priority_classes: Mapping[str, int], schedule_timeout_seconds: float = 300.0
) -> PodGroupInfo:
    """Upstream has no per-group Permit timeout: kube-scheduler's is a fixed 5 minutes."""
    spec = podgroup.spec
    reservation_policy, reservation_timeout = reservation_annotations(
        podgroup.key, podgroup.metadata.annotations
    )
    satisfaction_policy, stale_grace_seconds = _upstream_policy(podgroup)
    return PodGroupInfo(
        namespace=podgroup.metadata.namespace or "default",
        name=podgroup.metadata.name,
        uid=podgroup.metadata.uid,
        generation=podgroup.metadata.generation,
        min_count=spec.min_count,
        is_gang=spec.is_gang,
        schedule_timeout_seconds=schedule_timeout_seconds,
        reservation_policy=reservation_policy,
        reservation_timeout_seconds=reservation_timeout,
        satisfaction_policy=satisfaction_policy,
        stale_grace_seconds=stale_grace_seconds,
        once_satisfied=_scheduled_at_generation(
            podgroup.status.conditions, podgroup.condition_type, podgroup.metadata.generation
        ),
        claims=tuple(
            PodClaimRef(claim.name, claim.resource_claim_name, claim.resource_claim_template_name)
            for claim in spec.resource_claims
        ),
        priority=group_priority(podgroup.key, spec.priority, spec.priority_class_name, priority_classes),
        topology_keys=spec.topology_keys,
        disruption_mode=spec.disruption_mode,
        preemption_policy=spec.preemption_policy,
        upstream=True,
        terminating=podgroup.metadata.deletion_timestamp is not None,
        parent=spec.parent_composite_pod_group_name or "",
    )


def from_composite(composite: CompositePodGroup, priority_classes: Mapping[str, int]) -> CompositeInfo:
    """A CompositePodGroup as the core's group of groups. ``basic`` is a composite whose children are
    placed independently; ``gang`` one that places ``minGroupCount`` of them together or none."""
    spec = composite.spec
    gang = spec.scheduling_policy.gang
    scheduled = next(
        (c for c in composite.status.conditions if c.type == CONDITION_INITIALLY_SCHEDULED), None
    )
    return CompositeInfo(
        namespace=composite.metadata.namespace or "default",
        name=composite.metadata.name,
        uid=composite.metadata.uid,
        generation=composite.metadata.generation,
        parent=spec.parent_composite_pod_group_name or "",
        is_gang=gang is not None,
        min_group_count=gang.min_group_count if gang is not None else 1,
        topology_keys=spec.topology_keys,
        disruption_mode=spec.disruption_mode,
        priority=group_priority(
            composite.key, spec.priority, spec.priority_class_name, priority_classes, "CompositePodGroup"
        ),
        preemption_policy=spec.preemption_policy,
        once_scheduled=scheduled is not None and scheduled.status == "True",
        terminating=composite.metadata.deletion_timestamp is not None,
    )
