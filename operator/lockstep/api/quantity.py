"""Kubernetes resource quantities (``500m``, ``1.5Gi``, ``2e3``) as exact integers.

The scheduler compares requests with allocatable amounts in base units: cpu in millicores, every
other resource (memory, ephemeral-storage, pods, extended resources) in whole units. Parsing is
exact (``fractions.Fraction``) and rounds up, as ``resource.Quantity.MilliValue()`` / ``Value()`` do.
The DRA side has its own full Quantity model for CEL (``lockstep.dra.quantity``); this one only
needs what resource requests use.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_QUANTITY = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[-+]?[0-9]*)$")
QUANTITY_PATTERN = r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"


class QuantityError(ValueError):
    """The text is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Fraction:
    """The exact value of a quantity; raise QuantityError when it is malformed.

    Plain JSON numbers are accepted too (a manifest may say ``cpu: 2``)."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        text = str(text)
    if not isinstance(text, str):
        raise QuantityError(f"quantity must be a string, got {type(text).__name__}")
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise QuantityError(f"{text!r} is not a quantity (must match {QUANTITY_PATTERN})")
    sign, whole, fraction, suffix = match.groups()
    if not whole and not fraction:
        raise QuantityError(f"{text!r} is not a quantity: no digits")
    fraction = fraction or ""
    value = Fraction(int(whole + fraction or "0"), 10 ** len(fraction))
    if suffix in _DECIMAL_SUFFIXES:
        value *= Fraction(10) ** _DECIMAL_SUFFIXES[suffix]
    elif suffix in _BINARY_SUFFIXES:
        value *= 2 ** _BINARY_SUFFIXES[suffix]
    elif suffix[:1] in ("e", "E") and re.fullmatch(r"[-+]?[0-9]+", suffix[1:]):
        value *= Fraction(10) ** int(suffix[1:])
    else:
        raise QuantityError(f"{text!r} is not a quantity: unknown suffix {suffix!r}")
    return -value if sign == "-" else value


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def to_milli(text: str | int | float) -> int:
    """Millis, rounded up: ``to_milli("0.1") == 100``, ``to_milli("1u") == 1``."""
    return _ceil(parse_quantity(text) * 1000)


def to_units(text: str | int | float) -> int:
    """Whole units, rounded up: ``to_units("1Ki") == 1024``, ``to_units("0.5") == 1``."""
    return _ceil(parse_quantity(text))


@functools.lru_cache(maxsize=4096)
def to_resource_amount(resource: str, text: str | int | float) -> int:
    """A request or allocatable amount in the scheduler's base unit for ``resource``."""
    return to_milli(text) if resource == "cpu" else to_units(text)
