"""Go's ``net/netip`` ParseAddr and ParsePrefix: what they accept and their error messages.

The Kubernetes IP and CIDR CEL libraries parse with net/netip and put its error in theirs, e.g.
``ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")``.
Python's ``ipaddress`` accepts the same addresses but words its errors differently, so the parse is
ported here; the address itself is then an ``ipaddress`` object.
"""

from __future__ import annotations

import ipaddress
import json

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class NetipError(ValueError):
    pass


def _quote(text: str) -> str:
    """strconv.Quote for the ASCII text of addresses."""
    return json.dumps(text, ensure_ascii=False)


class _AddrError(NetipError):
    def __init__(self, text: str, message: str, at: str = "") -> None:
        where = f" (at {_quote(at)})" if at else ""
        super().__init__(f"ParseAddr({_quote(text)}): {message}{where}")


def _ipv4_fields(text: str, part: str) -> bytes:
    fields: list[int] = []
    value, digits = 0, 0
    for i, c in enumerate(part):
        if "0" <= c <= "9":
            if digits == 1 and value == 0:
                raise _AddrError(text, "IPv4 field has octet with leading zero")
            value, digits = value * 10 + ord(c) - 48, digits + 1
            if value > 255:
                raise _AddrError(text, "IPv4 field has value >255")
        elif c == ".":
            if i == 0 or i == len(part) - 1 or part[i - 1] == ".":
                raise _AddrError(text, "IPv4 field must have at least one digit", part[i:])
            if len(fields) == 3:
                raise _AddrError(text, "IPv4 address too long")
            fields.append(value)
            value, digits = 0, 0
        else:
            raise _AddrError(text, "unexpected character", part[i:])
    if len(fields) < 3:
        raise _AddrError(text, "IPv4 address too short")
    return bytes([*fields, value])


def _ipv6(text: str) -> tuple[bytes, str]:
    s, zone = text, ""
    if "%" in s:
        s, _, zone = s.partition("%")
        if not zone:
            raise _AddrError(text, "zone must be a non-empty string")
    ip = bytearray(16)
    ellipsis, i = -1, 0
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return bytes(ip), zone
    while i < 16:
        off, acc = 0, 0
        while off < len(s) and s[off] in "0123456789abcdefABCDEF":
            acc = (acc << 4) + int(s[off], 16)
            if off > 3:
                raise _AddrError(text, "each group must have 4 or less digits", s)
            if acc > 0xFFFF:
                raise _AddrError(text, "IPv6 field has value >=2^16", s)
            off += 1
        if off == 0:
            raise _AddrError(text, "each colon-separated field must have at least one digit", s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise _AddrError(
                    text, "embedded IPv4 address must replace the final 2 fields of the address", s
                )
            if i + 4 > 16:
                raise _AddrError(
                    text, "too many hex fields to fit an embedded IPv4 at the end of the address", s
                )
            ip[i : i + 4] = _ipv4_fields(text, s)
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = acc >> 8, acc & 0xFF
        i += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            raise _AddrError(text, "unexpected character, want colon", s)
        if len(s) == 1:
            raise _AddrError(text, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise _AddrError(text, "multiple :: in address", s)
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        raise _AddrError(text, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise _AddrError(text, "address string too short")
        n = 16 - i
        ip[ellipsis + n : 16] = ip[ellipsis:i]
        ip[ellipsis : ellipsis + n] = bytes(n)
    elif ellipsis >= 0:
        raise _AddrError(text, "the :: must expand to at least one field of zeros", s)
    return bytes(ip), zone


def parse_addr(text: str) -> tuple[Address, str]:
    """netip.ParseAddr: the address and its zone ("" for none); NetipError with Go's message."""
    for c in text:
        if c == ".":
            return ipaddress.IPv4Address(_ipv4_fields(text, text)), ""
        if c == ":":
            packed, zone = _ipv6(text)
            return ipaddress.IPv6Address(packed), zone
        if c == "%":
            raise _AddrError(text, "missing IPv6 address")
    raise _AddrError(text, "unable to parse IP")


def parse_prefix(text: str) -> tuple[Address, int]:
    """netip.ParsePrefix: the address (host bits kept) and the prefix length."""

    def error(message: str) -> NetipError:
        return NetipError(f"netip.ParsePrefix({_quote(text)}): {message}")

    slash = text.rfind("/")
    if slash < 0:
        raise error("no '/'")
    try:
        address, zone = parse_addr(text[:slash])
    except NetipError as exc:
        raise error(str(exc)) from None
    if zone:
        raise error("IPv6 zones cannot be present in a prefix")
    bits = text[slash + 1 :]
    if (len(bits) > 1 and not "1" <= bits[0] <= "9") or not bits.isdigit() or not bits.isascii():
        raise error(f"bad bits after slash: {_quote(bits)}")
    if int(bits) > address.max_prefixlen:
        raise error("prefix length out of range")
    return address, int(bits)
