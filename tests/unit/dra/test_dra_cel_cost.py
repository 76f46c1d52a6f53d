"""cel-go's worst-case cost estimate of DRA selectors, as kube-apiserver computes it on admission.

The expected costs are upstream's ``expectCost`` values in
staging/src/k8s.io/dynamic-resource-allocation/cel/compile_test.go (stored-expressions environment).
"""

from __future__ import annotations

import pytest

from lockstep.dra.cel import SELECTOR_MAX_COST, compile_selector

A = 'device.attributes["dra.example.com"]'
C = 'device.capacity["dra.example.com"]'
TEN = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
EXPENSIVE = (
    f"{TEN}.all(x, {TEN}.all(y, {TEN}.all(z, {TEN}.all(z2, {TEN}.all(z3, {TEN}.all(z4, "
    f"{TEN}.all(z5, int('1'.find('[0-9]*')) < 100)))))))"
)

UPSTREAM_COSTS: list[tuple[str, str, int]] = [
    (
        "runtime-error-lookup-identifier",
        'device.attributes["no-such-domain"].noSuchAttr.isGreaterThan(quantity("0"))',
        6,
    ),
    (
        "runtime-error-lookup-map",
        'device.attributes["no-such-domain"]["noSuchAttr"].isGreaterThan(quantity("0"))',
        6,
    ),
    ("domain-check-negative", '"no-such-domain" in device.attributes', 3),
    ("empty-driver-name", 'device.driver == ""', 2),
    ("real-driver-name", 'device.driver == "dra.example.com"', 4),
    ("driver-name-qualifier", f"{A}.name", 4),
    ("driver-name-qualifier-map-lookup", f'{A}["name"]', 4),
    ("bind", f"cel.bind(dra, {A}, dra.name)", 15),
    ("int", f"{A}.name > 0", 5),
    ("string", f'{A}.name == "fish"', 5),
    ("macro-exists-on-int", f"{A}.name.exists(x, x > 0)", 5 + (3 + 3) * 64),
    ("macro-exists-on-version", f'{A}.name.exists(x, x.isGreaterThan(semver("0.0.1")))', 5 + (3 + 4) * 64),
    ("includes-function-on-bool-scalar-positive", f"{A}.name.includes(true)", 4 + 48),
    ("includes-function-on-semver-scalar-positive", f'{A}.name.includes(semver("1.0.0"))', 4 + 48 + 1),
    ("version", f'{A}.name.isGreaterThan(semver("0.0.1"))', 6),
    ("version_v", f'{A}.name.isGreaterThan(semver("v0.0.1", true)) && isSemver("v1.0.0", true)', 7),
    ("quantity", f'{C}.name.isGreaterThan(quantity("1Ki"))', 6),
    ("check-positive", f'"name" in {C} && {C}.name.isGreaterThan(quantity("1Ki"))', 10),
    ("check-negative", f'!("name" in {C}) || {C}.name.isGreaterThan(quantity("1Ki"))', 11),
    (
        "all",
        f'{C}.quantity.isGreaterThan(quantity("1Ki")) && {A}.bool && {A}.int > 0 && {A}.string == "fish"'
        f' && {A}.version.isGreaterThan(semver("0.0.1")) && {C}["quantity"].isGreaterThan(quantity("1Ki"))'
        f' && {A}["bool"] && {A}["int"] > 0 && {A}["string"] == "fish"'
        f' && {A}["version"].isGreaterThan(semver("0.0.1"))',
        52,
    ),
    ("many", f"{A}.a && {A}.b && {A}.c", 12),
    ("check_attribute_domains", 'device.attributes.exists_one(x, x == "dra.example.com")', 164),
    ("check_attribute_ids", f'{A}.exists_one(x, x == "services")', 133),
    ("split_attribute", f'{A}.services.split("example").size() >= 2', 19),
    ("regexp_attribute", f'{A}.services.matches("[^a]?sym")', 18),
    ("check_capacity_domains", 'device.capacity.exists_one(x, x == "dra.example.com")', 164),
    ("check_capacity_ids", f'{C}.exists_one(x, x == "memory")', 133),
    ("expensive", EXPENSIVE, 85_555_551),
    ("allow_multiple_allocations", "device.allowMultipleAllocations == true", 3),
]


@pytest.mark.parametrize(
    ("expression", "cost"), [pytest.param(e, c, id=name) for name, e, c in UPSTREAM_COSTS]
)
def test_estimated_cost_is_upstreams(expression: str, cost: int) -> None:
    assert compile_selector(expression, list_type_attributes=True).estimated_cost() == cost


# cel-go checker/cost_test.go, two-variable comprehensions (maximum of each estimate)
TWO_VARIABLE_COSTS: list[tuple[str, int]] = [
    ("[1, 2, 3].transformList(i, v, i + v)", 66),
    ("[1, 2, 3].transformList(i, v, i % 2 == 0, i + v)", 75),
    ('{"a": 1, "b": 2}.transformList(k, v, k)', 67),
    ('{"a": 1, "b": 2}.transformMap(k, v, v + 1)', 71),
    ('{"a": 1, "b": 2}.transformMap(k, v, v > 1, v + 1)', 75),
    ('{"a": 1, "b": 2}.transformMapEntry(k, v, {v: k})', 129),
    ('{"a": 1, "b": 2}.transformMapEntry(k, v, v > 1, {v: k})', 133),
    ("[1, 2].all(i, v, [1, 2].all(j, w, i + j < v + w))", 79),
    ("cel.bind(l, [1, 2, 3], l.all(i, v, i < v))", 40),
    ('cel.bind(m, {"a": 1, "b": 2}, m.transformList(k, v, k))', 78),
]


@pytest.mark.parametrize(("expression", "cost"), TWO_VARIABLE_COSTS)
def test_estimated_cost_of_two_variable_comprehensions_is_cel_gos(expression: str, cost: int) -> None:
    assert compile_selector(expression, list_type_attributes=True).estimated_cost() == cost


def test_only_the_expensive_case_exceeds_the_selector_limit() -> None:
    over = [
        name
        for name, e, _ in UPSTREAM_COSTS
        if compile_selector(e, True).estimated_cost() > SELECTOR_MAX_COST
    ]
    assert over == ["expensive"]
