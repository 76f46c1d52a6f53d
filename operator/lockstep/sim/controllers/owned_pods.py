"""What the simulated workload operators (LeaderWorkerSet, KubeRay, the Kubeflow training operator)
share: watch their custom resources and create the pods each one should have, by name, controlled by
it (the garbage collector deletes them with it). A pod already there is left alone; a deleted one is
not replaced."""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, ObjectController

log = structlog.get_logger("lockstep.sim.controllers")

# the pods an object should have now, and whether to ask again shortly (more come once a leader runs)
DesiredPods = Callable[[KubeHttp, JsonObject], Awaitable[tuple[list[JsonObject], bool]]]
RECHECK_SECONDS = 0.2


def pod_from(
    owner: JsonObject, template: JsonObject, name: str, labels: dict[str, str], annotations: dict[str, str]
) -> JsonObject:
    """A pod of ``owner`` made from a pod template, with the controller's labels and annotations."""
    meta = owner["metadata"]
    template = copy.deepcopy(template)
    template_meta = template.get("metadata") or {}
    api_version, kind = owner["apiVersion"], owner["kind"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": meta["namespace"],
            "labels": {**(template_meta.get("labels") or {}), **labels},
            "annotations": {**(template_meta.get("annotations") or {}), **annotations},
            "ownerReferences": [
                {
                    "apiVersion": api_version,
                    "kind": kind,
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": template.get("spec") or {},
    }


class PodOwnerController(ObjectController):
    def __init__(self, http: KubeHttp, path: str, desired: DesiredPods, name: str) -> None:
        self.http = http
        self.objects = Informer(http, path)
        self.desired = desired
        self._created: set[tuple[str, str]] = set()  # (owner uid, pod name)
        super().__init__(self.objects, name)

    async def sync(self, key: str) -> None:
        obj: Any = self.objects.cache.get(key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return
        pods, again = await self.desired(self.http, obj)
        if again:
            self._queue.add_after(key, RECHECK_SECONDS)
        uid = obj["metadata"]["uid"]
        for pod in pods:
            name = pod["metadata"]["name"]
            if (uid, name) in self._created:
                continue
            try:
                await self.http.create(f"/api/v1/namespaces/{pod['metadata']['namespace']}/pods", pod)
            except ApiError as exc:
                if exc.status in (403, 422):
                    log.warning("cannot create a pod", controller=self.name, owner=key, error=str(exc))
                    return
                if exc.status != 409:
                    raise
            self._created.add((uid, name))
