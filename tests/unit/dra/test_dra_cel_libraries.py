"""Upstream conformance tables for the CEL libraries of Kubernetes' DRA selector environment.

Each table is translated from the upstream test named above it. Expected: a plain value, or
("error", substring) for a runtime error, or ("compile_error", substring) for a refusal at compile time.
"""

from __future__ import annotations

from typing import Any

import celpy.celtypes as ct
import pytest

from lockstep.dra.cel import SELECTOR_MAX_COST, CELError, Selector, compile_selector

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


# k8s.io/apiserver/pkg/cel/library/ip_test.go TestIP
IP: list[Case] = [
    ('ip("192.168.0.1") == ip("192.168.0.1")', True),
    (
        'ip("192.168.0.1.0")',
        (
            "error",
            'IP Address "192.168.0.1.0" parse error during conversion from string: '
            'ParseAddr("192.168.0.1.0"): IPv4 address too long',
        ),
    ),
    ('isIP("192.168.0.1")', True),
    ('isIP("192.168.0.1.0")', False),
    ('ip.isCanonical("127.0.0.1")', True),
    ('ip.isCanonical("127.0.0.1.0")', ("error", 'IP Address "127.0.0.1.0" parse error during conversion')),
    ('ip("192.168.0.1").family()', 4),
    ('ip("0.0.0.0").isUnspecified()', True),
    ('ip("127.0.0.1").isUnspecified()', False),
    ('ip("127.0.0.1").isLoopback()', True),
    ('ip("1.2.3.4").isLoopback()', False),
    ('ip("224.0.0.1").isLinkLocalMulticast()', True),
    ('ip("224.0.1.1").isLinkLocalMulticast()', False),
    ('ip("169.254.169.254").isLinkLocalUnicast()', True),
    ('ip("192.168.0.1").isLinkLocalUnicast()', False),
    ('ip("192.168.0.1").isGlobalUnicast()', True),
    ('ip("255.255.255.255").isGlobalUnicast()', False),
    ('ip("2001:db8::68") == ip("2001:db8::68")', True),
    (
        'ip("2001:db8:::68")',
        ("error", 'IP Address "2001:db8:::68" parse error during conversion from string'),
    ),
    ('isIP("2001:db8::68")', True),
    ('isIP("2001:db8:::68")', False),
    ('ip.isCanonical("2001:db8::68")', True),
    ('ip.isCanonical("2001:DB8::68")', False),
    ('ip("2001:db8::68").family()', 6),
    ('ip("::").isUnspecified()', True),
    ('ip("::1").isUnspecified()', False),
    ('ip("::1").isLoopback()', True),
    ('ip("2001:db8::abcd").isLoopback()', False),
    ('ip("ff02::1").isLinkLocalMulticast()', True),
    ('ip("fd00::1").isLinkLocalMulticast()', False),
    ('ip("fe80::1").isLinkLocalUnicast()', True),
    ('ip("fd80::1").isLinkLocalUnicast()', False),
    ('ip("2001:db8::abcd").isGlobalUnicast()', True),
    ('ip("ff00::1").isGlobalUnicast()', False),
    ('string(ip("192.168.0.1"))', "192.168.0.1"),
    # ip.go: zones and IPv4-mapped IPv6 addresses are refused
    ('ip("::ffff:1.2.3.4")', ("error", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed')),
    ('ip("fe80::1%eth0")', ("error", 'IP address "fe80::1%eth0" with zone value is not allowed')),
    # net/netip ParseAddr errors, which the library passes on
    ('ip("1.2.3")', ("error", 'ParseAddr("1.2.3"): IPv4 address too short')),
    ('ip("01.2.3.4")', ("error", 'ParseAddr("01.2.3.4"): IPv4 field has octet with leading zero')),
    ('ip("256.1.1.1")', ("error", 'ParseAddr("256.1.1.1"): IPv4 field has value >255')),
    ('ip("1::2::3")', ("error", 'ParseAddr("1::2::3"): multiple :: in address (at ":3")')),
    (
        'ip("12345::")',
        ("error", 'ParseAddr("12345::"): each group must have 4 or less digits (at "12345::")'),
    ),
    ('ip("abc")', ("error", 'ParseAddr("abc"): unable to parse IP')),
]

# k8s.io/apiserver/pkg/cel/library/cidr_test.go TestCIDR
CIDRS: list[Case] = [
    ('cidr("192.168.0.0/24") == cidr("192.168.0.0/24")', True),
    (
        'cidr("192.168.0.0/33")',
        (
            "error",
            'network address "192.168.0.0/33" parse error during conversion from string: '
            'netip.ParsePrefix("192.168.0.0/33"): prefix length out of range',
        ),
    ),
    ('cidr("192.168.0.0")', ("error", """netip.ParsePrefix("192.168.0.0"): no '/'""")),
    (
        'cidr("192.168.0.0/024")',
        ("error", 'netip.ParsePrefix("192.168.0.0/024"): bad bits after slash: "024"'),
    ),
    (
        'cidr("fe80::1%eth0/64")',
        ("error", 'netip.ParsePrefix("fe80::1%eth0/64"): IPv6 zones cannot be present in a prefix'),
    ),
    ('isCIDR("192.168.0.0/24")', True),
    ('isCIDR("192.168.0.0/33")', False),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.0.1"))', True),
    ('cidr("192.168.0.0/24").containsIP(ip("192.168.1.1"))', False),
    ('cidr("192.168.0.0/24").containsIP("192.168.0.1")', True),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/25"))', True),
    ('cidr("192.168.0.0/24").containsCIDR(cidr("192.168.0.0/23"))', False),
    ('cidr("192.168.0.0/24").containsCIDR("192.168.0.0/25")', True),
    ('cidr("192.168.0.0/24").ip() == ip("192.168.0.0")', True),
    ('cidr("192.168.0.1/24").ip() == ip("192.168.0.1")', True),
    ('cidr("192.168.0.1/24").masked() == cidr("192.168.0.0/24")', True),
    ('cidr("192.168.0.0/24").prefixLength()', 24),
    ('cidr("2001:db8::/32").containsIP(ip("2001:db8::1"))', True),
    ('cidr("2001:db8::/32").containsIP(ip("2001:db9::1"))', False),
    ('cidr("2001:db8::/32").containsCIDR(cidr("2001:db8::/33"))', True),
    ('cidr("2001:db8::/32").prefixLength()', 32),
    ('string(cidr("192.168.0.0/24"))', "192.168.0.0/24"),
]

# k8s.io/apiserver/pkg/cel/library/library_compatibility / urls.go documented examples
URLS: list[Case] = [
    ('url("https://example.com/path").getScheme()', "https"),
    ('url("https://example.com:80/path").getHost()', "example.com:80"),
    ('url("https://[::1]:80/path").getHost()', "[::1]:80"),
    ('url("https://example.com:80/path").getHostname()', "example.com"),
    ('url("https://[::1]:80/path").getHostname()', "::1"),
    ('url("https://example.com:80/path").getPort()', "80"),
    ('url("https://example.com/path").getPort()', ""),
    ('url("https://example.com/path with spaces/").getEscapedPath()', "/path%20with%20spaces/"),
    ('url("https://example.com/path?k1=a&k2=b&k2=c").getQuery()', {"k1": ["a"], "k2": ["b", "c"]}),
    ('url("/absolute-path").getScheme()', ""),
    ('isURL("https://user:pass@example.com:80/path?query=val#fragment")', True),
    ('isURL("example.com")', False),
    ('url("example.com")', ("error", "URL parse error during conversion from string")),
]

# cel-go ext/strings_test.go (version 2)
STRINGS: list[Case] = [
    ("'tacocat'.charAt(3) == 'o'", True),
    ("'tacocat'.charAt(7) == ''", True),
    ("'tacocat'.charAt(30)", ("error", "index out of range: 30")),
    ("'tacocat'.indexOf('') == 0", True),
    ("'tacocat'.indexOf('ac') == 1", True),
    ("'tacocat'.indexOf('none') == -1", True),
    ("'tacocat'.indexOf('a', 3) == 5", True),
    ("'hello mellow'.indexOf('ello', 2) == 7", True),
    ("'tacocat'.indexOf('a', 30)", ("error", "index out of range: 30")),
    ("'tacocat'.lastIndexOf('at') == 5", True),
    ("'tacocat'.lastIndexOf('none') == -1", True),
    ("'hello mellow'.lastIndexOf('ello', 6) == 1", True),
    ("'tacocat'.lastIndexOf('a', -1)", ("error", "index out of range: -1")),
    ("'TacoCat'.lowerAscii() == 'tacocat'", True),
    ("'TacoCÆt'.lowerAscii() == 'tacocÆt'", True),
    ("'tacoCat'.upperAscii() == 'TACOCAT'", True),
    ("'12 days 12 hours'.replace('{0}', '2') == '12 days 12 hours'", True),
    ("'{0} days {0} hours'.replace('{0}', '2') == '2 days 2 hours'", True),
    ("'{0} days {0} hours'.replace('{0}', '2', 1).replace('{0}', '23') == '2 days 23 hours'", True),
    ("'hello world'.split(' ') == ['hello', 'world']", True),
    ("'hello world events!'.split(' ', 0) == []", True),
    ("'hello world events!'.split(' ', 1) == ['hello world events!']", True),
    ("'o n e t w o'.split(' ', -1) == ['o', 'n', 'e', 't', 'w', 'o']", True),
    ("'tacocat'.substring(4) == 'cat'", True),
    ("'tacocat'.substring(0, 4) == 'taco'", True),
    ("'tacocat'.substring(40)", ("error", "index out of range: 40")),
    ("'tacocat'.substring(1, 0)", ("error", "invalid substring range. start: 1, end: 0")),
    ("' \\ttrim\\n    '.trim() == 'trim'", True),
    ("['x', 'y'].join() == 'xy'", True),
    ("['x', 'y'].join('-') == 'x-y'", True),
    ("[].join() == ''", True),
    ('strings.quote("first\\nsecond") == "\\"first\\\\nsecond\\""', True),
    ('strings.quote("bell\\a") == "\\"bell\\\\a\\""', True),
    ("'%s %s'.format(['hello', 'world'])", "hello world"),
    ("'%d'.format([42])", "42"),
    ("'%.3f'.format([1.2345])", "1.234"),
    ("'%x'.format([255])", "ff"),
    ("'%b'.format([5])", "101"),
    ("'%s'.format([true])", "true"),
    ("'%s'.format([[1, 2]])", "[1, 2]"),
    # reverse() on strings is ext.Strings version 3, which Kubernetes does not enable
    ("'abc'.reverse()", ("error", "no such overload")),
]

# cel-go ext/formatting_test.go TestStringFormat (strings versions 1 to 3, default locale en_US)
STRING_FORMAT: list[Case] = [
    ('"no substitution".format([])', "no substitution"),
    ('"str is %s and some more".format(["filler"])', "str is filler and some more"),
    ('"%% and also %%".format([])', "% and also %"),
    ('"%%%s%%".format(["text"])', "%text%"),
    ('"%d %d %d, %s %s %s".format([1, 2, 3, "A", "B", "C"])', "1 2 3, A B C"),
    ('"%.3f".format([1.2345])', "1.234"),
    ('"this is 5 in binary: %b".format([5])', "this is 5 in binary: 101"),
    ('"this is -5 in binary: %b".format([-5])', "this is -5 in binary: -101"),
    ('"unsigned 64 in binary: %b".format([uint(64)])', "unsigned 64 in binary: 1000000"),
    ('"bit set from bool: %b".format([true])', "bit set from bool: 1"),
    ('"%o".format([11])', "13"),
    ('"%o".format([-11])', "-13"),
    ('"%x is 30 in hexadecimal".format([30])', "1e is 30 in hexadecimal"),
    ('"%X is 20 in hexadecimal".format([30])', "1E is 20 in hexadecimal"),
    ('"%x is -30 in hexadecimal".format([-30])', "-1e is -30 in hexadecimal"),
    ('"%x".format(["Hello world!"])', "48656c6c6f20776f726c6421"),
    ('"%X".format([b"byte string"])', "6279746520737472696E67"),
    ('"%.6e".format([1052.032911275])', "1.052033\u202f\u00d7\u202f10\u2070\u00b3"),
    ('"%f".format([2.71828])', "2.718280"),
    ('"%e".format([2.71828])', "2.718280\u202f\u00d7\u202f10\u2070\u2070"),
    ('"%s".format([2.71])', "2.71"),
    ('"%s".format([[2.71]])', "[2.710000]"),
    ('"%s".format([0.000000002])', "2e-09"),
    ('"%s".format([[0.000000002]])', "[0.000000]"),
    ('"%f".format(["NaN"])', "NaN"),
    ('"%f".format(["Infinity"])', "\u221e"),
    ('"%f".format(["-Infinity"])', "-\u221e"),
    ('"%s".format([double("NaN")])', "NaN"),
    ('"%s".format([double("Inf")])', "+Inf"),
    ('"%s".format([[double("NaN"), double("+Inf"), double("-Inf")]])', '["NaN", "+Inf", "-Inf"]'),
    ('"%d".format([uint(64)])', "64"),
    ('"null: %s".format([null])', "null: null"),
    ('"%s".format([999999999999])', "999999999999"),
    ('"some bytes: %s".format([b"xyz"])', "some bytes: xyz"),
    ('"%s".format([timestamp("2023-02-03T23:31:20+00:00")])', "2023-02-03T23:31:20Z"),
    ('"%s".format([duration("1h45m47s")])', "6347s"),
    (
        '"%s".format([["abc", 3.14, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]])',
        '["abc", 3.140000, null, [9, 8, 7, 6], timestamp("2023-02-03T23:31:20Z")]',
    ),
    (
        '"%s".format([{"key1": b"xyz", "key5": null, "key2": duration("2h"), '
        '"key4": true, "key3": 2.71828}])',
        '{"key1":b"xyz", "key2":duration("7200s"), "key3":2.718280, "key4":true, "key5":null}',
    ),
    ('"true bool: %s, false bool: %s".format([true, false])', "true bool: true, false bool: false"),
    # run-time errors (arguments known only when evaluating)
    (
        'cel.bind(x, "string is %b", x.format(["abc"]))',
        (
            "error",
            "error during formatting: only integers and bools can be formatted as binary, was given string",
        ),
    ),
    (
        'cel.bind(x, [duration("30m2s")], "%d".format(x))',
        (
            "error",
            "error during formatting: decimal clause can only be used on integers, "
            "was given google.protobuf.Duration",
        ),
    ),
    (
        'cel.bind(x, [null], "null: %o".format(x))',
        ("error", "octal clause can only be used on integers, was given null_type"),
    ),
    ('cel.bind(x, [0, 1], "%d %d %d".format(x))', ("error", "index 2 out of range")),
    # the compile-time check of a literal format string with a list literal
    ('"%s %s".format(["abc"])', ("compile_error", "index 1 out of range")),
    (
        '"%s %s".format(["abc", "def", "ghi"])',
        ("compile_error", "too many arguments supplied to string.format (expected 2, got 3)"),
    ),
    ('"filler %".format([])', ("compile_error", "unexpected end of string")),
    (
        '"%j".format([123])',
        ("compile_error", 'could not parse formatting clause: unrecognized formatting clause "j"'),
    ),
    ('"int is %d".format([5.2])', ("compile_error", "decimal clause can only be used on integers")),
    ('"double is %f".format([true])', ("compile_error", "fixed-point clause can only be used on doubles")),
    (
        '"double is %.34".format([5.0])',
        ("compile_error", "error while parsing precision: could not find end of precision specifier"),
    ),
    ('"an octal: %o".format([3.14])', ("compile_error", "octal clause can only be used on integers")),
    # cel-go converts doubles and bools to strings as Go does
    ("string(1.0)", "1"),
    ("string(1e6)", "1e+06"),
    ("string(123456.0)", "123456"),
    ("string(true)", "true"),
]

# k8s.io/apiserver/pkg/cel/library regex.go documented examples (find, findAll)
REGEX: list[Case] = [
    ('"abc 123".find("[0-9]+")', "123"),
    ('"abc 123".find("xyz")', ""),
    ('"123 abc 456".findAll("[0-9]+")', ["123", "456"]),
    ('"123 abc 456".findAll("[0-9]+", 1)', ["123"]),
    ('"123 abc 456".findAll("xyz")', []),
]

# cel-go ext/sets_test.go
SETS: list[Case] = [
    ("sets.contains([], [])", True),
    ("sets.contains([1, 2, 3, 4], [2, 3])", True),
    ("sets.contains([1, 2, 3], [4])", False),
    ("sets.contains([1, 2.0, 3u], [1.0, 2u, 3])", True),
    ("sets.equivalent([1, 2, 3], [3u, 2.0, 1])", True),
    ("sets.equivalent([1, 2], [2, 2, 2, 1])", True),
    ("sets.equivalent([1, 2, 3], [1, 2])", False),
    ("sets.intersects([1], [1.0, 2])", True),
    ("sets.intersects([1, 2], [3])", False),
    ("sets.intersects([], [])", False),
]

# k8s.io/apiserver/pkg/cel/library lists (isSorted, sum, min, max, indexOf, lastIndexOf) and
# cel-go ext/lists_test.go (version 3: slice, flatten, lists.range, distinct, reverse, sort, sortBy,
# first, last)
LISTS: list[Case] = [
    ("[1, 2, 3].isSorted()", True),
    ("[1, 3, 2].isSorted()", False),
    ("['a', 'b'].isSorted()", True),
    ("[].sum()", 0),
    ("[1, 2, 3].sum()", 6),
    ("[1.5, 2.5].sum()", 4.0),
    ("[1, 5, 3].min()", 1),
    ("[1, 5, 3].max()", 5),
    ("[].min()", ("error", "min called on empty list")),
    ("[].max()", ("error", "max called on empty list")),
    ("[1, 2, 2, 3].indexOf(2)", 1),
    ("[1, 2, 2, 3].lastIndexOf(2)", 2),
    ("['a', 'b'].indexOf('c')", -1),
    ("[1, 2, 3, 4].slice(0, 2) == [1, 2]", True),
    ("[1, 2, 3, 4].slice(1, 3) == [2, 3]", True),
    ("[1, 2, 3, 4].slice(3, 0)", ("error", "start index must be less than or equal to end index")),
    ("[1, 2, 3, 4].slice(0, 10)", ("error", "cannot slice(0, 10), list is length 4")),
    ("[1, 2, 3, 4].slice(-5, 10)", ("error", "negative indexes not supported")),
    ("[1, [2, [3, 4]]].flatten() == [1, 2, [3, 4]]", True),
    ("[1, [2, [3, 4]]].flatten(2) == [1, 2, 3, 4]", True),
    ("[1, [2, [3, 4]]].flatten(-1)", ("error", "level must be non-negative")),
    ("lists.range(4) == [0, 1, 2, 3]", True),
    ("lists.range(0) == []", True),
    ("[1, 2, 2, 3, 1].distinct() == [1, 2, 3]", True),
    ("[1, 2, 3].reverse() == [3, 2, 1]", True),
    ("[3, 1, 2].sort() == [1, 2, 3]", True),
    ("['b', 'c', 'a'].sort() == ['a', 'b', 'c']", True),
    ("[1, 'a'].sort()", ("error", "list elements must have the same type")),
    ("['aa', 'b', 'ccc'].sortBy(s, s.size()) == ['b', 'aa', 'ccc']", True),
    ("[1, 2, 3].first().value()", 1),
    ("[1, 2, 3].last().value()", 3),
    ("[].first().hasValue()", False),
]

_LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is "
    r"'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_DNS1035_MESSAGE = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic "
    "character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for "
    "validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)

# k8s.io/apiserver/pkg/cel/library/format_test.go TestFormat
FORMATS: list[Case] = [
    ('format.dns1123Label().validate("my-label-name").hasValue()', False),
    ('format.dns1123Subdomain().validate("apiextensions.k8s.io").hasValue()', False),
    ('format.qualifiedName().validate("apiextensions.k8s.io/v1beta1").hasValue()', False),
    ('format.dns1123LabelPrefix().validate("my-label-prefix-").hasValue()', False),
    ('format.dns1123SubdomainPrefix().validate("mysubdomain.prefix.-").hasValue()', False),
    ('format.dns1035LabelPrefix().validate("my-label-prefix-").hasValue()', False),
    ('format.uri().validate("http://example.com").hasValue()', False),
    ('format.uuid().validate("123e4567-e89b-12d3-a456-426614174000").hasValue()', False),
    ('format.byte().validate("aGVsbG8=").hasValue()', False),
    ('format.date().validate("2021-01-01").hasValue()', False),
    ('format.datetime().validate("2021-01-01T00:00:00Z").hasValue()', False),
    ('format.dns1123Label().validate("contains a space").value()', [_LABEL_MESSAGE]),
    ('format.dns1123Subdomain().validate("contains a space").value()', [_SUBDOMAIN_MESSAGE]),
    ('format.dns1035Label().validate("contains a space").value()', [_DNS1035_MESSAGE]),
    (
        'format.qualifiedName().validate("contains a space").value()',
        [
            "name part must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character "
            "(e.g. 'MyName',  or 'my.name',  or '123-abc', "
            "regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
        ],
    ),
    ('format.dns1123LabelPrefix().validate("contains a space-").value()', [_LABEL_MESSAGE]),
    ('format.dns1123SubdomainPrefix().validate("contains a space-").value()', [_SUBDOMAIN_MESSAGE]),
    ('format.dns1035LabelPrefix().validate("contains a space-").value()', [_DNS1035_MESSAGE]),
    ('format.dns1123Subdomain().validate("example.com").hasValue()', False),
    ('format.qualifiedName().validate("my.name").hasValue()', False),
    ('format.byte().validate("aGVsbG8").value()', ["invalid base64"]),
    ('format.date().validate("2020-01-32").value()', ["invalid date"]),
    ('format.datetime().validate("2020-01-32T00:00:00Z").value()', ["invalid datetime"]),
    ('format.named("unknown").hasValue()', False),
    ('format.labelValue().validate("my-cool-label-Value").hasValue()', False),
    (
        r'format.labelValue().validate("my-cool-label-Value!!\n\n!!!").value()',
        [
            "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character "
            "(e.g. 'MyValue',  or 'my_value',  or '12345', "
            "regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
        ],
    ),
    ('format.named("dns1123Label").hasValue()', True),
    ('format.named("uuid").value() == format.uuid()', True),
    ("format.dns1123Label() == format.dns1035Label()", False),
]

# cel-go ext/comprehensions_test.go (ext.TwoVarComprehensions: transformList, transformMap, transformMapEntry)
TRANSFORMS: list[Case] = [
    ("[1, 2, 3].transformList(i, v, i + v)", [1, 3, 5]),
    ("[1, 2, 3].transformList(i, v, i % 2 == 0, i + v)", [1, 5]),
    ('{"a": 1, "b": 2}.transformList(k, v, k)', ["a", "b"]),
    ('{"a": 1, "b": 2}.transformMap(k, v, v + 1)', {"a": 2, "b": 3}),
    ('{"a": 1, "b": 2}.transformMap(k, v, v > 1, v + 1)', {"b": 3}),
    ("[1, 2, 3].transformMap(i, v, (i * v) + v)", {0: 1, 1: 4, 2: 9}),
    ("{'greeting': 'hello'}.transformMapEntry(k, v, {v: k})", {"hello": "greeting"}),
    ("[1, 2, 3].transformMapEntry(i, v, {v: i})", {1: 0, 2: 1, 3: 2}),
    ("{'a': 1, 'b': 2}.transformMapEntry(k, v, v > 1, {v: k})", {2: "b"}),
    (
        "{'greeting': 'aloha', 'farewell': 'aloha'}.transformMapEntry(k, v, {v: k})",
        ("error", "already exists"),
    ),
    ("{'hello': 'world', 'taco': 'bell'}.all(k, v, k != v)", True),
]

# Libraries that Kubernetes does not put in the DRA environment: refused at compile time, by name.
UNDECLARED: list[Case] = [
    ("math.greatest(1, 2) == 2", ("compile_error", "undeclared reference to 'math.greatest'")),
    ("math.ceil(1.2) == 2.0", ("compile_error", "undeclared reference to 'math.ceil'")),
    ("math.abs(-1) == 1", ("compile_error", "undeclared reference to 'math.abs'")),
    ('base64.encode(b"hello") == "aGVsbG8="', ("compile_error", "undeclared reference to 'base64.encode'")),
    ('base64.decode("aGVsbG8=") == b"hello"', ("compile_error", "undeclared reference to 'base64.decode'")),
    ("[1, 2].reduce(a, b, 0) == 3", ("compile_error", "undeclared reference to 'reduce'")),
    (
        "math.sqrt(4.0) == 2.0",
        ("compile_error", "undeclared reference to 'math.sqrt'"),
    ),
    ("size(?optional.of([1])) == 1", ("compile_error", "optional element '?' outside a list literal")),
    # variables: only device and the variables of macros and cel.bind
    ('devices.driver == "x"', ("compile_error", "undeclared reference to 'devices'")),
    ('device.attributes.all(d, d != "" && x > 1)', ("compile_error", "undeclared reference to 'x'")),
    ("cel.bind(g, 1, g + h > 0)", ("compile_error", "undeclared reference to 'h'")),
    ("[1, 2].all(i, v, i < v) && type(1) == int", True),
]


@pytest.mark.parametrize(
    ("expression", "expected"),
    [pytest.param(e, x, id=f"ip-{i}") for i, (e, x) in enumerate(IP)]
    + [pytest.param(e, x, id=f"cidr-{i}") for i, (e, x) in enumerate(CIDRS)]
    + [pytest.param(e, x, id=f"url-{i}") for i, (e, x) in enumerate(URLS)]
    + [pytest.param(e, x, id=f"strings-{i}") for i, (e, x) in enumerate(STRINGS)]
    + [pytest.param(e, x, id=f"string-format-{i}") for i, (e, x) in enumerate(STRING_FORMAT)]
    + [pytest.param(e, x, id=f"regex-{i}") for i, (e, x) in enumerate(REGEX)]
    + [pytest.param(e, x, id=f"sets-{i}") for i, (e, x) in enumerate(SETS)]
    + [pytest.param(e, x, id=f"lists-{i}") for i, (e, x) in enumerate(LISTS)]
    + [pytest.param(e, x, id=f"transforms-{i}") for i, (e, x) in enumerate(TRANSFORMS)]
    + [pytest.param(e, x, id=f"format-{i}") for i, (e, x) in enumerate(FORMATS)]
    + [pytest.param(e, x, id=f"undeclared-{i}") for i, (e, x) in enumerate(UNDECLARED)],
)
def test_library(expression: str, expected: Any) -> None:
    _check(expression, expected)


NESTED_LOOPS = "lists.range(40).all(i, lists.range(40).all(j, i + j >= 0))"


def test_the_runtime_cost_limit_is_upstreams_selector_limit() -> None:
    assert SELECTOR_MAX_COST == 1_000_000  # resource.k8s.io CELSelectorExpressionMaxCost
    assert Selector(NESTED_LOOPS, True).matches({}) is True


@pytest.mark.parametrize("expression", [NESTED_LOOPS, f"{NESTED_LOOPS} || true", f"true && {NESTED_LOOPS}"])
def test_a_selector_over_its_cost_limit_is_refused_naming_the_limit(expression: str) -> None:
    """Like cel-go's cost interrupt, the refusal is not absorbed by || or &&."""
    with pytest.raises(CELError) as raised:
        Selector(expression, True, cost_limit=1_000).matches({})
    assert "actual cost limit exceeded (the DRA selector limit is 1,000)" in str(raised.value)


def test_an_expression_nested_deeper_than_the_evaluator_can_go_is_refused_when_compiled() -> None:
    """cel-go's parser has a recursion limit too; here Python's stack sets it, and the refusal says so."""
    shallow = "(" * 100 + "true" + ")" * 100
    assert compile_selector(shallow, True).matches({}) is True
    deep = "(" * 3000 + "true" + ")" * 3000
    with pytest.raises(CELError, match="max recursion depth exceeded"):
        compile_selector(deep, True)


@pytest.mark.parametrize(
    ("expression", "cost"),
    [
        ('device.driver == "x"', 3),  # variable, selection, operator; the constant is free
        ("[1, 2, 3].size() == 3", 12),  # a list literal costs 10
        ('{"a": 1}.size() == 1', 32),  # a map literal costs 30
    ],
)
def test_runtime_cost_units_are_cel_gos(expression: str, cost: int) -> None:
    activation = {"device": ct.MapType({ct.StringType("driver"): ct.StringType("x")})}
    assert Selector(expression, True, cost_limit=cost).matches(activation) is True
    with pytest.raises(CELError, match="actual cost limit exceeded"):
        Selector(expression, True, cost_limit=cost - 1).matches(activation)
