"""cel-go's and Kubernetes' CEL libraries that the DRA selector environment declares (Kubernetes 1.36).

From ``k8s.io/apiserver/pkg/cel/environment/base.go``: ext.Strings v2, ext.Sets, ext.Lists v3, and the
Kubernetes lists, regex, URL, IP, CIDR and format libraries. Each function is a plain callable over celpy
values that returns a value or a CELEvalError with cel-go's message. Functions named ``ns.name`` are
called as ``ns.name(...)`` (see ``NAMESPACES`` in ``cel.py``); the others as ``name(...)`` or
``x.name(...)``.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import functools
import ipaddress
import itertools
import json
import math
import urllib.parse
from collections.abc import Callable
from typing import Any

import celpy.celtypes as ct
import re2

from lockstep.dra import netip
from lockstep.dra.cel_values import (
    OPTIONAL_NONE,
    CELOptional,
    Value,
    compare,
    equal_is_true,
    eval_error,
    first_error,
    no_overload,
)


def _checked(name: str, impl: Callable[..., Value]) -> Callable[..., Value]:
    """Errors in the arguments propagate; arguments of the wrong kind give "no such overload"."""

    def function(*args: Value) -> Value:
        if error := first_error(*args):
            return error
        try:
            return impl(*args)
        except (TypeError, AttributeError, ValueError):
            return no_overload(name, *args)

    return function


def _string(value: Value) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return str(value)


def _int(value: Value) -> int:
    if not isinstance(value, ct.IntType) or isinstance(value, ct.BoolType):
        raise TypeError("not an int")
    return int(value)


def _list(value: Value) -> list[Value]:
    if not isinstance(value, list):
        raise TypeError("not a list")
    return value


# --- ext.Strings (version 2) -----------------------------------------------------------------------


def _char_at(text: Value, index: Value) -> Value:
    s, i = _string(text), _int(index)
    if i < 0 or i > len(s):
        return eval_error(f"index out of range: {i}")
    return ct.StringType(s[i : i + 1])


def _index_of(target: Value, item: Value, offset: Value = None) -> Value:
    if isinstance(target, list) and offset is None:  # Kubernetes lists library
        return ct.IntType(next((i for i, x in enumerate(target) if equal_is_true(x, item)), -1))
    s, sub = _string(target), _string(item)
    start = 0 if offset is None else _int(offset)
    if start < 0 or start > len(s):
        return eval_error(f"index out of range: {start}")
    return ct.IntType(s.find(sub, start))


def _last_index_of(target: Value, item: Value, offset: Value = None) -> Value:
    if isinstance(target, list) and offset is None:
        return ct.IntType(
            next((i for i in range(len(target) - 1, -1, -1) if equal_is_true(target[i], item)), -1)
        )
    s, sub = _string(target), _string(item)
    if offset is None:
        return ct.IntType(s.rfind(sub))
    end = _int(offset)
    if end < 0 or end >= len(s):
        return eval_error(f"index out of range: {end}")
    return ct.IntType(s.rfind(sub, 0, end + len(sub)))


def _substring(text: Value, start: Value, end: Value = None) -> Value:
    s, begin = _string(text), _int(start)
    stop = len(s) if end is None else _int(end)
    if begin < 0 or begin > len(s):
        return eval_error(f"index out of range: {begin}")
    if stop < 0 or stop > len(s):
        return eval_error(f"index out of range: {stop}")
    if begin > stop:
        return eval_error(f"invalid substring range. start: {begin}, end: {stop}")
    return ct.StringType(s[begin:stop])


def _split(text: Value, separator: Value, limit: Value = None) -> Value:
    s, sep = _string(text), _string(separator)
    n = -1 if limit is None else _int(limit)
    if n == 0:
        return ct.ListType([])
    if sep == "":  # Go splits into characters, the last one holding the rest
        chars = list(s) if n < 0 or n >= len(s) else [*s[: n - 1], s[n - 1 :]]
        return ct.ListType([ct.StringType(c) for c in chars])
    parts = s.split(sep) if n < 0 else s.split(sep, n - 1)
    return ct.ListType([ct.StringType(p) for p in parts])


def _replace(text: Value, old: Value, new: Value, limit: Value = None) -> Value:
    n = -1 if limit is None else _int(limit)
    return ct.StringType(_string(text).replace(_string(old), _string(new), n))


def _ascii(convert: Callable[[str], str]) -> Callable[[Value], Value]:
    return lambda text: ct.StringType("".join(convert(c) if c.isascii() else c for c in _string(text)))


def _join(items: Value, separator: Value = None) -> Value:
    sep = "" if separator is None else _string(separator)
    return ct.StringType(sep.join(_string(item) for item in _list(items)))


_QUOTE_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def _quote(text: Value) -> Value:
    body = "".join(_QUOTE_ESCAPES.get(c, "\\" + c if c in '"\\' else c) for c in _string(text))
    return ct.StringType(f'"{body}"')


def go_double_string(number: float) -> str:
    """strconv.FormatFloat(x, 'g', -1, 64): how cel-go turns a double into a string."""
    if number != number:
        return "NaN"
    if number in (math.inf, -math.inf):
        return "+Inf" if number > 0 else "-Inf"
    sign, digit_tuple, exponent = decimal.Decimal(repr(number)).as_tuple()
    assert isinstance(exponent, int)
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    exponent += len(digit_tuple) - len(digits)
    point = len(digits) + exponent if digits != "0" else 1  # digits before the decimal point
    prefix = "-" if sign else ""
    if digits != "0" and not -4 <= point - 1 < 6:  # %e when the exponent is < -4 or >= 6
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        return f"{prefix}{mantissa}e{'-' if point - 1 < 0 else '+'}{abs(point - 1):02d}"
    if point <= 0:
        return f"{prefix}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return prefix + digits + "0" * (point - len(digits))
    return f"{prefix}{digits[:point]}.{digits[point:]}"


_SUPERSCRIPTS = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_SPECIAL_DOUBLES = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def _cel_type_name(value: Value) -> str:
    """cel-go's TypeName() of a value, as format's errors name it."""
    if value is None or isinstance(value, ct.NullType):
        return "null_type"
    for cel_type, name in (
        (ct.BoolType, "bool"),
        (ct.IntType, "int"),
        (ct.UintType, "uint"),
        (ct.DoubleType, "double"),
        (ct.StringType, "string"),
        (ct.BytesType, "bytes"),
        (list, "list"),
        (dict, "map"),
        (ct.DurationType, "google.protobuf.Duration"),
        (ct.TimestampType, "google.protobuf.Timestamp"),
    ):
        if isinstance(value, cel_type):
            return name
    return type(value).__name__


class _FormatError(Exception):
    pass


def _is_integer(value: Value) -> bool:
    return isinstance(value, ct.IntType | ct.UintType) and not isinstance(value, ct.BoolType)


def _double_operand(value: Value, clause: str) -> float:
    """%f / %e take doubles and the strings "NaN", "Infinity" and "-Infinity"."""
    if isinstance(value, ct.StringType) and str(value) in _SPECIAL_DOUBLES:
        return _SPECIAL_DOUBLES[str(value)]
    if not isinstance(value, ct.DoubleType):
        raise _FormatError(f"{clause} clause can only be used on doubles, was given {_cel_type_name(value)}")
    return float(value)


def _fixed(value: Value, precision: int) -> str:
    """%f as cel-go prints it with its default locale, en_US (x/text/message: grouped thousands)."""
    number = _double_operand(value, "fixed-point")
    if number != number:
        return "NaN"
    if number in (math.inf, -math.inf):
        return "∞" if number > 0 else "-∞"
    return f"{number:,.{precision}f}"


def _scientific(value: Value) -> str:
    """%e as cel-go prints it: the clause's precision is used as a width, so 6 digits always; en_US shows
    the exponent as a multiplication sign, 10 and superscript digits, with narrow no-break spaces."""
    number = _double_operand(value, "scientific")
    if number != number:
        return "NaN"
    if number in (math.inf, -math.inf):
        return "∞" if number > 0 else "-∞"
    mantissa, _, exponent = f"{number:.6e}".partition("e")
    power = int(exponent)
    superscript = f"{'-' if power < 0 else ''}{abs(power):02d}".translate(_SUPERSCRIPTS)
    return f"{mantissa}\u202f\u00d7\u202f10{superscript}"


def _format_string(value: Value) -> str:
    if value is None or isinstance(value, ct.NullType):
        return "null"
    if isinstance(value, ct.BoolType):
        return "true" if value else "false"
    if isinstance(value, ct.DoubleType):
        return go_double_string(float(value))
    if isinstance(value, ct.BytesType):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, list):
        return "[" + ", ".join(_quote_for_cel(v, _format_member(v)) for v in value) + "]"
    if isinstance(value, dict):
        entries = []
        for key, item in value.items():
            if not isinstance(key, ct.StringType | ct.BoolType | ct.IntType | ct.UintType):
                raise _FormatError(f"no formatting function for map key of type {_cel_type_name(key)}")
            entries.append(
                (_quote_for_cel(key, _format_string(key)), _quote_for_cel(item, _format_member(item)))
            )
        return "{" + ", ".join(f"{k}:{v}" for k, v in sorted(entries, key=lambda e: e[0])) + "}"
    if isinstance(value, str | ct.IntType | ct.UintType | ct.DurationType | ct.TimestampType):
        return str(value)
    raise _FormatError(
        "string clause can only be used on strings, bools, bytes, ints, doubles, maps, lists, types, "
        f"durations, and timestamps, was given {_cel_type_name(value)}"
    )


def _format_member(value: Value) -> str:
    """clauseForType: how a list element or map value is printed inside %s."""
    if isinstance(value, ct.DoubleType):
        return f"{float(value):.6f}" if math.isfinite(value) else go_double_string(float(value))
    if isinstance(value, ct.TimestampType):
        return f'timestamp("{value}")'
    if isinstance(value, ct.DurationType):
        return f'duration("{value}")'
    return _format_string(value)


def _quote_for_cel(value: Value, text: str) -> str:
    if isinstance(value, ct.StringType):
        return json.dumps(text, ensure_ascii=False)
    if isinstance(value, ct.BytesType):
        return "b" + json.dumps(text, ensure_ascii=False)
    if isinstance(value, ct.DoubleType) and not math.isfinite(value):
        return json.dumps(text)
    return text


def _format_clause(value: Value, verb: str, precision: int | None) -> str:
    if verb == "s":
        return _format_string(value)
    if verb == "d":
        if not _is_integer(value):
            raise _FormatError(
                f"decimal clause can only be used on integers, was given {_cel_type_name(value)}"
            )
        return str(int(value))
    if verb == "f":
        return _fixed(value, 6 if precision is None else precision)
    if verb == "e":
        return _scientific(value)
    if verb == "b":
        if isinstance(value, ct.BoolType):
            return "1" if value else "0"
        if not _is_integer(value):
            raise _FormatError(
                f"only integers and bools can be formatted as binary, was given {_cel_type_name(value)}"
            )
        return format(int(value), "b")
    if verb in "xX":
        if isinstance(value, ct.StringType | ct.BytesType):
            data = str(value).encode() if isinstance(value, ct.StringType) else bytes(value)
            text = data.hex()
        elif _is_integer(value):
            text = format(int(value), "x")
        else:
            raise _FormatError(
                "only integers, byte buffers, and strings can be formatted as hex, "
                f"was given {_cel_type_name(value)}"
            )
        return text.upper() if verb == "X" else text
    if not _is_integer(value):
        raise _FormatError(f"octal clause can only be used on integers, was given {_cel_type_name(value)}")
    return format(int(value), "o")


class UnknownFormatArgument:
    """An argument whose value is known only at run time: every clause accepts it (compile-time check)."""


def format_string(text: str, values: list[Value]) -> tuple[str, int]:
    """cel-go's formatting of ``text.format(values)``: the result and how many values it used.

    Raises _FormatError with cel-go's message."""
    out, i, used = [], 0, 0
    while i < len(text):
        c = text[i]
        i += 1
        if c != "%":
            out.append(c)
            continue
        if i < len(text) and text[i] == "%":
            out.append("%")
            i += 1
            continue
        if i >= len(text):
            raise _FormatError("unexpected end of string")
        precision = None
        if text[i] == ".":
            j = i + 1
            while j < len(text) and text[j].isdigit():
                j += 1
            if j >= len(text):
                raise _FormatError(
                    "could not parse formatting clause: error while parsing precision: "
                    "could not find end of precision specifier"
                )
            precision, i = int(text[i + 1 : j] or 0), j
        verb = text[i]
        i += 1
        if verb not in "sdfebxXo":
            raise _FormatError(f'could not parse formatting clause: unrecognized formatting clause "{verb}"')
        if used >= len(values):
            raise _FormatError(f"index {used} out of range")
        value = values[used]
        used += 1
        if isinstance(value, UnknownFormatArgument):
            continue
        try:
            out.append(_format_clause(value, verb, precision))
        except _FormatError as exc:
            raise _FormatError(f"error during formatting: {exc}") from None
    return "".join(out), used


