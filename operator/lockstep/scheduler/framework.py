"""The scheduling framework: statuses, the views plugins see, and the plugin protocols.

This module is the contract between the scheduler core and its plugins (node resources, affinity,
taints, gang, dynamic resources). Plugins are small classes implementing one or more of the
protocols below; adding a plugin touches its own module plus one line of registration.

Extension points, in the order they run:
  group cycle (synchronous, on one snapshot):
    PreFilter(pod) -> Filter(pod, node) for candidate nodes -> Score(pod, node) -> Reserve(pod, node)
    after each pod: PlacementFeasible(group, progress)
  binding cycle (async, one task per pod):
    Permit -> PreBind (may write to the API through ports) -> Bind
    on any failure after Reserve: Unreserve, exactly once per pod.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol, runtime_checkable

if TYPE_CHECKING:
    from lockstep.scheduler.placement import PlacementSpec


class Code(IntEnum):
    SUCCESS = 0
    WAIT = 1
    UNSCHEDULABLE = 2
    UNSCHEDULABLE_AND_UNRESOLVABLE = 3
    ERROR = 4
    # PreFilter only: the plugin has nothing to check for this pod; its Filter is not called.
    SKIP = 5


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin verdict. ``cause`` is a short machine-readable reason (InsufficientCPU, Taint, ...)
    used for the PodGroup's reason breakdown; ``reasons`` are human-readable sentences; ``summary``
    is kube-scheduler's wording of the rejection where it has one (its plugins' ``ErrReason``
    strings: ``Too many pods``, ``Insufficient cpu``, ...), which the ``0/N nodes are available``
    message counts nodes by."""

    code: Code = Code.SUCCESS
    reasons: tuple[str, ...] = ()
    plugin: str = ""
    cause: str = ""
    summary: str = ""

    @property
    def counted_as(self) -> str:
        """What the ``0/N nodes are available`` message counts this rejection as."""
        return self.summary or self.cause or self.plugin

    @property
    def ok(self) -> bool:
        return self.code is Code.SUCCESS

    @property
    def is_rejection(self) -> bool:
        return self.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE)

    @property
    def message(self) -> str:
        return "; ".join(self.reasons)

    @classmethod
    def success(cls) -> Status:
        return SUCCESS

    @classmethod
    def unschedulable(cls, plugin: str, cause: str, *reasons: str, summary: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE, reasons, plugin, cause, summary)

    @classmethod
    def unresolvable(cls, plugin: str, cause: str, *reasons: str, summary: str = "") -> Status:
        return cls(Code.UNSCHEDULABLE_AND_UNRESOLVABLE, reasons, plugin, cause, summary)

    @classmethod
    def error(cls, plugin: str, *reasons: str) -> Status:
        return cls(Code.ERROR, reasons, plugin, "SchedulerError")

    @classmethod
    def wait(cls, plugin: str, *reasons: str) -> Status:
        return cls(Code.WAIT, reasons, plugin, "")

    @classmethod
    def skip(cls) -> Status:
        return SKIP


SKIP = Status(Code.SKIP)


SUCCESS = Status()


@dataclass(frozen=True, slots=True)
class PodClaimRef:
    """One entry of pod.spec.resourceClaims."""

    name: str
    resource_claim_name: str | None = None
    resource_claim_template_name: str | None = None


@dataclass(frozen=True, slots=True)
class ContainerRequests:
    """One container's requests, kept for pods asking for extended resources (a DeviceClass may provide
    them through DRA: kube-scheduler names each claim request after the container and the resource)."""

    name: str
    init: bool  # a non-sidecar init container: it runs to completion before the next one starts
    resources: tuple[str, ...]  # every resource it requests (a limit alone requests it too), sorted
    # extended resource -> quantity in whole units, None when it is not an integer
    extended: Mapping[str, int | None]


