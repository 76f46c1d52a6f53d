"""Upstream's PodGroup (``scheduling.k8s.io``, gate GenericWorkload): pydantic models of what
kube-apiserver accepts in each version lockstep reads. Pods join such a group through
``spec.schedulingGroup.podGroupName``.

- ``v1beta1`` (Kubernetes 1.37): ``disruptionMode`` is an object, ``{single: {}}`` or ``{all: {}}``;
  ``spec.preemptionPolicy`` (gate PodGroupPreemptionPolicy); ``spec.workloadRef``; the scheduler's
  condition is ``PodGroupInitiallyScheduled``; ``gang.minCount`` is mutable
  (``staging/src/k8s.io/api/scheduling/v1beta1/types.go``).
- ``v1alpha2`` (Kubernetes 1.36): ``disruptionMode`` is a string, ``Pod`` or ``PodGroup``; the
  condition is ``PodGroupScheduled``; the spec is immutable.

Both parse into one model: the disruption mode in 1.37's names, whatever the version. Fields
lockstep does not act on (``workloadRef``, ``podGroupTemplateRef``: links to the objects the group was
made from) are read and ignored; everything that changes where or when members run, the parent
CompositePodGroup (``parentCompositePodGroupName``, ``lockstep.api.composite_podgroup``) included, is
carried into the core's group model by ``lockstep.api.groups``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field

from lockstep.api.podgroup import (
    LABEL_KEY,
    Condition,
    GangPolicy,
    GroupSpec,
    Int32,
    JsonStr,
    ObjectMeta,
    PodGroupResourceClaim,
    PreemptionPolicy,
    ResourceClaimStatus,
    SchedulingPolicy,
    _matches,
    _Model,
)

GROUP = "scheduling.k8s.io"
PLURAL = "podgroups"
V1BETA1 = "v1beta1"
V1ALPHA2 = "v1alpha2"
# every version lockstep reads, newest first: discovery watches the first one the cluster serves
VERSIONS = (V1BETA1, V1ALPHA2)
ApiVersion = Literal["scheduling.k8s.io/v1beta1", "scheduling.k8s.io/v1alpha2"]
MAX_RESOURCE_CLAIMS = 4
MAX_TOPOLOGY = 1  # PodGroupSchedulingConstraints.topology: +k8s:maxItems=1
# metav1.Condition the scheduler writes: its type per version, and upstream's reasons
CONDITION_TYPES = {V1BETA1: "PodGroupInitiallyScheduled", V1ALPHA2: "PodGroupScheduled"}
REASON_SCHEDULED = "Scheduled"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

_ALPHA2_DISRUPTION_MODES = {"Pod": "single", "PodGroup": "all"}
# Upstream's PodGroup has no field for these: lockstep reads them from annotations.
SATISFACTION_POLICY_ANNOTATION = "scheduling.lockstep.dev/satisfaction-policy"
STALE_GRACE_PERIOD_ANNOTATION = "scheduling.lockstep.dev/stale-grace-period-seconds"


def _disruption_mode(value: Any) -> Any:
    """``{single: {}}`` / ``{all: {}}`` (v1beta1) or ``Pod`` / ``PodGroup`` (v1alpha2), as 1.37 names it."""
    if isinstance(value, str) and value in _ALPHA2_DISRUPTION_MODES:
        return _ALPHA2_DISRUPTION_MODES[value]
    if isinstance(value, dict):
        chosen = [key for key in ("single", "all") if value.get(key) is not None]
        if len(chosen) == 1 and set(value) == set(chosen):
            return chosen[0]
    raise ValueError("must be exactly one of {single: {}}, {all: {}} (v1alpha2: Pod, PodGroup)")


UpstreamDisruptionMode = Annotated[Literal["single", "all"], BeforeValidator(_disruption_mode)]


class UpstreamGangPolicy(GangPolicy):
    min_count: Annotated[Int32, Field(ge=1)] = Field(alias="minCount")  # no upper bound upstream


class UpstreamSchedulingPolicy(SchedulingPolicy):
    gang: UpstreamGangPolicy | None = None


class UpstreamTopologyConstraint(_Model):
    """1.37's TopologyConstraint: ``key`` alone (every member in one domain of that label)."""

    key: Annotated[JsonStr, Field(min_length=1, max_length=316), _matches(LABEL_KEY)]


class UpstreamSchedulingConstraints(_Model):
    topology: list[UpstreamTopologyConstraint] = Field(default_factory=list, max_length=MAX_TOPOLOGY)


class UpstreamPodGroupSpec(GroupSpec):
    parent_composite_pod_group_name: JsonStr | None = Field(None, alias="parentCompositePodGroupName")
    scheduling_policy: UpstreamSchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: UpstreamSchedulingConstraints | None = Field(  # type: ignore[assignment]
        None, alias="schedulingConstraints"
    )

    @property
    def topology_keys(self) -> tuple[str, ...]:
        constraints = self.scheduling_constraints
        return tuple(c.key for c in constraints.topology) if constraints is not None else ()

    @property
    def preferred_topology_keys(self) -> tuple[str, ...]:
        return ()  # upstream has no preferred topology

    resource_claims: list[PodGroupResourceClaim] = Field(
        default_factory=list, alias="resourceClaims", max_length=MAX_RESOURCE_CLAIMS
    )
    disruption_mode: UpstreamDisruptionMode = Field("single", alias="disruptionMode")
    priority_class_name: JsonStr | None = Field(None, alias="priorityClassName")
    priority: Int32 | None = None
    preemption_policy: PreemptionPolicy | None = Field(None, alias="preemptionPolicy")


class UpstreamPodGroupStatus(_Model):
    conditions: list[Condition] = Field(default_factory=list)
    resource_claim_statuses: list[ResourceClaimStatus] = Field(
        default_factory=list, alias="resourceClaimStatuses", max_length=MAX_RESOURCE_CLAIMS
    )


class UpstreamPodGroup(_Model):
    api_version: ApiVersion = Field("scheduling.k8s.io/v1beta1", alias="apiVersion")
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: UpstreamPodGroupSpec
    status: UpstreamPodGroupStatus = Field(default_factory=UpstreamPodGroupStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def condition_type(self) -> str:
        """The scheduler's condition in this version: PodGroupInitiallyScheduled or PodGroupScheduled."""
        return CONDITION_TYPES[self.version]
