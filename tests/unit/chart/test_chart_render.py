"""The Helm chart lints strictly, renders valid manifests and configures the operator it deploys."""

from __future__ import annotations

import json
from typing import Any

import helm_python
import kubernetes_validate
import pytest
from chart_render import CHART_DIR, HA_VALUES, NAMESPACE, REPO_ROOT, chart, kinds, notes, only, render

from lockstep.config import KNOWN_FEATURE_GATES, LogFormat, LogLevel, ScoreStrategy, Settings, load_settings

KUBERNETES_VERSION = "1.37.0"
# Settings the chart deliberately does not expose: in a cluster the operator uses its service account.
SETTINGS_NOT_IN_CHART = {"kubeconfig"}


def env_of(objects: list[dict[str, Any]]) -> dict[str, str]:
    deployment = only(objects, "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"]}


def settings_from_env(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    import os

    for name in [n for n in os.environ if n.startswith("LOCKSTEP_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def test_chart_lints_strictly_without_warnings() -> None:
    for values in ({}, HA_VALUES):
        report = helm_python.lint(CHART_DIR, values, strict=True, namespace=NAMESPACE)
        problems = [m for m in report["messages"] if m["severity"] >= 2]
        assert report["errors"] == [] and problems == [], report


def test_default_install_renders_a_single_scheduler_without_leader_election() -> None:
    objects = render()
    assert kinds(objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "Service",
        "ServiceAccount",
    ]
    deployment = only(objects, "Deployment")
    assert deployment["spec"]["replicas"] == 1
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    assert env_of(objects)["LOCKSTEP_LEADER_ELECT"] == "false"


def test_ha_install_adds_leader_election_lease_role_pdb_and_service_monitor() -> None:
    objects = render(HA_VALUES)
    assert kinds(objects) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Deployment",
        "PodDisruptionBudget",
        "Role",
        "RoleBinding",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ]
    assert only(objects, "Deployment")["spec"]["strategy"]["type"] == "RollingUpdate"
    assert only(objects, "PodDisruptionBudget")["spec"]["minAvailable"] == 1
    role = only(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert {"lockstep-ha"} == {name for rule in role["rules"] for name in rule.get("resourceNames", [])}
    assert "2 replicas elect a leader through the Lease lockstep-system/lockstep-ha" in notes(HA_VALUES)


@pytest.mark.parametrize("values", [{}, HA_VALUES], ids=["defaults", "ha"])
def test_every_rendered_manifest_validates_against_the_kubernetes_schema(values: dict[str, Any]) -> None:
    for obj in render(values):
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            continue  # a Prometheus Operator CRD: no offline schema; its wiring is checked below
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_chart_crd_validates_and_is_byte_identical_to_the_root_crd() -> None:
    name = "scheduling.lockstep.dev_podgroups.yaml"
    chart_copy = CHART_DIR / "crds" / name
    assert chart_copy.read_bytes() == (REPO_ROOT / "crds" / name).read_bytes(), (
        f"charts/lockstep/crds/{name} differs from crds/{name}: copy the root file over it"
    )
    assert not chart_copy.is_symlink()
    assert [c["filename"] for c in chart().crds] == [f"lockstep/crds/{name}"]
    import yaml

    kubernetes_validate.validate(yaml.safe_load(chart_copy.read_text()), KUBERNETES_VERSION, strict=True)


def test_service_monitor_scrapes_the_metrics_service_port() -> None:
    objects = render(HA_VALUES)
    service = only(objects, "Service")
    monitor = only(objects, "ServiceMonitor")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["spec"]["selector"].items()
    assert monitor["metadata"]["labels"]["release"] == "prometheus"
    [endpoint] = monitor["spec"]["endpoints"]
    [port] = service["spec"]["ports"]
    assert (endpoint["port"], endpoint["path"]) == (port["name"], "/metrics")
    assert port["port"] == 9191
    container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert {"name": "metrics", "containerPort": 9191, "protocol": "TCP"} in container["ports"]


def test_metrics_disabled_removes_the_service_and_the_bind_address() -> None:
    objects = render({"metrics": {"enabled": False}})
    assert "Service" not in kinds(objects)
    assert env_of(objects)["LOCKSTEP_METRICS_BIND_ADDRESS"] == ""


def test_service_monitor_without_metrics_is_refused() -> None:
    with pytest.raises(
        helm_python.HelmRenderError, match=r"metrics.serviceMonitor.enabled needs metrics.enabled"
    ):
        render({"metrics": {"enabled": False, "serviceMonitor": {"enabled": True}}})


def test_default_environment_is_what_settings_would_default_to(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from_env(env_of(render()), monkeypatch)
    defaults = Settings.model_construct()
    for field in Settings.model_fields:
        if field in ("leader_elect", "lease_namespace", "log_format", *SETTINGS_NOT_IN_CHART):
            continue
        assert getattr(settings, field) == getattr(defaults, field), field
    assert settings.leader_elect is False
    assert settings.lease_namespace == NAMESPACE
    assert settings.log_format is LogFormat.JSON


def test_ha_values_reach_the_operator_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = settings_from_env(env_of(render(HA_VALUES)), monkeypatch)
    assert settings.leader_elect is True
    assert settings.lease_name == "lockstep-ha"
    assert settings.lease_namespace == NAMESPACE
    assert settings.namespaces == ["team-a", "team-b"]
    assert settings.scheduler_name == "lockstep-gang"
    assert settings.feature_gates == {
        **KNOWN_FEATURE_GATES,
        "DRAListTypeAttributes": True,
        "DRAPrioritizedList": False,
    }
    assert settings.log_format is LogFormat.CONSOLE
    assert settings.log_level is LogLevel.DEBUG
    assert settings.metrics_bind_address == "0.0.0.0:9191"


def test_every_setting_is_configured_by_the_chart() -> None:
    env = env_of(render())
    expected = {f"LOCKSTEP_{name.upper()}" for name in Settings.model_fields} - {
        f"LOCKSTEP_{name.upper()}" for name in SETTINGS_NOT_IN_CHART
    }
    assert set(env) == expected, "a Settings field was added or removed: map it in the chart's deployment"


def test_values_schema_enums_follow_the_settings_model() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    props = schema["properties"]
    assert set(props["featureGates"]["properties"]) == set(KNOWN_FEATURE_GATES)
    assert chart().values["featureGates"] == KNOWN_FEATURE_GATES
    # "auto" picks console on a terminal; a pod has none, so the chart offers the two real formats.
    assert set(props["logging"]["properties"]["format"]["enum"]) == {f.value for f in LogFormat} - {"auto"}
    assert set(props["logging"]["properties"]["level"]["enum"]) == {level.value for level in LogLevel}
    assert set(props["scheduling"]["properties"]["scoreStrategy"]["enum"]) == {s.value for s in ScoreStrategy}


def _closed_objects(schema: dict[str, Any], where: str = "") -> list[str]:
    """Paths of schema objects with fixed properties that still accept unknown keys."""
    open_paths = []
    if "properties" in schema and schema.get("additionalProperties") is not False:
        open_paths.append(where or "<root>")
    for name, sub in schema.get("properties", {}).items():
        open_paths += _closed_objects(sub, f"{where}.{name}")
    if isinstance(schema.get("items"), dict):
        open_paths += _closed_objects(schema["items"], f"{where}[]")
    return open_paths


def test_values_schema_is_draft_07_and_closed_at_every_level() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert _closed_objects(schema) == []


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCont": 2}, "additional properties 'replicaCont' not allowed"),
        ({"metrics": {"serviceMonitor": {"enabeld": True}}}, "additional properties 'enabeld' not allowed"),
        ({"featureGates": {"DRAListTypeAttribute": True}}, "'DRAListTypeAttribute' not allowed"),
        ({"replicaCount": "two"}, "at '/replicaCount': got string, want integer"),
        ({"logging": {"level": "verbose"}}, "at '/logging/level'"),
        ({"namespaces": "team-a"}, "at '/namespaces': got string, want array"),
    ],
    ids=[
        "misspelled-key",
        "misspelled-nested-key",
        "unknown-gate",
        "wrong-type",
        "bad-enum",
        "list-as-string",
    ],
)
def test_values_schema_rejects_bad_values_naming_them(values: dict[str, Any], message: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as raised:
        render(values)
    assert message in str(raised.value)
    report = helm_python.lint(CHART_DIR, values, strict=True)
    assert any(message in m["error"] for m in report["messages"] if m["severity"] == 3), report


def test_pod_meets_the_restricted_pod_security_profile() -> None:
    pod = only(render(HA_VALUES), "Deployment")["spec"]["template"]["spec"]
    for forbidden in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(forbidden), forbidden
    assert all(
        set(volume) - {"name"} <= {"emptyDir", "configMap", "secret", "projected"}
        for volume in pod["volumes"]
    )
    pod_context = pod["securityContext"]
    assert pod_context["runAsNonRoot"] is True and pod_context["runAsUser"] != 0
    assert pod_context["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in pod["containers"]:
        context = container["securityContext"]
        assert context["allowPrivilegeEscalation"] is False
        assert context.get("privileged", False) is False
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"] == {"drop": ["ALL"]}
        assert context["seccompProfile"] == {"type": "RuntimeDefault"}
        assert all("hostPort" not in port for port in container["ports"])
        assert container["resources"]["requests"].keys() >= {"cpu", "memory"}
        assert "memory" in container["resources"]["limits"]


def test_liveness_probe_calls_healthz_on_the_health_bind_port(monkeypatch: pytest.MonkeyPatch) -> None:
    objects = render({"health": {"port": 8181}})
    container = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, (
        "priming a big cluster takes minutes"
    )
    assert {"name": "health", "containerPort": 8181, "protocol": "TCP"} in container["ports"]
    assert "readinessProbe" not in container
    assert settings_from_env(env_of(objects), monkeypatch).health_bind_address == "0.0.0.0:8181"


def test_image_defaults_to_the_chart_app_version_and_can_be_overridden() -> None:
    def image(values: dict[str, Any]) -> str:
        container = only(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
        return str(container["image"])

    assert image({}) == f"lockstep:{chart().metadata['appVersion']}"
    assert image({"image": {"repository": "registry.example.com/lockstep", "tag": "dev"}}) == (
        "registry.example.com/lockstep:dev"
    )


def test_existing_service_account_must_be_named() -> None:
    with pytest.raises(helm_python.HelmRenderError, match=r"serviceAccount\.name is required"):
        render({"serviceAccount": {"create": False}})
    objects = render({"serviceAccount": {"create": False, "name": "scheduler"}})
    assert "ServiceAccount" not in kinds(objects)
    assert only(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "scheduler"
