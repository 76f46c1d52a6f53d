"""Hostile input through the API emulator and through kubectl.

Invalid PodGroups and ResourceClaims are rejected with 422 naming the offending field, and nothing is
stored for them; whatever is accepted is a valid object and reads back as sent. Targeted mutations of a
valid PodGroup know which field they broke, so the error must name exactly that field; free-form
structures are judged against the PodGroup model (a foundation test keeps it in agreement with the CRD
schema), after the nulls are dropped or defaulted the way kube-apiserver does before validating.
"""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from reliability_harness import (
    CLAIMS,
    NAMESPACE,
    PODGROUPS,
    REPO_ROOT,
    Response,
    RunningCluster,
    kubectl_path,
)

from lockstep.api.podgroup import PodGroup

HYPOTHESIS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_names = itertools.count()


def unique_name(prefix: str = "pg") -> str:
    return f"{prefix}-{next(_names)}"


def valid_podgroup(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}],
            "scheduleTimeoutSeconds": 60,
        },
    }


def podgroup_path(name: str | None = None) -> str:
    base = PODGROUPS.format(ns=NAMESPACE)
    return f"{base}/{name}" if name else base


def assert_rejected_naming(response: Response, field: str, sim: RunningCluster, name: str, path: str) -> None:
    assert response.status == 422, f"expected 422 naming {field}, got {response.status}: {response.message}"
    assert response.body.get("reason") == "Invalid"
    assert field in response.message or field in response.cause_fields(), (
        f"422 does not name {field}: {response.message}"
    )
    assert sim.http.get(f"{path}/{name}").status == 404, f"rejected object {name} was stored anyway"


# --- targeted PodGroup mutations: each breaks one known field -----------------------------------------

JSON_NON_INTEGERS = st.one_of(
    st.text(max_size=8),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False).filter(lambda f: not f.is_integer()),
    st.lists(st.integers(1, 5), max_size=2),
    st.dictionaries(st.text(max_size=3), st.integers(-(2**63), 2**63 - 1), max_size=2),
)
ODD_TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), min_size=1, max_size=80).filter(
    lambda s: not s.isascii() or any(c.isupper() or c in " _/:!@#$%^&*()" for c in s) or len(s) > 63
)


def _set(doc: dict[str, Any], dotted: str, value: Any) -> None:
    target = doc
    *parents, leaf = dotted.split(".")
    for key in parents:
        target = target[key]
    target[leaf] = value


MUTATIONS: st.SearchStrategy[tuple[str, str, Any]] = st.one_of(
    # (field the error must name, where to write, what)
    st.tuples(
        st.just("spec.schedulingPolicy.gang.minCount"),
        st.just("spec.schedulingPolicy.gang.minCount"),
        st.one_of(st.integers(-(2**63), 0), st.integers(10001, 2**63 - 1), JSON_NON_INTEGERS),
    ),
    st.tuples(
        st.just("spec.scheduleTimeoutSeconds"),
        st.just("spec.scheduleTimeoutSeconds"),
        st.one_of(st.integers(-(2**63), 0), st.integers(86401, 2**63 - 1), JSON_NON_INTEGERS),
    ),
    st.tuples(
        st.just("spec.schedulingPolicy"),
        st.just("spec.schedulingPolicy"),
        st.sampled_from([{}, {"basic": {}, "gang": {"minCount": 2}}, "gang", 7, []]),
    ),
    st.tuples(
        st.just("spec.resourceClaims"), st.just("spec.resourceClaims"), st.sampled_from(["x", 1, {}, True])
    ),
    st.tuples(st.just("spec"), st.just("spec"), st.sampled_from(["", 0, [], True])),
    st.tuples(st.just("metadata.name"), st.just("metadata.name"), ODD_TEXT),
)


@given(mutation=MUTATIONS)
@HYPOTHESIS
def test_podgroup_with_one_broken_field_is_rejected_naming_it(
    sim: RunningCluster, mutation: tuple[str, str, Any]
) -> None:
    field, where, value = mutation
    name = unique_name()
    doc = valid_podgroup(name)
    _set(doc, where, value)
    if where == "metadata.name":
        name = value
    response = sim.http.post(podgroup_path(), doc)
    if where == "metadata.name":
        # A name that cannot be a path segment must not be stored under any spelling.
        assert response.status == 422, f"name {value!r}: {response.status} {response.message}"
        assert field in response.message or field in response.cause_fields(), response.message
        return
    assert_rejected_naming(response, field, sim, name, podgroup_path())


