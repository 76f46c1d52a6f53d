"""The cluster cache: pods, nodes and PodGroups as the scheduler sees them, fed from watch events.

The operator calls ``upsert_*`` / ``delete_*`` for every watch event; the scheduler reads the cache
and assumes pods into it. Every method is synchronous and the scheduler's group cycle runs without
awaiting, so while a cycle runs the cache is its snapshot: nothing else can change it, and the pods
the cycle assumes are seen by the cycle's later pods. A failed cycle forgets what it assumed.

Each node's ``requested`` / ``pod_count`` is the sum over the pods bound to it (``spec.nodeName``)
or assumed onto it, minus finished pods. Two indexes keep the scheduler from scanning every node for
every pod: nodes by label (``key -> value -> names``) and nodes by free cpu (power-of-two buckets).

Events that could make a parked group schedulable are reported to the registered listeners.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from enum import Enum
from typing import Protocol

from lockstep.api.groups import from_lockstep
from lockstep.api.podgroup import PodGroup
from lockstep.scheduler.framework import (
    ONCE_SATISFIED,
    CompositeInfo,
    DisruptionBudget,
    GroupKey,
    NodeInfo,
    PodGroupInfo,
    PodInfo,
)
from lockstep.state.placed_pods import PlacedPodIndex


class ClusterEvent(Enum):
    NODE_ADDED = "NodeAdded"
    NODE_CHANGED = "NodeChanged"  # only changes that can admit more pods: see _node_change_can_help
    ASSIGNED_POD_REMOVED = "AssignedPodRemoved"  # a bound or assumed pod left a node (deleted/finished)
    ASSIGNED_POD_ADDED = "AssignedPodAdded"  # a pod not counted on a node before is bound to one
    MEMBER_ADDED = "MemberAdded"  # a new unscheduled pod of ours
    MEMBER_CHANGED = "MemberChanged"  # an unscheduled pod's scheduling-relevant fields changed
    MEMBER_REMOVED = "MemberRemoved"
    GROUP_ADDED = "PodGroupAdded"
    GROUP_MIN_COUNT_LOWERED = "MinCountLowered"
    GROUP_UPDATED = "PodGroupUpdated"
    GROUP_DELETED = "PodGroupDeleted"
    CLAIMS_CHANGED = "ClaimsChanged"  # a ResourceClaim, ResourceSlice or DeviceClass changed
    VOLUMES_CHANGED = "VolumesChanged"  # a PersistentVolume(Claim), StorageClass or CSINode changed
    RESERVATION_RELEASED = "ReservationReleased"  # capacity held for a gang is free for others again


class ClusterListener(Protocol):
    def on_cluster_event(self, event: ClusterEvent, group: GroupKey | None) -> None:
        """``group`` is set for events about one group's members or PodGroup, else None."""
        ...


def podgroup_info(podgroup: PodGroup) -> PodGroupInfo:
    """The scheduler's view of a validated lockstep PodGroup that names no PriorityClass."""
    return from_lockstep(podgroup, {})


# PodInfo fields whose change can make an unscheduled pod fit somewhere it did not.
_SCHEDULING_FIELDS = (
    "requests",
    "node_selector",
    "required_node_affinity",
    "tolerations",
    "claims",
    "claim_statuses",
    "priority",
    "placement",
)


class _Group:
    """A group's PodGroup and member pods (ours, not finished), with counts kept as they change so
    that PreEnqueue and PlacementFeasible never walk a large gang."""

    __slots__ = (
        "bound",
        "deleted",
        "info",
        "live",
        "members",
        "placed_once",
        "priority",
        "priority_stale",
        "satisfied_at",
        "scheduled",
        "succeeded",
    )

    def __init__(self) -> None:
        self.info: PodGroupInfo | None = None
        self.deleted = False  # the PodGroup existed and was deleted while members remain
        self.members: dict[str, PodInfo] = {}  # uid -> pod, in first-seen order
        self.live = 0  # members not being deleted
        self.scheduled = 0  # live members bound or assumed
        self.bound = 0  # live members the API shows bound
        self.priority = 0  # highest member priority (recomputed when its holder leaves)
        self.priority_stale = False
        self.succeeded: set[str] = set()  # uids of the group's pods that succeeded (not members)
        # the highest minCount the group has reached (bound + succeeded); 0 once none is left
        self.satisfied_at = 0
        # minCount members were placed together (bound or assumed) and one of them is still there: a
        # gang that falls below minCount from here can be stale (a binding lost meanwhile included)
        self.placed_once = False

    def note_counts(self) -> None:
        """Keep ``satisfied_at`` and ``placed_once`` with the counts (after each change of them)."""
        survivors = self.scheduled + len(self.succeeded)
        if survivors == 0:
            self.satisfied_at = 0  # nothing left of it: what joins now is a new gang
            self.placed_once = False
            return
        if self.info is not None and survivors >= self.info.min_count:
            self.placed_once = True
        if self.info is not None and (
            self.bound + len(self.succeeded) >= self.info.min_count or self.info.once_satisfied
        ):
            self.satisfied_at = max(self.satisfied_at, self.info.min_count)


