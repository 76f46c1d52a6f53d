"""A simulated dynamic provisioner, ``local.sim.lockstep.dev``, for ``WaitForFirstConsumer`` classes.

Like an external provisioner with topology, it provisions only once the scheduler chose a node: a
claim of one of its classes that carries ``volume.kubernetes.io/selected-node`` and has no volume
gets a PV ``pvc-<claim uid>`` of the requested size, the claim's access modes and the class's
reclaim policy, a CSI source, node affinity to the selected node (``kubernetes.io/hostname``) and
``spec.claimRef`` pointing at the claim; the PV controller then completes the binding.
"""

from __future__ import annotations

import structlog

from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue

log = structlog.get_logger("lockstep.sim.controllers.provisioner")

PROVISIONER_NAME = "local.sim.lockstep.dev"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
PROVISIONED_BY = "pv.kubernetes.io/provisioned-by"
HOSTNAME_LABEL = "kubernetes.io/hostname"
PV_PATH = "/api/v1/persistentvolumes"


def provisioned_volume(claim: JsonObject, storage_class: JsonObject, node: str) -> JsonObject:
    meta, spec = claim["metadata"], claim.get("spec") or {}
    term = {"matchExpressions": [{"key": HOSTNAME_LABEL, "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"pvc-{meta['uid']}", "annotations": {PROVISIONED_BY: PROVISIONER_NAME}},
        "spec": {
            "capacity": {"storage": ((spec.get("resources") or {}).get("requests") or {}).get("storage")},
            "accessModes": spec.get("accessModes"),
            "volumeMode": spec.get("volumeMode") or "Filesystem",
            "storageClassName": storage_class["metadata"]["name"],
            "persistentVolumeReclaimPolicy": storage_class.get("reclaimPolicy") or "Delete",
            "csi": {"driver": PROVISIONER_NAME, "volumeHandle": meta["uid"]},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
            "claimRef": {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": meta.get("namespace"),
                "name": meta["name"],
                "uid": meta["uid"],
            },
        },
    }


class Provisioner:
    def __init__(self, http: KubeHttp, pvcs: Informer, classes: Informer) -> None:
        self.http = http
        self.pvcs = pvcs
        self.classes = classes
        self._queue = WorkQueue(self._sync, workers=2, name="provisioner")
        pvcs.add_handler(self._on_pvc)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

    def _on_pvc(self, event_type: str, claim: JsonObject) -> None:
        meta = claim["metadata"]
        if event_type != "DELETED" and (meta.get("annotations") or {}).get(SELECTED_NODE):
            self._queue.add(f"{meta.get('namespace')}/{meta['name']}")

    async def _sync(self, key: str) -> None:
        claim = self.pvcs.cache.get(key)
        if claim is None or claim["metadata"].get("deletionTimestamp"):
            return
        spec = claim.get("spec") or {}
        node = (claim["metadata"].get("annotations") or {}).get(SELECTED_NODE)
        storage_class = self.classes.cache.get(spec.get("storageClassName") or "")
        if not node or spec.get("volumeName") or storage_class is None:
            return
        if storage_class.get("provisioner") != PROVISIONER_NAME:
            return
        try:
            await self.http.create(PV_PATH, provisioned_volume(claim, storage_class, node))
        except ApiError as exc:
            if exc.reason != "AlreadyExists":  # provisioned already; any other failure is retried
                raise
        log.debug("provisioned", claim=key, node=node)
