"""The PodGroup CRD's openAPIV3Schema and the pydantic models must give the same verdicts.

The CRD side is judged the way kube-apiserver judges it: structural schema (jsonschema), plus the
``x-kubernetes-validations`` CEL rules and ``x-kubernetes-list-type: map`` key uniqueness.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import pytest
import yaml
from pydantic import ValidationError

from lockstep.api.podgroup import PodGroup

ROOT = Path(__file__).resolve().parents[3]
CRD_PATH = ROOT / "crds" / "scheduling.lockstep.dev_podgroups.yaml"


def _schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_PATH.read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


SCHEMA = _schema()
_CEL = celpy.Environment()


def _extension_errors(schema: dict[str, Any], value: Any, path: str, old: Any = None) -> list[str]:
    """Evaluate what jsonschema does not know: CEL rules and list-map key uniqueness. Transition
    rules (reading ``oldSelf``) run only on an update, where ``old`` holds the previous value."""
    errors: list[str] = []
    for rule in schema.get("x-kubernetes-validations", []):
        activation = {"self": celpy.json_to_cel(value)}
        if "oldSelf" in rule["rule"]:
            if old is None:
                continue
            activation["oldSelf"] = celpy.json_to_cel(old)
        program = _CEL.program(_CEL.compile(rule["rule"]))
        result = program.evaluate(activation)
        if not (isinstance(result, celpy.celtypes.BoolType) and bool(result)):
            errors.append(f"{path}: {rule['message']}")
    if schema.get("x-kubernetes-list-type") == "map" and isinstance(value, list):
        keys = [tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"]) for item in value]
        if len(keys) != len(set(keys)):
            errors.append(f"{path}: Duplicate value")
    if isinstance(value, dict):
        for name, sub in schema.get("properties", {}).items():
            if name in value:
                was = old.get(name) if isinstance(old, dict) else None
                errors += _extension_errors(sub, value[name], f"{path}.{name}", was)
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            errors += _extension_errors(schema["items"], item, f"{path}[{i}]")
    return errors


def crd_accepts(doc: dict[str, Any]) -> bool:
    validator = jsonschema.Draft7Validator(SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
    if any(True for _ in validator.iter_errors(doc)):
        return False
    return not _extension_errors(SCHEMA, doc, "")


def crd_update_errors(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The CEL verdicts of an update of ``old`` to ``new`` (which the schema itself accepts)."""
    return _extension_errors(SCHEMA, new, "", old)


def model_accepts(doc: dict[str, Any]) -> bool:
    try:
        PodGroup.model_validate(doc)
    except ValidationError:
        return False
    return True


def pg(spec: Any = None, status: Any = None, **top: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "default"},
    }
    if spec is not None:
        doc["spec"] = spec
    if status is not None:
        doc["status"] = status
    doc.update(top)
    return doc


GANG = {"schedulingPolicy": {"gang": {"minCount": 8}}}


def with_spec(**changes: Any) -> dict[str, Any]:
    spec = copy.deepcopy(GANG)
    spec.update(changes)
    return pg(spec)


def claims(*entries: dict[str, Any]) -> dict[str, Any]:
    return with_spec(resourceClaims=list(entries))


CONDITION = {
    "type": "PodGroupScheduled",
    "status": "True",
    "lastTransitionTime": "2026-11-29T10:00:00Z",
    "reason": "Scheduled",
    "message": "8 of 8 members bound",
}

RESERVATION_STATUS = {
    "nodes": [
        {"name": "node-000", "resources": {"cpu": "4", "memory": "1073741824", "pods": "1"}, "waitingFor": 3},
        {"name": "node-001", "resources": {"cpu": "500m"}, "devices": True},
    ],
    "waitingFor": 3,
    "podsWithoutDeadline": 1,
    "expectedCompletion": "2026-11-29T10:05:00Z",
    "since": "2026-11-29T10:00:00Z",
    "timeoutSeconds": 600,
    "backfilled": 2,
}

