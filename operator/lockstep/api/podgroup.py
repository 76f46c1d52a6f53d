"""PodGroup (scheduling.lockstep.dev/v1alpha1): pydantic models that accept what the CRD accepts.

``tests/unit/test_podgroup_crd_agreement.py`` feeds the same documents to these models and to the
CRD's openAPIV3Schema, so the two cannot drift. Unknown fields are ignored, as the API server prunes
them.
"""

from __future__ import annotations

import re
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

API_VERSION: Literal["scheduling.lockstep.dev/v1alpha1"] = "scheduling.lockstep.dev/v1alpha1"
KIND: Literal["PodGroup"] = "PodGroup"
PLURAL = "podgroups"
# Put on a PodGroup before the first of its members is bound (or its group claim allocated), removed
# once no bound member is left running: a deleted PodGroup stays Terminating while its members hold
# its claims. Upstream's PodGroups get scheduling.k8s.io/podgroup-protection from the API server.
PROTECTION_FINALIZER = "scheduling.lockstep.dev/podgroup-protection"

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
CONDITION_TYPE = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$"
)
CONDITION_REASON = r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$"

LABEL_KEY = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]$"
)
# spec.disruptionMode: Kubernetes 1.37's names, and 1.36's (``Pod``, ``PodGroup``), which stay valid
DISRUPTION_MODE_NAMES = ("single", "all", "Pod", "PodGroup")
_DISRUPTION_MODE_ALIASES = {"Pod": "single", "PodGroup": "all"}
PREEMPTION_POLICIES = ("PreemptLowerPriority", "Never")
# spec.satisfactionPolicy: how members that join a group after it reached minCount are placed
ONCE_SATISFIED = "OnceSatisfied"  # one by one as they fit, no gang barrier (while a member survives)
KEEP_MIN_COUNT = "KeepMinCount"  # a sub-gang that brings the group back to minCount, or nothing
SATISFACTION_POLICIES = (ONCE_SATISFIED, KEEP_MIN_COUNT)
MAX_STALE_GRACE_PERIOD_SECONDS = 86400

MAX_MIN_COUNT = 10000
MAX_TOPOLOGY_CONSTRAINTS = 8  # lockstep's levels; upstream's PodGroup allows one (upstream_podgroup.py)
TOPOLOGY_MODES = ("Required", "Preferred")
MAX_RESOURCE_CLAIMS = 4
DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 300
MAX_SCHEDULE_TIMEOUT_SECONDS = 86400