class GroupKey(NamedTuple):
    """Identifies a scheduling group: a PodGroup, or a pod without the group label (a group of one)."""

    namespace: str
    name: str
    pod_group: bool = True  # False: ``name`` is the name of a lone pod
    upstream: bool = False  # a scheduling.k8s.io PodGroup (pods join by spec.schedulingGroup)
    # another scheduler's group shape (DIALECTS: a coscheduling or Volcano PodGroup, a Kueue pod
    # group); "" for lockstep's and upstream's
    dialect: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.pod_group else f"pod {self.namespace}/{self.name}"


class PodCondition(NamedTuple):
    """The pod's PodScheduled condition as last seen (used to skip repeating the same failure patch)."""

    status: str
    reason: str
    message: str


# The group shapes of other schedulers lockstep reads (``lockstep.api.coscheduling``, ``.volcano``,
# ``.kueue``), in the precedence order after upstream's spec.schedulingGroup and lockstep's label: a
# pod naming one group in several shapes joins the first shape's.
DIALECT_COSCHEDULING = "coscheduling"
DIALECT_VOLCANO = "volcano"
DIALECT_KUEUE = "kueue"
DIALECTS = (DIALECT_COSCHEDULING, DIALECT_VOLCANO, DIALECT_KUEUE)


class GroupClaim(NamedTuple):
    """One shape's claim of a pod for a group: the group's name and where the pod says it."""

    dialect: str  # "upstream", "" (lockstep's label) or one of DIALECTS
    name: str
    field: str  # e.g. "label scheduling.x-k8s.io/pod-group"
    api: str  # the API group of the group's object, e.g. "scheduling.x-k8s.io"


# disruptionMode, as Kubernetes 1.37 names it (1.36's ``Pod`` and ``PodGroup`` map to these at the edge)
DISRUPTION_MODE_SINGLE = "single"  # members may be disrupted one by one
DISRUPTION_MODE_ALL = "all"  # a disruption takes the whole group
PREEMPTION_POLICY_NEVER = "Never"
# satisfaction policy (lockstep's spec.satisfactionPolicy; an annotation on upstream PodGroups)
ONCE_SATISFIED = "OnceSatisfied"
KEEP_MIN_COUNT = "KeepMinCount"


@dataclass(frozen=True, slots=True)
class PodGroupInfo:
    """The one model of a group the core uses, whichever API shape it came from (lockstep's CRD or
    upstream's scheduling.k8s.io PodGroup: ``lockstep.api.groups`` holds one adapter for each)."""

    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    min_count: int = 1
    is_gang: bool = False
    schedule_timeout_seconds: float = 300.0
    claims: tuple[PodClaimRef, ...] = ()  # spec.resourceClaims, shared by the whole group
    # The group's own priority (spec.priority, or its priorityClassName's value); None: the highest
    # priority among its members.
    priority: int | None = None
    # Required topology: every member on nodes with one value of each of these node labels.
    topology_keys: tuple[str, ...] = ()
    # Preferred topology, outermost level first: the smallest of these domains that holds the whole
    # group, inside the required one (lockstep.scheduler.topology).
    preferred_topology_keys: tuple[str, ...] = ()
    disruption_mode: str = DISRUPTION_MODE_SINGLE
    # the group's own spec.preemptionPolicy; "Never": the group waits instead of preempting
    preemption_policy: str | None = None
    upstream: bool = False  # a scheduling.k8s.io PodGroup: its claims are generated by the cluster
    # Capacity reservation (scheduler/reservation.py): "IfNeeded" or "Never", and the group's own
    # timeout (None: the operator's --reservation-timeout-seconds).
    reservation_policy: str = "IfNeeded"
    reservation_timeout_seconds: float | None = None
    satisfaction_policy: str = ONCE_SATISFIED
    # below minCount this long: the unfinished members are evicted (None: never)
    stale_grace_seconds: float | None = None
    # The API shows the group reached minCount at its current spec: its scheduling condition turned
    # True at this generation (a raised minCount bumps the generation and must be reached again).
    once_satisfied: bool = False
    dialect: str = ""  # one of DIALECTS, "" for lockstep's and upstream's PodGroups
    # Group-level pre-checks of other shapes: minResources (resource -> amount in base units, the
    # ``pods`` count included) the cluster must be able to free before members are placed, and
    # per-task minimums (Volcano's minTaskMember, task name -> count) a placement must meet.
    min_resources: tuple[tuple[str, int], ...] = ()
    min_task_members: tuple[tuple[str, int], ...] = ()
    # Why the group's object cannot be used (a field named); its members are refused, not placed.
    refusal: str = ""
    # metadata.deletionTimestamp is set: nothing more of the group is scheduled.
    terminating: bool = False
    # spec.parentCompositePodGroupName: the CompositePodGroup (same namespace) this group is a child
    # of; "" for a root group. Its cycle is the composite's (lockstep.scheduler.composite).
    parent: str = ""
    # A lockstep PodGroup carries lockstep's protection finalizer. Not compared: its arrival is no
    # reason to run the group's cycle again.
    protected: bool = field(default=False, compare=False)

    @property
    def key(self) -> GroupKey:
        return GroupKey(self.namespace, self.name, upstream=self.upstream, dialect=self.dialect)


