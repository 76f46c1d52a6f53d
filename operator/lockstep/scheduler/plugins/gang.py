"""Gang plugins: GangPermit (hold placed members until minCount are reserved) and GangTopology
(prefer keeping a gang in one topology domain, e.g. one rack, when it fits)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import ClassVar

from lockstep.scheduler.framework import (
    CYCLE_PODS,
    SKIP,
    SUCCESS,
    CycleState,
    GroupKey,
    NodeInfo,
    PodInfo,
    Status,
)
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache

_DOMAINS_KEY = "GangTopology/domains"  # group_data: domain -> members placed there
_DOMAIN_KEY = "GangTopology/domain"  # per pod: the preferred domain when the pod was evaluated
_TARGET_KEY = "GangTopology/target"  # group_data: the domain chosen for a gang with no member placed
_UNSET = object()


class GangPermit:
    """A gang member may bind once at least minCount members are bound, reserved (assumed) or
    succeeded, or at once when its OnceSatisfied gang reached minCount before; until then it waits,
    for at most the PodGroup's scheduleTimeoutSeconds."""

    name: ClassVar[str] = "GangPermit"

    def __init__(self, cache: ClusterCache, waiting: WaitingPods) -> None:
        self.cache = cache
        self.waiting = waiting

    def permit(self, state: CycleState, pod: PodInfo, node_name: str) -> tuple[Status, float]:
        group = state.group
        if group is None or not group.is_gang:
            return SUCCESS, 0.0
        current = self.cache.podgroup(group.key) or group
        reserved = self.cache.satisfying_count(group.key)
        if reserved >= current.min_count or self.cache.once_satisfied(group.key):
            self.waiting.allow_group(group.key)
            return SUCCESS, 0.0
        return (
            Status.wait(self.name, f"{reserved} of minCount {current.min_count} members reserved"),
            current.schedule_timeout_seconds,
        )

    def recheck(self, key: GroupKey) -> None:
        """Re-evaluate the waiting members of a group (its minCount was lowered)."""
        group = self.cache.podgroup(key)
        if group is not None and self.cache.satisfying_count(key) >= group.min_count:
            self.waiting.allow_group(key)


class GangTopology:
    """Scores nodes in the topology domain (value of the node label ``topology_key``) that already
    holds most of the gang's placed members 100, other nodes 0; and offers that domain's nodes to
    be evaluated first. Members placed earlier in the same cycle count (Reserve records them)."""

    name: ClassVar[str] = "GangTopology"

    def __init__(self, cache: ClusterCache, topology_key: str, spread: bool = True) -> None:
        self.cache = cache
        self.topology_key = topology_key
        self.spread = spread  # order the domain's nodes emptiest first (else fullest first)

    def _domains(self, state: CycleState) -> Counter[str]:
        domains: Counter[str] | None = state.group_data.get(_DOMAINS_KEY)
        if domains is None:
            domains = Counter()
            if state.group is not None:
                nodes = self.cache.nodes
                for member in self.cache.members(state.group.key):
                    node_name = member.node_name or self.cache.assumed_node(member.uid)
                    node = nodes.get(node_name) if node_name else None
                    domain = node.labels.get(self.topology_key) if node is not None else None
                    if domain is not None:
                        domains[domain] += 1
            state.group_data[_DOMAINS_KEY] = domains
        return domains

    def _preferred_domain(self, state: CycleState) -> str | None:
        if state.group is None or not state.group.is_gang:
            return None
        domains = self._domains(state)
        if not domains:
            return None
        return max(domains.items(), key=lambda item: (item[1], item[0]))[0]

    def _target_domain(self, state: CycleState) -> str | None:
        """For a gang with no member placed yet: the domain whose free cpu can hold the cycle's
        pods, the one with most free cpu when spreading, least when bin-packing (None: none can)."""
        target = state.group_data.get(_TARGET_KEY, _UNSET)
        if target is _UNSET:
            needed = sum(p.requests.get("cpu", 0) for p in state.group_data.get(CYCLE_PODS, ()))
            fitting = [(free, d) for d, free in self.cache.domain_free_cpu().items() if free >= needed]
            target = None
            if fitting and self.topology_key == self.cache.topology_key:
                target = (max(fitting) if self.spread else min(fitting))[1]
            state.group_data[_TARGET_KEY] = target
        return target

    def preferred_nodes(self, state: CycleState, pod: PodInfo) -> Iterable[str] | None:
        domain = self._preferred_domain(state)
        if domain is None and state.group is not None and state.group.is_gang:
            domain = self._target_domain(state)
        state.write(_DOMAIN_KEY, domain)
        if domain is None:
            return None
        if self.topology_key == self.cache.topology_key:
            return self.cache.nodes_by_free_cpu(pod.requests.get("cpu", 0), self.spread, domain)
        return self.cache.nodes_with_label(self.topology_key, domain)

    def _scored_domain(self, state: CycleState) -> str | None:
        domain = state.read(_DOMAIN_KEY, _UNSET)
        if domain is _UNSET:
            domain = self._preferred_domain(state)
            state.write(_DOMAIN_KEY, domain)
        return domain

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Skipped when every feasible node would get the same score (no preferred domain, or all
        or none of the nodes in it): a score shared by every node cannot change the choice."""
        domain = self._scored_domain(state)
        if domain is None:
            return SKIP
        key = self.topology_key
        inside = sum(1 for node in nodes if node.labels.get(key) == domain)
        return SKIP if inside in (0, len(nodes)) else SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        domain = self._scored_domain(state)
        if domain is None:
            return 0
        return 100 if node.labels.get(self.topology_key) == domain else 0

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if state.group is None or not state.group.is_gang:
            return SUCCESS
        if _DOMAINS_KEY not in state.group_data:
            self._domains(state)  # counted from the cache, where this pod is already assumed
            return SUCCESS
        node = self.cache.nodes.get(node_name)
        domain = node.labels.get(self.topology_key) if node is not None else None
        if domain is not None:
            state.group_data[_DOMAINS_KEY][domain] += 1
        return SUCCESS

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        domains: Counter[str] | None = state.group_data.get(_DOMAINS_KEY)
        node = self.cache.nodes.get(node_name)
        domain = node.labels.get(self.topology_key) if node is not None else None
        if domains is not None and domain is not None and domains[domain] > 0:
            domains[domain] -= 1