CLAIM_ENTRY_MUTATIONS = st.one_of(
    st.tuples(st.just("name"), st.dictionaries(st.just("name"), ODD_TEXT, min_size=1)),
    st.tuples(st.just("resourceClaimName"), st.fixed_dictionaries({"resourceClaimName": ODD_TEXT})),
    st.tuples(
        st.just(""),
        st.sampled_from(
            [
                {"resourceClaimName": "a", "resourceClaimTemplateName": "b"},
                {"resourceClaimName": None},
                {"resourceClaimTemplateName": ""},
            ]
        ),
    ),
)


@given(index=st.integers(0, 3), mutation=CLAIM_ENTRY_MUTATIONS)
@HYPOTHESIS
def test_broken_resource_claim_entry_is_rejected_naming_its_index(
    sim: RunningCluster, index: int, mutation: tuple[str, dict[str, Any]]
) -> None:
    leaf, overrides = mutation
    name = unique_name()
    doc = valid_podgroup(name)
    entries = [{"name": f"c{i}", "resourceClaimTemplateName": f"t{i}"} for i in range(4)]
    entries[index] = {k: v for k, v in {**entries[index], **overrides}.items() if v is not None}
    if overrides.get("resourceClaimName") is None and "resourceClaimName" in overrides:
        entries[index].pop("resourceClaimTemplateName")
    doc["spec"]["resourceClaims"] = entries
    field = f"spec.resourceClaims[{index}]" + (f".{leaf}" if leaf else "")
    assert_rejected_naming(sim.http.post(podgroup_path(), doc), field, sim, name, podgroup_path())


def test_huge_resource_claims_list_is_rejected_as_too_many(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    doc["spec"]["resourceClaims"] = [
        {"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(10_000)
    ]
    response = sim.http.post(podgroup_path(), doc)
    assert_rejected_naming(response, "spec.resourceClaims", sim, name, podgroup_path())
    assert "Too many" in response.message or "must have at most 4" in response.message


def test_duplicate_claim_entry_names_are_rejected(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    doc["spec"]["resourceClaims"] = [
        {"name": "same", "resourceClaimName": "a"},
        {"name": "same", "resourceClaimName": "b"},
    ]
    assert_rejected_naming(
        sim.http.post(podgroup_path(), doc), "spec.resourceClaims", sim, name, podgroup_path()
    )


def test_missing_spec_is_rejected(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    del doc["spec"]
    assert_rejected_naming(sim.http.post(podgroup_path(), doc), "spec", sim, name, podgroup_path())


def test_unknown_field_under_strict_validation_is_rejected_naming_it(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    doc["spec"]["schedulingPolicy"]["gang"]["maxCount"] = 9
    response = sim.http.post(podgroup_path(), doc, query={"fieldValidation": "Strict"})
    assert response.status == 400, response.message
    assert "spec.schedulingPolicy.gang.maxCount" in response.message
    assert sim.http.get(podgroup_path(name)).status == 404


# --- free-form structures: accepted exactly when the model accepts ------------------------------------

JSON_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**40), 2**40),
    st.floats(allow_nan=False, allow_infinity=False, width=32),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=20),
)
FIELD_NAMES = st.sampled_from(
    [
        "schedulingPolicy",
        "basic",
        "gang",
        "minCount",
        "resourceClaims",
        "name",
        "resourceClaimName",
        "resourceClaimTemplateName",
        "scheduleTimeoutSeconds",
    ]
)
JSON_VALUES = st.recursive(
    JSON_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=5), st.dictionaries(FIELD_NAMES, children, max_size=4)
    ),
    max_leaves=20,
)
PLAUSIBLE_SPECS = st.fixed_dictionaries(
    {
        "schedulingPolicy": st.one_of(
            st.fixed_dictionaries(
                {"gang": st.fixed_dictionaries({"minCount": st.one_of(st.integers(-3, 10003), JSON_VALUES)})}
            ),
            st.fixed_dictionaries({"basic": st.one_of(st.just({}), JSON_VALUES)}),
            JSON_VALUES,
        )
    },
    optional={
        "resourceClaims": st.one_of(
            st.lists(
                st.fixed_dictionaries(
                    {"name": st.one_of(st.from_regex(r"\A[a-z][a-z0-9-]{0,8}[a-z0-9]\Z"), JSON_LEAVES)},
                    optional={
                        "resourceClaimName": st.one_of(st.from_regex(r"\A[a-z0-9]{1,10}\Z"), JSON_LEAVES),
                        "resourceClaimTemplateName": st.one_of(
                            st.from_regex(r"\A[a-z0-9]{1,10}\Z"), JSON_LEAVES
                        ),
                    },
                ),
                max_size=6,
            ),
            JSON_VALUES,
        ),
        "scheduleTimeoutSeconds": st.one_of(st.integers(-5, 90000), JSON_LEAVES),
    },
)


