"""VolumeRestrictions: a ``ReadWriteOncePod`` claim is used by one pod at a time, as kube-scheduler's
volumerestrictions. A pod naming such a claim that another pod uses already (bound, or assumed by an
earlier cycle or an earlier member of the same group cycle) is unresolvable until that pod is gone.
Like upstream's (``readWriteOncePodPVCsForPod``, the node's PVC reference counts) only
``persistentVolumeClaim`` volumes count, not generic ephemeral ones (whose claim only its pod uses)."""

from __future__ import annotations

from typing import ClassVar

from lockstep.api.volume import READ_WRITE_ONCE_POD
from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, PodInfo, Status
from lockstep.state.cluster import ClusterCache
from lockstep.state.volumes import VolumeStore

RWOP_CONFLICT = "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode"


class VolumeRestrictions:
    name: ClassVar[str] = "VolumeRestrictions"

    def __init__(self, cache: ClusterCache, store: VolumeStore) -> None:
        self.cache = cache
        self.store = store

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        exclusive = set()
        for name in pod.volume_claims:
            claim = self.store.claims.get(f"{pod.namespace}/{name}")
            if claim is not None and READ_WRITE_ONCE_POD in claim.access_modes:
                exclusive.add(name)
        if not exclusive:
            return SKIP
        for other in self.cache.pods.values():  # only pods with ReadWriteOncePod claims get here
            if other.uid == pod.uid or other.namespace != pod.namespace or other.terminal:
                continue
            if not (other.node_name or self.cache.is_assumed(other.uid)):
                continue
            if exclusive.intersection(other.volume_claims):
                return Status.unresolvable(
                    self.name, "ReadWriteOncePodConflict", RWOP_CONFLICT, summary=RWOP_CONFLICT
                )
        return SUCCESS