def check_format_call(text: str, values: list[Value]) -> str | None:
    """The compile-time check cel-go's strings library runs on ``"literal".format([...])``."""
    try:
        _, used = format_string(text, values)
    except _FormatError as exc:
        return str(exc)
    if len(values) > used:
        return f"too many arguments supplied to string.format (expected {used}, got {len(values)})"
    return None


def _format(template: Value, args: Value) -> Value:
    """ext.Strings ``<string>.format(<list>)`` (cel-go's formatting of strings versions 1 to 3)."""
    try:
        return ct.StringType(format_string(_string(template), _list(args))[0])
    except _FormatError as exc:
        return eval_error(str(exc))


# --- ext.Sets ----------------------------------------------------------------------------------------


def _contains_all(container: list[Value], items: list[Value]) -> bool:
    return all(any(equal_is_true(x, y) for x in container) for y in items)


_SETS: dict[str, Callable[..., Value]] = {
    "sets.contains": lambda a, b: ct.BoolType(_contains_all(_list(a), _list(b))),
    "sets.equivalent": lambda a, b: ct.BoolType(_contains_all(_list(a), _list(b)) and _contains_all(b, a)),
    "sets.intersects": lambda a, b: ct.BoolType(any(equal_is_true(x, y) for x in _list(a) for y in _list(b))),
}