VALID: dict[str, dict[str, Any]] = {
    "gang": pg(GANG),
    "child-of-a-composite": with_spec(parentCompositePodGroupName="training.replicas"),
    "basic": pg({"schedulingPolicy": {"basic": {}}}),
    "basic-with-unknown-content": pg({"schedulingPolicy": {"basic": {"future": 1}}}),
    "min-bounds": with_spec(schedulingPolicy={"gang": {"minCount": 1}}, scheduleTimeoutSeconds=1),
    "max-bounds": with_spec(schedulingPolicy={"gang": {"minCount": 10000}}, scheduleTimeoutSeconds=86400),
    "keep-min-count-with-recovery": with_spec(satisfactionPolicy="KeepMinCount", staleGracePeriodSeconds=1),
    "once-satisfied-max-grace": with_spec(satisfactionPolicy="OnceSatisfied", staleGracePeriodSeconds=86400),
    "upstream-fields": with_spec(
        priorityClassName="high-priority",
        priority=-5,
        schedulingConstraints={"topology": [{"key": "topology.kubernetes.io/zone"}]},
        disruptionMode="PodGroup",
    ),
    "disruption-mode-1.37-names": with_spec(disruptionMode="all"),
    "disruption-mode-single": with_spec(disruptionMode="single"),
    "preemption-policy-never": with_spec(preemptionPolicy="Never"),
    "preemption-policy-lower": with_spec(preemptionPolicy="PreemptLowerPriority"),
    "no-topology": with_spec(schedulingConstraints={}),
    "two-required-levels": with_spec(schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}),
    "required-then-preferred-levels": with_spec(
        schedulingConstraints={
            "topology": [
                {"key": "zone"},
                {"key": "block", "mode": "Preferred"},
                {"key": "rack", "mode": "Preferred"},
            ]
        }
    ),
    "only-preferred": with_spec(schedulingConstraints={"topology": [{"key": "rack", "mode": "Preferred"}]}),
    "integral-float-count": with_spec(schedulingPolicy={"gang": {"minCount": 8.0}}),
    "unknown-spec-field-pruned": with_spec(somethingNew=True),
    "claim-by-name": claims({"name": "gpu", "resourceClaimName": "shared-gpu"}),
    "claim-by-template": claims({"name": "gpu", "resourceClaimTemplateName": "gpu.template-1"}),
    "four-claims": claims(*({"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(4))),
    "empty-claims": claims(),
    "status-full": pg(
        GANG,
        {
            "phase": "Scheduled",
            "policy": "Gang",
            "observedGeneration": 3,
            "total": 8,
            "scheduled": 8,
            "running": 2,
            "succeeded": 0,
            "failed": 0,
            "waitingBeyondMinCount": 2,
            "lastAttemptTime": "2026-11-29T10:00:00Z",
            "conditions": [CONDITION],
            "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "g-gpu-abcde"}],
            "unschedulableReasons": [{"reason": "InsufficientCPU", "count": 3, "message": "3 nodes"}],
        },
    ),
    "status-empty": pg(GANG, {}),
    "reservation-spec": with_spec(reservation={"policy": "Never", "timeoutSeconds": 30}),
    "reservation-spec-defaults": with_spec(reservation={}),
    "reservation-status": pg(GANG, {"reservation": RESERVATION_STATUS}),
}

INVALID: dict[str, dict[str, Any]] = {
    "parent-not-a-dns-name": with_spec(parentCompositePodGroupName="Training_Job"),
    "parent-empty": with_spec(parentCompositePodGroupName=""),
    "no-spec": pg(None),
    "no-policy": pg({}),
    "both-policies": pg({"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}}),
    "neither-policy": pg({"schedulingPolicy": {}}),
    "gang-without-min-count": pg({"schedulingPolicy": {"gang": {}}}),
    "min-count-zero": with_spec(schedulingPolicy={"gang": {"minCount": 0}}),
    "min-count-too-big": with_spec(schedulingPolicy={"gang": {"minCount": 10001}}),
    "min-count-string": with_spec(schedulingPolicy={"gang": {"minCount": "8"}}),
    "min-count-fraction": with_spec(schedulingPolicy={"gang": {"minCount": 8.5}}),
    "min-count-bool": with_spec(schedulingPolicy={"gang": {"minCount": True}}),
    "policy-not-object": with_spec(schedulingPolicy="gang"),
    "timeout-zero": with_spec(scheduleTimeoutSeconds=0),
    "unknown-satisfaction-policy": with_spec(satisfactionPolicy="Always"),
    "stale-grace-zero": with_spec(staleGracePeriodSeconds=0),
    "stale-grace-too-long": with_spec(staleGracePeriodSeconds=86401),
    "stale-grace-string": with_spec(staleGracePeriodSeconds="60"),
    "topology-duplicate-key": with_spec(schedulingConstraints={"topology": [{"key": "a"}, {"key": "a"}]}),
    "topology-mode-unknown": with_spec(schedulingConstraints={"topology": [{"key": "a", "mode": "Soft"}]}),
    "topology-preferred-above-required": with_spec(
        schedulingConstraints={"topology": [{"key": "rack", "mode": "Preferred"}, {"key": "zone"}]}
    ),
    "nine-topology-levels": with_spec(
        schedulingConstraints={"topology": [{"key": f"k{i}", "mode": "Preferred"} for i in range(9)]}
    ),
    "topology-without-key": with_spec(schedulingConstraints={"topology": [{}]}),
    "topology-key-not-a-label": with_spec(schedulingConstraints={"topology": [{"key": "-zone"}]}),
    "disruption-mode-unknown": with_spec(disruptionMode="Node"),
    "disruption-mode-object": with_spec(disruptionMode={"all": {}}),
    "preemption-policy-unknown": with_spec(preemptionPolicy="Always"),
    "priority-string": with_spec(priority="7"),
    "priority-class-not-a-name": with_spec(priorityClassName="High_Priority"),
    "timeout-too-long": with_spec(scheduleTimeoutSeconds=86401),
    "timeout-string": with_spec(scheduleTimeoutSeconds="300"),
    "claims-not-list": with_spec(resourceClaims={"name": "gpu"}),
    "claim-both-sources": claims({"name": "gpu", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}),
    "claim-no-source": claims({"name": "gpu"}),
    "claim-no-name": claims({"resourceClaimName": "a"}),
    "claim-duplicate-names": claims(
        {"name": "gpu", "resourceClaimName": "a"}, {"name": "gpu", "resourceClaimName": "b"}
    ),
    "five-claims": claims(*({"name": f"c{i}", "resourceClaimName": f"claim-{i}"} for i in range(5))),
    "claim-name-uppercase": claims({"name": "GPU", "resourceClaimName": "a"}),
    "claim-name-too-long": claims({"name": "a" * 64, "resourceClaimName": "a"}),
    "claim-ref-bad-subdomain": claims({"name": "gpu", "resourceClaimName": "Bad_Name"}),
    "claim-ref-empty": claims({"name": "gpu", "resourceClaimName": ""}),
    "status-bad-phase": pg(GANG, {"phase": "Sleeping"}),
    "status-negative-count": pg(GANG, {"scheduled": -1}),
    "status-bad-policy": pg(GANG, {"policy": "Strict"}),
    "status-negative-waiting-beyond-min-count": pg(GANG, {"waitingBeyondMinCount": -1}),
    "status-waiting-beyond-min-count-string": pg(GANG, {"waitingBeyondMinCount": "2"}),
    "condition-missing-reason": pg(
        GANG, {"conditions": [{k: v for k, v in CONDITION.items() if k != "reason"}]}
    ),
    "condition-bad-reason": pg(GANG, {"conditions": [{**CONDITION, "reason": "not a reason"}]}),
    "condition-bad-status": pg(GANG, {"conditions": [{**CONDITION, "status": "Maybe"}]}),
    "condition-bad-time": pg(GANG, {"conditions": [{**CONDITION, "lastTransitionTime": "yesterday"}]}),
    "condition-duplicate-type": pg(GANG, {"conditions": [CONDITION, CONDITION]}),
    "reason-negative-count": pg(GANG, {"unschedulableReasons": [{"reason": "Taint", "count": -2}]}),
    "reservation-policy-unknown": with_spec(reservation={"policy": "Always"}),
    "reservation-timeout-zero": with_spec(reservation={"timeoutSeconds": 0}),
    "reservation-timeout-too-long": with_spec(reservation={"timeoutSeconds": 86401}),
    "reservation-status-without-since": pg(
        GANG, {"reservation": {k: v for k, v in RESERVATION_STATUS.items() if k != "since"}}
    ),
    "reservation-status-duplicate-node": pg(
        GANG, {"reservation": {**RESERVATION_STATUS, "nodes": [{"name": "a"}, {"name": "a"}]}}
    ),
}


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_documents_are_accepted_by_both(name: str) -> None:
    doc = VALID[name]
    assert crd_accepts(doc), f"CRD schema rejects valid document {name}"
    assert model_accepts(doc), f"model rejects valid document {name}"


@pytest.mark.parametrize("name", sorted(INVALID))
def test_invalid_documents_are_rejected_by_both(name: str) -> None:
    doc = INVALID[name]
    assert not crd_accepts(doc), f"CRD schema accepts invalid document {name}"
    assert not model_accepts(doc), f"model accepts invalid document {name}"


def test_model_error_names_the_field() -> None:
    with pytest.raises(ValidationError) as info:
        PodGroup.model_validate(INVALID["both-policies"])
    assert "exactly one of basic or gang" in str(info.value)
    with pytest.raises(ValidationError) as info:
        PodGroup.model_validate(INVALID["min-count-zero"])
    assert "minCount" in str(info.value)


def test_topology_errors_name_the_field() -> None:
    for name, field, words in (
        ("topology-duplicate-key", "spec.schedulingConstraints.topology[1].key", "duplicate key 'a'"),
        ("topology-preferred-above-required", "spec.schedulingConstraints.topology[1].mode", "comes after"),
    ):
        with pytest.raises(ValidationError) as info:
            PodGroup.model_validate(INVALID[name])
        assert field in str(info.value) and words in str(info.value), name
    with pytest.raises(ValidationError) as info:
        PodGroup.model_validate(INVALID["topology-mode-unknown"])
    assert "topology.0.mode" in str(info.value) and "'Required' or 'Preferred'" in str(info.value)


def test_model_applies_the_crd_default_timeout() -> None:
    default = SCHEMA["properties"]["spec"]["properties"]["scheduleTimeoutSeconds"]["default"]
    group = PodGroup.model_validate(VALID["gang"])
    assert group.spec.schedule_timeout_seconds == default
    assert group.spec.min_count == 8
    assert group.spec.is_gang
    assert PodGroup.model_validate(VALID["basic"]).spec.min_count == 1


def test_printer_columns_are_the_documented_ones() -> None:
    crd = yaml.safe_load(CRD_PATH.read_text())
    columns = [c["name"] for c in crd["spec"]["versions"][0]["additionalPrinterColumns"]]
    assert columns == ["Policy", "MinCount", "Scheduled", "Running", "Satisfied", "Phase", "Age"]
    assert crd["spec"]["names"]["shortNames"] == ["lpg"]
    assert crd["spec"]["versions"][0]["subresources"] == {"status": {}}


BASIC = {"schedulingPolicy": {"basic": {}}}


def test_min_count_may_change_after_creation() -> None:
    assert crd_update_errors(pg(GANG), pg({"schedulingPolicy": {"gang": {"minCount": 3}}})) == []
    assert crd_update_errors(pg(BASIC), pg({**BASIC, "priority": 5})) == []


@pytest.mark.parametrize(
    ("old", "new"), [(GANG, BASIC), (BASIC, GANG)], ids=["gang-to-basic", "basic-to-gang"]
)
def test_switching_between_basic_and_gang_is_refused_with_a_clear_message(
    old: dict[str, Any], new: dict[str, Any]
) -> None:
    (error,) = crd_update_errors(pg(old), pg(new))
    assert error.startswith(".spec.schedulingPolicy: schedulingPolicy cannot switch between basic and gang")


def test_model_applies_the_crd_default_satisfaction_policy() -> None:
    default = SCHEMA["properties"]["spec"]["properties"]["satisfactionPolicy"]["default"]
    group = PodGroup.model_validate(VALID["gang"])
    assert group.spec.satisfaction_policy == default == "OnceSatisfied"
    assert group.spec.stale_grace_period_seconds is None
