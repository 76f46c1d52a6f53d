"""The composite cycle: a CompositePodGroup's hierarchy (KEP-6012) placed in one cycle, top-down.

A hierarchy is a tree: CompositePodGroups (``CompositeInfo``) are its inner nodes, PodGroups of either
shape its leaves, each naming its parent in ``spec.parentCompositePodGroupName``. Its cycle is run for
the root whichever of its PodGroups is popped, as kube-scheduler queues the root
(``pkg/scheduler/schedule_one_podgroup.go``, KEP-6012 "Recursive Scheduling Cycle Execution"):

- A leaf is placed by the group cycle (``lockstep.scheduler.cycle.GroupCycle``), its own topology
  resolved inside the domain its parent chose (``GroupCycle.scope``). It is *placed whole* when its
  gang reached minCount (a basic PodGroup: when one member is placed).
- A composite with a topology key tries its domains of that level inside its parent's domain, in
  ``best_fit`` order (``lockstep.scheduler.topology``; the room is estimated from its subtree's
  pending members), domains holding placed members of the subtree only; without one, its parent's
  domain. In a domain its children are placed one after the other in name order (upstream sorts by
  creation; lockstep by name, so that the order is the same in ``lockstep plan``), each child seeing
  what its siblings took, without backtracking over siblings (as upstream's Alpha).
- After each child PlacementFeasible is asked of the composite as KEP-6012 defines it: a gang
  composite succeeds once ``minGroupCount`` children are placed whole, and gives the domain up as soon
  as the children left cannot reach it (UnschedulableAndUnresolvable, the siblings not tried). The
  other children are still placed (greedy, as upstream's Alpha). A basic composite succeeds when one
  child is placed. A failed domain releases everything its children reserved; the next is tried.
- A composite already scheduled (``CompositePodGroupInitiallyScheduled`` True, or ``minGroupCount``
  children placed whole before this cycle) has no barrier any more: each child goes on its own.

Binding is each PodGroup's own: its members wait at Permit for its minCount (GangPermit), not for the
whole tree as upstream's Permit does; the tree was placed in one cycle, so a failed binding of one
PodGroup sends that PodGroup, not its siblings, back to the queue.

Cycles, a depth beyond ``MAX_DEPTH`` and a missing parent are found here (``root_of``), as kube-scheduler
finds them at runtime: the PodGroups are refused or wait, told why, naming the field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from lockstep.api.composite_podgroup import MAX_DEPTH
from lockstep.scheduler.cycle import PLACEMENT_PLUGIN, CycleOutcome, GroupCycle, Placement
from lockstep.scheduler.framework import SUCCESS, CompositeInfo, GroupKey, PodGroupInfo, PodInfo, Status
from lockstep.scheduler.topology import (
    Domain,
    DomainOrder,
    DomainTry,
    best_fit,
    domains_of,
    member_slots,
    member_unit,
)
from lockstep.state.cluster import ClusterCache

PARENT_FIELD = "spec.parentCompositePodGroupName"
COMPOSITE_NOT_FOUND = "CompositePodGroupNotFound"
INVALID_HIERARCHY = "InvalidHierarchy"
COMPOSITE_DELETING = "CompositePodGroupDeleting"
COMPOSITE_UNSATISFIED = "MinGroupCountUnsatisfiable"


@dataclass(frozen=True, slots=True)
class Hierarchy:
    """A composite with its children: PodGroups and composites, each sorted by name."""

    composite: CompositeInfo
    groups: tuple[PodGroupInfo, ...]
    children: tuple[Hierarchy, ...]

    @property
    def size(self) -> int:
        return len(self.groups) + len(self.children)

    def leaves(self) -> list[PodGroupInfo]:
        return [*self.groups, *(leaf for child in self.children for leaf in child.leaves())]

    def composites(self) -> list[CompositeInfo]:
        return [self.composite, *(c for child in self.children for c in child.composites())]


@dataclass(frozen=True, slots=True)
class HierarchyProblem:
    """Why a PodGroup's hierarchy cannot be scheduled: its pods are told, naming the field."""

    cause: str  # COMPOSITE_NOT_FOUND (waits), INVALID_HIERARCHY or COMPOSITE_DELETING (refused)
    message: str

    @property
    def waits(self) -> bool:
        return self.cause == COMPOSITE_NOT_FOUND


