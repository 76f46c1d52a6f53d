"""PodTopologySpread, as kube-scheduler's plugin of that name (pkg/scheduler/framework/plugins/
podtopologyspread): ``DoNotSchedule`` constraints filter, ``ScheduleAnyway`` ones score.

Filter: for each constraint, the skew of placing the pod in the node's domain is
``matching pods in the domain + (1 if the pod matches its own selector) - the fewest in any domain``
(0 when fewer than ``minDomains`` domains exist); above ``maxSkew`` the node is rejected, and a node
without the topology key is rejected as unresolvable. Domains and counts include only nodes that
carry every constraint's key and pass the inclusion policies (``nodeAffinityPolicy`` Honor: the
pod's nodeSelector and required node affinity; ``nodeTaintsPolicy`` Honor: the node's NoSchedule /
NoExecute taints must be tolerated). Pods being deleted are not counted.

Score: ``Σ count·log(domains+2) + (maxSkew-1)`` per node, normalized so that the node whose domains
hold the fewest matching pods scores 100.

A pod without constraints gets the cluster defaults (setting ``default_spread_constraints``; by
default kube-scheduler's system defaults: hostname maxSkew 3 and zone maxSkew 5, ScheduleAnyway)
when it has a ReplicaSet, StatefulSet or ReplicationController controller, counting the pods of the
same controller (kube-scheduler uses the controller's selector, and Services' selectors too).

Counted pods are the cache's placed pods (bound and assumed, so a gang's members placed earlier in
the cycle count), found through its label index. The domains of a gang's members are computed once
per group cycle.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from lockstep.api.placement import parse_spread_constraint
from lockstep.config import spread_constraint_list
from lockstep.scheduler.framework import (
    SKIP,
    SUCCESS,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
    note_rejection,
    rejection_reasons,
)
from lockstep.scheduler.placement import SpreadConstraint
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.plugins.node_affinity import AffinityError, CompiledSelector, compile_selector
from lockstep.scheduler.plugins.node_basics import tolerates
from lockstep.state.cluster import ClusterCache

HOSTNAME = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"

REASON_NOT_MATCH = "node(s) didn't match pod topology spread constraints"
REASON_MISSING_LABEL = "node(s) didn't match pod topology spread constraints (missing required label)"

_FILTER_KEY = "PodTopologySpread/filter"
_SCORE_KEY = "PodTopologySpread/score"
_DOMAINS_KEY = "PodTopologySpread/domains"  # group_data: (constraints, node rules) -> eligible nodes


@dataclass(slots=True)
class _Counted:
    constraint: SpreadConstraint
    self_match: int
    eligible: Mapping[str, str]  # node -> domain (value of the topology key), eligible nodes only
    counts: Counter[str]  # domain -> matching pods
    min_match: int = 0


def _node_rules(pod: PodInfo) -> CompiledSelector | None:
    if not pod.node_selector and pod.required_node_affinity is None:
        return None
    try:
        return compile_selector(pod)
    except AffinityError:
        return None  # NodeAffinity rejects the pod and says why


class PodTopologySpread:
    name: ClassVar[str] = "PodTopologySpread"

    def __init__(self, cache: ClusterCache, default_constraints: Sequence[SpreadConstraint] = ()) -> None:
        self.cache = cache
        self.default_constraints = tuple(default_constraints)

    @classmethod
    def from_context(cls, ctx: PluginContext) -> PodTopologySpread:
        """With the cluster default constraints of the ``default_spread_constraints`` setting."""
        defaults = [
            parse_spread_constraint(raw, f"default_spread_constraints[{i}]", {}, default=True)
            for i, raw in enumerate(spread_constraint_list(ctx.settings.default_spread_constraints))
        ]
        return cls(ctx.cache, defaults)

    def _constraints(self, pod: PodInfo, hard: bool) -> tuple[list[SpreadConstraint], str | None]:
        """The pod's constraints of one kind, and the controller uid whose pods they count when they
        are the cluster defaults (None: the constraints' selectors say)."""
        spec = pod.placement
        if spec is None:
            return [], None
        if spec.spread_constraints:
            return [c for c in spec.spread_constraints if c.hard == hard], None
        if spec.controller_owner is not None and self.default_constraints:
            return [c for c in self.default_constraints if c.hard == hard], spec.controller_owner[1]
        return [], None

    def _matching_nodes(
        self, pod: PodInfo, constraint: SpreadConstraint, owner: str | None
    ) -> Iterable[tuple[PodInfo, str]]:
        placed = self.cache.placed_pods
        if owner is not None:
            return (
                (p, n) for p, n in placed.owned_by(owner) if p.namespace == pod.namespace and not p.deleting
            )
        return ((p, n) for p, n in placed.matching(constraint.selector, (pod.namespace,)) if not p.deleting)

    def _eligible(
        self, state: CycleState, pod: PodInfo, constraints: list[SpreadConstraint], require_all_keys: bool
    ) -> list[dict[str, str]]:
        """Per constraint: node -> domain of the nodes counted (they carry every constraint's key
        when ``require_all_keys``, and pass the constraint's inclusion policies)."""
        key = (
            tuple(constraints),
            require_all_keys,
            tuple(sorted(pod.node_selector.items())),
            repr(pod.required_node_affinity),
            repr(pod.tolerations),
        )
        cached: dict[object, list[dict[str, str]]] = state.group_data.setdefault(_DOMAINS_KEY, {})
        found = cached.get(key)
        if found is not None:
            return found
        rules = _node_rules(pod)
        keys = [c.topology_key for c in constraints]
        found = [{} for _ in constraints]
        for node in self.cache.nodes.values():
            labels = node.labels
            if require_all_keys and not all(k in labels for k in keys):
                continue
            for i, constraint in enumerate(constraints):
                value = labels.get(constraint.topology_key)
                if value is None:
                    continue
                if constraint.honor_node_affinity and rules is not None and not rules.matches(node):
                    continue
                if constraint.honor_node_taints and not _tolerates_blocking_taints(pod, node):
                    continue
                found[i][node.name] = value
        cached[key] = found
        return found

    def _count(
        self,
        state: CycleState,
        pod: PodInfo,
        constraints: list[SpreadConstraint],
        owner: str | None,
        require_all_keys: bool,
    ) -> list[_Counted]:
        eligible = self._eligible(state, pod, constraints, require_all_keys)
        counted = []
        for constraint, nodes in zip(constraints, eligible, strict=True):
            counts: Counter[str] = Counter()
            for _, node_name in self._matching_nodes(pod, constraint, owner):
                domain = nodes.get(node_name)
                if domain is not None:
                    counts[domain] += 1
            self_match = 1 if owner is not None or constraint.selector.matches(pod.labels) else 0
            counted.append(_Counted(constraint, self_match, nodes, counts))
        return counted

    # ------------------------------------------------------------------ filter

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        constraints, owner = self._constraints(pod, hard=True)
        if not constraints:
            return SKIP
        counted = self._count(state, pod, constraints, owner, require_all_keys=True)
        for entry in counted:
            domains = set(entry.eligible.values())
            if len(domains) < entry.constraint.min_domains:
                entry.min_match = 0
            else:
                entry.min_match = min(entry.counts[d] for d in domains)
        state.write(_FILTER_KEY, counted)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        counted: list[_Counted] = state.read(_FILTER_KEY)
        labels = node.labels
        for entry in counted:
            if entry.constraint.topology_key not in labels:
                note_rejection(state, self.name, REASON_MISSING_LABEL)
                return Status.unresolvable(
                    self.name,
                    "TopologySpreadMissingLabel",
                    REASON_MISSING_LABEL,
                    summary=REASON_MISSING_LABEL,
                )
        for entry in counted:
            constraint = entry.constraint
            domain = labels[constraint.topology_key]
            skew = entry.counts[domain] + entry.self_match - entry.min_match
            if skew > constraint.max_skew:
                note_rejection(
                    state,
                    self.name,
                    f"{REASON_NOT_MATCH} ({constraint.topology_key}, maxSkew {constraint.max_skew})",
                )
                return Status.unschedulable(
                    self.name,
                    "TopologySpreadConstraintsNotMatch",
                    f"{REASON_NOT_MATCH} ({constraint.topology_key}={domain}: skew {skew} > maxSkew "
                    f"{constraint.max_skew})",
                    summary=REASON_NOT_MATCH,
                )
        return SUCCESS

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        return rejection_reasons(state, self.name)

    # ------------------------------------------------------------------ score

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        constraints, owner = self._constraints(pod, hard=False)
        if not constraints:
            return SKIP
        require_all_keys = owner is None  # system-defaulted constraints score nodes missing a key
        keys = [c.topology_key for c in constraints]
        ignored = {n.name for n in nodes if require_all_keys and not all(k in n.labels for k in keys)}
        counted = self._count(state, pod, constraints, owner, require_all_keys)
        weights = []
        for entry in counted:
            key = entry.constraint.topology_key
            if key == HOSTNAME:
                size = len(nodes) - len(ignored)
                # counted per node: the pods on the node itself
                entry.counts = Counter(
                    node_name for _, node_name in self._matching_nodes(pod, entry.constraint, owner)
                )
            else:
                size = len({n.labels[key] for n in nodes if n.name not in ignored and key in n.labels})
            weights.append(math.log(size + 2))
        state.write(_SCORE_KEY, (counted, weights, ignored, [n.name for n in nodes]))
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        counted, weights, ignored, _ = state.read(_SCORE_KEY)
        if node.name in ignored:
            return 0
        total = 0.0
        for entry, weight in zip(counted, weights, strict=True):
            key = entry.constraint.topology_key
            value = node.labels.get(key)
            if value is None:
                continue
            count = entry.counts[node.name] if key == HOSTNAME else entry.counts[value]
            total += count * weight + (entry.constraint.max_skew - 1)
        return round(total)

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        _, _, ignored, names = state.read(_SCORE_KEY)
        considered = [score for name, score in zip(names, scores, strict=True) if name not in ignored]
        if not considered:
            return
        low, high = min(considered), max(considered)
        for i, score in enumerate(scores):
            if names[i] in ignored:
                scores[i] = 0
            elif high == 0:
                scores[i] = 100
            else:
                scores[i] = 100 * (high + low - score) // high


def _tolerates_blocking_taints(pod: PodInfo, node: NodeInfo) -> bool:
    return all(
        tolerates(pod.tolerations, taint)
        for taint in node.taints
        if taint.get("effect") in ("NoSchedule", "NoExecute")
    )
