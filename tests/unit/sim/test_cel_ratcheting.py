"""CRD validation ratcheting (KEP-4008, GA in Kubernetes 1.33) in the emulator's CEL rules: a value
equal to the old object's is not held to rules again, so a status write does not re-run the spec's
rules; a changed value is, and transition rules (``oldSelf``) always run."""

from __future__ import annotations

from typing import Any

from lockstep.sim.crd import run_cel_rules

SMALL = {"type": "object", "properties": {"a": {"type": "integer"}}}


def errors_of(value: Any, old: Any, rule: str) -> list[str]:
    schema = {**SMALL, "x-kubernetes-validations": [{"rule": rule, "message": f"broke {rule}"}]}
    found: list[Any] = []
    run_cel_rules(value, old, schema, "spec", found)
    return [error.detail for error in found]


def test_an_unchanged_value_is_not_validated_again() -> None:
    assert errors_of({"a": 10}, {"a": 10}, "self.a < 5") == []


def test_a_changed_or_new_value_is_validated() -> None:
    assert errors_of({"a": 10}, {"a": 1}, "self.a < 5") == ["Invalid value: broke self.a < 5"]
    assert errors_of({"a": 10}, None, "self.a < 5") == ["Invalid value: broke self.a < 5"]


def test_a_transition_rule_runs_on_an_unchanged_value() -> None:
    assert errors_of({"a": 10}, {"a": 10}, "self.a != oldSelf.a") == [
        "Invalid value: broke self.a != oldSelf.a"
    ]


def test_a_remembered_verdict_is_the_same_as_a_fresh_one() -> None:
    for _ in range(2):  # the second round is answered from the remembered verdicts
        assert errors_of({"a": 10}, None, "self.a < 5") == ["Invalid value: broke self.a < 5"]
        assert errors_of({"a": 1}, None, "self.a < 5") == []
        [failed] = errors_of({"a": 1}, None, "self.b < 5")
        assert failed.startswith("Invalid value: rule evaluation failed:")
