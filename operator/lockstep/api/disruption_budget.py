"""Parse a raw PodDisruptionBudget (policy/v1) into the scheduler's ``DisruptionBudget``, at the edge."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lockstep.api.pod import InvalidObjectError
from lockstep.scheduler.framework import DisruptionBudget, LabelRequirement

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def parse_disruption_budget(obj: Mapping[str, Any]) -> DisruptionBudget:
    metadata = obj.get("metadata") or {}
    namespace = str(metadata.get("namespace") or "default")
    name = str(metadata.get("name") or "")
    key = f"{namespace}/{name}"
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    selector = spec.get("selector")
    if selector is not None and not isinstance(selector, Mapping):
        raise InvalidObjectError("PodDisruptionBudget", key, "spec.selector", "must be an object")
    requirements: list[LabelRequirement] = []
    for label, value in ((selector or {}).get("matchLabels") or {}).items():
        requirements.append(LabelRequirement(str(label), "In", (str(value),)))
    for index, expression in enumerate((selector or {}).get("matchExpressions") or []):
        operator = expression.get("operator") if isinstance(expression, Mapping) else None
        if operator not in _OPERATORS:
            raise InvalidObjectError(
                "PodDisruptionBudget",
                key,
                f"spec.selector.matchExpressions[{index}].operator",
                f"must be one of {', '.join(_OPERATORS)}, got {operator!r}",
            )
        values = tuple(str(v) for v in expression.get("values") or [])
        requirements.append(LabelRequirement(str(expression.get("key") or ""), str(operator), values))
    allowed = status.get("disruptionsAllowed") or 0
    if isinstance(allowed, bool) or not isinstance(allowed, int):
        raise InvalidObjectError(
            "PodDisruptionBudget", key, "status.disruptionsAllowed", "must be an integer"
        )
    return DisruptionBudget(namespace, name, selector is not None, tuple(requirements), allowed)
