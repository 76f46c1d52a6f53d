"""Parse a Pod's inter-pod placement fields into a ``PlacementSpec``, once, at the edge.

Pod (anti-)affinity terms, topology spread constraints, host ports, preferred node affinity, the
controller owner (for cluster-default spread) and the refused fields of ``api/pod_fields.py``. A pod
with none of them gets None. ``matchLabelKeys`` / ``mismatchLabelKeys`` of affinity terms are merged
into the label selector as kube-apiserver does at pod creation (``key In/NotIn (the pod's value)``;
merging again is harmless), and a spread constraint's ``matchLabelKeys`` as kube-scheduler does.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.api.pod_fields import REFUSED_ROOTS, refused_in
from lockstep.scheduler.placement import (
    EVERYTHING,
    NOTHING,
    WILDCARD_IP,
    AffinityTerm,
    HostPort,
    LabelSelector,
    PlacementSpec,
    SpreadConstraint,
    WeightedTerm,
)

_SELECTOR_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
_PROTOCOLS = ("TCP", "UDP", "SCTP")
# Controllers whose selector kube-scheduler's default spread constraints count (DefaultSelector;
# Services are not watched by lockstep, see README).
DEFAULT_SPREAD_OWNERS = ("ReplicaSet", "StatefulSet", "ReplicationController")


class PlacementFieldError(ValueError):
    """A placement field is malformed; ``field`` is its path."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