# --- Kubernetes lists library and ext.Lists (version 3) -----------------------------------------------


def _ordered(items: list[Value]) -> Value:
    for a, b in itertools.pairwise(items):
        order = compare(a, b, "isSorted")
        if not isinstance(order, int):
            return order if order is not None else ct.BoolType(False)
        if order > 0:
            return ct.BoolType(False)
    return ct.BoolType(True)


def _extreme(name: str, pick: Callable[[int], bool]) -> Callable[[Value], Value]:
    def function(items: Value) -> Value:
        values = _list(items)
        if not values:
            return eval_error(f"{name} called on empty list")
        best = values[0]
        for value in values[1:]:
            order = compare(value, best, name)
            if not isinstance(order, int):
                return order if order is not None else eval_error(f"{name}: NaN")
            if pick(order):
                best = value
        return best

    return function


def _sum(items: Value) -> Value:
    values = _list(items)
    if not values:
        return ct.IntType(0)
    total = values[0]
    for value in values[1:]:
        total = total + value
    return total


def _slice(items: Value, start: Value, end: Value) -> Value:
    values, begin, stop = _list(items), _int(start), _int(end)
    if begin < 0 or stop < 0:
        return eval_error(f"cannot slice({begin}, {stop}), negative indexes not supported")
    if begin > stop:
        return eval_error(
            f"cannot slice({begin}, {stop}), start index must be less than or equal to end index"
        )
    if stop > len(values):
        return eval_error(f"cannot slice({begin}, {stop}), list is length {len(values)}")
    return ct.ListType(values[begin:stop])


