"""Other schedulers' group shapes as the operator runs them: coscheduling and Volcano PodGroups (read
by ``lockstep.api.coscheduling`` / ``lockstep.api.volcano`` into the core's group model, their
status written in their own shape) and Kueue's plain pod groups (``lockstep.api.kueue``: a gang
made of its pods' label and annotation, no object of its own).

Status writes are coalesced: pod events and attempts only mark a group; a flush every
``FLUSH_SECONDS`` computes each marked group's status and writes it when it differs from the one
last seen, one strict (resourceVersion) merge patch per group at a time, re-reading on a conflict.
A coscheduling PodGroup's status is written through ``/status``; a Volcano PodGroup's CRD has no
status subresource, so its status is patched with the object, as Volcano's scheduler does.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from lockstep.api import coscheduling, kueue, volcano
from lockstep.api.groups import UnknownPriorityClassError
from lockstep.kube.client import DIALECT_POD_GROUP_KINDS, ApiError, KubeClient
from lockstep.kube.events import WARNING, EventRecorder, ObjectReference
from lockstep.kube.patching import strict_merge_patch
from lockstep.logging import get_logger
from lockstep.scheduler.framework import (
    DIALECT_COSCHEDULING,
    DIALECT_KUEUE,
    DIALECT_VOLCANO,
    Code,
    GroupKey,
    PodGroupInfo,
    PodInfo,
)
from lockstep.scheduler.records import GroupAttempt
from lockstep.state.cluster import ClusterCache

log = get_logger("lockstep.controller.dialects")

FLUSH_SECONDS = 0.1
MAX_MESSAGE = 4096
KINDS = dict(zip((DIALECT_COSCHEDULING, DIALECT_VOLCANO), DIALECT_POD_GROUP_KINDS, strict=True))
# causes of an attempt that keep a Volcano group out of the queue (not admitted: Pending, not Inqueue)
_NOT_ADMITTED = frozenset({"TooFewPods", "MinResources", "InvalidPodGroup"})


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class _Member:
    node_name: str
    phase: str
    owners: tuple[str, ...]


@dataclass(slots=True)
class _Attempt:
    code: Code
    message: str
    causes: Mapping[str, int]
    total: int


class Dialects:
    def __init__(
        self,
        client: KubeClient,
        events: EventRecorder,
        cache: ClusterCache,
        priority_classes: Mapping[str, int],
        report_invalid: Callable[[dict[str, Any], str], None],
    ) -> None:
        self.client = client
        self.events = events
        self.cache = cache
        self.priority_classes = priority_classes
        self.report_invalid = report_invalid
        self.leading = False
        self._objects: dict[GroupKey, dict[str, Any]] = {}  # coscheduling and Volcano PodGroups
        self._members: dict[GroupKey, dict[str, _Member]] = {}
        self._group_of: dict[str, GroupKey] = {}  # pod uid -> the dialect group it is counted in
        self._attempts: dict[GroupKey, _Attempt] = {}
        self._started: dict[GroupKey, str] = {}  # coscheduling scheduleStartTime: the first attempt
        self._reported: dict[GroupKey, int] = {}  # Volcano: generation whose unhonoured fields were told
        self._kueue: dict[tuple[str, str], dict[str, int | str]] = {}  # group -> pod -> total-count
        self._dirty: set[GroupKey] = set()
        self._flush: asyncio.TimerHandle | None = None
        self._writing: set[GroupKey] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    # --- objects --------------------------------------------------------------------------------------

    def on_coscheduling(self, event_type: str, raw: dict[str, Any]) -> None:
        self._on_object(DIALECT_COSCHEDULING, event_type, raw)

    def on_volcano(self, event_type: str, raw: dict[str, Any]) -> None:
        self._on_object(DIALECT_VOLCANO, event_type, raw)

    def _on_object(self, dialect: str, event_type: str, raw: dict[str, Any]) -> None:
        meta = raw.get("metadata") or {}
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        key = GroupKey(namespace, name, dialect=dialect)
        if event_type == "DELETED":
            self._objects.pop(key, None)
            self._attempts.pop(key, None)
            self._started.pop(key, None)
            self._reported.pop(key, None)
            self.cache.delete_podgroup(namespace, name, dialect=dialect)
            return
        try:
            info = (
                coscheduling.from_coscheduling(raw)
                if dialect == DIALECT_COSCHEDULING
                else volcano.from_volcano(raw, self.priority_classes)
            )
        except UnknownPriorityClassError as exc:
            info = PodGroupInfo(namespace=namespace, name=name, dialect=dialect, refusal=str(exc))
        if info.refusal:
            self.report_invalid(raw, info.refusal)
        if key not in self._objects:
            log.info(
                "admitted",
                podgroup=f"{namespace}/{name}",
                api=raw.get("apiVersion"),
                min_count=info.min_count,
            )
        self._objects[key] = raw
        if dialect == DIALECT_VOLCANO:
            self._report_not_honoured(key, raw)
        self.cache.upsert_podgroup(info)
        self.mark(key)

    def on_priority_class(self, name: str) -> None:
        """A PriorityClass changed: the Volcano PodGroups naming it get their priority again."""
        for key, raw in list(self._objects.items()):
            if key.dialect == DIALECT_VOLCANO and (raw.get("spec") or {}).get("priorityClassName") == name:
                self._on_object(DIALECT_VOLCANO, "MODIFIED", raw)

    def _report_not_honoured(self, key: GroupKey, raw: dict[str, Any]) -> None:
        generation = int((raw.get("metadata") or {}).get("generation") or 0)
        fields = volcano.not_honoured(raw.get("spec") or {})
        if not fields or self._reported.get(key) == generation:
            return
        self._reported[key] = generation
        message = f"lockstep does not honour {'; '.join(fields)}; the group is scheduled without them"
        log.warning("fields not honoured", podgroup=f"{key.namespace}/{key.name}", fields=fields)
        self.events.record(self.reference(key), WARNING, "NotHonoured", message)

    # --- pods -----------------------------------------------------------------------------------------

    @property
    def counted(self) -> Mapping[str, GroupKey]:
        """Pods (by uid) counted in a dialect group: their events matter here even when they no
        longer name one."""
        return self._group_of

    def on_pod(self, event_type: str, raw: Mapping[str, Any], pod: PodInfo | None) -> None:
        """Every pod event of ours (``pod`` is None for a deletion): the members each dialect group
        counts, and the gangs Kueue's labels make."""
        meta = raw.get("metadata") or {}
        uid = str(meta.get("uid") or "")
        key = pod.group_key if pod is not None and event_type != "DELETED" else None
        previous = self._group_of.get(uid)
        if previous is not None and previous != key:
            self._group_of.pop(uid, None)
            members = self._members.get(previous, {})
            members.pop(uid, None)
            if not members:
                self._members.pop(previous, None)
            self._forget_kueue_ask(previous, str(meta.get("name")))
            self.mark(previous)
        if pod is None or key is None or not key.dialect:
            return
        self._group_of[uid] = key
        owners = tuple(
            str(o.get("name")) for o in meta.get("ownerReferences") or [] if isinstance(o, Mapping)
        )
        member = _Member(pod.node_name, pod.phase, owners)
        if self._members.setdefault(key, {}).get(uid) != member:
            self._members[key][uid] = member
            self.mark(key)
        if key.dialect == DIALECT_KUEUE:
            self._kueue_ask(key, pod.name, kueue.total_count(meta.get("annotations") or {}))

    def _kueue_ask(self, key: GroupKey, pod: str, ask: int | str) -> None:
        asks = self._kueue.setdefault((key.namespace, key.name), {})
        if asks.get(pod) == ask:
            return
        asks[pod] = ask
        self.cache.upsert_podgroup(kueue.group_info(key.namespace, key.name, asks))

    def _forget_kueue_ask(self, key: GroupKey, pod: str) -> None:
        if key.dialect != DIALECT_KUEUE:
            return
        asks = self._kueue.get((key.namespace, key.name))
        if asks is None or asks.pop(pod, None) is None:
            return
        if asks:
            self.cache.upsert_podgroup(kueue.group_info(key.namespace, key.name, asks))
        else:
            del self._kueue[(key.namespace, key.name)]
            self.cache.delete_podgroup(key.namespace, key.name, dialect=DIALECT_KUEUE)

    # --- attempts and events --------------------------------------------------------------------------

    def on_attempt(self, attempt: GroupAttempt) -> None:
        key = attempt.group
        if key.dialect not in KINDS:
            return
        self._attempts[key] = _Attempt(
            attempt.code, attempt.message, dict(attempt.causes), attempt.total_pods
        )
        self._started.setdefault(key, _now())
        self.mark(key)

    def reference(self, key: GroupKey) -> ObjectReference:
        """What a dialect group's events are about: its PodGroup; a Kueue group's Workload, which
        Kueue names after the group."""
        if key.dialect == DIALECT_KUEUE:
            return ObjectReference("Workload", key.namespace, key.name, "", kueue.WORKLOAD_API_VERSION)
        raw = self._objects.get(key) or {}
        uid = str((raw.get("metadata") or {}).get("uid") or "")
        return ObjectReference("PodGroup", key.namespace, key.name, uid, KINDS[key.dialect].api_version)

    # --- status ---------------------------------------------------------------------------------------

    def mark(self, key: GroupKey) -> None:
        if key.dialect not in KINDS:
            return
        self._dirty.add(key)
        if self._flush is None and self.leading:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._flush_marked)

    def start_leading(self) -> None:
        self.leading = True
        self._dirty.update(self._objects)
        if self._dirty and self._flush is None:
            self._flush = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._flush_marked)

    def stop_leading(self) -> None:
        self.leading = False
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None

    def _flush_marked(self) -> None:
        self._flush = None
        for key in list(self._dirty):
            if key in self._writing:
                continue  # the running writer looks again when it is done
            self._dirty.discard(key)
            if key not in self._objects:
                continue
            self._writing.add(key)
            task = asyncio.get_running_loop().create_task(self._write(key))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def desired_status(self, key: GroupKey, raw: Mapping[str, Any]) -> dict[str, Any]:
        spec, current = raw.get("spec") or {}, dict(raw.get("status") or {})
        members = list(self._members.get(key, {}).values())
        running = sum(1 for m in members if m.phase == "Running")
        succeeded = sum(1 for m in members if m.phase == "Succeeded")
        failed = sum(1 for m in members if m.phase == "Failed")
        value = spec.get("minMember")
        min_member = max(value, 0) if isinstance(value, int) else 0
        counts = {"running": running, "succeeded": succeeded, "failed": failed}
        attempt = self._attempts.get(key)
        if key.dialect == DIALECT_COSCHEDULING:
            phase = coscheduling.phase_for(
                str(current.get("phase") or ""), max(min_member, 0), len(members), running, succeeded, failed
            )
            status: dict[str, Any] = {**current, "phase": phase, **counts}
            if not current.get("occupiedBy") and members and len(members) >= min_member:
                first = next((m for m in members if m.owners), None)
                if first is not None:
                    status["occupiedBy"] = coscheduling.occupied_by(key.namespace, first.owners)
            if key in self._started and not current.get("scheduleStartTime"):
                status["scheduleStartTime"] = self._started[key]
            return status
        allocated = sum(1 for m in members if m.node_name and m.phase in ("Pending", "Running"))
        live = sum(1 for m in members if m.phase not in ("Succeeded", "Failed"))
        phase = str(current.get("phase") or volcano.PENDING)
        if attempt is not None and attempt.code is not Code.SUCCESS and set(attempt.causes) & _NOT_ADMITTED:
            phase = volcano.PENDING if phase == volcano.INQUEUE else phase
        elif attempt is not None and phase == volcano.PENDING:
            phase = volcano.INQUEUE
        unschedulable = attempt is not None and attempt.code is not Code.SUCCESS
        phase = volcano.phase_for(
            phase, max(min_member, 0), allocated, running, succeeded, live, unschedulable
        )
        conditions = list(current.get("conditions") or [])
        if attempt is not None:
            conditions = _volcano_conditions(conditions, attempt, min_member, len(members) - allocated)
        return {**current, "phase": phase, **counts, "conditions": conditions}

    async def _write(self, key: GroupKey, attempts: int = 5) -> None:
        try:
            for _ in range(attempts):
                raw = self._objects.get(key)
                if raw is None:
                    return
                desired = self.desired_status(key, raw)
                if _same(raw.get("status") or {}, desired):
                    return
                meta = raw.get("metadata") or {}
                served_as = KINDS[key.dialect]
                version = str(meta.get("resourceVersion") or "")
                patch = {"status": desired}
                try:
                    if key.dialect == DIALECT_COSCHEDULING:
                        # rbac: patch podgroups.scheduling.x-k8s.io/status
                        written = await strict_merge_patch(
                            self.client,
                            served_as,
                            key.namespace,
                            key.name,
                            version,
                            patch,
                            subresource="status",
                        )
                    else:
                        # Volcano's CRD has no status subresource: the status is part of the object.
                        # rbac: patch podgroups.scheduling.volcano.sh
                        written = await strict_merge_patch(
                            self.client, served_as, key.namespace, key.name, version, patch
                        )
                except ApiError as exc:
                    if exc.not_found:
                        return
                    if not exc.conflict:
                        log.warning("podgroup status write failed", podgroup=str(key), error=str(exc))
                        return
                    try:
                        # rbac: get podgroups.scheduling.x-k8s.io
                        # rbac: get podgroups.scheduling.volcano.sh
                        written = await self.client.get(served_as, key.namespace, key.name)
                    except ApiError:
                        return
                if key in self._objects:
                    self._objects[key] = written
        finally:
            self._writing.discard(key)
            if key in self._dirty and self._flush is None and self.leading:
                self._flush = asyncio.get_running_loop().call_later(FLUSH_SECONDS, self._flush_marked)