class ClusterCache:
    def __init__(self, scheduler_name: str, topology_key: str = "topology.kubernetes.io/zone") -> None:
        self.scheduler_name = scheduler_name
        self.topology_key = topology_key  # the free-cpu index is also kept per value of this label
        self._pods: dict[str, PodInfo] = {}
        self._uid_by_key: dict[str, str] = {}
        self._nodes: dict[str, NodeInfo] = {}
        self._assumed: dict[str, str] = {}  # pod uid -> node name, until the pod shows spec.nodeName
        self._placed: dict[str, str] = {}  # pod uid -> node whose usage includes the pod
        self._pods_on_node: dict[str, set[str]] = {}  # also for nodes not (yet) in the cache
        self._groups: dict[GroupKey, _Group] = {}
        self._labels: dict[str, dict[str, set[str]]] = {}
        self._cpu_buckets: dict[int, dict[str, None]] = {}
        self._domain_buckets: dict[str, dict[int, dict[str, None]]] = {}
        self._node_bucket: dict[str, tuple[str | None, int]] = {}
        self._bucket_entry: dict[str, int] = {}  # node -> when it entered its bucket (order within it)
        self._bucket_entries = itertools.count()
        self._node_free: dict[str, tuple[str | None, int]] = {}  # node -> (domain, free cpu)
        self._domain_free: dict[str, int] = {}
        self._placed_index = PlacedPodIndex(lambda: ((self._pods[u], n) for u, n in self._placed.items()))
        self._namespace_labels: dict[str, Mapping[str, str]] = {}
        self._image_nodes: dict[str, int] = {}  # image name -> nodes that report it
        self._nominated: dict[str, str] = {}  # unbound live pod uid -> status.nominatedNodeName
        # What the preemption planner would otherwise find by walking every pod on every failed cycle:
        self._placed_priorities: Counter[int] = Counter()  # priority -> placed pods with it
        self._leaving: dict[str, None] = {}  # uids of pods being deleted or marked as victims
        self._budgets: dict[tuple[str, str], DisruptionBudget] = {}
        self._composites: dict[tuple[str, str], CompositeInfo] = {}
        self._listeners: list[ClusterListener] = []
        self._node_generation = 0
        self._usage_watchers: list[set[str]] = []

    # ----------------------------------------------------------------- listeners

    def add_listener(self, listener: ClusterListener) -> None:
        self._listeners.append(listener)

    def _emit(self, event: ClusterEvent, group: GroupKey | None = None) -> None:
        for listener in self._listeners:
            listener.on_cluster_event(event, group)

    # ----------------------------------------------------------------- pods

    def _is_member(self, pod: PodInfo) -> bool:
        """Ours, not finished, and not held by scheduling gates (a gated pod counts as absent: it
        joins its group, with a MEMBER_ADDED event, when its last gate is removed)."""
        return pod.scheduler_name == self.scheduler_name and not pod.terminal and not pod.scheduling_gated

    def _usage_node(self, pod: PodInfo) -> str:
        if pod.terminal:
            return ""
        return pod.node_name or self._assumed.get(pod.uid, "")

    def _place(self, pod: PodInfo) -> None:
        node_name = self._usage_node(pod)
        if node_name:
            self._place_on(pod, node_name)

    def _place_on(self, pod: PodInfo, node_name: str) -> None:
        self._placed[pod.uid] = node_name
        self._placed_priorities[pod.priority] += 1
        self._pods_on_node.setdefault(node_name, set()).add(pod.uid)
        self._placed_index.add(pod, node_name)
        node = self._nodes.get(node_name)
        if node is not None:
            requested = node.requested
            for resource, amount in pod.requests.items():
                requested[resource] = requested.get(resource, 0) + amount
            node.pod_count += 1
            self._rebucket(node)

    def _unplace(self, pod: PodInfo) -> str:
        node_name = self._placed.pop(pod.uid, "")
        if not node_name:
            return ""
        self._placed_priorities[pod.priority] -= 1
        if not self._placed_priorities[pod.priority]:
            del self._placed_priorities[pod.priority]
        self._placed_index.remove(pod, node_name)
        on_node = self._pods_on_node.get(node_name)
        if on_node is not None:
            on_node.discard(pod.uid)
            if not on_node and node_name not in self._nodes:
                del self._pods_on_node[node_name]
        node = self._nodes.get(node_name)
        if node is not None:
            requested = node.requested
            for resource, amount in pod.requests.items():
                requested[resource] = requested.get(resource, 0) - amount
            node.pod_count -= 1
            self._rebucket(node)
        return node_name

    def upsert_pod(self, pod: PodInfo) -> None:
        old = self._pods.get(pod.uid)
        was_member = False
        if old is not None:
            freed = self._unplace(old)
            was_member = self._leave_group(old)
        else:
            freed = ""
            stale_uid = self._uid_by_key.get(pod.key)
            if stale_uid is not None and stale_uid != pod.uid:
                self.delete_pod(stale_uid)  # same name, new pod: the old one is gone
        if pod.node_name and pod.uid in self._assumed:
            del self._assumed[pod.uid]  # the binding is confirmed by the API
        self._pods[pod.uid] = pod
        self._uid_by_key[pod.key] = pod.uid
        if pod.nominated_node_name and not pod.node_name and not pod.deleting and not pod.terminal:
            self._nominated[pod.uid] = pod.nominated_node_name
        else:
            self._nominated.pop(pod.uid, None)
        if pod.deleting or pod.preempted_by is not None:
            self._leaving[pod.uid] = None
        else:
            self._leaving.pop(pod.uid, None)
        self._place(pod)
        placed_on = self._placed.get(pod.uid)
        if freed and placed_on != freed:
            self._emit(ClusterEvent.ASSIGNED_POD_REMOVED)
        if placed_on and placed_on != freed:
            self._emit(ClusterEvent.ASSIGNED_POD_ADDED)  # a pod affinity may be satisfied now
        self._track_succeeded(old, pod)
        if old is not None and was_member and (not self._is_member(pod) or old.group_key != pod.group_key):
            self._emit(ClusterEvent.MEMBER_REMOVED, old.group_key)  # finished, or moved to another group
        if not self._is_member(pod):
            return
        self._join_group(pod)
        if pod.node_name or pod.deleting or pod.uid in self._assumed:
            return
        if old is None or not self._is_member(old) or old.group_key != pod.group_key:
            self._emit(ClusterEvent.MEMBER_ADDED, pod.group_key)
        elif any(getattr(old, f) != getattr(pod, f) for f in _SCHEDULING_FIELDS):
            self._emit(ClusterEvent.MEMBER_CHANGED, pod.group_key)

    def delete_pod(self, uid: str) -> PodInfo | None:
        pod = self._pods.pop(uid, None)
        if pod is None:
            return None
        if self._uid_by_key.get(pod.key) == uid:
            del self._uid_by_key[pod.key]
        was_member = self._leave_group(pod)
        self._track_succeeded(pod, None)
        self._assumed.pop(uid, None)
        self._nominated.pop(uid, None)
        self._leaving.pop(uid, None)
        freed = self._unplace(pod)
        if freed:
            self._emit(ClusterEvent.ASSIGNED_POD_REMOVED)
        if was_member:
            self._emit(ClusterEvent.MEMBER_REMOVED, pod.group_key)
        return pod

    def delete_pod_by_name(self, namespace: str, name: str) -> PodInfo | None:
        uid = self._uid_by_key.get(f"{namespace}/{name}")
        return self.delete_pod(uid) if uid is not None else None

    def _is_scheduled(self, pod: PodInfo) -> bool:
        return not pod.deleting and bool(pod.node_name or pod.uid in self._assumed)

    def _track_succeeded(self, old: PodInfo | None, pod: PodInfo | None) -> None:
        """Count a group's succeeded pods (ours): they count toward minCount as satisfied members."""
        if old is not None and old.phase == "Succeeded" and old.in_pod_group:
            group = self._groups.get(old.group_key)
            if group is not None:
                group.succeeded.discard(old.uid)
                group.note_counts()
                if not group.members and not group.succeeded and group.info is None:
                    del self._groups[old.group_key]
        if (
            pod is not None
            and pod.phase == "Succeeded"
            and pod.in_pod_group
            and pod.scheduler_name == self.scheduler_name
        ):
            group = self._groups.setdefault(pod.group_key, _Group())
            group.succeeded.add(pod.uid)
            group.note_counts()

    def _join_group(self, pod: PodInfo) -> None:
        group = self._groups.setdefault(pod.group_key, _Group())
        group.members[pod.uid] = pod
        if not pod.deleting:
            group.live += 1
            group.scheduled += self._is_scheduled(pod)
            group.bound += bool(pod.node_name)
        if pod.priority > group.priority:
            group.priority = pod.priority
        group.note_counts()

    def _leave_group(self, pod: PodInfo) -> bool:
        """Remove a member, with ``_assumed`` as it was when the counts last included the pod."""
        group = self._groups.get(pod.group_key)
        if group is None or group.members.pop(pod.uid, None) is None:
            return False
        if not pod.deleting:
            group.live -= 1
            group.scheduled -= self._is_scheduled(pod)
            group.bound -= bool(pod.node_name)
        if pod.priority >= group.priority:
            group.priority_stale = True
        group.note_counts()
        if not group.members and not group.succeeded and group.info is None:
            del self._groups[pod.group_key]
        return True

    def _set_assumed(self, pod: PodInfo, node_name: str) -> None:
        """Assume (node_name) or forget ("") a pod, keeping its group's scheduled count."""
        group = self._groups.get(pod.group_key)
        member = group is not None and pod.uid in group.members
        if member:
            group.scheduled -= self._is_scheduled(pod)  # type: ignore[union-attr]
        if node_name:
            self._assumed[pod.uid] = node_name
        else:
            self._assumed.pop(pod.uid, None)
        if member:
            group.scheduled += self._is_scheduled(pod)  # type: ignore[union-attr]
            group.note_counts()  # type: ignore[union-attr]

    def get_pod(self, uid: str) -> PodInfo | None:
        return self._pods.get(uid)

    def get_pod_by_name(self, namespace: str, name: str) -> PodInfo | None:
        uid = self._uid_by_key.get(f"{namespace}/{name}")
        return self._pods.get(uid) if uid is not None else None

    @property
    def pods(self) -> Mapping[str, PodInfo]:
        return self._pods

    @property
    def placed_pods(self) -> PlacedPodIndex:
        """Indexes of the pods counted on nodes (bound or assumed) for inter-pod placement rules."""
        return self._placed_index

    def pods_on_node(self, name: str) -> list[PodInfo]:
        """The pods counted on the node (bound or assumed, not finished)."""
        return [self._pods[uid] for uid in self._pods_on_node.get(name, ())]

    # ----------------------------------------------------------------- namespaces

    def upsert_namespace(self, name: str, labels: Mapping[str, str]) -> None:
        self._namespace_labels[name] = labels

    def delete_namespace(self, name: str) -> None:
        self._namespace_labels.pop(name, None)

    def namespace_labels(self, name: str) -> Mapping[str, str] | None:
        """A namespace's labels (None: not seen), for affinity terms' namespaceSelector."""
        return self._namespace_labels.get(name)

    @property
    def namespaces(self) -> Mapping[str, Mapping[str, str]]:
        return self._namespace_labels

    # ----------------------------------------------------------------- preemption

    def nominated(self) -> Iterator[tuple[PodInfo, str]]:
        """Unbound pods holding capacity a preemption freed for them, with their nominated node."""
        for uid, node_name in self._nominated.items():
            yield self._pods[uid], node_name

    def lowest_placed_priority(self) -> int | None:
        """The lowest priority of the pods counted on nodes (None when there are none)."""
        return min(self._placed_priorities, default=None)

    def leaving_pods(self) -> list[PodInfo]:
        """Pods being deleted or marked as preemption victims, in first-seen order."""
        return [self._pods[uid] for uid in self._leaving]

    @contextmanager
    def pods_held(self, holds: Iterable[tuple[PodInfo, str]]) -> Iterator[None]:
        """Count unbound (nominated) pods on the given nodes for the duration of the block."""
        held = {pod.uid: (self._pods[pod.uid], node) for pod, node in holds if pod.uid not in self._placed}
        held_pods = list(held.values())
        for pod, node_name in held_pods:
            self._place_on(pod, node_name)
        try:
            yield
        finally:
            for pod, _ in held_pods:
                self._unplace(pod)

    @contextmanager
    def pods_removed(self, pods: Iterable[PodInfo]) -> Iterator[None]:
        """Leave the given placed pods out of their nodes' usage for the block (a preemption's trial).
        Nothing is reported to the listeners; the group counts are left as they are."""
        removed = [self._pods[pod.uid] for pod in pods if pod.uid in self._placed]
        for pod in removed:
            self._unplace(pod)
        try:
            yield
        finally:
            for pod in removed:
                self._place(pod)

    def upsert_budget(self, budget: DisruptionBudget) -> None:
        self._budgets[(budget.namespace, budget.name)] = budget

    def delete_budget(self, namespace: str, name: str) -> None:
        self._budgets.pop((namespace, name), None)

    @property
    def budgets(self) -> Iterable[DisruptionBudget]:
        return self._budgets.values()

    # ----------------------------------------------------------------- assume / forget

    def assume(self, pod: PodInfo, node_name: str) -> None:
        """Count ``pod`` on ``node_name`` until the API shows it bound there, or ``forget``."""
        current = self._pods.get(pod.uid)
        if current is None:
            raise KeyError(f"pod {pod.key} is not in the cache")
        if current.node_name:
            raise ValueError(f"pod {pod.key} is already bound to {current.node_name}")
        self._unplace(current)
        self._set_assumed(current, node_name)
        self._place(current)

    def forget(self, uid: str, report_freed: bool = False) -> None:
        """Drop an assumption (a failed cycle or binding); a pod the API shows bound stays counted.

        ``report_freed``: the capacity was really held (a binding cycle gave up), so tell the
        listeners it is free again. A failed group cycle only undoes its own tentative state."""
        pod = self._pods.get(uid)
        if uid not in self._assumed:
            return
        if pod is None:
            del self._assumed[uid]
            return
        self._set_assumed(pod, "")
        freed = self._unplace(pod)
        self._place(pod)
        if report_freed and freed and uid not in self._placed:
            self._emit(ClusterEvent.ASSIGNED_POD_REMOVED)

    def is_assumed(self, uid: str) -> bool:
        return uid in self._assumed

    def assumed_node(self, uid: str) -> str:
        return self._assumed.get(uid, "")

    # ----------------------------------------------------------------- nodes

    @property
    def node_generation(self) -> int:
        """Changes whenever a node is added or deleted or a node's labels change (not with what is
        placed on it): a grouping of the nodes by their labels holds until it changes."""
        return self._node_generation

    def watch_node_usage(self) -> set[str]:
        """A set to which the cache adds the name of every node whose usage or capacity changes (its
        requests, pod count or allocatable); the watcher empties it as it reads it."""
        changed: set[str] = set()
        self._usage_watchers.append(changed)
        return changed

    def upsert_node(self, node: NodeInfo) -> None:
        old = self._nodes.get(node.name)
        if old is None or old.labels != node.labels:
            self._node_generation += 1
        if old is not None:
            self._unindex_labels(old)
            self._count_images(old, -1)
        self._count_images(node, 1)
        node.requested = {}
        node.pod_count = 0
        self._nodes[node.name] = node
        for uid in self._pods_on_node.get(node.name, ()):
            pod = self._pods[uid]
            for resource, amount in pod.requests.items():
                node.requested[resource] = node.requested.get(resource, 0) + amount
            node.pod_count += 1
        self._pods_on_node.setdefault(node.name, set())
        for key, value in node.labels.items():
            self._labels.setdefault(key, {}).setdefault(value, set()).add(node.name)
        self._rebucket(node)
        if old is None:
            self._emit(ClusterEvent.NODE_ADDED)
        elif _node_change_can_help(old, node):
            self._emit(ClusterEvent.NODE_CHANGED)

    def delete_node(self, name: str) -> None:
        node = self._nodes.pop(name, None)
        if node is None:
            return
        self._node_generation += 1
        self._unindex_labels(node)
        self._count_images(node, -1)
        self._unbucket(name)
        self._forget_free(name)
        if not self._pods_on_node.get(name):
            self._pods_on_node.pop(name, None)

    def _count_images(self, node: NodeInfo, delta: int) -> None:
        for image in node.images:
            count = self._image_nodes.get(image, 0) + delta
            if count > 0:
                self._image_nodes[image] = count
            else:
                self._image_nodes.pop(image, None)

    def image_node_count(self, image: str) -> int:
        """How many nodes report the image in status.images (ImageLocality's spread)."""
        return self._image_nodes.get(image, 0)

    @property
    def any_node_images(self) -> bool:
        return bool(self._image_nodes)

    def _unindex_labels(self, node: NodeInfo) -> None:
        for key, value in node.labels.items():
            names = self._labels[key][value]
            names.discard(node.name)
            if not names:
                del self._labels[key][value]
                if not self._labels[key]:
                    del self._labels[key]

    def _rebucket(self, node: NodeInfo) -> None:
        """Refresh the node's place in the free-cpu indexes and its domain's free-cpu total."""
        for changed in self._usage_watchers:
            changed.add(node.name)
        domain = node.labels.get(self.topology_key)
        free = node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)
        previous = self._node_free.get(node.name)
        if previous is not None and previous[0] is not None:
            self._domain_free[previous[0]] -= previous[1]
            if previous[0] != domain and not self.nodes_with_label(self.topology_key, previous[0]):
                del self._domain_free[previous[0]]  # the node was the domain's last
        if domain is not None:
            self._domain_free[domain] = self._domain_free.get(domain, 0) + free
        self._node_free[node.name] = (domain, free)
        place = (domain, free.bit_length() if free > 0 else 0)
        if self._node_bucket.get(node.name) == place:
            return
        self._unbucket(node.name)
        bucket = place[1]
        self._cpu_buckets.setdefault(bucket, {})[node.name] = None
        self._bucket_entry[node.name] = next(self._bucket_entries)
        if domain is not None:
            self._domain_buckets.setdefault(domain, {}).setdefault(bucket, {})[node.name] = None
        self._node_bucket[node.name] = place

    def _unbucket(self, name: str) -> None:
        place = self._node_bucket.pop(name, None)
        if place is None:
            return
        del self._bucket_entry[name]
        domain, bucket = place
        del self._cpu_buckets[bucket][name]
        if domain is not None:
            del self._domain_buckets[domain][bucket][name]

    def _forget_free(self, name: str) -> None:
        previous = self._node_free.pop(name, None)
        if previous is not None and previous[0] is not None:
            self._domain_free[previous[0]] -= previous[1]
            if not self.nodes_with_label(self.topology_key, previous[0]):
                del self._domain_free[previous[0]]

    def domain_free_cpu(self) -> Mapping[str, int]:
        """Free cpu (millicores) per value of the ``topology_key`` label, summed over its nodes."""
        return self._domain_free

    @property
    def nodes(self) -> Mapping[str, NodeInfo]:
        return self._nodes

    def nodes_with_label(self, key: str, value: str) -> set[str]:
        return self._labels.get(key, {}).get(value, set())

    def nodes_by_free_cpu(
        self, at_least: int, most_free_first: bool, domain: str | None = None
    ) -> Iterator[str]:
        """Node names whose free cpu may be >= ``at_least`` millicores, by power-of-two bucket:
        most free first (spreading) or least free first (bin-packing); within a bucket, in the order
        nodes entered it. Nodes in the lowest bucket returned may still have too little.
        ``domain``: only nodes whose ``topology_key`` label has this value. Do not change the cache
        while iterating."""
        buckets = self._cpu_buckets if domain is None else self._domain_buckets.get(domain, {})
        lowest = at_least.bit_length() if at_least > 0 else 0
        for bucket in sorted((b for b in buckets if b >= lowest), reverse=most_free_first):
            yield from buckets[bucket]

    def order_by_free_cpu(self, names: Iterable[str], at_least: int, most_free_first: bool) -> list[str]:
        """Those of ``names`` that ``nodes_by_free_cpu(at_least, most_free_first)`` yields, in its order,
        without walking every node: for a few nodes of a large cluster."""
        lowest = at_least.bit_length() if at_least > 0 else 0
        sign = -1 if most_free_first else 1
        buckets, entries = self._node_bucket, self._bucket_entry
        kept = [name for name in names if name in buckets and buckets[name][1] >= lowest]
        return sorted(kept, key=lambda name: (sign * buckets[name][1], entries[name]))

    # ----------------------------------------------------------------- PodGroups

    def upsert_podgroup(self, podgroup: PodGroup | PodGroupInfo) -> None:
        info = podgroup_info(podgroup) if isinstance(podgroup, PodGroup) else podgroup
        group = self._groups.setdefault(info.key, _Group())
        old = group.info
        group.info = info
        group.deleted = False
        group.note_counts()
        if old is None:
            self._emit(ClusterEvent.GROUP_ADDED, info.key)
        elif info.min_count < old.min_count or (old.is_gang and not info.is_gang):
            self._emit(ClusterEvent.GROUP_MIN_COUNT_LOWERED, info.key)
        elif info != old:
            self._emit(ClusterEvent.GROUP_UPDATED, info.key)

    def delete_podgroup(self, namespace: str, name: str, upstream: bool = False, dialect: str = "") -> None:
        key = GroupKey(namespace, name, upstream=upstream, dialect=dialect)
        group = self._groups.get(key)
        if group is None or group.info is None:
            return
        group.info = None
        group.deleted = True
        if not group.members and not group.succeeded:
            del self._groups[key]
        self._emit(ClusterEvent.GROUP_DELETED, key)

    def podgroup(self, key: GroupKey) -> PodGroupInfo | None:
        group = self._groups.get(key)
        return group.info if group is not None else None

    def podgroups(self) -> list[PodGroupInfo]:
        """Every PodGroup (either shape) the cache knows."""
        return [group.info for group in self._groups.values() if group.info is not None]

    # ----------------------------------------------------------------- CompositePodGroups

    def upsert_composite(self, info: CompositeInfo) -> None:
        """A CompositePodGroup added or changed: the PodGroups under it may be placed differently now."""
        old = self._composites.get(info.key)
        self._composites[info.key] = info
        if old != info:
            event = ClusterEvent.GROUP_ADDED if old is None else ClusterEvent.GROUP_UPDATED
            for leaf in self.composite_leaves(info.namespace, info.name):
                self._emit(event, leaf.key)

    def delete_composite(self, namespace: str, name: str) -> None:
        if self._composites.pop((namespace, name), None) is None:
            return
        for leaf in self.composite_leaves(namespace, name):
            self._emit(ClusterEvent.GROUP_UPDATED, leaf.key)

    def composite(self, namespace: str, name: str) -> CompositeInfo | None:
        return self._composites.get((namespace, name))

    def composites(self) -> list[CompositeInfo]:
        return list(self._composites.values())

    def composite_children(self, namespace: str, name: str) -> tuple[list[PodGroupInfo], list[CompositeInfo]]:
        """The PodGroups (either shape) and the CompositePodGroups naming this one as their parent,
        each sorted by name."""
        groups = sorted(
            (
                g.info
                for g in self._groups.values()
                if g.info is not None and g.info.parent == name and g.info.namespace == namespace
            ),
            key=lambda info: (info.name, info.upstream),
        )
        composites = sorted(
            (c for c in self._composites.values() if c.parent == name and c.namespace == namespace),
            key=lambda c: c.name,
        )
        return groups, composites

    def composite_leaves(self, namespace: str, name: str) -> list[PodGroupInfo]:
        """Every PodGroup in the composite's subtree (a cycle in the parent links ends the walk)."""
        leaves: list[PodGroupInfo] = []
        seen: set[str] = set()
        todo = [name]
        while todo:
            current = todo.pop()
            if current in seen:
                continue
            seen.add(current)
            groups, composites = self.composite_children(namespace, current)
            leaves += groups
            todo += [c.name for c in composites]
        return leaves

    def bound_count(self, key: GroupKey) -> int:
        """Members the API shows bound, not being deleted."""
        group = self._groups.get(key)
        return group.bound if group is not None else 0

    def reached_min_count(self, key: GroupKey) -> bool:
        """Whether the gang had minCount members placed together and a member of it survives (a gang
        still forming, or one with nothing left of it, has not: it cannot be stale)."""
        group = self._groups.get(key)
        return group is not None and (group.placed_once or group.satisfied_at > 0)

    def podgroup_deleted(self, key: GroupKey) -> bool:
        """Whether the group's PodGroup was seen and then deleted (not merely not created yet)."""
        group = self._groups.get(key)
        return group is not None and group.deleted

    def members(self, key: GroupKey) -> list[PodInfo]:
        """The group's pods that are ours and not finished (deleting ones included)."""
        group = self._groups.get(key)
        return list(group.members.values()) if group is not None else []

    def unscheduled_members(self, key: GroupKey) -> list[PodInfo]:
        """Members the scheduler should place: not bound, not assumed, not being deleted."""
        group = self._groups.get(key)
        if group is None:
            return []
        assumed = self._assumed
        return [
            p for p in group.members.values() if not p.node_name and not p.deleting and p.uid not in assumed
        ]

    def scheduled_count(self, key: GroupKey) -> int:
        """S of PlacementFeasible: members bound or assumed, not being deleted."""
        group = self._groups.get(key)
        return group.scheduled if group is not None else 0

    def succeeded_count(self, key: GroupKey) -> int:
        """The group's pods that succeeded (and still exist): satisfied members, not to be placed."""
        group = self._groups.get(key)
        return len(group.succeeded) if group is not None else 0

    def satisfying_count(self, key: GroupKey) -> int:
        """What counts toward minCount: members bound or assumed, and those that succeeded (a group
        whose members are finishing is not short of them: kubernetes #142330)."""
        group = self._groups.get(key)
        return group.scheduled + len(group.succeeded) if group is not None else 0

    def once_satisfied(self, key: GroupKey) -> bool:
        """Whether a gang's later members are placed one by one as they fit, with no gang barrier: its
        policy is OnceSatisfied, it has reached its current minCount, and a member of it survives
        (bound, assumed or succeeded: a gang with none left starts anew, all-or-nothing)."""
        group = self._groups.get(key)
        if group is None or group.info is None or not group.info.is_gang:
            return False
        if group.info.satisfaction_policy != ONCE_SATISFIED:
            return False
        return group.satisfied_at >= group.info.min_count and group.scheduled + len(group.succeeded) > 0

    def live_member_count(self, key: GroupKey) -> int:
        """Members not being deleted (bound, assumed or waiting)."""
        group = self._groups.get(key)
        return group.live if group is not None else 0

    def group_priority(self, key: GroupKey) -> int:
        """The PodGroup's own priority if it has one, else the highest priority among its members."""
        group = self._groups.get(key)
        if group is None:
            return 0
        if group.info is not None and group.info.priority is not None:
            return group.info.priority
        if group.priority_stale:
            group.priority = max((p.priority for p in group.members.values()), default=0)
            group.priority_stale = False
        return group.priority

    # ----------------------------------------------------------------- DRA

    def on_claims_changed(self) -> None:
        """Called by the DRA side when a ResourceClaim, ResourceSlice or DeviceClass changed in a way
        that can make devices available: requeues the groups that failed on claims."""
        self._emit(ClusterEvent.CLAIMS_CHANGED)

    def on_volumes_changed(self) -> None:
        """Called by the volume store when a PersistentVolume(Claim), StorageClass or CSINode
        changed: requeues the groups that failed on volumes."""
        self._emit(ClusterEvent.VOLUMES_CHANGED)


def _node_change_can_help(old: NodeInfo, new: NodeInfo) -> bool:
    if old.labels != new.labels or old.taints != new.taints:
        return True
    if old.unschedulable and not new.unschedulable:
        return True
    return any(amount > old.allocatable.get(resource, 0) for resource, amount in new.allocatable.items())
