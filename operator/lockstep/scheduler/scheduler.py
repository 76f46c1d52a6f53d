"""The Scheduler: owns the cache, queue, profile and binding tasks; the operator constructs it with
its API port and settings, feeds the cache from watch events, and runs ``run()``.

Binding cycle, one asyncio task per placed pod (the pod is already assumed and reserved by its
group cycle): Permit (wait for the gang, at most scheduleTimeoutSeconds) -> every PreBind ->
Bind through the port. On any failure after Reserve, every Reserve plugin's Unreserve runs exactly
once for that pod and the assumption is forgotten; then the pod gets PodScheduled=False through a
strict patch (docs/architecture.md behaviour 3) and its group backs off.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import itertools
import logging
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from lockstep import POD_GROUP_LABEL
from lockstep.api.pod import preemption_message
from lockstep.config import ScoreStrategy, Settings
from lockstep.scheduler.bind_queue import BindQueue
from lockstep.scheduler.composite import (
    INVALID_HIERARCHY,
    CompositeCycle,
    CompositeVerdict,
    Hierarchy,
    HierarchyProblem,
    hierarchy,
    root_of,
)
from lockstep.scheduler.cycle import PLACEMENT_PLUGIN, CycleOutcome, GroupCycle, Placement
from lockstep.scheduler.framework import (
    BINDING_NOTE_SERVICE,
    PREEMPTION_POLICY_NEVER,
    SUCCESS,
    Code,
    CompositeInfo,
    GroupKey,
    Plugin,
    PodCondition,
    PodGroupInfo,
    PodInfo,
    PreBindWrites,
    Status,
)
from lockstep.scheduler.group_checks import MIN_RESOURCES, task_counts, task_minimums_status
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.plugins.capacity_reservation import RESERVATION_SERVICE
from lockstep.scheduler.plugins.dynamic_resources import STORE_SERVICE
from lockstep.scheduler.plugins.gang import GangPermit
from lockstep.scheduler.plugins.podgroup_protection import DELETING_CAUSE, being_deleted
from lockstep.scheduler.plugins.unsupported import UNSUPPORTED_POD_SPEC
from lockstep.scheduler.ports import BINDING_CYCLE, BindResult, PatchResult, PodAPI, PreemptionAPI
from lockstep.scheduler.preemption import (
    PlanResult,
    PlanVerdict,
    PreemptionPlan,
    PreemptionPlanner,
    ReleasableDevices,
)
from lockstep.scheduler.profile import DEFAULT_PLUGINS, build_profile
from lockstep.scheduler.queue import GroupQueue, GroupState
from lockstep.scheduler.records import REASON_WAITING, GroupAttempt, PodDiagnosis, merge_causes, reason_for
from lockstep.scheduler.reservation import (
    HELD_CAUSE,
    Ending,
    Reservation,
    ReservationBook,
    ReservationPlanner,
)
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache, ClusterEvent

log = logging.getLogger(__name__)

# PodScheduled reasons of a pod whose PodGroup cannot be used: the message names the field or object.
POD_GROUP_NOT_FOUND = "PodGroupNotFound"  # the PodGroup the pod names does not exist
INVALID_POD_GROUP = "InvalidPodGroup"  # the PodGroup exists but a field of it cannot be used
INVALID_MIN_COUNT = "InvalidMinCount"  # the pod's min-count annotation cannot make a PodGroup

BINDING_PLUGIN = "Binding"
FINISH_ATTEMPTS = 5  # deletions of a marked victim before giving up until its next watch event
# A wait for claims that kube-controller-manager (or lockstep, for PodGroup templates) is about to create.
# Like kube-scheduler's PreEnqueue rejection it writes nothing to the pods of a PodGroup: the PodGroup's
# status says it if it lasts. A lone pod has no such status: it is told from its third failed attempt in
# a row on. Its first waits are the usual ones (the claim's creation wakes it before the pod's
# status.resourceClaimStatuses arrives): writing them cost every template-claim pod a status write.
_CLAIMS_BEING_MADE = frozenset({"ClaimPending"})
_LONE_CLAIM_WAIT_TOLD_AT = 3

_GROUP_EVENTS = (
    ClusterEvent.MEMBER_ADDED,
    ClusterEvent.MEMBER_CHANGED,
    ClusterEvent.GROUP_ADDED,
    ClusterEvent.GROUP_MIN_COUNT_LOWERED,
    ClusterEvent.GROUP_UPDATED,
)
# What can lift a PreEnqueue gate: a missing PodGroup appearing; a gang short of pods getting one
# more or a lower minCount. A member's other changes or a PodGroup update cannot.
_PODGROUP_MISSING_LIFTED_BY = frozenset({ClusterEvent.GROUP_ADDED, ClusterEvent.MEMBER_ADDED})
_POD_CHANGED = frozenset({ClusterEvent.MEMBER_CHANGED, ClusterEvent.MEMBER_ADDED})
# a group whose object is refused: only a change of it (or of its members, for Kueue's annotations)
_REFUSAL_LIFTED_BY = _POD_CHANGED | {
    ClusterEvent.GROUP_ADDED,
    ClusterEvent.GROUP_UPDATED,
    ClusterEvent.GROUP_MIN_COUNT_LOWERED,
}
_TOO_FEW_PODS_LIFTED_BY = frozenset(
    {ClusterEvent.MEMBER_ADDED, ClusterEvent.GROUP_ADDED, ClusterEvent.GROUP_MIN_COUNT_LOWERED}
)
_CLUSTER_EVENTS = frozenset(
    {
        ClusterEvent.NODE_ADDED,
        ClusterEvent.NODE_CHANGED,
        ClusterEvent.ASSIGNED_POD_REMOVED,
        ClusterEvent.CLAIMS_CHANGED,
        ClusterEvent.VOLUMES_CHANGED,
        ClusterEvent.RESERVATION_RELEASED,
    }
)
_NODE_EVENTS = frozenset({ClusterEvent.NODE_ADDED, ClusterEvent.NODE_CHANGED})
# Which cluster-wide events can cure a rejection cause. Causes not listed (plugins of other parts,
# e.g. DRA's) are helped by any of them.
_CAUSE_HINTS: dict[str, frozenset[ClusterEvent]] = {
    "Taint": _NODE_EVENTS,
    "NodeSelectorMismatch": _NODE_EVENTS,
    "NodeUnschedulable": _NODE_EVENTS,
    "NodeNameMismatch": _NODE_EVENTS,
    "InvalidNodeAffinity": frozenset(),
    UNSUPPORTED_POD_SPEC: frozenset(),
    # required pod affinity waits for a matching pod to be bound (or a node to carry the topology key)
    "PodAffinityRulesNotMatch": _NODE_EVENTS | {ClusterEvent.ASSIGNED_POD_ADDED},
    "TooFewPods": frozenset(),
    HELD_CAUSE: _NODE_EVENTS | {ClusterEvent.ASSIGNED_POD_REMOVED, ClusterEvent.RESERVATION_RELEASED},
    # coscheduling's and Volcano's minResources: capacity freed or added
    MIN_RESOURCES: _NODE_EVENTS | {ClusterEvent.ASSIGNED_POD_REMOVED},
}
_RESOURCE_HINTS = _NODE_EVENTS | {ClusterEvent.ASSIGNED_POD_REMOVED}
# Causes whose unresolvable form no cluster-wide event cures (only the group's own pods or PodGroup).
_UNRESOLVABLE_CAUSE_HINTS: dict[str, frozenset[ClusterEvent]] = {
    # The group's own members alone need more reservedFor entries than the API allows.
    "ReservedForLimit": frozenset(),
}
# What each cluster-wide event means, for the status of a parked group.
_EVENT_WORDS = {
    ClusterEvent.NODE_ADDED: "a node is added",
    ClusterEvent.NODE_CHANGED: "a node changes",
    ClusterEvent.ASSIGNED_POD_REMOVED: "a pod leaves a node",
    ClusterEvent.ASSIGNED_POD_ADDED: "a pod is bound to a node",
    ClusterEvent.CLAIMS_CHANGED: "a ResourceClaim, ResourceSlice or DeviceClass changes",
    ClusterEvent.VOLUMES_CHANGED: "a volume object changes",
    ClusterEvent.RESERVATION_RELEASED: "a capacity reservation ends",
}


@dataclass(slots=True)
class _Binding:
    """The binding cycles one group cycle started (a hierarchy's PodGroups together). Until one of
    them sends a binding or a PreBind write a next leader must find finished, nothing of them is in
    the API but what a next leader finds harmless, and a shutdown withdraws them all."""

    groups: set[GroupKey] = field(default_factory=set)
    sequences: list[int] = field(default_factory=list)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    committed: bool = False


def hints_for(causes: Mapping[str, int], pods: Sequence[PodDiagnosis] = ()) -> frozenset[ClusterEvent]:
    """The cluster-wide events that could cure these rejection causes. When every failed pod was
    rejected as unresolvable everywhere, freeing capacity on the existing nodes cannot help."""
    if not causes:
        return _CLUSTER_EVENTS
    if unresolvable(pods):
        cured: set[ClusterEvent] = set()
        for cause in causes:
            known = _UNRESOLVABLE_CAUSE_HINTS.get(cause)
            cured |= hints_for({cause: 1}) if known is None else known
        return frozenset(cured) - {ClusterEvent.ASSIGNED_POD_REMOVED}
    hints: set[ClusterEvent] = set()
    for cause in causes:
        if cause.startswith("Insufficient["):
            # An extended resource: a DeviceClass providing it lets DRA serve it (DRAExtendedResource).
            hints |= _RESOURCE_HINTS | {ClusterEvent.CLAIMS_CHANGED}
        elif cause.startswith("Insufficient"):
            hints |= _RESOURCE_HINTS
        else:
            hints |= _CAUSE_HINTS.get(cause, _CLUSTER_EVENTS)
    return frozenset(hints)


def unresolvable(pods: Sequence[PodDiagnosis]) -> bool:
    """Every failed pod was rejected as UnschedulableAndUnresolvable: no retry as the cluster is can
    change the verdict."""
    return bool(pods) and all(p.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for p in pods)


def parked_until(hints: frozenset[ClusterEvent]) -> str:
    """What a parked group waits for, in words."""
    events = [_EVENT_WORDS[event] for event in ClusterEvent if event in hints and event in _EVENT_WORDS]
    return ", or ".join(["the group's pods or PodGroup change", *events])


# How many event-loop iterations a scheduling loop gives away at most between two group cycles.
GIVE_WAY_ITERATIONS = 64


async def give_way() -> None:
    """Let everything that is ready run before the next group cycle: binding cycles, the HTTP
    responses they wait for, watch events. One ``sleep(0)`` let each of them take one step per cycle,
    so a placed gang's PreBind write and bindings took a step every ~5 ms cycle: its first binding was
    answered 0.2 s after its placement, 20 placements later (bench/startup.py). Now they run until they
    wait on the network, and the cycles go on meanwhile. Bounded, so that a flood of watch events cannot
    hold scheduling back; on an event loop without CPython's ready queue, one iteration."""
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    for _ in range(GIVE_WAY_ITERATIONS):
        await asyncio.sleep(0)
        if not ready:
            return


@dataclass(frozen=True, slots=True)
class SchedulerOptions:
    # Feasible nodes to find per pod before scoring (kube-scheduler's percentageOfNodesToScore, as
    # a count); when none is found among the indexed candidates, every node is checked.
    feasible_nodes_to_find: int = 32
    status_patch_attempts: int = 3
    # Concurrent pods/binding requests, and how many bindings may wait before the next cycle runs.
    bind_workers: int = 32
    bind_backlog_limit: int = 256
    # How long pods may name a lockstep PodGroup that does not exist before they are told so: the
    # PodGroup is usually created a moment after its pods (or by lockstep from their template lines).
    missing_podgroup_grace_seconds: float = 5.0


class SchedulerListener(Protocol):
    def on_pod_bound(self, pod: PodInfo, node_name: str) -> None: ...

    def on_group_attempt(self, attempt: GroupAttempt) -> None: ...

    def on_group_note(self, attempt: GroupAttempt) -> None:
        """The message of a group's last attempt changed without a new attempt (a binding wait)."""
        ...

    def on_pod_problem(self, pod: PodInfo, reason: str, message: str) -> None:
        """A pod names a PodGroup lockstep cannot use (missing, invalid, or a bad min-count): told once
        per problem, alongside its PodScheduled=False condition (an Event on the pod)."""
        ...


class Scheduler:
    def __init__(
        self,
        settings: Settings,
        pod_api: PodAPI,
        *,
        cache: ClusterCache | None = None,
        plugins: Sequence[str] = DEFAULT_PLUGINS,
        extra_plugins: Sequence[Plugin] = (),
        services: Mapping[str, object] | None = None,
        options: SchedulerOptions = SchedulerOptions(),
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        preemption_api: PreemptionAPI | None = None,
    ) -> None:
        self.settings = settings
        self.pod_api = pod_api
        self.preemption_api = preemption_api
        self.options = options
        self.clock = clock
        self.wall_clock = wall_clock
        self.cache = (
            cache if cache is not None else ClusterCache(settings.scheduler_name, settings.topology_key)
        )
        self.waiting = WaitingPods()
        self.reservations = ReservationBook(
            enabled=settings.reservation,
            max_reservations=settings.max_reservations,
            delay=settings.reservation_delay_seconds,
            timeout=settings.reservation_timeout_seconds,
            clock=wall_clock,
            priority_of=self._priority,
        )
        self.reservations.listeners.append(self._reservation_changed)
        # Told of every reservation made, planned again, restored (ending None) or ended (events, status).
        self.on_reservation: Callable[[Reservation, Ending | None, str], None] | None = None
        self.on_backfilled: Callable[[PodInfo], None] | None = None  # bound on held capacity
        services = {
            BINDING_NOTE_SERVICE: self.note_binding,
            RESERVATION_SERVICE: self.reservations,
            **(services or {}),
        }
        context = PluginContext(settings, self.cache, self.waiting, services)
        self.profile = build_profile(context, plugins, extra_plugins)
        self.queue = GroupQueue(settings.backoff_initial_seconds, settings.backoff_max_seconds)
        self.cycle = GroupCycle(
            self.cache,
            self.profile,
            options.feasible_nodes_to_find,
            spread=settings.score_strategy is ScoreStrategy.LEAST_ALLOCATED,
            search_budget=settings.joint_search_budget,
        )
        self.composite_cycle = CompositeCycle(self.cache, self.cycle)
        # Told of each CompositePodGroup's verdict after its hierarchy's cycle (its status, explain).
        self.on_composite: Callable[[CompositeVerdict], None] | None = None
        self.composite_verdicts: dict[tuple[str, str], CompositeVerdict] = {}
        devices = (services or {}).get(STORE_SERVICE)
        self.planner = PreemptionPlanner(
            self.cache,
            self.cycle,
            devices if isinstance(devices, ReleasableDevices) else None,
        )
        self.reservation_planner = ReservationPlanner(self.cache, self.planner)
        # Plans being written, until the cache shows their victims terminating (or gone) and their
        # nominations: meanwhile their victims are taken and their capacity held here.
        self._plans: dict[GroupKey, PreemptionPlan] = {}
        self._finishing: set[str] = set()  # uids of marked victims whose deletion is in flight
        # Told of every preemption verdict (metrics) and of each executed plan (events).
        self.on_preemption_verdict: Callable[[GroupKey, PlanVerdict], None] | None = None
        self.on_preempted: Callable[[PreemptionPlan], None] | None = None
        self._attempts: dict[GroupKey, GroupAttempt] = {}
        self._listeners: list[SchedulerListener] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.binder = BindQueue(pod_api.bind, options.bind_workers, on_send=self._commit)
        self._placements = itertools.count()
        self._bindings: dict[int, _Binding] = {}  # placement sequence -> its group cycle's binding cycles
        self._wakeup = asyncio.Event()
        self._releasing: GroupKey | None = None
        self._reporting: dict[str, PodCondition] = {}  # pod uid -> the False condition being written
        # Groups whose PodGroup exists but cannot be used, or whose pods name it wrongly: (reason,
        # message naming the field), set by the operator; such a group is refused, not waited for.
        self._group_problems: dict[GroupKey, tuple[str, str]] = {}
        # Groups whose lockstep PodGroup is missing: when first seen so (clock) and the timer that
        # looks again once the grace is up.
        self._missing: dict[GroupKey, tuple[float, asyncio.TimerHandle | None]] = {}
        # group -> pod uid -> the problem the pod was last told (its Event), until the group is usable
        self._told: dict[GroupKey, dict[str, str]] = {}
        # Told when a group became due outside a cache event (the operator runs its own loop).
        self.on_wake: Callable[[], None] | None = None
        self.cache.add_listener(self)

    # ------------------------------------------------------------------ outside view

    @property
    def attempts(self) -> Mapping[GroupKey, GroupAttempt]:
        """The last attempt of every group scheduled so far (read-only)."""
        return MappingProxyType(self._attempts)

    def add_listener(self, listener: SchedulerListener) -> None:
        self._listeners.append(listener)

    @property
    def busy_tasks(self) -> int:
        return len(self._tasks)

    def group_problem(self, key: GroupKey) -> tuple[str, str] | None:
        """(reason, message) of a group lockstep refuses because of how its PodGroup or pods say it."""
        return self._group_problems.get(key)

    def set_group_problem(self, key: GroupKey, reason: str | None, message: str = "") -> None:
        """Record (``reason`` None: clear) why a group's PodGroup or pods cannot be used, and look at
        the group again."""
        if reason is None:
            if self._group_problems.pop(key, None) is None:
                return
        elif self._group_problems.get(key) == (reason, message):
            return
        else:
            self._group_problems[key] = (reason, message)
        if self.cache.members(key):
            self.queue.add(key, self._priority(key), self.clock())
            self._wake()

    # ------------------------------------------------------------------ cache events

    def on_cluster_event(self, event: ClusterEvent, group: GroupKey | None) -> None:
        now = self.clock()
        if group is not None and event in _GROUP_EVENTS:
            info = self.cache.podgroup(group)
            if info is not None and info.terminating:
                self.waiting.reject_group(group, being_deleted(BINDING_PLUGIN, group))
            lowered = event is ClusterEvent.GROUP_MIN_COUNT_LOWERED
            self.queue.add(group, self._priority(group), now, event, at_once=lowered)
            if lowered:
                for plugin in self.profile.permit:
                    if isinstance(plugin, GangPermit):
                        plugin.recheck(group)
        elif group is not None and event is ClusterEvent.GROUP_DELETED:
            self.reservations.drop(group, f"PodGroup {group} was deleted")
            self.waiting.reject_group(
                group,
                Status.unschedulable(BINDING_PLUGIN, "PodGroupDeleted", f"PodGroup {group} was deleted"),
            )
            if self._forget_if_gone(group):
                return
            self.queue.add(group, self._priority(group), now)
        elif group is not None and event is ClusterEvent.MEMBER_REMOVED:
            for uid in self.waiting.uids(group):
                pod = self.cache.get_pod(uid)
                if pod is None:
                    gone = Status.unschedulable(BINDING_PLUGIN, "PodDeleted", "pod was deleted")
                    self.waiting.reject(uid, gone)
            if self._forget_if_gone(group) or self.queue.state(group) is not GroupState.PARKED:
                return
            self.queue.add(group, self._priority(group), now)  # fewer members may change the verdict
        elif event in _CLUSTER_EVENTS or event is ClusterEvent.ASSIGNED_POD_ADDED:
            if not self.queue.on_event(event, now, self._releasing):
                return
        else:
            return
        self._wakeup.set()

    def _pending(self, key: GroupKey) -> int:
        return self.cache.live_member_count(key) - self.cache.scheduled_count(key)

    def _forget_if_gone(self, key: GroupKey) -> bool:
        """Drop the queue entry and last attempt of a group with no PodGroup and no members left."""
        if self.cache.members(key) or self.cache.podgroup(key) is not None:
            return False
        self.reservations.drop(key, f"the group {key} has no pods and no PodGroup left")
        self.queue.remove(key)
        self._attempts.pop(key, None)
        self._forget_missing(key)
        return True

    def _priority(self, key: GroupKey) -> int:
        return self.cache.group_priority(key)

    def _missing_long(self, key: GroupKey) -> bool:
        """Whether the group's lockstep PodGroup has been missing for the grace; if not, look again
        when it is up."""
        now = self.clock()
        since, timer = self._missing.get(key, (now, None))
        grace = self.options.missing_podgroup_grace_seconds
        if now - since >= grace:
            return True
        if timer is None:
            timer = asyncio.get_running_loop().call_later(grace - (now - since), self._look_again, key)
        self._missing[key] = (since, timer)
        return False

    def _look_again(self, key: GroupKey) -> None:
        since, _ = self._missing.get(key, (self.clock(), None))
        self._missing[key] = (since, None)
        if self.cache.members(key) and self.cache.podgroup(key) is None:
            self.queue.add(key, self._priority(key), self.clock())
            self._wake()

    def _wake(self) -> None:
        self._wakeup.set()
        if self.on_wake is not None:
            self.on_wake()

    def _forget_missing(self, key: GroupKey) -> None:
        self._told.pop(key, None)
        _, timer = self._missing.pop(key, (0.0, None))
        if timer is not None:
            timer.cancel()

    def _tell(self, pod: PodInfo, reason: str, message: str) -> None:
        """PodScheduled=False and, once per problem, the listeners' Event on the pod."""
        self._spawn(self.report_unschedulable(pod, reason, message))
        told = self._told.setdefault(pod.group_key, {})
        if told.get(pod.uid) == message:
            return
        told[pod.uid] = message
        for listener in self._listeners:
            try:
                tell = getattr(listener, "on_pod_problem", None)
                if tell is not None:
                    tell(pod, reason, message)
            except Exception:
                log.exception("listener %r failed on a problem of pod %s", listener, pod.key)

    # ------------------------------------------------------------------ main loop

    async def run(self) -> None:
        """Schedule until cancelled; sleeps while nothing is due and wakes on cache events."""
        try:
            while True:
                self._wakeup.clear()
                if self.schedule_one() is not None:
                    await give_way()
                    await self.binder.wait_below(self.options.bind_backlog_limit)
                    continue
                ready_at = self.queue.next_ready_at()
                timeout = None if ready_at is None else max(ready_at - self.clock(), 0.0)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wakeup.wait(), timeout)
        finally:
            await self.close()

    async def close(self) -> None:
        """Cancel binding tasks (each unreserves its pod) and wait for them."""
        for _, timer in self._missing.values():
            if timer is not None:
                timer.cancel()
        self._missing.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.binder.close()

    def withdraw_unstarted(self) -> set[GroupKey]:
        """Shutdown: cancel the binding cycles of every group cycle that has sent no binding and no
        PreBind write a next leader must find finished (each cancellation unreserves its pod); the
        groups stay pending for the next leader. Returns the groups withdrawn."""
        withdrawn: set[GroupKey] = set()
        for binding in {id(b): b for b in self._bindings.values()}.values():
            if binding.committed:
                continue
            withdrawn |= binding.groups
            for task in binding.tasks:
                task.cancel()
        return withdrawn

    def _commit(self, order: tuple[int, int]) -> None:
        binding = self._bindings.get(order[0])
        if binding is not None:
            binding.committed = True

    def _forget_binding(self, binding: _Binding, task: asyncio.Task[None]) -> None:
        binding.tasks.discard(task)
        if not binding.tasks:
            for sequence in binding.sequences:
                self._bindings.pop(sequence, None)

    async def wait_for_tasks(self) -> None:
        """Wait until every binding and status task has finished (tests, benchmarks)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def schedule_one(self) -> GroupKey | None:
        """Pop the next due group and run its cycle (synchronously); None when nothing is due."""
        key = self.queue.pop(self.clock())
        if key is None:
            return None
        self._schedule_group(key)
        return key

    # ------------------------------------------------------------------ group cycle

    def _second_group(self, pods: Sequence[PodInfo]) -> tuple[Code, str] | None:
        """A member whose ``spec.schedulingGroup`` names an upstream PodGroup other than its lockstep
        group: admitted when that group asks for nothing (basic, no claims, no topology), refused
        when it does, waited for while it is not known yet."""
        for pod in pods:
            why = pod.conflicting_groups
            if why is None:
                continue
            other = GroupKey(pod.namespace, pod.scheduling_group, upstream=True)
            info = self.cache.podgroup(other)
            if info is None:
                return Code.WAIT, f"{why}; waiting for PodGroup {other} to exist to tell if the pod may join"
            asks = [
                what
                for what, asked in (
                    ("is a gang", info.is_gang),
                    ("has resourceClaims", bool(info.claims)),
                    ("has a topology constraint", bool(info.topology_keys)),
                )
                if asked
            ]
            if asks:
                return Code.UNSCHEDULABLE_AND_UNRESOLVABLE, (
                    f"{why}, and PodGroup {other} {' and '.join(asks)}: a pod joins one group (the "
                    "label's, beside a basic upstream PodGroup without claims or topology)"
                )
        return None

    def _schedule_group(self, key: GroupKey) -> None:
        group = self.cache.podgroup(key) if key.pod_group else None
        if not self._pending(key):
            self._forget_if_gone(key)
            return
        min_count = group.min_count if group is not None and group.is_gang else 1
        total = self.cache.live_member_count(key) + self.cache.succeeded_count(key)
        problem = self._group_problems.get(key) if key.pod_group else None
        if problem is not None and (group is None or problem[0] == INVALID_POD_GROUP):
            # Refused, not waited for: only a change of the PodGroup or of the pods can resolve it.
            self.queue.gate(key, _PODGROUP_MISSING_LIFTED_BY | _POD_CHANGED)
            reason, message = problem
            pending = self._pending(key)
            self._record(
                key,
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                message,
                min_count=min_count,
                total=total,
                causes={reason: pending},
            )
            for pod in self.cache.unscheduled_members(key):
                self._tell(pod, reason, message)
            return
        if key.pod_group and group is None:
            self.queue.gate(key, _PODGROUP_MISSING_LIFTED_BY)
            joined = "spec.schedulingGroup.podGroupName" if key.upstream else f"label {POD_GROUP_LABEL}"
            message = f"waiting for PodGroup {key} to exist ({total} member pods present, {joined})"
            self._record(key, Code.WAIT, message, min_count=min_count, total=total)
            if self.cache.podgroup_deleted(key) or key.upstream or key.dialect or self._missing_long(key):
                # No PodGroup status can say why (any more, or: the pods name an upstream PodGroup
                # that is not there to write to, or a lockstep one missing past the grace). A
                # lockstep PodGroup created after its pods is the usual order, and needs no pod write.
                for pod in self.cache.unscheduled_members(key):
                    self._tell(pod, POD_GROUP_NOT_FOUND, message)
            return
        self._forget_missing(key)
        if group is not None and group.terminating:
            # Nothing more of a group being deleted is scheduled; a member created later is told too.
            self.queue.gate(key, frozenset({ClusterEvent.MEMBER_ADDED}))
            message = f"PodGroup {key} is being deleted: no more of its pods are scheduled"
            self._record(
                key,
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                message,
                min_count=min_count,
                total=total,
                causes={DELETING_CAUSE: self._pending(key)},
            )
            for pod in self.cache.unscheduled_members(key):
                self._spawn(self.report_unschedulable(pod, reason_for(Code.UNSCHEDULABLE), message))
            return
        if group is not None and group.refusal:
            self.queue.gate(key, _REFUSAL_LIFTED_BY)
            self._record(
                key,
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                group.refusal,
                min_count=min_count,
                total=total,
                causes={"InvalidPodGroup": 1},
            )
            for pod in self.cache.unscheduled_members(key):
                self._spawn(self.report_unschedulable(pod, reason_for(Code.UNSCHEDULABLE), group.refusal))
            return
        if group is not None and group.parent:
            self._schedule_hierarchy(key, group)
            return
        if group is not None and group.min_task_members and total >= min_count:
            present = task_counts(self.cache.members(key))
            short_tasks = task_minimums_status(group, present, "present")
            if short_tasks is not None:
                self.queue.gate(key, _TOO_FEW_PODS_LIFTED_BY)
                missing = sum(max(n - present.get(task, 0), 0) for task, n in group.min_task_members)
                self._record(
                    key,
                    Code.WAIT,
                    f"waiting for pods: {short_tasks.message.partition(': ')[2]}",
                    min_count=min_count,
                    total=total,
                    causes={"TooFewPods": missing},
                )
                return
        if total < min_count and not self.cache.once_satisfied(key):
            self.queue.gate(key, _TOO_FEW_PODS_LIFTED_BY)
            missing = min_count - total
            self.reservations.drop(key, f"not needed while the gang waits for {missing} more pods")
            self._record(
                key,
                Code.WAIT,
                f"waiting for pods: {total} of minCount {min_count} present, {missing} missing",
                min_count=min_count,
                total=total,
                causes={"TooFewPods": missing},
            )
            return
        pods = self.cache.unscheduled_members(key)
        refused = pods[0].dialect_conflict if not key.pod_group and pods else None
        if refused is not None:
            # Refused, not retried: only a change of the pod's labels or annotations can resolve it.
            self.queue.gate(key, _POD_CHANGED)
            self._record(
                key,
                Code.UNSCHEDULABLE_AND_UNRESOLVABLE,
                refused,
                min_count=1,
                total=1,
                causes={"ConflictingGroups": 1},
            )
            self._spawn(self.report_unschedulable(pods[0], reason_for(Code.UNSCHEDULABLE), refused))
            return
        second = self._second_group(pods)
        if second is not None:
            code, message = second
            if code is Code.WAIT:
                self.queue.park(key, now=self.clock(), hints=_POD_CHANGED)
            else:  # refused, not retried: only a change of the pods resolves it
                self.queue.gate(key, _POD_CHANGED)
            self._record(
                key, code, message, min_count=min_count, total=total, causes={"ConflictingGroups": 1}
            )
            for pod in pods:
                if pod.conflicting_groups is not None:
                    self._spawn(self.report_unschedulable(pod, reason_for(Code.UNSCHEDULABLE), message))
            return
        pods.sort(key=lambda p: -p.priority)  # stable: equal priorities keep first-seen order
        priority = self._priority(key)
        verdict: PlanVerdict | None = None
        holds = self.nominations_above(key, priority)  # also forgets plans the cache now shows
        preempting = key in self._plans
        reserving: str | None = None
        retry_by: float | None = None
        with self.cache.pods_held(holds), self.reservations.holding_for(key, priority):
            outcome = self.cycle.run(group, pods)
            if self._may_preempt(key, outcome):
                taken = {victim.uid for plan in self._plans.values() for victim in plan.victims}
                verdict = self.planner.plan(key, group, pods, priority, taken)
            if self._may_reserve(key, outcome, verdict):
                reserving, retry_by = self.reservations.on_unfit(
                    key,
                    group,
                    priority,
                    self.cache,
                    lambda: self.reservation_planner.plan(key, group, pods, self.wall_clock()),
                )
        notes = [verdict.message] if verdict is not None else []
        if verdict is not None:
            self._act_on(key, pods, verdict)
        if reserving is not None:
            notes.append(reserving)
        if outcome.status.ok and outcome.placements:
            nodes = {placement.node_name for placement in outcome.placements}
            for other in self.reservations.on_placed(key, priority, nodes):
                self.queue.add(other, self._priority(other), self.clock())  # to plan again
        elif outcome.status.is_rejection and not self._may_reserve(key, outcome, verdict):
            why = verdict.message if verdict is not None else "it cannot be placed whatever finishes"
            self.reservations.drop(key, f"not needed: {why}")
        if notes:
            outcome = dataclasses.replace(
                outcome,
                status=dataclasses.replace(outcome.status, reasons=(*outcome.status.reasons, *notes)),
            )
        # Pods whose preemption is under way were told why at the attempt that planned it.
        quiet = preempting or (verdict is not None and verdict.result is PlanResult.WAITING)
        self._after_cycle(key, group, outcome, report_pods=not quiet)
        if retry_by is not None:
            self.queue.retry_by(key, self.clock() + max(retry_by - self.wall_clock(), 0.0))

    def _schedule_hierarchy(self, key: GroupKey, group: PodGroupInfo) -> None:
        """A PodGroup with a parent CompositePodGroup: its root's hierarchy is placed in one cycle
        (``lockstep.scheduler.composite``), each PodGroup's outcome then handled as its own cycle's.
        Preemption is not planned for a hierarchy: it waits for capacity, and its status says so."""
        root = root_of(self.cache, group)
        if isinstance(root, HierarchyProblem):
            pending = self._pending(key)
            total = self.cache.live_member_count(key) + self.cache.succeeded_count(key)
            min_count = group.min_count if group.is_gang else 1
            lifted = _PODGROUP_MISSING_LIFTED_BY | {ClusterEvent.GROUP_UPDATED} | _POD_CHANGED
            self.queue.gate(key, lifted)
            code = Code.WAIT if root.waits else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            self._record(
                key, code, root.message, min_count=min_count, total=total, causes={root.cause: pending}
            )
            for pod in self.cache.unscheduled_members(key):
                self._tell(pod, root.cause, root.message)
            parent = self.cache.composite(group.namespace, group.parent)
            if root.cause == INVALID_HIERARCHY and parent is not None and self.on_composite is not None:
                status = Status.unresolvable(PLACEMENT_PLUGIN, root.cause, root.message)
                self.on_composite(CompositeVerdict(parent, status, 0, 0, invalid=True))
            return
        tree = hierarchy(self.cache, root)
        leaves = tree.leaves()
        pods_of = {
            leaf.key: sorted(self.cache.unscheduled_members(leaf.key), key=lambda p: -p.priority)
            for leaf in leaves
        }
        # One key stands for the hierarchy wherever one plan or reservation is kept: its first PodGroup.
        anchor = leaves[0].key
        priority = max(
            [self._priority(leaf.key) for leaf in leaves] + [c.priority or 0 for c in tree.composites()]
        )
        holds = self.nominations_above(anchor, priority)
        preemption: PlanVerdict | None = None
        members = [pod for pods in pods_of.values() for pod in pods]
        with self.cache.pods_held(holds), self.reservations.holding_for(anchor, priority):
            result = self.composite_cycle.run(tree, pods_of)
            if self._may_preempt_hierarchy(anchor, result.status):
                preemption = self._plan_hierarchy(anchor, root, tree, pods_of, priority)
        if preemption is not None:
            self._act_on(anchor, members, preemption)
        for verdict in result.verdicts.values():
            if verdict.composite == root and preemption is not None and not verdict.status.ok:
                status = verdict.status
                noted = (*status.reasons, f"preemption: {preemption.message}")
                verdict = dataclasses.replace(verdict, status=dataclasses.replace(status, reasons=noted))
            self.composite_verdicts[verdict.composite.key] = verdict
            if self.on_composite is not None:
                self.on_composite(verdict)
        # Pods whose preemption is under way were told why at the attempt that planned it.
        quiet = (anchor in self._plans and preemption is None) or (
            preemption is not None and preemption.result is PlanResult.WAITING
        )
        binding = _Binding()  # the hierarchy binds whole or is withdrawn whole
        for leaf in leaves:
            outcome = result.outcomes.get(leaf.key)
            if outcome is None or not pods_of[leaf.key]:
                continue  # nothing of it to place or tell
            if not outcome.status.ok and preemption is not None:
                note = f"{root}: preemption: {preemption.message}"
                outcome = dataclasses.replace(
                    outcome,
                    status=dataclasses.replace(outcome.status, reasons=(*outcome.status.reasons, note)),
                )
            self._after_cycle(leaf.key, leaf, outcome, report_pods=not quiet, binding=binding)

    def _may_preempt_hierarchy(self, anchor: GroupKey, status: Status) -> bool:
        return (
            self.preemption_api is not None
            and anchor not in self._plans
            and status.code is Code.UNSCHEDULABLE
        )

    def _plan_hierarchy(
        self,
        anchor: GroupKey,
        root: CompositeInfo,
        tree: Hierarchy,
        pods_of: Mapping[GroupKey, Sequence[PodInfo]],
        priority: int,
    ) -> PlanVerdict:
        """Preemption for the root of a hierarchy: each trial is the hierarchy's own cycle."""
        if root.preemption_policy == PREEMPTION_POLICY_NEVER:
            return PlanVerdict(
                PlanResult.NOT_ELIGIBLE, f"{root}: preemptionPolicy is Never: waits without preempting"
            )
        taken = {victim.uid for plan in self._plans.values() for victim in plan.victims}

        def trial() -> list[Placement] | None:
            tried = self.composite_cycle.run(tree, pods_of)
            return tried.placements if tried.status.ok else None

        pending = [pod for pods in pods_of.values() for pod in pods]
        own = [leaf.key for leaf in tree.leaves()]
        return self.planner.plan(anchor, None, pending, priority, taken, own=own, place=trial)

    # ------------------------------------------------------------------ preemption

    def nominations_above(self, key: GroupKey, priority: int) -> list[tuple[PodInfo, str]]:
        """Capacity freed by preemption for other groups of at least ``priority``: held from this one."""
        self._forget_written_plans()
        holds: dict[str, tuple[PodInfo, str]] = {}
        for plan in self._plans.values():
            holds.update(
                (pod.uid, (pod, node)) for pod, node in plan.nominations if self.cache.get_pod(pod.uid)
            )
        holds.update((pod.uid, (pod, node)) for pod, node in self.cache.nominated())
        return [
            (pod, node)
            for pod, node in holds.values()
            if pod.group_key != key and self._priority(pod.group_key) >= priority
        ]

    def _forget_written_plans(self) -> None:
        for key, plan in list(self._plans.items()):
            if self._plan_written(plan):
                del self._plans[key]

    def _plan_written(self, plan: PreemptionPlan) -> bool:
        """Whether the cache shows what the plan wrote (from then on the API state speaks for it)."""
        for victim in plan.victims:
            pod = self.cache.get_pod(victim.uid)
            if pod is not None and not pod.deleting:
                return False
        for nominee, node in plan.nominations:
            pod = self.cache.get_pod(nominee.uid)
            if pod is not None and not pod.node_name and pod.nominated_node_name != node:
                return False
        return True

    def _may_preempt(self, key: GroupKey, outcome: CycleOutcome) -> bool:
        if self.preemption_api is None or key in self._plans:
            return False
        if outcome.status.code is not Code.UNSCHEDULABLE:
            return False  # placed, waiting, an error, or unresolvable (fewer pods than minCount)
        # a pod rejected as unresolvable everywhere cannot be helped by removing pods
        return not any(d.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for d in outcome.diagnoses)

    def _may_reserve(self, key: GroupKey, outcome: CycleOutcome, verdict: PlanVerdict | None) -> bool:
        """Unfit only for lack of free capacity: no member unresolvable, no preemption helps."""
        if outcome.status.code is not Code.UNSCHEDULABLE or key in self._plans:
            return False
        if any(d.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE for d in outcome.diagnoses):
            return False
        return verdict is None or verdict.result in (PlanResult.NO_PLAN, PlanResult.NOT_ELIGIBLE)

    def _reservation_changed(self, reservation: Reservation, ending: Ending | None, message: str) -> None:
        if ending is not None and self.queue.on_event(ClusterEvent.RESERVATION_RELEASED, self.clock()):
            self._wakeup.set()
        if self.on_reservation is not None:
            self.on_reservation(reservation, ending, message)

    def _act_on(self, key: GroupKey, pods: Sequence[PodInfo], verdict: PlanVerdict) -> None:
        if self.on_preemption_verdict is not None:
            self.on_preemption_verdict(key, verdict)
        if verdict.plan is not None:
            self._plans[key] = verdict.plan
            self._spawn(self._preempt(verdict.plan))
        elif verdict.result in (PlanResult.NO_PLAN, PlanResult.NOT_ELIGIBLE):
            # A nomination left from an earlier plan would hold capacity for nothing.
            for pod in pods:
                if pod.nominated_node_name:
                    self._spawn(self._nominate(pod, ""))

    async def _preempt(self, plan: PreemptionPlan) -> None:
        """Mark every victim, record the nominations, then delete the victims: a restart at any point
        finds what is left to do in the API (marked victims are deleted; nominations hold capacity;
        terminating victims make the group wait instead of preempting again)."""
        api = self.preemption_api
        assert api is not None
        message = preemption_message(plan.group, plan.priority)
        deleted = False
        failed: list[PodInfo] = []
        try:
            await asyncio.gather(*(api.mark_disruption_target(v, message) for v in plan.victims))
            await asyncio.gather(*(self._nominate(pod, node) for pod, node in plan.nominations))
            outcomes = await asyncio.gather(*(api.delete_victim(v) for v in plan.victims))
            failed = [v for v, o in zip(plan.victims, outcomes, strict=True) if not _done(o.result)]
            deleted = not failed
        finally:
            if not deleted:  # the plan broke: the next cycle plans again
                self._plans.pop(plan.group, None)
                self._wakeup.set()
        for victim in failed:  # marked but not deleted: retried, or the group would wait for it forever
            current = self.cache.get_pod(victim.uid)
            if current is not None:
                self.finish_preemption(current)
        if deleted and self.on_preempted is not None:
            self.on_preempted(plan)

    async def _nominate(self, pod: PodInfo, node_name: str) -> None:
        assert self.preemption_api is not None
        outcome = await self.preemption_api.nominate(pod, node_name)
        if outcome.result is PatchResult.ERROR:
            log.warning("nominating pod %s for %r failed: %s", pod.key, node_name, outcome.message)

    def finish_preemption(self, pod: PodInfo) -> None:
        """A victim marked by a preemption but not deleted (the operator stopped in between): delete it."""
        if (
            self.preemption_api is None
            or pod.deleting
            or pod.preempted_by is None
            or pod.uid in self._finishing
        ):
            return
        if any(victim.uid == pod.uid for plan in self._plans.values() for victim in plan.victims):
            return  # its plan is being written: the deletion is on its way
        self._finishing.add(pod.uid)
        self._spawn(self._finish(pod))

    async def _finish(self, pod: PodInfo) -> None:
        assert self.preemption_api is not None
        try:
            for attempt in range(FINISH_ATTEMPTS):
                outcome = await self.preemption_api.delete_victim(pod)
                if _done(outcome.result):
                    return
                await asyncio.sleep(min(2.0**attempt, 10.0))
            log.warning("deleting the marked victim %s failed %d times", pod.key, FINISH_ATTEMPTS)
        finally:
            self._finishing.discard(pod.uid)

    def _after_cycle(
        self,
        key: GroupKey,
        group: PodGroupInfo | None,
        outcome: CycleOutcome,
        report_pods: bool = True,
        binding: _Binding | None = None,
    ) -> None:
        now = self.clock()
        diagnoses = tuple(outcome.diagnoses)
        causes = merge_causes(diagnoses)
        status = outcome.status
        satisfied = (
            group is not None
            and group.is_gang
            and (outcome.scheduled >= outcome.min_count or self.cache.once_satisfied(key))
        )
        if status.ok and not outcome.placements and diagnoses and not satisfied:
            # A basic group whose pods all failed: the group failed with them. (A gang at minCount
            # whose extra members did not fit is still placed: they wait for capacity, one by one.)
            first = diagnoses[0]
            code = first.code if first.code in (Code.ERROR, Code.WAIT) else Code.UNSCHEDULABLE
            status = Status(code, (f"{first.pod}: {first.message}",), first.pod, "")
        if status.ok:
            sequence = next(self._placements)
            self.binder.open(sequence, len(outcome.placements))
            if outcome.placements:
                binding = binding if binding is not None else _Binding()
                binding.groups.add(key)
                binding.sequences.append(sequence)
                self._bindings[sequence] = binding
                for index, placement in enumerate(outcome.placements):
                    task = self._spawn(self._binding_cycle(key, placement, (sequence, index)))
                    binding.tasks.add(task)
                    task.add_done_callback(functools.partial(self._forget_binding, binding))
            next_retry = None
            hints = hints_for(causes, diagnoses)
            parked = bool(outcome.unplaced) and unresolvable(diagnoses)
            if parked:
                self.queue.park_until_event(key, now, hints)
            elif outcome.unplaced:
                next_retry = self.queue.park(key, now, hints)
            if satisfied and not outcome.placements:
                message = f"minCount ({outcome.min_count}) met with {outcome.scheduled} scheduled"
            else:
                message = (
                    f"{len(outcome.placements)} pods placed, "
                    f"{outcome.scheduled} of minCount {outcome.min_count} scheduled"
                )
            chosen = outcome.chosen_domain
            domain = ""
            if chosen is not None and outcome.placements:
                domain = f"{chosen.domain.replace(',', ', ')} ({chosen.verdict})"
                message += f"; placed in {domain}"
            if outcome.unplaced and satisfied:
                message += f"; {outcome.unplaced} members beyond minCount wait"
                if diagnoses:
                    message += f" ({diagnoses[0].pod}: {diagnoses[0].message})"
            elif outcome.unplaced:
                message += f"; {outcome.unplaced} pods did not fit"
            if parked:
                message += f", parked (no timed retry) until {parked_until(hints)}"
            self._record(
                key,
                Code.SUCCESS,
                message,
                min_count=outcome.min_count,
                total=outcome.total_pods,
                scheduled=outcome.scheduled,
                placed=tuple((p.pod.key, p.node_name) for p in outcome.placements),
                pending=outcome.unplaced,
                causes=causes,
                pods=diagnoses,
                next_retry=next_retry,
                domain=domain,
            )
        else:
            hints = hints_for(causes, diagnoses)
            message = status.message
            if diagnoses and diagnoses[0].message not in message:
                message = f"{message}; {diagnoses[0].pod}: {diagnoses[0].message}"
            if unresolvable(diagnoses):
                # Retrying on a timer would only repeat the verdict (and the pod writes with it).
                self.queue.park_until_event(key, now, hints)
                next_retry = None
                message = f"{message}; parked (no timed retry) until {parked_until(hints)}"
            else:
                next_retry = self.queue.park(key, now, hints)
            self._record(
                key,
                status.code,
                message,
                min_count=outcome.min_count,
                total=outcome.total_pods,
                scheduled=outcome.scheduled,
                pending=outcome.unplaced,
                causes=causes,
                pods=diagnoses,
                next_retry=next_retry,
            )
        if (
            status.code is Code.WAIT
            and causes
            and set(causes) <= _CLAIMS_BEING_MADE
            and (key.pod_group or self.queue.attempts(key) < _LONE_CLAIM_WAIT_TOLD_AT)
        ):
            return
        if not report_pods:
            return
        # Tell the pods left unscheduled why: their own diagnosis, else the group's verdict.
        reason = reason_for(Code.UNSCHEDULABLE if status.ok else status.code)
        by_pod = {d.pod: d for d in diagnoses}
        for pod in self.cache.unscheduled_members(key):
            diagnosis = by_pod.get(pod.key)
            pod_message = diagnosis.message if diagnosis is not None else None
            if pod_message is None and not status.ok:
                pod_message = f"pod group {key}: {status.message}"
            if pod_message is not None:
                # A refused field is said as such (the pod's own reason), whatever the group's.
                unsupported = diagnosis is not None and UNSUPPORTED_POD_SPEC in diagnosis.causes
                pod_reason = UNSUPPORTED_POD_SPEC if unsupported else reason
                self._spawn(self.report_unschedulable(pod, pod_reason, pod_message))

    def _record(
        self,
        key: GroupKey,
        code: Code,
        message: str,
        *,
        min_count: int,
        total: int,
        scheduled: int | None = None,
        placed: tuple[tuple[str, str], ...] = (),
        pending: int | None = None,
        causes: Mapping[str, int] | None = None,
        pods: tuple[PodDiagnosis, ...] = (),
        next_retry: float | None = None,
        domain: str = "",
    ) -> GroupAttempt:
        previous = self._attempts.get(key)
        wall = self.wall_clock()
        scheduled = self.cache.satisfying_count(key) if scheduled is None else scheduled
        if not domain and previous is not None and scheduled:
            domain = previous.domain  # the members placed are still there
        attempt = GroupAttempt(
            group=key,
            attempt=(previous.attempt + 1) if previous is not None else 1,
            code=code,
            reason=reason_for(code),
            message=message,
            timestamp=wall,
            min_count=min_count,
            total_pods=total,
            scheduled=scheduled,
            placed=placed,
            pending=self._pending(key) if pending is None else pending,
            causes=merge_causes((), causes),
            pods=pods,
            next_retry_at=None if next_retry is None else wall + (next_retry - self.clock()),
            domain=domain,
        )
        self._attempts[key] = attempt
        self._notify_attempt(attempt)
        return attempt

    def note_binding(self, key: GroupKey, message: str) -> None:
        """What a placed group's binding cycle waits for (a PreBind plugin says it): the message of its
        last attempt, so its status shows the wait."""
        previous = self._attempts.get(key)
        if previous is None or previous.code is not Code.SUCCESS or previous.message == message:
            return
        attempt = dataclasses.replace(previous, message=message)
        self._attempts[key] = attempt
        for listener in self._listeners:
            try:
                listener.on_group_note(attempt)
            except Exception:
                log.exception("listener %r failed on a note of group %s", listener, key)

    def _notify_attempt(self, attempt: GroupAttempt) -> None:
        for listener in self._listeners:
            try:
                listener.on_group_attempt(attempt)
            except Exception:  # a status writer's bug must not stop scheduling
                log.exception("listener %r failed on the attempt of %s", listener, attempt.group)

    def _spawn(self, coroutine: object) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coroutine)  # type: ignore[arg-type]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    # ------------------------------------------------------------------ binding cycle

    async def _binding_cycle(self, key: GroupKey, placement: Placement, order: tuple[int, int]) -> None:
        pod, node_name = placement.pod, placement.node_name
        BINDING_CYCLE.set(order)  # this task's own context: its API writes queue in placement order
        try:
            status = await self._permit_prebind_bind(placement, order)
        except asyncio.CancelledError:
            self.cycle.release(placement, report_freed=True)
            raise
        except Exception as exc:  # a plugin or port raised: fail this pod, keep scheduling
            log.exception("binding cycle of pod %s to %s raised", pod.key, node_name)
            status = Status.error(BINDING_PLUGIN, f"{type(exc).__name__}: {exc}")
        finally:
            self.binder.leave(order)  # a member that never reached Bind holds its siblings no longer
        if status.ok:
            self.queue.reset_attempts(key)
            if self.reservations.backfill_bound(pod.uid) and self.on_backfilled is not None:
                self.on_backfilled(pod)
            for listener in self._listeners:
                try:
                    listener.on_pod_bound(pod, node_name)
                except Exception:
                    log.exception("listener %r failed on pod %s bound", listener, pod.key)
            return
        next_retry = self._requeue_after_binding_failure(key, status)
        self._releasing = key  # the capacity it frees must not hurry its own group
        try:
            self.cycle.release(placement, report_freed=True)
        finally:
            self._releasing = None
        self._record_binding_failure(key, pod, node_name, status, next_retry)
        if status.cause != "PodDeleted":
            await self.report_unschedulable(pod, reason_for(status.code), status.message)

    async def _permit_prebind_bind(self, placement: Placement, order: tuple[int, int]) -> Status:
        pod, node_name, state = placement.pod, placement.node_name, placement.state
        if self.cache.get_pod(pod.uid) is None:
            return _deleted(pod)
        timeouts: list[float] = []
        for plugin in self.profile.permit:
            status, timeout = plugin.permit(state, pod, node_name)
            if status.code is Code.WAIT:
                timeouts.append(timeout)
            elif not status.ok:
                return status
        if timeouts:
            # Siblings that passed Permit must not wait for this one at the bind queue: a member whose
            # gang fell below minCount meanwhile waits here for up to the gang's timeout.
            self.binder.leave(order)
            future = self.waiting.add(pod)
            try:
                status = await asyncio.wait_for(future, min(timeouts))
            except TimeoutError:
                status = Status.unschedulable(
                    BINDING_PLUGIN,
                    "Timeout",
                    f"pod {pod.key} waited {min(timeouts):g}s at Permit for the rest of its gang",
                )
            finally:
                self.waiting.remove(pod)
            if not status.ok:
                return _deleted(pod) if self.cache.get_pod(pod.uid) is None else status
        for pre_bind in self.profile.pre_bind:
            if self.cache.get_pod(pod.uid) is None:
                return _deleted(pod)
            if not isinstance(pre_bind, PreBindWrites) or pre_bind.pre_bind_writes(state, pod, node_name):
                self._commit(order)
            status = await pre_bind.pre_bind(state, pod, node_name)
            if not status.ok:
                return status
        if self.cache.get_pod(pod.uid) is None:
            return _deleted(pod)
        outcome = await self.binder.bind(order, pod, node_name)
        if outcome.result in (BindResult.BOUND, BindResult.ALREADY_BOUND):
            return SUCCESS
        if outcome.result is BindResult.NOT_FOUND:
            return _deleted(pod)
        # A 409 or an error: the binding may have happened (a lost response) or lost a race.
        fresh = await self.pod_api.get_pod(pod.namespace, pod.name)
        if fresh is None or fresh.uid != pod.uid:
            return _deleted(pod)
        if fresh.node_name == node_name:
            return SUCCESS
        if outcome.result is BindResult.CONFLICT:
            where = f"bound to {fresh.node_name}" if fresh.node_name else "changed meanwhile"
            return Status.unschedulable(
                BINDING_PLUGIN, "BindConflict", f"binding to {node_name} lost a race: pod {where}"
            )
        return Status.error(BINDING_PLUGIN, f"binding to {node_name} failed: {outcome.message or 'error'}")

    def _requeue_after_binding_failure(self, key: GroupKey, status: Status) -> float | None:
        """Queue the group again before the pod's capacity is reported free; returns when it is due."""
        now = self.clock()
        next_retry: float | None
        if status.cause in ("PodGroupDeleted", DELETING_CAUSE):
            # PreEnqueue holds it until the PodGroup returns; a terminating one is gated by its cycle
            self.queue.add(key, self._priority(key), now)
            next_retry = None
        elif status.cause == "PodDeleted":
            next_retry = self.queue.ready_at(key)
        else:
            hints = hints_for({status.cause or status.plugin: 1}) | _CLUSTER_EVENTS
            next_retry = self.queue.park(key, now, hints, new_attempt=False)
        self._wakeup.set()
        return next_retry

    def _record_binding_failure(
        self, key: GroupKey, pod: PodInfo, node_name: str, status: Status, next_retry: float | None
    ) -> None:
        """Amend the group's last attempt. A deleted pod is not a failure of the group, and a group
        that still has minCount members bound or binding stays Scheduled."""
        previous = self._attempts.get(key)
        if previous is None or status.cause == "PodDeleted":
            return
        cause = status.cause or status.plugin
        causes = dict(previous.causes)
        causes[cause] = causes.get(cause, 0) + 1
        scheduled = self.cache.satisfying_count(key)
        if Code.ERROR in (status.code, previous.code):
            code = Code.ERROR
        elif previous.code is Code.SUCCESS and scheduled >= previous.min_count:
            code = Code.SUCCESS
        else:
            code = Code.UNSCHEDULABLE
        wall = self.wall_clock()
        attempt = dataclasses.replace(
            previous,
            code=code,
            reason=reason_for(code),
            message=f"pod {pod.key} did not bind to {node_name}: {status.message}",
            timestamp=wall,
            scheduled=scheduled,
            pending=self._pending(key),
            causes=merge_causes((), causes),
            next_retry_at=None if next_retry is None else wall + (next_retry - self.clock()),
            domain=previous.domain if scheduled else "",
        )
        self._attempts[key] = attempt
        self._notify_attempt(attempt)

    # ------------------------------------------------------------------ failure status

    async def report_unschedulable(self, pod: PodInfo, reason: str, message: str) -> None:
        """PodScheduled=False through a strict patch (docs/architecture.md behaviour 3): it carries the pod's
        resourceVersion; on 409 the pod is re-read, and nothing is written to a pod that has
        spec.nodeName (or that a newer cycle has placed)."""
        if pod.node_name:
            return
        wanted = PodCondition("False", reason, message)
        if _equivalent(self._reporting.get(pod.uid), wanted):
            return
        self._reporting[pod.uid] = wanted
        try:
            await self._patch_unschedulable(self.cache.get_pod(pod.uid) or pod, wanted)
        finally:
            if self._reporting.get(pod.uid) is wanted:
                del self._reporting[pod.uid]

    async def _patch_unschedulable(self, current: PodInfo, wanted: PodCondition) -> None:
        for _ in range(self.options.status_patch_attempts):
            if current.node_name or current.deleting or self.cache.is_assumed(current.uid):
                return
            if _equivalent(current.scheduled_condition, wanted):
                return
            try:
                outcome = await self.pod_api.patch_pod_unschedulable(
                    current, current.resource_version, wanted.reason, wanted.message
                )
                if outcome.result is not PatchResult.CONFLICT:
                    return
                fresh = await self.pod_api.get_pod(current.namespace, current.name)
            except Exception:
                log.exception("writing PodScheduled=False to pod %s failed", current.key)
                return
            if fresh is None or fresh.uid != current.uid:
                return
            current = fresh


_NUMBER = re.compile(r"\d+")


def _equivalent(existing: PodCondition | None, wanted: PodCondition) -> bool:
    """Whether the pod already says what ``wanted`` would: same status and reason, and a message
    that differs at most in counts. Waiting is transient (the PodGroup status carries what is
    awaited), so one Waiting condition stands for every later one."""
    if existing is None or existing.status != wanted.status or existing.reason != wanted.reason:
        return False
    if wanted.reason == REASON_WAITING:
        return True
    return existing.message == wanted.message or _NUMBER.sub("#", existing.message) == _NUMBER.sub(
        "#", wanted.message
    )


def _done(result: PatchResult) -> bool:
    """A victim's deletion went through (or it was gone already)."""
    return result in (PatchResult.OK, PatchResult.NOT_FOUND)


def _deleted(pod: PodInfo) -> Status:
    return Status.unschedulable(BINDING_PLUGIN, "PodDeleted", f"pod {pod.key} was deleted")
