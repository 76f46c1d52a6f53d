"""Group-level checks of other schedulers' group shapes, run by the group cycle around its placement:

- ``min_resources_status``: coscheduling's and Volcano's ``minResources`` (scheduler-plugins
  ``pkg/coscheduling/core/core.go`` ``CheckClusterResource``: the sum over nodes of what each can free
  for the group, its own members' usage counted as free, must cover the minimum). Beyond what every
  node's allocatable together holds it is UnschedulableAndUnresolvable (only a node added or changed
  helps); beyond what the nodes can free now it is Unschedulable (retried as pods leave);
- ``task_minimums_status``: Volcano's ``minTaskMember``, checked on a placement before it is kept.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from lockstep.scheduler.framework import PodGroupInfo, PodInfo, Status
from lockstep.state.cluster import ClusterCache

PLUGIN = "GangScheduling"
MIN_RESOURCES = "MinResources"
MIN_TASK_MEMBER = "MinTaskMemberUnsatisfiable"


def _short(totals: Mapping[str, int], minimum: Mapping[str, int]) -> dict[str, int]:
    return {r: amount - totals.get(r, 0) for r, amount in minimum.items() if totals.get(r, 0) < amount}


def _amount(resource: str, amount: int) -> str:
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if resource in ("memory", "ephemeral-storage") and amount % size == 0 and amount >= size:
            return f"{amount // size}{suffix}"
    return str(amount)


def _describe(gap: Mapping[str, int]) -> str:
    return ", ".join(f"{resource} {_amount(resource, amount)}" for resource, amount in sorted(gap.items()))


def min_resources_status(cache: ClusterCache, group: PodGroupInfo) -> Status | None:
    """None when the group's minResources fit in what the cluster can free for it."""
    minimum = dict(group.min_resources)
    if not minimum:
        return None
    ours: dict[str, dict[str, int]] = {}
    for member in cache.members(group.key):
        on = member.node_name or cache.assumed_node(member.uid)
        if on:
            used = ours.setdefault(on, {"pods": 0})
            used["pods"] += 1
            for resource, amount in member.requests.items():
                used[resource] = used.get(resource, 0) + amount
    capacity: dict[str, int] = {}
    free: dict[str, int] = {}
    for node in cache.nodes.values():
        if node.unschedulable:
            continue
        mine = ours.get(node.name, {})
        for resource in minimum:
            allocatable = node.allocatable.get(resource, 0)
            taken = node.pod_count if resource == "pods" else node.requested.get(resource, 0)
            capacity[resource] = capacity.get(resource, 0) + allocatable
            free[resource] = free.get(resource, 0) + max(allocatable - taken + mine.get(resource, 0), 0)
    never = _short(capacity, minimum)
    if never:
        return Status.unresolvable(
            PLUGIN,
            MIN_RESOURCES,
            f"minResources exceed what every node together can hold: short of {_describe(never)}",
        )
    gap = _short(free, minimum)
    if gap:
        return Status.unschedulable(
            PLUGIN,
            MIN_RESOURCES,
            f"minResources do not fit in what the nodes can free: short of {_describe(gap)}",
        )
    return None


def task_counts(pods: Iterable[PodInfo]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for pod in pods:
        counts[pod.task] = counts.get(pod.task, 0) + 1
    return counts


def task_minimums_status(group: PodGroupInfo, placed: Mapping[str, int], what: str) -> Status | None:
    """None when every task has at least its minimum in ``placed`` (task -> members)."""
    short = [(task, n, placed.get(task, 0)) for task, n in group.min_task_members if placed.get(task, 0) < n]
    if not short:
        return None
    detail = "; ".join(f"task {task!r}: {have} {what} of minTaskMember {n}" for task, n, have in short)
    return Status.unschedulable(PLUGIN, MIN_TASK_MEMBER, f"minTaskMember cannot be satisfied: {detail}")
