"""NodePorts, as kube-scheduler's plugin of that name: a pod's host ports (hostIP, protocol,
hostPort) must be free on the node. ``0.0.0.0`` (an unset hostIP) conflicts with every address on
the same protocol and port. Ports in use come from the cache's placed pods, so members of the same
gang placed earlier in the cycle hold theirs."""

from __future__ import annotations

from typing import ClassVar

from lockstep.scheduler.framework import (
    SKIP,
    SUCCESS,
    CycleState,
    NodeInfo,
    PodInfo,
    Status,
    note_rejection,
    rejection_reasons,
)
from lockstep.state.cluster import ClusterCache

REASON = "node(s) didn't have free ports for the requested pod ports"


class NodePorts:
    name: ClassVar[str] = "NodePorts"

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return SUCCESS if pod.placement is not None and pod.placement.host_ports else SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        assert pod.placement is not None
        taken = self.cache.placed_pods.host_port_conflict(node.name, pod.placement.host_ports)
        if taken is None:
            return SUCCESS
        reason = f"{REASON} ({taken.protocol} {taken.ip}:{taken.port} in use)"
        note_rejection(state, self.name, reason)
        return Status.unschedulable(self.name, "HostPortConflict", reason, summary=REASON)

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        return rejection_reasons(state, self.name)
