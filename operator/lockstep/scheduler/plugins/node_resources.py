"""NodeResourcesFit (filter), NodeResourcesScore (least- or most-allocated scoring) and
NodeResourcesBalancedAllocation (prefer nodes whose cpu and memory use stay balanced)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

from lockstep.config import ScoreStrategy
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status

_CAUSES = {
    "cpu": "InsufficientCPU",
    "memory": "InsufficientMemory",
    "ephemeral-storage": "InsufficientEphemeralStorage",
    "pods": "InsufficientPods",
}

# Scoring counts a pod without requests as this much (kube-scheduler's non-zero defaults), so that
# request-less pods still spread.
DEFAULT_CPU_MILLI = 100
DEFAULT_MEMORY_BYTES = 200 * 1024 * 1024


def insufficient_cause(resource: str) -> str:
    return _CAUSES.get(resource) or f"Insufficient[{resource}]"


class NodeResourcesFit:
    """The node must have room for the pod's requests and one more pod. An extended resource the node
    does not advertise is left to DynamicResources when a DeviceClass provides it (DRAExtendedResource):
    ``provided_by_dra`` says which."""

    name: ClassVar[str] = "NodeResourcesFit"

    def __init__(self, provided_by_dra: Callable[[str], bool] | None = None) -> None:
        self.provided_by_dra = provided_by_dra

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        allocatable = node.allocatable
        max_pods = allocatable.get("pods")
        if max_pods is not None and node.pod_count + 1 > max_pods:
            return Status.unschedulable(
                self.name,
                "InsufficientPods",
                f"Too many pods: node has {node.pod_count} of {max_pods}",
                summary="Too many pods",
            )
        requested = node.requested
        for resource, amount in pod.requests.items():
            capacity = allocatable.get(resource, 0)
            free = capacity - requested.get(resource, 0)
            if amount <= free:
                continue
            if capacity <= 0 and self.provided_by_dra is not None and self.provided_by_dra(resource):
                continue
            if amount > capacity:  # even an empty node of this size would not do
                return Status.unresolvable(
                    self.name,
                    insufficient_cause(resource),
                    f"Insufficient {resource}: requested {amount}, node allocatable {capacity}",
                    summary=f"Insufficient {resource}",
                )
            return Status.unschedulable(
                self.name,
                insufficient_cause(resource),
                f"Insufficient {resource}: requested {amount}, free {max(free, 0)}",
                summary=f"Insufficient {resource}",
            )
        return SUCCESS


class NodeResourcesScore:
    """Scores cpu and memory after placing the pod: least-allocated prefers emptier nodes,
    most-allocated prefers fuller ones (bin-packing)."""

    name: ClassVar[str] = "NodeResourcesScore"

    def __init__(self, strategy: ScoreStrategy) -> None:
        self.strategy = strategy
        self._most = strategy is ScoreStrategy.MOST_ALLOCATED

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_nodes(state, pod, (node,))[0]

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        requests = pod.requests
        wanted = (
            ("cpu", requests.get("cpu") or DEFAULT_CPU_MILLI),
            ("memory", requests.get("memory") or DEFAULT_MEMORY_BYTES),
        )
        most = self._most
        scores = []
        for node in nodes:
            allocatable, requested = node.allocatable, node.requested
            total = 0
            for resource, amount in wanted:
                capacity = allocatable.get(resource, 0)
                if capacity <= 0:
                    continue
                used = min(requested.get(resource, 0) + amount, capacity)
                fraction = used * 100 // capacity
                total += fraction if most else 100 - fraction
            scores.append(total // 2)
        return scores


class NodeResourcesBalancedAllocation:
    """kube-scheduler's NodeResourcesBalancedAllocation over cpu and memory: with the pod placed, the
    closer the node's requested fractions of the two, the better (``(1 - |cpu - memory| / 2) * 100``).
    A pod that requests neither is not scored by it."""

    name: ClassVar[str] = "NodeResourcesBalancedAllocation"

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        return SUCCESS if pod.requests.get("cpu") or pod.requests.get("memory") else SKIP

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        return self.score_nodes(state, pod, (node,))[0]

    def score_nodes(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> list[int]:
        cpu_request = pod.requests.get("cpu", 0)
        memory_request = pod.requests.get("memory", 0)
        scores = []
        for node in nodes:
            allocatable, requested = node.allocatable, node.requested
            cpu_capacity = allocatable.get("cpu", 0)
            memory_capacity = allocatable.get("memory", 0)
            if cpu_capacity <= 0 or memory_capacity <= 0:
                scores.append(100)  # one resource: nothing to balance
                continue
            cpu = min((requested.get("cpu", 0) + cpu_request) / cpu_capacity, 1.0)
            memory = min((requested.get("memory", 0) + memory_request) / memory_capacity, 1.0)
            scores.append(int((1 - abs(cpu - memory) / 2) * 100))
        return scores
