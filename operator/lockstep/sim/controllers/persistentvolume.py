"""A minimal PersistentVolume controller (kube-controller-manager's ``persistentvolume-binder``
and the pv/pvc-protection controllers), enough for the scheduler's volume binding.

- A PV without ``spec.claimRef`` is Available. A PV whose claimRef names a claim completes the
  binding: the claimRef gets the claim's uid, the PV becomes Bound, and the claim gets
  ``spec.volumeName``, the ``pv.kubernetes.io/bind-completed`` annotation (and ``bound-by-controller``
  when the controller chose the volume) and status Bound with the PV's access modes and capacity.
  A PV whose bound claim is gone (or was replaced: another uid) is Released.
- A claim naming a PV in ``spec.volumeName`` is bound to it when the PV is free or pre-bound to it.
  Claims with neither are left alone: matching for ``Immediate`` classes is not simulated, and
  ``WaitForFirstConsumer`` claims wait for the scheduler (pre-binding through the PV's claimRef)
  or the provisioner.
- Protection: a claim being deleted loses ``kubernetes.io/pvc-protection`` once no pod that has not
  finished uses it (a ``persistentVolumeClaim`` volume naming it, or a generic ephemeral volume whose
  claim it is and that the pod controls); a PV being deleted loses ``kubernetes.io/pv-protection``
  once it is not Bound.
"""

from __future__ import annotations

from typing import Any

import structlog

from lockstep.sim.controllers.ephemeral_volume import controller_uid, ephemeral_claim_names
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue

log = structlog.get_logger("lockstep.sim.controllers.persistentvolume")

PV_PATH = "/api/v1/persistentvolumes"
PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
BIND_COMPLETED = "pv.kubernetes.io/bind-completed"
BOUND_BY_CONTROLLER = "pv.kubernetes.io/bound-by-controller"


def pvc_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{name}"


def pvc_volume_names(pod: JsonObject) -> list[str]:
    """The PVCs the pod's ``persistentVolumeClaim`` volumes name."""
    return [
        str(source["claimName"])
        for volume in (pod.get("spec") or {}).get("volumes") or []
        if isinstance(source := volume.get("persistentVolumeClaim"), dict) and source.get("claimName")
    ]


def pod_claim_names(pod: JsonObject) -> list[str]:
    """The PVCs a pod's volumes name (generic ephemeral volumes' claims are ``<pod>-<volume>``)."""
    return pvc_volume_names(pod) + [claim for _, claim in ephemeral_claim_names(pod)]


def _claim_key(ref: Any) -> str | None:
    if not isinstance(ref, dict) or not ref.get("name"):
        return None
    return f"{ref.get('namespace') or 'default'}/{ref['name']}"