def _same(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether ``desired`` says nothing new: zero counts are omitted by the owners' Go types, and a
    condition's time and transition id change only with its content."""

    def normal(status: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in status.items() if v not in (0, None, "", [])}
        if "conditions" in out:
            out["conditions"] = [
                {k: v for k, v in c.items() if k not in ("lastTransitionTime", "transitionID")}
                for c in out["conditions"]
            ]
        return out

    return normal(current) == normal(desired)


def _volcano_conditions(
    conditions: list[dict[str, Any]], attempt: _Attempt, min_member: int, unready: int
) -> list[dict[str, Any]]:
    """The gang plugin's conditions: Scheduled (reason ``tasks in gang are ready to be scheduled``)
    when the group was placed, Unschedulable with Volcano's reasons when not; each replaces the
    condition of its type (as ``UpdatePodGroupCondition``), the other stays."""
    if attempt.code is Code.SUCCESS:
        condition = {
            "type": volcano.CONDITION_SCHEDULED,
            "status": "True",
            "reason": volcano.REASON_READY,
        }
    else:
        if "TooFewPods" in attempt.causes and "minTaskMember" in attempt.message:
            reason = volcano.NOT_ENOUGH_PODS_OF_TASK
        elif "TooFewPods" in attempt.causes:
            reason = volcano.NOT_ENOUGH_TASKS
        else:
            reason = volcano.NOT_ENOUGH_RESOURCES
        message = (
            f"{unready}/{attempt.total} tasks in gang unschedulable: pod group is not ready, "
            f"{min_member} minAvailable; {attempt.message}"
        )
        condition = {
            "type": volcano.CONDITION_UNSCHEDULABLE,
            "status": "True",
            "reason": reason,
            "message": message[:MAX_MESSAGE],
        }
    current = next((c for c in conditions if c.get("type") == condition["type"]), None)
    if current is not None and all(current.get(k) == v for k, v in condition.items()):
        return conditions
    condition["lastTransitionTime"] = _now()
    condition["transitionID"] = str(uuid.uuid4())
    return [*(c for c in conditions if c.get("type") != condition["type"]), condition]
