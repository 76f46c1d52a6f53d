"""NodeName (spec.nodeName), NodeUnschedulable (spec.unschedulable) and TaintToleration (filter on
NoSchedule / NoExecute taints; score: fewer untolerated PreferNoSchedule taints is better)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugins.node_affinity import normalize_to_best

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"
_PREFER_KEY = "TaintToleration/prefer"
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")


def tolerates(tolerations: tuple[Mapping[str, Any], ...], taint: Mapping[str, Any]) -> bool:
    """v1.Toleration.ToleratesTaint: key (empty with Exists: any key), effect (empty: any), and
    operator Exists or Equal (the default) with the same value."""
    for toleration in tolerations:
        effect = toleration.get("effect") or ""
        if effect and effect != taint.get("effect"):
            continue
        key = toleration.get("key") or ""
        operator = toleration.get("operator") or "Equal"
        if key and key != taint.get("key"):
            continue
        if operator == "Exists":
            return True
        if operator == "Equal" and key and (toleration.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


class NodeName:
    """A pod that names its node (spec.nodeName) fits only there."""

    name: ClassVar[str] = "NodeName"

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        return SUCCESS if pod.node_name else SKIP

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if pod.node_name and pod.node_name != node.name:
            return Status.unresolvable(
                self.name,
                "NodeNameMismatch",
                f"pod requires node {pod.node_name}",
                summary="node(s) didn't match the requested node name",
            )
        return SUCCESS


class NodeUnschedulable:
    """Cordoned nodes (spec.unschedulable) take only pods that tolerate the unschedulable taint."""

    name: ClassVar[str] = "NodeUnschedulable"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        if not node.unschedulable:
            return SUCCESS
        if tolerates(pod.tolerations, {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
            return SUCCESS
        return Status.unresolvable(
            self.name,
            "NodeUnschedulable",
            "node is cordoned (spec.unschedulable)",
            summary="node(s) were unschedulable",
        )


class TaintToleration:
    """The pod must tolerate every NoSchedule and NoExecute taint of the node, and prefers nodes
    with fewer PreferNoSchedule taints it does not tolerate."""

    name: ClassVar[str] = "TaintToleration"

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        for taint in node.taints:
            if taint.get("effect") in _BLOCKING_EFFECTS and not tolerates(pod.tolerations, taint):
                value = taint.get("value")
                shown = f"{taint.get('key')}={value}" if value else str(taint.get("key"))
                return Status.unresolvable(
                    self.name,
                    "Taint",
                    f"node had untolerated taint {{{shown}:{taint.get('effect')}}}",
                    summary=f"node(s) had untolerated taint {{{taint.get('key')}: {value or ''}}}",
                )
        return SUCCESS

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        if not any(t.get("effect") == "PreferNoSchedule" for n in nodes for t in n.taints):
            return SKIP
        state.write(
            _PREFER_KEY,
            tuple(
                t for t in pod.tolerations if (t.get("effect") or "PreferNoSchedule") == "PreferNoSchedule"
            ),
        )
        return SUCCESS

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        tolerations = state.read(_PREFER_KEY)
        return sum(
            1 for t in node.taints if t.get("effect") == "PreferNoSchedule" and not tolerates(tolerations, t)
        )

    def normalize_scores(self, state: CycleState, pod: PodInfo, scores: list[int]) -> None:
        normalize_to_best(scores, reverse=True)
