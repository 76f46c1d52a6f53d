"""The 94 Kubernetes-derived CEL conformance cases for DRA device selectors.

Expected results are what k8s.io/dynamic-resource-allocation/cel (with KEP-5491 list attributes and
``includes``) returns for the fixture device below. Expected: True / False, ("error", substring) for a
runtime error, ("compile_error", "") for a rejection at compile time, ("any_error", "") where
Kubernetes rejects at compile time and a runtime error is an acceptable stand-in.
"""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.dra.cel import CELError, compile_selector, device_activation
from lockstep.dra.k8s_types import parse_quantity

DRIVER = "gpu.example.com"
# DeviceAttribute / DeviceCapacity in resource.k8s.io/v1 JSON shape
ATTRIBUTES = {
    "model": {"string": "h100"},  # unqualified -> domain = driver
    "memory": {"int": 80},
    "index": {"int": 3},
    "healthy": {"bool": True},
    "numaNodes": {"ints": [0, 1]},  # KEP-5491 list attribute
    "pcieRoots": {"strings": ["pci0000:00", "pci0000:01"]},
    "fwVersions": {"versions": ["1.0.0", "2.0.0"]},
    "dra.example.com/driverVersion": {"version": "1.3.0"},
}
CAPACITY = {
    "memory": {"value": "80Gi"},
    "cores": {"value": "1500m"},
}

A = 'device.attributes["gpu.example.com"]'
C = 'device.capacity["gpu.example.com"]'
V = 'device.attributes["dra.example.com"].driverVersion'

