"""A minimal Job controller (kube-controller-manager's ``pkg/controller/job``): enough for a Job to own
real pods.

- It keeps ``spec.parallelism`` pods of an unsuspended Job alive (fewer when ``completions`` leaves
  fewer to run), made from ``spec.template`` with a controller ownerReference to the Job, so the
  garbage collector deletes them with it.
- Indexed Jobs: each pod gets a free completion index as the label and annotation
  ``batch.kubernetes.io/job-completion-index``, the hostname ``<job>-<index>`` and the environment
  variable ``JOB_COMPLETION_INDEX``, as upstream's pods do.
- ``status.active`` counts the pods that are neither finished nor being deleted, ``status.succeeded``
  and ``status.failed`` the finished ones that still exist.
- Once ``spec.completions`` pods succeeded (an Indexed Job: one per index), the Job gets the conditions
  SuccessCriteriaMet and Complete (reason ``CompletionsReached``) and ``completionTime``; a succeeded
  pod (an Indexed Job: a succeeded index) is not replaced, whenever the others finish.
- A failed pod is replaced (an Indexed Job: its index gets a new pod) while ``status.failed`` is at
  most ``spec.backoffLimit`` (default 6). One failure more and the Job fails as upstream's
  ``exceedsBackoffLimit``: conditions FailureTarget and Failed, reason ``BackoffLimitExceeded``,
  message "Job has reached the specified backoff limit"; its active pods are deleted and nothing is
  created any more. Failures are remembered by pod uid, as the pod tracking finalizer makes upstream
  count a failed pod that was deleted since.
- From 1.37, with ``WorkloadWithJob``: the Job's Workload and PodGroup, created before its pods, and
  the pods' ``spec.schedulingGroup`` (``job_scheduling.py``).

Out of scope: the delay before a failed pod is replaced (upstream backs off from 10 s), podFailurePolicy,
backoffLimitPerIndex, successPolicy, the pod tracking finalizer itself (a deleted succeeded pod is no
longer counted), Complete waiting for terminating pods.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from lockstep.sim.controllers import events_path, object_event
from lockstep.sim.controllers import job_scheduling as scheduling
from lockstep.sim.objectmeta import now_rfc3339
from lockstep.sim.watching import ApiError, Informer, JsonObject, KubeHttp, WorkQueue, object_key

log = structlog.get_logger("lockstep.sim.controllers.job")

JOBS_PATH = "/apis/batch/v1/jobs"
COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
COMPLETION_INDEX_ENV = "JOB_COMPLETION_INDEX"


def controlling_job_uid(pod: JsonObject) -> str | None:
    for owner in pod.get("metadata", {}).get("ownerReferences") or []:
        if owner.get("controller") and owner.get("apiVersion") == "batch/v1" and owner.get("kind") == "Job":
            return str(owner.get("uid", ""))
    return None


def is_active(pod: JsonObject) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in (
        "Succeeded",
        "Failed",
    )


def pods_to_create(job: JsonObject, pods: list[JsonObject]) -> list[int | None]:
    """The completion indexes (None for a NonIndexed Job) of the pods the Job lacks now."""
    spec = job.get("spec") or {}
    if (
        spec.get("suspend")
        or job["metadata"].get("deletionTimestamp")
        or (job.get("status") or {}).get("completionTime")
        or finished_condition(job) is not None
    ):
        return []
    parallelism = int(spec.get("parallelism") or 0)
    completions = spec.get("completions")
    active = [pod for pod in pods if is_active(pod)]
    succeeded = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Succeeded"]
    if spec.get("completionMode") != "Indexed":
        wanted = parallelism if completions is None else min(parallelism, int(completions) - len(succeeded))
        return [None] * max(wanted - len(active), 0)
    taken = {pod["metadata"].get("annotations", {}).get(COMPLETION_INDEX) for pod in [*active, *succeeded]}
    free = [index for index in range(int(completions or 0)) if str(index) not in taken]
    return list(free[: max(parallelism - len(active), 0)])


def completed(job: JsonObject, pods: list[JsonObject]) -> bool:
    spec = job.get("spec") or {}
    completions = spec.get("completions")
    if not isinstance(completions, int):
        return False
    succeeded = [pod for pod in pods if (pod.get("status") or {}).get("phase") == "Succeeded"]
    if spec.get("completionMode") != "Indexed":
        return len(succeeded) >= completions
    done = {pod["metadata"].get("annotations", {}).get(COMPLETION_INDEX) for pod in succeeded}
    return all(str(index) in done for index in range(completions))


def completion_status(when: str) -> JsonObject:
    message = "Reached expected number of succeeded pods"
    return {
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": "CompletionsReached",
                "message": message,
                "lastProbeTime": when,
                "lastTransitionTime": when,
            }
            for kind in ("SuccessCriteriaMet", "Complete")
        ],
        "completionTime": when,
    }


BACKOFF_LIMIT_EXCEEDED = "BackoffLimitExceeded"
BACKOFF_LIMIT_MESSAGE = "Job has reached the specified backoff limit"


def finished_condition(job: JsonObject) -> str | None:
    """``Complete`` or ``Failed`` when the Job has that condition True (it then creates no pods)."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return str(condition["type"])
    return None


