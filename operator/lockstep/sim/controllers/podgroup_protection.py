"""kube-controller-manager's ``podgroup-protection-controller`` (pkg/controller/podgroupprotection):
the API server puts the finalizer ``scheduling.k8s.io/podgroup-protection`` on every upstream PodGroup
at create; once a PodGroup is being deleted and no active pod (one not Succeeded or Failed; a deleted
pod is gone from the informer, a terminating one still counts) names it in
``spec.schedulingGroup.podGroupName``, this removes the finalizer, so the PodGroup goes away only after
its pods. It works on the PodGroups of the version the server serves (``scheduling.k8s.io/v1alpha2``
in 1.36, ``v1beta1`` in 1.37).

Not emulated: 1.37's second half, the CompositePodGroup finalizer kept while child PodGroups or
CompositePodGroups name the group in ``spec.parentCompositePodGroupName``."""

from __future__ import annotations

from lockstep.sim.registry.scheduling import PODGROUP_PROTECTION_FINALIZER
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key


def pod_groups_path(group_version: str, namespace: str | None = None) -> str:
    """The PodGroups' collection of a group-version (``scheduling.k8s.io/v1beta1``), of all namespaces
    or of one."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group_version}{where}/podgroups"


def pod_group_key(pod: JsonObject) -> str | None:
    """``namespace/name`` of the upstream PodGroup the pod joins, if any."""
    name = ((pod.get("spec") or {}).get("schedulingGroup") or {}).get("podGroupName")
    return f"{pod['metadata'].get('namespace')}/{name}" if name else None


def holds_pod_group(pod: JsonObject) -> bool:
    return (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class PodGroupProtectionController:
    def __init__(self, http: KubeHttp, pods: Informer, pod_groups: Informer, group_version: str) -> None:
        self.http = http
        self.pod_groups = pod_groups
        self.group_version = group_version
        # PodGroup key -> keys of the pods naming it
        self._members: dict[str, set[str]] = {}
        self._queue = WorkQueue(self._sync, workers=2, name="podgroup-protection")
        pods.add_handler(self._on_pod_event)
        pod_groups.add_handler(self._on_pod_group_event)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

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
        if event_type != "DELETED" and pod_group["metadata"].get("deletionTimestamp"):
            self._queue.add(object_key(pod_group))

    async def _sync(self, key: str) -> None:
        pod_group = self.pod_groups.cache.get(key)
        if pod_group is None or self._members.get(key):
            return
        meta = pod_group["metadata"]
        finalizers = meta.get("finalizers") or []
        if not meta.get("deletionTimestamp") or PODGROUP_PROTECTION_FINALIZER not in finalizers:
            return
        remaining = [f for f in finalizers if f != PODGROUP_PROTECTION_FINALIZER]
        try:
            await self.http.patch(
                f"{pod_groups_path(self.group_version, meta['namespace'])}/{meta['name']}",
                {
                    "metadata": {
                        "resourceVersion": meta.get("resourceVersion"),
                        "finalizers": remaining or None,
                    }
                },
            )
        except ApiError as exc:
            if exc.status != 404:
                raise
