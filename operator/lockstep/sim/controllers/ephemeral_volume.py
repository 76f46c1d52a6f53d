"""kube-controller-manager's ephemeral volume controller (``pkg/controller/volume/ephemeral``): it
creates the PersistentVolumeClaim of each generic ephemeral volume of a pod.

- A pod that is added (and not being deleted) gets, for each ``spec.volumes[].ephemeral`` volume, the
  claim ``<pod name>-<volume name>`` (``ephemeral.VolumeClaimName``): the template's labels,
  annotations and spec, and an ownerReference to the pod with ``controller`` and
  ``blockOwnerDeletion``, so the garbage collector deletes the claim with the pod (the
  ``kubernetes.io/pvc-protection`` finalizer holds it until the pod is gone).
- An existing claim of that name is never changed. One the pod does not control
  (``ephemeral.VolumeIsForPod``) stops the pod's sync there with a Warning event ``FailedBinding``
  on the pod: ``ephemeral volume <volume>: PVC <ns>/<claim> was not created for pod <ns>/<pod> (pod is
  not owner)``; the scheduler keeps such a pod pending.
- A deleted claim that a pod's ephemeral volume names is created again (while the pod is not being
  deleted).
"""

from __future__ import annotations

import structlog

from lockstep.sim.controllers import pod_warning_event
from lockstep.sim.objectmeta import now_rfc3339
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key

log = structlog.get_logger("lockstep.sim.controllers.ephemeral_volume")

COMPONENT = "ephemeral_volume"
FAILED_BINDING = "FailedBinding"


def ephemeral_claim_names(pod: JsonObject) -> list[tuple[str, str]]:
    """(volume name, claim name) of each generic ephemeral volume of the pod, in spec order."""
    pod_name = pod["metadata"]["name"]
    return [
        (str(volume.get("name")), f"{pod_name}-{volume.get('name')}")
        for volume in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(volume, dict) and volume.get("ephemeral") is not None
    ]


def controller_uid(obj: JsonObject) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller") is True:
            return str(ref.get("uid") or "")
    return None


def claim_for(pod: JsonObject, volume: JsonObject) -> JsonObject:
    """The claim the controller creates for ``volume`` of ``pod``, from its ``volumeClaimTemplate``."""
    meta = pod["metadata"]
    template = (volume.get("ephemeral") or {}).get("volumeClaimTemplate") or {}
    template_meta = template.get("metadata") or {}
    metadata: JsonObject = {
        "name": f"{meta['name']}-{volume['name']}",
        "namespace": meta.get("namespace") or "default",
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": meta["name"],
                "uid": meta.get("uid"),
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    for field in ("labels", "annotations"):
        if template_meta.get(field):
            metadata[field] = dict(template_meta[field])
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": dict(template.get("spec") or {}),
    }


def failed_binding_event(pod: JsonObject, volume_name: str, message: str) -> JsonObject:
    return pod_warning_event(
        pod,
        FAILED_BINDING,
        f"ephemeral volume {volume_name}: {message}",
        {"component": COMPONENT},
        now_rfc3339(),
    )


class EphemeralVolumeController:
    def __init__(self, http: KubeHttp, pods: Informer, pvcs: Informer) -> None:
        self.http = http
        self.pods = pods
        self.pvcs = pvcs
        self._queue = WorkQueue(self._sync, workers=2, name="ephemeral-volume")
        # (pod uid, volume, message) already reported: a repeated failure is one event, as the
        # event recorder's correlation makes it (it only counts the repeats)
        self._reported: set[tuple[str, str, str]] = set()
        pods.add_handler(self._on_pod)
        pvcs.add_handler(self._on_pvc)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

    def _on_pod(self, event_type: str, pod: JsonObject) -> None:
        # The pod spec is immutable and the claim goes with the pod through its owner reference:
        # only additions matter, as upstream.
        if event_type == "ADDED" and not pod["metadata"].get("deletionTimestamp"):
            if ephemeral_claim_names(pod):
                self._queue.add(object_key(pod))
        elif event_type == "DELETED":
            uid = pod["metadata"].get("uid")
            self._reported = {entry for entry in self._reported if entry[0] != uid}

    def _on_pvc(self, event_type: str, pvc: JsonObject) -> None:
        if event_type != "DELETED":
            return
        namespace, name = pvc["metadata"].get("namespace"), pvc["metadata"]["name"]
        for key, pod in list(self.pods.cache.items()):
            if pod["metadata"].get("namespace") == namespace and any(
                claim == name for _, claim in ephemeral_claim_names(pod)
            ):
                self._queue.add(key)

    async def _sync(self, key: str) -> None:
        pod = self.pods.cache.get(key)
        if pod is None or pod["metadata"].get("deletionTimestamp"):
            return
        meta = pod["metadata"]
        namespace = meta.get("namespace") or "default"
        for volume in (pod.get("spec") or {}).get("volumes") or []:
            if not isinstance(volume, dict) or volume.get("ephemeral") is None:
                continue
            claim_name = f"{meta['name']}-{volume.get('name')}"
            existing = self.pvcs.cache.get(f"{namespace}/{claim_name}")
            if existing is not None:
                if controller_uid(existing) == meta.get("uid"):
                    continue
                problem = (
                    f"PVC {namespace}/{claim_name} was not created for pod {namespace}/{meta['name']} "
                    "(pod is not owner)"
                )
                await self._report(pod, str(volume.get("name")), problem)
                return
            try:
                await self.http.create(
                    f"/api/v1/namespaces/{namespace}/persistentvolumeclaims", claim_for(pod, volume)
                )
            except ApiError as exc:
                if exc.status == 409:
                    raise  # our cache is behind the server: the retry sees the claim
                detail = exc.body.get("message") if isinstance(exc.body, dict) else exc.body
                await self._report(pod, str(volume.get("name")), f"create PVC {claim_name}: {detail}")
                if exc.status >= 500:
                    raise
                return

    async def _report(self, pod: JsonObject, volume_name: str, message: str) -> None:
        entry = (str(pod["metadata"].get("uid")), volume_name, message)
        if entry in self._reported:
            return
        self._reported.add(entry)
        log.info("ephemeral volume not created", pod=object_key(pod), volume=volume_name, problem=message)
        namespace = pod["metadata"].get("namespace") or "default"
        try:
            await self.http.create(
                f"/api/v1/namespaces/{namespace}/events", failed_binding_event(pod, volume_name, message)
            )
        except ApiError as exc:
            log.debug("event not recorded", pod=object_key(pod), error=str(exc))
