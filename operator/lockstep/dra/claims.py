"""Which claims a pod needs, how they are reserved, and the claims lockstep creates for PodGroups.

Pure decisions; the API calls go through ``lockstep.dra.ports``.

* A pod needs its own ``spec.resourceClaims`` (by name, or the claim generated from a template and
  named in ``status.resourceClaimStatuses``) plus every entry of its PodGroup's
  ``spec.resourceClaims``.
* A claim the pod lists in its own ``spec.resourceClaims`` is reserved for the pod in
  ``status.reservedFor``: the kubelet prepares only the claims a pod lists, and only when they are
  reserved for that pod. The API allows at most 256 entries, so at most 256 pods can share such a claim.
* A claim that reaches the pod only through its PodGroup's ``spec.resourceClaims`` is reserved once, for
  the PodGroup, as kube-scheduler does for upstream PodGroup claims (KEP-5729): one entry however many
  members use it, kept while the PodGroup exists and removed by lockstep when the PodGroup is deleted.
  The kubelet does not prepare these claims for the pods (the pods do not list them), so nothing on the
  node needs a per-pod entry.
* kube-controller-manager does not know lockstep's PodGroup, so nobody else creates the claim of a
  PodGroup-level ``resourceClaimTemplateName``: lockstep creates it, with an ownerReference to the
  PodGroup and a name derived from the PodGroup's UID (a retry after a crash finds the same claim),
  and records it in the PodGroup's ``status.resourceClaimStatuses``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep import GROUP, VERSION
from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import (
    API_VERSION,
    RESERVED_FOR_MAX_SIZE,
    AllocationResult,
    ResourceClaim,
    ResourceClaimConsumerReference,
    ResourceClaimTemplate,
)
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.dra.ports import GroupClaimAPI, WriteResult
from lockstep.scheduler.framework import PodGroupInfo, PodInfo

GROUP_CLAIM_ANNOTATION = f"{GROUP}/podgroup-claim"


class ClaimsNotReady(Exception):
    """A claim the pod needs does not exist yet (or cannot be known yet); the message says which."""


@dataclass(frozen=True, slots=True)
class ClaimSource:
    key: str  # namespace/name of the ResourceClaim
    description: str  # where the pod got it from, for messages
    owner_uid: str | None = None  # the pod's UID for claims generated from the pod's templates
    generated: bool = False  # created from a template (by the resourceclaim controller or lockstep)
    for_group: bool = False  # reached through the PodGroup's spec.resourceClaims: reserved for the group


def resolve_claims(
    pod: PodInfo, group: PodGroupInfo | None, group_claim_names: Mapping[str, str | None]
) -> list[ClaimSource]:
    """The claims ``pod`` needs, in order, without duplicates; raises ClaimsNotReady."""
    sources: list[ClaimSource] = []
    for ref in pod.claims:
        if ref.resource_claim_name:
            sources.append(
                ClaimSource(f"{pod.namespace}/{ref.resource_claim_name}", f"pod claim {ref.name!r}")
            )
            continue
        if ref.name not in pod.claim_statuses:
            raise ClaimsNotReady(
                f"waiting for the ResourceClaim of pod claim {ref.name!r} (template "
                f"{ref.resource_claim_template_name!r}) to be created and named in the pod's "
                "status.resourceClaimStatuses"
            )
        generated = pod.claim_statuses[ref.name]
        if generated is None:
            continue  # the resourceclaim controller decided this pod does not need the claim
        sources.append(
            ClaimSource(f"{pod.namespace}/{generated}", f"pod claim {ref.name!r}", pod.uid, generated=True)
        )
    if group is not None:
        for ref in group.claims:
            if ref.resource_claim_name:
                name: str | None = ref.resource_claim_name
            elif ref.name in group_claim_names:
                name = group_claim_names[ref.name]
            else:
                template_name = ref.resource_claim_template_name
                # Upstream PodGroups get theirs from kube-controller-manager's resourceclaim
                # controller, as kube-scheduler waits for it; lockstep never makes a second one.
                maker = "the resourceclaim controller" if group.upstream else "lockstep"
                raise ClaimsNotReady(
                    f"waiting for {maker} to create the ResourceClaim of PodGroup {group.namespace}/"
                    f"{group.name} claim {ref.name!r} (template {template_name!r}) and record it in "
                    "status.resourceClaimStatuses"
                )
            if name is not None:
                sources.append(
                    ClaimSource(
                        f"{group.namespace}/{name}",
                        f"PodGroup {group.name} claim {ref.name!r}",
                        generated=not ref.resource_claim_name,
                        for_group=True,
                    )
                )
    unique: dict[str, ClaimSource] = {}
    for source in sources:
        unique.setdefault(source.key, source)  # a claim the pod lists itself is reserved for the pod
    return list(unique.values())


def check_owner(claim: ResourceClaim, source: ClaimSource, pod: PodInfo) -> str | None:
    """A problem if a template-generated claim is not owned by the pod (a name collision)."""
    if source.owner_uid is None:
        return None
    if any(ref.uid == source.owner_uid for ref in claim.metadata.owner_references):
        return None
    return f"ResourceClaim {claim.key} ({source.description}) was not created for pod {pod.key}"


# --- reservations ----------------------------------------------------------------------------------


def pod_consumer(pod: PodInfo) -> ResourceClaimConsumerReference:
    return ResourceClaimConsumerReference(api_group=None, resource="pods", name=pod.name, uid=pod.uid)


def podgroup_consumer(group: PodGroupInfo) -> ResourceClaimConsumerReference:
    """The PodGroup as a claim consumer: the kubelet prepares a claim for the pods of an upstream
    PodGroup it is reserved for (DRAWorkloadResourceClaims); lockstep's own PodGroup it does not know."""
    return ResourceClaimConsumerReference(
        api_group=UPSTREAM_GROUP if group.upstream else GROUP,
        resource="podgroups",
        name=group.name,
        uid=group.uid,
    )


