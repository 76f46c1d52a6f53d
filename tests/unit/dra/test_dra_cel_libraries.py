"""Upstream conformance tables for the CEL libraries of Kubernetes' DRA selector environment.

Each table is translated from the upstream test named above it. Expected: a plain value, or
("error", substring) for a runtime error, or ("compile_error", substring) for a refusal at compile time.
"""

from __future__ import annotations

from typing import Any

import celpy.celtypes as ct
import pytest

from lockstep.dra.cel import CELError, compile_selector

Case = tuple[str, Any]


def _plain(value: Any) -> Any:
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, ct.IntType | ct.UintType):
        return int(value)
    if isinstance(value, ct.DoubleType):
        return float(value)
    if isinstance(value, ct.StringType):
        return str(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {_plain(k): _plain(v) for k, v in value.items()}
    return value


def _outcome(expression: str) -> Any:
    try:
        selector = compile_selector(expression, list_type_attributes=True)
    except CELError as exc:
        return ("compile_error", exc.problem)
    try:
        return _plain(selector.evaluate({}))
    except CELError as exc:
        return ("error", exc.problem)


def _check(expression: str, expected: Any) -> None:
    actual = _outcome(expression)
    if isinstance(expected, tuple):
        assert isinstance(actual, tuple), f"{expression} gave {actual!r}, expected {expected[0]}"
        assert actual[0] == expected[0], actual
        assert expected[1] in actual[1], actual
    else:
        assert not isinstance(actual, tuple), actual
        assert actual == expected and type(actual) is type(expected), actual


# cel-spec tests/simple/testdata/optionals.textproto (the cases without protobuf messages or type())
OPTIONALS: list[Case] = [
    ("optional.of(null).hasValue()", True),
    ("optional.ofNonZeroValue(null).hasValue()", False),
    ("optional.none().or(optional.none()).orValue(42)", 42),
    ("optional.none().optMap(y, y + 1).hasValue()", False),
    ("{}.?key.optFlatMap(k, k.?subkey).hasValue()", False),
    ("{'key': {}}.?key.optFlatMap(k, k.?subkey).hasValue()", False),
    ("{'null_key': dyn(null)}.?null_key.hasValue()", True),
    ("{'null_key': dyn(null)}.?null_key.invalid.hasValue()", ("error", "no such key")),
    ("{true: dyn(0)}[?false].absent.hasValue()", False),
    ("{true: dyn(0)}[?true].absent.hasValue()", ("error", "no such key")),
    ("{}.?null_key.invalid.hasValue()", False),
    ("{'key': {'subkey': 'subvalue'}}.?key.optFlatMap(k, k.?subkey).value()", "subvalue"),
    ("{'key': {'subkey': ''}}.?key.optFlatMap(k, k.?subkey).value()", ""),
    ("{'key': {'subkey': ''}}.?key.optFlatMap(k, optional.ofNonZeroValue(k.subkey)).hasValue()", False),
    ("optional.of(42).optMap(y, y + 1).value()", 43),
    ("optional.ofNonZeroValue(42).or(optional.of(20)).value() == 42", True),
    ("(has({}.x) ? optional.of({}.x) : optional.none()).hasValue()", False),
    ("{}.?x.hasValue()", False),
    ("has({}.?x.y)", False),
    ("has({'x': {'y': 'z'}}.?x.y)", True),
    (
        "optional.ofNonZeroValue('').or(optional.of({'c': {'dashed-index': 'goodbye'}}.c['dashed-index']))"
        ".orValue('default value')",
        "goodbye",
    ),
    ("{'c': {'dashed-index': 'goodbye'}}.c[?'dashed-index'].orValue('default value')", "goodbye"),
    ("{'c': {}}.c[?'missing-index'].orValue('default value')", "default value"),
    ("optional.of({'c': {'index': 'goodbye'}}).c.index.orValue('default value')", "goodbye"),
    ("optional.of({'c': {}}).c.missing.or(optional.none()[0]).orValue('default value')", "default value"),
    (
        "optional.of({'c': {}}).c.missing.or(optional.of(['list-value'])[0]).orValue('default value')",
        "list-value",
    ),
    ("optional.of({'c': {'index': 'goodbye'}}).c['index'].orValue('default value')", "goodbye"),
    ("optional.of({'c': {}}).c['missing'].orValue('default value')", "default value"),
    (
        "has(optional.of({'c': {'entry': 'hello world'}}).c)"
        " && !has(optional.of({'c': {'entry': 'hello world'}}).c.missing)",
        True,
    ),
    (
        "optional.ofNonZeroValue({'c': {'dashed-index': 'goodbye'}}.a.z)"
        ".orValue({'c': {'dashed-index': 'goodbye'}}.c['dashed-index'])",
        ("error", "no such key"),
    ),
    (
        "{'c': {'dashed-index': 'goodbye'}}.?c.missing"
        ".or({'c': {'dashed-index': 'goodbye'}}.?c['dashed-index']).orValue('').size()",
        7,
    ),
    (
        "{?'nested_map': optional.ofNonZeroValue({?'map': {'c': {'dashed-index': 'goodbye'}}.?c})}",
        {"nested_map": {"map": {"dashed-index": "goodbye"}}},
    ),
    ("{?'nested_map': optional.ofNonZeroValue({?'map': {}.?c}), 'singleton': true}", {"singleton": True}),
    ("[?{}.?c, ?optional.of(42), ?optional.none()]", [42]),
    ("[?optional.ofNonZeroValue({'c': []}.?c.orValue(dyn({})))]", []),
    (
        "optional.ofNonZeroValue({?'nested_map': optional.ofNonZeroValue({?'map': optional.of({}).?c})})"
        ".hasValue()",
        False,
    ),
    ("optional.of({}).?c.hasValue()", False),
    ("optional.none().?repeated_string.hasValue()", False),
    ("[][?0].hasValue()", False),
    ("optional.of([])[?0].hasValue()", False),
    ("optional.none()[?0].hasValue()", False),
    ("['foo'][?0].value()", "foo"),
    ("optional.of(['foo'])[?0].value()", "foo"),
    ("{true: 1, 2: 2, 5u: 3}[?true].value()", 1),
    ("{1u: 1.0, 2: 2.0, 3u: 3.0}[?3.0].value()", 3.0),
    ("{1u: 1.0, 2: 2.0, 3u: 3.0}[?2u].value()", 2.0),
    ("{1u: 1.0, 2: 2.0, 3u: 3.0}[?1].value()", 1.0),
    ("optional.none() == optional.none()", True),
    ("optional.none() == optional.of(1)", False),
    ("optional.of(1) == optional.none()", False),
    ("optional.of(1) == optional.of(1)", True),
    ("optional.none() != optional.none()", False),
    ("optional.none() != optional.of(1)", True),
    ("optional.of(1) != optional.none()", True),
    ("optional.of(1) != optional.of(1)", False),
    # cel-go optional.go: value() of an empty optional
    ("optional.none().value()", ("error", "optional.none() dereference")),
]


@pytest.mark.parametrize(("expression", "expected"), OPTIONALS)
def test_optionals(expression: str, expected: Any) -> None:
    _check(expression, expected)
