"""The resourceclaim controller of kube-controller-manager, for pods only.

Follows upstream ``pkg/controller/resourceclaim/controller.go``:

- For each ``spec.resourceClaims[]`` entry of a pod that names a ``resourceClaimTemplateName``, it
  creates a claim from the template (generateName ``<pod>-<claim>-``, owner reference to the pod
  with controller=true, annotation ``resource.kubernetes.io/pod-claim-name``) unless the pod already
  records one or an owned claim with that annotation exists, and records it in the pod's
  ``status.resourceClaimStatuses`` (strategic merge patch on pods/status, keyed by name).
- It drops ``status.reservedFor`` entries of pods that are gone, were replaced (other uid) or are
  done (Succeeded/Failed, or deleted while unbound). When that removes the last entry of a claim
  carrying the ``resource.kubernetes.io/delete-protection`` finalizer (which the scheduler adds before
  it writes an allocation) it also clears ``status.allocation`` (upstream deallocates on this
  transition only, never a claim that was allocated and not yet reserved), then drops the finalizer
  in a second write. A deleted claim keeps its ``deletionTimestamp`` until then; one that is deleted
  while unreserved is deallocated and its finalizer dropped at once.
- It deletes a claim owned by a pod (controller owner reference: the claims it generates and the one
  kube-scheduler makes for a pod's DRA-backed extended resources, which the pod's
  ``status.extendedResourceClaimStatus`` names) once no pod reserves it and its owning pod is gone,
  replaced or done. (Upstream leaves the "gone" case to the garbage collector; the emulator's collector
  deletes such a claim with its pod too, and the finalizer holds it until this controller drops it.)

It knows nothing of lockstep's PodGroups: claims made for a PodGroup are owned by the PodGroup, so
they are never deleted here, and ``reservedFor`` entries that are not pods are kept as they are.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from lockstep.sim.watching import (
    MERGE_PATCH,
    STRATEGIC_MERGE_PATCH,
    ApiError,
    Informer,
    JsonObject,
    KubeHttp,
    WorkQueue,
    object_key,
)

log = structlog.get_logger("lockstep.sim.controllers.resourceclaim")

POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
DELETE_PROTECTION_FINALIZER = "resource.kubernetes.io/delete-protection"
MAX_GENERATE_NAME_BASE = 57
DELETED_POD_MEMORY = 10_000


@dataclass(frozen=True)
class PodPlan:
    """What to do for one pod: claims to create (pod claim name -> template) and names to record."""

    create: dict[str, str] = field(default_factory=dict)
    record: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class ClaimPlan:
    """What to do for one claim. ``reserved_for`` is None when the reservations stay as they are."""

    reserved_for: list[JsonObject] | None = None
    deallocate: bool = False
    remove_finalizer: bool = False
    delete: bool = False


def owning_pod(claim: JsonObject) -> tuple[str, str] | None:
    """(name, uid) of the pod that controls ``claim``, if a pod does."""
    for owner in claim.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("apiVersion") == "v1" and owner.get("kind") == "Pod":
            return str(owner.get("name", "")), str(owner.get("uid", ""))
    return None


def is_pod_done(pod: JsonObject) -> bool:
    """True when none of the pod's containers runs or will run again."""
    phase = pod.get("status", {}).get("phase")
    if phase in ("Succeeded", "Failed"):
        return True
    return bool(pod.get("metadata", {}).get("deletionTimestamp")) and not pod.get("spec", {}).get("nodeName")


