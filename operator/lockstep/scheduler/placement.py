"""A pod's inter-pod placement rules, compiled once at the edge (``lockstep.api.placement``).

Pods that set none of these fields carry ``PodInfo.placement = None`` and cost the plugins that read
them nothing. Terms and selectors are frozen and hashable: identical terms of a gang's members are
one object, so indexes can count pods per term rather than walk them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from lockstep.api.node_selector import requirement_matches


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A metav1.LabelSelector: matchLabels and matchExpressions ANDed. ``nothing``: a null selector
    (matches no object, as ``LabelSelectorAsSelector(nil)``); no requirements: matches everything."""

    requirements: tuple[tuple[str, str, frozenset[str]], ...] = ()  # (key, operator, values)
    nothing: bool = False

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.nothing:
            return False
        for key, operator, values in self.requirements:
            if not requirement_matches(operator, values, None, labels.get(key)):
                return False
        return True

    def narrowest(self) -> tuple[str, frozenset[str] | None] | None:
        """A label key and the values an object must have for it (None: any value) that every
        match has, to look candidates up in a label index; None when no requirement says so."""
        best: tuple[str, frozenset[str] | None] | None = None
        for key, operator, values in self.requirements:
            if operator == "In" and (best is None or best[1] is None or len(values) < len(best[1])):
                best = (key, values)
            elif operator == "Exists" and best is None:
                best = (key, None)
        return best


EVERYTHING = LabelSelector()
NOTHING = LabelSelector(nothing=True)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """A PodAffinityTerm with its namespaces resolved against the pod that carries it: ``namespaces``
    (the pod's own when neither namespaces nor namespaceSelector is set) or, with
    ``namespace_selector``, also the namespaces whose labels match it (``EVERYTHING``: all)."""

    selector: LabelSelector
    topology_key: str
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None = None

    def matches_namespace(self, namespace: str, namespace_labels: Mapping[str, str] | None) -> bool:
        if namespace in self.namespaces:
            return True
        selector = self.namespace_selector
        if selector is None:
            return False
        return selector.matches(namespace_labels or {})

    def matches(
        self, namespace: str, labels: Mapping[str, str], namespace_labels: Mapping[str, str] | None
    ) -> bool:
        return self.selector.matches(labels) and self.matches_namespace(namespace, namespace_labels)


@dataclass(frozen=True, slots=True)
class WeightedTerm:
    weight: int
    term: AffinityTerm


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """A TopologySpreadConstraint (matchLabelKeys already merged into ``selector``)."""

    max_skew: int
    topology_key: str
    hard: bool  # whenUnsatisfiable DoNotSchedule (else ScheduleAnyway)
    selector: LabelSelector
    min_domains: int = 1
    honor_node_affinity: bool = True  # nodeAffinityPolicy (default Honor)
    honor_node_taints: bool = False  # nodeTaintsPolicy (default Ignore)


@dataclass(frozen=True, slots=True)
class HostPort:
    """A container port with a hostPort: ``ip`` "0.0.0.0" when unset, ``protocol`` TCP when unset."""

    ip: str
    protocol: str
    port: int


WILDCARD_IP = "0.0.0.0"


@dataclass(frozen=True, slots=True)
class PlacementSpec:
    """The placement rules of one pod beyond requests, node selection and tolerations."""

    required_affinity: tuple[AffinityTerm, ...] = ()
    required_anti_affinity: tuple[AffinityTerm, ...] = ()
    preferred_affinity: tuple[WeightedTerm, ...] = ()
    preferred_anti_affinity: tuple[WeightedTerm, ...] = ()
    preferred_node_affinity: object = None  # raw preferredDuringScheduling... list, compiled by NodeAffinity
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    # (kind, uid) of a ReplicaSet, StatefulSet or ReplicationController controller owner: the
    # pods cluster-default spread constraints count together
    controller_owner: tuple[str, str] | None = None
    # spec fields that affect placement and lockstep does not implement (see api/pod_fields.py)
    unsupported: tuple[str, ...] = ()
