"""VolumeZone: a bound volume labelled with a zone or region (``topology.kubernetes.io/zone``, ...)
admits only nodes with one of those values (``a__b`` lists several), as kube-scheduler's volumezone.
Unbound ``WaitForFirstConsumer`` claims are VolumeBinding's business."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockstep.api.volume import TOPOLOGY_LABELS
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugins.volume_binding import fully_bound
from lockstep.state.volumes import VolumeStore

NO_VOLUME_ZONE = "node(s) had no available volume zone"
_STATE_KEY = "VolumeZone"


@dataclass(frozen=True, slots=True)
class _Constraints:
    labels: tuple[tuple[str, frozenset[str]], ...]


class VolumeZone:
    name: ClassVar[str] = "VolumeZone"

    def __init__(self, store: VolumeStore) -> None:
        self.store = store

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        constraints: list[tuple[str, frozenset[str]]] = []
        for name in pod.volume_claims:
            claim = self.store.claims.get(f"{pod.namespace}/{name}")
            if claim is None or not fully_bound(claim):
                continue
            volume = self.store.volumes.get(claim.volume_name)
            if volume is None:
                continue
            for key in TOPOLOGY_LABELS:
                value = volume.metadata.labels.get(key)
                if value:
                    constraints.append((key, frozenset(value.split("__"))))
        if not constraints:
            return SKIP
        state.write(f"{_STATE_KEY}/{pod.uid}", _Constraints(tuple(constraints)))
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        constraints = state.read(f"{_STATE_KEY}/{pod.uid}")
        if not isinstance(constraints, _Constraints):
            return SUCCESS
        for key, values in constraints.labels:
            if node.labels.get(key) not in values:
                return Status.unresolvable(self.name, "VolumeZoneConflict", NO_VOLUME_ZONE)
        return SUCCESS
