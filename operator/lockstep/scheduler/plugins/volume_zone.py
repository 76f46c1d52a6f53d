"""VolumeZone: a volume labelled with a zone or region (``topology.kubernetes.io/zone``, ...) admits
only nodes with one of those values (``a__b`` lists several), as kube-scheduler's volumezone. A node
without any zone or region label is not constrained; a PV's beta label also matches the node's GA
label. Claims not bound yet are VolumeBinding's business, but one without a class, or of a class that
is missing or not ``WaitForFirstConsumer``, cannot get a zone and is rejected here as upstream does.
Like upstream's (``getPersistentVolumeClaimNameFromPod``) it reads only ``persistentVolumeClaim``
volumes, not the claims of generic ephemeral volumes: their volume's node affinity is VolumeBinding's
check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lockstep.api.volume import TOPOLOGY_LABELS
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.state.volumes import VolumeStore

NO_VOLUME_ZONE = "node(s) had no available volume zone"
_STATE_KEY = "VolumeZone"
_GA_LABELS = {
    "failure-domain.beta.kubernetes.io/zone": "topology.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region": "topology.kubernetes.io/region",
}


@dataclass(frozen=True, slots=True)
class _Constraints:
    labels: tuple[tuple[str, frozenset[str]], ...]


class VolumeZone:
    name: ClassVar[str] = "VolumeZone"

    def __init__(self, store: VolumeStore) -> None:
        self.store = store

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.volume_claims:
            return SKIP
        constraints: list[tuple[str, frozenset[str]]] = []
        for name in pod.volume_claims:
            claim = self.store.claims.get(f"{pod.namespace}/{name}")
            if claim is None:
                continue  # VolumeBinding says it is missing
            if not claim.volume_name:
                problem = self._unbound_problem(claim.storage_class)
                if problem:
                    return Status.unresolvable(self.name, "VolumeZoneConflict", problem)
                continue
            volume = self.store.volumes.get(claim.volume_name)
            if volume is None:
                continue  # VolumeBinding says its volume is missing
            for key in TOPOLOGY_LABELS:
                value = volume.metadata.labels.get(key)
                if value:
                    constraints.append((key, frozenset(value.split("__"))))
        if not constraints:
            return SKIP
        state.write(f"{_STATE_KEY}/{pod.uid}", _Constraints(tuple(constraints)))
        return SUCCESS

    def _unbound_problem(self, class_name: str | None) -> str:
        if not class_name:
            return "PersistentVolumeClaim had no pv name and storageClass name"
        storage_class = self.store.classes.get(class_name)
        if storage_class is None:
            return f'storageclasses.storage.k8s.io "{class_name}" not found'
        if not storage_class.wait_for_first_consumer:
            return f'VolumeBindingMode not set for StorageClass "{class_name}"'
        return ""

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        constraints = state.read(f"{_STATE_KEY}/{pod.uid}")
        if not isinstance(constraints, _Constraints):
            return SUCCESS
        labels = node.labels
        if not any(key in labels for key in TOPOLOGY_LABELS):
            return SUCCESS
        for key, values in constraints.labels:
            value = labels.get(key)
            if value is None:
                value = labels.get(_GA_LABELS.get(key, key))
            if value not in values:
                return Status.unresolvable(
                    self.name, "VolumeZoneConflict", NO_VOLUME_ZONE, summary=NO_VOLUME_ZONE
                )
        return SUCCESS
