"""NodeAffinity: spec.nodeSelector and required node affinity (requiredDuringScheduling...) filter;
preferred node affinity scores (the weights of the matching terms, normalized to 0..100 by the best).

Operators In, NotIn, Exists, DoesNotExist, Gt, Lt on node labels, and matchFields on
``metadata.name`` (In, NotIn). Terms are ORed, the requirements of a term ANDed; a term without
requirements matches no node (as upstream). The pod's selector is compiled once in PreFilter, and the
label index narrows the candidate nodes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lockstep.api.node_selector import requirement_matches
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.state.cluster import ClusterCache

_STATE_KEY = "NodeAffinity"
REASON_MISMATCH = "node(s) didn't match Pod's node affinity/selector"  # kube-scheduler's ErrReasonPod
_SCORE_KEY = "NodeAffinity/preferred"
_FIELD = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED_FIELD = "spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution"
_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt")


class AffinityError(ValueError):
    """The pod's node affinity is malformed; the message names the field."""


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str
    values: frozenset[str] = frozenset()
    bound: int = 0  # Gt / Lt
    on_field: bool = False  # matchFields (metadata.name) rather than a label

    def matches(self, node: NodeInfo) -> bool:
        if self.on_field:
            return (node.name in self.values) == (self.operator == "In")
        return requirement_matches(self.operator, self.values, self.bound, node.labels.get(self.key))


@dataclass(frozen=True, slots=True)
class CompiledSelector:
    selector: tuple[tuple[str, str], ...]  # nodeSelector pairs
    terms: tuple[tuple[Requirement, ...], ...] | None  # None: no required affinity

    def matches(self, node: NodeInfo) -> bool:
        labels = node.labels
        for key, value in self.selector:
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(term and all(r.matches(node) for r in term) for term in self.terms)


def _requirement(raw: Any, field: str, on_field: bool) -> Requirement:
    if not isinstance(raw, Mapping):
        raise AffinityError(f"{field}: must be an object")
    key = raw.get("key")
    operator = raw.get("operator")
    values = raw.get("values") or []
    if not isinstance(key, str) or not key:
        raise AffinityError(f"{field}.key: must be a non-empty string")
    if on_field:
        if key != "metadata.name":
            raise AffinityError(f"{field}.key: matchFields supports only metadata.name, got {key!r}")
        if operator not in ("In", "NotIn"):
            raise AffinityError(f"{field}.operator: matchFields supports In and NotIn, got {operator!r}")
    if operator not in _OPERATORS:
        raise AffinityError(f"{field}.operator: must be one of {', '.join(_OPERATORS)}, got {operator!r}")
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise AffinityError(f"{field}.values: must be a list of strings")
    if operator in ("In", "NotIn") and not values:
        raise AffinityError(f"{field}.values: must be non-empty for {operator}")
    if operator in ("Exists", "DoesNotExist") and values:
        raise AffinityError(f"{field}.values: must be empty for {operator}")
    bound = 0
    if operator in ("Gt", "Lt"):
        if len(values) != 1:
            raise AffinityError(f"{field}.values: {operator} needs exactly one value")
        try:
            bound = int(values[0])
        except ValueError:
            raise AffinityError(f"{field}.values: {operator} needs an integer, got {values[0]!r}") from None
    return Requirement(key, operator, frozenset(values), bound, on_field)


def _term(term: Any, base: str) -> tuple[Requirement, ...]:
    if not isinstance(term, Mapping):
        raise AffinityError(f"{base}: must be an object")
    requirements = [
        _requirement(r, f"{base}.matchExpressions[{i}]", False)
        for i, r in enumerate(term.get("matchExpressions") or [])
    ]
    requirements += [
        _requirement(r, f"{base}.matchFields[{i}]", True) for i, r in enumerate(term.get("matchFields") or [])
    ]
    return tuple(requirements)