@dataclass(frozen=True, slots=True)
class CompositeInfo:
    """A group of groups: an upstream ``scheduling.k8s.io/v1alpha3`` CompositePodGroup (KEP-6012), the
    parent of PodGroups (either shape) and of other composites that name it in
    ``spec.parentCompositePodGroupName`` (``lockstep.api.groups.from_composite``)."""

    namespace: str
    name: str
    uid: str = ""
    generation: int = 0
    parent: str = ""  # its own parent composite; "" for the root of a hierarchy
    is_gang: bool = False
    min_group_count: int = 1  # gang: children that must each be placed whole, together
    # Required topology: every child of the composite in one domain of each of these node labels.
    topology_keys: tuple[str, ...] = ()
    disruption_mode: str = DISRUPTION_MODE_SINGLE
    priority: int | None = None
    preemption_policy: str | None = None
    # The composite's CompositePodGroupInitiallyScheduled turned True (terminal upstream).
    once_scheduled: bool = False
    terminating: bool = False
    refusal: str = ""  # why the object cannot be used (a field named); its subtree is refused

    @property
    def key(self) -> tuple[str, str]:
        return self.namespace, self.name

    def __str__(self) -> str:
        return f"CompositePodGroup {self.namespace}/{self.name}"


@dataclass(slots=True)
class PodInfo:
    """What the scheduler needs of a pod, parsed once at the edge (see state/)."""

    uid: str
    namespace: str
    name: str
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    scheduler_name: str = ""
    node_name: str = ""
    group_name: str = ""  # value of the pod-group label; "" means a group of its own
    # spec.schedulingGroup.podGroupName: the upstream scheduling.k8s.io PodGroup the pod joins
    scheduling_group: str = ""
    # the groups other schedulers' shapes name for the pod, in precedence order (see DIALECTS)
    dialect_groups: tuple[GroupClaim, ...] = ()
    task: str = ""  # Volcano's task name (annotation volcano.sh/task-spec), for minTaskMember
    priority: int = 0
    # requests: resource name -> amount in base units (cpu in millicores, memory/storage in bytes)
    requests: Mapping[str, int] = field(default_factory=dict)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution, raw API shape
    required_node_affinity: Any = None
    tolerations: tuple[Mapping[str, Any], ...] = ()
    claims: tuple[PodClaimRef, ...] = ()
    volume_claims: tuple[str, ...] = ()  # names of the PersistentVolumeClaims spec.volumes use
    # the PVCs of the generic ephemeral volumes (spec.volumes[].ephemeral): ``<pod>-<volume>`` each
    ephemeral_claims: tuple[str, ...] = ()
    # status.resourceClaimStatuses: pod claim name -> generated ResourceClaim name (None: not needed)
    claim_statuses: Mapping[str, str | None] = field(default_factory=dict)
    deleting: bool = False
    phase: str = "Pending"
    scheduled_condition: PodCondition | None = None
    scheduling_gated: bool = False  # spec.schedulingGates is not empty: not to be scheduled yet
    # inter-pod affinity, topology spread, host ports, refused fields; None: the pod sets none
    placement: PlacementSpec | None = None
    # the images of the init and app containers, ":latest" added to an untagged name (ImageLocality)
    images: tuple[str, ...] = ()
    preemption_policy: str = "PreemptLowerPriority"  # spec.preemptionPolicy
    nominated_node_name: str = ""  # status.nominatedNodeName: where a preemption made room for it
    # The group whose preemption marked this pod (DisruptionTarget=True, PreemptionByScheduler, with
    # lockstep's message naming the group), or None.
    preempted_by: GroupKey | None = None
    # initContainers then containers, when the pod requests an extended resource (else empty)
    containers: tuple[ContainerRequests, ...] = ()
    # spec.activeDeadlineSeconds and status.startTime (Unix seconds): when the kubelet ends the pod at
    # the latest (capacity reservations, backfill). None: not set / not started.
    active_deadline_seconds: int | None = None
    start_time: float | None = None
    # group_key once computed: applying one pod event asks for it about seven times, and the fields
    # it is made of are never changed
    _group_key: GroupKey | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def pvc_names(self) -> tuple[str, ...]:
        """Every PVC the pod's volumes use: named ones, then those of its generic ephemeral volumes
        (the volumes kube-scheduler's VolumeBinding and NodeVolumeLimits look at)."""
        if not self.ephemeral_claims:
            return self.volume_claims
        return self.volume_claims + tuple(n for n in self.ephemeral_claims if n not in self.volume_claims)

    @property
    def group_claims(self) -> list[GroupClaim]:
        """Every shape's claim of the pod for a group, in precedence order."""
        claims = []
        if self.scheduling_group:
            claims.append(
                GroupClaim("upstream", self.scheduling_group, "spec.schedulingGroup", "scheduling.k8s.io")
            )
        if self.group_name:
            claims.append(
                GroupClaim(
                    "",
                    self.group_name,
                    "the label scheduling.lockstep.dev/pod-group",
                    "scheduling.lockstep.dev",
                )
            )
        claims.extend(self.dialect_groups)
        return claims

    @property
    def group_key(self) -> GroupKey:
        """lockstep's label decides when it names another group than ``spec.schedulingGroup``: the
        scheduler then admits the pod only if that upstream group asks for nothing of its own
        (``Scheduler._second_group``), as the Basic PodGroup the 1.37 Job controller makes for every
        Job without ``spec.scheduling``. Other schedulers' shapes come after both (DIALECTS); a pod
        they put in another group is refused on its own (``dialect_conflict``)."""
        key = self._group_key
        if key is None:
            key = self._group_key = self._joined_group()
        return key

    def _joined_group(self) -> GroupKey:
        if self.dialect_conflict is not None:
            return GroupKey(self.namespace, self.name, pod_group=False)
        if self.group_name and self.scheduling_group != self.group_name:
            return GroupKey(self.namespace, self.group_name)
        if self.scheduling_group:
            return GroupKey(self.namespace, self.scheduling_group, upstream=True)
        if self.dialect_groups:
            first = self.dialect_groups[0]
            return GroupKey(self.namespace, first.name, dialect=first.dialect)
        return GroupKey(self.namespace, self.name, pod_group=False)

    @property
    def in_pod_group(self) -> bool:
        return bool(self.scheduling_group or self.group_name or self.dialect_groups)

    @property
    def conflicting_groups(self) -> str | None:
        """What is said of the pod when its label and spec.schedulingGroup name two groups."""
        if self.scheduling_group and self.group_name and self.scheduling_group != self.group_name:
            return (
                f"pod {self.key} names two groups: the label scheduling.lockstep.dev/pod-group names "
                f"PodGroup {self.group_name!r} (scheduling.lockstep.dev) and spec.schedulingGroup "
                f"names PodGroup {self.scheduling_group!r} (scheduling.k8s.io)"
            )
        return None

    @property
    def dialect_conflict(self) -> str | None:
        """Why the pod is refused when another scheduler's shape names a different group than the one
        it joins otherwise (lockstep's label, else spec.schedulingGroup, else the first shape's),
        naming each claim."""
        if not self.dialect_groups:
            return None
        claims = [c for c in self.group_claims if c.dialect != "upstream" or not self.group_name]
        if len({claim.name for claim in claims}) < 2:
            return None
        named = " and ".join(f"{c.field} names PodGroup {c.name!r} ({c.api})" for c in claims)
        return f"pod {self.key} names two groups: {named}; a pod joins one group"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


