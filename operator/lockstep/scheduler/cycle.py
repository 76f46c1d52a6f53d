"""The group scheduling cycle: place a group's unscheduled pods on one snapshot, all or nothing.

For each pod, in queue order: PreFilter once, Filter on candidate nodes until enough feasible nodes
are found (indexes choose the candidates; when none is feasible every node is checked, which also
yields the per-node diagnosis), Score, then Reserve (assume the pod in the cache, then the Reserve
plugins). After each pod PlacementFeasible (docs/architecture.md behaviour 2) decides whether to go on.
The decision is atomic: on failure every pod reserved in the cycle is unreserved and forgotten.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from lockstep.scheduler.framework import (
    CYCLE_PODS,
    SUCCESS,
    Code,
    CycleState,
    FilterPlugin,
    NodeInfo,
    PlacementProgress,
    PodGroupInfo,
    PodInfo,
    RejectionSummaryPlugin,
    ReservePlugin,
    Status,
)
from lockstep.scheduler.group_checks import (
    MIN_RESOURCES,
    min_resources_status,
    task_counts,
    task_minimums_status,
)
from lockstep.scheduler.profile import Profile
from lockstep.scheduler.records import SAMPLE_NODES, PluginRejections, PodDiagnosis
from lockstep.scheduler.search import DEFAULT_BUDGET, JointSearch, SearchResult
from lockstep.scheduler.topology import (
    UNBOUNDED,
    Domain,
    DomainIndex,
    DomainOrder,
    DomainTry,
    best_fit,
    domains_of,
    levels,
    member_slots,
    member_unit,
    why_chosen,
)
from lockstep.state.cluster import ClusterCache

log = logging.getLogger(__name__)

PLACEMENT_PLUGIN = "GangScheduling"
SHOWN_SMALL_DOMAINS = 8  # domains too small for the group named one by one in the status, per level
SMALL_DOMAIN_SHARE = 16  # a domain of fewer than 1/16 of the nodes has its candidates ordered directly


def placement_feasible(progress: PlacementProgress, is_gang: bool = True) -> Status:
    """docs/architecture.md behaviour 2 with S scheduled (bound or assumed), R remaining, M minCount.

    S >= M: Success. S < M <= S+R: Wait. S+R < M: Unschedulable. Fewer than M pods exist at all:
    UnschedulableAndUnresolvable. A basic (non-gang) group is always Success."""
    if not is_gang:
        return SUCCESS
    s, r, m = progress.scheduled, progress.remaining, progress.min_count
    if progress.total_pods < m:
        return Status.unresolvable(
            PLACEMENT_PLUGIN,
            "TooFewPods",
            f"minCount ({m}) cannot be satisfied: only {progress.total_pods} pods exist",
        )
    if s >= m:
        return SUCCESS
    if s + r < m:
        return Status.unschedulable(
            PLACEMENT_PLUGIN,
            "MinCountUnsatisfiable",
            f"minCount ({m}) cannot be satisfied: {s} scheduled, {r} remaining",
        )
    return Status.wait(PLACEMENT_PLUGIN, f"minCount ({m}) is not yet satisfied: {s} scheduled, {r} remaining")


@dataclass(slots=True)
class Placement:
    """A pod reserved on a node by a successful cycle, handed to its binding cycle."""

    pod: PodInfo
    node_name: str
    state: CycleState
    reserved: list[ReservePlugin] = field(default_factory=list)


@dataclass(slots=True)
class CycleOutcome:
    # The group's verdict: Success, Wait (a member waits for a claim being created), Unschedulable,
    # UnschedulableAndUnresolvable, Error.
    status: Status
    placements: list[Placement]  # empty unless the verdict is Success
    diagnoses: list[PodDiagnosis]
    scheduled: int  # S after the cycle (bound or assumed members)
    total_pods: int
    min_count: int
    unplaced: int  # pods of the cycle left unscheduled
    # topology: the domains considered, per level, innermost first; the chosen one (if any) last
    topology: tuple[DomainTry, ...] = ()

    @property
    def chosen_domain(self) -> DomainTry | None:
        last = self.topology[-1] if self.topology else None
        return last if last is not None and last.chosen else None


class GroupCycle:
    def __init__(
        self,
        cache: ClusterCache,
        profile: Profile,
        feasible_nodes_to_find: int,
        spread: bool,
        *,
        search_budget: int = DEFAULT_BUDGET,
        domain_order: DomainOrder = best_fit,
    ) -> None:
        self.cache = cache
        self.profile = profile
        self.feasible_nodes_to_find = feasible_nodes_to_find
        self.spread = spread  # least-allocated: try the emptiest nodes first
        self.search_budget = search_budget  # node evaluations of one joint search; 0: no search
        self.domain_order = domain_order
        self.domain_index = DomainIndex(cache)
        # Told of every joint search (metrics).
        self.on_search: Callable[[SearchResult], None] | None = None
        # The nodes a composite's domain confines the group to (lockstep.scheduler.composite; None:
        # every node): its own topology levels are resolved inside them.
        self.scope: frozenset[str] | None = None
        # Topology: the nodes of the one domain the cycle may use (None: every node).
        self._domain: frozenset[str] | None = None

    def run(self, group: PodGroupInfo | None, pods: Sequence[PodInfo]) -> CycleOutcome:
        self._domain = self.scope
        try:
            if group is None or not pods or not (group.topology_keys or group.preferred_topology_keys):
                outcome = self._run(group, pods)
                if not outcome.status.ok and self._search_may_help(group, pods, outcome):
                    assert group is not None
                    found, note = self._search(group, pods, [None])
                    return found if found is not None else _noted(outcome, note)
                return outcome
            return self._run_in_domains(group, pods)
        finally:
            self._domain = None

    def _run_in_domains(self, group: PodGroupInfo, pods: Sequence[PodInfo]) -> CycleOutcome:
        """Topology (``lockstep.scheduler.topology``): the levels innermost first, each level's
        domains in ``domain_order``; the first domain where the whole cycle succeeds wins. When none
        of the last level (the required one, or the whole cluster) does, the joint search looks in
        its domains; a required level none of whose domains fits is Unschedulable, naming them."""
        nodes = self.cache.nodes
        if self.scope is not None:
            nodes = {name: nodes[name] for name in self.scope if name in nodes}
        unit = member_unit(pods)
        placed = {
            node
            for member in self.cache.members(group.key)
            for node in [member.node_name or self.cache.assumed_node(member.uid)]
            if node and node in nodes
        }
        scheduled = self.cache.satisfying_count(group.key)
        needed = max(group.min_count - scheduled, 1) if group.is_gang else 1
        wanted = len(pods)
        tries: list[DomainTry] = []
        first: CycleOutcome | None = None
        last: list[Domain] = []
        last_tries: list[DomainTry] = []
        last_count = 0
        plan = levels(group.topology_keys, group.preferred_topology_keys)
        by_level: list[list[Domain]] = []
        above: dict[tuple[tuple[str, str], ...], int] = {}
        # Inside a composite's domain the domains are of its nodes only (a rack label may repeat across
        # blocks); the index knows the whole cluster's.
        scoped = (
            {name: member_slots(node, unit) for name, node in nodes.items()}
            if self.scope is not None
            else None
        )
        for level in reversed(plan):  # outermost first, for each domain's room in the level above
            if not level.keys:
                found = []
            elif scoped is not None:
                found = domains_of(nodes.values(), level.keys, scoped, above)
            else:
                found = self.domain_index.domains(level.keys, unit, above)
            by_level.append(found)
            above = {d.labels: d.slots for d in found}
        by_level.reverse()
        try:
            for level, found in zip(plan, by_level, strict=True):
                if not level.keys:  # no required level: the whole cluster
                    found = [Domain((), frozenset(), UNBOUNDED, 0)]
                ranked = order = self.domain_order(found, needed, wanted, placed)
                # Members placed already pin the group to the domain holding them (a required
                # constraint: its replacements go there or nowhere).
                holding = [d for d in found if d.nodes.issuperset(placed)] if placed and level.keys else found
                if not level.preferred and not order and holding:
                    # None has room by the estimate: run the roomiest, for what its nodes lack.
                    order = [max(holding, key=lambda d: (d.slots, d.free_cpu))]
                level_tries: list[DomainTry] = []
                for domain in order:
                    self._domain = domain.nodes if level.keys else self.scope
                    outcome = self._run(group, pods)
                    code = outcome.status.code
                    if outcome.status.ok:
                        why = why_chosen(domain, ranked, wanted, placed, self.domain_order)
                        if tries:
                            missed = ", ".join(dict.fromkeys(t.level for t in tries))
                            why += f"; no {missed} domain could take the group"
                        chosen = DomainTry(level.key, level.preferred, domain.name, why, True)
                        return dataclasses.replace(outcome, topology=(*tries, *level_tries, chosen))
                    if code in (Code.ERROR, Code.WAIT) or outcome.status.cause == "TooFewPods":
                        return outcome  # no other domain can help: the group waits, or failed
                    first = first or outcome
                    level_tries.append(
                        DomainTry(level.key, level.preferred, domain.name, outcome.status.message)
                    )
                tried_ids = {id(d) for d in order}
                small = sorted((d for d in found if id(d) not in tried_ids), key=lambda d: (-d.slots, d.name))
                if small:
                    shown = small if len(small) <= SHOWN_SMALL_DOMAINS else small[: SHOWN_SMALL_DOMAINS - 1]
                    for domain in shown:
                        room = f"too small: room for at most {domain.slots} of the {needed} members needed"
                        level_tries.append(DomainTry(level.key, level.preferred, domain.name, room))
                    if len(shown) < len(small):
                        most = small[len(shown)].slots
                        level_tries.append(
                            DomainTry(
                                level.key,
                                level.preferred,
                                f"{len(small) - len(shown)} more domains",
                                f"too small: room for at most {most} of the {needed} members needed",
                            )
                        )
                tries += level_tries
                if not level.preferred:
                    last, last_tries, last_count = order, level_tries, len(order) + len(small)
        finally:
            self._domain = self.scope
        required = group.topology_keys
        note = ""
        roomy = [d for d in last if d.slots >= needed]
        if first is not None and roomy and self._search_may_help(group, pods, first):
            searched, note = self._search(group, pods, [d.nodes if required else None for d in roomy])
            if searched is not None:
                where = self._domain_of(searched, last) if required else None
                picked = () if where is None else (DomainTry(where[0], False, where[1], note, True),)
                return dataclasses.replace(searched, topology=(*tries, *picked))
        if not required:
            assert first is not None
            return dataclasses.replace(_noted(first, note), topology=tuple(tries))
        if not last_tries:
            labels = "labels" if len(required) > 1 else "label"
            message = f"no single domain fits: no node has the {labels} {', '.join(required)}"
        else:
            message = f"no single domain fits: {last_count} domains tried: " + "; ".join(
                t.describe() for t in last_tries
            )
        cause = "NoSingleDomainFits"
        if placed and len(last) == 1 and last[0].nodes.issuperset(placed):
            # Members placed already pin the group to their domain: its new members (replacements of
            # lost ones, members beyond minCount) go there or nowhere.
            cause = "SurvivorsDomainFull"
            message = (
                f"the surviving members are in {last[0].name}, which cannot hold the {len(pods)} new "
                f"members: {message}"
            )
        status = Status.unschedulable(PLACEMENT_PLUGIN, cause, message)
        total = self.cache.live_member_count(group.key) + self.cache.succeeded_count(group.key)
        diagnoses = first.diagnoses if first is not None else []
        outcome = CycleOutcome(status, [], diagnoses, scheduled, total, group.min_count, len(pods))
        return dataclasses.replace(_noted(outcome, note), topology=tuple(tries))

    @staticmethod
    def _domain_of(outcome: CycleOutcome, domains: Sequence[Domain]) -> tuple[str, str] | None:
        """The (level key, name) of the domain holding the outcome's placements."""
        nodes = {p.node_name for p in outcome.placements}
        for domain in domains:
            if nodes <= domain.nodes:
                return domain.labels[-1][0], domain.name
        return None

    def _search_may_help(
        self, group: PodGroupInfo | None, pods: Sequence[PodInfo], outcome: CycleOutcome
    ) -> bool:
        """Joint placement runs only for a gang of several pods that greedy placement left
        Unschedulable, when every failed member was rejected for reasons other members' choices
        can change (a member rejected as unresolvable everywhere cannot be helped)."""
        if self.search_budget <= 0 or group is None or not group.is_gang or len(pods) < 2:
            return False
        status = outcome.status
        if status.code is not Code.UNSCHEDULABLE or status.cause == "TooFewPods":
            return False
        # Filter rejected every node for them: another member's node or devices may be why.
        return all(d.code is Code.UNSCHEDULABLE and d.stage == "Filter" for d in outcome.diagnoses)

    def _search(
        self, group: PodGroupInfo, pods: Sequence[PodInfo], domains: Sequence[frozenset[str] | None]
    ) -> tuple[CycleOutcome | None, str]:
        """The joint search in each domain in turn, within one budget: a Success outcome, or None and
        what the search found, for the status."""
        search = JointSearch(self, group, pods, self.search_budget)
        scheduled = self.cache.satisfying_count(group.key)
        total = self.cache.live_member_count(group.key) + self.cache.succeeded_count(group.key)
        try:
            for domain in domains:
                self._domain = domain if domain is not None else self.scope
                placements = search.run()
                if placements is not None:
                    result = search.result(found=True)
                    if self.on_search is not None:
                        self.on_search(result)
                    outcome = CycleOutcome(
                        SUCCESS,
                        placements,
                        [],
                        scheduled + len(placements),
                        total,
                        group.min_count,
                        len(pods) - len(placements),
                    )
                    return outcome, result.message
                if search.exhausted:
                    break
        finally:
            self._domain = self.scope
        result = search.result(found=False)
        if self.on_search is not None:
            self.on_search(result)
        return None, result.message

    def _run(self, group: PodGroupInfo | None, pods: Sequence[PodInfo]) -> CycleOutcome:
        key = pods[0].group_key if pods else (group.key if group is not None else None)
        is_gang = group is not None and group.is_gang
        min_count = group.min_count if is_gang and group is not None else 1
        scheduled = self.cache.satisfying_count(key) if key is not None else 0
        total = (
            self.cache.live_member_count(key) + self.cache.succeeded_count(key)
            if key is not None
            else len(pods)
        )
        # OnceSatisfied after the gang reached minCount: no barrier, each member placed as it fits
        floor = min_count if key is not None and is_gang and self.cache.once_satisfied(key) else 0
        remaining = len(pods)
        placements: list[Placement] = []
        diagnoses: list[PodDiagnosis] = []

        def progress() -> PlacementProgress:
            return PlacementProgress(max(scheduled, floor), remaining, min_count, max(total, floor))

        status = placement_feasible(progress(), is_gang)
        if status.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
            return CycleOutcome(status, [], [], scheduled, total, min_count, len(pods))
        refused = min_resources_status(self.cache, group) if group is not None and pods else None
        if refused is not None:
            why = PodDiagnosis(pods[0].key, refused.code, refused.message, 0, _counter({MIN_RESOURCES: 1}))
            return CycleOutcome(refused, [], [why], scheduled, total, min_count, len(pods))
        group_data: dict[str, object] = {CYCLE_PODS: tuple(pods)}
        for pod in pods:
            state = CycleState(group, group_data)
            try:
                placement, diagnosis = self._place(state, pod)
            except Exception as exc:  # a plugin raised: the cycle fails, the scheduler goes on
                log.exception("scheduling pod %s raised", pod.key)
                status = Status.error(PLACEMENT_PLUGIN, f"pod {pod.key}: {type(exc).__name__}: {exc}")
                break
            remaining -= 1
            if placement is not None:
                placements.append(placement)
                scheduled += 1
            elif diagnosis is not None:
                diagnoses.append(diagnosis)
                if diagnosis.code is Code.ERROR:
                    status = Status.error(PLACEMENT_PLUGIN, f"pod {pod.key}: {diagnosis.message}")
                    break
            status = placement_feasible(progress(), is_gang)
            if status.code in (Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE):
                break
        waiting = next((d for d in diagnoses if d.code is Code.WAIT), None)
        if waiting is not None and not status.ok and status.code is not Code.ERROR:
            # A member waits for something on its way (a claim being created): so does the group.
            status = Status.wait(PLACEMENT_PLUGIN, f"{waiting.pod}: {waiting.message}")
        elif status.code is Code.WAIT:  # the last pod was evaluated and minCount is still not met
            status = Status.unschedulable(PLACEMENT_PLUGIN, "MinCountUnsatisfiable", *status.reasons)
        if status.ok and group is not None and group.min_task_members and key is not None:
            placed = task_counts(
                m
                for m in self.cache.members(key)
                if not m.deleting and (m.node_name or self.cache.is_assumed(m.uid))
            )
            status = task_minimums_status(group, placed, "placed") or status
        if not status.ok:
            for placement in reversed(placements):
                self.release(placement)
            scheduled -= len(placements)
            placements = []
        return CycleOutcome(
            status, placements, diagnoses, scheduled, total, min_count, len(pods) - len(placements)
        )

    def release(self, placement: Placement, report_freed: bool = False) -> None:
        """Unreserve (every Reserve plugin that reserved, in reverse) and forget the assumption;
        ``report_freed`` as for ``ClusterCache.forget``."""
        for plugin in reversed(placement.reserved):
            try:
                plugin.unreserve(placement.state, placement.pod, placement.node_name)
            except Exception:  # the other plugins and the cache must still be released
                log.exception("Unreserve of %s for pod %s raised", plugin.name, placement.pod.key)
        placement.reserved.clear()
        self.cache.forget(placement.pod.uid, report_freed)

    # ------------------------------------------------------------------ one pod

    def _place(self, state: CycleState, pod: PodInfo) -> tuple[Placement | None, PodDiagnosis | None]:
        filters = self.pre_filter(state, pod)
        if isinstance(filters, PodDiagnosis):
            return None, filters
        feasible = self._find_feasible(state, pod, filters)
        if not feasible:
            feasible, diagnosis = self._diagnose(state, pod, filters)
            if not feasible:
                return None, diagnosis
        return self.reserve(state, pod, self._best(state, pod, feasible))

    def pre_filter(self, state: CycleState, pod: PodInfo) -> list[FilterPlugin] | PodDiagnosis:
        """Every PreFilter: the Filter plugins to run for the pod (those that did not skip it), or
        why it was refused."""
        skipped: set[str] = set()
        for pre_filter in self.profile.pre_filter:
            status = pre_filter.pre_filter(state, pod)
            if status.code is Code.SKIP:
                skipped.add(pre_filter.name)
            elif not status.ok:
                return self._prefilter_rejection(pod, status)
        return [p for p in self.profile.filter if p.name not in skipped]

    def reserve(
        self, state: CycleState, pod: PodInfo, node: NodeInfo
    ) -> tuple[Placement | None, PodDiagnosis | None]:
        """Assume the pod on the node and run every Reserve plugin; on failure nothing is left reserved."""
        placement = Placement(pod, node.name, state)
        self.cache.assume(pod, node.name)
        for reserve in self.profile.reserve:
            placement.reserved.append(reserve)  # upstream unreserves a plugin whose reserve failed too
            try:
                status = reserve.reserve(state, pod, node.name)
            except Exception:
                self.release(placement)
                raise
            if not status.ok:
                self.release(placement)
                code = status.code if status.code is Code.ERROR else Code.UNSCHEDULABLE
                return None, PodDiagnosis(
                    pod.key,
                    code,
                    f"Reserve on {node.name} failed: {status.message}",
                    1,
                    _counter({status.cause or status.plugin: 1}),
                    (PluginRejections(status.plugin, 1, (node.name,)),),
                    "Reserve",
                )
        return placement, None

    def domain_nodes(self) -> Collection[str]:
        """The nodes the cycle may use: its domain's, or every node."""
        return self._domain if self._domain is not None else self.cache.nodes.keys()

    def _candidates(self, state: CycleState, pod: PodInfo) -> Iterator[str]:
        """Node names to evaluate, each once: preferred nodes first, then the rest, restricted to
        what CandidateNodes plugins allow; unrestricted, in free-cpu order."""
        narrowed: set[str] | None = None
        for plugin in self.profile.candidate_nodes:
            names = plugin.candidate_nodes(state, pod)
            if names is not None:
                narrowed = set(names) if narrowed is None else narrowed & set(names)
        seen: set[str] = set()
        for preferring in self.profile.preferred_nodes:
            for name in preferring.preferred_nodes(state, pod) or ():
                if name in seen or (self._domain is not None and name not in self._domain):
                    continue
                if narrowed is None or name in narrowed:
                    seen.add(name)
                    yield name
        domain = self._domain
        rest: Iterable[str]
        if narrowed is not None:
            rest = narrowed
        elif domain is not None and len(domain) * SMALL_DOMAIN_SHARE < len(self.cache.nodes):
            # a few nodes of many (a rack): ordered directly, not found among all of them
            rest = self.cache.order_by_free_cpu(domain, pod.requests.get("cpu", 0), self.spread)
            domain = None
        else:
            rest = self.cache.nodes_by_free_cpu(pod.requests.get("cpu", 0), self.spread)
        if seen:
            rest = (name for name in rest if name not in seen)
        yield from rest if domain is None else (name for name in rest if name in domain)

    def _find_feasible(self, state: CycleState, pod: PodInfo, filters: list[FilterPlugin]) -> list[NodeInfo]:
        node_named = self.cache.nodes.get
        wanted = self.feasible_nodes_to_find
        feasible: list[NodeInfo] = []
        cpu = pod.requests.get("cpu", 0)
        memory = pod.requests.get("memory", 0)
        checks = [plugin.filter for plugin in filters]
        success = Code.SUCCESS
        for name in self._candidates(state, pod):
            node = node_named(name)
            if node is None:
                continue
            # Candidate selection, not a verdict: skip nodes plainly short of cpu or memory without
            # running the filters. If no node is found this way, _diagnose runs every filter.
            free, used = node.allocatable, node.requested
            if (
                free.get("cpu", 0) - used.get("cpu", 0) < cpu
                or free.get("memory", 0) - used.get("memory", 0) < memory
            ):
                continue
            for check in checks:
                if check(state, pod, node).code is not success:
                    break
            else:
                feasible.append(node)
                if len(feasible) >= wanted:
                    break
        return feasible

    def _diagnose(
        self, state: CycleState, pod: PodInfo, filters: list[FilterPlugin]
    ) -> tuple[list[NodeInfo], PodDiagnosis]:
        """Run every filter on every node: the feasible ones (normally none) and why the others fail."""
        feasible: list[NodeInfo] = []
        causes: Counter[str] = Counter()
        worded: Counter[str] = Counter()  # as kube-scheduler words them, for the message
        by_plugin: dict[str, list[str]] = {}
        plugin_counts: Counter[str] = Counter()
        resolvable = False
        error: Status | None = None
        nodes = [n for n in self.cache.nodes.values() if self._domain is None or n.name in self._domain]
        for node in nodes:
            for plugin in filters:
                status = plugin.filter(state, pod, node)
                if status.code is Code.SUCCESS:
                    continue
                if status.code is Code.ERROR:
                    error = status
                resolvable = resolvable or status.code is Code.UNSCHEDULABLE
                causes[status.cause or status.plugin] += 1
                worded[status.counted_as] += 1
                plugin_counts[status.plugin] += 1
                samples = by_plugin.setdefault(status.plugin, [])
                if len(samples) < SAMPLE_NODES:
                    samples.append(node.name)
                break
            else:
                feasible.append(node)
        total = len(nodes)
        if error is not None:
            code = Code.ERROR
            message = error.message
        else:
            code = Code.UNSCHEDULABLE if resolvable or total == 0 else Code.UNSCHEDULABLE_AND_UNRESOLVABLE
            detail = ", ".join(
                f"{count} {reason}" for reason, count in sorted(worded.items(), key=lambda c: (-c[1], c[0]))
            )
            message = f"0/{total} nodes are available" + (f": {detail}." if detail else ".")
            for plugin in filters:
                if plugin.name in by_plugin and isinstance(plugin, RejectionSummaryPlugin):
                    summary = plugin.rejection_summary(state, pod)
                    if summary:
                        message += f" {plugin.name}: {summary}."
        diagnosis = PodDiagnosis(
            pod.key,
            code,
            message,
            total,
            _counter(causes),
            tuple(
                PluginRejections(p, plugin_counts[p], tuple(names)) for p, names in sorted(by_plugin.items())
            ),
        )
        return feasible, diagnosis

    def _prefilter_rejection(self, pod: PodInfo, status: Status) -> PodDiagnosis:
        total = len(self.cache.nodes)
        code = (
            status.code
            if status.code in (Code.ERROR, Code.UNSCHEDULABLE_AND_UNRESOLVABLE, Code.WAIT)
            else Code.UNSCHEDULABLE
        )
        return PodDiagnosis(
            pod.key,
            code,
            f"PreFilter {status.plugin}: {status.message}",
            0,
            _counter({status.cause or status.plugin: total}),
            (PluginRejections(status.plugin, total, ()),),
            "PreFilter",
        )

    def _best(self, state: CycleState, pod: PodInfo, feasible: list[NodeInfo]) -> NodeInfo:
        if len(feasible) == 1 or not self.profile.score:
            return feasible[0]
        best, best_score = feasible[0], -1
        for node, score in zip(feasible, self._scores(state, pod, feasible), strict=True):
            if score > best_score or (score == best_score and node.name < best.name):
                best, best_score = node, score
        return best

    def ranked(self, state: CycleState, pod: PodInfo, feasible: list[NodeInfo]) -> list[NodeInfo]:
        """The feasible nodes best first, as ``_best`` would choose them one after another."""
        if len(feasible) < 2 or not self.profile.score:
            return feasible
        scores = self._scores(state, pod, feasible)
        order = sorted(range(len(feasible)), key=lambda i: (-scores[i], feasible[i].name))
        return [feasible[i] for i in order]

    def _scores(self, state: CycleState, pod: PodInfo, feasible: list[NodeInfo]) -> list[int]:
        profile = self.profile
        skipped = {p.name for p in profile.pre_score if p.pre_score(state, pod, feasible).code is Code.SKIP}
        normalizers = profile.normalize_score
        batched = profile.batch_score
        totals: list[int] | None = None
        for plugin, weight in profile.score:
            name = plugin.name
            if name in skipped:
                continue
            batch = batched.get(name)
            if batch is not None:
                scores = batch.score_nodes(state, pod, feasible)
            else:
                score_of = plugin.score
                scores = [score_of(state, pod, node) for node in feasible]
            normalizer = normalizers.get(name)
            if normalizer is not None:
                normalizer.normalize_scores(state, pod, scores)
            if weight != 1:
                scores = [weight * score for score in scores]
            totals = scores if totals is None else [a + b for a, b in zip(totals, scores, strict=True)]
        return totals if totals is not None else [0] * len(feasible)  # every scorer skipped: a tie


def _noted(outcome: CycleOutcome, note: str) -> CycleOutcome:
    """The outcome with what the joint search found added to its verdict."""
    if not note:
        return outcome
    status = dataclasses.replace(outcome.status, reasons=(*outcome.status.reasons, note))
    return dataclasses.replace(outcome, status=status)


def _counter(causes: dict[str, int] | Counter[str]) -> Mapping[str, int]:
    return MappingProxyType(dict(causes))
