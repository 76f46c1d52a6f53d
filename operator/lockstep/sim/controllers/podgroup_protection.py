"""kube-controller-manager's ``podgroup-protection-controller`` (pkg/controller/podgroupprotection):
the API server puts the finalizer ``scheduling.k8s.io/podgroup-protection`` on every upstream PodGroup
at create; once a PodGroup is being deleted and no active pod (one not Succeeded or Failed; a deleted
pod is gone from the informer, a terminating one still counts) names it in
``spec.schedulingGroup.podGroupName``, this removes the finalizer, so the PodGroup goes away only after
its pods. It works on the PodGroups of the version the server serves (``scheduling.k8s.io/v1alpha2``
in 1.36, ``v1beta1`` in 1.37).

1.37's second half (KEP-6012 "Object ownership and garbage collection"), where the server serves
``v1alpha3`` CompositePodGroups: a CompositePodGroup being deleted keeps the finalizer
``scheduling.k8s.io/compositepodgroup-protection`` while a PodGroup or CompositePodGroup names it in
``spec.parentCompositePodGroupName``; then this removes it, so a hierarchy goes from its leaves up."""

from __future__ import annotations

from lockstep.sim.registry.scheduling import PODGROUP_PROTECTION_FINALIZER
from lockstep.sim.registry.scheduling.v1beta1 import COMPOSITE_PODGROUP_PROTECTION_FINALIZER, GROUP
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key

COMPOSITES_PATH = f"/apis/{GROUP}/v1alpha3"


def pod_groups_path(group_version: str, namespace: str | None = None) -> str:
    """The PodGroups' collection of a group-version (``scheduling.k8s.io/v1beta1``), of all namespaces
    or of one."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group_version}{where}/podgroups"


def pod_group_key(pod: JsonObject) -> str | None:
    """``namespace/name`` of the upstream PodGroup the pod joins, if any."""
    name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return f"{pod['metadata'].get('namespace')}/{name}" if name else None


def parent_key(group: JsonObject) -> str | None:
    """``namespace/name`` of the CompositePodGroup a PodGroup or CompositePodGroup names as its parent."""
    name = (group.get("spec") or {}).get("parentCompositePodGroupName")
    return f"{group['metadata'].get('namespace')}/{name}" if name else None


def holds_pod_group(pod: JsonObject) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class PodGroupProtectionController:
    def __init__(
        self,
        http: KubeHttp,
        pods: Informer,
        pod_groups: Informer,
        group_version: str,
        composites: Informer | None = None,
    ) -> None:
        self.http = http
        self.pod_groups = pod_groups
        self.group_version = group_version
        self.composites = composites
        # PodGroup key -> keys of the pods naming it
        self._members: dict[str, set[str]] = {}
        # CompositePodGroup key -> ("PodGroup" | "CompositePodGroup", key) of the groups naming it
        self._children: dict[str, set[tuple[str, str]]] = {}
        self._queue = WorkQueue(self._sync, workers=2, name="podgroup-protection")
        self._composite_queue = WorkQueue(
            self._sync_composite, workers=1, name="compositepodgroup-protection"
        )
        pods.add_handler(self._on_pod_event)
        pod_groups.add_handler(self._on_pod_group_event)
        if composites is not None:
            composites.add_handler(self._on_composite_event)

    def start(self) -> None:
        self._queue.start()
        self._composite_queue.start()

    async def stop(self) -> None:
        await self._queue.stop()
        await self._composite_queue.stop()

    def _child_event(self, kind: str, event_type: str, group: JsonObject) -> None:
        parent = parent_key(group)
        if parent is None or self.composites is None:
            return
        children = self._children.setdefault(parent, set())
        if event_type == "DELETED":
            children.discard((kind, object_key(group)))
            if not children:
                del self._children[parent]
            self._composite_queue.add(parent)
        else:
            children.add((kind, object_key(group)))

    def _on_composite_event(self, event_type: str, composite: JsonObject) -> None:
        self._child_event("CompositePodGroup", event_type, composite)
        if event_type != "DELETED" and composite["metadata"].get("deletionTimestamp"):
            self._composite_queue.add(object_key(composite))

    async def _sync_composite(self, key: str) -> None:
        assert self.composites is not None
        composite = self.composites.cache.get(key)
        if composite is None or self._children.get(key):
            return
        meta = composite["metadata"]
        await self._release(
            f"{COMPOSITES_PATH}/namespaces/{meta['namespace']}/compositepodgroups/{meta['name']}",
            meta,
            COMPOSITE_PODGROUP_PROTECTION_FINALIZER,
        )

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        group = pod_group_key(pod)
        if group is None:
            return
        members = self._members.setdefault(group, set())
        if event_type == "DELETED" or not holds_pod_group(pod):
            members.discard(object_key(pod))
            if not members:
                del self._members[group]
            self._queue.add(group)
        else:
            members.add(object_key(pod))

    def _on_pod_group_event(self, event_type: str, pod_group: JsonObject) -> None:
        self._child_event("PodGroup", event_type, pod_group)
        if event_type != "DELETED" and pod_group["metadata"].get("deletionTimestamp"):
            self._queue.add(object_key(pod_group))

    async def _sync(self, key: str) -> None:
        pod_group = self.pod_groups.cache.get(key)
        if pod_group is None or self._members.get(key):
            return
        meta = pod_group["metadata"]
        await self._release(
            f"{pod_groups_path(self.group_version, meta['namespace'])}/{meta['name']}",
            meta,
            PODGROUP_PROTECTION_FINALIZER,
        )

    async def _release(self, path: str, meta: JsonObject, finalizer: str) -> None:
        """Remove ``finalizer`` from a terminating object (at the resourceVersion it was judged at)."""
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp") or finalizer not in finalizers:
            return
        remaining = [f for f in finalizers if f != finalizer] or None
        try:
            await self.http.patch(
                path, {"metadata": {"resourceVersion": meta.get("resourceVersion"), "finalizers": remaining}}
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
