"""InterPodAffinity, as kube-scheduler's plugin of that name (pkg/scheduler/framework/plugins/
interpodaffinity): required pod affinity and anti-affinity of the incoming pod, the required
anti-affinity of the pods already placed (the symmetric check), and the preferred terms of both as a
score.

The pods "already placed" are the cache's: bound pods and pods assumed, which includes the members
of the same gang placed earlier in this group cycle. PreFilter counts, per (topology key, value),
the placed pods the incoming pod's terms match (found through the cache's label index, not by
walking every pod) and the placed anti-affinity terms that match the incoming pod (counted per
distinct term and node); Filter then only looks the node's labels up. A cluster where no pod uses
pod affinity costs one dictionary check per pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

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
from lockstep.scheduler.placement import EVERYTHING, AffinityTerm
from lockstep.state.cluster import ClusterCache
from lockstep.state.placed_pods import HARD_AFFINITY, PREFERRED_ANTI_AFFINITY

_FILTER_KEY = "InterPodAffinity/filter"
_SCORE_KEY = "InterPodAffinity/score"

REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

TopologyPair = tuple[str, str]


@dataclass(slots=True)
class _FilterState:
    affinity_terms: tuple[AffinityTerm, ...]
    anti_affinity_terms: tuple[AffinityTerm, ...]
    affinity_counts: Counter[TopologyPair]
    anti_affinity_counts: Counter[TopologyPair]
    existing_anti_affinity_counts: Counter[TopologyPair]
    matches_own_affinity: bool  # the pod matches all its own affinity terms


class InterPodAffinity:
    name: ClassVar[str] = "InterPodAffinity"

    def __init__(self, cache: ClusterCache, hard_pod_affinity_weight: int = 1) -> None:
        self.cache = cache
        self.hard_pod_affinity_weight = hard_pod_affinity_weight

    def _namespaces(self, term: AffinityTerm) -> Iterable[str] | None:
        """The namespaces a term selects pods in (None: all)."""
        selector = term.namespace_selector
        if selector is None:
            return term.namespaces
        if selector == EVERYTHING:
            return None
        chosen = set(term.namespaces)
        chosen.update(name for name, labels in self.cache.namespaces.items() if selector.matches(labels))
        return chosen

    def _matching(self, term: AffinityTerm) -> Iterator[tuple[PodInfo, str]]:
        return self.cache.placed_pods.matching(term.selector, self._namespaces(term))

    def _matches(self, term: AffinityTerm, pod: PodInfo) -> bool:
        return term.matches(pod.namespace, pod.labels, self.cache.namespace_labels(pod.namespace))

    # ------------------------------------------------------------------ filter

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        spec = pod.placement
        placed = self.cache.placed_pods
        affinity = spec.required_affinity if spec is not None else ()
        anti_affinity = spec.required_anti_affinity if spec is not None else ()
        if not affinity and not anti_affinity and not placed.anti_affinity_terms:
            return SKIP
        nodes = self.cache.nodes
        existing: Counter[TopologyPair] = Counter()
        for term, per_node in placed.anti_affinity_terms_for(pod.labels):
            if not self._matches(term, pod):
                continue
            key = term.topology_key
            for node_name, count in per_node.items():
                node = nodes.get(node_name)
                value = node.labels.get(key) if node is not None else None
                if value is not None:
                    existing[(key, value)] += count
        affinity_counts: Counter[TopologyPair] = Counter()
        if affinity:
            # A placed pod counts for the affinity terms only when it matches all of them.
            for other, node_name in self._matching(affinity[0]):
                node = nodes.get(node_name)
                if node is None or not all(self._matches(term, other) for term in affinity[1:]):
                    continue
                for term in affinity:
                    value = node.labels.get(term.topology_key)
                    if value is not None:
                        affinity_counts[(term.topology_key, value)] += 1
        anti_counts: Counter[TopologyPair] = Counter()
        for term in anti_affinity:
            for _, node_name in self._matching(term):
                node = nodes.get(node_name)
                value = node.labels.get(term.topology_key) if node is not None else None
                if value is not None:
                    anti_counts[(term.topology_key, value)] += 1
        if not affinity and not anti_counts and not existing:
            return SKIP
        state.write(
            _FILTER_KEY,
            _FilterState(
                affinity,
                anti_affinity,
                affinity_counts,
                anti_counts,
                existing,
                bool(affinity) and all(self._matches(term, pod) for term in affinity),
            ),
        )
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        data: _FilterState = state.read(_FILTER_KEY)
        labels = node.labels
        if data.affinity_terms and not _satisfies_affinity(data, labels):
            note_rejection(state, self.name, REASON_AFFINITY)
            return Status.unresolvable(
                self.name, "PodAffinityRulesNotMatch", REASON_AFFINITY, summary=REASON_AFFINITY
            )
        if data.anti_affinity_counts:
            for term in data.anti_affinity_terms:
                value = labels.get(term.topology_key)
                if value is not None and data.anti_affinity_counts[(term.topology_key, value)] > 0:
                    note_rejection(state, self.name, REASON_ANTI_AFFINITY)
                    return Status.unschedulable(
                        self.name,
                        "PodAntiAffinityRulesNotMatch",
                        REASON_ANTI_AFFINITY,
                        summary=REASON_ANTI_AFFINITY,
                    )
        if data.existing_anti_affinity_counts:
            existing = data.existing_anti_affinity_counts
            for pair in labels.items():
                if existing.get(pair, 0) > 0:
                    note_rejection(state, self.name, REASON_EXISTING_ANTI_AFFINITY)
                    return Status.unschedulable(
                        self.name,
                        "ExistingPodsAntiAffinityRulesNotMatch",
                        REASON_EXISTING_ANTI_AFFINITY,
                        summary=REASON_EXISTING_ANTI_AFFINITY,
                    )
        return SUCCESS

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        return rejection_reasons(state, self.name)

    # ------------------------------------------------------------------ score

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        spec = pod.placement
        placed = self.cache.placed_pods
        preferred = spec.preferred_affinity if spec is not None else ()
        preferred_anti = spec.preferred_anti_affinity if spec is not None else ()
        if not preferred and not preferred_anti and not placed.scoring_terms:
            return SKIP
        all_nodes = self.cache.nodes
        scores: dict[str, Counter[str]] = {}

        def add(node_name: str, key: str, amount: int) -> None:
            node = all_nodes.get(node_name)
            value = node.labels.get(key) if node is not None else None
            if value is not None:
                scores.setdefault(key, Counter())[value] += amount

        for sign, weighted_terms in ((1, preferred), (-1, preferred_anti)):
            for weighted in weighted_terms:
                for _, node_name in self._matching(weighted.term):
                    add(node_name, weighted.term.topology_key, sign * weighted.weight)
        for (kind, weight, term), per_node in placed.scoring_terms.items():
            if kind == HARD_AFFINITY:
                weight = self.hard_pod_affinity_weight
            if weight <= 0 or not self._matches(term, pod):
                continue
            sign = -1 if kind == PREFERRED_ANTI_AFFINITY else 1
            for node_name, count in per_node.items():
                add(node_name, term.topology_key, sign * weight * count)
        if not scores:
            return SKIP
        state.write(_SCORE_KEY, scores)
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        scores: dict[str, Counter[str]] = state.read(_SCORE_KEY)
        labels = node.labels
        return sum(by_value.get(labels.get(key, ""), 0) for key, by_value in scores.items() if key in labels)

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        low, high = min(scores), max(scores)
        spread = high - low
        for i, score in enumerate(scores):
            scores[i] = 100 * (score - low) // spread if spread > 0 else 0


def _satisfies_affinity(data: _FilterState, labels: Mapping[str, str]) -> bool:
    pods_exist = True
    for term in data.affinity_terms:
        value = labels.get(term.topology_key)
        if value is None:
            return False  # every topology key must be on the node
        if data.affinity_counts[(term.topology_key, value)] <= 0:
            pods_exist = False
    if pods_exist:
        return True
    # The first pod of a series with affinity to itself: no placed pod matches the terms anywhere,
    # and the pod matches them itself.
    return not data.affinity_counts and data.matches_own_affinity
