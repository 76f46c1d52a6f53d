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
                self.name, "InsufficientPods", f"Too many pods: node has {node.pod_count} of {max_pods}"
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
                )
            return Status.unschedulable(
                self.name,
                insufficient_cause(resource),
                f"Insufficient {resource}: requested {amount}, free {max(free, 0)}",
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
        requests = pod.requests
        total = 0
        for resource, default in (("cpu", DEFAULT_CPU_MILLI), ("memory", DEFAULT_MEMORY_BYTES)):
            capacity = node.allocatable.get(resource, 0)
            if capacity <= 0:
                continue
            used = node.requested.get(resource, 0) + (requests.get(resource) or default)
            used = min(used, capacity)
            fraction = used * 100 // capacity
            total += fraction if self._most else 100 - fraction
        return total // 2


class NodeResourcesBalancedAllocation:
    """kube-scheduler's NodeResourcesBalancedAllocation over cpu and memory: with the pod placed, the
    closer the node's requested fractions of the two, the better (``(1 - |cpu - memory| / 2) * 100``).
    A pod that requests neither is not scored by it."""

    name: ClassVar[str] = "NodeResourcesBalancedAllocation"

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        return SUCCESS if pod.requests.get("cpu") or pod.requests.get("memory") else SKIP

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        allocatable, requested, requests = node.allocatable, node.requested, pod.requests
        cpu_capacity = allocatable.get("cpu", 0)
        memory_capacity = allocatable.get("memory", 0)
        if cpu_capacity <= 0 or memory_capacity <= 0:
            return 100  # one resource: nothing to balance
        cpu = min((requested.get("cpu", 0) + requests.get("cpu", 0)) / cpu_capacity, 1.0)
        memory = min((requested.get("memory", 0) + requests.get("memory", 0)) / memory_capacity, 1.0)
        return int((1 - abs(cpu - memory) / 2) * 100)
