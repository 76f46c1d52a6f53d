"""scheduler-plugins coscheduling: the ``scheduling.x-k8s.io/v1alpha1`` PodGroup, read into the core's
one group model. Pods join it with the label ``scheduling.x-k8s.io/pod-group``.

The spec is kubernetes-sigs/scheduler-plugins ``apis/scheduling/v1alpha1/types.go`` (PodGroupSpec:
``minMember``, ``minResources``, ``scheduleTimeoutSeconds``), its CRD
``manifests/coscheduling/crd.yaml`` and the plugin ``pkg/coscheduling/core/core.go``:

- ``minMember`` (int32, omitted: 0) members must be placed together; 0 places each pod on its own, as
  the plugin's Permit does; a negative value is refused, naming the field;
- ``minResources`` is the plugin's PreFilter resource check (``CheckClusterResource``): the group's
  minimum, with ``pods: minMember`` added as the plugin adds it, must fit in what the nodes can
  free for it; lockstep tells "never" (more than every node's allocatable together) from "not now";
- ``scheduleTimeoutSeconds`` is the Permit wait, the plugin's default (``permitWaitingTimeSeconds``,
  60 s) when absent.

Status is written as ``pkg/controllers/podgroup_controller.go`` writes it (``status_for``): phase
Pending, Scheduling, Running, Failed, Finished; running, succeeded, failed; occupiedBy; and
scheduleStartTime, set when lockstep first tries the group. The published CRD has no ``scheduled``
field (the API server would prune it), so none is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from lockstep.api.groups import dialect_identity
from lockstep.api.pod import InvalidObjectError, parse_resource_list
from lockstep.scheduler.framework import DIALECT_COSCHEDULING, PodGroupInfo

GROUP = "scheduling.x-k8s.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "podgroups"
DEFAULT_SCHEDULE_TIMEOUT_SECONDS = 60.0  # the plugin's permitWaitingTimeSeconds default

PENDING, SCHEDULING, RUNNING, FAILED, FINISHED = "Pending", "Scheduling", "Running", "Failed", "Finished"
FINAL_PHASES = frozenset({FAILED, FINISHED})


def _int(spec: Mapping[str, Any], field: str, default: int | None) -> int | None:
    value = spec.get(field, default)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"spec.{field}: must be an integer, got {value!r}")
    return value


def from_coscheduling(raw: Mapping[str, Any]) -> PodGroupInfo:
    """The core's group of a coscheduling PodGroup; a field lockstep cannot use makes it refused
    (``refusal`` names the field), never read as something else."""
    base = dialect_identity(raw, DIALECT_COSCHEDULING)
    namespace, name = base.namespace, base.name
    spec = raw.get("spec") or {}
    try:
        min_member = _int(spec, "minMember", 0) or 0
        if min_member < 0:
            raise ValueError(f"spec.minMember: must not be negative, got {min_member}")
        timeout = _int(spec, "scheduleTimeoutSeconds", None)
        if timeout is not None and timeout < 1:
            raise ValueError(f"spec.scheduleTimeoutSeconds: must be at least 1, got {timeout}")
        key = f"{namespace}/{name}"
        try:
            minimum = parse_resource_list(spec.get("minResources"), "PodGroup", key, "spec.minResources")
        except InvalidObjectError as exc:
            raise ValueError(f"{exc.field}: {str(exc).rpartition(': ')[2]}") from None
    except ValueError as exc:
        return replace(base, refusal=f"PodGroup {namespace}/{name} ({API_VERSION}): {exc}")
    if minimum:
        minimum["pods"] = max(min_member, minimum.get("pods", 0))
    return replace(
        base,
        min_count=max(min_member, 1),
        is_gang=min_member >= 1,
        schedule_timeout_seconds=float(timeout) if timeout is not None else DEFAULT_SCHEDULE_TIMEOUT_SECONDS,
        min_resources=tuple(sorted(minimum.items())),
    )


def phase_for(current: str, min_member: int, pods: int, running: int, succeeded: int, failed: int) -> str:
    """The phase the coscheduling controller's Reconciles settle on from ``current`` (it moves one
    step per reconcile and reconciles again after each write; lockstep writes the end at once)."""
    for _ in range(3):
        following = _reconcile(current, min_member, pods, running, succeeded, failed)
        if following == current:
            break
        current = following
    return current


def _reconcile(current: str, min_member: int, pods: int, running: int, succeeded: int, failed: int) -> str:
    if current in FINAL_PHASES:
        return current
    if not current:
        return PENDING
    if current == PENDING:
        return SCHEDULING if pods >= min_member and pods else PENDING
    if pods < min_member or not pods:
        return PENDING
    phase = RUNNING if succeeded + running >= min_member else SCHEDULING
    if failed and failed + running + succeeded >= min_member:
        phase = FAILED
    if succeeded >= min_member:
        phase = FINISHED
    return phase


def occupied_by(namespace: str, owners: Sequence[str]) -> str:
    """``fillOccupiedObj``: the first pod's owners as namespace/name, sorted, comma-joined."""
    return ",".join(sorted(f"{namespace}/{owner}" for owner in owners))
