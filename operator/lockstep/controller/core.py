"""The scheduler core as the operator runs it: watch events in, decisions out.

Raw API objects are parsed here, once, into the core's types (``parse_pod``, ``parse_node``, the
pydantic PodGroup and DRA models) and handed to the cluster cache and the DRA resource store. The
scheduler's per-group attempt records become PodGroup status (through the status writer), Events,
metrics and one log line per decision.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from lockstep import GROUP, POD_GROUP_LABEL
from lockstep.api.composite_podgroup import CompositePodGroup
from lockstep.api.disruption_budget import parse_disruption_budget
from lockstep.api.groups import (
    InvalidAnnotationError,
    UnknownPriorityClassError,
    from_composite,
    from_lockstep,
    from_upstream,
)
from lockstep.api.node import parse_node
from lockstep.api.pod import InvalidObjectError, parse_pod
from lockstep.api.podgroup import PodGroup, ReservationStatus
from lockstep.api.resource import (
    DeviceClass,
    ResourceClaim,
    ResourceClaimTemplate,
    ResourceModelError,
    ResourceSlice,
    parse_resource,
)
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.api.upstream_podgroup import VERSIONS as UPSTREAM_VERSIONS
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.api.volume import (
    parse_csinode,
    parse_persistent_volume,
    parse_persistent_volume_claim,
    parse_storage_class,
)
from lockstep.config import Settings
from lockstep.controller.composite_status import CompositeStatusWriter
from lockstep.controller.dialects import Dialects
from lockstep.controller.owner_gangs import OwnerGangs
from lockstep.controller.recovery import StaleGangs
from lockstep.controller.status import (
    ARRIVING_CAUSES,
    SETTLE_SECONDS,
    AttemptResult,
    AttemptSummary,
    GroupRef,
    ReasonCount,
)
from lockstep.controller.template_gangs import CREATED_FROM_PODS_ANNOTATION, TemplateGangs
from lockstep.controller.terminating import TerminatingPodGroups
from lockstep.controller.upstream_status import UpstreamStatusWriter
from lockstep.dra.claims import ensure_group_claims
from lockstep.dra.features import allocator_features
from lockstep.dra.store import ResourceStore
from lockstep.kube.client import KubeClient
from lockstep.kube.events import NORMAL, WARNING, EventRecorder, ObjectReference
from lockstep.kube.ports import (
    KubeClaimAPI,
    KubeEvictionAPI,
    KubePodAPI,
    KubePodGroupAPI,
    KubePreemptionAPI,
    KubeVolumeAPI,
)
from lockstep.logging import get_logger
from lockstep.metrics import Metrics
from lockstep.scheduler.composite import CompositeVerdict
from lockstep.scheduler.framework import Code, CompositeInfo, GroupKey, PodInfo, Status
from lockstep.scheduler.plugins.dynamic_resources import CLAIM_API_SERVICE, STORE_SERVICE, DynamicResources
from lockstep.scheduler.plugins.podgroup_protection import DELETING_CAUSE, PODGROUP_API_SERVICE
from lockstep.scheduler.plugins.volume_binding import STORE_SERVICE as VOLUME_STORE_SERVICE
from lockstep.scheduler.plugins.volume_binding import VOLUME_API_SERVICE
from lockstep.scheduler.preemption import REASON_POD, PlanVerdict, PreemptionPlan
from lockstep.scheduler.records import GroupAttempt
from lockstep.scheduler.reservation import (
    RESERVATION_ANNOTATION,
    Ending,
    Reservation,
    from_status,
    to_status,
)
from lockstep.scheduler.reservation import timestamp as reservation_timestamp
from lockstep.scheduler.scheduler import INVALID_MIN_COUNT, INVALID_POD_GROUP, Scheduler, give_way
from lockstep.scheduler.search import SearchResult
from lockstep.state.cluster import ClusterEvent
from lockstep.state.volumes import VolumeStore

log = get_logger("lockstep.scheduler")

PODGROUP_API_VERSION = "scheduling.lockstep.dev/v1alpha1"
LOGGED_PLACEMENTS = 16  # a gang of 1,000 gets one readable log line, not a 60 kB one
# Group queue state -> kube-scheduler's scheduler_pending_pods{queue} label.
PENDING_QUEUES = {
    "active": "active",
    "backoff": "backoff",
    "idle": "unschedulable",
    "parked": "unschedulable",
    "gated": "gated",
}
RESULT_LABELS = {
    Code.SUCCESS: "scheduled",
    Code.WAIT: "waiting",
    Code.UNSCHEDULABLE: "unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "unschedulable",
    Code.ERROR: "error",
}


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class SchedulerCore:
    def __init__(
        self, settings: Settings, client: KubeClient, events: EventRecorder, metrics: Metrics
    ) -> None:
        self.settings = settings
        self.events = events
        self.metrics = metrics
        self.resources = ResourceStore(
            allocator_features(settings.feature_gates), self._resources_changed, self._claim_added
        )
        self.claim_api = KubeClaimAPI(client)
        self._podgroups: dict[GroupRef, PodGroup] = {}
        self.podgroup_api = KubePodGroupAPI(
            client, lambda namespace, name: self._podgroups.get((namespace, name)), self._podgroup_written
        )
        # Also told of the PodGroups lockstep's own writes answered with (the status writer's copy).
        self.on_podgroup_written: Callable[[dict[str, Any]], None] | None = None
        self.volumes = VolumeStore(self._volumes_changed)
        self.scheduler = Scheduler(
            settings,
            KubePodAPI(client),
            services={
                STORE_SERVICE: self.resources,
                CLAIM_API_SERVICE: self.claim_api,
                VOLUME_STORE_SERVICE: self.volumes,
                VOLUME_API_SERVICE: KubeVolumeAPI(client),
                PODGROUP_API_SERVICE: self.podgroup_api,
            },
            preemption_api=KubePreemptionAPI(client),
        )
        self.scheduler.on_preemption_verdict = self._preemption_verdict
        self.scheduler.cycle.on_search = self._joint_search
        self.scheduler.on_preempted = self._preempted
        self.scheduler.on_reservation = self._reservation
        self.scheduler.on_backfilled = lambda pod: metrics.backfilled_pods.inc()
        self.cache = self.scheduler.cache
        self.scheduler.add_listener(self)
        self.cache.add_listener(self)
        metrics.before_scrape.append(self.refresh_metrics)
        self.on_attempt: Callable[[GroupRef], None] | None = None
        self.on_bound: Callable[[PodInfo, str], None] | None = None  # the API server confirmed a binding
        self.last_cycle_at = 0.0
        self._accepting = True
        self._wake = asyncio.Event()
        self.scheduler.on_wake = self._wake.set
        self._pending_since: dict[str, float] = {}  # pod uid -> when it was first seen unscheduled
        self._invalid: dict[str, str] = {}  # object key -> resourceVersion already reported invalid
        self._upstream_podgroups: dict[GroupRef, UpstreamPodGroup] = {}
        self._priority_classes: dict[str, int] = {}  # PriorityClass name -> value
        # PodGroups (either shape) naming a priorityClassName, as last seen: parsed again when it changes
        self._class_users: dict[GroupKey, dict[str, Any]] = {}
        self._composite_class_users: dict[tuple[str, str], dict[str, Any]] = {}  # likewise, composites
        self.upstream_status = UpstreamStatusWriter(client)
        self.composite_status = CompositeStatusWriter(client)
        self.scheduler.on_composite = self._composite_verdict
        self.owner_gangs = OwnerGangs(settings.scheduler_name, settings.infer_gangs, events)
        self.template_gangs = TemplateGangs(
            client, events, self._lockstep_min_count, infer=self.owner_gangs.ask
        )
        self.dialects = Dialects(
            client,
            events,
            self.cache,
            self._priority_classes,
            lambda raw, problem: self._report_invalid(raw, problem, kind="PodGroup"),
        )
        dra = self.scheduler.profile.get(DRA_PLUGIN)
        self.terminating = TerminatingPodGroups(
            self.podgroup_api,
            self.cache,
            self._podgroups,
            dra.release_podgroup_now if isinstance(dra, DynamicResources) else None,
        )
        self._claim_tasks: dict[GroupRef, asyncio.Task[None]] = {}
        self._attempt_count = 0
        self._last_attempt: GroupAttempt | None = None
        self._leading = False
        # the last outcome each group got an Event for: (Event reason, the causes of a failure)
        self._last_event_reason: dict[GroupKey, tuple[str, frozenset[str]]] = {}
        self.waiting_event_delay = SETTLE_SECONDS
        self.recovery = StaleGangs(self.cache, KubeEvictionAPI(client), events, metrics, self._reference)

    # --- watch feed -------------------------------------------------------------------------------------

    def on_pod(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        uid = str(meta.get("uid") or "")
        if event_type == "DELETED":
            self._pending_since.pop(uid, None)
            self._last_event_reason.pop(
                GroupKey(str(meta.get("namespace")), str(meta.get("name")), False), None
            )
            gone = self.cache.delete_pod(uid)
            if gone is None:
                gone = self.cache.delete_pod_by_name(
                    str(meta.get("namespace") or "default"), str(meta.get("name"))
                )
            if gone is not None and gone.scheduling_group:
                self._upstream_members_changed(gone.group_key)
            self.dialects.on_pod(event_type, raw, None)
            group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
            if group:
                self.template_gangs.on_pod(event_type, raw, str(group), gated=False)
                self.terminating.check((str(meta.get("namespace") or "default"), str(group)))
            return
        try:
            pod = parse_pod(raw)
        except InvalidObjectError as exc:
            self._report_invalid(raw, str(exc))
            return
        if not pod.node_name and pod.scheduler_name == self.settings.scheduler_name:
            self._pending_since.setdefault(pod.uid, time.monotonic())
        self.cache.upsert_pod(pod)
        if pod.in_pod_group or uid in self.dialects.counted:
            self.dialects.on_pod(
                event_type, raw, pod if pod.scheduler_name == self.settings.scheduler_name else None
            )
        if pod.group_name and pod.scheduler_name == self.settings.scheduler_name and not pod.terminal:
            problem = self.template_gangs.on_pod(event_type, raw, pod.group_name, pod.scheduling_gated)
            if problem is not None:
                self._report_invalid(raw, f"Pod {pod.key}: {problem}")
                joined = pod.group_key
                if (
                    joined.pod_group
                    and not joined.upstream
                    and (pod.namespace, pod.group_name) not in self._podgroups
                ):
                    self.scheduler.set_group_problem(
                        pod.group_key,
                        INVALID_MIN_COUNT,
                        f"pod {pod.key}: {problem}, so no PodGroup {pod.namespace}/{pod.group_name} is "
                        "created from it",
                    )
        if pod.preempted_by is not None and not pod.deleting:
            self.scheduler.finish_preemption(pod)
        if pod.group_name:
            self.terminating.check((pod.namespace, pod.group_name))
        if pod.scheduling_group:
            self._upstream_members_changed(pod.group_key)

    def _upstream_members_changed(self, key: GroupKey) -> None:
        """PodGroupSatisfied of an upstream PodGroup follows its members (written on transitions)."""
        if not key.upstream:
            return
        running = sum(1 for m in self.cache.members(key) if m.phase == "Running" and not m.deleting)
        succeeded = self.cache.succeeded_count(key)
        self.upstream_status.on_members(key, running + succeeded, running, succeeded)

    def on_pdb(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        if event_type == "DELETED":
            self.cache.delete_budget(str(meta.get("namespace") or "default"), str(meta.get("name")))
            return
        try:
            self.cache.upsert_budget(parse_disruption_budget(raw))
        except InvalidObjectError as exc:
            self._report_invalid(raw, str(exc))

    # --- preemption ----------------------------------------------------------------------------------

    def _joint_search(self, result: SearchResult) -> None:
        outcome = "found" if result.found else "budget_exhausted" if result.exhausted else "not_found"
        self.metrics.joint_searches.labels(outcome).inc()

    def _preemption_verdict(self, key: GroupKey, verdict: PlanVerdict) -> None:
        self.metrics.preemption_attempts.labels(verdict.result.value).inc()
        log.info(
            "preemption",
            result=verdict.result.value,
            reason=verdict.message,
            trials=verdict.trials,
            **self._group_fields(key),
        )

    def _preempted(self, plan: PreemptionPlan) -> None:
        who = f"{'group' if plan.group.pod_group else 'pod'} {plan.group.namespace}/{plan.group.name}"
        for composite in plan.composites:
            message = f"preempted whole (disruptionMode all) by {who}, priority {plan.priority}"
            self.composite_status.disrupted(composite, message)
        for victim in plan.victims:
            reason = plan.reasons.get(victim.uid, REASON_POD)
            self.metrics.preemption_victims.labels(reason).inc()
            self.events.record(
                ObjectReference("Pod", victim.namespace, victim.name, victim.uid, "v1"),
                NORMAL,
                "Preempted",
                f"preempted by {who}, priority {plan.priority}"
                + (
                    ""
                    if reason == REASON_POD
                    else f" (with its whole gang {victim.namespace}/{victim.group_name})"
                ),
            )
        nodes = sorted({node for _, node in plan.nominations})
        message = (
            f"preempted {len(plan.victims)} pods of lower priority to place {who} "
            f"(priority {plan.priority}) on {', '.join(nodes)}: {plan.describe_victims()}"
        )
        self.events.record(self._reference(plan.group), NORMAL, "Preempting", message)

    def on_node(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.cache.delete_node(str(_meta(raw).get("name")))
            return
        try:
            self.cache.upsert_node(parse_node(raw))
        except InvalidObjectError as exc:
            self._report_invalid(raw, str(exc))

    def on_namespace(self, event_type: str, raw: dict[str, Any]) -> None:
        """Namespace labels, for pod affinity terms' namespaceSelector."""
        meta = _meta(raw)
        name = str(meta.get("name"))
        labels = meta.get("labels") or {}
        if event_type == "DELETED" or not isinstance(labels, dict):
            self.cache.delete_namespace(name)
            return
        self.cache.upsert_namespace(name, {str(k): str(v) for k, v in labels.items()})

    def _podgroup_deleted(self, key: GroupKey, uid: str) -> None:
        self.scheduler.set_group_problem(key, None)
        self._last_event_reason.pop(key, None)
        self._class_users.pop(key, None)
        self.cache.delete_podgroup(key.namespace, key.name, upstream=key.upstream)
        self.resources.delete_pod_group(key.namespace, key.name)
        dra = self.scheduler.profile.get(DRA_PLUGIN)
        if self._leading and isinstance(dra, DynamicResources):
            dra.release_podgroup(key.namespace, key.name, uid)

    def _parse_podgroup(self, model: Any, raw: dict[str, Any], key: GroupKey) -> Any:
        """The validated PodGroup of either shape, or None (reported) when the API holds one lockstep
        cannot use."""
        try:
            return model.model_validate(raw)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {str(err['msg']).removeprefix('Value error, ')}"
                for err in exc.errors()
            )
            self._refuse_podgroup(raw, key, f"PodGroup {key.namespace}/{key.name}: {problems}")
            return None

    def _refuse_podgroup(self, raw: dict[str, Any], key: GroupKey, problem: str) -> None:
        """A PodGroup lockstep cannot use: logged and an Event on it, and its pods are refused with
        the problem (not left waiting for it to exist)."""
        self._report_invalid(raw, problem, kind="PodGroup")
        self.scheduler.set_group_problem(key, INVALID_POD_GROUP, problem)

    def _uses_priority_class(self, key: GroupKey, raw: dict[str, Any], class_name: str | None) -> None:
        if class_name:
            self._class_users[key] = raw
        else:
            self._class_users.pop(key, None)

    def on_priority_class(self, event_type: str, raw: dict[str, Any]) -> None:
        """A PriorityClass changed: the PodGroups naming it get their priority again."""
        name = str(_meta(raw).get("name"))
        if event_type == "DELETED":
            self._priority_classes.pop(name, None)
        else:
            value = raw.get("value")
            self._priority_classes[name] = int(value) if isinstance(value, int | float) else 0
        self.dialects.on_priority_class(name)
        for composite_raw in list(self._composite_class_users.values()):
            if (composite_raw.get("spec") or {}).get("priorityClassName") == name:
                self.on_composite_podgroup("MODIFIED", composite_raw)
        for key, group_raw in list(self._class_users.items()):
            if (group_raw.get("spec") or {}).get("priorityClassName") == name:
                if key.upstream:
                    self.on_upstream_podgroup("MODIFIED", group_raw)
                else:
                    self.on_podgroup("MODIFIED", group_raw)

    def on_upstream_podgroup(self, event_type: str, raw: dict[str, Any]) -> None:
        """An upstream scheduling.k8s.io PodGroup: same core, no template claims made by lockstep."""
        meta = _meta(raw)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        key = GroupKey(namespace, name, upstream=True)
        if event_type == "DELETED":
            self._upstream_podgroups.pop((namespace, name), None)
            self.upstream_status.observe(key, None)
            self._podgroup_deleted(key, str(meta.get("uid") or ""))
            return
        podgroup = self._parse_podgroup(UpstreamPodGroup, raw, key)
        if podgroup is None:
            return
        self._uses_priority_class(key, raw, podgroup.spec.priority_class_name)
        self.upstream_status.observe(key, podgroup)  # so its condition can say what is wrong
        try:
            info = from_upstream(podgroup, self._priority_classes)
        except (UnknownPriorityClassError, InvalidAnnotationError) as exc:
            self._refuse_podgroup(raw, key, str(exc))
            return
        self.scheduler.set_group_problem(key, None)
        if (namespace, name) not in self._upstream_podgroups:
            log.info(
                "admitted",
                podgroup=f"{namespace}/{name}",
                api=podgroup.api_version,
                min_count=info.min_count,
                policy="gang" if info.is_gang else "basic",
                claims=[c.name for c in info.claims],
            )
        self._upstream_podgroups[(namespace, name)] = podgroup
        self.upstream_status.observe(key, podgroup)
        recorded = podgroup.metadata.annotations.get(RESERVATION_ANNOTATION)
        try:
            reservation = ReservationStatus.model_validate_json(recorded) if recorded else None
        except ValidationError as exc:
            log.warning("reservation annotation ignored: invalid", podgroup=str(key), error=str(exc))
            reservation = None
        self._follow_reservation(key, reservation)
        self.resources.upsert_pod_group(podgroup)
        self.cache.upsert_podgroup(info)

    def on_composite_podgroup(self, event_type: str, raw: dict[str, Any]) -> None:
        """An upstream scheduling.k8s.io/v1alpha3 CompositePodGroup: the parent of PodGroups. One lockstep
        cannot use is kept with its refusal, so that the PodGroups under it are told why."""
        meta = _meta(raw)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        if event_type == "DELETED":
            self._composite_class_users.pop((namespace, name), None)
            self.composite_status.observe((namespace, name), None)
            self.cache.delete_composite(namespace, name)
            return
        if (raw.get("spec") or {}).get("priorityClassName"):
            self._composite_class_users[(namespace, name)] = raw
        else:
            self._composite_class_users.pop((namespace, name), None)
        try:
            composite = CompositePodGroup.model_validate(raw)
            info = from_composite(composite, self._priority_classes)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {str(err['msg']).removeprefix('Value error, ')}"
                for err in exc.errors()
            )
            refusal = f"CompositePodGroup {namespace}/{name}: {problems}"
            self._report_invalid(raw, refusal)
            info = CompositeInfo(namespace, name, uid=str(meta.get("uid") or ""), refusal=refusal)
        except UnknownPriorityClassError as exc:
            self._report_invalid(raw, str(exc))
            info = CompositeInfo(namespace, name, uid=str(meta.get("uid") or ""), refusal=str(exc))
        else:
            self.composite_status.observe((namespace, name), composite)
        self.cache.upsert_composite(info)

    def _composite_verdict(self, verdict: CompositeVerdict) -> None:
        status = verdict.status
        self.composite_status.want(verdict.composite.key, status.code, status.message, verdict.invalid)

    def on_podgroup(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        key = GroupKey(namespace, name)
        if event_type == "DELETED":
            self._podgroups.pop((namespace, name), None)
            self._podgroup_deleted(key, str(meta.get("uid") or ""))
            return
        podgroup = self._parse_podgroup(PodGroup, raw, key)
        if podgroup is None:
            return
        self._uses_priority_class(key, raw, podgroup.spec.priority_class_name)
        try:
            info = from_lockstep(podgroup, self._priority_classes)
        except UnknownPriorityClassError as exc:
            self._refuse_podgroup(raw, key, str(exc))
            return
        self.scheduler.set_group_problem(key, None)
        if (namespace, name) not in self._podgroups:
            log.info(
                "admitted",
                podgroup=f"{namespace}/{name}",
                min_count=podgroup.spec.min_count,
                policy="gang" if podgroup.spec.is_gang else "basic",
                claims=[c.name for c in podgroup.spec.resource_claims],
            )
        self.resources.upsert_pod_group(podgroup)
        self.cache.upsert_podgroup(info)
        self._podgroups[(namespace, name)] = podgroup
        self._follow_reservation(key, podgroup.status.reservation)
        self._ensure_group_claims(podgroup)
        self.template_gangs.reconcile((namespace, name))
        self.terminating.check((namespace, name))

    def _podgroup_written(self, raw: dict[str, Any]) -> None:
        """A lockstep PodGroup as a write of ours answered: taken like its watch event, unless the
        watch showed a newer version already."""
        meta = _meta(raw)
        known = self._podgroups.get((str(meta.get("namespace") or "default"), str(meta.get("name"))))
        if known is not None and _version(known.metadata.resource_version) >= _version(
            str(meta.get("resourceVersion") or "")
        ):
            return
        if self.on_podgroup_written is not None:
            self.on_podgroup_written(raw)
        self.on_podgroup("MODIFIED", raw)

    # --- capacity reservations ------------------------------------------------------------------------

    def _follow_reservation(self, key: GroupKey, recorded: ReservationStatus | None) -> None:
        """Before leading (start-up, a standby), the reservations are the ones the PodGroups record;
        the leader's own decisions are recorded by it, so it does not read them back."""
        if self._leading:
            return
        book = self.scheduler.reservations
        if recorded is None:
            book.forget(key)
        elif key not in book.reservations:
            book.restore(from_status(key, recorded))

    def _reservation(self, reservation: Reservation, ending: Ending | None, message: str) -> None:
        key = reservation.group
        fields = self._group_fields(key)
        if ending is None:
            log.info("reservation", nodes=sorted(reservation.holds), reason=message, **fields)
            if not message.startswith("restored"):
                self.events.record(self._reference(key), NORMAL, "Reserving", message)
        else:
            age = max(self.scheduler.wall_clock() - reservation.since, 0.0)
            self.metrics.reservation_duration.labels(ending.value).observe(age)
            log.info("reservation ended", result=ending.value, reason=message, **fields)
            if ending is Ending.TIMED_OUT:
                self.events.record(self._reference(key), WARNING, "ReservationTimedOut", message)
            else:
                self.events.record(self._reference(key), NORMAL, "ReservationReleased", message)
        if key.upstream:
            if self._leading:
                current = self.scheduler.reservations.reservations.get(key)
                self.upstream_status.record_reservation(key, to_status(current) if current else None)
        elif key.pod_group and self.on_attempt is not None:
            self.on_attempt((key.namespace, key.name))

    def reservation_status(self, key: GroupRef) -> dict[str, Any] | None:
        reservation = self.scheduler.reservations.reservations.get(GroupKey(key[0], key[1]))
        return to_status(reservation) if reservation is not None else None

    def _lockstep_min_count(self, namespace: str, name: str) -> tuple[int, bool] | None:
        """(minCount, whether lockstep created it from pod template lines) of a lockstep PodGroup."""
        podgroup = self._podgroups.get((namespace, name))
        if podgroup is None:
            return None
        created = podgroup.metadata.annotations.get(CREATED_FROM_PODS_ANNOTATION) == "true"
        return podgroup.spec.min_count, created

    def _ensure_group_claims(self, podgroup: PodGroup) -> None:
        """Create the claims of the PodGroup's template entries (once per group at a time)."""
        key = (podgroup.metadata.namespace, podgroup.metadata.name)
        recorded = {s.name for s in podgroup.status.resource_claim_statuses if s.resource_claim_name}
        wanted = [e for e in podgroup.spec.resource_claims if e.resource_claim_template_name]
        if not self._leading or all(e.name in recorded for e in wanted) or key in self._claim_tasks:
            return
        if podgroup.metadata.deletion_timestamp is not None:
            return
        task = asyncio.get_running_loop().create_task(self._create_group_claims(podgroup))
        self._claim_tasks[key] = task
        task.add_done_callback(lambda _: self._claim_tasks.pop(key, None))

    async def _create_group_claims(self, podgroup: PodGroup) -> None:
        report = await ensure_group_claims(
            podgroup,
            self.resources.templates.get,
            self.resources.claims.get,
            self.claim_api,
            on_created=self.resources.upsert_claim,
        )
        key = (podgroup.metadata.namespace, podgroup.metadata.name)
        if report.statuses:
            self.resources.record_group_claims(
                key, {s["name"]: s["resourceClaimName"] for s in report.statuses}
            )
        for problem in report.problems:
            log.warning("podgroup claims", podgroup=f"{key[0]}/{key[1]}", error=problem)
            reference = ObjectReference(
                "PodGroup", key[0], key[1], podgroup.metadata.uid, PODGROUP_API_VERSION
            )
            self.events.record(reference, WARNING, "ClaimCreationFailed", problem)

    def on_claim(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        if event_type == "DELETED":
            self.resources.delete_claim(str(meta.get("namespace")), str(meta.get("name")))
            return
        known = self.resources.claims.assumed_at(
            f"{meta.get('namespace')}/{meta.get('name')}", str(meta.get("resourceVersion") or "")
        )
        if known is not None and known.metadata.uid == meta.get("uid"):
            # The echo of our own write (assumed from its answer, also the finalizer write the status
            # write followed at once) or a re-list: parsed already.
            self.resources.upsert_claim(known)
            return
        self._parse_into(ResourceClaim, raw, self.resources.upsert_claim)

    def _claim_added(self, claim: ResourceClaim) -> None:
        """A claim generated for a pod wakes only that pod's group, once the pod's
        status.resourceClaimStatuses names it (before, the pod's status update is what wakes it: a
        retry now would only wait again); any other new claim (named by pods or PodGroups) wakes every
        group that failed on claims. A pod naming another pod's generated claim directly is not woken
        by it and retries when its backoff expires."""
        owner = next(
            (
                ref
                for ref in claim.metadata.owner_references
                if ref.controller and ref.kind == "Pod" and ref.api_version == "v1"
            ),
            None,
        )
        if owner is None:
            self._resources_changed()
            return
        pod = self.cache.get_pod(owner.uid)
        if pod is not None and claim.metadata.name in pod.claim_statuses.values():
            self.scheduler.on_cluster_event(ClusterEvent.MEMBER_CHANGED, pod.group_key)
            self.on_cluster_event(ClusterEvent.MEMBER_CHANGED, pod.group_key)

    def _volumes_changed(self) -> None:
        self.scheduler.cache.on_volumes_changed()

    def on_volume(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.volumes.delete_volume(str(_meta(raw).get("name")))
            return
        self._parse_volume(raw, parse_persistent_volume, self.volumes.upsert_volume)

    def on_volume_claim(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        if event_type == "DELETED":
            self.volumes.delete_claim(str(meta.get("namespace")), str(meta.get("name")))
            return
        self._parse_volume(raw, parse_persistent_volume_claim, self.volumes.upsert_claim)

    def on_storage_class(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.volumes.delete_class(str(_meta(raw).get("name")))
            return
        self._parse_volume(raw, parse_storage_class, self.volumes.upsert_class)

    def on_csinode(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.volumes.delete_csinode(str(_meta(raw).get("name")))
            return
        self._parse_volume(raw, parse_csinode, self.volumes.upsert_csinode)

    def _parse_volume(
        self, raw: dict[str, Any], parse: Callable[[Any], Any], apply: Callable[[Any], None]
    ) -> None:
        try:
            parsed = parse(raw)
        except InvalidObjectError as exc:
            self._report_invalid(raw, str(exc))
            return
        apply(parsed)

    def on_slice(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.resources.delete_slice(str(_meta(raw).get("name")))
            return
        self._parse_into(ResourceSlice, raw, self.resources.upsert_slice)

    def on_device_class(self, event_type: str, raw: dict[str, Any]) -> None:
        if event_type == "DELETED":
            self.resources.delete_class(str(_meta(raw).get("name")))
            return
        self._parse_into(DeviceClass, raw, self.resources.upsert_class)

    def on_claim_template(self, event_type: str, raw: dict[str, Any]) -> None:
        meta = _meta(raw)
        if event_type == "DELETED":
            self.resources.delete_template(str(meta.get("namespace")), str(meta.get("name")))
            return
        self._parse_into(ResourceClaimTemplate, raw, self.resources.upsert_template)
        for podgroup in self._podgroups.values():
            if podgroup.metadata.namespace == meta.get("namespace"):
                self._ensure_group_claims(podgroup)

    def _parse_into(self, model: Any, raw: dict[str, Any], apply: Callable[[Any], None]) -> None:
        try:
            parsed = parse_resource(model, raw)
        except ResourceModelError as exc:
            self._report_invalid(raw, str(exc))
            return
        apply(parsed)

    def _report_invalid(self, raw: dict[str, Any], problem: str, kind: str = "") -> None:
        """Log an object lockstep cannot use once per resourceVersion (and tell its PodGroup)."""
        meta = _meta(raw)
        key = f"{raw.get('kind', kind)}/{meta.get('namespace', '')}/{meta.get('name', '')}"
        version = str(meta.get("resourceVersion") or "")
        if self._invalid.get(key) == version:
            return
        self._invalid[key] = version
        log.warning("object ignored: invalid", error=problem, object=key)
        if kind == "PodGroup":
            reference = ObjectReference(
                "PodGroup",
                str(meta.get("namespace")),
                str(meta.get("name")),
                str(meta.get("uid") or ""),
                str(raw.get("apiVersion") or PODGROUP_API_VERSION),
            )
            self.events.record(reference, WARNING, "InvalidSpec", problem)

    def _resources_changed(self) -> None:
        self.cache.on_claims_changed()

    # --- scheduler loop ----------------------------------------------------------------------------------

    def on_cluster_event(self, event: ClusterEvent, group: GroupKey | None) -> None:
        self._wake.set()

    async def run(self) -> None:
        """Run group cycles until :meth:`stop_accepting`; binding cycles are left to :meth:`drain`."""
        scheduler = self.scheduler
        recovery = asyncio.get_running_loop().create_task(self.recovery.run(), name="stale-gangs")
        try:
            await self._schedule_until_stopped(scheduler)
        finally:
            recovery.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await recovery

    async def _schedule_until_stopped(self, scheduler: Scheduler) -> None:
        while self._accepting:
            self._wake.clear()
            started = time.perf_counter()
            attempts_before = self._attempt_count
            key = scheduler.schedule_one()
            if key is not None:
                attempt = self._last_attempt if self._attempt_count > attempts_before else None
                result = RESULT_LABELS[attempt.code] if attempt is not None else "skipped"
                self.metrics.podgroup_attempt_duration.labels(result).observe(time.perf_counter() - started)
                await give_way()
                continue
            ready_at = scheduler.queue.next_ready_at()
            timeout = None if ready_at is None else max(ready_at - scheduler.clock(), 0.0)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def start_leading(self) -> None:
        """Writes start with leadership: create the template claims of the PodGroups seen so far."""
        self._leading = True
        for podgroup in list(self._podgroups.values()):
            self._ensure_group_claims(podgroup)
        self._release_claims_of_deleted_podgroups()
        self.terminating.leading = True
        for key in list(self._podgroups):
            self.terminating.check(key)  # deleted while no lockstep led, its members gone meanwhile
        self.template_gangs.leading = True
        self.template_gangs.reconcile_all()
        self.dialects.start_leading()

    def _release_claims_of_deleted_podgroups(self) -> None:
        """Claims still reserved for a PodGroup that was deleted while no lockstep led: release them.
        Safe here: the informers' initial lists are complete before leadership is taken. A PodGroup
        still there with a deletionTimestamp is not deleted yet: its claims are released when it
        is finalized (lockstep's) or gone (upstream's)."""
        dra = self.scheduler.profile.get(DRA_PLUGIN)
        if not isinstance(dra, DynamicResources):
            return
        live = {podgroup.metadata.uid for podgroup in self._podgroups.values()}
        live |= {podgroup.metadata.uid for podgroup in self._upstream_podgroups.values()}
        for claim in self.resources.claims.values():
            for ref in claim.status.reserved_for:
                shapes = (GROUP, UPSTREAM_GROUP)
                if ref.api_group in shapes and ref.resource == "podgroups" and ref.uid not in live:
                    podgroup = f"{claim.metadata.namespace}/{ref.name}"
                    log.info("releasing a claim of a deleted PodGroup", podgroup=podgroup, claim=claim.key)
                    dra.release_reservation(claim.key, ref.uid, f"PodGroup {podgroup}")

    def stop_accepting(self) -> None:
        self._accepting = False
        self._leading = False
        self.terminating.leading = False
        self.template_gangs.leading = False
        self.dialects.stop_leading()
        self._wake.set()

    async def drain(self, grace: float) -> None:
        """Release pods waiting at Permit and withdraw the placed gangs none of whose members has sent
        a binding or a claim or volume write (nothing of theirs is in the API but their PodGroup's
        finalizer: they stay pending for the next leader, and their unsent Scheduled Events are
        dropped), let the gangs whose writes have started finish within ``grace`` seconds (a gang
        binds whole: its claims are allocated and reserved for its pods, which a next leader could
        only place on those nodes), then cancel the rest (each cancellation unreserves). Ends with
        the binding queue's workers stopped: Kopf, stopped after this, waits 5 s for every task
        still running that was created after it started, and they were (the process exited 5 s
        after the flush)."""
        shutdown = Status.unschedulable("Binding", "SchedulerShutdown", "lockstep is shutting down")
        for key in list(self.scheduler.attempts):
            self.scheduler.waiting.reject_group(key, shutdown)
        withdrawn = self.scheduler.withdraw_unstarted()
        for key in withdrawn:
            if key.pod_group:
                self.events.withdraw_unsent(self._reference(key), "Scheduled")
        if withdrawn:
            log.info("placements withdrawn for the next leader", groups=len(withdrawn))
        try:
            await asyncio.wait_for(self.scheduler.wait_for_tasks(), grace)
        except TimeoutError:
            log.warning("binding cycles still running at the end of the grace period; cancelling them")
        await self.scheduler.close()

    def queue_depth(self) -> int:
        return len(self.scheduler.queue)

    # --- outcomes ----------------------------------------------------------------------------------------

    def attempt_summary(self, key: GroupRef) -> AttemptSummary | None:
        attempt = self.scheduler.attempts.get(GroupKey(key[0], key[1]))
        if attempt is None:
            return None
        result = attempt.reason
        if attempt.code is not Code.SUCCESS and attempt.causes.get("Timeout"):
            result = AttemptResult.TIMEOUT
        reasons = tuple(
            ReasonCount(cause, count, _cause_message(cause, count, attempt))
            for cause, count in sorted(attempt.causes.items(), key=lambda item: (-item[1], item[0]))
        )
        return AttemptSummary(
            result=result,
            message=attempt.message,
            attempted_at=datetime.fromtimestamp(attempt.timestamp, UTC),
            next_retry_at=(
                datetime.fromtimestamp(attempt.next_retry_at, UTC)
                if attempt.next_retry_at is not None
                else None
            ),
            reasons=reasons,
            queue_position=self.scheduler.queue.position(GroupKey(key[0], key[1])),
            expected_start=self.expected_start(GroupKey(key[0], key[1])),
            domain=attempt.domain,
        )

    def expected_start(self, key: GroupKey) -> str | None:
        """When a waiting group is expected to start (RFC 3339): the expected completion of its
        reservation, known only when every pod it waits for has a deadline. None says "unknown"."""
        reservation = self.scheduler.reservations.reservations.get(key)
        if reservation is None or reservation.expected_completion is None:
            return None
        return reservation_timestamp(reservation.expected_completion)

    def on_group_attempt(self, attempt: GroupAttempt) -> None:
        self._attempt_count += 1
        self._last_attempt = attempt
        self.last_cycle_at = attempt.timestamp
        result = RESULT_LABELS[attempt.code]
        self.metrics.podgroup_attempts.labels(result).inc()
        self.metrics.last_cycle.set(attempt.timestamp)
        key = attempt.group
        fields: dict[str, Any] = {
            "attempt": attempt.attempt,
            "result": attempt.reason,
            "scheduled": attempt.scheduled,
            "min_count": attempt.min_count,
            "total": attempt.total_pods,
        }
        fields.update(self._group_fields(key))
        if attempt.code is Code.SUCCESS:
            shown = [f"{pod}->{node}" for pod, node in attempt.placed[:LOGGED_PLACEMENTS]]
            if len(attempt.placed) > LOGGED_PLACEMENTS:
                shown.append(f"... {len(attempt.placed) - LOGGED_PLACEMENTS} more")
            log.info("placed", placed=len(attempt.placed), placements=shown, **fields)
        else:
            log.info(
                "waiting" if attempt.code is Code.WAIT else "rejected",
                reason=attempt.message,
                causes=dict(attempt.causes),
                **fields,
            )
        self._record_event(attempt)
        if key.pod_group and not key.upstream and not key.dialect:
            self.terminating.check((key.namespace, key.name))  # a member's binding failed meanwhile
        if key.upstream:
            self.upstream_status.on_attempt(attempt)
        elif key.dialect:
            self.dialects.on_attempt(attempt)
        elif key.pod_group and self.on_attempt is not None:
            self.on_attempt((key.namespace, key.name))
        self._wake.set()

    def _reference(self, key: GroupKey) -> ObjectReference:
        """The object a group's events are about: its PodGroup, or the lone pod."""
        if key.dialect:
            return self.dialects.reference(key)
        if key.pod_group:
            known: PodGroup | UpstreamPodGroup | None = (
                self._upstream_podgroups if key.upstream else self._podgroups
            ).get((key.namespace, key.name))
            uid = known.metadata.uid if known is not None else ""
            api_version: str
            if known is not None:
                api_version = known.api_version
            elif key.upstream:
                api_version = f"{UPSTREAM_GROUP}/{UPSTREAM_VERSIONS[0]}"
            else:
                api_version = PODGROUP_API_VERSION
            return ObjectReference("PodGroup", key.namespace, key.name, uid, api_version)
        pod = self.cache.get_pod_by_name(key.namespace, key.name)
        return ObjectReference("Pod", key.namespace, key.name, pod.uid if pod else "", "v1")

    @staticmethod
    def _group_fields(key: GroupKey) -> dict[str, str]:
        return {"podgroup" if key.pod_group else "pod": f"{key.namespace}/{key.name}"}

    def on_group_note(self, attempt: GroupAttempt) -> None:
        key = attempt.group
        if key.pod_group and self.on_attempt is not None:
            self.on_attempt((key.namespace, key.name))  # its status shows the new message

    def _record_event(self, attempt: GroupAttempt) -> None:
        """One Event per group per outcome: an attempt that ends as the last one did (the same result
        for the same causes, only the counts differ) records none, since the status and the pods'
        conditions carry its message and time; the retries of a group that does not fit were most of
        the Events written."""
        key = attempt.group
        previous = self._last_event_reason.get(key)
        if attempt.code is Code.SUCCESS:
            outcome = ("Scheduled", frozenset[str]())
        elif attempt.code is Code.WAIT:
            outcome = ("Waiting", frozenset[str]())  # its causes change as members arrive one by one
        elif attempt.causes.get("Timeout"):
            outcome = ("Timeout", frozenset(attempt.causes))
        else:
            outcome = ("FailedScheduling", frozenset(attempt.causes))
        if attempt.code is Code.SUCCESS and not (key.pod_group and attempt.placed):
            return  # a pod's own Scheduled Event is recorded when it is bound
        self._last_event_reason[key] = outcome
        if outcome == previous:
            return
        reference = self._reference(key)
        reason = outcome[0]
        if attempt.code is Code.SUCCESS:
            self.events.record(reference, NORMAL, reason, attempt.message)
        elif attempt.code is Code.WAIT:
            if attempt.causes and set(attempt.causes) <= ARRIVING_CAUSES:
                self._waiting_event_if_still_waiting(key, reference)
            else:
                self.events.record(reference, NORMAL, reason, attempt.message)
        else:
            self.events.record(reference, WARNING, reason, attempt.message)

    def _waiting_event_if_still_waiting(self, key: GroupKey, reference: ObjectReference) -> None:
        """A gang whose pods are still being created usually starts within a moment (as the status
        writer holds that phase back): its Waiting event is recorded only if it still waits then."""

        def due() -> None:
            attempt = self.scheduler.attempts.get(key)
            if attempt is not None and attempt.code is Code.WAIT:
                self.events.record(reference, NORMAL, "Waiting", attempt.message)

        asyncio.get_running_loop().call_later(self.waiting_event_delay, due)

    def on_pod_problem(self, pod: PodInfo, reason: str, message: str) -> None:
        reference = ObjectReference("Pod", pod.namespace, pod.name, pod.uid, "v1")
        self.events.record(reference, WARNING, "FailedScheduling", f"{reason}: {message}")

    def on_pod_bound(self, pod: PodInfo, node_name: str) -> None:
        self.metrics.bindings.labels("bound").inc()
        if self.on_bound is not None:
            self.on_bound(pod, node_name)
        since = self._pending_since.pop(pod.uid, None)
        if since is not None:
            self.metrics.pod_scheduling_duration.observe(time.monotonic() - since)
        if not pod.in_pod_group:
            # Pods of a PodGroup get one event on the group per attempt instead of one each.
            reference = ObjectReference("Pod", pod.namespace, pod.name, pod.uid, "v1")
            self.events.record(
                reference, NORMAL, "Scheduled", f"Successfully assigned {pod.key} to {node_name}"
            )
        fields: dict[str, Any] = {"pod": pod.key, "node": node_name}
        if pod.in_pod_group:
            fields["podgroup"] = f"{pod.namespace}/{pod.group_key.name}"
        claims = self._claim_names(pod)
        if claims:
            fields["claim"] = claims[0] if len(claims) == 1 else claims
        log.info("bound", **fields)

    def _claim_names(self, pod: PodInfo) -> list[str]:
        """namespace/name of the ResourceClaims the pod uses (its own and its PodGroup's)."""
        names = [ref.resource_claim_name or pod.claim_statuses.get(ref.name) or "" for ref in pod.claims]
        group = self.cache.podgroup(pod.group_key) if pod.in_pod_group else None
        if group is not None:
            generated = self.resources.group_claim_names((pod.namespace, group.name))
            names += [ref.resource_claim_name or generated.get(ref.name) or "" for ref in group.claims]
        return [f"{pod.namespace}/{name}" for name in names if name]

    def refresh_metrics(self) -> None:
        """Gauges of live state, computed when /metrics is scraped."""
        scheduler, cache = self.scheduler, self.cache
        pending = dict.fromkeys(PENDING_QUEUES.values(), 0)
        for key in scheduler.attempts:
            queue = PENDING_QUEUES.get(scheduler.queue.state(key).value)
            if queue is not None:
                pending[queue] += len(cache.unscheduled_members(key))
        for queue, count in pending.items():
            self.metrics.pending_pods.labels(queue).set(count)
        self.metrics.inflight_claim_allocations.set(len(self.resources.in_flight))
        self.metrics.parked_podgroups.set(scheduler.queue.parked())
        held: dict[str, int] = {}
        for key in scheduler.attempts:
            if not scheduler.waiting.count(key):
                continue
            for member in cache.members(key):
                if member.node_name or not cache.is_assumed(member.uid):
                    continue
                held["pods"] = held.get("pods", 0) + 1
                for resource, amount in member.requests.items():
                    held[resource] = held.get(resource, 0) + amount
        self.metrics.permit_waiting_capacity.clear()
        for resource, amount in held.items():
            self.metrics.permit_waiting_capacity.labels(resource).set(amount)
        reservations = list(scheduler.reservations.reservations.values())
        self.metrics.reservations.set(len(reservations))
        reserved: dict[str, int] = {}
        for reservation in reservations:
            for resource, amount in reservation.held_total().items():
                reserved[resource] = reserved.get(resource, 0) + amount
        self.metrics.reserved_capacity.clear()
        for resource, amount in reserved.items():
            self.metrics.reserved_capacity.labels(resource).set(amount)
        now = scheduler.wall_clock()
        oldest = min((r.since for r in reservations), default=now)
        self.metrics.reservation_age.set(max(now - oldest, 0.0))


DRA_PLUGIN = DynamicResources.name
DRA_CAUSES = frozenset(
    {"InsufficientDevices", "ClaimUnallocatable", "ClaimSharersDoNotFit", "ClaimNotOnNode"}
)


def _version(resource_version: str) -> int:
    return int(resource_version) if resource_version.isdigit() else -1


def _cause_message(cause: str, count: int, attempt: GroupAttempt) -> str:
    if cause == DELETING_CAUSE:
        return f"the PodGroup is being deleted: {count} pods not scheduled"
    if cause == "TooFewPods":
        return f"{attempt.total_pods} of minCount {attempt.min_count} pods exist"
    if cause == "Timeout":
        return "members timed out at Permit waiting for the rest of the gang"
    diagnosis = next((d for d in attempt.pods if cause in d.causes), None)
    if diagnosis is None:
        return f"{count} nodes rejected: {cause}"
    if not diagnosis.nodes_evaluated:
        # Refused at PreFilter, before any node was looked at: the plugin's own words, no node list.
        return f"pod {diagnosis.pod}: {diagnosis.message}"
    rejections = "; ".join(
        f"{r.plugin} rejected {r.count}" + (f" ({', '.join(r.sample_nodes)}{more})" if r.sample_nodes else "")
        for r in diagnosis.plugins
        for more in [", ..." if r.count > len(r.sample_nodes) else ""]
    )
    message = f"pod {diagnosis.pod}: {count} of {diagnosis.nodes_evaluated} nodes"
    if rejections:
        message = f"{message}; {rejections}"
    # Device problems are only understandable with the claim, request and constraint the plugin named.
    detail = diagnosis.message.partition(f"{DRA_PLUGIN}: ")[2]
    return f"{message}; {detail}" if cause in DRA_CAUSES and detail else message
