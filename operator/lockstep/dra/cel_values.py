"""CEL values as cel-go sees them: errors, type names, heterogeneous equality and ordering."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import celpy.celtypes as ct
from celpy.evaluation import CELEvalError

from lockstep.dra.k8s_types import Quantity, Semver

Value = Any  # a celpy value, a Quantity, a Semver, a CELOptional or a CELEvalError


def eval_error(message: str) -> CELEvalError:
    return CELEvalError(message, TypeError, (message,))


def type_name(value: Value) -> str:
    if isinstance(value, Quantity):
        return "Quantity"
    if isinstance(value, Semver):
        return "Semver"
    if isinstance(value, CELOptional):
        return "optional_type"
    return type(value).__name__.replace("Type", "").lower()


def no_overload(name: str, *args: Value) -> CELEvalError:
    return eval_error(f"no such overload: {name}({', '.join(type_name(a) for a in args)})")


# --- equality and ordering as in cel-go (heterogeneous equality, cross-type numbers) ---------------

NUMBERS = (ct.IntType, ct.UintType, ct.DoubleType)


class NoOverload(Exception):
    pass


def is_number(value: Value) -> bool:
    return isinstance(value, NUMBERS) or type(value) in (int, float)


def as_python_number(value: Value) -> int | float:
    """celpy numbers refuse mixed-type operators; compare them as exact builtin int/float."""
    return float(value) if isinstance(value, ct.DoubleType | float) else int(value)


def is_null(value: Value) -> bool:
    return value is None or isinstance(value, ct.NullType)


def cel_equal(a: Value, b: Value) -> bool:
    """types.Equal(a, b): a bool, or NoOverload for Quantity/Semver against another type."""
    if is_null(a) or is_null(b):
        return is_null(a) and is_null(b)
    if isinstance(a, CELOptional):
        if not isinstance(b, CELOptional):
            return False
        if not a.has_value or not b.has_value:
            return a.has_value == b.has_value
        return cel_equal(a.value, b.value)
    if isinstance(a, Quantity | Semver):
        if type(b) is type(a):
            return bool(a == b)
        raise NoOverload
    if isinstance(a, ct.BoolType) or type(a) is bool:
        return (isinstance(b, ct.BoolType) or type(b) is bool) and bool(a) == bool(b)
    if is_number(a):
        if not is_number(b) or isinstance(b, ct.BoolType):
            return False
        return as_python_number(a) == as_python_number(b)
    if isinstance(a, str):
        return isinstance(b, str) and str(a) == str(b)
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            try:
                if not cel_equal(x, y):
                    return False
            except NoOverload:  # cel-go: only an explicit False ends list equality
                continue
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for key, value in a.items():
            if key not in b:
                return False
            try:
                if not cel_equal(value, b[key]):
                    return False
            except NoOverload:
                continue
        return True
    return type(a) is type(b) and bool(a == b)


def equal_is_true(a: Value, b: Value) -> bool:
    try:
        return cel_equal(a, b)
    except NoOverload:
        return False


def first_error(*args: Value) -> CELEvalError | None:
    for arg in args:
        if isinstance(arg, CELEvalError):
            return arg
    return None


def compare(a: Value, b: Value, name: str) -> int | CELEvalError | None:
    """-1/0/1, None when either side is NaN, or an error when the types do not order."""
    if error := first_error(a, b):
        return error
    if is_number(a) and is_number(b) and not isinstance(a, ct.BoolType) and not isinstance(b, ct.BoolType):
        x, y = as_python_number(a), as_python_number(b)
        if x != x or y != y:
            return None
        return (x > y) - (x < y)
    orderable: tuple[tuple[type, Callable[[Any], Any] | None], ...] = (
        (ct.StringType, str),
        (ct.BoolType, int),
        (ct.BytesType, bytes),
        (ct.TimestampType, None),
        (ct.DurationType, None),
    )
    for cel_type, convert in orderable:
        if isinstance(a, cel_type) and isinstance(b, cel_type):
            if convert is not None:
                a, b = convert(a), convert(b)
            return int((a > b) - (a < b))
    return no_overload(name, a, b)


# --- cel-go optional values (cel.OptionalTypes) ------------------------------------------------------

_ABSENT = object()


class CELOptional:
    """``optional_type(T)``: optional.of(value) or optional.none()."""

    __slots__ = ("_value",)

    def __init__(self, value: Value = _ABSENT) -> None:
        self._value = value

    @property
    def has_value(self) -> bool:
        return self._value is not _ABSENT

    @property
    def value(self) -> Value:
        if self._value is _ABSENT:
            raise ValueError("optional.none() dereference")
        return self._value

    def __repr__(self) -> str:
        return f"optional.of({self._value!r})" if self.has_value else "optional.none()"


OPTIONAL_NONE = CELOptional()


_SCALARS_WITH_FALSY_ZERO = (ct.BoolType, ct.IntType, ct.UintType, ct.DoubleType, ct.StringType, ct.BytesType)


def is_zero_value(value: Value) -> bool:
    """traits.Zeroer: the value optional.ofNonZeroValue() turns into optional.none()."""
    if is_null(value):
        return True
    if isinstance(value, _SCALARS_WITH_FALSY_ZERO):
        return not value
    if isinstance(value, list | dict):
        return len(value) == 0
    if isinstance(value, ct.DurationType):
        return value.total_seconds() == 0
    if isinstance(value, ct.TimestampType):
        return value.timestamp() == 0
    return False
