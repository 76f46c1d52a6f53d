"""Adapters into the core's one group model (``PodGroupInfo``): lockstep's own
``scheduling.lockstep.dev/v1alpha1`` PodGroup and upstream's ``scheduling.k8s.io`` PodGroup (``v1beta1``
on Kubernetes 1.37, ``v1alpha2`` on 1.36: one model parses both, ``lockstep.api.upstream_podgroup``)
here; the other schedulers' shapes each in their own module: ``lockstep.api.coscheduling``
(scheduler-plugins), ``lockstep.api.volcano``, ``lockstep.api.kueue`` (plain pod groups).

A group's priority is ``spec.priority`` when set, else the value of ``spec.priorityClassName``
(looked up in ``priority_classes``, name -> value), else None: the highest priority of its members.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.api.podgroup import PROTECTION_FINALIZER, PodGroup
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.scheduler.framework import PodClaimRef, PodGroupInfo


class UnknownPriorityClassError(ValueError):
    """``spec.priorityClassName`` names a PriorityClass that does not exist."""


def group_priority(
    key: str, priority: int | None, class_name: str | None, priority_classes: Mapping[str, int]
) -> int | None:
    if priority is not None or not class_name:
        return priority
    if class_name not in priority_classes:
        raise UnknownPriorityClassError(
            f"PodGroup {key}: spec.priorityClassName: no PriorityClass named {class_name!r}"
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
        terminating=podgroup.metadata.deletion_timestamp is not None,
        protected=PROTECTION_FINALIZER in podgroup.metadata.finalizers,
    )


def from_upstream(
    podgroup: UpstreamPodGroup, priority_classes: Mapping[str, int], schedule_timeout_seconds: float = 300.0
) -> PodGroupInfo:
    """Upstream has no per-group Permit timeout: kube-scheduler's is a fixed 5 minutes."""
    spec = podgroup.spec
    return PodGroupInfo(
        namespace=podgroup.metadata.namespace or "default",
        name=podgroup.metadata.name,
        uid=podgroup.metadata.uid,
        generation=podgroup.metadata.generation,
        min_count=spec.min_count,
        is_gang=spec.is_gang,
        schedule_timeout_seconds=schedule_timeout_seconds,
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
    )