def _podgroup_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO_ROOT / "crds" / "scheduling.lockstep.dev_podgroups.yaml").read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


PODGROUP_SCHEMA = _podgroup_schema()


def drop_nulls_like_the_apiserver(value: Any, schema: dict[str, Any] | None) -> Any:
    """What kube-apiserver does to a custom resource before validating it: a null where the schema
    is not nullable is removed (PruneNonNullableNullsWithoutDefaults) or, if the field has a
    default, replaced by it (structural defaulting)."""
    if isinstance(value, dict):
        properties = (schema or {}).get("properties") or {}
        cleaned: dict[str, Any] = {}
        for key, item in value.items():
            field_schema = properties.get(key)
            if item is None and field_schema is not None and not field_schema.get("nullable"):
                if "default" in field_schema:
                    cleaned[key] = field_schema["default"]
                continue
            cleaned[key] = drop_nulls_like_the_apiserver(item, field_schema)
        return cleaned
    if isinstance(value, list):
        items = (schema or {}).get("items")
        return [drop_nulls_like_the_apiserver(item, items) for item in value]
    return value


def model_accepts(doc: dict[str, Any]) -> bool:
    try:
        PodGroup.model_validate(drop_nulls_like_the_apiserver(doc, PODGROUP_SCHEMA))
    except ValidationError:
        return False
    return True


@given(spec=st.one_of(PLAUSIBLE_SPECS, JSON_VALUES))
@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
def test_free_form_podgroup_is_stored_iff_valid(sim: RunningCluster, spec: Any) -> None:
    name = unique_name("free")
    doc = {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }
    expected_valid = model_accepts(doc)
    response = sim.http.post(podgroup_path(), doc)
    if not expected_valid:
        assert response.status == 422, f"invalid spec {orjson.dumps(spec)!r} answered {response.status}"
        assert response.message.startswith(f'PodGroup.scheduling.lockstep.dev "{name}" is invalid: ')
        assert sim.http.get(podgroup_path(name)).status == 404
        return
    assert response.status == 201, (
        f"valid spec {orjson.dumps(spec)!r} answered {response.status}: {response.message}"
    )
    stored = sim.http.get(podgroup_path(name))
    assert stored.status == 200
    expected = PodGroup.model_validate(drop_nulls_like_the_apiserver(doc, PODGROUP_SCHEMA))
    assert PodGroup.model_validate(stored.body).spec == expected.spec


def test_integral_float_is_an_integer(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    doc["spec"]["schedulingPolicy"]["gang"]["minCount"] = 2.0
    doc["spec"]["scheduleTimeoutSeconds"] = 60.0
    assert model_accepts(doc)
    response = sim.http.post(podgroup_path(), doc)
    assert response.status == 201, response.message
    stored = sim.http.get(podgroup_path(name)).body["spec"]
    assert stored["schedulingPolicy"]["gang"]["minCount"] == 2
    assert stored["scheduleTimeoutSeconds"] == 60


def test_nulls_are_dropped_or_defaulted_like_kube_apiserver(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    doc["spec"]["resourceClaims"] = None
    doc["spec"]["scheduleTimeoutSeconds"] = None
    response = sim.http.post(podgroup_path(), doc)
    assert response.status == 201, response.message
    stored = sim.http.get(podgroup_path(name)).body["spec"]
    assert "resourceClaims" not in stored
    assert stored["scheduleTimeoutSeconds"] == 300


def test_odd_unicode_in_free_text_round_trips(sim: RunningCluster) -> None:
    name = unique_name()
    doc = valid_podgroup(name)
    odd = "gang 🚀 \u202e rtl \u0000 nul \U0010fffd zalgo a\u0301\u0302\u0303 " + "ü" * 1000
    doc["metadata"]["annotations"] = {"lockstep.dev/note": odd}
    assert sim.http.post(podgroup_path(), doc).status == 201
    stored = sim.http.get(podgroup_path(name)).body
    assert stored["metadata"]["annotations"]["lockstep.dev/note"] == odd


# --- ResourceClaims with invalid CEL ----------------------------------------------------------------

SAFE_TEXT = st.text(
    alphabet=st.characters(blacklist_characters='"\\\n\r', blacklist_categories=["Cs", "Cc"]), max_size=20
)
BROKEN_CEL = st.one_of(
    st.sampled_from(
        ["device.driver +", "device.driver == ", "(device.driver", "device.attributes[", "&&", ")"]
    ),
    SAFE_TEXT.map(lambda text: f'device.driver == "{text}" &&'),
    SAFE_TEXT.map(lambda text: f'device.driver == "{text}" ||| true'),
    SAFE_TEXT.map(lambda text: f'(device.driver == "{text}"'),
)


def claim_with_selector(name: str, expression: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.example.com",
                            "selectors": [{"cel": {"expression": expression}}],
                        },
                    }
                ]
            }
        },
    }