def root_of(cache: ClusterCache, group: PodGroupInfo) -> CompositeInfo | HierarchyProblem:
    """The root CompositePodGroup of a PodGroup naming a parent, or what is wrong on the way up: a
    missing composite, a cycle of parent links, more than ``MAX_DEPTH`` levels (the PodGroup
    included), a composite being deleted or refused."""
    where = f"PodGroup {group.key}: {PARENT_FIELD}"
    name, seen = group.parent, [group.name]
    chain: list[CompositeInfo] = []
    while True:
        composite = cache.composite(group.namespace, name)
        if composite is None:
            named = f"CompositePodGroup {group.namespace}/{name}"
            via = f" (named by CompositePodGroup {group.namespace}/{chain[-1].name})" if chain else ""
            return HierarchyProblem(
                COMPOSITE_NOT_FOUND, f"{where}: {named}{via} does not exist; waiting for it to be created"
            )
        if composite.name in {c.name for c in chain}:
            loop = " -> ".join([*(c.name for c in chain), composite.name])
            return HierarchyProblem(INVALID_HIERARCHY, f"{where}: the parent links form a cycle: {loop}")
        chain.append(composite)
        if len(chain) + 1 > MAX_DEPTH:
            path = " -> ".join([*seen, *(c.name for c in chain)])
            return HierarchyProblem(
                INVALID_HIERARCHY, f"{where}: the hierarchy is deeper than {MAX_DEPTH} levels: {path}"
            )
        if composite.refusal:
            return HierarchyProblem(INVALID_HIERARCHY, f"{where}: {composite}: {composite.refusal}")
        if composite.terminating:
            return HierarchyProblem(
                COMPOSITE_DELETING, f"{composite} is being deleted: no more of its hierarchy is scheduled"
            )
        if not composite.parent:
            return composite
        name = composite.parent


def hierarchy(cache: ClusterCache, root: CompositeInfo) -> Hierarchy:
    """The tree under ``root`` as the cache shows it (a composite met twice is left out the second time)."""
    seen: set[str] = set()

    def build(composite: CompositeInfo) -> Hierarchy:
        seen.add(composite.name)
        groups, composites = cache.composite_children(composite.namespace, composite.name)
        children = tuple(build(child) for child in composites if child.name not in seen)
        return Hierarchy(composite, tuple(groups), children)

    return build(root)


@dataclass(frozen=True, slots=True)
class CompositeVerdict:
    """What one composite's cycle found, for its CompositePodGroupInitiallyScheduled and explain."""

    composite: CompositeInfo
    status: Status
    placed_whole: int  # children placed whole (before or in this cycle)
    children: int
    topology: tuple[DomainTry, ...] = ()
    invalid: bool = False  # the hierarchy is invalid (a cycle, too deep): reason Invalid


@dataclass(slots=True)
class CompositeOutcome:
    status: Status  # the root's verdict
    outcomes: dict[GroupKey, CycleOutcome]  # each PodGroup's (placements only if the root succeeded)
    verdicts: dict[tuple[str, str], CompositeVerdict]
    placements: list[Placement] = field(default_factory=list)


@dataclass(slots=True)
class _Placed:
    whole: bool
    placements: list[Placement]
    summary: str  # why not placed whole (a child's reason), "" when it was


