"""The Kubernetes value types DRA selectors compute with: resource.Quantity and Semver.

Quantity follows k8s.io/apimachinery/pkg/api/resource (exact values, rounded up to 1n, BinarySI
capped at 2^63-1, Go's int64 fast path deciding ``isInteger``/``asInteger``). Semver follows
blang/semver v4 as wrapped by k8s.io/apiserver/pkg/cel (strict parsing, optional normalization,
equality ignoring build metadata). Pure Python, values are exact fractions, never floats.
"""

from __future__ import annotations

import functools
from fractions import Fraction

_BINARY_SUFFIXES = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
_DIGITS = frozenset("0123456789")
_NANO = Fraction(1, 10**9)
MAX_INT64 = 2**63 - 1
MIN_INT64 = -(2**63)
QUANTITY_PATTERN = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"

# KEP-5491: includes() refuses lists longer than resourceapi.ResourceSliceMaxAttributeValuesPerDevice.
MAX_ATTRIBUTE_VALUES_PER_DEVICE = 48


class QuantityError(ValueError):
    pass


class SemverError(ValueError):
    pass


def _split_quantity(text: str) -> tuple[bool, str, str, str]:
    """Port of apimachinery parseQuantityString: (positive, integer digits, fraction digits, suffix)."""
    positive = True
    pos, end = 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while pos < end and text[pos] == "0":
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    i = pos
    while i < end and text[i] in _DIGITS:
        i += 1
    integer = text[pos:i] or "0"
    pos = i
    fraction = ""
    if pos < end and text[pos] == ".":
        pos += 1
        i = pos
        while i < end and text[i] in _DIGITS:
            i += 1
        fraction = text[pos:i]
        pos = i
    suffix_start = pos
    i = pos
    while i < end and text[i] in _SUFFIX_CHARS:
        i += 1
    if i < end and text[i] in "+-":
        i += 1
    while i < end and text[i] in _DIGITS:
        i += 1
    if i != end:
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    return positive, integer, fraction, text[suffix_start:end]


