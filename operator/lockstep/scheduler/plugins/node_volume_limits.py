"""NodeVolumeLimits: a node takes at most its CSINode's ``allocatable.count`` volumes per CSI driver,
as kube-scheduler's nodevolumelimits (CSI). The claims of generic ephemeral volumes (``<pod>-<volume>``)
count like named ones, but only a claim the pod controls (VolumeBinding keeps a pod whose claim is
not its own pending). A bound claim counts its volume's handle under the
volume's driver; an unbound claim of a ``WaitForFirstConsumer`` class counts under the class's
provisioner. Volumes already used on the node (by bound or assumed pods, members of the same group
cycle included) count once."""

from __future__ import annotations

from typing import ClassVar

from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugins.volume_binding import claim_is_for_pod
from lockstep.state.cluster import ClusterCache
from lockstep.state.volumes import VolumeStore

MAX_VOLUME_COUNT = "node(s) exceed max volume count"
_STATE_KEY = "NodeVolumeLimits"

Handles = dict[str, set[str]]  # driver -> volume handles


class NodeVolumeLimits:
    name: ClassVar[str] = "NodeVolumeLimits"

    def __init__(self, cache: ClusterCache, store: VolumeStore) -> None:
        self.cache = cache
        self.store = store

    def _handles(self, pod: PodInfo) -> Handles:
        handles: Handles = {}
        for name in pod.pvc_names:
            key = f"{pod.namespace}/{name}"
            claim = self.store.claims.get(key)
            if claim is None or (name in pod.ephemeral_claims and not claim_is_for_pod(claim, pod)):
                continue
            volume = self.store.volumes.get(claim.volume_name) if claim.volume_name else None
            if volume is not None:
                if volume.csi_driver:
                    handles.setdefault(volume.csi_driver, set()).add(volume.volume_handle)
                continue
            storage_class = self.store.classes.get(claim.storage_class or "")
            if storage_class is not None:
                handles.setdefault(storage_class.provisioner, set()).add(key)
        return handles

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        if not pod.pvc_names or not self.store.csinodes:
            return SKIP
        handles = self._handles(pod)
        if not handles:
            return SKIP
        state.write(f"{_STATE_KEY}/{pod.uid}", handles)
        return SUCCESS

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        wanted: Handles | None = state.read(f"{_STATE_KEY}/{pod.uid}")
        csinode = self.store.csinodes.get(node.name)
        if not wanted or csinode is None or not any(driver in csinode.limits for driver in wanted):
            return SUCCESS
        used: Handles = {}
        for other in self.cache.pods_on_node(node.name):
            if other.pvc_names and other.uid != pod.uid:
                for driver, handles in self._handles(other).items():
                    used.setdefault(driver, set()).update(handles)
        for driver, handles in wanted.items():
            limit = csinode.limits.get(driver)
            if limit is not None and len(handles | used.get(driver, set())) > limit:
                return Status.unschedulable(
                    self.name, "MaxVolumeCount", MAX_VOLUME_COUNT, summary=MAX_VOLUME_COUNT
                )
        return SUCCESS