class CompositeCycle:
    def __init__(self, cache: ClusterCache, cycle: GroupCycle, domain_order: DomainOrder = best_fit) -> None:
        self.cache = cache
        self.cycle = cycle
        self.domain_order = domain_order

    def run(self, tree: Hierarchy, pods_of: Mapping[GroupKey, Sequence[PodInfo]]) -> CompositeOutcome:
        """Place the hierarchy; on the root's failure nothing stays reserved."""
        self._pods_of = pods_of
        self._outcomes: dict[GroupKey, CycleOutcome] = {}
        self._verdicts: dict[tuple[str, str], CompositeVerdict] = {}
        try:
            placed = self._composite(tree, None)
        finally:
            self.cycle.scope = None
        verdict = self._verdicts[tree.composite.key]
        if not placed.whole:
            self._release(placed.placements)
        kept = {id(p) for p in placed.placements} if placed.whole else set()
        for parent in [tree, *_subtrees(tree)]:
            why = self._verdicts.get(parent.composite.key)
            failed = verdict.status if not placed.whole or why is None or why.status.ok else why.status
            for leaf in parent.groups:
                outcome = self._outcomes.get(leaf.key)
                if outcome is None:  # not tried: its siblings could not reach minGroupCount
                    pending = len(self._pods_of.get(leaf.key, ()))
                    total = self.cache.live_member_count(leaf.key) + self.cache.succeeded_count(leaf.key)
                    scheduled = self.cache.satisfying_count(leaf.key)
                    status = Status.unschedulable(PLACEMENT_PLUGIN, COMPOSITE_UNSATISFIED, failed.message)
                    self._outcomes[leaf.key] = CycleOutcome(
                        status, [], [], scheduled, total, leaf.min_count, pending
                    )
                elif any(id(p) not in kept for p in outcome.placements) or (
                    not placed.whole and outcome.status.ok and self._pods_of.get(leaf.key)
                ):
                    self._outcomes[leaf.key] = _failed(outcome, failed)
        status = SUCCESS if placed.whole else verdict.status
        return CompositeOutcome(
            status, self._outcomes, self._verdicts, placed.placements if placed.whole else []
        )

    # ------------------------------------------------------------------ composites

    def _composite(self, tree: Hierarchy, scope: frozenset[str] | None) -> _Placed:
        composite = tree.composite
        before = self._whole_before(tree)
        satisfied = composite.once_scheduled or (composite.is_gang and before >= composite.min_group_count)
        if not composite.topology_keys:
            placed, whole, status = self._children(tree, scope, satisfied)
            if not status.ok:
                status = _named(status, composite)
            self._verdicts[composite.key] = CompositeVerdict(composite, status, whole, tree.size)
            if not placed.whole:
                self._release(placed.placements)
                return _Placed(False, [], status.message)
            return placed
        key = composite.topology_keys[-1]
        pending = [pod for leaf in tree.leaves() for pod in self._pods_of.get(leaf.key, ())]
        domains = self._domains(tree, scope, pending)
        tries: list[DomainTry] = []
        last: tuple[_Placed, int, Status] | None = None
        for domain in domains:
            placed, whole, status = self._children(tree, domain.nodes, satisfied)
            if placed.whole:
                why = f"{whole} of {tree.size} child groups placed whole"
                tries.append(DomainTry(key, False, domain.name, why, True))
                self._verdicts[composite.key] = CompositeVerdict(
                    composite, status, whole, tree.size, tuple(tries)
                )
                return placed
            self._release(placed.placements)
            tries.append(DomainTry(key, False, domain.name, status.message))
            last = (placed, whole, status)
        if not domains:
            message = f"{composite}: no {key} domain has room for its pending members"
            status = Status.unschedulable(PLACEMENT_PLUGIN, COMPOSITE_UNSATISFIED, message)
            whole = before
        else:
            assert last is not None
            whole = last[1]
            message = f"{composite}: no single {key} domain holds its child groups: " + "; ".join(
                t.describe() for t in tries
            )
            status = Status.unschedulable(PLACEMENT_PLUGIN, COMPOSITE_UNSATISFIED, message)
        self._verdicts[composite.key] = CompositeVerdict(composite, status, whole, tree.size, tuple(tries))
        return _Placed(False, [], message)

    def _children(
        self, tree: Hierarchy, scope: frozenset[str] | None, satisfied: bool
    ) -> tuple[_Placed, int, Status]:
        """Place each child in ``scope`` in turn, asking PlacementFeasible of the composite after each."""
        composite = tree.composite
        children: list[PodGroupInfo | Hierarchy] = [*tree.groups, *tree.children]
        children.sort(key=lambda c: c.name if isinstance(c, PodGroupInfo) else c.composite.name)
        placements: list[Placement] = []
        whole = 0
        failures: list[str] = []
        needed = composite.min_group_count if composite.is_gang else 1
        for index, child in enumerate(children):
            placed = (
                self._leaf(child, scope) if isinstance(child, PodGroupInfo) else self._composite(child, scope)
            )
            placements += placed.placements
            if placed.whole:
                whole += 1
            else:
                failures.append(placed.summary)
            remaining = len(children) - index - 1
            if composite.is_gang and not satisfied and whole + remaining < needed:
                break  # UnschedulableAndUnresolvable: the siblings left cannot reach minGroupCount
        if satisfied or whole >= needed:
            return _Placed(True, placements, ""), whole, SUCCESS
        policy = f"minGroupCount {needed}" if composite.is_gang else "a basic composite needs one"
        message = f"{policy}: {whole} of {len(children)} child groups placed whole"
        if failures:
            message += " (" + "; ".join(failures) + ")"
        status = Status.unschedulable(PLACEMENT_PLUGIN, COMPOSITE_UNSATISFIED, message)
        return _Placed(False, placements, message), whole, status

    def _whole_before(self, tree: Hierarchy) -> int:
        """Children placed whole before this cycle (their members bound or assumed)."""
        whole = sum(
            1 for group in tree.groups if self._leaf_whole(group, self.cache.satisfying_count(group.key))
        )
        for child in tree.children:
            done = self._whole_before(child)
            needed = child.composite.min_group_count if child.composite.is_gang else 1
            whole += 1 if child.composite.once_scheduled or done >= needed else 0
        return whole

    def _domains(
        self, tree: Hierarchy, scope: frozenset[str] | None, pending: Sequence[PodInfo]
    ) -> list[Domain]:
        unit = member_unit(pending)
        placed = {
            node
            for leaf in tree.leaves()
            for member in self.cache.members(leaf.key)
            for node in [member.node_name or self.cache.assumed_node(member.uid)]
            if node
        }
        keys = tree.composite.topology_keys
        if scope is None:  # a root: the cluster's domains, kept across cycles
            found = self.cycle.domain_index.domains(keys, unit)
        else:  # inside the parent's domain, of its nodes only
            nodes = [node for name in scope if (node := self.cache.nodes.get(name)) is not None]
            found = domains_of(nodes, keys, {node.name: member_slots(node, unit) for node in nodes})
        wanted = max(len(pending), 1)
        return self.domain_order(found, 1 if pending else 0, wanted, placed)

    # ------------------------------------------------------------------ PodGroups

    def _leaf_whole(self, group: PodGroupInfo, scheduled: int) -> bool:
        if group.is_gang:
            return scheduled >= group.min_count or self.cache.once_satisfied(group.key)
        return scheduled >= 1

    def _leaf(self, group: PodGroupInfo, scope: frozenset[str] | None) -> _Placed:
        pods = self._pods_of.get(group.key, ())
        key = group.key
        scheduled = self.cache.satisfying_count(key)
        total = self.cache.live_member_count(key) + self.cache.succeeded_count(key)
        min_count = group.min_count if group.is_gang else 1
        if not pods or (group.is_gang and total < min_count and not self.cache.once_satisfied(key)):
            if self._leaf_whole(group, scheduled):
                outcome = CycleOutcome(SUCCESS, [], [], scheduled, total, min_count, 0)
                self._outcomes[key] = outcome
                return _Placed(True, [], "")
            message = f"waiting for pods: {total} of minCount {min_count} present"
            status = Status.unschedulable(PLACEMENT_PLUGIN, "TooFewPods", message)
            self._outcomes[key] = CycleOutcome(status, [], [], scheduled, total, min_count, len(pods))
            return _Placed(False, [], f"PodGroup {key}: {message}")
        self.cycle.scope = scope
        try:
            outcome = self.cycle.run(group, pods)
        finally:
            self.cycle.scope = None
        self._outcomes[key] = outcome
        if outcome.status.ok and self._leaf_whole(group, outcome.scheduled):
            return _Placed(True, list(outcome.placements), "")
        if outcome.status.ok:  # a basic group none of whose members fit
            self._release(outcome.placements)
            first = outcome.diagnoses[0] if outcome.diagnoses else None
            why = f"{first.pod}: {first.message}" if first is not None else "no member placed"
            status = Status.unschedulable(PLACEMENT_PLUGIN, "Unschedulable", why)
            self._outcomes[key] = dataclasses.replace(outcome, status=status, placements=[])
            return _Placed(False, [], f"PodGroup {key}: {why}")
        return _Placed(False, [], f"PodGroup {key}: {outcome.status.message}")

    def _release(self, placements: Sequence[Placement]) -> None:
        for placement in reversed(placements):
            self.cycle.release(placement)


def _named(status: Status, composite: CompositeInfo) -> Status:
    return dataclasses.replace(status, reasons=tuple(f"{composite}: {r}" for r in status.reasons))


def _subtrees(tree: Hierarchy) -> list[Hierarchy]:
    return [sub for child in tree.children for sub in (child, *_subtrees(child))]


def _failed(outcome: CycleOutcome, root: Status) -> CycleOutcome:
    """A PodGroup's outcome once its hierarchy failed: nothing of it is placed, and it says why."""
    status = outcome.status
    if status.ok:
        status = Status.unschedulable(PLACEMENT_PLUGIN, root.cause or COMPOSITE_UNSATISFIED, root.message)
    else:
        status = dataclasses.replace(status, reasons=(*status.reasons, root.message))
    unplaced = outcome.unplaced + len(outcome.placements)
    return dataclasses.replace(
        outcome,
        status=status,
        placements=[],
        scheduled=outcome.scheduled - len(outcome.placements),
        unplaced=unplaced,
    )
