"""Label and field selectors with kube-apiserver's syntax and error messages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lockstep.sim.errors import ApiError, bad_request

JsonObject = dict[str, Any]

_SPECIAL = set("=!(),<>")


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch.isspace():
            i += 1
            continue
        two = text[i : i + 2]
        if two in ("==", "!="):
            out.append(two)
            i += 2
            continue
        if ch in _SPECIAL:
            out.append(ch)
            i += 1
            continue
        start = i
        while i < len(text) and not text[i].isspace() and text[i] not in _SPECIAL:
            i += 1
        out.append(text[start:i])
    return out


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    operator: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str]

    def matches(self, labels: dict[str, str]) -> bool:
        op = self.operator
        if op == "exists":
            return self.key in labels
        if op == "!":
            return self.key not in labels
        if op in ("=", "in"):
            return self.key in labels and labels[self.key] in self.values
        # "!=" and "notin" match objects that lack the key too
        return self.key not in labels or labels[self.key] not in self.values


class LabelSelector:
    """A parsed ``labelSelector`` query parameter."""

    __slots__ = ("requirements",)

    def __init__(self, requirements: list[Requirement]) -> None:
        self.requirements = requirements

    def matches(self, labels: dict[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _parse_error(detail: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {detail}")


def parse_label_selector(text: str | None) -> LabelSelector:
    if not text:
        return LabelSelector([])
    toks = _tokens(text)
    reqs: list[Requirement] = []
    i = 0
    expected_ops = "in, notin, =, ==, !=, gt, lt"
    while i < len(toks):
        tok = toks[i]
        if tok == "!":
            if i + 1 >= len(toks) or toks[i + 1] in _SPECIAL or toks[i + 1] in ("==", "!="):
                raise _parse_error(
                    f"found '{toks[i + 1] if i + 1 < len(toks) else ''}', expected: identifier"
                )
            reqs.append(Requirement(toks[i + 1], "!", frozenset()))
            i += 2
        elif tok in _SPECIAL or tok in ("==", "!="):
            raise _parse_error(f"found '{tok}', expected: !, identifier")
        else:
            key = tok
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append(Requirement(key, "exists", frozenset()))
            else:
                op = toks[i]
                i += 1
                if op in ("=", "==", "!="):
                    value = ""
                    if i < len(toks) and toks[i] not in _SPECIAL:
                        value = toks[i]
                        i += 1
                    reqs.append(Requirement(key, "!=" if op == "!=" else "=", frozenset([value])))
                elif op in ("in", "notin"):
                    if i >= len(toks) or toks[i] != "(":
                        found = toks[i] if i < len(toks) else ""
                        raise _parse_error(f"found '{found}' expected: '('")
                    i += 1
                    values: set[str] = set()
                    while i < len(toks) and toks[i] != ")":
                        if toks[i] != ",":
                            values.add(toks[i])
                        i += 1
                    if i >= len(toks):
                        raise _parse_error("found '', expected: ')'")
                    i += 1
                    reqs.append(Requirement(key, op, frozenset(values)))
                else:
                    raise _parse_error(f"found '{op}', expected: {expected_ops}")
        if i < len(toks):
            if toks[i] != ",":
                raise bad_request(f"found '{toks[i]}', expected: ',' or 'end of string'")
            i += 1
    return LabelSelector(reqs)


FieldGetter = Callable[[JsonObject], str]


def _path_getter(path: str) -> FieldGetter:
    keys = path.split(".")

    def get(obj: JsonObject) -> str:
        value: Any = obj
        for key in keys:
            if not isinstance(value, dict):
                return ""
            value = value.get(key)
        if value is None:
            return ""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    return get


@dataclass(frozen=True, slots=True)
class FieldRequirement:
    getter: FieldGetter
    value: str
    negate: bool


class FieldSelector:
    __slots__ = ("requirements",)

    def __init__(self, requirements: list[FieldRequirement]) -> None:
        self.requirements = requirements

    def matches(self, obj: JsonObject) -> bool:
        return all((r.getter(obj) == r.value) != r.negate for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current.append(text[i + 1])
            i += 2
            continue
        if text[i] == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(text[i])
        i += 1
    parts.append("".join(current))
    return parts


def parse_field_selector(text: str | None, supported: dict[str, str]) -> FieldSelector:
    """Parse ``fieldSelector``; ``supported`` maps each selectable field label to its path in the object."""
    if not text:
        return FieldSelector([])
    reqs: list[FieldRequirement] = []
    for term in _split_unescaped(text, ","):
        if not term:
            continue
        for op in ("!=", "==", "="):
            if op in term:
                field, value = term.split(op, 1)
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
        field = field.strip()
        if field not in supported:
            raise bad_request(f"field label not supported: {field}")
        reqs.append(FieldRequirement(_path_getter(supported[field]), value, op == "!="))
    return FieldSelector(reqs)
