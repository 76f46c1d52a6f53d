"""The placement classification of Pod fields (api/pod_fields.py) against the Pod schema the API
serves, and the refusal of fields lockstep does not implement."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from sched_helpers import gang, make_node, make_scheduler, pod_dict, settle

from lockstep.api.pod import InvalidObjectError, parse_pod
from lockstep.api.pod_fields import POD_SPEC_FIELDS, Support, refused_fields, refused_in
from lockstep.scheduler.framework import Code, GroupKey
from lockstep.sim.openapi import builtin_schemas

README = Path(__file__).resolve().parents[3] / "README.md"
REF = "#/components/schemas/"


def _resolve(schemas: dict[str, Any], node: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref / allOf wrappers and array items to the object schema of a field."""
    while True:
        if "$ref" in node:
            node = schemas[node["$ref"].removeprefix(REF)]
        elif "allOf" in node and len(node["allOf"]) == 1:
            node = node["allOf"][0]
        elif node.get("type") == "array" and "items" in node:
            node = node["items"]
        else:
            return node


def _walk(schemas: dict[str, Any], node: dict[str, Any], prefix: str, seen: list[str]) -> None:
    for name, child in sorted(_resolve(schemas, node).get("properties", {}).items()):
        is_list = _resolve_type(schemas, child) == "array"
        path = f"{prefix}.{name}"
        seen.append(path)
        if POD_SPEC_FIELDS.get(path) is Support.DESCEND:
            _walk(schemas, child, path + ("[]" if is_list else ""), seen)


def _resolve_type(schemas: dict[str, Any], node: dict[str, Any]) -> str | None:
    while "$ref" in node or ("allOf" in node and len(node["allOf"]) == 1):
        node = schemas[node["$ref"].removeprefix(REF)] if "$ref" in node else node["allOf"][0]
    return node.get("type")


def test_every_pod_spec_field_is_classified() -> None:
    """A new PodSpec field (or one under a placement-relevant object) must be classified: implemented,
    refused, or irrelevant to placement. Entries for fields the schema lacks are stale."""
    schemas = builtin_schemas()
    seen: list[str] = []
    _walk(schemas, schemas["io.k8s.api.core.v1.PodSpec"], "spec", seen)
    missing = [path for path in seen if path not in POD_SPEC_FIELDS]
    assert not missing, f"classify these Pod fields in lockstep/api/pod_fields.py: {missing}"
    reachable = set(seen)
    stale = [path for path in POD_SPEC_FIELDS if path not in reachable]
    assert not stale, f"not in the Pod schema: {stale}"


def test_the_readme_lists_every_refused_field() -> None:
    text = README.read_text()
    section = text[text.index("## What lockstep refuses") :]
    listed = set(re.findall(r"`(spec\.[^`]+)`", section))
    assert set(refused_fields()) <= listed


def test_refused_fields_are_found_with_their_index() -> None:
    spec = {
        "volumes": [
            {"name": "a", "emptyDir": {}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "x"}},
            {"name": "c", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            {"name": "d", "csi": {"driver": "example.com"}},
        ]
    }
    assert refused_in(spec) == ("spec.volumes[3].csi",)
    assert refused_in({"containers": [{"name": "c"}]}) == ()


def test_a_pod_without_placement_fields_carries_nothing() -> None:
    assert parse_pod(pod_dict("p")).placement is None


def test_malformed_placement_fields_are_named() -> None:
    body = pod_dict(
        "p", affinity={"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{}]}}
    )
    try:
        parse_pod(body)
    except InvalidObjectError as exc:
        assert (
            exc.field
            == "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey"
        )
    else:
        raise AssertionError("accepted a term without topologyKey")
    body = pod_dict(
        "p",
        topologySpreadConstraints=[{"maxSkew": 0, "topologyKey": "z", "whenUnsatisfiable": "DoNotSchedule"}],
    )
    try:
        parse_pod(body)
    except InvalidObjectError as exc:
        assert exc.field == "spec.topologySpreadConstraints[0].maxSkew"
    else:
        raise AssertionError("accepted maxSkew 0")


async def test_a_refused_field_keeps_the_gang_pending_and_names_it() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0"))
    cache.upsert_podgroup(gang("g", 2))
    api.add(parse_pod(pod_dict("ok", group="g")))
    body = pod_dict("pvc", group="g", volumes=[{"name": "data", "csi": {"driver": "example.com"}}])
    api.add(parse_pod(body))
    await settle(scheduler)
    assert api.bind_calls == []
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert attempt.causes.get("UnsupportedPodSpec") == 1
    assert "spec.volumes[0].csi is not supported" in attempt.message
    reasons = {pod: reason for pod, _, reason in api.patch_calls}
    assert reasons["default/pvc"] == "UnsupportedPodSpec"
    assert reasons["default/ok"] == "Unschedulable"