class PersistentVolumeController:
    def __init__(self, http: KubeHttp, pvs: Informer, pvcs: Informer, pods: Informer) -> None:
        self.http = http
        self.pvs = pvs
        self.pvcs = pvcs
        self.pods = pods
        self._queue = WorkQueue(self._sync, workers=4, name="pv-controller")
        pvs.add_handler(self._on_pv)
        pvcs.add_handler(self._on_pvc)
        pods.add_handler(self._on_pod)

    def start(self) -> None:
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()

    # --- events -----------------------------------------------------------------------------------

    def _on_pv(self, event_type: str, pv: JsonObject) -> None:
        if event_type != "DELETED":
            self._queue.add("pv:" + pv["metadata"]["name"])
        claim = _claim_key((pv.get("spec") or {}).get("claimRef"))
        if claim is not None:
            self._queue.add("pvc:" + claim)

    def _on_pvc(self, event_type: str, pvc: JsonObject) -> None:
        meta = pvc["metadata"]
        if event_type != "DELETED":
            self._queue.add(f"pvc:{meta.get('namespace')}/{meta['name']}")
        volume = (pvc.get("spec") or {}).get("volumeName")
        if volume:
            self._queue.add("pv:" + volume)
        for name, pv in self.pvs.cache.items():  # PVs pre-bound to the claim (a deleted claim releases them)
            if (
                _claim_key((pv.get("spec") or {}).get("claimRef"))
                == f"{meta.get('namespace')}/{meta['name']}"
            ):
                self._queue.add("pv:" + name)

    def _on_pod(self, event_type: str, pod: JsonObject) -> None:
        namespace = pod["metadata"].get("namespace")
        for name in pod_claim_names(pod):
            pvc = self.pvcs.cache.get(f"{namespace}/{name}")
            if pvc is not None and pvc["metadata"].get("deletionTimestamp"):
                self._queue.add(f"pvc:{namespace}/{name}")

    # --- reconcile --------------------------------------------------------------------------------

    async def _sync(self, key: str) -> None:
        kind, _, name = key.partition(":")
        try:
            if kind == "pv":
                await self._sync_pv(name)
            else:
                await self._sync_pvc(name)
        except ApiError as exc:
            if exc.status != 404:  # gone meanwhile: its own event brings the rest
                raise

    async def _sync_pv(self, name: str) -> None:
        pv = self.pvs.cache.get(name)
        if pv is None:
            return
        meta, spec = pv["metadata"], pv.get("spec") or {}
        phase = (pv.get("status") or {}).get("phase")
        if meta.get("deletionTimestamp"):
            if phase != "Bound" and PV_PROTECTION in (meta.get("finalizers") or []):
                await self._drop_finalizer(f"{PV_PATH}/{name}", meta, PV_PROTECTION)
            return
        claim_key = _claim_key(spec.get("claimRef"))
        if claim_key is None:
            await self._set_pv_phase(pv, "Available")
            return
        claim = self.pvcs.cache.get(claim_key)
        ref_uid = spec["claimRef"].get("uid")
        if claim is None or (ref_uid and ref_uid != claim["metadata"].get("uid")):
            if ref_uid:  # its claim is gone: kept for the admin (Retain) as Released
                await self._set_pv_phase(pv, "Released")
            else:
                await self._set_pv_phase(pv, "Available")
            return
        volume_name = (claim.get("spec") or {}).get("volumeName")
        if volume_name and volume_name != name:
            return  # the claim is bound to another volume; this pre-binding loses
        await self._bind(pv, claim, bound_by_controller=False)

    async def _sync_pvc(self, key: str) -> None:
        claim = self.pvcs.cache.get(key)
        if claim is None:
            return
        meta, spec = claim["metadata"], claim.get("spec") or {}
        namespace, name = key.split("/", 1)
        if meta.get("deletionTimestamp"):
            if PVC_PROTECTION in (meta.get("finalizers") or []) and not self._in_use(namespace, name):
                await self._drop_finalizer(pvc_path(namespace, name), meta, PVC_PROTECTION)
            return
        volume_name = spec.get("volumeName")
        if volume_name:
            pv = self.pvs.cache.get(volume_name)
            if pv is None:
                return
            claim_key = _claim_key((pv.get("spec") or {}).get("claimRef"))
            if claim_key not in (None, key):
                return  # the volume belongs to another claim
            await self._bind(pv, claim, bound_by_controller=claim_key is None)
            return
        for pv in self.pvs.cache.values():
            ref = (pv.get("spec") or {}).get("claimRef") or {}
            if _claim_key(ref) == key and (not ref.get("uid") or ref.get("uid") == meta.get("uid")):
                await self._bind(pv, claim, bound_by_controller=False)
                return

    def _in_use(self, namespace: str, name: str) -> bool:
        claim = self.pvcs.cache.get(f"{namespace}/{name}")
        owner = controller_uid(claim) if claim is not None else None
        for pod in self.pods.cache.values():
            if pod["metadata"].get("namespace") != namespace:
                continue
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            if name in pvc_volume_names(pod):
                return True
            # an ephemeral volume uses the claim only if the claim is the pod's (podUsesPVC)
            if owner == pod["metadata"].get("uid") and any(c == name for _, c in ephemeral_claim_names(pod)):
                return True
        return False

    async def _bind(self, pv: JsonObject, claim: JsonObject, *, bound_by_controller: bool) -> None:
        """Complete the binding in the order the real controller writes it: PV claimRef, PV phase,
        claim volumeName and annotations, claim phase."""
        pv_name = pv["metadata"]["name"]
        claim_meta = claim["metadata"]
        ref = (pv.get("spec") or {}).get("claimRef") or {}
        if ref.get("uid") != claim_meta.get("uid"):
            claim_ref = {
                "kind": "PersistentVolumeClaim",
                "apiVersion": "v1",
                "namespace": claim_meta.get("namespace"),
                "name": claim_meta["name"],
                "uid": claim_meta.get("uid"),
                "resourceVersion": claim_meta.get("resourceVersion"),
            }
            patch = {
                "metadata": {"resourceVersion": pv["metadata"]["resourceVersion"]},
                "spec": {"claimRef": claim_ref},
            }
            pv = await self.http.patch(f"{PV_PATH}/{pv_name}", patch)
        pv = await self._set_pv_phase(pv, "Bound")
        path = pvc_path(claim_meta.get("namespace"), claim_meta["name"])
        annotations = claim_meta.get("annotations") or {}
        if (claim.get("spec") or {}).get("volumeName") != pv_name or BIND_COMPLETED not in annotations:
            wanted = {BIND_COMPLETED: "yes"}
            if bound_by_controller:
                wanted[BOUND_BY_CONTROLLER] = "yes"
            patch = {
                "metadata": {"resourceVersion": claim_meta["resourceVersion"], "annotations": wanted},
                "spec": {"volumeName": pv_name},
            }
            claim = await self.http.patch(path, patch)
        pv_spec = pv.get("spec") or {}
        status = {
            "phase": "Bound",
            "accessModes": pv_spec.get("accessModes"),
            "capacity": pv_spec.get("capacity"),
        }
        current = claim.get("status") or {}
        if any(current.get(field) != value for field, value in status.items()):
            await self.http.patch(path + "/status", {"status": status})

    async def _set_pv_phase(self, pv: JsonObject, phase: str) -> JsonObject:
        if (pv.get("status") or {}).get("phase") == phase:
            return pv
        patch = {
            "metadata": {"resourceVersion": pv["metadata"]["resourceVersion"]},
            "status": {"phase": phase},
        }
        return await self.http.patch(f"{PV_PATH}/{pv['metadata']['name']}/status", patch)

    async def _drop_finalizer(self, path: str, meta: JsonObject, finalizer: str) -> None:
        remaining = [f for f in meta.get("finalizers") or [] if f != finalizer]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": remaining}}
        await self.http.patch(path, patch)