CASES: list[tuple[str, str, Any]] = [
    # --- typical selector expressions ---
    ("sel-driver", 'device.driver == "gpu.example.com"', True),
    ("sel-string-attr", f'{A}.model == "h100"', True),
    ("sel-int-attr", f"{A}.memory >= 40", True),
    ("sel-quantity-compareTo", f'{C}.memory.compareTo(quantity("40Gi")) >= 0', True),
    ("sel-semver-isGreaterThan", f'{V}.isGreaterThan(semver("1.2.0"))', True),
    ("sel-in-and-includes", f'"gpu.example.com" in device.attributes && {A}.numaNodes.includes(1)', True),
    ("sel-missing-domain", 'device.attributes["other.example.com"].foo', ("error", "no such key")),
    # --- map semantics (unknown domain -> empty map) ---
    ("missing-domain-index", 'device.attributes["other.example.com"]["foo"]', ("error", "no such key")),
    ("missing-attr-known-domain", f"{A}.foo", ("error", "no such key")),
    ("domain-in-false", '"other.example.com" in device.attributes', False),
    ("key-in-missing-domain", '"foo" in device.attributes["other.example.com"]', False),
    ("has-missing-domain", 'has(device.attributes["other.example.com"].foo)', False),
    ("has-present", f"has({A}.model)", True),
    ("index-syntax", f'{A}["model"] == "h100"', True),
    (
        "capacity-missing-domain",
        'device.capacity["nope.example.com"].x.isGreaterThan(quantity("0"))',
        ("error", "no such key"),
    ),
    ("capacity-domain-in", '"nope.example.com" in device.capacity', False),
    (
        "k8s-check-negative",
        '!("x" in device.capacity["nope.example.com"])'
        ' || device.capacity["nope.example.com"].x.isGreaterThan(quantity("1Ki"))',
        True,
    ),
    ("exists_one-domains", 'device.attributes.exists_one(x, x == "gpu.example.com")', True),
    ("attr-map-size", f"{A}.size() == 7", True),
    ("bool-attr", f"{A}.healthy", True),
    ("allowMultipleAllocations", "device.allowMultipleAllocations == false", True),
    ("non-bool-result", f"{A}.memory", ("error", "bool")),
    # --- cel.bind (ext.Bindings is enabled for DRA) ---
    ("cel.bind", f'cel.bind(g, {A}, g.model == "h100" && g.memory >= 40)', True),
    ("cel.bind-nested", f"cel.bind(g, {A}, cel.bind(m, g.memory, m > 10 && m < 100))", True),
    # --- quantity library ---
    ("q-isGreaterThan", f'{C}.memory.isGreaterThan(quantity("40Gi"))', True),
    ("q-isLessThan", f'{C}.memory.isLessThan(quantity("1Ti"))', True),
    ("q-equality-value", f'{C}.memory == quantity("81920Mi")', True),
    ("q-equality-literals", 'quantity("1Gi") == quantity("1024Mi")', True),
    ("q-milli", f'{C}.cores.compareTo(quantity("1.5")) == 0', True),
    ("q-sign", f"{C}.memory.sign() == 1", True),
    ("q-add", f'{C}.memory.add(quantity("1Gi")).compareTo(quantity("81Gi")) == 0', True),
    ("q-sub-int", 'quantity("10").sub(3).compareTo(quantity("7")) == 0', True),
    ("q-asInteger", 'quantity("2Gi").asInteger() == 2147483648', True),
    ("q-isInteger-quirk", 'quantity("1.5Gi").isInteger()', False),  # Go int64Amount fast path not taken
    ("q-asApproximateFloat", f"{C}.memory.asApproximateFloat() > 8.5e10", True),
    ("q-isQuantity", 'isQuantity("1.5Gi") && !isQuantity("abc")', True),
    ("q-invalid", 'quantity("abc").sign() == 0', ("error", "quantit")),
    ("q-vs-int-ordering", f"{C}.memory > 5", ("any_error", "")),  # k8s: compile error (typed Quantity)
    # --- semver library ---
    ("v-isLessThan", f'{V}.isLessThan(semver("2.0.0"))', True),
    ("v-compareTo", f'{V}.compareTo(semver("1.3.0")) == 0', True),
    ("v-equal-ignores-build", f'{V} == semver("1.3.0+build.5")', True),
    ("v-prerelease", 'semver("1.0.0-alpha").isLessThan(semver("1.0.0"))', True),
    ("v-prerelease-numeric", 'semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))', True),
    ("v-normalize", 'semver("v1.2", true).compareTo(semver("1.2.0")) == 0', True),
    ("v-isSemver", '!isSemver("1.2") && isSemver("v1.2", true)', True),
    ("v-major-minor", f"{V}.major() == 1 && {V}.minor() == 3 && {V}.patch() == 0", True),
    ("v-invalid", 'semver("1.2").major() == 1', ("error", "")),
    (
        "v-eq-string-lhs-semver",
        f'{V} == "1.3.0"',
        ("error", "overload"),
    ),  # Semver.Equal(String) -> no such overload
    ("v-eq-string-rhs-semver", f'"1.3.0" == {V}', False),  # String.Equal(Semver) -> false
    ("v-ne-string", f'{V} != "1.3.0"', True),
    # --- KEP-5491 lists + includes (published semantics: any element) ---
    ("includes-scalar", f'{A}.model.includes("h100")', True),
    ("includes-scalar-neg", f'{A}.model.includes("a100")', False),
    ("includes-list-neg", f"{A}.numaNodes.includes(5)", False),
    ("includes-list-second", f'{A}.pcieRoots.includes("pci0000:01")', True),
    ("includes-semver-list", f'{A}.fwVersions.includes(semver("2.0.0"))', True),
    ("includes-hetero-num", f"{A}.numaNodes.includes(1.0)", True),
    ("includes-type-mismatch", f'{A}.numaNodes.includes("1")', False),
    ("list-exists", f"{A}.numaNodes.exists(n, n == 1)", True),
    ("in-list", f"1 in {A}.numaNodes", True),
    ("list-all-semver", f'{A}.fwVersions.all(v, v.isGreaterThan(semver("0.0.1")))', True),
    # --- core CEL semantics as configured by Kubernetes ---
    ("cross-type-ge", f"{A}.memory >= 40.5", True),
    ("hetero-eq-num", f"{A}.memory == 80.0", True),
    ("hetero-eq-false", f"{A}.model == 5", False),
    ("ordering-no-overload", f"{A}.model > 5", ("error", "overload")),
    ("err-or-true", f"{A}.foo || true", True),
    ("err-and-false", f"{A}.foo && false", False),
    ("false-and-err", f"false && {A}.foo", False),
    ("int-overflow", "9223372036854775807 + 1 > 0", ("error", "overflow")),
    ("matches", f'{A}.model.matches("^h[0-9]+$")', True),
    ("startsWith", f'{A}.model.startsWith("h1")', True),
    ("ternary", f'({A}.memory > 40 ? "big" : "small") == "big"', True),
    ("string-ext-lowerAscii", f'"H100".lowerAscii() == {A}.model', True),
    ("string-ext-split", f'{A}.model.split("1").size() == 2', True),
    ("optional-syntax", f'{A}.?model.orValue("") == "h100"', True),
    # --- optional types (cel.OptionalTypes, in the Kubernetes base environment since 1.28) ---
    ("optional-absent-attr", f'{A}.?foo.orValue("none") == "none"', True),
    ("optional-missing-domain", 'device.attributes["other.example.com"].?foo.hasValue()', False),
    # mapper.Find reports an unknown domain as present (an empty map), so the optional has a value
    ("optional-index-missing-domain", 'device.attributes[?"other.example.com"].hasValue()', True),
    ("optional-index-attr", f'{A}[?"memory"].orValue(0) >= 40', True),
    ("optional-value-of-none", f"{A}.?foo.value()", ("error", "optional.none() dereference")),
    ("optional-of", "optional.of(device.driver).hasValue()", True),
    ("optional-none-orValue", 'optional.none().orValue(device.driver) == "gpu.example.com"', True),
    (
        "optional-bind",
        'cel.bind(g, device.attributes[?"gpu.example.com"], g.?model.orValue("") == "h100")',
        True,
    ),
    ("optional-chain-select", f"{A}.?numaNodes[?1].orValue(-1) == 1", True),
    # --- a selector per library of the Kubernetes 1.36 environment ---
    ("lib-strings", f'{A}.model.upperAscii() == "H100"', True),
    ("lib-format", f'"%s-%d".format([{A}.model, {A}.memory]) == "h100-80"', True),
    ("lib-regex", f'{A}.model.find("[0-9]+") == "100"', True),
    ("lib-sets", f"sets.contains({A}.numaNodes, [1])", True),
    ("lib-lists", f"{A}.numaNodes.max() == 1 && {A}.numaNodes.isSorted()", True),
    ("lib-cidr", 'cidr("10.0.0.0/8").containsIP("10.1.2.3") && device.driver.startsWith("gpu")', True),
    ("lib-url", 'url("https://" + device.driver).getHostname() == "gpu.example.com"', True),
    ("lib-math-undeclared", "math.greatest(1, 2) == 2", ("compile_error", "math.greatest")),
    ("two-var-comprehension", f'{A}.all(k, v, k != "")', True),
    ("syntax-error", "device.driver ==", ("compile_error", "")),
    # upstream compile_test.go "type-error"
    ("type-error", "1", ("compile_error", "must evaluate to bool or the unknown type, not int")),
]


def _outcome(expression: str) -> tuple[Any, str]:
    activation = device_activation(
        DRIVER,
        ATTRIBUTES,
        {name: parse_quantity(value["value"]) for name, value in CAPACITY.items()},
        list_type_attributes=True,
    )
    try:
        selector = compile_selector(expression, list_type_attributes=True)
    except CELError as exc:
        return "compile_error", str(exc)
    try:
        return selector.matches(activation), ""
    except CELError as exc:
        return "error", str(exc)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [pytest.param(expression, expected, id=case_id) for case_id, expression, expected in CASES],
)
def test_conformance(expression: str, expected: Any) -> None:
    kind, message = _outcome(expression)
    if isinstance(expected, bool):
        assert kind is expected, message
        return
    expected_kind, substring = expected
    if expected_kind == "any_error":
        assert kind in ("error", "compile_error")
    else:
        assert kind == expected_kind, message
        assert substring.lower() in message.lower()


def test_there_are_94_cases() -> None:
    assert len(CASES) == 94