def exceeds_backoff_limit(job: JsonObject, failures: int) -> bool:
    """upstream's ``exceedsBackoffLimit``: more failed pods than ``spec.backoffLimit``."""
    limit = (job.get("spec") or {}).get("backoffLimit")
    return isinstance(limit, int) and failures > limit


def failure_status(when: str) -> JsonObject:
    """FailureTarget then Failed, as a Job controller with the pod replacement policy writes them
    (here at once: the active pods are deleted in the same sync)."""
    return {
        "conditions": [
            {
                "type": kind,
                "status": "True",
                "reason": BACKOFF_LIMIT_EXCEEDED,
                "message": BACKOFF_LIMIT_MESSAGE,
                "lastProbeTime": when,
                "lastTransitionTime": when,
            }
            for kind in ("FailureTarget", "Failed")
        ],
    }


def pod_from_template(job: JsonObject, index: int | None, pod_group: str | None = None) -> JsonObject:
    meta = job["metadata"]
    template = (job.get("spec") or {}).get("template") or {}
    template_meta = template.get("metadata") or {}
    labels = dict(template_meta.get("labels") or {})
    annotations = dict(template_meta.get("annotations") or {})
    spec: dict[str, Any] = dict(template.get("spec") or {})
    generate_name = f"{meta['name']}-"
    if index is not None:
        labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        generate_name = f"{meta['name']}-{index}-"
        spec.setdefault("hostname", f"{meta['name']}-{index}")
        index_env = {
            "name": COMPLETION_INDEX_ENV,
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}},
        }
        spec["containers"] = [
            {**container, "env": [*(container.get("env") or []), index_env]}
            for container in spec.get("containers") or []
        ]
    if pod_group is not None:
        spec["schedulingGroup"] = {"podGroupName": pod_group}
    metadata: JsonObject = {
        "generateName": generate_name,
        "namespace": meta["namespace"],
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": meta["name"],
                "uid": meta["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if labels:
        metadata["labels"] = labels
    if annotations:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


class JobController:
    """``scheduling_version`` (``scheduling.k8s.io/v1beta1``) with the ``workloads`` and
    ``podgroups`` informers of that version turns on the Workload and PodGroup half
    (``WorkloadWithJob``)."""

    def __init__(
        self,
        http: KubeHttp,
        pods: Informer,
        *,
        scheduling_version: str | None = None,
        workloads: Informer | None = None,
        pod_groups: Informer | None = None,
    ) -> None:
        self.http = http
        self.jobs = Informer(http, JOBS_PATH)
        self.scheduling_version = scheduling_version
        self.workloads = workloads
        self.pod_groups = pod_groups
        # objects this controller created, by key, until their informer has them
        self._created: dict[str, JsonObject] = {}
        # deleted Jobs (key -> uid) whose late dependents are still to be collected
        self._gone: dict[str, str] = {}
        # job uid -> pod key -> pod; pods this controller created are added before their watch event
        self._pods_by_job: dict[str, dict[str, JsonObject]] = {}
        self._job_keys: dict[str, str] = {}
        self._failed_uids: dict[str, set[str]] = {}  # job uid -> its pods seen Failed, deleted or not
        # one worker: two syncs of one Job at once would both create its missing pods
        self._queue = WorkQueue(self._sync, workers=1, name="job-controller")
        self._task: asyncio.Task[None] | None = None
        pods.add_handler(self._on_pod_event)
        self.jobs.add_handler(self._on_job_event)
        for informer in (workloads, pod_groups):
            if informer is not None:
                informer.add_handler(self._on_owned_event)

    def start(self) -> None:
        self._task = asyncio.create_task(self.jobs.run(), name="sim-jobs-watch")
        self._queue.start()

    async def stop(self) -> None:
        await self._queue.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    def _on_job_event(self, event_type: str, job: JsonObject) -> None:
        key, uid = object_key(job), job["metadata"].get("uid", "")
        if event_type == "DELETED":
            self._job_keys.pop(uid, None)
            self._gone[key] = uid
            self._queue.add(key)
            self._failed_uids.pop(uid, None)
            return
        self._job_keys[uid] = key
        self._queue.add(key)

    def _on_owned_event(self, event_type: str, obj: JsonObject) -> None:
        uid = obj["metadata"].get("uid")
        for key in [k for k, o in self._created.items() if o["metadata"].get("uid") == uid]:
            del self._created[key]
        job_key = self._job_keys.get(controlling_job_uid(obj) or "")
        if job_key is not None:
            self._queue.add(job_key)

    def _on_pod_event(self, event_type: str, pod: JsonObject) -> None:
        uid = controlling_job_uid(pod)
        if uid is None:
            return
        owned = self._pods_by_job.setdefault(uid, {})
        if (pod.get("status") or {}).get("phase") == "Failed":
            self._failed_uids.setdefault(uid, set()).add(str(pod["metadata"].get("uid", "")))
        if event_type == "DELETED":
            owned.pop(object_key(pod), None)
        else:
            owned[object_key(pod)] = pod
        job_key = self._job_keys.get(uid)
        if job_key is not None:
            self._queue.add(job_key)

    async def _sync(self, key: str) -> None:
        job = self.jobs.cache.get(key)
        if job is None:
            uid = self._gone.pop(key, None)
            if uid is not None:
                await self._collect_orphans(uid)
            return
        meta = job["metadata"]
        owned = self._pods_by_job.setdefault(meta["uid"], {})
        failures = len(self._failed_uids.get(meta["uid"], ()))
        if finished_condition(job) is None and exceeds_backoff_limit(job, failures):
            await self._fail(job, list(owned.values()), failures)
            return
        try:
            pod_group = await self._ensure_workload_and_pod_group(job, list(owned.values()))
        except ApiError as exc:
            # upstream requeues with backoff and creates no pods until the objects exist
            log.warning("cannot create the job's Workload or PodGroup", job=key, error=str(exc))
            return
        for index in pods_to_create(job, list(owned.values())):
            try:
                created = await self.http.create(
                    f"/api/v1/namespaces/{meta['namespace']}/pods", pod_from_template(job, index, pod_group)
                )
            except ApiError as exc:
                # a namespace being deleted, or a template the API rejects: nothing to retry
                if exc.status in (403, 422):
                    log.warning("cannot create a pod of the job", job=key, error=str(exc))
                    return
                raise
            owned[object_key(created)] = created
        pods = list(owned.values())
        phases = [(pod.get("status") or {}).get("phase") for pod in pods]
        status: JsonObject = {
            "active": sum(1 for pod in pods if is_active(pod)) or None,
            "succeeded": phases.count("Succeeded") or None,
            "failed": failures or None,
        }
        current = job.get("status") or {}
        if not current.get("completionTime") and completed(job, pods):
            status.update(completion_status(now_rfc3339()))
        if any(current.get(field) != value for field, value in status.items()):
            with contextlib.suppress(ApiError):
                await self.http.patch(
                    f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
                    {"status": status},
                )

    async def _fail(self, job: JsonObject, pods: list[JsonObject], failures: int) -> None:
        """The backoff limit is exceeded: delete the active pods and mark the Job Failed."""
        meta = job["metadata"]
        for pod in pods:
            if is_active(pod):
                with contextlib.suppress(ApiError):
                    await self.http.delete(
                        f"/api/v1/namespaces/{meta['namespace']}/pods/{pod['metadata']['name']}"
                    )
        status: JsonObject = {**failure_status(now_rfc3339()), "active": None, "failed": failures}
        log.info("job failed", job=f"{meta['namespace']}/{meta['name']}", reason=BACKOFF_LIMIT_EXCEEDED)
        with contextlib.suppress(ApiError):
            await self.http.patch(
                f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status",
                {"status": status},
            )

    async def _collect_orphans(self, uid: str) -> None:
        """Delete what a sync created for a Job deleted meanwhile: the API server's garbage collection ran
        at the Job's deletion, before these existed (upstream's garbage collector deletes dependents
        whose owner is gone whenever they appear)."""
        dependents = [("/api/v1", "pods", pod) for pod in self._pods_by_job.pop(uid, {}).values()]
        scheduling_base = f"/apis/{self.scheduling_version}"
        for plural, informer in (("workloads", self.workloads), ("podgroups", self.pod_groups)):
            if informer is not None:
                dependents += [(scheduling_base, plural, o) for o in informer.cache.values()]
        for key, obj in self._created.items():
            dependents.append(
                (scheduling_base, "workloads" if key.startswith("Workload/") else "podgroups", obj)
            )
        for base, plural, obj in dependents:
            meta = obj["metadata"]
            if controlling_job_uid(obj) != uid or meta.get("deletionTimestamp"):
                continue
            path = f"{base}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
            try:
                await self.http.delete(path, {"propagationPolicy": "Background"})
            except ApiError as exc:
                if exc.status != 404:
                    raise

    # -- the Workload and PodGroup half (job_scheduling_manager.go)

    def _controlled(self, informer: Informer | None, kind: str, job: JsonObject) -> list[JsonObject]:
        """The objects of the informer (and those just created) the Job controls, in its namespace."""
        if informer is None:
            return []
        meta = job["metadata"]
        found = {object_key(o): o for o in informer.cache.values()}
        for key, obj in self._created.items():
            if key.startswith(f"{kind}/"):
                found.setdefault(object_key(obj), obj)
        return [
            obj
            for obj in found.values()
            if obj["metadata"].get("namespace") == meta["namespace"]
            and controlling_job_uid(obj) == meta["uid"]
        ]

    async def _create(self, plural: str, obj: JsonObject) -> JsonObject:
        namespace = obj["metadata"]["namespace"]
        path = f"/apis/{self.scheduling_version}/namespaces/{namespace}/{plural}"
        created = await self.http.create(path, obj)
        self._created[f"{obj['kind']}/{object_key(created)}"] = created
        return created

    async def _event(self, job: JsonObject, reason: str, message: str) -> None:
        involved = {**job, "kind": "Job", "apiVersion": "batch/v1"}
        event = object_event(
            involved, "Normal", reason, message, {"component": "job-controller"}, now_rfc3339()
        )
        with contextlib.suppress(ApiError):
            await self.http.create(events_path(involved), event)

    async def _ensure_workload_and_pod_group(self, job: JsonObject, pods: list[JsonObject]) -> str | None:
        """``ensureWorkloadAndPodGroup`` of a root Job: the PodGroup its pods name, or None when the Job
        runs pod by pod."""
        version = self.scheduling_version
        if version is None or not scheduling.manages_scheduling(job):
            return None
        name, new_job = job["metadata"]["name"], scheduling.is_new_job(job, pods)
        spec_ref = {"apiGroup": "batch", "kind": "Job", "name": name}
        workloads = [
            w
            for w in self._controlled(self.workloads, "Workload", job)
            if (w.get("spec") or {}).get("controllerRef") == spec_ref
        ]
        if len(workloads) > 1:
            log.warning("several Workloads for the job, falling back to default scheduling", job=name)
            return None
        if not workloads:
            if not new_job:
                return None
            workload = await self._create("workloads", scheduling.workload_for(job, version))
            await self._event(
                job, "WorkloadCreated", f"Created Workload {workload['metadata']['name']} for Job {name}"
            )
        else:
            workload = workloads[0]
        templates = (workload.get("spec") or {}).get("podGroupTemplates") or []
        if len(templates) != 1:
            log.warning("the job's Workload has not exactly one PodGroupTemplate", job=name)
            return None
        wname = workload["metadata"]["name"]
        groups = [
            g
            for g in self._controlled(self.pod_groups, "PodGroup", job)
            if ((g.get("spec") or {}).get("workloadRef") or {}).get("workloadName") == wname
        ]
        pod_group: JsonObject | None
        if len(groups) > 1:
            log.warning(
                "several PodGroups for the job's Workload, falling back to default scheduling", job=name
            )
            pod_group = None
        elif groups:
            pod_group = groups[0]
        elif new_job:
            pod_group = await self._create("podgroups", scheduling.pod_group_for(job, workload, version))
            await self._event(
                job, "PodGroupCreated", f"Created PodGroup {pod_group['metadata']['name']} for Job {name}"
            )
        else:
            pod_group = None
        await self._sync_gang_min_count(job, workload, pod_group)
        return None if pod_group is None else str(pod_group["metadata"]["name"])

    async def _sync_gang_min_count(
        self, job: JsonObject, workload: JsonObject, pod_group: JsonObject | None
    ) -> None:
        """``syncGangMinCount``: a changed gang size goes onto the Workload's template and the PodGroup."""
        wanted = scheduling.desired_min_count(job)
        if wanted is None:
            return
        base = f"/apis/{self.scheduling_version}/namespaces/{job['metadata']['namespace']}"
        templates = [dict(t) for t in workload["spec"]["podGroupTemplates"]]
        gang = (templates[0].get("schedulingPolicy") or {}).get("gang")
        if gang is not None and gang.get("minCount") != wanted:
            templates[0]["schedulingPolicy"] = {"gang": {**gang, "minCount": wanted}}
            await self.http.patch(
                f"{base}/workloads/{workload['metadata']['name']}", {"spec": {"podGroupTemplates": templates}}
            )
        group_gang = ((pod_group or {}).get("spec", {}).get("schedulingPolicy") or {}).get("gang")
        if pod_group is not None and group_gang is not None and group_gang.get("minCount") != wanted:
            await self.http.patch(
                f"{base}/podgroups/{pod_group['metadata']['name']}",
                {"spec": {"schedulingPolicy": {"gang": {"minCount": wanted}}}},
            )