def _strings(value: Any, field: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PlacementFieldError(field, "must be a list of strings")
    return value


def parse_label_selector(
    raw: Any, field: str, extra: tuple[tuple[str, str, frozenset[str]], ...] = ()
) -> LabelSelector:
    """A metav1.LabelSelector; None is the null selector (matches nothing); ``extra`` requirements
    are ANDed (not to a null selector, which stays null)."""
    if raw is None:
        return NOTHING
    if not isinstance(raw, Mapping):
        raise PlacementFieldError(field, "must be an object")
    requirements: list[tuple[str, str, frozenset[str]]] = []
    match_labels = raw.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise PlacementFieldError(f"{field}.matchLabels", "must be an object")
    for key, value in match_labels.items():
        if not isinstance(value, str):
            raise PlacementFieldError(f"{field}.matchLabels.{key}", "must be a string")
        requirements.append((str(key), "In", frozenset((value,))))
    expressions = raw.get("matchExpressions") or []
    if not isinstance(expressions, list):
        raise PlacementFieldError(f"{field}.matchExpressions", "must be a list")
    for index, expression in enumerate(expressions):
        where = f"{field}.matchExpressions[{index}]"
        if not isinstance(expression, Mapping) or not isinstance(expression.get("key"), str):
            raise PlacementFieldError(f"{where}.key", "must be a string")
        operator = expression.get("operator")
        if operator not in _SELECTOR_OPERATORS:
            raise PlacementFieldError(
                f"{where}.operator", f"must be one of {', '.join(_SELECTOR_OPERATORS)}, got {operator!r}"
            )
        values = _strings(expression.get("values"), f"{where}.values")
        if operator in ("In", "NotIn") and not values:
            raise PlacementFieldError(f"{where}.values", f"must be non-empty for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PlacementFieldError(f"{where}.values", f"must be empty for {operator}")
        requirements.append((expression["key"], operator, frozenset(values)))
    requirements.extend(extra)
    return LabelSelector(tuple(requirements)) if requirements else EVERYTHING


def _label_key_requirements(
    term: Mapping[str, Any], labels: Mapping[str, str], field: str
) -> tuple[tuple[str, str, frozenset[str]], ...]:
    extra = []
    for name, operator in (("matchLabelKeys", "In"), ("mismatchLabelKeys", "NotIn")):
        for key in _strings(term.get(name), f"{field}.{name}"):
            if key in labels:
                extra.append((key, operator, frozenset((labels[key],))))
    return tuple(extra)


def parse_affinity_term(raw: Any, field: str, namespace: str, labels: Mapping[str, str]) -> AffinityTerm:
    if not isinstance(raw, Mapping):
        raise PlacementFieldError(field, "must be an object")
    topology_key = raw.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise PlacementFieldError(f"{field}.topologyKey", "must be a non-empty string")
    selector = parse_label_selector(
        raw.get("labelSelector"), f"{field}.labelSelector", _label_key_requirements(raw, labels, field)
    )
    namespaces = frozenset(_strings(raw.get("namespaces"), f"{field}.namespaces"))
    namespace_selector = None
    if raw.get("namespaceSelector") is not None:
        namespace_selector = parse_label_selector(raw["namespaceSelector"], f"{field}.namespaceSelector")
    elif not namespaces:
        namespaces = frozenset((namespace,))
    return AffinityTerm(selector, topology_key, namespaces, namespace_selector)


def _terms(
    raw: Any, field: str, namespace: str, labels: Mapping[str, str]
) -> tuple[tuple[AffinityTerm, ...], tuple[WeightedTerm, ...]]:
    if raw is None:
        return (), ()
    if not isinstance(raw, Mapping):
        raise PlacementFieldError(field, "must be an object")
    required_field = f"{field}.requiredDuringSchedulingIgnoredDuringExecution"
    preferred_field = f"{field}.preferredDuringSchedulingIgnoredDuringExecution"
    required = raw.get("requiredDuringSchedulingIgnoredDuringExecution") or []
    preferred = raw.get("preferredDuringSchedulingIgnoredDuringExecution") or []
    if not isinstance(required, list):
        raise PlacementFieldError(required_field, "must be a list")
    if not isinstance(preferred, list):
        raise PlacementFieldError(preferred_field, "must be a list")
    hard = tuple(
        parse_affinity_term(term, f"{required_field}[{i}]", namespace, labels)
        for i, term in enumerate(required)
    )
    soft = []
    for i, entry in enumerate(preferred):
        where = f"{preferred_field}[{i}]"
        if not isinstance(entry, Mapping):
            raise PlacementFieldError(where, "must be an object")
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise PlacementFieldError(f"{where}.weight", f"must be an integer in 1..100, got {weight!r}")
        term = parse_affinity_term(
            entry.get("podAffinityTerm"), f"{where}.podAffinityTerm", namespace, labels
        )
        soft.append(WeightedTerm(weight, term))
    return hard, tuple(soft)


def parse_spread_constraint(
    raw: Any, field: str, labels: Mapping[str, str], default: bool = False
) -> SpreadConstraint:
    """A TopologySpreadConstraint; ``default``: a cluster-default one (no labelSelector allowed)."""
    if not isinstance(raw, Mapping):
        raise PlacementFieldError(field, "must be an object")
    max_skew = raw.get("maxSkew")
    if isinstance(max_skew, bool) or not isinstance(max_skew, int) or max_skew < 1:
        raise PlacementFieldError(f"{field}.maxSkew", f"must be an integer >= 1, got {max_skew!r}")
    topology_key = raw.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise PlacementFieldError(f"{field}.topologyKey", "must be a non-empty string")
    when = raw.get("whenUnsatisfiable")
    if when not in ("DoNotSchedule", "ScheduleAnyway"):
        raise PlacementFieldError(
            f"{field}.whenUnsatisfiable", f"must be DoNotSchedule or ScheduleAnyway, got {when!r}"
        )
    min_domains = raw.get("minDomains")
    if min_domains is not None:
        if isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1:
            raise PlacementFieldError(f"{field}.minDomains", f"must be an integer >= 1, got {min_domains!r}")
        if when != "DoNotSchedule":
            raise PlacementFieldError(
                f"{field}.minDomains", "can only be set with whenUnsatisfiable DoNotSchedule"
            )
    policies = []
    for name, default_policy in (("nodeAffinityPolicy", "Honor"), ("nodeTaintsPolicy", "Ignore")):
        policy = raw.get(name) or default_policy
        if policy not in ("Honor", "Ignore"):
            raise PlacementFieldError(f"{field}.{name}", f"must be Honor or Ignore, got {policy!r}")
        policies.append(policy == "Honor")
    if default:
        if raw.get("labelSelector") is not None:
            raise PlacementFieldError(f"{field}.labelSelector", "must not be set in a default constraint")
        selector = EVERYTHING  # narrowed to the pod's controller's pods by PodTopologySpread
    else:
        extra = tuple(
            (key, "In", frozenset((labels[key],)))
            for key in _strings(raw.get("matchLabelKeys"), f"{field}.matchLabelKeys")
            if key in labels
        )
        selector = parse_label_selector(raw.get("labelSelector"), f"{field}.labelSelector", extra)
    return SpreadConstraint(
        max_skew=max_skew,
        topology_key=topology_key,
        hard=when == "DoNotSchedule",
        selector=selector,
        min_domains=min_domains or 1,
        honor_node_affinity=policies[0],
        honor_node_taints=policies[1],
    )


def _host_ports(spec: Mapping[str, Any]) -> tuple[HostPort, ...]:
    host_network = spec.get("hostNetwork") is True
    found: list[HostPort] = []
    for c, container in enumerate(spec.get("containers") or ()):
        ports = container.get("ports") if isinstance(container, Mapping) else None
        if not ports:
            continue
        for p, port in enumerate(ports):
            field = f"spec.containers[{c}].ports[{p}]"
            if not isinstance(port, Mapping):
                raise PlacementFieldError(field, "must be an object")
            host_port = port.get("hostPort")
            if host_port is None and host_network:
                host_port = port.get("containerPort")  # API defaulting with hostNetwork
            if host_port is None or host_port == 0:
                continue
            if isinstance(host_port, bool) or not isinstance(host_port, int) or not 0 < host_port < 65536:
                raise PlacementFieldError(f"{field}.hostPort", f"must be a port number, got {host_port!r}")
            protocol = port.get("protocol") or "TCP"
            if protocol not in _PROTOCOLS:
                raise PlacementFieldError(f"{field}.protocol", f"must be one of {', '.join(_PROTOCOLS)}")
            host_ip = port.get("hostIP") or WILDCARD_IP
            if not isinstance(host_ip, str):
                raise PlacementFieldError(f"{field}.hostIP", "must be a string")
            found.append(HostPort(host_ip, protocol, host_port))
    return tuple(found)


def _controller_owner(metadata: Mapping[str, Any]) -> tuple[str, str] | None:
    for owner in metadata.get("ownerReferences") or ():
        if isinstance(owner, Mapping) and owner.get("controller") is True:
            if owner.get("kind") in DEFAULT_SPREAD_OWNERS and owner.get("uid"):
                return str(owner["kind"]), str(owner["uid"])
            return None
    return None


# Spec fields that may carry placement rules (container ports aside).
_PLACEMENT_ROOTS = frozenset(("affinity", "topologySpreadConstraints", "hostNetwork", *REFUSED_ROOTS))


def _may_have_placement(spec: Mapping[str, Any], metadata: Mapping[str, Any]) -> bool:
    """False for the common pod, cheaply: none of the fields that carry rules is set."""
    if metadata.get("ownerReferences"):
        return True
    for name in _PLACEMENT_ROOTS.intersection(spec):
        if spec[name]:
            return True
    containers = spec.get("containers")
    if not isinstance(containers, list):
        return False
    for container in containers:
        if (type(container) is dict or isinstance(container, Mapping)) and container.get("ports"):
            return True
    return False


def parse_placement(
    spec: Mapping[str, Any], metadata: Mapping[str, Any], namespace: str, labels: Mapping[str, str]
) -> PlacementSpec | None:
    """The pod's placement rules, None when it has none; raise PlacementFieldError."""
    if not _may_have_placement(spec, metadata):
        return None
    affinity = spec.get("affinity") or {}
    if not isinstance(affinity, Mapping):
        raise PlacementFieldError("spec.affinity", "must be an object")
    required_affinity, preferred_affinity = _terms(
        affinity.get("podAffinity"), "spec.affinity.podAffinity", namespace, labels
    )
    required_anti, preferred_anti = _terms(
        affinity.get("podAntiAffinity"), "spec.affinity.podAntiAffinity", namespace, labels
    )
    node_affinity = affinity.get("nodeAffinity") or {}
    preferred_node = (
        node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or None
        if isinstance(node_affinity, Mapping)
        else None
    )
    raw_spread = spec.get("topologySpreadConstraints") or []
    if not isinstance(raw_spread, list):
        raise PlacementFieldError("spec.topologySpreadConstraints", "must be a list")
    spread = tuple(
        parse_spread_constraint(raw, f"spec.topologySpreadConstraints[{i}]", labels)
        for i, raw in enumerate(raw_spread)
    )
    host_ports = _host_ports(spec)
    owner = _controller_owner(metadata) if metadata.get("ownerReferences") else None
    unsupported = refused_in(spec)
    if not (
        required_affinity
        or preferred_affinity
        or required_anti
        or preferred_anti
        or preferred_node
        or spread
        or host_ports
        or owner
        or unsupported
    ):
        return None
    return PlacementSpec(
        required_affinity=required_affinity,
        required_anti_affinity=required_anti,
        preferred_affinity=preferred_affinity,
        preferred_anti_affinity=preferred_anti,
        preferred_node_affinity=preferred_node,
        spread_constraints=spread,
        host_ports=host_ports,
        controller_owner=owner,
        unsupported=unsupported,
    )
