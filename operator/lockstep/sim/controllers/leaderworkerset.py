"""A minimal LeaderWorkerSet controller (kubernetes-sigs/lws): each of ``replicas`` groups gets its
leader ``<lws>-<i>`` (from leaderTemplate, else workerTemplate) and ``size - 1`` workers
``<lws>-<i>-<j>``, labelled as LWS labels them (``leaderworkerset.sigs.k8s.io/name``,
``group-index``, ``worker-index``, ``group-key``) and annotated with the group ``size`` (workers also
with ``leader-name``). With ``startupPolicy: LeaderReady`` the workers come once the leader runs.

Differences from upstream: the pods are controlled by the LeaderWorkerSet itself, not by a leader
StatefulSet and per-group worker StatefulSets; no Services, rolling updates or group restarts."""

from __future__ import annotations

import hashlib

from lockstep.sim.controllers.owned_pods import PodOwnerController, pod_from
from lockstep.sim.registry import leaderworkerset as api
from lockstep.sim.watching import ApiError, JsonObject, KubeHttp

PATH = f"/apis/{api.GROUP}/{api.VERSION}/leaderworkersets"


async def desired_pods(http: KubeHttp, lws: JsonObject) -> tuple[list[JsonObject], bool]:
    meta, spec = lws["metadata"], lws.get("spec") or {}
    template = spec.get("leaderWorkerTemplate") or {}
    size, replicas = int(template.get("size", 1)), int(spec.get("replicas", 1))
    worker_template = template.get("workerTemplate") or {}
    leader_template = template.get("leaderTemplate") or worker_template
    pods, waiting = [], False
    for group in range(replicas):
        leader = f"{meta['name']}-{group}"
        labels = {
            api.NAME_LABEL: meta["name"],
            api.GROUP_INDEX_LABEL: str(group),
            api.GROUP_KEY_LABEL: hashlib.sha1(f"{meta['namespace']}/{leader}".encode()).hexdigest(),
        }
        annotations = {api.SIZE_ANNOTATION: str(size)}
        pods.append(
            pod_from(lws, leader_template, leader, {**labels, api.WORKER_INDEX_LABEL: "0"}, annotations)
        )
        if size > 1 and spec.get("startupPolicy") == "LeaderReady" and not await _running(http, meta, leader):
            waiting = True
            continue
        for worker in range(1, size):
            pods.append(
                pod_from(
                    lws,
                    worker_template,
                    f"{leader}-{worker}",
                    {**labels, api.WORKER_INDEX_LABEL: str(worker)},
                    {**annotations, api.LEADER_NAME_ANNOTATION: leader},
                )
            )
    return pods, waiting


async def _running(http: KubeHttp, meta: JsonObject, name: str) -> bool:
    try:
        pod = await http.get(f"/api/v1/namespaces/{meta['namespace']}/pods/{name}")
    except ApiError:
        return False
    return (pod.get("status") or {}).get("phase") == "Running"


class LeaderWorkerSetController(PodOwnerController):
    def __init__(self, http: KubeHttp) -> None:
        super().__init__(http, PATH, desired_pods, "leaderworkerset-controller")
