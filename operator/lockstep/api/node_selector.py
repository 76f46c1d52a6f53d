"""The one definition of a core/v1 NodeSelectorRequirement's operators, shared by node affinity and
by DRA (allocation and ResourceSlice node selectors)."""

from __future__ import annotations

from collections.abc import Collection


def requirement_matches(operator: str, values: Collection[str], bound: int | None, value: str | None) -> bool:
    """Whether a node's label (or field) ``value`` (None: absent) satisfies the requirement.

    ``bound`` is the integer of a Gt/Lt requirement (None when it has none, which matches nothing).
    """
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator not in ("Gt", "Lt") or value is None or bound is None:
        return False
    try:
        number = int(value)
    except ValueError:
        return False
    return number > bound if operator == "Gt" else number < bound
