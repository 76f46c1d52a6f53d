"""Gangs from owners: the pods of a Job, JobSet, LeaderWorkerSet, PyTorchJob, TrainJob or RayCluster
become a gang whose minCount their owner's spec gives (``lockstep.api.owners``), with no PodGroup
written by the user, through the PodGroup lockstep creates for pod template lines (``TemplateGangs``).

- A pod labelled ``scheduling.lockstep.dev/pod-group: NAME`` without the min-count annotation asks for
  the minCount of its owner.
- With ``--infer-gangs`` naming its owner's kind, a pod without the label joins the gang named after
  its owner (``<lws>-<group index>`` for a LeaderWorkerSet): lockstep gives it the label in memory,
  before anything else reads the pod, and never writes it. Until its owner is read it waits under the
  name its labels suggest, with no PodGroup.

Owners are read with lockstep's own list+watch, started when API discovery first shows their kind
(at start and every 30 s, like upstream's PodGroups); a kind the cluster does not serve costs one
discovery request per interval. An owner whose spec gives no gang (a JobSet with zero replicas, a
LeaderWorkerSet of size 0) gets a Warning Event ``InvalidGangSpec`` naming the field, and its pods
wait with no PodGroup.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Coroutine, Iterable
from typing import Any

import aiohttp

from lockstep import POD_GROUP_LABEL
from lockstep.api import owners
from lockstep.api.owners import Gang, Owner, OwnerKind
from lockstep.api.pod import (
    COSCHEDULING_POD_GROUP_LABEL,
    KUEUE_POD_GROUP_NAME_LABEL,
    VOLCANO_GROUP_NAME_ANNOTATION,
)
from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION, Ask
from lockstep.kube.client import (
    JOBS,
    JOBSETS,
    LEADER_WORKER_SETS,
    PYTORCH_JOBS,
    RAY_CLUSTERS,
    ApiError,
    KubeClient,
    ResourceKind,
)
from lockstep.kube.events import WARNING, EventRecorder, ObjectReference
from lockstep.kube.watch import RawWatch
from lockstep.logging import get_logger

log = get_logger("lockstep.controller.owner_gangs")

WATCHED: dict[OwnerKind, ResourceKind] = {
    owners.JOB: JOBS,
    owners.JOBSET: JOBSETS,
    owners.LEADER_WORKER_SET: LEADER_WORKER_SETS,
    owners.PYTORCH_JOB: PYTORCH_JOBS,
    owners.RAY_CLUSTER: RAY_CLUSTERS,
}
OwnerKey = tuple[OwnerKind, str, str]  # kind, namespace, name
PodKey = tuple[str, str]  # namespace, name
PodSink = Callable[[str, dict[str, Any]], None]


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


def _pod_key(pod: dict[str, Any]) -> PodKey:
    meta = _meta(pod)
    return str(meta.get("namespace") or "default"), str(meta.get("name"))


class OwnerGangs:
    """The owners read so far and the pods that wait on them. ``replay`` re-delivers a pod (as the
    runtime's pod sink does) when what its owner says changes."""

    def __init__(self, scheduler_name: str, infer_kinds: Iterable[str], events: EventRecorder) -> None:
        self.scheduler_name = scheduler_name
        self.infer_kinds = frozenset(owners.KIND_BY_NAME[name] for name in infer_kinds)
        self.events = events
        self.replay: PodSink | None = None
        self._owners: dict[OwnerKey, Owner] = {}
        self._pods: dict[PodKey, tuple[OwnerKey, dict[str, Any]]] = {}  # as the API showed them
        self._by_owner: dict[OwnerKey, set[PodKey]] = {}
        self._inferred: dict[PodKey, str] = {}  # pods given the label in memory, and its value
        self._reported: dict[str, str] = {}  # owner uid -> problem already reported

    # --- pods --------------------------------------------------------------------------------------------

    def on_pod(self, event_type: str, pod: dict[str, Any]) -> dict[str, Any]:
        """Remember a pod that waits on its owner; return it as the rest of lockstep should see it
        (with the inferred gang's label, in flag mode)."""
        key = _pod_key(pod)
        labels = _meta(pod).get("labels") or {}
        if event_type == "DELETED":
            name = self._inferred.get(key)
            self._forget(key)
            return pod if name is None else self._labelled(pod, labels, name)
        found = owners.owner_of_pod(pod)
        spec = pod.get("spec") or {}
        annotations = _meta(pod).get("annotations") or {}
        if (
            found is None
            or spec.get("schedulerName") != self.scheduler_name
            or MIN_COUNT_ANNOTATION in annotations
        ):
            self._forget(key)
            return pod
        kinds = {found[0], owners.TRAIN_JOB} if found[0] is owners.JOBSET else {found[0]}
        in_other_group = (
            spec.get("schedulingGroup")
            or labels.get(COSCHEDULING_POD_GROUP_LABEL)
            or labels.get(KUEUE_POD_GROUP_NAME_LABEL)
            or annotations.get(VOLCANO_GROUP_NAME_ANNOTATION)
        )
        if not labels.get(POD_GROUP_LABEL) and (not kinds & self.infer_kinds or in_other_group):
            # neither labelled nor of a kind whose gangs are inferred; or already in a group of
            # another shape (upstream's, as a Job with 1.37's spec.scheduling; coscheduling's,
            # Volcano's, Kueue's), which is its gang
            self._forget(key)
            return pod
        owner_key = (found[0], key[0], found[1])
        previous = self._pods.get(key)
        if previous is not None and previous[0] != owner_key:
            self._forget(key)
        self._pods[key] = (owner_key, pod)
        self._by_owner.setdefault(owner_key, set()).add(key)
        name = None if labels.get(POD_GROUP_LABEL) else self._inferred_name(owner_key, pod)
        if name is None:
            self._inferred.pop(key, None)
            return pod
        self._inferred[key] = name
        return self._labelled(pod, labels, name)

    @staticmethod
    def _labelled(pod: dict[str, Any], labels: dict[str, Any], name: str) -> dict[str, Any]:
        return {**pod, "metadata": {**_meta(pod), "labels": {**labels, POD_GROUP_LABEL: name}}}

    def _inferred_name(self, owner_key: OwnerKey, pod: dict[str, Any]) -> str | None:
        owner = self._owners.get(owner_key)
        if owner is None:
            # not read yet: wait under the likely name (the caller checked its kind may be inferred)
            kind, _, name = owner_key
            return owners.guessed_gang_name(kind, name, pod)
        if owners.top_kind(owner) not in self.infer_kinds:
            return None
        gang = owners.gang_for(owner, pod, None)
        if isinstance(gang, Gang):
            return gang.name
        if gang is None:
            return None
        # a problem: the pods wait (no PodGroup is made) under the owner's name
        return owners.guessed_gang_name(owner.kind, owner.name, pod)

    def ask(self, pod: dict[str, Any], group: str) -> Ask | str | None:
        """The minCount a pod of ``group`` without the annotation asks for (TemplateGangs' ``infer``)."""
        key = _pod_key(pod)
        known = self._pods.get(key)
        if known is None:
            return None
        owner = self._owners.get(known[0])
        if owner is None:
            return None
        gang = owners.gang_for(owner, pod, None if key in self._inferred else group)
        if isinstance(gang, str):
            self._report(owner, gang)
            return gang
        if gang is None or gang.name != group:
            return None
        return Ask(gang.min_count, gang.owner.as_owner_reference(), from_owner=True)

    def _forget(self, key: PodKey) -> None:
        known = self._pods.pop(key, None)
        self._inferred.pop(key, None)
        if known is not None:
            pods = self._by_owner.get(known[0])
            if pods is not None:
                pods.discard(key)
                if not pods:
                    del self._by_owner[known[0]]

    # --- owners --------------------------------------------------------------------------------------------

    def sink(self, kind: OwnerKind) -> PodSink:
        def deliver(event_type: str, raw: dict[str, Any]) -> None:
            self.on_owner(kind, event_type, raw)

        return deliver

    def on_owner(self, kind: OwnerKind, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        key = (kind, str(meta.get("namespace") or "default"), str(meta.get("name")))
        if event_type == "DELETED":
            self._owners.pop(key, None)
            self._reported.pop(str(meta.get("uid") or ""), None)
            return
        owner = owners.PARSERS[kind](raw)
        previous = self._owners.get(key)
        self._owners[key] = owner
        if owner.problem and owners.top_kind(owner) in self.infer_kinds:
            self._report(owner, owner.problem)
        if previous != owner:
            self._replay(key)

    def forget_kind(self, kind: OwnerKind) -> None:
        """The cluster stopped serving ``kind``: its owners are gone."""
        for key in [k for k in self._owners if k[0] is kind]:
            del self._owners[key]
            self._replay(key)

    def _replay(self, key: OwnerKey) -> None:
        if self.replay is None:
            return
        for pod_key in list(self._by_owner.get(key, ())):
            known = self._pods.get(pod_key)
            if known is not None:
                self.replay("MODIFIED", known[1])

    def _report(self, owner: Owner, problem: str) -> None:
        if self._reported.get(owner.uid) == problem:
            return
        self._reported[owner.uid] = problem
        log.warning("no gang inferred", owner=owner.what, error=problem)
        reference = ObjectReference(
            owner.kind.kind, owner.namespace, owner.name, owner.uid, owner.kind.api_version
        )
        self.events.record(reference, WARNING, "InvalidGangSpec", problem)


Spawn = Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]]


