"""Settings from command-line flags and ``LOCKSTEP_*`` environment variables.

Flags win over the environment, the environment over the defaults. Every field here is also a flag
of ``lockstep run`` (``scheduler_name`` -> ``--scheduler-name``), so this model is the one source of
the configuration reference.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from lockstep.api.owners import KIND_BY_NAME as INFERABLE_KINDS
from lockstep.api.placement import PlacementFieldError, parse_spread_constraint

# Feature gates lockstep understands, with kube-scheduler 1.36's defaults: DRAListTypeAttributes is
# alpha upstream (KEP-5491) and off there too, the others are GA or beta and on.
KNOWN_FEATURE_GATES: dict[str, bool] = {
    "DRAListTypeAttributes": False,
    "DRAAdminAccess": True,
    "DRAPrioritizedList": True,
    "DRADeviceTaints": True,
    "DRAPartitionableDevices": True,
    "DRADeviceBindingConditions": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAConsumableCapacity": True,
    "DRAExtendedResource": True,
    "DRASchedulerFilterTimeout": True,
}


# Score plugins and their weights: kube-scheduler's default profile, plus lockstep's own GangTopology
# (it outweighs the resource scores, so a gang stays in its domain while the domain has room) and
# DynamicResources. Weight 0 turns a score off.
DEFAULT_SCORE_WEIGHTS: dict[str, int] = {
    "NodeResourcesScore": 1,  # kube-scheduler's NodeResourcesFit score
    "NodeResourcesBalancedAllocation": 1,
    "ImageLocality": 1,
    "NodeAffinity": 2,
    "TaintToleration": 3,
    "InterPodAffinity": 2,
    "PodTopologySpread": 2,
    "DynamicResources": 1,
    "GangTopology": 3,
}

# kube-scheduler's system default topology spread constraints (PodTopologySpreadArgs
# defaultingType: System).
SYSTEM_DEFAULT_SPREAD = (
    '[{"maxSkew":3,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"ScheduleAnyway"},'
    '{"maxSkew":5,"topologyKey":"topology.kubernetes.io/zone","whenUnsatisfiable":"ScheduleAnyway"}]'
)

# Where a pod finds its own namespace; kube-system is the namespace every cluster has.
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
OUTSIDE_CLUSTER_LEASE_NAMESPACE = "kube-system"


class ConfigError(ValueError):
    """A setting has a value lockstep cannot use; the message names the setting."""


class LogFormat(StrEnum):
    JSON = "json"
    CONSOLE = "console"
    AUTO = "auto"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class ScoreStrategy(StrEnum):
    LEAST_ALLOCATED = "least-allocated"
    MOST_ALLOCATED = "most-allocated"


def parse_score_weights(value: str | dict[str, Any] | None) -> dict[str, int]:
    """``Name=weight,...`` over the defaults; unknown plugins and negative weights are errors."""
    weights = dict(DEFAULT_SCORE_WEIGHTS)
    if value is None or value == "":
        return weights
    items = list(value.items()) if isinstance(value, dict) else []
    if isinstance(value, str):
        for part in filter(None, (p.strip() for p in value.split(","))):
            name, sep, raw = part.partition("=")
            if not sep:
                raise ValueError(f"score weight {name!r} has no value: write {name}=<weight>")
            items.append((name.strip(), raw.strip()))
    for name, raw in items:
        if name not in DEFAULT_SCORE_WEIGHTS:
            raise ValueError(
                f"unknown score plugin {name!r} (known: {', '.join(sorted(DEFAULT_SCORE_WEIGHTS))})"
            )
        try:
            weight = int(raw)
        except (TypeError, ValueError):
            raise ValueError(f"score weight of {name} must be an integer, got {raw!r}") from None
        if weight < 0:
            raise ValueError(f"score weight of {name} must not be negative, got {weight}")
        weights[name] = weight
    return weights


def parse_feature_gates(
    value: str | Mapping[str, Any] | None, known: Mapping[str, bool] = KNOWN_FEATURE_GATES
) -> dict[str, bool]:
    """Parse ``Name=true,Other=false`` (the kube-scheduler flag syntax) into ``known``'s gates, each
    starting at its default there."""
    gates = dict(known)
    if value is None or value == "":
        return gates
    items: list[tuple[str, Any]]
    if isinstance(value, Mapping):
        items = list(value.items())
    else:
        items = []
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            name, sep, raw = part.partition("=")
            if not sep:
                raise ValueError(f"feature gate {name!r} has no value: write {name}=true or {name}=false")
            items.append((name.strip(), raw.strip()))
    for name, raw in items:
        if name not in known:
            raise ValueError(f"unknown feature gate {name!r} (known: {', '.join(sorted(known))})")
        if isinstance(raw, bool):
            gates[name] = raw
        elif str(raw).lower() in ("true", "false"):
            gates[name] = str(raw).lower() == "true"
        else:
            raise ValueError(f"feature gate {name!r} has invalid value {raw!r}: expected true or false")
    return gates


class Settings(BaseModel):
    """Everything ``lockstep run`` can be told. Field descriptions are the flag help texts."""

    model_config = ConfigDict(extra="forbid", validate_default=True)

    scheduler_name: str = Field(
        "lockstep",
        min_length=1,
        description="Pods whose spec.schedulerName equals this are scheduled by lockstep.",
    )
    namespaces: list[str] = Field(
        default_factory=list,
        description="Comma-separated namespaces to watch; empty means all namespaces.",
    )
    feature_gates: dict[str, bool] = Field(
        default_factory=lambda: dict(KNOWN_FEATURE_GATES),
        description="Feature gates as Name=true|false pairs, comma-separated "
        f"(known: {', '.join(sorted(KNOWN_FEATURE_GATES))}).",
    )
    kubeconfig: str | None = Field(
        None, description="Path to a kubeconfig; default: in-cluster service account, then ~/.kube/config."
    )
    leader_elect: bool = Field(True, description="Run leader election; only the leader schedules.")
    lease_name: str = Field("lockstep", min_length=1, description="Name of the coordination.k8s.io Lease.")
    lease_namespace: str | None = Field(
        None,
        min_length=1,
        description="Namespace of the leader-election Lease; by default the operator pod's own "
        "namespace in a cluster (its service account's namespace file), else kube-system.",
        json_schema_extra={"default_text": "(own namespace)"},
    )
    lease_duration_seconds: float = Field(
        15.0, gt=0, description="How long a lease is valid after its last renewal."
    )
    renew_deadline_seconds: float = Field(
        10.0, gt=0, description="The leader gives up leadership if it cannot renew within this time."
    )
    retry_period_seconds: float = Field(
        2.0, gt=0, description="Interval between lease acquire/renew attempts."
    )
    metrics_bind_address: str = Field(
        "0.0.0.0:9090", description="host:port for Prometheus /metrics; empty disables metrics."
    )
    health_bind_address: str = Field("0.0.0.0:8080", description="host:port for the /healthz liveness probe.")
    log_format: LogFormat = Field(
        LogFormat.AUTO, description="json, console, or auto (json unless stderr is a terminal)."
    )
    log_level: LogLevel = Field(LogLevel.INFO, description="debug, info, warning or error.")
    score_strategy: ScoreStrategy = Field(
        ScoreStrategy.LEAST_ALLOCATED,
        description="Node scoring: least-allocated spreads pods, most-allocated bin-packs them.",
    )
    topology_key: str = Field(
        "topology.kubernetes.io/zone",
        description="Node label whose values are the topology domains a gang prefers to stay within.",
    )
    joint_search_budget: int = Field(
        5000,
        ge=0,
        description="Node evaluations one joint placement search may spend on a gang that greedy placement "
        "left unschedulable (backtracking over members' nodes and devices); 0 turns the search off.",
    )
    backoff_initial_seconds: float = Field(
        1.0, gt=0, description="First retry delay of a PodGroup that failed to schedule."
    )
    backoff_max_seconds: float = Field(60.0, gt=0, description="Longest retry delay of a failing PodGroup.")
    score_weights: dict[str, int] = Field(
        default_factory=lambda: dict(DEFAULT_SCORE_WEIGHTS),
        description="Score plugin weights as Name=weight pairs, comma-separated, over the defaults "
        "(kube-scheduler's default profile; 0 turns a score off).",
    )
    default_spread_constraints: str = Field(
        "system",
        description="Topology spread constraints for pods that set none and have a ReplicaSet, "
        "StatefulSet or ReplicationController controller: system (kube-scheduler's: hostname maxSkew 3, "
        "zone maxSkew 5, ScheduleAnyway), none, or a JSON list of constraints without labelSelector.",
    )

    reservation: bool = Field(
        True,
        description="Hold capacity for a gang that does not fit only for lack of free capacity and leads "
        "the queue, so that pods finishing make room for it instead of for smaller pods (see Reservation "
        "and backfill).",
    )
    max_reservations: int = Field(1, ge=1, description="How many gangs may hold capacity at once.")
    reservation_delay_seconds: float = Field(
        5.0,
        ge=0,
        description="How long a gang must have failed to fit for lack of capacity before it reserves.",
    )
    reservation_timeout_seconds: float = Field(
        600.0,
        gt=0,
        description="A reservation not completed after this long is released and goes to the next gang "
        "(a PodGroup may set its own: spec.reservation.timeoutSeconds, or the annotation "
        "scheduling.lockstep.dev/reservation-timeout-seconds on upstream PodGroups).",
    )
    infer_gangs: list[str] = Field(
        default_factory=list,
        description="Comma-separated owner kinds whose pods (schedulerName lockstep, no "
        "scheduling.lockstep.dev/pod-group label) become gangs with the minCount their owner's spec "
        f"gives, without a PodGroup written by the user (known: {', '.join(INFERABLE_KINDS)}); empty: "
        "only labelled pods do.",
        json_schema_extra={"default_text": "(none)"},
    )

    @field_validator("namespaces", mode="before")
    @classmethod
    def _split_namespaces(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [ns.strip() for ns in value.split(",") if ns.strip()]
        return value

    @field_validator("infer_gangs", mode="before")
    @classmethod
    def _split_kinds(cls, value: Any) -> Any:
        kinds = [k.strip() for k in value.split(",") if k.strip()] if isinstance(value, str) else value
        for kind in kinds if isinstance(kinds, list) else []:
            if kind not in INFERABLE_KINDS:
                raise ValueError(f"unknown kind {kind!r} (known: {', '.join(INFERABLE_KINDS)})")
        return kinds

    @field_validator("feature_gates", mode="before")
    @classmethod
    def _parse_gates(cls, value: Any) -> dict[str, bool]:
        return parse_feature_gates(value)

    @field_validator("score_weights", mode="before")
    @classmethod
    def _parse_weights(cls, value: Any) -> dict[str, int]:
        return parse_score_weights(value)

    @field_validator("default_spread_constraints")
    @classmethod
    def _check_spread(cls, value: str) -> str:
        spread_constraint_list(value)  # raises ValueError naming the problem
        return value

    @field_validator("backoff_max_seconds")
    @classmethod
    def _max_not_below_initial(cls, value: float, info: Any) -> float:
        initial = info.data.get("backoff_initial_seconds")
        if initial is not None and value < initial:
            raise ValueError(f"must be >= backoff_initial_seconds ({initial})")
        return value

    def resolved_lease_namespace(self, namespace_file: Path = SERVICE_ACCOUNT_NAMESPACE) -> str:
        """As kube-scheduler does: the configured namespace, else the pod's own, else kube-system."""
        if self.lease_namespace:
            return self.lease_namespace
        try:
            own = namespace_file.read_text().strip()
        except OSError:
            own = ""
        return own or OUTSIDE_CLUSTER_LEASE_NAMESPACE

    def resolved_log_format(self) -> LogFormat:
        if self.log_format is LogFormat.AUTO:
            return LogFormat.CONSOLE if sys.stderr.isatty() else LogFormat.JSON
        return self.log_format


