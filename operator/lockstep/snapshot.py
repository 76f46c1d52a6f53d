"""The cluster as one list of every kind a group cycle reads, and the operator's scheduling core built
on it, for dry runs that write nothing: ``lockstep explain`` (one group as the API records it) and
``lockstep plan`` (groups read from files, as if submitted now).

Listing needs only ``list`` on the kinds below (and API discovery); nothing is watched or written.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.config import Settings
from lockstep.controller.core import SchedulerCore
from lockstep.kube.client import (
    COMPOSITE_POD_GROUPS,
    CSI_NODES,
    DEVICE_CLASSES,
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUME_CLAIMS,
    PERSISTENT_VOLUMES,
    POD_DISRUPTION_BUDGETS,
    POD_GROUPS,
    PODS,
    PRIORITY_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    STORAGE_CLASSES,
    UPSTREAM_POD_GROUP_KINDS,
    KubeClient,
    ResourceKind,
)
from lockstep.kube.events import EventRecorder
from lockstep.metrics import Metrics
from lockstep.scheduler.composite import CompositeVerdict, HierarchyProblem, hierarchy, root_of
from lockstep.scheduler.cycle import CycleOutcome
from lockstep.scheduler.framework import Code, GroupKey, PodGroupInfo
from lockstep.scheduler.preemption import PlanVerdict
from lockstep.scheduler.scheduler import INVALID_POD_GROUP

# What a read-only user needs for a dry run: list on each of these (and get on the API discovery).
LISTED_KINDS: tuple[ResourceKind, ...] = (
    NODES,
    PODS,
    NAMESPACES,
    PERSISTENT_VOLUMES,
    PERSISTENT_VOLUME_CLAIMS,
    STORAGE_CLASSES,
    CSI_NODES,
    POD_DISRUPTION_BUDGETS,
    PRIORITY_CLASSES,
    POD_GROUPS,
    RESOURCE_CLAIMS,
    RESOURCE_SLICES,
    DEVICE_CLASSES,
    RESOURCE_CLAIM_TEMPLATES,
)


@dataclass(slots=True)
class ClusterState:
    """The objects a group cycle reads, as listed from the API."""

    nodes: list[dict[str, Any]] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)
    podgroups: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    slices: list[dict[str, Any]] = field(default_factory=list)
    device_classes: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    namespaces: list[dict[str, Any]] = field(default_factory=list)
    volumes: list[dict[str, Any]] = field(default_factory=list)
    volume_claims: list[dict[str, Any]] = field(default_factory=list)
    storage_classes: list[dict[str, Any]] = field(default_factory=list)
    csinodes: list[dict[str, Any]] = field(default_factory=list)
    budgets: list[dict[str, Any]] = field(default_factory=list)
    priority_classes: list[dict[str, Any]] = field(default_factory=list)
    upstream_podgroups: list[dict[str, Any]] = field(default_factory=list)
    upstream_kind: ResourceKind | None = None  # the upstream PodGroup version the cluster serves
    composites: list[dict[str, Any]] = field(default_factory=list)  # CompositePodGroups, where served

    def members(self, namespace: str, name: str, upstream: bool = False) -> list[dict[str, Any]]:
        def joins(pod: dict[str, Any]) -> bool:
            if upstream:
                return (pod.get("spec", {}).get("schedulingGroup") or {}).get("podGroupName") == name
            return bool(pod["metadata"].get("labels", {}).get(POD_GROUP_LABEL) == name)

        return sorted(
            (p for p in self.pods if p["metadata"].get("namespace") == namespace and joins(p)),
            key=lambda p: str(p["metadata"]["name"]),
        )


async def list_cluster(client: KubeClient) -> ClusterState:
    """Every kind a group cycle reads, listed once."""
    upstream_kind = await client.first_served(UPSTREAM_POD_GROUP_KINDS)
    composite_kind = await client.first_served((COMPOSITE_POD_GROUPS,))

    async def items(kind: ResourceKind) -> list[dict[str, Any]]:
        listed = await client.list(kind)
        return list(listed.get("items", []))

    served = (upstream_kind, composite_kind)
    kinds = (*LISTED_KINDS, *(kind for kind in served if kind is not None))
    listed = dict(zip(kinds, await asyncio.gather(*(items(kind) for kind in kinds)), strict=True))
    return ClusterState(
        nodes=listed[NODES],
        pods=listed[PODS],
        podgroups=listed[POD_GROUPS],
        claims=listed[RESOURCE_CLAIMS],
        slices=listed[RESOURCE_SLICES],
        device_classes=listed[DEVICE_CLASSES],
        templates=listed[RESOURCE_CLAIM_TEMPLATES],
        namespaces=listed[NAMESPACES],
        volumes=listed[PERSISTENT_VOLUMES],
        volume_claims=listed[PERSISTENT_VOLUME_CLAIMS],
        storage_classes=listed[STORAGE_CLASSES],
        csinodes=listed[CSI_NODES],
        budgets=listed[POD_DISRUPTION_BUDGETS],
        priority_classes=listed[PRIORITY_CLASSES],
        upstream_podgroups=listed[upstream_kind] if upstream_kind is not None else [],
        upstream_kind=upstream_kind,
        composites=listed[composite_kind] if composite_kind is not None else [],
    )


def build_core(settings: Settings, client: KubeClient, state: ClusterState) -> SchedulerCore:
    """The operator's scheduling core fed with ``state``, as its informers would feed it; it plans,
    never writes (not even a marked victim's deletion). Needs a running event loop."""
    core = SchedulerCore(settings, client, EventRecorder(client, "lockstep-dry-run"), Metrics())
    core.scheduler.preemption_api = None
    feeds: Iterable[tuple[Any, list[dict[str, Any]]]] = (
        (core.on_device_class, state.device_classes),
        (core.on_slice, state.slices),
        (core.on_claim_template, state.templates),
        (core.on_claim, state.claims),
        (core.on_storage_class, state.storage_classes),
        (core.on_csinode, state.csinodes),
        (core.on_volume, state.volumes),
        (core.on_volume_claim, state.volume_claims),
        (core.on_node, state.nodes),
        (core.on_namespace, state.namespaces),
        (core.on_priority_class, state.priority_classes),
        (core.on_composite_podgroup, state.composites),
        (core.on_podgroup, state.podgroups),
        (core.on_upstream_podgroup, state.upstream_podgroups),
        (core.on_pdb, state.budgets),
        (core.on_pod, state.pods),
    )
    for handler, objects in feeds:
        for raw in objects:
            handler("ADDED", raw)
    return core


def group_key(podgroup: dict[str, Any]) -> GroupKey:
    meta = podgroup["metadata"]
    upstream = str(podgroup.get("apiVersion", "")).startswith(f"{UPSTREAM_GROUP}/")
    return GroupKey(meta.get("namespace") or "default", meta["name"], upstream=upstream)


@dataclass(frozen=True, slots=True)
class DryRun:
    outcome: CycleOutcome
    preemption: PlanVerdict | None = None  # the planner's verdict when the group does not fit
    # a PodGroup of a CompositePodGroup hierarchy: each composite's verdict, the root first
    composites: tuple[CompositeVerdict, ...] = ()


def dry_run(core: SchedulerCore, key: GroupKey, keep: bool = False) -> DryRun | str:
    """One group cycle on the core's state, then, if the group does not fit, the preemption planner;
    a string when the group is not ready for a cycle. ``keep``: a group that fits keeps its members
    assumed and its devices in flight, so a later dry run sees them taken."""
    problem = core.scheduler.group_problem(key)
    group = core.cache.podgroup(key)
    if problem is not None and (group is None or problem[0] == INVALID_POD_GROUP):
        return f"{problem[0]}: {problem[1]}"
    if group is None:
        return "the PodGroup is not valid, so lockstep does not schedule it (see its status message)"
    kept = _kept_hierarchies.get(core, {}).get(key)
    if kept is not None:
        return kept  # placed with its hierarchy by the dry run of a sibling, kept
    pods = core.cache.unscheduled_members(key)
    total = core.cache.live_member_count(key)
    if not pods:
        return f"nothing to place: every one of the {total} members is bound or being deleted"
    min_count = group.min_count if group.is_gang else 1
    if total < min_count:
        return f"waiting for pods: {total} of minCount {min_count} exist, {min_count - total} missing"
    scheduler = core.scheduler
    if group.parent:
        return _dry_run_hierarchy(core, group, keep)
    priority = core.cache.group_priority(key)
    pods.sort(key=lambda p: -p.priority)  # as the operator's cycle orders them
    verdict = None
    holds = scheduler.nominations_above(key, priority)
    # capacity reserved for other gangs (read back from their PodGroups) is held from this one
    with core.cache.pods_held(holds), scheduler.reservations.holding_for(key, priority):
        outcome = scheduler.cycle.run(group, pods)
        if not keep or outcome.status.code is not Code.SUCCESS:
            for placement in outcome.placements:
                scheduler.cycle.release(placement)
        if outcome.status.code is Code.UNSCHEDULABLE:
            verdict = scheduler.planner.plan(key, group, pods, priority)
    return DryRun(outcome, verdict)


def _dry_run_hierarchy(core: SchedulerCore, group: PodGroupInfo, keep: bool) -> DryRun | str:
    """The cycle of the PodGroup's root CompositePodGroup, as the operator runs it."""
    scheduler = core.scheduler
    root = root_of(core.cache, group)
    if isinstance(root, HierarchyProblem):
        return f"{root.cause}: {root.message}"
    tree = hierarchy(core.cache, root)
    leaves = tree.leaves()
    pods_of = {
        leaf.key: sorted(core.cache.unscheduled_members(leaf.key), key=lambda p: -p.priority)
        for leaf in leaves
    }
    priority = max(core.cache.group_priority(leaf.key) for leaf in leaves)
    holds = scheduler.nominations_above(group.key, priority)
    with core.cache.pods_held(holds), scheduler.reservations.holding_for(group.key, priority):
        result = scheduler.composite_cycle.run(tree, pods_of)
        if not keep or not result.status.ok:
            for placement in reversed(result.placements):
                scheduler.cycle.release(placement)
    verdicts = tuple(result.verdicts[c.key] for c in tree.composites() if c.key in result.verdicts)
    if keep and result.status.ok:
        kept = _kept_hierarchies.setdefault(core, {})
        for leaf in leaves:
            if leaf.key != group.key and leaf.key in result.outcomes:
                kept[leaf.key] = DryRun(result.outcomes[leaf.key], None, verdicts)
    return DryRun(result.outcomes[group.key], None, verdicts)


# The PodGroups a kept dry run placed with their hierarchy, per core: their own dry run answers that.
_kept_hierarchies: weakref.WeakKeyDictionary[SchedulerCore, dict[GroupKey, DryRun]] = (
    weakref.WeakKeyDictionary()
)