class OwnerWatches:
    """Watches each owner kind while the cluster serves it (API discovery at start and on every
    :meth:`discover`); a kind whose CRD is removed stops being watched and its owners are forgotten."""

    def __init__(
        self,
        client: KubeClient,
        gangs: OwnerGangs,
        namespaces: list[str | None],
        spawn: Spawn,
        retry_delay: float = 0.5,
    ) -> None:
        self.client = client
        self.gangs = gangs
        self.namespaces = namespaces
        self.spawn = spawn
        self.retry_delay = retry_delay
        self._watching: dict[OwnerKind, asyncio.Task[Any]] = {}

    async def discover(self) -> None:
        """Every owner kind at once: one after the other, their discovery requests and lists took
        50-80 ms of start-up before the pods could be listed (bench/startup.py)."""
        await asyncio.gather(*(self._discover(owner_kind, kind) for owner_kind, kind in WATCHED.items()))

    async def _discover(self, owner_kind: OwnerKind, kind: ResourceKind) -> None:
        try:
            served = await self.client.serves(kind)
        except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("API discovery failed, retrying", resource=kind.plural, error=str(exc))
            return
        task = self._watching.get(owner_kind)
        if served and (task is None or task.done()):
            await self._watch(owner_kind, kind)
        elif not served and task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            del self._watching[owner_kind]
            self.gangs.forget_kind(owner_kind)
            log.info("owner kind no longer served", api=kind.api_version, kind=kind.kind)

    async def _watch(self, owner_kind: OwnerKind, kind: ResourceKind) -> None:
        watches = [
            RawWatch(
                self.client,
                kind,
                self.gangs.sink(owner_kind),
                namespace=namespace,
                retry_delay=self.retry_delay,
            )
            for namespace in self.namespaces
        ]
        try:
            await asyncio.gather(*(watch.sync() for watch in watches))
        except ApiError as exc:
            if exc.not_found:  # gone again between discovery and the list
                return
            raise
        log.info("watching owners", api=kind.api_version, kind=kind.kind)

        async def follow() -> None:
            await asyncio.gather(*(watch.run() for watch in watches))

        self._watching[owner_kind] = self.spawn(follow(), f"watch-{kind.plural}")
