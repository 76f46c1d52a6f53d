"""A minimal JobSet controller (kubernetes-sigs/jobset): enough for a JobSet to own real Jobs, whose
pods the simulated Job controller makes.

For an unsuspended JobSet, each replicatedJob gets ``replicas`` child Jobs named
``<jobset>-<replicatedJob>-<index>``, controlled by the JobSet, made from its template with the labels
and annotations the JobSet controller writes on Jobs and their pod templates
(``jobset.sigs.k8s.io/jobset-name``, ``replicatedjob-name``, ``job-index``, ...) and
``completionMode: Indexed`` when the template sets none (the JobSet webhook's default).

Out of scope: startupPolicy InOrder and dependsOn (every replicatedJob is created at once), success
and failure policies, restarts, the headless Service, JobSet status.
"""

from __future__ import annotations

import copy

import structlog

from lockstep.sim.registry import jobset as api
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, ObjectController

log = structlog.get_logger("lockstep.sim.controllers.jobset")

JOBSETS_PATH = f"/apis/{api.GROUP}/{api.VERSION}/jobsets"


def child_jobs(jobset: JsonObject) -> list[JsonObject]:
    """The Jobs the JobSet should have now."""
    meta, spec = jobset["metadata"], jobset.get("spec") or {}
    if spec.get("suspend") or meta.get("deletionTimestamp"):
        return []
    replicated = spec.get("replicatedJobs") or []
    global_replicas = sum(int(rj.get("replicas", 1)) for rj in replicated)
    jobs, global_index = [], 0
    for rj in replicated:
        replicas = int(rj.get("replicas", 1))
        for index in range(replicas):
            jobs.append(_child(jobset, rj, index, global_index, replicas, global_replicas))
            global_index += 1
    return jobs


def _child(
    jobset: JsonObject, rj: JsonObject, index: int, global_index: int, replicas: int, global_replicas: int
) -> JsonObject:
    meta = jobset["metadata"]
    template = copy.deepcopy(rj.get("template") or {})
    marks = {
        api.JOBSET_NAME_LABEL: meta["name"],
        api.JOBSET_UID_LABEL: meta["uid"],
        api.REPLICATED_JOB_NAME_LABEL: rj["name"],
        api.REPLICATED_JOB_REPLICAS_LABEL: str(replicas),
        api.JOB_INDEX_LABEL: str(index),
        api.JOB_GLOBAL_INDEX_LABEL: str(global_index),
        api.GLOBAL_REPLICAS_LABEL: str(global_replicas),
    }
    job_meta = template.get("metadata") or {}
    job_spec = template.setdefault("spec", {})
    job_spec.setdefault("completionMode", "Indexed")
    pod_meta = job_spec.setdefault("template", {}).setdefault("metadata", {})
    for target in (job_meta, pod_meta):
        target["labels"] = {**(target.get("labels") or {}), **marks}
        target["annotations"] = {**(target.get("annotations") or {}), **marks}
    job_meta.update(
        name=f"{meta['name']}-{rj['name']}-{index}",
        namespace=meta["namespace"],
        ownerReferences=[
            {
                "apiVersion": f"{api.GROUP}/{api.VERSION}",
                "kind": "JobSet",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    )
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": job_meta, "spec": job_spec}


class JobSetController(ObjectController):
    def __init__(self, http: KubeHttp) -> None:
        self.http = http
        self.jobsets = Informer(http, JOBSETS_PATH)
        self._created: set[tuple[str, str]] = set()  # (jobset uid, job name)
        super().__init__(self.jobsets, "jobset-controller")

    async def sync(self, key: str) -> None:
        jobset = self.jobsets.cache.get(key)
        if jobset is None:
            return
        uid = jobset["metadata"]["uid"]
        for job in child_jobs(jobset):
            name = job["metadata"]["name"]
            if (uid, name) in self._created:
                continue
            try:
                await self.http.create(f"/apis/batch/v1/namespaces/{job['metadata']['namespace']}/jobs", job)
            except ApiError as exc:
                if exc.status in (403, 422):
                    log.warning("cannot create a job of the jobset", jobset=key, error=str(exc))
                    return
                if exc.status != 409:
                    raise
            self._created.add((uid, name))
