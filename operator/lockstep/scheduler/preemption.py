"""Gang-aware preemption planning: which lower-priority pods to remove so a whole group fits.

Pure and synchronous, like the group cycle it drives: every question "would the group fit without
these pods?" is a trial run of the real group cycle (every filter, DRA allocation included) on the
cache with those pods left out of their nodes' usage and the devices of claims they alone hold
counted free; the trial's reservations are released at once.

A plan, for a group of priority P whose PodGroup and members do not say ``preemptionPolicy: Never``:

1. If the group fits once what is already leaving is gone (terminating pods, claims held only by
   pods that are gone or terminating), nothing is preempted: the group waits for them. This is
   also how a preemption in progress, after a restart too, is never repeated.
2. Victims come in units: a pod on its own, or a whole gang. A gang's pods are a unit when its
   PodGroup says ``disruptionMode: all`` (1.36: ``PodGroup``), when it has no member beyond minCount
   to spare, or, at the end, when more of its pods were chosen than it can spare: no gang is left
   running below minCount because of a preemption. The PodGroups under a CompositePodGroup in
   ``disruptionMode: all`` (its highest such ancestor, KEP-6012) are one unit together. Only units
   whose every pod has a priority below P qualify.
3. If the group does not fit with every qualifying unit removed, it never preempts (it would not fit
   on an empty cluster of today's nodes either, or only by removing equal or higher priority).
4. The lowest victim priority that suffices is found (units of that priority or below removed).
   The units with no pod on the nodes that trial placed the group on are given back at once (one
   trial confirms it; not if what remains would violate a PDB), then the others one at a time
   while the group still fits: the highest priority first, then those whose removal would violate
   a PodDisruptionBudget, then the largest.
   What is left is the plan, with the nodes the last trial placed the group on as its nominations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Protocol, runtime_checkable

from lockstep.scheduler.cycle import GroupCycle, Placement
from lockstep.scheduler.framework import (
    DISRUPTION_MODE_ALL,
    PREEMPTION_POLICY_NEVER,
    DisruptionBudget,
    GroupKey,
    PodGroupInfo,
    PodInfo,
)
from lockstep.state.cluster import ClusterCache

# Why a pod is a victim (the victims metric's label).
REASON_POD = "pod"  # on its own: a lone pod, a basic group's, or a gang member beyond minCount
REASON_GANG = "gang"  # with its whole gang


class PlanResult(StrEnum):
    PLANNED = "planned"
    WAITING = "waiting"  # fits once terminating pods and released claims are gone
    NOT_ELIGIBLE = "not_eligible"  # preemptionPolicy Never
    NO_PLAN = "no_plan"  # does not fit even with every lower-priority pod removed


@dataclass(frozen=True, slots=True)
class PreemptionPlan:
    group: GroupKey
    priority: int
    victims: tuple[PodInfo, ...]
    reasons: dict[str, str]  # victim uid -> REASON_POD | REASON_GANG
    nominations: tuple[tuple[PodInfo, str], ...]  # the group's pods and where the trial put them
    violated_budgets: tuple[str, ...] = ()  # namespace/name of the PDBs the plan goes beyond
    # the CompositePodGroups (namespace, name) preempted whole: their DisruptionTarget is written
    composites: tuple[tuple[str, str], ...] = ()

    def victims_by_group(self) -> dict[GroupKey, int]:
        return dict(Counter(victim.group_key for victim in self.victims))

    def describe_victims(self) -> str:
        parts = [
            f"{'group' if key.pod_group else 'pod'} {key.namespace}/{key.name} ({count} pods)"
            for key, count in sorted(self.victims_by_group().items())
        ]
        text = ", ".join(parts)
        if self.violated_budgets:
            text += "; violates PodDisruptionBudget " + ", ".join(self.violated_budgets)
        return text


@dataclass(frozen=True, slots=True)
class PlanVerdict:
    result: PlanResult
    message: str
    plan: PreemptionPlan | None = None
    trials: int = 0


@runtime_checkable
class ReleasableDevices(Protocol):
    def claims_released(
        self, leaving: Collection[str], live: Callable[[str], bool]
    ) -> AbstractContextManager[int]:
        """Count the devices of claims that only ``leaving`` (or gone) pods hold as free."""
        ...


def group_preempts(group: PodGroupInfo | None, pods: Sequence[PodInfo]) -> bool:
    """A group preempts only if neither its PodGroup nor any of its pods promised not to
    (``preemptionPolicy: Never``)."""
    if group is not None and group.preemption_policy == PREEMPTION_POLICY_NEVER:
        return False
    return all(pod.preemption_policy != PREEMPTION_POLICY_NEVER for pod in pods)


def _never_reason(group: PodGroupInfo | None) -> str:
    if group is not None and group.preemption_policy == PREEMPTION_POLICY_NEVER:
        return "the PodGroup's preemptionPolicy is Never: waits without preempting"
    return "preemptionPolicy is Never: waits without preempting"


@dataclass(slots=True)
class _Unit:
    group: GroupKey
    pods: tuple[PodInfo, ...]
    priority: int
    whole_gang: bool
    spare: int = 0  # for a member of a gang in Pod mode: how many of the gang's pods may go alone
    budget_hits: dict[str, int] = field(default_factory=dict)
    composite: tuple[str, str] | None = None  # the CompositePodGroup preempted whole, if any


class PreemptionPlanner:
    def __init__(self, cache: ClusterCache, cycle: GroupCycle, devices: ReleasableDevices | None) -> None:
        self.cache = cache
        self.cycle = cycle
        self.devices = devices
        # A CompositePodGroup hierarchy's trial (lockstep.scheduler.composite), while one is planned for.
        self._place: Callable[[], Sequence[Placement] | None] | None = None

    def plan(
        self,
        key: GroupKey,
        group: PodGroupInfo | None,
        pods: Sequence[PodInfo],
        priority: int,
        taken: Collection[str] = (),
        *,
        own: Collection[GroupKey] = (),
        place: Callable[[], Sequence[Placement] | None] | None = None,
    ) -> PlanVerdict:
        """Plan on the cache as it is (it must not change during the call). ``taken``: uids of the
        victims of plans still being written; like the pods already marked as victims they are
        leaving, and never chosen again. For a CompositePodGroup hierarchy (KEP-6012: preemption is
        planned for its root, the whole tree at once) ``place`` is its trial, returning the placements
        it reserved or None, and ``own`` its PodGroups, never victims."""
        if not group_preempts(group, pods):
            return PlanVerdict(PlanResult.NOT_ELIGIBLE, _never_reason(group))
        self._place = place
        try:
            return self._plan(key, group, pods, priority, taken, {key, *own})
        finally:
            self._place = None

    def _plan(
        self,
        key: GroupKey,
        group: PodGroupInfo | None,
        pods: Sequence[PodInfo],
        priority: int,
        taken: Collection[str],
        own: Collection[GroupKey],
    ) -> PlanVerdict:
        trials = 0
        marked = self.cache.leaving_pods()
        marked_uids = {p.uid for p in marked}
        marked += [
            p
            for uid in sorted(taken)
            if uid not in marked_uids and (p := self.cache.get_pod(uid)) is not None
        ]
        leaving = [p for p in marked if self._placed(p)]
        lowest = self.cache.lowest_placed_priority()
        # Only pods of lower priority make units: without any, no walk over every pod.
        may_preempt = lowest is not None and lowest < priority
        units = self._units(own, priority, {p.uid for p in leaving}) if may_preempt else []
        if not units and not leaving:
            return PlanVerdict(PlanResult.NO_PLAN, "no lower-priority pods to preempt", trials=trials)
        # What is leaving already (claims of pods gone but not yet released included) may be enough.
        trials += 1
        if self.fits(group, pods, leaving) is not None:
            return PlanVerdict(
                PlanResult.WAITING,
                f"fits once {len(leaving)} pods already leaving (terminating or marked as victims) and "
                "the claims only they hold are gone",
                trials=trials,
            )
        if not units:
            return PlanVerdict(PlanResult.NO_PLAN, "no lower-priority pods to preempt", trials=trials)
        everything = [pod for unit in units for pod in unit.pods]
        trials += 1
        placement = self.fits(group, pods, leaving + everything)
        if placement is None:
            why = f"does not fit even with all {len(everything)} lower-priority pods preempted"
            return PlanVerdict(PlanResult.NO_PLAN, why, trials=trials)
        chosen = units
        for level in sorted({unit.priority for unit in units})[:-1]:
            candidates = [unit for unit in units if unit.priority <= level]
            trials += 1
            found = self.fits(group, pods, leaving + _pods_of(candidates))
            if found is not None:
                chosen, placement = candidates, found
                break
        # Units with no pod on the nodes the group went to are given back in one trial first.
        nodes = {node for _, node in placement}
        removed = [u for u in chosen if any(pod.node_name in nodes for pod in u.pods)]
        # (not when what is left violates a PDB: then every unit is weighed in the order above)
        if len(removed) < len(chosen) and not self._violations(removed):
            trials += 1
            if self.fits(group, pods, leaving + _pods_of(_whole_gangs(removed, units))) is None:
                removed = list(chosen)
        else:
            removed = list(chosen)
        for unit in sorted(removed, key=lambda u: (-u.priority, -bool(self._violations([u])), -len(u.pods))):
            kept = [u for u in removed if u is not unit]
            trials += 1
            if self.fits(group, pods, leaving + _pods_of(_whole_gangs(kept, units))) is not None:
                removed = kept
        final = _whole_gangs(removed, units)
        trials += 1
        nominations = self.fits(group, pods, leaving + _pods_of(final))
        if nominations is None:  # cannot happen: a superset of a fitting removal was tried above
            return PlanVerdict(PlanResult.NO_PLAN, "the plan did not fit when checked again", trials=trials)
        reasons = {
            pod.uid: REASON_GANG if unit.whole_gang else REASON_POD for unit in final for pod in unit.pods
        }
        plan = PreemptionPlan(
            group=key,
            priority=priority,
            victims=tuple(_pods_of(final)),
            reasons=reasons,
            nominations=nominations,
            violated_budgets=tuple(sorted(self._violations(final))),
            composites=tuple(sorted({unit.composite for unit in final if unit.composite is not None})),
        )
        return PlanVerdict(PlanResult.PLANNED, f"preempting {plan.describe_victims()}", plan, trials)

    # ------------------------------------------------------------------ trials

    def _placed(self, pod: PodInfo) -> bool:
        return bool(pod.node_name or self.cache.is_assumed(pod.uid)) and not pod.terminal

    def fits(
        self, group: PodGroupInfo | None, pods: Sequence[PodInfo], removed: Sequence[PodInfo]
    ) -> tuple[tuple[PodInfo, str], ...] | None:
        """Where the group's pods go with ``removed`` gone, or None when it does not fit."""
        leaving = {pod.uid for pod in removed}
        released: AbstractContextManager[int] = (
            self.devices.claims_released(leaving, lambda uid: self.cache.get_pod(uid) is not None)
            if self.devices is not None
            else nullcontext(0)
        )
        with self.cache.pods_removed(removed), released:
            if self._place is not None:
                trial = list(self._place() or ())
                try:
                    return tuple((p.pod, p.node_name) for p in trial) or None
                finally:
                    for placement in reversed(trial):
                        self.cycle.release(placement)
            outcome = self.cycle.run(group, pods)
            placements = outcome.placements
            try:
                wanted = len(pods) if group is None or not group.is_gang else 1
                if not outcome.status.ok or len(placements) < wanted:
                    return None
                return tuple((placement.pod, placement.node_name) for placement in placements)
            finally:
                for placement in reversed(placements):
                    self.cycle.release(placement)

    # ------------------------------------------------------------------ victims

    def _units(
        self, preemptors: Collection[GroupKey], priority: int, leaving: Collection[str]
    ) -> list[_Unit]:
        by_group: dict[GroupKey, list[PodInfo]] = {}
        for pod in self.cache.pods.values():
            if (
                pod.node_name
                and not pod.terminal
                and pod.uid not in leaving
                and pod.group_key not in preemptors
            ):
                by_group.setdefault(pod.group_key, []).append(pod)
        units: list[_Unit] = []
        budgets = list(self.cache.budgets)
        # KEP-6012: a victim's unit is its highest ancestor CompositePodGroup in disruptionMode all
        together: dict[tuple[str, str], list[PodInfo]] = {}
        for key, members in by_group.items():
            info = self.cache.podgroup(key) if key.pod_group else None
            ancestor = self._disrupted_with(info) if info is not None and info.parent else None
            if ancestor is not None:
                together.setdefault(ancestor, []).extend(members)
                continue
            if info is not None and info.is_gang:
                # the gang's priority (its PodGroup's, else its highest member's): taken whole or not at all
                top = max(self.cache.group_priority(key), *(pod.priority for pod in members))
                if top >= priority:
                    continue
                spare = self.cache.scheduled_count(key) - info.min_count
                if info.disruption_mode == DISRUPTION_MODE_ALL or spare <= 0:
                    units.append(_Unit(key, tuple(members), top, True, 0, _hits(members, budgets)))
                    continue
                units.extend(
                    _Unit(key, (pod,), pod.priority, False, spare, _hits([pod], budgets)) for pod in members
                )
            else:
                units.extend(
                    _Unit(key, (pod,), pod.priority, False, len(members), _hits([pod], budgets))
                    for pod in members
                    if pod.priority < priority
                )
        for ancestor, members in together.items():
            groups = {pod.group_key for pod in members}
            composite = self.cache.composite(*ancestor)
            top = max(
                *(self.cache.group_priority(key) for key in groups),
                *(pod.priority for pod in members),
                composite.priority if composite is not None and composite.priority is not None else 0,
            )
            if top < priority:
                units.append(
                    _Unit(
                        members[0].group_key, tuple(members), top, True, 0, _hits(members, budgets), ancestor
                    )
                )
        return units

    def _disrupted_with(self, info: PodGroupInfo) -> tuple[str, str] | None:
        """The highest CompositePodGroup above the group in disruptionMode all, if any."""
        found: tuple[str, str] | None = None
        name, seen = info.parent, set()
        while name and name not in seen:
            seen.add(name)
            composite = self.cache.composite(info.namespace, name)
            if composite is None:
                break
            if composite.disruption_mode == DISRUPTION_MODE_ALL:
                found = composite.key
            name = composite.parent
        return found

    def _violations(self, units: Iterable[_Unit]) -> set[str]:
        taken: Counter[str] = Counter()
        for unit in units:
            taken.update(unit.budget_hits)
        allowed = {f"{b.namespace}/{b.name}": b.disruptions_allowed for b in self.cache.budgets}
        return {name for name, count in taken.items() if count > allowed.get(name, 0)}


def _hits(pods: Iterable[PodInfo], budgets: Sequence[DisruptionBudget]) -> dict[str, int]:
    hits: Counter[str] = Counter()
    for pod in pods:
        for budget in budgets:
            if budget.covers(pod):
                hits[f"{budget.namespace}/{budget.name}"] += 1
    return dict(hits)


def _pods_of(units: Iterable[_Unit]) -> list[PodInfo]:
    return [pod for unit in units for pod in unit.pods]


def _whole_gangs(removed: Sequence[_Unit], units: Sequence[_Unit]) -> list[_Unit]:
    """Replace the members of a gang chosen beyond what it can spare by the whole gang."""
    alone: Counter[GroupKey] = Counter(u.group for u in removed if not u.whole_gang and u.spare)
    over = {key for key, count in alone.items() if count > next(u.spare for u in removed if u.group == key)}
    if not over:
        return list(removed)
    result = [u for u in removed if u.group not in over]
    for key in over:
        members = tuple(pod for u in units if u.group == key for pod in u.pods)
        hits: Counter[str] = Counter()
        for u in units:
            if u.group == key:
                hits.update(u.budget_hits)
        result.append(_Unit(key, members, max(p.priority for p in members), True, 0, dict(hits)))
    return result
