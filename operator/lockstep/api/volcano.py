"""Volcano: the ``scheduling.volcano.sh/v1beta1`` PodGroup, read into the core's one group model. Pods
join it with the annotation ``scheduling.k8s.io/group-name``.

The spec is volcano-sh/apis ``pkg/apis/scheduling/v1beta1/types.go`` (PodGroupSpec, PodGroupStatus,
the phases and condition reasons) and ``labels.go`` (``KubeGroupNameAnnotationKey``), the CRD
volcano-sh/volcano ``config/crd/volcano/bases/scheduling.volcano.sh_podgroups.yaml`` (no status
subresource: the status is written with the object), and the scheduler's
``pkg/scheduler/api/job_info.go`` (a pod's task is its annotation ``volcano.sh/task-spec``,
``batch.TaskSpecKey``) and gang plugin (its Scheduled / Unschedulable conditions).

Honoured: ``minMember`` (members placed together; 0 places each pod on its own), ``minTaskMember``
(per task, a placement must hold that many of the task's pods, and the group waits until they
exist), ``minResources`` (a pre-check as Volcano's enqueue makes it: the group waits, or is
Unschedulable when the nodes together could never hold it) and ``priorityClassName``.
Not honoured, and reported by name in a ``NotHonoured`` event on the PodGroup: ``queue`` (other than
Volcano's ``default``), ``networkTopology``, ``subGroupPolicy``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lockstep.api.groups import dialect_identity, group_priority
from lockstep.api.pod import InvalidObjectError, parse_resource_list
from lockstep.scheduler.framework import DIALECT_VOLCANO, PodGroupInfo

GROUP = "scheduling.volcano.sh"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
PLURAL = "podgroups"
DEFAULT_QUEUE = "default"

# PodGroupPhase and PodGroupConditionType
PENDING, RUNNING, UNKNOWN, INQUEUE, COMPLETED = "Pending", "Running", "Unknown", "Inqueue", "Completed"
CONDITION_UNSCHEDULABLE, CONDITION_SCHEDULED = "Unschedulable", "Scheduled"
# the reasons Volcano's scheduler gives
REASON_READY = "tasks in gang are ready to be scheduled"
NOT_ENOUGH_RESOURCES = "NotEnoughResources"
NOT_ENOUGH_TASKS = "NotEnoughTasks"
NOT_ENOUGH_PODS_OF_TASK = "NotEnoughPodsOfTask"


def not_honoured(spec: Mapping[str, Any]) -> list[str]:
    """The fields of ``spec`` that change what Volcano would do and lockstep does not do."""
    fields = []
    queue = spec.get("queue")
    if queue and queue != DEFAULT_QUEUE:
        fields.append(f"spec.queue ({queue!r}: Volcano queues, their capability and weight, are not applied)")
    if spec.get("networkTopology"):
        fields.append("spec.networkTopology (HyperNode tiers are not applied)")
    if spec.get("subGroupPolicy"):
        fields.append("spec.subGroupPolicy (sub-group gangs are not applied)")
    return fields


def _count(value: Any, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field}: must be an integer, got {value!r}")
    if value < 0:
        raise ValueError(f"{field}: must not be negative, got {value}")
    return value


def from_volcano(raw: Mapping[str, Any], priority_classes: Mapping[str, int]) -> PodGroupInfo:
    """The core's group of a Volcano PodGroup; a field lockstep cannot use makes it refused
    (``refusal`` names the field). Raises UnknownPriorityClassError as the other shapes do."""
    base = dialect_identity(raw, DIALECT_VOLCANO)
    namespace, name = base.namespace, base.name
    spec = raw.get("spec") or {}
    key = f"{namespace}/{name}"
    try:
        min_member = _count(spec.get("minMember", 0), "spec.minMember")
        tasks = spec.get("minTaskMember") or {}
        if not isinstance(tasks, Mapping):
            raise ValueError(f"spec.minTaskMember: must be an object, got {tasks!r}")
        per_task = {str(t): _count(n, f"spec.minTaskMember[{t}]") for t, n in tasks.items()}
        try:
            minimum = parse_resource_list(spec.get("minResources"), "PodGroup", key, "spec.minResources")
        except InvalidObjectError as exc:
            raise ValueError(f"{exc.field}: {str(exc).rpartition(': ')[2]}") from None
    except ValueError as exc:
        return replace(base, refusal=f"PodGroup {key} ({API_VERSION}): {exc}")
    priority = group_priority(key, None, spec.get("priorityClassName"), priority_classes)
    return replace(
        base,
        min_count=max(min_member, 1),
        is_gang=min_member >= 1 or any(per_task.values()),
        priority=priority,
        min_resources=tuple(sorted(minimum.items())),
        min_task_members=tuple(sorted((t, n) for t, n in per_task.items() if n)),
    )


def phase_for(
    current: str,
    min_member: int,
    allocated: int,
    running: int,
    succeeded: int,
    live: int,
    unschedulable: bool,
) -> str:
    """``jobStatus`` of Volcano's scheduler session: Unknown when members run but the rest cannot
    be placed; Running once minMember are allocated (bound, or finished successfully); Inqueue
    (admitted: enough members exist and minResources fits) stays until then; else Pending. Completed
    when every member finished and minMember succeeded."""
    if live == 0 and succeeded and succeeded >= min_member:
        return COMPLETED
    if running and unschedulable:
        return UNKNOWN
    if allocated + succeeded >= max(min_member, 1):
        return RUNNING
    return current if current == INQUEUE else PENDING
