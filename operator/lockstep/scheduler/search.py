"""Joint placement: a depth-first search over the members' nodes and device choices, run when the
greedy group cycle (each member on its best node in turn, nobody reconsidering) leaves a gang
Unschedulable although a placement may exist (upstream #138765: an earlier member's node or devices
block a later member).

Members are taken in the cycle's order. For each, the search evaluates candidate nodes as the cycle
does (preferred nodes first; the first ``feasible_nodes_to_find`` feasible ones, best score first)
and, on each node, every way a ChoicesPlugin offers to place it there (DynamicResources: which
devices), reserving as the cycle does. When a later member finds no node, the search releases the
latest reservation and tries the next choice. A member may be left out while minCount can still be
met; once minCount is met the rest are placed greedily.

Members that are interchangeable (same requests, node selection, tolerations, placement rules and
claim sources) are placed in node-name order, which prunes the permutations of one solution.

The budget counts node evaluations (each run of the Filter plugins on a node, and each Reserve): when
it runs out the search stops and says so, naming the setting (``joint_search_budget``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockstep.scheduler.framework import (
    CYCLE_PODS,
    PLACEMENT_CHOICE,
    CycleState,
    FilterPlugin,
    NodeInfo,
    PodGroupInfo,
    PodInfo,
)
from lockstep.scheduler.records import PodDiagnosis
from lockstep.scheduler.topology import member_slots, member_unit

if TYPE_CHECKING:
    from lockstep.scheduler.cycle import GroupCycle, Placement

DEFAULT_BUDGET = 5000
MAX_CHOICES_PER_NODE = 16
BUDGET_SETTING = "joint_search_budget"  # lockstep.config.Settings; flag --joint-search-budget
_SKIPPED = (1, "")  # the order key of a member left out: after every node


@dataclass(frozen=True, slots=True)
class SearchResult:
    found: bool
    evaluations: int  # node evaluations spent
    exhausted: bool  # the budget ran out before the search space did
    budget: int

    @property
    def message(self) -> str:
        if self.found:
            return f"found by joint search ({self.evaluations} node evaluations)"
        if self.exhausted:
            return (
                f"joint search gave up: its budget of {self.budget} node evaluations ({BUDGET_SETTING}, "
                f"--{BUDGET_SETTING.replace('_', '-')}) ran out before it found a placement"
            )
        return f"joint search found no placement ({self.evaluations} node evaluations)"


class _Exhausted(Exception):
    pass


def _signature(pod: PodInfo) -> str:
    """Pods with equal signatures are interchangeable for placement."""
    return repr(
        (
            sorted(pod.requests.items()),
            sorted(pod.node_selector.items()),
            pod.required_node_affinity,
            pod.tolerations,
            pod.placement,
            tuple((c.name, c.resource_claim_template_name) for c in pod.claims),
            pod.priority,
        )
    )


class JointSearch:
    def __init__(self, cycle: GroupCycle, group: PodGroupInfo, pods: Sequence[PodInfo], budget: int) -> None:
        self.cycle = cycle
        self.group = group
        self.pods = list(pods)
        self.budget = budget
        self.evaluations = 0
        self.exhausted = False
        self._group_data: dict[str, object] = {CYCLE_PODS: tuple(pods)}
        signatures = [_signature(pod) for pod in self.pods]
        # whether member i is interchangeable with member i-1
        self._like_previous = [i > 0 and signatures[i] == signatures[i - 1] for i in range(len(self.pods))]

    def result(self, found: bool) -> SearchResult:
        return SearchResult(found, self.evaluations, self.exhausted, self.budget)

    def run(self) -> list[Placement] | None:
        """A placement of at least minCount members in the cycle's current domain, reserved, or None
        (nothing left reserved)."""
        cache = self.cycle.cache
        self._scheduled = cache.scheduled_count(self.group.key)
        if self._room() < self.group.min_count - self._scheduled:
            return None
        placements: list[Placement] = []
        try:
            if self._place(0, 0, _SKIPPED, placements):
                return placements
        except _Exhausted:
            self.exhausted = True
        for placement in reversed(placements):
            self.cycle.release(placement)
        return None

    def _room(self) -> int:
        """An upper bound on the members the cycle's domain can take: the member slots
        (``lockstep.scheduler.topology.member_slots``) of every node some member passes the filters
        of on its own. Below the members needed, no search can succeed."""
        cycle = self.cycle
        unit = member_unit(self.pods)
        usable: set[str] = set()
        for index, pod in enumerate(self.pods):
            if self._like_previous[index]:
                continue
            state = CycleState(self.group, self._group_data)
            filters = cycle.pre_filter(state, pod)
            if isinstance(filters, PodDiagnosis):
                continue
            for name in cycle.domain_nodes():
                node = cycle.cache.nodes[name]
                if name not in usable and all(p.filter(state, pod, node).ok for p in filters):
                    usable.add(name)
        return sum(member_slots(cycle.cache.nodes[name], unit) for name in usable)

    def _spend(self) -> None:
        self.evaluations += 1
        if self.evaluations > self.budget:
            raise _Exhausted

    def _place(self, index: int, placed: int, previous: tuple[int, str], placements: list[Placement]) -> bool:
        pods, min_count = self.pods, self.group.min_count
        if self._scheduled + placed >= min_count:
            self._place_rest(index, placements)
            return True
        left = len(pods) - index
        if self._scheduled + placed + left < min_count:
            return False
        pod = pods[index]
        after = previous if self._like_previous[index] else (0, "")
        if after != _SKIPPED:
            state = CycleState(self.group, self._group_data)
            filters = self.cycle.pre_filter(state, pod)
            if not isinstance(filters, PodDiagnosis):
                choices = any(p.has_choices(state, pod) for p in self.cycle.profile.choices)
                for node in self._feasible(state, pod, filters, after[1]):
                    for choice in range(MAX_CHOICES_PER_NODE if choices else 1):
                        if choice:
                            state.write(PLACEMENT_CHOICE, choice)
                            if not self._passes(state, pod, node, filters):
                                break
                        self._spend()
                        placement, _ = self.cycle.reserve(state, pod, node)
                        if placement is None:
                            continue
                        placements.append(placement)
                        if self._place(index + 1, placed + 1, (0, node.name), placements):
                            return True
                        placements.pop()
                        self.cycle.release(placement)
                    state.delete(PLACEMENT_CHOICE)
        if self._scheduled + placed + left - 1 < min_count:
            return False
        return self._place(index + 1, placed, _SKIPPED, placements)  # leave this member out

    def _passes(self, state: CycleState, pod: PodInfo, node: NodeInfo, filters: list[FilterPlugin]) -> bool:
        self._spend()
        return all(plugin.filter(state, pod, node).ok for plugin in filters)

    def _feasible(
        self, state: CycleState, pod: PodInfo, filters: list[FilterPlugin], at_least: str
    ) -> list[NodeInfo]:
        cycle = self.cycle
        nodes = cycle.cache.nodes
        feasible: list[NodeInfo] = []
        for name in cycle._candidates(state, pod):
            if name < at_least:
                continue
            node = nodes.get(name)
            if node is None or not self._passes(state, pod, node, filters):
                continue
            feasible.append(node)
            if len(feasible) >= cycle.feasible_nodes_to_find:
                break
        return cycle.ranked(state, pod, feasible)

    def _place_rest(self, index: int, placements: list[Placement]) -> None:
        """minCount is met: the members left go greedily, as the cycle places them."""
        for pod in self.pods[index:]:
            placement, _ = self.cycle._place(CycleState(self.group, self._group_data), pod)
            if placement is not None:
                placements.append(placement)