class LabelRequirement(NamedTuple):
    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist (matchLabels entries are In with one value)
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "In":
            return present and labels[self.key] in self.values
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if self.operator == "Exists":
            return present
        return not present


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as preemption weighs it: which pods it covers and how many may go."""

    namespace: str
    name: str
    has_selector: bool  # policy/v1: an empty selector covers every pod of the namespace, none covers none
    requirements: tuple[LabelRequirement, ...]
    disruptions_allowed: int

    def covers(self, pod: PodInfo) -> bool:
        return (
            self.has_selector
            and pod.namespace == self.namespace
            and all(r.matches(pod.labels) for r in self.requirements)
        )


@dataclass(slots=True)
class NodeInfo:
    """A node and what is placed on it (bound plus assumed pods)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    allocatable: Mapping[str, int] = field(default_factory=dict)
    requested: dict[str, int] = field(default_factory=dict)
    pod_count: int = 0
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False
    images: Mapping[str, int] = field(default_factory=dict)  # status.images: each name -> size in bytes


CYCLE_PODS = "lockstep/cycle-pods"
# Per pod (CycleState.read): which of the pod's placements on one node Filter is to find, 0 (the
# first, the default) and up; set by the joint search (lockstep.scheduler.search) for ChoicesPlugins.
PLACEMENT_CHOICE = "lockstep/placement-choice"
# The plugin service through which PreBind says what a placed group's binding waits for:
# ``note_binding(group key, message)`` (the Scheduler's).
BINDING_NOTE_SERVICE = "scheduler.binding_note"
# How such a note begins while the binding waits for something outside the scheduler (a device
# driver's binding conditions): the status shows it after the usual settle time, not the backlog's.
BINDING_WAIT = "waiting for binding conditions"


