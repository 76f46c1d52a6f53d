"""Indexes of the pods placed on nodes (bound or assumed) for the inter-pod placement plugins.

The cluster cache adds a pod here when it counts it on a node and removes it when it stops, so a
pod assumed earlier in a group cycle is seen like a bound one, a failed cycle's pods disappear with
``forget``, and any pod the cache stops counting on a node (deleted, finished, forgotten) leaves
every index with it: a planner that takes pods out of the snapshot sees the filters without them.

Always kept, and empty (free) when no pod uses the features:
  - host ports in use per node;
  - the required anti-affinity terms of placed pods, counted per (term, node): the symmetric check
    of an incoming pod walks distinct terms, not pods (a gang's members share their terms);
  - the terms of placed pods that score (their required affinity, preferred (anti-)affinity).
Built on first use, then kept (a cluster that never uses pod affinity or spread never pays):
  - placed pods by label (key -> value -> pods) and by namespace, and by controller owner; the
    plugins find the pods a selector matches through them instead of walking every pod.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TypeVar

from lockstep.scheduler.framework import PodInfo
from lockstep.scheduler.placement import WILDCARD_IP, AffinityTerm, HostPort, LabelSelector

Placed = dict[str, tuple[PodInfo, str]]  # uid -> (pod, node name)
K = TypeVar("K", bound=Hashable)

# Kinds of a placed pod's scoring terms (InterPodAffinity's processExistingPod).
HARD_AFFINITY = 0  # a required affinity term: the incoming pod matching it scores hardPodAffinityWeight
PREFERRED_AFFINITY = 1
PREFERRED_ANTI_AFFINITY = 2


class PlacedPodIndex:
    """``placed``: every placed pod with its node, read once when a selection is first asked for."""

    def __init__(self, placed: Callable[[], Iterable[tuple[PodInfo, str]]]) -> None:
        self._placed = placed
        self._ports: dict[str, Counter[HostPort]] = {}
        self.anti_affinity_terms: dict[AffinityTerm, Counter[str]] = {}
        # the same terms by the label (key, value; value None: any) every pod they match must have
        self._anti_terms_by_label: dict[str, dict[str | None, set[AffinityTerm]]] = {}
        self._anti_terms_unindexed: set[AffinityTerm] = set()
        self.scoring_terms: dict[tuple[int, int, AffinityTerm], Counter[str]] = {}  # (kind, weight, term)
        self._selectable = False
        self._by_label: dict[str, dict[str, Placed]] = {}
        self._by_namespace: dict[str, Placed] = {}
        self._by_owner: dict[str, Placed] = {}

    # ------------------------------------------------------------------ maintenance

    def add(self, pod: PodInfo, node: str) -> None:
        spec = pod.placement
        if spec is not None:
            if spec.host_ports:
                self._ports.setdefault(node, Counter()).update(spec.host_ports)
            for term in spec.required_anti_affinity:
                per_node = self.anti_affinity_terms.get(term)
                if per_node is None:
                    per_node = self.anti_affinity_terms[term] = Counter()
                    self._index_anti_term(term, add=True)
                per_node[node] += 1
            for key in _scoring_keys(pod):
                self.scoring_terms.setdefault(key, Counter())[node] += 1
        if self._selectable:
            self._select_add(pod, node)

    def remove(self, pod: PodInfo, node: str) -> None:
        spec = pod.placement
        if spec is not None:
            if spec.host_ports:
                ports = self._ports[node]
                ports.subtract(spec.host_ports)
                for port in spec.host_ports:
                    if ports[port] <= 0:
                        del ports[port]
                if not ports:
                    del self._ports[node]
            for term in spec.required_anti_affinity:
                _decrement(self.anti_affinity_terms, term, node)
                if term not in self.anti_affinity_terms:
                    self._index_anti_term(term, add=False)
            for key in _scoring_keys(pod):
                _decrement(self.scoring_terms, key, node)
        if self._selectable:
            self._select_remove(pod, node)

    def _index_anti_term(self, term: AffinityTerm, add: bool) -> None:
        narrowest = term.selector.narrowest()
        if narrowest is None:
            slots = [self._anti_terms_unindexed]
        else:
            key, values = narrowest
            by_value = self._anti_terms_by_label.setdefault(key, {})
            slots = [
                by_value.setdefault(value, set()) for value in (values if values is not None else (None,))
            ]
        for slot in slots:
            if add:
                slot.add(term)
            else:
                slot.discard(term)

    def anti_affinity_terms_for(
        self, labels: Mapping[str, str]
    ) -> Iterator[tuple[AffinityTerm, Counter[str]]]:
        """The placed pods' required anti-affinity terms that may match a pod with ``labels`` (the
        caller checks each), with their pods per node: not every term, when the terms select by label."""
        if not self.anti_affinity_terms:
            return
        candidates = set(self._anti_terms_unindexed)
        for key, value in labels.items():
            by_value = self._anti_terms_by_label.get(key)
            if by_value:
                candidates.update(by_value.get(value, ()))
                candidates.update(by_value.get(None, ()))
        for term in candidates:
            per_node = self.anti_affinity_terms.get(term)
            if per_node:
                yield term, per_node

    def _select_add(self, pod: PodInfo, node: str) -> None:
        entry = (pod, node)
        for key, value in pod.labels.items():
            self._by_label.setdefault(key, {}).setdefault(value, {})[pod.uid] = entry
        self._by_namespace.setdefault(pod.namespace, {})[pod.uid] = entry
        owner = pod.placement.controller_owner if pod.placement is not None else None
        if owner is not None:
            self._by_owner.setdefault(owner[1], {})[pod.uid] = entry

    def _select_remove(self, pod: PodInfo, node: str) -> None:
        for key, value in pod.labels.items():
            values = self._by_label[key]
            _discard(values, value, pod.uid)
            if not values:
                del self._by_label[key]
        _discard(self._by_namespace, pod.namespace, pod.uid)
        owner = pod.placement.controller_owner if pod.placement is not None else None
        if owner is not None:
            _discard(self._by_owner, owner[1], pod.uid)

    def _enable_selection(self) -> None:
        """Build the label, namespace and owner indexes from every placed pod (once)."""
        self._selectable = True
        for pod, node in self._placed():
            self._select_add(pod, node)

    # ------------------------------------------------------------------ queries

    def host_port_conflict(self, node: str, wanted: Iterable[HostPort]) -> HostPort | None:
        """The first wanted port already in use on ``node`` (HostPortInfo.CheckConflict: the
        0.0.0.0 wildcard conflicts with every address on the same protocol and port)."""
        used = self._ports.get(node)
        if not used:
            return None
        for port in wanted:
            if port.ip == WILDCARD_IP:
                if any(p.protocol == port.protocol and p.port == port.port for p in used):
                    return port
            elif port in used or HostPort(WILDCARD_IP, port.protocol, port.port) in used:
                return port
        return None

    def matching(
        self,
        selector: LabelSelector,
        namespaces: Iterable[str] | None,
    ) -> Iterator[tuple[PodInfo, str]]:
        """Placed pods in ``namespaces`` (None: any) whose labels match ``selector``, with their node."""
        if selector.nothing:
            return
        if not self._selectable:
            self._enable_selection()
        narrowest = selector.narrowest()
        candidates: Iterable[tuple[PodInfo, str]]
        if narrowest is not None:
            key, values = narrowest
            by_value = self._by_label.get(key, {})
            chosen = by_value.values() if values is None else (by_value[v] for v in values if v in by_value)
            candidates = (entry for placed in chosen for entry in placed.values())
            wanted = None if namespaces is None else set(namespaces)
            for pod, node in candidates:
                if (wanted is None or pod.namespace in wanted) and selector.matches(pod.labels):
                    yield pod, node
            return
        groups = (
            self._by_namespace.values()
            if namespaces is None
            else [self._by_namespace[ns] for ns in namespaces if ns in self._by_namespace]
        )
        for placed in groups:
            for pod, node in placed.values():
                if selector.matches(pod.labels):
                    yield pod, node

    def owned_by(self, owner_uid: str) -> Iterable[tuple[PodInfo, str]]:
        """Placed pods whose controller owner (ReplicaSet, StatefulSet, ...) has this uid."""
        if not self._selectable:
            self._enable_selection()
        return self._by_owner.get(owner_uid, {}).values()


def _scoring_keys(pod: PodInfo) -> Iterator[tuple[int, int, AffinityTerm]]:
    spec = pod.placement
    assert spec is not None
    for term in spec.required_affinity:
        yield HARD_AFFINITY, 1, term
    for weighted in spec.preferred_affinity:
        yield PREFERRED_AFFINITY, weighted.weight, weighted.term
    for weighted in spec.preferred_anti_affinity:
        yield PREFERRED_ANTI_AFFINITY, weighted.weight, weighted.term


def _decrement(counts: dict[K, Counter[str]], key: K, node: str) -> None:
    per_node = counts[key]
    per_node[node] -= 1
    if per_node[node] <= 0:
        del per_node[node]
        if not per_node:
            del counts[key]


def _discard(index: dict[str, Placed], key: str, uid: str) -> None:
    placed = index.get(key)
    if placed is not None:
        placed.pop(uid, None)
        if not placed:
            del index[key]