def _interpret_suffix(suffix: str) -> tuple[int, int, str]:
    """(base, exponent, format) like apimachinery's quantitySuffixer.interpret."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], "DecimalSI"
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], "BinarySI"
    if len(suffix) > 1 and suffix[0] in "eE":
        rest = suffix[1:]
        body = rest[1:] if rest[0] in "+-" else rest
        if body and all(c in _DIGITS for c in body):
            return 10, int(rest), "DecimalExponent"
    raise QuantityError("unable to parse quantity's suffix")


class Quantity:
    """Exact model of resource.Quantity as the Kubernetes CEL library sees it."""

    __slots__ = ("_int64", "text", "value")

    def __init__(self, value: Fraction, text: str = "", int64_form: int | None = None) -> None:
        self.value = value
        self.text = text
        # Set when Go's int64Amount fast path would hold the value as an integer (AsInt64 succeeds).
        self._int64 = int64_form

    @staticmethod
    def parse(text: str) -> Quantity:
        return parse_quantity(text)

    def compare_to(self, other: Quantity) -> int:
        return (self.value > other.value) - (self.value < other.value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def is_integer(self) -> bool:
        return self._int64 is not None

    def as_integer(self) -> int:
        if self._int64 is None:
            raise QuantityError("cannot convert value to integer")
        return self._int64

    def as_approximate_float(self) -> float:
        return float(self.value)

    def _arith(self, other: Quantity | int, sign: int) -> Quantity:
        if isinstance(other, Quantity):
            other_value, other_int64 = other.value, other._int64
        else:
            other_value, other_int64 = Fraction(int(other)), int(other)
        value = self.value + sign * other_value
        # Go keeps the int64Amount form only if both operands had it and nothing overflowed.
        exact = (
            self._int64 is not None
            and other_int64 is not None
            and value.denominator == 1
            and MIN_INT64 <= value <= MAX_INT64
        )
        return Quantity(value, "", int(value) if exact else None)

    def add(self, other: Quantity | int) -> Quantity:
        return self._arith(other, 1)

    def sub(self, other: Quantity | int) -> Quantity:
        return self._arith(other, -1)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Quantity) and self.value == other.value

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Quantity", self.value))

    def __repr__(self) -> str:
        return f"Quantity({self.text or str(self.value)!r})"


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Quantity:
    if not isinstance(text, str) or text == "":
        raise QuantityError(f"quantities must match the regular expression '{QUANTITY_PATTERN}'")
    if text == "0":
        return Quantity(Fraction(0), text, 0)
    positive, integer, fraction, suffix = _split_quantity(text)
    base, exponent, fmt = _interpret_suffix(suffix)
    # Go's int64Amount fast path: decides isInteger()/asInteger().
    int64_form: int | None = None
    if fmt in ("DecimalSI", "DecimalExponent"):
        precision, scale, multiplier = 18 - (len(integer) + len(fraction)), exponent, 1
    elif exponent >= 0 and not fraction:
        # Go computes int32(float32(exponent)*3/10), which is exact for exponents 10..60.
        precision, scale, multiplier = 15 - len(integer) - exponent * 3 // 10 - 1, 0, 1 << exponent
    else:
        precision, scale, multiplier = -1, 0, 1
    if precision >= 0:
        scale -= len(fraction)
        if scale >= -9:
            mantissa = int(integer + fraction) * multiplier
            if mantissa <= MAX_INT64:
                mantissa = mantissa if positive else -mantissa
                if scale == 0:
                    int64_form = mantissa
                elif scale > 0:
                    scaled = mantissa * 10**scale
                    int64_form = scaled if MIN_INT64 <= scaled <= MAX_INT64 else None
    magnitude = Fraction(int(integer + fraction), 10 ** len(fraction))
    magnitude *= Fraction(10) ** exponent if base == 10 else Fraction(2) ** exponent
    if magnitude.denominator != 1 and (magnitude / _NANO).denominator != 1:
        magnitude = Fraction(-((-magnitude.numerator * 10**9) // magnitude.denominator), 10**9)
    if fmt == "BinarySI" and magnitude > MAX_INT64:
        magnitude = Fraction(MAX_INT64)
    return Quantity(magnitude if positive else -magnitude, text, int64_form)


def is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


_ALPHANUMERIC = frozenset("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-")


def _parse_uint(text: str, what: str) -> int:
    if not text or not all(c in _DIGITS for c in text):
        raise SemverError(f"Invalid character(s) found in {what} number {text!r}")
    if len(text) > 1 and text[0] == "0":
        raise SemverError(f"{what.capitalize()} number must not contain leading zeroes {text!r}")
    value = int(text)
    if value > 2**64 - 1:
        raise SemverError(f"{what} number out of range")
    return value


class Semver:
    __slots__ = ("build", "major", "minor", "patch", "pre")

    def __init__(
        self, major: int, minor: int, patch: int, pre: tuple[int | str, ...] = (), build: tuple[str, ...] = ()
    ) -> None:
        self.major, self.minor, self.patch = major, minor, patch
        self.pre, self.build = pre, build

    @staticmethod
    def parse(text: str) -> Semver:
        return parse_semver(text)

    @staticmethod
    def parse_normalized(text: str) -> Semver:
        """k8s normalizeAndParse: strip 'v', drop leading zeros, pad to x.y.z."""
        if text.startswith("v"):
            text = text[1:]
        parts = text.split(".", 2)
        for i, part in enumerate(parts):
            if len(part) > 1:
                part = part.lstrip("0")
                if not part or part[0] not in _DIGITS:
                    part = "0" + part
                parts[i] = part
        if len(parts) < 3:
            if any(c in parts[-1] for c in "+-"):
                raise SemverError("short version cannot contain PreRelease/Build meta data")
            parts += ["0"] * (3 - len(parts))
        return parse_semver(".".join(parts))

    def compare_to(self, other: Semver) -> int:
        for a, b in ((self.major, other.major), (self.minor, other.minor), (self.patch, other.patch)):
            if a != b:
                return 1 if a > b else -1
        if not self.pre and not other.pre:
            return 0
        if not self.pre:
            return 1
        if not other.pre:
            return -1
        for x, y in zip(self.pre, other.pre, strict=False):
            if x == y:
                continue
            if isinstance(x, int) and isinstance(y, int):
                return 1 if x > y else -1
            if isinstance(x, int):
                return -1
            if isinstance(y, int):
                return 1
            return 1 if x.encode() > y.encode() else -1
        if len(self.pre) == len(other.pre):
            return 0
        return -1 if len(self.pre) < len(other.pre) else 1

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Semver) and self.compare_to(other) == 0

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return hash(("Semver", self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(map(str, self.pre))
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


@functools.lru_cache(maxsize=4096)
def parse_semver(text: str) -> Semver:
    if not text:
        raise SemverError("Version string empty")
    parts = text.split(".", 2)
    if len(parts) != 3:
        raise SemverError("No Major.Minor.Patch elements found")
    major = _parse_uint(parts[0], "major")
    minor = _parse_uint(parts[1], "minor")
    patch_text = parts[2]
    build: list[str] = []
    pre: list[str] = []
    if "+" in patch_text:
        i = patch_text.index("+")
        build = patch_text[i + 1 :].split(".")
        patch_text = patch_text[:i]
    if "-" in patch_text:
        i = patch_text.index("-")
        pre = patch_text[i + 1 :].split(".")
        patch_text = patch_text[:i]
    patch = _parse_uint(patch_text, "patch")
    pre_parsed: list[int | str] = []
    for part in pre:
        if not part:
            raise SemverError("Prerelease is empty")
        if all(c in _DIGITS for c in part):
            if len(part) > 1 and part[0] == "0":
                raise SemverError(f"Numeric PreRelease version must not contain leading zeroes {part!r}")
            pre_parsed.append(int(part))
        elif all(c in _ALPHANUMERIC for c in part):
            pre_parsed.append(part)
        else:
            raise SemverError(f"Invalid character(s) found in prerelease {part!r}")
    for part in build:
        if not part:
            raise SemverError("Build meta data is empty")
        if not all(c in _ALPHANUMERIC for c in part):
            raise SemverError(f"Invalid character(s) found in build meta data {part!r}")
    return Semver(major, minor, patch, tuple(pre_parsed), tuple(build))


def is_semver(text: str, normalize: bool = False) -> bool:
    try:
        (Semver.parse_normalized if normalize else parse_semver)(text)
    except SemverError:
        return False
    return True