def generate_name(pod_name: str, pod_claim_name: str) -> str:
    """``<pod>-<claim>-``, both parts shortened proportionally when too long (as upstream does)."""
    base = f"{pod_name}-{pod_claim_name}-"
    if len(base) <= MAX_GENERATE_NAME_BASE:
        return base
    pod_part = pod_name[: len(pod_name) * MAX_GENERATE_NAME_BASE // len(base)]
    claim_part = pod_claim_name[: len(pod_claim_name) * MAX_GENERATE_NAME_BASE // len(base)]
    return f"{pod_part}-{claim_part}"


def unrecorded_template_claims(pod: JsonObject) -> dict[str, str]:
    """Pod claim name -> template of the pod's template entries whose claim its status does not name
    yet; none for a pod being deleted."""
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return {}
    recorded = {
        status.get("name"): status.get("resourceClaimName")
        for status in pod.get("status", {}).get("resourceClaimStatuses") or []
    }
    return {
        pod_claim["name"]: pod_claim["resourceClaimTemplateName"]
        for pod_claim in pod.get("spec", {}).get("resourceClaims") or []
        if pod_claim.get("resourceClaimTemplateName")
        and pod_claim.get("name")
        and not recorded.get(pod_claim["name"])
    }


def extended_resource_claim_key(pod: JsonObject) -> str | None:
    """``namespace/name`` of the claim the scheduler made for the pod's DRA-backed extended resources
    (``status.extendedResourceClaimStatus``), which upstream enqueues once the pod is done or gone."""
    name = ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
    return f"{pod['metadata'].get('namespace')}/{name}" if name else None


def plan_pod(pod: JsonObject, owned_claims: list[JsonObject]) -> PodPlan:
    """Claims to create for ``pod`` and claim names to record in its status.

    ``owned_claims`` are the claims whose controlling owner is this pod (by uid).
    """
    wanted = unrecorded_template_claims(pod)
    if not wanted:
        return PodPlan()
    by_pod_claim = {
        claim["metadata"].get("annotations", {}).get(POD_CLAIM_ANNOTATION): claim["metadata"]["name"]
        for claim in owned_claims
        if claim["metadata"].get("annotations", {}).get(POD_CLAIM_ANNOTATION)
    }
    create: dict[str, str] = {}
    record: dict[str, str] = {}
    for name, template in wanted.items():
        existing = by_pod_claim.get(name)
        if existing:
            record[name] = existing
        else:
            create[name] = template
    return PodPlan(create=create, record=record)


def claim_from_template(pod: JsonObject, pod_claim_name: str, template: JsonObject) -> JsonObject:
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = dict(template_meta.get("annotations") or {})
    annotations[POD_CLAIM_ANNOTATION] = pod_claim_name
    metadata: JsonObject = {
        "generateName": generate_name(pod["metadata"]["name"], pod_claim_name),
        "namespace": pod["metadata"]["namespace"],
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if template_meta.get("labels"):
        metadata["labels"] = dict(template_meta["labels"])
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": template_spec.get("spec") or {},
    }


def _is_pod_reference(entry: JsonObject) -> bool:
    return not entry.get("apiGroup") and entry.get("resource") == "pods"


def plan_claim(
    claim: JsonObject, pods: Mapping[str, JsonObject | None], deleted_pod_uids: Collection[str]
) -> ClaimPlan:
    """Decide the claim's fate.

    ``pods`` maps the name of every pod the claim mentions (reservedFor entries and the owner) to
    the pod as the API shows it, or None when it does not exist; ``deleted_pod_uids`` are uids of
    pods seen deleted.
    """
    status = claim.get("status") or {}
    reserved = status.get("reservedFor") or []
    valid: list[JsonObject] = []
    for entry in reserved:
        if _is_pod_reference(entry):
            if entry.get("uid") in deleted_pod_uids:
                continue
            pod = pods.get(str(entry.get("name", "")))
            if pod is None or pod["metadata"].get("uid") != entry.get("uid") or is_pod_done(pod):
                continue
        valid.append(entry)

    metadata = claim.get("metadata", {})
    has_finalizer = DELETE_PROTECTION_FINALIZER in (metadata.get("finalizers") or [])
    allocated = status.get("allocation") is not None
    reserved_for: list[JsonObject] | None = None
    deallocate = False
    remove_finalizer = False
    if len(valid) < len(reserved):
        reserved_for = valid
        # Upstream "deallocates" only a claim carrying the finalizer: the scheduler adds it before it
        # writes an allocation, so one without it was not allocated by a scheduler.
        deallocate = not valid and allocated and has_finalizer
        remove_finalizer = has_finalizer and (deallocate or not allocated)
    elif not valid and metadata.get("deletionTimestamp") and has_finalizer:
        deallocate = allocated
        remove_finalizer = True

    delete = False
    owner = owning_pod(claim)
    if not valid and owner is not None and not metadata.get("deletionTimestamp"):
        owner_name, owner_uid = owner
        pod = pods.get(owner_name)
        delete = (
            owner_uid in deleted_pod_uids
            or pod is None
            or pod["metadata"].get("uid") != owner_uid
            or is_pod_done(pod)
        )
    return ClaimPlan(
        reserved_for=reserved_for, deallocate=deallocate, remove_finalizer=remove_finalizer, delete=delete
    )


def claim_pod_names(claim: JsonObject) -> set[str]:
    names = {
        str(entry.get("name", ""))
        for entry in (claim.get("status") or {}).get("reservedFor") or []
        if _is_pod_reference(entry)
    }
    owner = owning_pod(claim)
    if owner is not None:
        names.add(owner[0])
    return names


def claim_pod_uids(claim: JsonObject) -> set[str]:
    uids = {
        str(entry.get("uid", ""))
        for entry in (claim.get("status") or {}).get("reservedFor") or []
        if _is_pod_reference(entry)
    }
    owner = owning_pod(claim)
    if owner is not None:
        uids.add(owner[1])
    return uids


def claims_path(namespace: str, name: str = "") -> str:
    base = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims"
    return f"{base}/{name}" if name else base


TEMPLATES_PATH = "/apis/resource.k8s.io/v1/resourceclaimtemplates"


class ClaimController:
    """``workers`` pods or claims are reconciled concurrently, 50 as kube-controller-manager's
    ``--concurrent-resourceclaim-syncs``: each pod waits for two round trips (create the claim, patch
    the pod's status), and in the emulator every round trip waits its turn with the requests of all
    the other clients, so concurrency, not this controller's CPU, sets the rate."""

    def __init__(self, http: KubeHttp, pods: Informer, claims: Informer, *, workers: int = 50) -> None:
        self.http = http
        self.pods = pods
        self.claims = claims
        # Templates come from their own informer (upstream reads a lister, not the API, per pod).
        self.templates = Informer(http, TEMPLATES_PATH)
        self._templates_task: asyncio.Task[None] | None = None
        self._claims_by_pod_uid: dict[str, set[str]] = {}
        self._claim_pod_uids: dict[str, set[str]] = {}
        self._deleted_pod_uids: OrderedDict[str, None] = OrderedDict()
        self._queue = WorkQueue(self._sync, workers=workers, name="claim-controller")
        pods.add_handler(self._on_pod_event)
        claims.add_handler(self._on_claim_event)

    def start(self) -> None:
        self._templates_task = asyncio.create_task(self.templates.run(), name="sim-claim-templates-watch")
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()
        if self._templates_task is not None:
            self._templates_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._templates_task
            self._templates_task = None

    # --- event routing -------------------------------------------------------------------------

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        uid = pod.get("metadata", {}).get("uid", "")
        if event_type == "DELETED":
            self._deleted_pod_uids[uid] = None
            while len(self._deleted_pod_uids) > DELETED_POD_MEMORY:
                self._deleted_pod_uids.popitem(last=False)
        elif unrecorded_template_claims(pod):
            self._queue.add("pod:" + object_key(pod))
        if event_type == "DELETED" or is_pod_done(pod):
            self._queue.add_all("claim:" + key for key in self._claims_by_pod_uid.get(uid, ()))
            extended_claim = extended_resource_claim_key(pod)
            if extended_claim is not None:
                self._queue.add("claim:" + extended_claim)

    def _on_claim_event(self, event_type: str, claim: JsonObject) -> None:
        key = object_key(claim)
        for uid in self._claim_pod_uids.pop(key, set()):
            keys = self._claims_by_pod_uid.get(uid)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del self._claims_by_pod_uid[uid]
        if event_type == "DELETED":
            return
        self._index_claim(key, claim)
        self._queue.add("claim:" + key)

    def _index_claim(self, key: str, claim: JsonObject) -> None:
        uids = claim_pod_uids(claim)
        self._claim_pod_uids[key] = uids
        for uid in uids:
            self._claims_by_pod_uid.setdefault(uid, set()).add(key)

    def _owned_claims(self, pod_uid: str) -> list[JsonObject]:
        claims = []
        for key in self._claims_by_pod_uid.get(pod_uid, ()):
            claim = self.claims.cache.get(key)
            if claim is not None and (owning_pod(claim) or ("", ""))[1] == pod_uid:
                claims.append(claim)
        return claims

    # --- reconciliation ------------------------------------------------------------------------

    async def _sync(self, token: str) -> None:
        kind, _, key = token.partition(":")
        if kind == "pod":
            await self._sync_pod(key)
        else:
            await self._sync_claim(key)

    async def _sync_pod(self, key: str) -> None:
        pod = self.pods.cache.get(key)
        if pod is None:
            return
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        plan = plan_pod(pod, self._owned_claims(pod["metadata"]["uid"]))
        record = dict(plan.record)
        for pod_claim_name, template_name in plan.create.items():
            template = await self._template(namespace, template_name, f"pod {key}", pod_claim_name)
            created = await self.http.create(
                claims_path(namespace), claim_from_template(pod, pod_claim_name, template)
            )
            # Like upstream's claim cache mutation: a retry before the watch delivers the claim
            # must find it instead of creating a second one.
            created_key = object_key(created)
            self.claims.cache.setdefault(created_key, created)
            self._index_claim(created_key, created)
            record[pod_claim_name] = created["metadata"]["name"]
            log.debug("created resource claim", pod=key, claim=created_key)
        if record:
            statuses = [{"name": n, "resourceClaimName": c} for n, c in sorted(record.items())]
            await self.http.patch(
                f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                {"metadata": {"uid": pod["metadata"]["uid"]}, "status": {"resourceClaimStatuses": statuses}},
                STRATEGIC_MERGE_PATCH,
            )

    async def _template(self, namespace: str, name: str, who: str, pod_claim_name: str) -> JsonObject:
        cached = self.templates.cache.get(f"{namespace}/{name}")
        if cached is not None:
            return cached
        # Created just before the pod, its watch event may still be on the way: ask the API server.
        try:
            return await self.http.get(
                f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                raise LookupError(
                    f"{who}: spec.resourceClaims[{pod_claim_name}].resourceClaimTemplateName: "
                    f"ResourceClaimTemplate {namespace}/{name} not found"
                ) from exc
            raise

    async def _lookup_pod(self, namespace: str, name: str) -> JsonObject | None:
        cached = self.pods.cache.get(f"{namespace}/{name}")
        if cached is not None:
            return cached
        # Not in the cache may mean "not seen yet": ask the API server before dropping anything.
        try:
            return await self.http.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def _sync_claim(self, key: str) -> None:
        claim = self.claims.cache.get(key)
        if claim is None:
            return
        namespace = claim["metadata"]["namespace"]
        pods = {pod_name: await self._lookup_pod(namespace, pod_name) for pod_name in claim_pod_names(claim)}
        plan = plan_claim(claim, pods, self._deleted_pod_uids.keys())
        try:
            await self._apply_claim_plan(claim, plan)
        except ApiError as exc:
            # Gone already. A 409 (the cache is behind, or a write raced) is retried by the work
            # queue with backoff, as upstream requeues rate-limited: the next attempt re-reads the cache.
            if exc.status != 404:
                raise

    async def _apply_claim_plan(self, claim: JsonObject, plan: ClaimPlan) -> None:
        metadata = claim["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        key = f"{namespace}/{name}"
        resource_version = metadata.get("resourceVersion")
        if plan.reserved_for is not None or plan.deallocate:
            status: dict[str, Any] = {}
            if plan.reserved_for is not None:
                status["reservedFor"] = plan.reserved_for or None
            if plan.deallocate:
                status["allocation"] = None
            updated = await self.http.patch(
                claims_path(namespace, name) + "/status",
                {"metadata": {"resourceVersion": resource_version}, "status": status},
                MERGE_PATCH,
            )
            resource_version = updated["metadata"].get("resourceVersion")
            log.debug("updated claim reservations", claim=key, deallocated=plan.deallocate)
        if plan.remove_finalizer:
            finalizers = [f for f in metadata.get("finalizers") or [] if f != DELETE_PROTECTION_FINALIZER]
            await self.http.patch(
                claims_path(namespace, name),
                {"metadata": {"resourceVersion": resource_version, "finalizers": finalizers or None}},
                MERGE_PATCH,
            )
        if plan.delete:
            await self.http.delete(
                claims_path(namespace, name),
                {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": metadata["uid"]}},
            )
            log.debug("deleted generated claim", claim=key)
