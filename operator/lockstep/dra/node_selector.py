"""core/v1 NodeSelector matching for allocation results and ResourceSlices (pure, no API types)."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from lockstep.api.node_selector import requirement_matches
from lockstep.api.resource import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm

NODE_NAME_FIELD = "metadata.name"


def _requirement_matches(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    bound = None
    if requirement.operator in ("Gt", "Lt") and len(requirement.values) == 1:
        with contextlib.suppress(ValueError):
            bound = int(requirement.values[0])
    return requirement_matches(requirement.operator, requirement.values, bound, value)


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
