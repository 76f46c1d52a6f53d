"""core/v1 NodeSelector matching for allocation results and ResourceSlices (pure, no API types)."""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.api.resource import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

NODE_NAME_FIELD = "metadata.name"


def _requirement_matches(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or len(requirement.values) != 1:
        return False
    try:
        actual, bound = int(value), int(requirement.values[0])
    except ValueError:
        return False
    return actual > bound if operator == "Gt" else actual < bound


def _term_matches(term: NodeSelectorTerm, node_name: str, labels: Mapping[str, str]) -> bool:
    if not term.match_expressions and not term.match_fields:
        return False
    for requirement in term.match_expressions:
        if not _requirement_matches(requirement, labels.get(requirement.key)):
            return False
    for requirement in term.match_fields:
        value = node_name if requirement.key == NODE_NAME_FIELD else None
        if not _requirement_matches(requirement, value):
            return False
    return True


def node_selector_matches(selector: NodeSelector, node_name: str, labels: Mapping[str, str]) -> bool:
    """Terms are ORed, the requirements of a term ANDed; an empty term matches nothing."""
    return any(_term_matches(term, node_name, labels) for term in selector.node_selector_terms)


def node_name_selector(node_name: str) -> NodeSelector:
    """The selector kube-scheduler writes into an allocation of node-local devices."""
    return NodeSelector(
        node_selector_terms=[
            NodeSelectorTerm(
                match_fields=[NodeSelectorRequirement(key=NODE_NAME_FIELD, operator="In", values=[node_name])]
            )
        ]
    )