class CycleState:
    """Per-pod scratch space shared by the plugins (keyed by plugin-chosen strings).

    Each pod of a group cycle gets its own CycleState; the same object is handed to that pod's
    Reserve, Permit, PreBind and Unreserve in the binding cycle. ``group`` is the pod's PodGroup
    (None for a pod without one); ``group_data`` is shared by all pods of the same group cycle, and
    ``group_data[CYCLE_PODS]`` lists the pods the cycle places, in order."""

    __slots__ = ("_data", "group", "group_data")

    def __init__(self, group: PodGroupInfo | None = None, group_data: dict[str, Any] | None = None) -> None:
        self._data: dict[str, Any] = {}
        self.group = group
        self.group_data: dict[str, Any] = group_data if group_data is not None else {}

    def read(self, key: str, default: Any = None) -> Any:
        return self._data.get(key, default)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def delete(self, key: str) -> None:
        self._data.pop(key, None)


@dataclass(frozen=True, slots=True)
class PlacementProgress:
    """For PlacementFeasible: S, R, M of docs/architecture.md behaviour 2 (and how many pods exist at all)."""

    scheduled: int
    remaining: int
    min_count: int
    total_pods: int


@runtime_checkable
class Plugin(Protocol):
    name: ClassVar[str]


@runtime_checkable
class PreFilterPlugin(Plugin, Protocol):
    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status: ...