def consumer_for(
    source: ClaimSource, pod: PodInfo, group: PodGroupInfo | None
) -> ResourceClaimConsumerReference:
    """Who ``source``'s claim is reserved for when ``pod`` uses it: the pod, or its PodGroup."""
    if source.for_group and group is not None and group.uid:
        return podgroup_consumer(group)
    return pod_consumer(pod)


def reserved_for_limit_message(claim_key: str, pod_key: str, consumers: int) -> str:
    return (
        f"ResourceClaim {claim_key} cannot be reserved for pod {pod_key}: status.reservedFor would "
        f"need {consumers} entries, the API allows at most {RESERVED_FOR_MAX_SIZE}. A claim a pod lists "
        "in its own spec.resourceClaims is reserved for every such pod because the kubelet only prepares "
        "claims reserved for its pod; use fewer pods per claim (e.g. one claim per sub-group, or a template "
        "per pod)"
    )


def merged_consumers(
    claim: ResourceClaim, planned: Iterable[ResourceClaimConsumerReference]
) -> list[ResourceClaimConsumerReference]:
    """The claim's reservedFor followed by the planned consumers it does not hold yet."""
    consumers = list(claim.status.reserved_for)
    present = {ref.uid for ref in consumers}
    for ref in planned:
        if ref.uid not in present:
            consumers.append(ref)
            present.add(ref.uid)
    return consumers


def claim_status_patch(
    allocation: AllocationResult | None, consumers: list[ResourceClaimConsumerReference]
) -> dict[str, Any]:
    """The ``status`` of the strict patch: the full reservedFor and, when allocating now, the allocation."""
    status: dict[str, Any] = {"reservedFor": [ref.dump() for ref in consumers]}
    if allocation is not None:
        status["allocation"] = allocation.dump()
    return status


# --- PodGroup-level claims from templates ---------------------------------------------------------


def group_claim_name(podgroup_name: str, entry: str, podgroup_uid: str) -> str:
    """``<podgroup>-<entry>-<5 chars of the PodGroup UID's hash>``, at most 253 characters."""
    digest = base64.b32encode(hashlib.sha256(podgroup_uid.encode()).digest()).decode().lower()
    suffix = digest[:5]
    prefix = f"{podgroup_name}-{entry}"[: 253 - 6].rstrip("-.")
    return f"{prefix}-{suffix}"


