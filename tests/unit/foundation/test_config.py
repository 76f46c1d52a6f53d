from __future__ import annotations

from pathlib import Path

import pytest

from lockstep.config import KNOWN_FEATURE_GATES, ConfigError, LogFormat, load_settings, parse_feature_gates


def test_defaults() -> None:
    settings = load_settings()
    assert settings.scheduler_name == "lockstep"
    assert settings.namespaces == []
    assert settings.feature_gates == KNOWN_FEATURE_GATES
    assert settings.feature_gates["DRAListTypeAttributes"] is False
    assert settings.leader_elect is True


def test_environment_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_SCHEDULER_NAME", "gangs")
    monkeypatch.setenv("LOCKSTEP_NAMESPACES", "ml, batch")
    monkeypatch.setenv("LOCKSTEP_FEATURE_GATES", "DRAListTypeAttributes=true")
    monkeypatch.setenv("LOCKSTEP_LEADER_ELECT", "false")
    settings = load_settings()
    assert settings.scheduler_name == "gangs"
    assert settings.namespaces == ["ml", "batch"]
    assert settings.feature_gates["DRAListTypeAttributes"] is True
    assert settings.leader_elect is False


def test_flags_override_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCKSTEP_SCHEDULER_NAME", "from-env")
    assert load_settings(scheduler_name="from-flag").scheduler_name == "from-flag"


def test_feature_gate_parsing_keeps_defaults_of_unmentioned_gates() -> None:
    gates = parse_feature_gates("DRAListTypeAttributes=TRUE, DRAAdminAccess=false")
    assert gates["DRAListTypeAttributes"] is True
    assert gates["DRAAdminAccess"] is False
    assert gates["DRAPrioritizedList"] is KNOWN_FEATURE_GATES["DRAPrioritizedList"]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("NoSuchGate=true", "unknown feature gate 'NoSuchGate'"),
        ("DRAListTypeAttributes=yes", "feature gate 'DRAListTypeAttributes' has invalid value 'yes'"),
        ("DRAListTypeAttributes", "feature gate 'DRAListTypeAttributes' has no value"),
    ],
)
def test_bad_feature_gates_name_the_gate(value: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings(feature_gates=value)
    assert expected in str(info.value)
    assert "--feature-gates" in str(info.value)


def test_bad_values_name_the_setting() -> None:
    with pytest.raises(ConfigError, match="--log-format"):
        load_settings(log_format="xml")
    with pytest.raises(ConfigError, match="--backoff-max-seconds"):
        load_settings(backoff_initial_seconds=10, backoff_max_seconds=5)
    with pytest.raises(ConfigError, match="--scheduler-name"):
        load_settings(scheduler_name="")


def test_auto_log_format_is_json_without_a_terminal() -> None:
    # pytest captures stderr, so it is not a TTY here.
    assert load_settings().resolved_log_format() is LogFormat.JSON
    assert load_settings(log_format="console").resolved_log_format() is LogFormat.CONSOLE


def test_lease_namespace_is_the_pods_own_then_kube_system(tmp_path: Path) -> None:
    namespace_file = tmp_path / "namespace"
    assert load_settings().resolved_lease_namespace(namespace_file) == "kube-system"
    namespace_file.write_text("team-sched\n")
    assert load_settings().resolved_lease_namespace(namespace_file) == "team-sched"
    assert load_settings(lease_namespace="ops").resolved_lease_namespace(namespace_file) == "ops"


def test_environment_names_match_in_any_case_and_bad_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("lockstep_lease_name", "from-lower-case")
    monkeypatch.setenv("LOCKSTEP_BACKOFF_MAX_SECONDS", "soon")
    monkeypatch.setenv("LOCKSTEP_NO_SUCH_SETTING", "1")  # another version's setting: ignored
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert "--backoff-max-seconds (LOCKSTEP_BACKOFF_MAX_SECONDS)" in str(info.value)
    monkeypatch.delenv("LOCKSTEP_BACKOFF_MAX_SECONDS")
    assert load_settings().lease_name == "from-lower-case"