@runtime_checkable
class FilterPlugin(Plugin, Protocol):
    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status: ...


@runtime_checkable
class RejectionSummaryPlugin(Plugin, Protocol):
    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        """After Filter rejected the pod on nodes and no node fits: why, in one short line (the
        plugin's per-node reasons aggregated), added to the pod's diagnosis. None: nothing to add."""
        ...


def note_rejection(state: CycleState, plugin: str, reason: str) -> None:
    """Count a Filter rejection's reason, for a plugin's ``rejection_summary``."""
    counts: dict[str, int] = state.read(f"{plugin}/rejections") or {}
    if not counts:
        state.write(f"{plugin}/rejections", counts)
    counts[reason] = counts.get(reason, 0) + 1


def rejection_reasons(state: CycleState, plugin: str) -> str | None:
    """The reasons noted by ``note_rejection``, most frequent first, each once."""
    counts: dict[str, int] = state.read(f"{plugin}/rejections") or {}
    return "; ".join(sorted(counts, key=lambda r: (-counts[r], r))) or None


@runtime_checkable
class ScorePlugin(Plugin, Protocol):
    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """0..100, higher is better."""
        ...


@runtime_checkable
class BatchScorePlugin(ScorePlugin, Protocol):
    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        """``score`` of each node, in order, in one call: for scorers whose work per node is small
        next to the cost of a call (the cycle then makes one call per pod instead of one per node)."""
        ...


@runtime_checkable
class PreScorePlugin(Plugin, Protocol):
    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Before Score, with the feasible nodes: prepare, or SKIP when the plugin has nothing to
        score for this pod (its Score is then not called)."""
        ...


@runtime_checkable
class NormalizeScorePlugin(Plugin, Protocol):
    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        """Rewrite, in place, the plugin's raw scores of the feasible nodes (in order) into 0..100."""
        ...


@runtime_checkable
class ReservePlugin(Plugin, Protocol):
    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None: ...


@runtime_checkable
class PreBindPlugin(Plugin, Protocol):
    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status: ...


@runtime_checkable
class PreBindWrites(Plugin, Protocol):
    def pre_bind_writes(self, state: CycleState, pod: PodInfo, node_name: str) -> bool:
        """Whether this pod's PreBind writes what a next leader must find finished (a claim's
        allocation, a volume's binding). At shutdown a gang none of whose members has sent such a
        write or a binding is withdrawn (unreserved, left to the next leader); one that has binds
        whole. A PreBind plugin without this method is taken to write."""
        ...


@runtime_checkable
class CandidateNodesPlugin(Plugin, Protocol):
    def candidate_nodes(self, state: CycleState, pod: PodInfo) -> Collection[str] | None:
        """After PreFilter: the only nodes that can pass this plugin's Filter (None: any node).
        The cycle evaluates the intersection; Filter still runs on each node it evaluates."""
        ...


@runtime_checkable
class PreferredNodesPlugin(Plugin, Protocol):
    def preferred_nodes(self, state: CycleState, pod: PodInfo) -> Iterable[str] | None:
        """Nodes to evaluate first, best first (they score best with this plugin); None: no
        preference. May be a lazy iterator: the cycle stops reading once it has enough nodes."""
        ...


@runtime_checkable
class ChoicesPlugin(Plugin, Protocol):
    def has_choices(self, state: CycleState, pod: PodInfo) -> bool:
        """After PreFilter: whether the pod may be placed on one node in more than one way (which
        devices it gets). Filter then honours ``state.read(PLACEMENT_CHOICE)``: choice k is the
        k-th way the plugin finds, and Filter rejects the node when there is no k-th."""
        ...


@runtime_checkable
class PermitPlugin(Plugin, Protocol):
    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        """Success to let the pod bind, a rejection to fail it, or Wait with a timeout in seconds:
        the pod then waits until a plugin allows or rejects its group (``WaitingPods.allow_group``,
        ``reject_group``) or the time runs out."""
        ...