def _flatten(items: Value, depth: Value = None) -> Value:
    levels = 1 if depth is None else _int(depth)
    if levels < 0:
        return eval_error("level must be non-negative")
    result = _list(items)
    for _ in range(levels):
        flat: list[Value] = []
        for value in result:
            flat.extend(value if isinstance(value, list) else [value])
        result = flat
    return ct.ListType(result)


def _distinct(items: Value) -> Value:
    unique: list[Value] = []
    for value in _list(items):
        if not any(equal_is_true(value, seen) for seen in unique):
            unique.append(value)
    return ct.ListType(unique)


def sort_values(values: list[Value], keys: list[Value]) -> Value:
    """values ordered by keys (cel-go: keys of one orderable type)."""
    if keys and any(type(k) is not type(keys[0]) for k in keys):
        return eval_error("list elements must have the same type")

    def order(a: tuple[Value, Value], b: tuple[Value, Value]) -> int:
        result = compare(a[0], b[0], "sort")
        if not isinstance(result, int):
            raise TypeError("unorderable")
        return result

    try:
        pairs = sorted(zip(keys, values, strict=True), key=functools.cmp_to_key(order))
    except TypeError:
        return no_overload("sort", *keys[:1])
    return ct.ListType([value for _, value in pairs])


_LISTS: dict[str, Callable[..., Value]] = {
    "isSorted": lambda items: _ordered(_list(items)),
    "sum": _sum,
    "min": _extreme("min", lambda order: order < 0),
    "max": _extreme("max", lambda order: order > 0),
    "slice": _slice,
    "flatten": _flatten,
    "lists.range": lambda n: ct.ListType([ct.IntType(i) for i in range(max(_int(n), 0))]),
    "distinct": _distinct,
    "reverse": lambda items: ct.ListType(list(reversed(_list(items)))),
    "sort": lambda items: sort_values(_list(items), _list(items)),
    "first": lambda items: CELOptional(_list(items)[0]) if _list(items) else OPTIONAL_NONE,
    "last": lambda items: CELOptional(_list(items)[-1]) if _list(items) else OPTIONAL_NONE,
}


