"""Upstream's PodGroup (``scheduling.k8s.io/v1alpha2``, gate GenericWorkload): pydantic models of what
kube-apiserver 1.36 accepts. Pods join such a group through ``spec.schedulingGroup.podGroupName``.

The spec is immutable in the API. Fields lockstep does not act on (``podGroupTemplateRef``, a link
to the Workload the group was made from) are read and ignored; everything that changes where or
when members run is carried into the core's group model by ``lockstep.api.groups``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from lockstep.api.podgroup import (
    Condition,
    DisruptionMode,
    GangPolicy,
    GroupSpec,
    Int32,
    JsonStr,
    ObjectMeta,
    PodGroupResourceClaim,
    ResourceClaimStatus,
    SchedulingPolicy,
    _Model,
)

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha2"
API_VERSION: Literal["scheduling.k8s.io/v1alpha2"] = "scheduling.k8s.io/v1alpha2"
PLURAL = "podgroups"
MAX_RESOURCE_CLAIMS = 4
# metav1.Condition reasons of PodGroupScheduled, as kube-scheduler writes them
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"


class UpstreamGangPolicy(GangPolicy):
    min_count: Annotated[Int32, Field(ge=1)] = Field(alias="minCount")  # no upper bound upstream


class UpstreamSchedulingPolicy(SchedulingPolicy):
    gang: UpstreamGangPolicy | None = None


class UpstreamPodGroupSpec(GroupSpec):
    scheduling_policy: UpstreamSchedulingPolicy = Field(alias="schedulingPolicy")
    resource_claims: list[PodGroupResourceClaim] = Field(
        default_factory=list, alias="resourceClaims", max_length=MAX_RESOURCE_CLAIMS
    )
    disruption_mode: DisruptionMode = Field("Pod", alias="disruptionMode")
    priority_class_name: JsonStr | None = Field(None, alias="priorityClassName")
    priority: Int32 | None = None


class UpstreamPodGroupStatus(_Model):
    conditions: list[Condition] = Field(default_factory=list)
    resource_claim_statuses: list[ResourceClaimStatus] = Field(
        default_factory=list, alias="resourceClaimStatuses", max_length=MAX_RESOURCE_CLAIMS
    )


class UpstreamPodGroup(_Model):
    api_version: Literal["scheduling.k8s.io/v1alpha2"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: UpstreamPodGroupSpec
    status: UpstreamPodGroupStatus = Field(default_factory=UpstreamPodGroupStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"