def claim_from_template(template: ResourceClaimTemplate, podgroup: PodGroup, entry: str) -> dict[str, Any]:
    meta = podgroup.metadata
    template_meta = template.spec.metadata
    annotations = {**dict(template_meta.get("annotations") or {}), GROUP_CLAIM_ANNOTATION: entry}
    return {
        "apiVersion": API_VERSION,
        "kind": "ResourceClaim",
        "metadata": {
            "name": group_claim_name(meta.name, entry, meta.uid),
            "namespace": meta.namespace,
            "labels": dict(template_meta.get("labels") or {}),
            "annotations": annotations,
            "ownerReferences": [
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": "PodGroup",
                    "name": meta.name,
                    "uid": meta.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.spec.spec.dump(),
    }


@dataclass(slots=True)
class GroupClaimsPlan:
    to_create: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (entry, claim)
    statuses: list[dict[str, str]] = field(default_factory=list)  # status.resourceClaimStatuses wanted
    problems: list[str] = field(default_factory=list)


def plan_group_claims(
    podgroup: PodGroup,
    template: Callable[[str], ResourceClaimTemplate | None],
    existing_claim: Callable[[str], ResourceClaim | None],
) -> GroupClaimsPlan:
    """What to create for the PodGroup's template entries and what its status should then say.

    ``template`` and ``existing_claim`` look objects up by ``namespace/name``."""
    plan = GroupClaimsPlan()
    meta = podgroup.metadata
    recorded = {s.name: s.resource_claim_name for s in podgroup.status.resource_claim_statuses}
    for index, entry in enumerate(podgroup.spec.resource_claims):
        if entry.resource_claim_template_name is None:
            continue
        name = group_claim_name(meta.name, entry.name, meta.uid)
        existing = existing_claim(f"{meta.namespace}/{name}")
        recorded_name = recorded.get(entry.name)
        if recorded_name and (recorded_name != name or existing is not None):
            # Recorded already; lockstep's own claim is re-created below if someone deleted it.
            plan.statuses.append({"name": entry.name, "resourceClaimName": recorded_name})
            continue
        plan.statuses.append({"name": entry.name, "resourceClaimName": name})
        if existing is not None:
            if not any(ref.uid == meta.uid for ref in existing.metadata.owner_references):
                plan.problems.append(
                    f"PodGroup {meta.namespace}/{meta.name} spec.resourceClaims[{index}]: ResourceClaim "
                    f"{meta.namespace}/{name} exists but is not owned by this PodGroup"
                )
            continue
        source = template(f"{meta.namespace}/{entry.resource_claim_template_name}")
        if source is None:
            plan.statuses.pop()
            template_name = entry.resource_claim_template_name
            plan.problems.append(
                f"PodGroup {meta.namespace}/{meta.name} spec.resourceClaims[{index}]"
                f".resourceClaimTemplateName: ResourceClaimTemplate {meta.namespace}/{template_name} "
                "not found"
            )
            continue
        plan.to_create.append((entry.name, claim_from_template(source, podgroup, entry.name)))
    return plan


@dataclass(slots=True)
class GroupClaimsReport:
    created: list[str] = field(default_factory=list)
    recorded: bool = False
    statuses: list[dict[str, str]] = field(default_factory=list)  # what the PodGroup status now names
    problems: list[str] = field(default_factory=list)


async def ensure_group_claims(
    podgroup: PodGroup,
    template: Callable[[str], ResourceClaimTemplate | None],
    existing_claim: Callable[[str], ResourceClaim | None],
    api: GroupClaimAPI,
    on_created: Callable[[ResourceClaim], None] | None = None,
) -> GroupClaimsReport:
    """Create the PodGroup's missing template claims and record them in its status."""
    plan = plan_group_claims(podgroup, template, existing_claim)
    report = GroupClaimsReport(problems=list(plan.problems))
    created_names = set()
    for entry, body in plan.to_create:
        name = body["metadata"]["name"]
        outcome = await api.create_claim(body)
        if outcome.result is WriteResult.WRITTEN:
            report.created.append(name)
            created_names.add(entry)
            if outcome.claim is not None and on_created is not None:
                on_created(outcome.claim)
        elif outcome.result is WriteResult.CONFLICT and (
            outcome.claim is not None
            and any(ref.uid == podgroup.metadata.uid for ref in outcome.claim.metadata.owner_references)
        ):
            created_names.add(entry)  # created by an earlier attempt
        else:
            report.problems.append(
                f"creating ResourceClaim {podgroup.metadata.namespace}/{name} for PodGroup "
                f"{podgroup.metadata.name} claim {entry!r} failed: "
                f"{outcome.result.value} {outcome.message}".rstrip()
            )
    pending = {entry for entry, _ in plan.to_create} - created_names
    statuses = [s for s in plan.statuses if s["name"] not in pending]
    current = [
        {"name": s.name, "resourceClaimName": s.resource_claim_name}
        for s in podgroup.status.resource_claim_statuses
        if s.resource_claim_name
    ]
    if statuses and statuses != current:
        outcome = await api.record_group_claims(podgroup, statuses)
        report.recorded = outcome.result is WriteResult.WRITTEN
        if report.recorded:
            report.statuses = statuses
        else:
            report.problems.append(
                f"recording status.resourceClaimStatuses of PodGroup {podgroup.key} failed: "
                f"{outcome.result.value} {outcome.message}".rstrip()
            )
    return report
