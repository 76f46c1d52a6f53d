"""The PodGroup half of kube-controller-manager's resourceclaim controller (gate
``DRAWorkloadResourceClaims``; 1.36's v1alpha2 or 1.37's v1beta1 PodGroups, whichever is served):
for each ``spec.resourceClaims`` entry of an upstream
``scheduling.k8s.io`` PodGroup that names a ``resourceClaimTemplateName``, it creates one claim from
the template, owned by the PodGroup (controller ownerReference, so the garbage collector deletes it
with the PodGroup), and records it in the PodGroup's ``status.resourceClaimStatuses``.

Allocation, reservation and their release are the scheduler's part (lockstep's here); this
controller never touches a claim's status. lockstep's own CRD PodGroups are not served here:
lockstep makes their claims itself.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from lockstep.sim.controllers.podgroup_protection import pod_groups_path
from lockstep.sim.controllers.resourceclaim import TEMPLATES_PATH, claims_path, generate_name
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key

log = structlog.get_logger("lockstep.sim.controllers.resourceclaim_podgroups")

POD_GROUP_CLAIM_ANNOTATION = "resource.kubernetes.io/podgroup-claim-name"


def unrecorded_template_claims(pod_group: JsonObject) -> dict[str, str]:
    """PodGroup claim name -> template, for template entries its status does not name yet."""
    if pod_group["metadata"].get("deletionTimestamp"):
        return {}
    recorded = {
        entry.get("name")
        for entry in (pod_group.get("status") or {}).get("resourceClaimStatuses") or []
        if entry.get("resourceClaimName")
    }
    return {
        entry["name"]: entry["resourceClaimTemplateName"]
        for entry in (pod_group.get("spec") or {}).get("resourceClaims") or []
        if entry.get("name") and entry.get("resourceClaimTemplateName") and entry["name"] not in recorded
    }


def claim_for_pod_group(pod_group: JsonObject, claim_name: str, template: JsonObject) -> JsonObject:
    meta = pod_group["metadata"]
    template_spec = template.get("spec") or {}
    template_meta = template_spec.get("metadata") or {}
    annotations = {**(template_meta.get("annotations") or {}), POD_GROUP_CLAIM_ANNOTATION: claim_name}
    metadata: JsonObject = {
        "generateName": generate_name(meta["name"], claim_name),
        "namespace": meta["namespace"],
        "annotations": annotations,
        "ownerReferences": [
            {
                "apiVersion": pod_group["apiVersion"],
                "kind": "PodGroup",
                "name": meta["name"],
                "uid": meta["uid"],
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


class PodGroupClaimController:
    def __init__(self, http: KubeHttp, pod_groups: Informer, claims: Informer, group_version: str) -> None:
        self.http = http
        self.group_version = group_version
        self.pod_groups = pod_groups
        self.claims = claims
        self.templates = Informer(http, TEMPLATES_PATH)
        self._templates_task: asyncio.Task[None] | None = None
        # one worker: two syncs of one PodGroup at once would both create its claim
        self._queue = WorkQueue(self._sync, workers=1, name="podgroup-claims")
        pod_groups.add_handler(self._on_pod_group_event)

    def start(self) -> None:
        self._templates_task = asyncio.create_task(self.templates.run(), name="sim-podgroup-templates-watch")
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()
        if self._templates_task is not None:
            self._templates_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._templates_task
            self._templates_task = None

    def _on_pod_group_event(self, event_type: str, pod_group: JsonObject) -> None:
        if event_type != "DELETED" and unrecorded_template_claims(pod_group):
            self._queue.add(object_key(pod_group))

    def _owned_claims(self, uid: str) -> dict[str, str]:
        """PodGroup claim name -> claim name, of the claims the PodGroup controls."""
        owned: dict[str, str] = {}
        for claim in self.claims.cache.values():
            meta = claim["metadata"]
            if any(o.get("controller") and o.get("uid") == uid for o in meta.get("ownerReferences") or []):
                owned[(meta.get("annotations") or {}).get(POD_GROUP_CLAIM_ANNOTATION, "")] = meta["name"]
        return owned

    async def _template(self, namespace: str, name: str) -> JsonObject:
        cached = self.templates.cache.get(f"{namespace}/{name}")
        if cached is not None:
            return cached
        return await self.http.get(
            f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}"
        )

    async def _sync(self, key: str) -> None:
        pod_group = self.pod_groups.cache.get(key)
        if pod_group is None:
            return
        wanted = unrecorded_template_claims(pod_group)
        if not wanted:
            return
        meta = pod_group["metadata"]
        namespace = meta["namespace"]
        owned = self._owned_claims(meta["uid"])
        for claim_name, template_name in wanted.items():
            if claim_name in owned:
                continue
            try:
                template = await self._template(namespace, template_name)
            except ApiError as exc:
                if exc.status == 404:
                    # upstream retries until the template appears; its creation will not wake us
                    self._queue.add_after(key, 1.0)
                    return
                raise
            created = await self.http.create(
                claims_path(namespace), claim_for_pod_group(pod_group, claim_name, template)
            )
            # a retry before the watch delivers the claim must find it instead of creating another
            self.claims.cache.setdefault(object_key(created), created)
            owned[claim_name] = created["metadata"]["name"]
            log.debug("created podgroup resource claim", podgroup=key, claim=object_key(created))
        recorded = [
            entry
            for entry in (pod_group.get("status") or {}).get("resourceClaimStatuses") or []
            if entry.get("name") not in wanted
        ]
        statuses = recorded + [
            {"name": name, "resourceClaimName": owned[name]} for name in sorted(wanted) if name in owned
        ]
        await self.http.patch(
            f"{pod_groups_path(self.group_version, namespace)}/{meta['name']}/status",
            {
                "metadata": {"resourceVersion": meta.get("resourceVersion")},
                "status": {"resourceClaimStatuses": statuses},
            },
        )