@given(expression=BROKEN_CEL)
@HYPOTHESIS
def test_device_class_with_invalid_cel_is_rejected_naming_the_expression(
    sim: RunningCluster, expression: str
) -> None:
    name = f"{unique_name('class')}.example.com"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }
    response = sim.http.post("/apis/resource.k8s.io/v1/deviceclasses", body)
    assert_rejected_naming(
        response, "spec.selectors[0].cel.expression", sim, name, "/apis/resource.k8s.io/v1/deviceclasses"
    )


@given(expression=BROKEN_CEL)
@HYPOTHESIS
def test_claim_with_invalid_cel_is_rejected_naming_the_expression(
    sim: RunningCluster, expression: str
) -> None:
    name = unique_name("claim")
    response = sim.http.post(CLAIMS.format(ns=NAMESPACE), claim_with_selector(name, expression))
    assert_rejected_naming(
        response,
        "spec.devices.requests[0].exactly.selectors[0].cel.expression",
        sim,
        name,
        CLAIMS.format(ns=NAMESPACE),
    )


def test_claim_with_valid_cel_is_accepted(sim: RunningCluster) -> None:
    name = unique_name("claim")
    response = sim.http.post(
        CLAIMS.format(ns=NAMESPACE), claim_with_selector(name, 'device.driver == "gpu.example.com"')
    )
    assert response.status == 201, response.message


# --- the same through real kubectl ------------------------------------------------------------------

KUBECTL_CASES = [
    ("gang-zero", {"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
    (
        "gang-negative",
        {"schedulingPolicy": {"gang": {"minCount": -5}}},
        "spec.schedulingPolicy.gang.minCount",
    ),
    ("both-policies", {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}}, "spec.schedulingPolicy"),
    (
        "five-claims",
        {
            "schedulingPolicy": {"basic": {}},
            "resourceClaims": [{"name": f"c{i}", "resourceClaimName": f"r{i}"} for i in range(5)],
        },
        "spec.resourceClaims",
    ),
    (
        "timeout-string",
        {"schedulingPolicy": {"basic": {}}, "scheduleTimeoutSeconds": "ten"},
        "spec.scheduleTimeoutSeconds",
    ),
]


def kubectl(sim: RunningCluster, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = kubectl_path()
    assert binary is not None
    return subprocess.run(
        [binary, "--kubeconfig", str(sim.kubeconfig), "--request-timeout=20s", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.e2e
@pytest.mark.skipif(kubectl_path() is None, reason="kubectl is not installed")
@pytest.mark.parametrize(("name", "spec", "field"), KUBECTL_CASES, ids=[c[0] for c in KUBECTL_CASES])
def test_kubectl_apply_of_invalid_podgroup_fails_naming_the_field(
    sim: RunningCluster, tmp_path: Path, name: str, spec: dict[str, Any], field: str
) -> None:
    manifest = tmp_path / f"{name}.json"
    doc = {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": spec,
    }
    manifest.write_text(orjson.dumps(doc).decode())
    result = kubectl(sim, "apply", "-n", NAMESPACE, "-f", str(manifest))
    assert result.returncode != 0, f"kubectl accepted an invalid PodGroup: {result.stdout}"
    assert field in result.stderr, result.stderr
    assert kubectl(sim, "get", "-n", NAMESPACE, "lpg", name).returncode != 0


@pytest.mark.e2e
@pytest.mark.skipif(kubectl_path() is None, reason="kubectl is not installed")
def test_kubectl_apply_of_valid_podgroup_then_reads_it_back(sim: RunningCluster, tmp_path: Path) -> None:
    doc = valid_podgroup("kubectl-ok")
    manifest = tmp_path / "ok.json"
    manifest.write_text(orjson.dumps(doc).decode())
    applied = kubectl(sim, "apply", "-n", NAMESPACE, "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    got = kubectl(sim, "get", "-n", NAMESPACE, "lpg", "kubectl-ok", "-o", "json")
    assert got.returncode == 0, got.stderr
    assert orjson.loads(got.stdout)["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