# --- Kubernetes regex library --------------------------------------------------------------------


def _find(text: Value, pattern: Value) -> Value:
    match = re2.search(_string(pattern), _string(text))
    return ct.StringType(match.group(0) if match else "")


def _find_all(text: Value, pattern: Value, limit: Value = None) -> Value:
    found = [ct.StringType(m.group(0)) for m in re2.finditer(_string(pattern), _string(text))]
    n = -1 if limit is None else _int(limit)
    return ct.ListType(found if n < 0 else found[:n])


# --- Kubernetes IP and CIDR libraries (net/netip semantics) --------------------------------------------


class IP:
    """A ``net.IP`` value."""

    __slots__ = ("address",)

    def __init__(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> None:
        self.address = address

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IP) and self.address == other.address

    def __hash__(self) -> int:
        return hash(self.address)

    def __str__(self) -> str:
        return str(self.address)


class CIDR:
    """A ``net.CIDR`` value: an address (host bits kept) and a prefix length."""

    __slots__ = ("interface",)

    def __init__(self, interface: ipaddress.IPv4Interface | ipaddress.IPv6Interface) -> None:
        self.interface = interface

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CIDR) and self.interface == other.interface

    def __hash__(self) -> int:
        return hash(self.interface)

    def __str__(self) -> str:
        return str(self.interface)


class _ConversionError(ValueError):
    """A string that does not convert to an IP, CIDR or URL; the message is upstream's."""


