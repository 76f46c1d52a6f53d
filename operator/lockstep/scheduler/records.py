"""What the last scheduling attempt of a group found: read-only records for the PodGroup status
writer, events and ``lockstep explain``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lockstep.scheduler.framework import Code, GroupKey

# PodGroupScheduled condition reasons.
REASON_SCHEDULED = "Scheduled"
REASON_WAITING = "Waiting"
REASON_UNSCHEDULABLE = "Unschedulable"
REASON_SCHEDULER_ERROR = "SchedulerError"

SAMPLE_NODES = 3  # node names kept per rejecting plugin


def _frozen(mapping: Mapping[str, int] | None = None) -> Mapping[str, int]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True, slots=True)
class PluginRejections:
    """The nodes one plugin rejected for one pod: how many, and a few of their names."""

    plugin: str
    count: int
    sample_nodes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class PodDiagnosis:
    """Why one pod found no node (code Unschedulable / UnschedulableAndUnresolvable / Error)."""

    pod: str  # namespace/name
    code: Code
    message: str
    nodes_evaluated: int
    causes: Mapping[str, int] = field(default_factory=_frozen)  # cause -> rejected nodes
    plugins: tuple[PluginRejections, ...] = ()
    stage: str = "Filter"  # where the pod was refused: PreFilter, Filter or Reserve


@dataclass(frozen=True, slots=True)
class GroupAttempt:
    """The outcome of a group's last attempt.

    ``code``: Success (placed: at least minCount members bound or on their way), Wait (PreEnqueue:
    the PodGroup or members are missing), Unschedulable, UnschedulableAndUnresolvable (too few pods
    exist in total), Error. ``causes`` counts rejected nodes per cause (the largest count any pod
    saw) plus the group-level causes TooFewPods (missing members) and Timeout (members rejected at
    Permit)."""

    group: GroupKey
    attempt: int
    code: Code
    reason: str
    message: str
    timestamp: float  # wall clock (time.time())
    min_count: int
    total_pods: int
    scheduled: int  # bound or assumed members after the attempt
    placed: tuple[tuple[str, str], ...] = ()  # (pod, node) sent to binding by this attempt
    pending: int = 0  # members still unscheduled after the attempt
    causes: Mapping[str, int] = field(default_factory=_frozen)
    pods: tuple[PodDiagnosis, ...] = ()
    next_retry_at: float | None = None  # wall clock; None: waits for an event
    # The topology domain holding the group and why it was chosen ("zone=a, rack=r1 (best fit: ...)"),
    # kept by later attempts while members stay placed; "" without topology.
    domain: str = ""

    @property
    def missing_pods(self) -> int:
        return max(self.min_count - self.total_pods, 0)


def reason_for(code: Code) -> str:
    if code is Code.SUCCESS:
        return REASON_SCHEDULED
    if code is Code.WAIT:
        return REASON_WAITING
    if code is Code.ERROR:
        return REASON_SCHEDULER_ERROR
    return REASON_UNSCHEDULABLE


def merge_causes(
    diagnoses: tuple[PodDiagnosis, ...], extra: Mapping[str, int] | None = None
) -> Mapping[str, int]:
    causes: dict[str, int] = {}
    for diagnosis in diagnoses:
        for cause, count in diagnosis.causes.items():
            causes[cause] = max(causes.get(cause, 0), count)
    for cause, count in (extra or {}).items():
        causes[cause] = causes.get(cause, 0) + count
    return _frozen(causes)