def spread_constraint_list(value: str) -> list[Any]:
    """The raw default spread constraints a ``default_spread_constraints`` value stands for."""
    if value == "none":
        return []
    text = SYSTEM_DEFAULT_SPREAD if value == "system" else value
    try:
        constraints = json.loads(text)
    except ValueError:
        raise ValueError("must be system, none or a JSON list of topology spread constraints") from None
    if not isinstance(constraints, list):
        raise ValueError("must be system, none or a JSON list of topology spread constraints")
    for index, raw in enumerate(constraints):
        try:
            parse_spread_constraint(raw, f"[{index}]", {}, default=True)
        except PlacementFieldError as exc:
            raise ValueError(str(exc)) from None
    return constraints


ENV_PREFIX = "LOCKSTEP_"


def environment_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The ``LOCKSTEP_<FIELD>`` variables of ``environ`` by field, their names in any case. Read here
    rather than through pydantic-settings, whose import cost every ``lockstep run`` 0.1-0.15 s of
    start-up (python -X importtime) for this loop; the values are validated as flags are."""
    fields = {ENV_PREFIX + name.upper(): name for name in Settings.model_fields}
    return {fields[key.upper()]: value for key, value in environ.items() if key.upper() in fields}


def load_settings(**overrides: Any) -> Settings:
    """Build Settings from the environment plus explicit overrides (flags); raise ConfigError."""
    values: dict[str, Any] = environment_settings()
    values.update((k, v) for k, v in overrides.items() if v is not None)
    try:
        return Settings(**values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            field = ".".join(str(p) for p in err["loc"]) or "settings"
            flag = "--" + field.replace("_", "-")
            env = "LOCKSTEP_" + field.upper()
            msg = str(err["msg"]).removeprefix("Value error, ")
            problems.append(f"{flag} ({env}): {msg}")
        raise ConfigError("; ".join(problems)) from None


def _default_text(name: str) -> str:
    field = Settings.model_fields[name]
    extra = field.json_schema_extra
    if isinstance(extra, dict) and isinstance(extra.get("default_text"), str):
        return str(extra["default_text"])
    default = field.get_default(call_default_factory=True)
    if isinstance(default, dict):
        return ",".join(f"{k}={str(v).lower()}" for k, v in sorted(default.items()))
    if isinstance(default, list):
        return ",".join(default) or "(all)"
    if isinstance(default, StrEnum):
        return default.value
    if isinstance(default, bool):
        return str(default).lower()
    return "(none)" if default is None else str(default)


def reference_markdown() -> str:
    """The configuration reference table of the README, generated from the Settings model."""
    rows = ["| flag | environment | default | meaning |", "|---|---|---|---|"]
    for name, field in Settings.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if field.annotation is bool:
            flag = "--[no-]" + name.replace("_", "-")
        meaning = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{flag}` | `LOCKSTEP_{name.upper()}` | `{_default_text(name)}` | {meaning} |")
    return "\n".join(rows)