def _quoted(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # Go's %q for the texts at hand


def _parse_ip(text: str) -> IP:
    """library.IP's parseIPAddr: netip.ParseAddr, no zone, no IPv4-mapped IPv6."""
    try:
        address, zone = netip.parse_addr(text)
    except netip.NetipError as exc:
        raise _ConversionError(
            f"IP Address {_quoted(text)} parse error during conversion from string: {exc}"
        ) from None
    if zone:
        raise _ConversionError(f"IP address {_quoted(text)} with zone value is not allowed")
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise _ConversionError(f"IPv4-mapped IPv6 address {_quoted(text)} is not allowed")
    return IP(address)


def _parse_cidr(text: str) -> CIDR:
    """library.CIDR's parseCIDR: netip.ParsePrefix, no IPv4-mapped IPv6."""
    try:
        address, bits = netip.parse_prefix(text)
    except netip.NetipError as exc:
        raise _ConversionError(
            f"network address {_quoted(text)} parse error during conversion from string: {exc}"
        ) from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise _ConversionError(f"IPv4-mapped IPv6 address {_quoted(text)} is not allowed")
    return CIDR(ipaddress.ip_interface(f"{address}/{bits}"))


def _fallible(parse: Callable[[str], Any]) -> Callable[[Value], Value]:
    def function(text: Value) -> Value:
        try:
            return parse(_string(text))
        except _ConversionError as exc:
            return eval_error(str(exc))

    return function


def _is_valid(parse: Callable[[str], Any]) -> Callable[[Value], Value]:
    def function(text: Value) -> Value:
        s = _string(text)
        try:
            parse(s)
        except ValueError:
            return ct.BoolType(False)
        return ct.BoolType(True)

    return function


def _ip_method(test: Callable[[Any], bool]) -> Callable[[Value], Value]:
    def method(value: Value) -> Value:
        if not isinstance(value, IP):
            raise TypeError("not an IP")
        return ct.BoolType(test(value.address))

    return method


def _go_global_unicast(address: Any) -> bool:
    """net/netip Addr.IsGlobalUnicast: private ranges count, broadcast does not."""
    if address.version == 4 and str(address) == "255.255.255.255":
        return False
    return not (
        address.is_unspecified
        or address.is_loopback
        or address.is_multicast
        or address.is_link_local
        or (address.version == 4 and address in ipaddress.ip_network("169.254.0.0/16"))
    )


def _link_local_multicast(address: Any) -> bool:
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return address in ipaddress.ip_network("ff02::/16")


def _ip_is_canonical(text: Value) -> Value:
    s = _string(text)
    parsed = _fallible(_parse_ip)(text)
    if not isinstance(parsed, IP):
        return parsed
    return ct.BoolType(str(parsed) == s)


def _contains_ip(cidr: Value, other: Value) -> Value:
    if not isinstance(cidr, CIDR):
        raise TypeError("not a CIDR")
    address = other if isinstance(other, IP) else _fallible(_parse_ip)(other)
    if not isinstance(address, IP):
        return address
    return ct.BoolType(address.address in cidr.interface.network)


def _contains_cidr(cidr: Value, other: Value) -> Value:
    if not isinstance(cidr, CIDR):
        raise TypeError("not a CIDR")
    inner = other if isinstance(other, CIDR) else _fallible(_parse_cidr)(other)
    if not isinstance(inner, CIDR):
        return inner
    if inner.interface.version != cidr.interface.version:
        return ct.BoolType(False)
    network = cidr.interface.network
    return ct.BoolType(
        inner.interface.ip in network and network.prefixlen <= inner.interface.network.prefixlen
    )


def _cidr_method(impl: Callable[[Any], Value]) -> Callable[[Value], Value]:
    def method(value: Value) -> Value:
        if not isinstance(value, CIDR):
            raise TypeError("not a CIDR")
        return impl(value.interface)

    return method


def _ip_of(value: Value) -> Value:
    if isinstance(value, CIDR):
        return IP(value.interface.ip)
    return _fallible(_parse_ip)(value)


_NETWORK: dict[str, Callable[..., Value]] = {
    "ip": _ip_of,
    "isIP": _is_valid(_parse_ip),
    "ip.isCanonical": _ip_is_canonical,
    "family": lambda value: ct.IntType(value.address.version if isinstance(value, IP) else _no_family()),
    "isUnspecified": _ip_method(lambda a: a.is_unspecified),
    "isLoopback": _ip_method(lambda a: a.is_loopback),
    "isLinkLocalMulticast": _ip_method(_link_local_multicast),
    "isLinkLocalUnicast": _ip_method(lambda a: a.is_link_local),
    "isGlobalUnicast": _ip_method(_go_global_unicast),
    "cidr": _fallible(_parse_cidr),
    "isCIDR": _is_valid(_parse_cidr),
    "containsIP": _contains_ip,
    "containsCIDR": _contains_cidr,
    "masked": _cidr_method(lambda i: CIDR(ipaddress.ip_interface(str(i.network)))),
    "prefixLength": _cidr_method(lambda i: ct.IntType(i.network.prefixlen)),
}


def _no_family() -> int:
    raise TypeError("not an IP")


# --- Kubernetes URL library ------------------------------------------------------------------------


class URL:
    """A ``net.URL`` value (Go url.ParseRequestURI)."""

    __slots__ = ("parts", "text")

    def __init__(self, text: str, parts: urllib.parse.SplitResult) -> None:
        self.text, self.parts = text, parts

    def __eq__(self, other: object) -> bool:
        return isinstance(other, URL) and self.text == other.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __str__(self) -> str:
        return self.text


def _parse_url(text: str) -> URL:
    parts = urllib.parse.urlsplit(text)
    if not (parts.scheme or text.startswith("/")):
        raise _ConversionError(
            f"URL parse error during conversion from string: parse {_quoted(text)}: invalid URI for request"
        )
    return URL(text, parts)


def _url_method(impl: Callable[[urllib.parse.SplitResult], Value]) -> Callable[[Value], Value]:
    def method(value: Value) -> Value:
        if not isinstance(value, URL):
            raise TypeError("not a URL")
        return impl(value.parts)

    return method


def _host(parts: urllib.parse.SplitResult) -> str:
    return parts.netloc.rpartition("@")[2]


def _hostname(parts: urllib.parse.SplitResult) -> str:
    host = _host(parts)
    if host.startswith("["):
        return host[1 : host.find("]")]
    return host.partition(":")[0]


def _port(parts: urllib.parse.SplitResult) -> str:
    host = _host(parts)
    tail = host[host.find("]") + 1 :] if host.startswith("[") else host
    return tail.partition(":")[2]


def _query(parts: urllib.parse.SplitResult) -> Value:
    pairs = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
    return ct.MapType(
        {ct.StringType(k): ct.ListType([ct.StringType(v) for v in vs]) for k, vs in pairs.items()}
    )


_URLS: dict[str, Callable[..., Value]] = {
    "url": _fallible(_parse_url),
    "isURL": _is_valid(_parse_url),
    "getScheme": _url_method(lambda p: ct.StringType(p.scheme)),
    "getHost": _url_method(lambda p: ct.StringType(_host(p))),
    "getHostname": _url_method(lambda p: ct.StringType(_hostname(p))),
    "getPort": _url_method(lambda p: ct.StringType(_port(p))),
    "getEscapedPath": _url_method(lambda p: ct.StringType(urllib.parse.quote(urllib.parse.unquote(p.path)))),
    "getQuery": _url_method(_query),
}


# --- Kubernetes format library (k8s.io/apimachinery/pkg/util/validation messages) --------------------


def _regex_error(message: str, pattern: str, *examples: str) -> str:
    """validation.RegexError, including its double space between examples."""
    shown = " or ".join(f"'{example}', " for example in examples)
    return f"{message} (e.g. {shown}regex used for validation is '{pattern}')"


_DNS1123_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_DNS1035_LABEL = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?"
_QUALIFIED_NAME_MESSAGE = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def _matching(pattern: str, max_length: int, message: str, *examples: str) -> Callable[[str], list[str]]:
    compiled = re2.compile(pattern)

    def validate(value: str) -> list[str]:
        errors = [f"must be no more than {max_length} characters"] if len(value) > max_length else []
        if not compiled.fullmatch(value):
            errors.append(_regex_error(message, pattern, *examples))
        return errors

    return validate


_is_dns1123_label = _matching(
    _DNS1123_LABEL,
    63,
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character",
    "my-name",
    "123-abc",
)
_is_dns1123_subdomain = _matching(
    _DNS1123_SUBDOMAIN,
    253,
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character",
    "example.com",
)
_is_dns1035_label = _matching(
    _DNS1035_LABEL,
    63,
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character",
    "my-name",
    "abc-123",
)
_is_label_value = _matching(
    _LABEL_VALUE,
    63,
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character",
    "MyValue",
    "my_value",
    "12345",
)


def _is_qualified_name(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) > 2:
        return [
            "a qualified name "
            + _regex_error(_QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errors: list[str] = []
    name = parts[-1]
    if len(parts) == 2:
        if not parts[0]:
            errors.append("prefix part must be non-empty")
        else:
            errors.extend(f"prefix part {message}" for message in _is_dns1123_subdomain(parts[0]))
    if not name:
        errors.append("name part must be non-empty")
    elif len(name) > 63:
        errors.append("name part must be no more than 63 characters")
    if not re2.fullmatch(_QUALIFIED_NAME, name):
        errors.append(
            "name part "
            + _regex_error(_QUALIFIED_NAME_MESSAGE, _QUALIFIED_NAME, "MyName", "my.name", "123-abc")
        )
    return errors


def _mask_trailing_dash(name: str) -> str:
    """apimachinery's maskTrailingDash, which drops the two last characters."""
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def _uri(value: str) -> list[str]:
    try:
        _parse_url(value)
    except ValueError:
        return [f'parse "{value}": invalid URI for request']
    return []


def _one_message(valid: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda value: [] if valid(value) else [message]


_UUID = re2.compile(r"(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$")
_DATETIME = re2.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
)


def _valid_base64(value: str) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _valid_date(value: str) -> bool:
    try:
        datetime.date.fromisoformat(value)
    except ValueError:
        return False
    return len(value) == 10


def _valid_datetime(value: str) -> bool:
    match = _DATETIME.match(value)
    if not match:
        return False
    try:
        year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
        datetime.datetime(year, month, day, hour, minute, second)
    except ValueError:
        return False
    return True


class Format:
    """A ``kubernetes.NamedFormat`` value of the format library."""

    __slots__ = ("name", "validate")

    def __init__(self, name: str, validate: Callable[[str], list[str]]) -> None:
        self.name, self.validate = name, validate

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Format) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


_FORMATS = {
    name: Format(name, validate)
    for name, validate in {
        "dns1123Label": _is_dns1123_label,
        "dns1123Subdomain": _is_dns1123_subdomain,
        "dns1035Label": _is_dns1035_label,
        "qualifiedName": _is_qualified_name,
        "dns1123LabelPrefix": lambda v: _is_dns1123_label(_mask_trailing_dash(v)),
        "dns1123SubdomainPrefix": lambda v: _is_dns1123_subdomain(_mask_trailing_dash(v)),
        "dns1035LabelPrefix": lambda v: _is_dns1035_label(_mask_trailing_dash(v)),
        "labelValue": _is_label_value,
        "uri": _uri,
        "uuid": _one_message(lambda v: bool(_UUID.match(v)), "does not match the UUID format"),
        "byte": _one_message(_valid_base64, "invalid base64"),
        "date": _one_message(_valid_date, "invalid date"),
        "datetime": _one_message(_valid_datetime, "invalid datetime"),
    }.items()
}


def _validate(format_: Value, text: Value) -> Value:
    if not isinstance(format_, Format):
        raise TypeError("not a format")
    errors = format_.validate(_string(text))
    return CELOptional(ct.ListType([ct.StringType(e) for e in errors])) if errors else OPTIONAL_NONE


_FORMAT_FUNCTIONS: dict[str, Callable[..., Value]] = {
    "format.named": lambda name: (
        CELOptional(_FORMATS[_string(name)]) if _string(name) in _FORMATS else OPTIONAL_NONE
    ),
    "validate": _validate,
    **{f"format.{name}": (lambda f=f: f) for name, f in _FORMATS.items()},
}


_STRINGS: dict[str, Callable[..., Value]] = {
    "charAt": _char_at,
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "lowerAscii": _ascii(str.lower),
    "upperAscii": _ascii(str.upper),
    "replace": _replace,
    "split": _split,
    "substring": _substring,
    "trim": lambda text: ct.StringType(_string(text).strip()),
    "join": _join,
    "strings.quote": _quote,
    "format": _format,
    "find": _find,
    "findAll": _find_all,
}

LIBRARY_FUNCTIONS: dict[str, Callable[..., Value]] = {
    name: _checked(name.rpartition(".")[2], impl)
    for name, impl in {**_STRINGS, **_SETS, **_LISTS, **_NETWORK, **_URLS, **_FORMAT_FUNCTIONS}.items()
}


def library_string(value: Value) -> str | None:
    """string(x) of the library types (IP, CIDR, URL); None for other values."""
    return str(value) if isinstance(value, IP | CIDR | URL) else None