def _json_integer(value: Any) -> Any:
    """JSON integers as the API server reads them: no bools, no strings, integral floats allowed."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("must be an integer")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError("must be an integer")
        return int(value)
    return value


def _json_string(value: Any) -> Any:
    if not isinstance(value, str):
        raise ValueError("must be a string")
    return value


def _matches(pattern: str) -> AfterValidator:
    compiled = re.compile(pattern)

    def check(value: str) -> str:
        if not compiled.match(value):
            raise ValueError(f"must match {pattern}")
        return value

    return AfterValidator(check)


def _disruption_mode(value: Any) -> Any:
    """1.36's names read as 1.37's: the core knows only ``single`` and ``all``."""
    if isinstance(value, str) and value in DISRUPTION_MODE_NAMES:
        return _DISRUPTION_MODE_ALIASES.get(value, value)
    raise ValueError(f"must be one of {', '.join(DISRUPTION_MODE_NAMES)}")


JsonInt = Annotated[int, BeforeValidator(_json_integer)]
JsonStr = Annotated[str, BeforeValidator(_json_string)]
Int32 = Annotated[JsonInt, Field(ge=-(2**31), le=2**31 - 1)]
Int64 = Annotated[JsonInt, Field(ge=-(2**63), le=2**63 - 1)]
DisruptionMode = Annotated[Literal["single", "all"], BeforeValidator(_disruption_mode)]
PreemptionPolicy = Literal["PreemptLowerPriority", "Never"]
SatisfactionPolicy = Literal["OnceSatisfied", "KeepMinCount"]
StaleGracePeriod = Annotated[Int32, Field(ge=1, le=MAX_STALE_GRACE_PERIOD_SECONDS)]


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True, frozen=False)


class BasicPolicy(_Model):
    """Place each pod on its own."""


class GangPolicy(_Model):
    min_count: Annotated[Int32, Field(ge=1, le=MAX_MIN_COUNT)] = Field(alias="minCount")


class SchedulingPolicy(_Model):
    basic: BasicPolicy | None = None
    gang: GangPolicy | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SchedulingPolicy:
        if (self.basic is None) == (self.gang is None):
            raise ValueError("spec.schedulingPolicy: exactly one of basic or gang must be set")
        return self


class PodGroupResourceClaim(_Model):
    name: Annotated[JsonStr, Field(min_length=1, max_length=63), _matches(DNS_LABEL)]
    resource_claim_name: (
        Annotated[JsonStr, Field(min_length=1, max_length=253), _matches(DNS_SUBDOMAIN)] | None
    ) = Field(None, alias="resourceClaimName")
    resource_claim_template_name: (
        Annotated[JsonStr, Field(min_length=1, max_length=253), _matches(DNS_SUBDOMAIN)] | None
    ) = Field(None, alias="resourceClaimTemplateName")

    @model_validator(mode="after")
    def _exactly_one(self) -> PodGroupResourceClaim:
        if (self.resource_claim_name is None) == (self.resource_claim_template_name is None):
            raise ValueError(
                f"spec.resourceClaims[{self.name}]: exactly one of resourceClaimName or "
                "resourceClaimTemplateName must be set"
            )
        return self


class TopologyConstraint(_Model):
    key: Annotated[JsonStr, Field(min_length=1, max_length=316), _matches(LABEL_KEY)]
    # lockstep's own (upstream's TopologyConstraint has only key, and it is required)
    mode: Literal["Required", "Preferred"] = "Required"


class SchedulingConstraints(_Model):
    """Topology levels, outermost first: the Required ones, then the Preferred ones."""

    topology: list[TopologyConstraint] = Field(default_factory=list, max_length=MAX_TOPOLOGY_CONSTRAINTS)

    @model_validator(mode="after")
    def _levels(self) -> SchedulingConstraints:
        seen: set[str] = set()
        preferred_at: int | None = None
        for index, level in enumerate(self.topology):
            where = f"spec.schedulingConstraints.topology[{index}]"
            if level.key in seen:
                raise ValueError(f"{where}.key: duplicate key {level.key!r}: each level names its own label")
            seen.add(level.key)
            if level.mode == "Preferred" and preferred_at is None:
                preferred_at = index
            elif level.mode == "Required" and preferred_at is not None:
                raise ValueError(
                    f"{where}.mode: Required level {level.key!r} comes after the Preferred level at "
                    f"topology[{preferred_at}]: levels go outermost first, and a preferred level must be "
                    "inside the required ones"
                )
        return self


class GroupSpec(_Model):
    """What lockstep's and upstream's PodGroup specs share: the policy, the constraints and what
    follows from them."""

    scheduling_policy: SchedulingPolicy = Field(alias="schedulingPolicy")
    scheduling_constraints: SchedulingConstraints | None = Field(None, alias="schedulingConstraints")

    @property
    def min_count(self) -> int:
        """Members that must be placed together; 1 for a basic group."""
        gang = self.scheduling_policy.gang
        return gang.min_count if gang is not None else 1

    @property
    def is_gang(self) -> bool:
        return self.scheduling_policy.gang is not None

    @property
    def topology_keys(self) -> tuple[str, ...]:
        """The required levels, outermost first."""
        constraints = self.scheduling_constraints
        return tuple(c.key for c in constraints.topology if c.mode == "Required") if constraints else ()

    @property
    def preferred_topology_keys(self) -> tuple[str, ...]:
        """The preferred levels, outermost first."""
        constraints = self.scheduling_constraints
        return tuple(c.key for c in constraints.topology if c.mode == "Preferred") if constraints else ()


RESERVATION_POLICIES = ("IfNeeded", "Never")
ReservationPolicy = Literal["IfNeeded", "Never"]
MAX_RESERVATION_TIMEOUT_SECONDS = 86400


class ReservationSpec(_Model):
    policy: ReservationPolicy = "IfNeeded"
    timeout_seconds: Annotated[Int32, Field(ge=1, le=MAX_RESERVATION_TIMEOUT_SECONDS)] | None = Field(
        None, alias="timeoutSeconds"
    )


class PodGroupSpec(GroupSpec):
    # upstream's field of the same name: the scheduling.k8s.io CompositePodGroup this group is a child of
    parent_composite_pod_group_name: (
        Annotated[JsonStr, Field(min_length=1, max_length=253), _matches(DNS_SUBDOMAIN)] | None
    ) = Field(None, alias="parentCompositePodGroupName")
    priority_class_name: (
        Annotated[JsonStr, Field(min_length=1, max_length=253), _matches(DNS_SUBDOMAIN)] | None
    ) = Field(None, alias="priorityClassName")
    priority: Int32 | None = None
    disruption_mode: DisruptionMode = Field("single", alias="disruptionMode")
    preemption_policy: PreemptionPolicy | None = Field(None, alias="preemptionPolicy")
    resource_claims: list[PodGroupResourceClaim] = Field(
        default_factory=list, alias="resourceClaims", max_length=MAX_RESOURCE_CLAIMS
    )
    schedule_timeout_seconds: Annotated[Int32, Field(ge=1, le=MAX_SCHEDULE_TIMEOUT_SECONDS)] = Field(
        DEFAULT_SCHEDULE_TIMEOUT_SECONDS, alias="scheduleTimeoutSeconds"
    )
    reservation: ReservationSpec = Field(default_factory=ReservationSpec)
    satisfaction_policy: SatisfactionPolicy = Field("OnceSatisfied", alias="satisfactionPolicy")
    stale_grace_period_seconds: StaleGracePeriod | None = Field(None, alias="staleGracePeriodSeconds")

    @model_validator(mode="after")
    def _unique_claim_names(self) -> PodGroupSpec:
        seen: set[str] = set()
        for claim in self.resource_claims:
            if claim.name in seen:
                raise ValueError(f"spec.resourceClaims: duplicate name {claim.name!r}: names must be unique")
            seen.add(claim.name)
        return self


class PodGroupPhase(StrEnum):
    PENDING = "Pending"
    WAITING = "Waiting"
    SCHEDULING = "Scheduling"
    SCHEDULED = "Scheduled"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNSCHEDULABLE = "Unschedulable"


ConditionStatus = Literal["True", "False", "Unknown"]
DateTime = Annotated[datetime, Field(strict=False)]
CONDITION_SCHEDULED = "PodGroupScheduled"
# KEP-6413 (provisional, alpha planned for 1.39): True while at least minCount members are running or
# have succeeded; both directions for the life of the group.
CONDITION_SATISFIED = "PodGroupSatisfied"
REASON_MIN_COUNT_SATISFIED = "MinCountSatisfied"
REASON_BELOW_MIN_COUNT = "BelowMinCount"


class Condition(_Model):
    """metav1.Condition."""

    type: Annotated[JsonStr, Field(max_length=316), _matches(CONDITION_TYPE)]
    status: ConditionStatus
    observed_generation: Annotated[Int64, Field(ge=0)] | None = Field(None, alias="observedGeneration")
    last_transition_time: DateTime = Field(alias="lastTransitionTime")
    reason: Annotated[JsonStr, Field(min_length=1, max_length=1024), _matches(CONDITION_REASON)]
    message: Annotated[JsonStr, Field(max_length=32768)]


class ResourceClaimStatus(_Model):
    name: Annotated[JsonStr, Field(max_length=63)]
    resource_claim_name: Annotated[JsonStr, Field(max_length=253)] | None = Field(
        None, alias="resourceClaimName"
    )


class UnschedulableReason(_Model):
    reason: Annotated[JsonStr, Field(max_length=128)]
    count: Annotated[Int32, Field(ge=0)]
    message: Annotated[JsonStr, Field(max_length=1024)] | None = None


Count = Annotated[Int32, Field(ge=0)]


class ReservedNode(_Model):
    name: Annotated[JsonStr, Field(max_length=253)]
    resources: dict[str, Annotated[JsonStr, Field(max_length=64)]] = Field(default_factory=dict)
    devices: bool = False
    waiting_for: Count | None = Field(None, alias="waitingFor")


class ReservationStatus(_Model):
    """status.reservation: the capacity held for the gang (scheduler/reservation.py)."""

    nodes: list[ReservedNode] = Field(max_length=10000)
    waiting_for: Count | None = Field(None, alias="waitingFor")
    pods_without_deadline: Count | None = Field(None, alias="podsWithoutDeadline")
    expected_completion: DateTime | None = Field(None, alias="expectedCompletion")
    since: DateTime
    timeout_seconds: Annotated[Int32, Field(ge=1)] = Field(alias="timeoutSeconds")
    backfilled: Count | None = None

    @model_validator(mode="after")
    def _unique_nodes(self) -> ReservationStatus:
        names = [node.name for node in self.nodes]
        if len(names) != len(set(names)):
            raise ValueError("status.reservation.nodes: duplicate name")
        return self


class PodGroupStatus(_Model):
    phase: PodGroupPhase | None = None
    policy: Literal["Basic", "Gang"] | None = None
    observed_generation: Annotated[Int64, Field(ge=0)] | None = Field(None, alias="observedGeneration")
    total: Count | None = None
    pending: Count | None = None
    scheduled: Count | None = None
    running: Count | None = None
    ready: Count | None = None
    succeeded: Count | None = None
    failed: Count | None = None
    # gang only: members not bound and not needed to reach minCount (they bind as capacity allows)
    waiting_beyond_min_count: Count | None = Field(None, alias="waitingBeyondMinCount")
    last_attempt_time: DateTime | None = Field(None, alias="lastAttemptTime")
    next_retry_time: DateTime | None = Field(None, alias="nextRetryTime")
    # while waiting to be placed: its place among the waiting groups (1: next), how many wait, and
    # when it is expected to start (RFC 3339, from a reservation's deadlines) or "unknown"
    queue_position: Annotated[Int32, Field(ge=1)] | None = Field(None, alias="queuePosition")
    waiting_groups: Annotated[Int32, Field(ge=1)] | None = Field(None, alias="waitingGroups")
    expected_start: Annotated[str, Field(max_length=64)] | None = Field(None, alias="expectedStart")
    conditions: list[Condition] = Field(default_factory=list, max_length=8)
    resource_claim_statuses: list[ResourceClaimStatus] = Field(
        default_factory=list, alias="resourceClaimStatuses", max_length=4
    )
    unschedulable_reasons: list[UnschedulableReason] = Field(
        default_factory=list, alias="unschedulableReasons", max_length=32
    )
    reservation: ReservationStatus | None = None

    @model_validator(mode="after")
    def _unique_keys(self) -> PodGroupStatus:
        for field, items, key in (
            ("conditions", self.conditions, "type"),
            ("resourceClaimStatuses", self.resource_claim_statuses, "name"),
            ("unschedulableReasons", self.unschedulable_reasons, "reason"),
        ):
            values = [getattr(item, key) for item in items]
            if len(values) != len(set(values)):
                raise ValueError(f"status.{field}: duplicate {key}")
        return self


class ObjectMeta(_Model):
    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = Field("", alias="resourceVersion")
    generation: int = 0
    labels: dict[str, str] = Field(default_factory=dict)
    annotations: dict[str, str] = Field(default_factory=dict)
    finalizers: list[str] = Field(default_factory=list)
    deletion_timestamp: DateTime | None = Field(None, alias="deletionTimestamp")
    creation_timestamp: DateTime | None = Field(None, alias="creationTimestamp")


class PodGroup(_Model):
    api_version: Literal["scheduling.lockstep.dev/v1alpha1"] = Field(API_VERSION, alias="apiVersion")
    kind: Literal["PodGroup"] = KIND
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    spec: PodGroupSpec
    status: PodGroupStatus = Field(default_factory=PodGroupStatus)

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"