def compile_preferred(raw: Any) -> tuple[tuple[int, tuple[Requirement, ...]], ...]:
    """Preferred node affinity: (weight, term) pairs; raise AffinityError."""
    if not isinstance(raw, list):
        raise AffinityError(f"{_PREFERRED_FIELD}: must be a list")
    compiled = []
    for i, entry in enumerate(raw):
        base = f"{_PREFERRED_FIELD}[{i}]"
        if not isinstance(entry, Mapping):
            raise AffinityError(f"{base}: must be an object")
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise AffinityError(f"{base}.weight: must be an integer in 1..100, got {weight!r}")
        compiled.append((weight, _term(entry.get("preference"), f"{base}.preference")))
    return tuple(compiled)


def compile_selector(pod: PodInfo) -> CompiledSelector:
    """Compile the pod's nodeSelector and required node affinity; raise AffinityError."""
    terms: tuple[tuple[Requirement, ...], ...] | None = None
    raw = pod.required_node_affinity
    if raw is not None:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("nodeSelectorTerms"), list):
            raise AffinityError(f"{_FIELD}.nodeSelectorTerms: must be a list")
        compiled = []
        for t, term in enumerate(raw["nodeSelectorTerms"]):
            compiled.append(_term(term, f"{_FIELD}.nodeSelectorTerms[{t}]"))
        terms = tuple(compiled)
    return CompiledSelector(tuple(pod.node_selector.items()), terms)


class NodeAffinity:
    name: ClassVar[str] = "NodeAffinity"

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.node_selector and pod.required_node_affinity is None:
            return SKIP
        try:
            state.write(_STATE_KEY, compile_selector(pod))
        except AffinityError as exc:
            return Status.unresolvable(self.name, "InvalidNodeAffinity", f"pod {pod.key}: {exc}")
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        compiled: CompiledSelector = state.read(_STATE_KEY)
        if compiled.matches(node):
            return SUCCESS
        return Status.unresolvable(
            self.name, "NodeSelectorMismatch", REASON_MISMATCH, summary=REASON_MISMATCH
        )

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        raw = pod.placement.preferred_node_affinity if pod.placement is not None else None
        if not raw:
            return SKIP
        try:
            state.write(_SCORE_KEY, compile_preferred(raw))
        except AffinityError:
            return SKIP  # the API server rejects such a pod; nothing to prefer
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        terms: tuple[tuple[int, tuple[Requirement, ...]], ...] = state.read(_SCORE_KEY)
        return sum(weight for weight, term in terms if term and all(r.matches(node) for r in term))

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        normalize_to_best(scores)

    def candidate_nodes(self, state: CycleState, pod: PodInfo) -> Collection[str] | None:
        compiled: CompiledSelector | None = state.read(_STATE_KEY)
        if compiled is None:
            return None
        narrowed: set[str] | None = None
        for key, value in compiled.selector:
            narrowed = _intersect(narrowed, self.cache.nodes_with_label(key, value))
        if compiled.terms is not None:
            union: set[str] = set()
            for term in compiled.terms:
                term_nodes = self._term_candidates(term)
                if term_nodes is None:
                    return narrowed
                union |= term_nodes
            narrowed = _intersect(narrowed, union)
        return narrowed

    def _term_candidates(self, term: tuple[Requirement, ...]) -> set[str] | None:
        narrowed: set[str] | None = None
        if not term:
            return set()
        for requirement in term:
            if requirement.operator != "In":
                continue
            if requirement.on_field:
                matching = set(requirement.values)
            else:
                matching = set()
                for value in requirement.values:
                    matching |= self.cache.nodes_with_label(requirement.key, value)
            narrowed = _intersect(narrowed, matching)
        return narrowed


def _intersect(current: set[str] | None, other: set[str]) -> set[str]:
    return set(other) if current is None else current & other


def normalize_to_best(scores: list[int], reverse: bool = False) -> None:
    """kube-scheduler's DefaultNormalizeScore: scale to 0..100 by the highest score (reversed: the
    lowest raw score gets 100); all zero stays 0 (100 reversed)."""
    highest = max(scores, default=0)
    for i, score in enumerate(scores):
        scaled = 100 * score // highest if highest > 0 else 0
        scores[i] = 100 - scaled if reverse else scaled
