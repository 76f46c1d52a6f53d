"""Upstream's CompositePodGroup (``scheduling.k8s.io/v1alpha3``, Kubernetes 1.37, KEP-6012, gate
CompositePodGroup): a group of groups. PodGroups and other CompositePodGroups join it by naming it in
``spec.parentCompositePodGroupName`` (same namespace); the root of a hierarchy names no parent.

The fields, as ``staging/src/k8s.io/api/scheduling/v1alpha3/types.go`` and KEP-6012 define them:

- ``schedulingPolicy``: ``basic: {}`` (children scheduled independently) or
  ``gang: {minGroupCount}`` (at least that many children, each placed whole, together, or none);
- ``schedulingConstraints.topology`` (at most one ``key``, gate TopologyAwareWorkloadScheduling): every
  child in one domain of that node label, resolved top-down (the children's own constraints inside it);
- ``disruptionMode``: ``{single: {}}`` (children disrupted independently) or ``{all: {}}`` (together);
- ``priorityClassName``, ``priority``, ``preemptionPolicy``; ``workloadRef`` (required, not acted on);
- ``status.conditions``: the scheduler's ``CompositePodGroupInitiallyScheduled`` (terminal once True;
  reasons ``Scheduled``, ``Unschedulable``, ``SchedulerError``, ``Invalid``) and ``DisruptionTarget``.

The core's model is ``lockstep.scheduler.framework.CompositeInfo`` (``lockstep.api.groups``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from lockstep.api.podgroup import Condition, Int32, JsonStr, ObjectMeta, PreemptionPolicy, _Model
from lockstep.api.upstream_podgroup import UpstreamDisruptionMode, UpstreamSchedulingConstraints

GROUP = "scheduling.k8s.io"
VERSION = "v1alpha3"
PLURAL = "compositepodgroups"
KIND: Literal["CompositePodGroup"] = "CompositePodGroup"
CONDITION_INITIALLY_SCHEDULED = "CompositePodGroupInitiallyScheduled"
REASON_INVALID = "Invalid"
CONDITION_DISRUPTION_TARGET = "DisruptionTarget"
REASON_PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
# KEP-6012's limit of a group hierarchy (Workload templates: WorkloadMaxTreeDepth); a deeper runtime
# hierarchy is invalid, detected by the scheduler.
MAX_DEPTH = 4


class CompositeGangPolicy(_Model):
    min_group_count: Annotated[Int32, Field(ge=1)] = Field(alias="minGroupCount")


class CompositeBasicPolicy(_Model):
    pass


class CompositeSchedulingPolicy(_Model):
    basic: CompositeBasicPolicy | None = None
    gang: CompositeGangPolicy | None = None


class WorkloadReference(_Model):
    workload_name: JsonStr = Field(alias="workloadName")
    template_name: JsonStr = Field(alias="templateName")


class CompositePodGroupSpec(_Model):
    parent_composite_pod_group_name: JsonStr | None = Field(None, alias="parentCompositePodGroupName")
    workload_ref: WorkloadReference | None = Field(None, alias="workloadRef")
    scheduling_policy: CompositeSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: UpstreamSchedulingConstraints | None = Field(None, alias="schedulingConstraints")
    disruption_mode: UpstreamDisruptionMode = Field("single", alias="disruptionMode")
    priority_class_name: JsonStr | None = Field(None, alias="priorityClassName")
    priority: Int32 | None = None
    preemption_policy: PreemptionPolicy | None = Field(None, alias="preemptionPolicy")

    @property
    def topology_keys(self) -> tuple[str, ...]:
        constraints = self.scheduling_constraints
        return tuple(c.key for c in constraints.topology) if constraints is not None else ()


class CompositePodGroupStatus(_Model):
    conditions: list[Condition] = Field(default_factory=list)


class CompositePodGroup(_Model):
    api_version: Literal["scheduling.k8s.io/v1alpha3"] = Field(
        "scheduling.k8s.io/v1alpha3", alias="apiVersion"
    )
    kind: Literal["CompositePodGroup"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: CompositePodGroupSpec
    status: CompositePodGroupStatus = Field(default_factory=CompositePodGroupStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"
