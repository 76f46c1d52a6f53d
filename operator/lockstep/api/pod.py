"""Parse a raw Pod (the API's JSON, as a dict) into the scheduler's ``PodInfo``, once, at the edge.

Resource requests are computed as Kubernetes computes them for scheduling
(``k8s.io/component-helpers/resource.PodRequests``): per resource, the larger of the sum of the app
containers plus sidecars, and the largest init container (plus the sidecars started before it);
pod-level ``spec.resources`` replace that for cpu, memory and huge pages; then the pod overhead. A container
with a limit but no request requests its limit (API defaulting).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.api.placement import PlacementFieldError, parse_placement
from lockstep.api.quantity import QuantityError, parse_quantity, to_resource_amount
from lockstep.dra.extended import is_dra_extended_resource_name
from lockstep.scheduler.framework import (
    DIALECT_COSCHEDULING,
    DIALECT_KUEUE,
    DIALECT_VOLCANO,
    ContainerRequests,
    GroupClaim,
    GroupKey,
    PodClaimRef,
    PodCondition,
    PodInfo,
)

# Where other schedulers' shapes put a pod in a group, in precedence order (see DIALECTS); the
# adapters (lockstep.api.coscheduling, .volcano, .kueue) import these names from here.
COSCHEDULING_POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
VOLCANO_GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
VOLCANO_TASK_SPEC_KEY = "volcano.sh/task-spec"
KUEUE_POD_GROUP_NAME_LABEL = "kueue.x-k8s.io/pod-group-name"


# (dialect, in the labels or the annotations, key, API group): how other schedulers' pods name a group
_DIALECT_MEMBERSHIP = (
    (DIALECT_COSCHEDULING, "label", COSCHEDULING_POD_GROUP_LABEL, "scheduling.x-k8s.io"),
    (DIALECT_VOLCANO, "annotation", VOLCANO_GROUP_NAME_ANNOTATION, "scheduling.volcano.sh"),
    (DIALECT_KUEUE, "label", KUEUE_POD_GROUP_NAME_LABEL, "kueue.x-k8s.io"),
)


def _dialect_groups(labels: Mapping[str, Any], annotations: Mapping[str, Any]) -> tuple[GroupClaim, ...]:
    claims = []
    for dialect, where, key, api_group in _DIALECT_MEMBERSHIP:
        value = (labels if where == "label" else annotations).get(key)
        if value:
            claims.append(GroupClaim(dialect, str(value), f"the {where} {key}", api_group))
    return tuple(claims)


DISRUPTION_TARGET = "DisruptionTarget"
PREEMPTION_BY_SCHEDULER = "PreemptionByScheduler"
_PREEMPTED_BY = re.compile(r"^lockstep: preempted by (group|pod) ([^/\s]+)/([^,\s]+), priority -?\d+")


def preemption_message(group: GroupKey, priority: int) -> str:
    """The DisruptionTarget message (and the victim's event) naming the preempting group; parsed back
    by ``parse_pod`` so a restarted operator knows whose preemption a terminating pod serves."""
    kind = "group" if group.pod_group else "pod"
    return f"lockstep: preempted by {kind} {group.namespace}/{group.name}, priority {priority}"


class InvalidObjectError(ValueError):
    """A Kubernetes object has a field lockstep cannot use; the message names object and field."""

    def __init__(self, kind: str, key: str, field: str, problem: str) -> None:
        super().__init__(f"{kind} {key}: {field}: {problem}")
        self.kind = kind
        self.key = key
        self.field = field


def _mapping(value: Any, kind: str, key: str, field: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidObjectError(kind, key, field, f"must be an object, got {type(value).__name__}")
    return value


def _list(value: Any, kind: str, key: str, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidObjectError(kind, key, field, f"must be a list, got {type(value).__name__}")
    return value


def parse_resource_list(value: Any, kind: str, key: str, field: str) -> dict[str, int]:
    """A ResourceList (``{"cpu": "500m", ...}``) in base units; negative amounts are errors."""
    amounts: dict[str, int] = {}
    for resource, text in _mapping(value, kind, key, field).items():
        try:
            amount = to_resource_amount(resource, text)
        except QuantityError as exc:
            raise InvalidObjectError(kind, key, f"{field}.{resource}", str(exc)) from None
        if amount < 0:
            raise InvalidObjectError(kind, key, f"{field}.{resource}", f"must not be negative, got {text!r}")
        amounts[resource] = amount
    return amounts


def _container_requests(container: Any, key: str, field: str) -> dict[str, int]:
    resources = _mapping(
        _mapping(container, "Pod", key, field).get("resources"), "Pod", key, f"{field}.resources"
    )
    limits = parse_resource_list(resources.get("limits"), "Pod", key, f"{field}.resources.limits")
    requests = parse_resource_list(resources.get("requests"), "Pod", key, f"{field}.resources.requests")
    return {**limits, **requests}


def _add(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        total[resource] = total.get(resource, 0) + amount


def _max_into(total: dict[str, int], amounts: Mapping[str, int]) -> None:
    for resource, amount in amounts.items():
        if amount > total.get(resource, 0):
            total[resource] = amount


def pod_requests(spec: Mapping[str, Any], key: str) -> dict[str, int]:
    """The pod's effective requests in base units (cpu millicores, everything else whole units)."""
    requests: dict[str, int] = {}
    for index, container in enumerate(_list(spec.get("containers"), "Pod", key, "spec.containers")):
        _add(requests, _container_requests(container, key, f"spec.containers[{index}]"))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for index, container in enumerate(_list(spec.get("initContainers"), "Pod", key, "spec.initContainers")):
        own = _container_requests(container, key, f"spec.initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            # A sidecar keeps running next to the app containers and the later init containers.
            _add(requests, own)
            _add(sidecars, own)
            _max_into(init_peak, sidecars)
        else:
            running = dict(sidecars)
            _add(running, own)
            _max_into(init_peak, running)
    _max_into(requests, init_peak)
    # Pod-level resources (PodLevelResources): they replace the container sums of the resources they
    # may name (IsSupportedPodLevelResource).
    pod_level = _container_requests({"resources": spec.get("resources")}, key, "spec")
    requests.update(
        {r: amount for r, amount in pod_level.items() if r in ("cpu", "memory") or r.startswith("hugepages-")}
    )
    _add(requests, parse_resource_list(spec.get("overhead"), "Pod", key, "spec.overhead"))
    return {resource: amount for resource, amount in requests.items() if amount}


def _container_extended_requests(spec: Mapping[str, Any]) -> tuple[ContainerRequests, ...]:
    """Each init and app container's requests, for naming the requests of a DRA extended resource claim
    (only called for a pod requesting an extended resource; its quantities parsed already)."""
    containers = []
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            resources = container.get("resources") or {}
            amounts = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
            extended: dict[str, int | None] = {}
            for resource, text in amounts.items():
                if is_dra_extended_resource_name(resource):
                    value = parse_quantity(text)
                    extended[resource] = int(value) if value.denominator == 1 else None
            containers.append(
                ContainerRequests(
                    name=str(container.get("name") or ""),
                    init=field == "initContainers" and container.get("restartPolicy") != "Always",
                    resources=tuple(sorted(amounts)),
                    extended=extended,
                )
            )
    return tuple(containers)


def normalized_image_name(name: str) -> str:
    """As kube-scheduler's ImageLocality: an image without a tag (or digest) means ``:latest``."""
    return name if name.rfind(":") > name.rfind("/") else f"{name}:latest"


def _images(spec: Mapping[str, Any]) -> tuple[str, ...]:
    images = []
    for field in ("initContainers", "containers"):
        for container in spec.get(field) or ():
            if isinstance(container, Mapping):
                image = container.get("image")
                if isinstance(image, str):
                    images.append(normalized_image_name(image))
    return tuple(images)


def _claims(spec: Mapping[str, Any], key: str) -> tuple[PodClaimRef, ...]:
    refs = []
    for index, raw in enumerate(_list(spec.get("resourceClaims"), "Pod", key, "spec.resourceClaims")):
        entry = _mapping(raw, "Pod", key, f"spec.resourceClaims[{index}]")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidObjectError(
                "Pod", key, f"spec.resourceClaims[{index}].name", "must be a non-empty string"
            )
        refs.append(
            PodClaimRef(
                name=name,
                resource_claim_name=entry.get("resourceClaimName"),
                resource_claim_template_name=entry.get("resourceClaimTemplateName"),
            )
        )
    return tuple(refs)


def _volume_claims(spec: Mapping[str, Any], key: str) -> tuple[str, ...]:
    names = []
    for index, raw in enumerate(_list(spec.get("volumes"), "Pod", key, "spec.volumes")):
        source = _mapping(raw, "Pod", key, f"spec.volumes[{index}]").get("persistentVolumeClaim")
        if source is None:
            continue
        claim_name = _mapping(source, "Pod", key, f"spec.volumes[{index}].persistentVolumeClaim").get(
            "claimName"
        )
        if not isinstance(claim_name, str) or not claim_name:
            raise InvalidObjectError(
                "Pod",
                key,
                f"spec.volumes[{index}].persistentVolumeClaim.claimName",
                "must be a non-empty string",
            )
        if claim_name not in names:
            names.append(claim_name)
    return tuple(names)


def _ephemeral_claims(spec: Mapping[str, Any], pod_name: str, key: str) -> tuple[str, ...]:
    """The PVCs of the pod's generic ephemeral volumes: ``<pod name>-<volume name>`` each, the name
    kube-controller-manager's ephemeral volume controller gives the claim it creates
    (``ephemeral.VolumeClaimName``)."""
    names = []
    for index, raw in enumerate(_list(spec.get("volumes"), "Pod", key, "spec.volumes")):
        volume = _mapping(raw, "Pod", key, f"spec.volumes[{index}]")
        if volume.get("ephemeral") is None:
            continue
        volume_name = volume.get("name")
        if not isinstance(volume_name, str) or not volume_name:
            raise InvalidObjectError("Pod", key, f"spec.volumes[{index}].name", "must be a non-empty string")
        names.append(f"{pod_name}-{volume_name}")
    return tuple(names)


def _scheduled_condition(status: Mapping[str, Any], key: str) -> PodCondition | None:
    for condition in _list(status.get("conditions"), "Pod", key, "status.conditions"):
        if isinstance(condition, Mapping) and condition.get("type") == "PodScheduled":
            return PodCondition(
                str(condition.get("status", "")),
                str(condition.get("reason", "")),
                str(condition.get("message", "")),
            )
    return None


def _preempted_by(status: Mapping[str, Any], key: str) -> GroupKey | None:
    for condition in _list(status.get("conditions"), "Pod", key, "status.conditions"):
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == DISRUPTION_TARGET
            and condition.get("status") == "True"
            and condition.get("reason") == PREEMPTION_BY_SCHEDULER
        ):
            match = _PREEMPTED_BY.match(str(condition.get("message") or ""))
            if match is not None:
                return GroupKey(match.group(2), match.group(3), match.group(1) == "group")
    return None


def _active_deadline(spec: Mapping[str, Any], key: str) -> int | None:
    value = spec.get("activeDeadlineSeconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidObjectError(
            "Pod", key, "spec.activeDeadlineSeconds", f"must be a positive integer, got {value!r}"
        )
    return value


def _start_time(status: Mapping[str, Any], key: str) -> float | None:
    value = status.get("startTime")
    if value is None:
        return None
    try:
        return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise InvalidObjectError(
            "Pod", key, "status.startTime", f"must be an RFC 3339 time, got {value!r}"
        ) from None


def parse_pod(obj: Mapping[str, Any]) -> PodInfo:
    """Build a PodInfo from a Pod as the API returns it; raise InvalidObjectError on bad fields."""
    return parse_plain_pod(obj) or parse_pod_fully(obj)


def parse_pod_fully(obj: Mapping[str, Any]) -> PodInfo:
    """``parse_pod`` for every pod: each field checked, every error named."""
    metadata = _mapping(obj.get("metadata"), "Pod", "?", "metadata")
    namespace = metadata.get("namespace") or "default"
    name = metadata.get("name")
    if not isinstance(name, str) or not name:
        raise InvalidObjectError("Pod", f"{namespace}/?", "metadata.name", "must be a non-empty string")
    key = f"{namespace}/{name}"
    spec = _mapping(obj.get("spec"), "Pod", key, "spec")
    status = _mapping(obj.get("status"), "Pod", key, "status")
    labels = dict(_mapping(metadata.get("labels"), "Pod", key, "metadata.labels"))
    annotations = _mapping(metadata.get("annotations"), "Pod", key, "metadata.annotations")
    dialect_groups = _dialect_groups(labels, annotations) if labels or annotations else ()
    priority = spec.get("priority") or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidObjectError("Pod", key, "spec.priority", f"must be an integer, got {priority!r}")
    affinity = _mapping(spec.get("affinity"), "Pod", key, "spec.affinity")
    node_affinity = _mapping(affinity.get("nodeAffinity"), "Pod", key, "spec.affinity.nodeAffinity")
    tolerations = tuple(
        _mapping(toleration, "Pod", key, f"spec.tolerations[{index}]")
        for index, toleration in enumerate(_list(spec.get("tolerations"), "Pod", key, "spec.tolerations"))
    )
    claim_statuses: dict[str, str | None] = {}
    for index, raw in enumerate(
        _list(status.get("resourceClaimStatuses"), "Pod", key, "status.resourceClaimStatuses")
    ):
        entry = _mapping(raw, "Pod", key, f"status.resourceClaimStatuses[{index}]")
        claim_statuses[str(entry.get("name", ""))] = entry.get("resourceClaimName")
    requests = pod_requests(spec, key)
    containers: tuple[ContainerRequests, ...] = ()
    if any(is_dra_extended_resource_name(resource) for resource in requests):
        containers = _container_extended_requests(spec)
    try:
        placement = parse_placement(spec, metadata, namespace, labels)
    except PlacementFieldError as exc:
        raise InvalidObjectError("Pod", key, exc.field, exc.problem) from None
    return PodInfo(
        uid=str(metadata.get("uid") or key),
        namespace=namespace,
        name=name,
        resource_version=str(metadata.get("resourceVersion") or ""),
        labels=labels,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        group_name=labels.get(POD_GROUP_LABEL, ""),
        scheduling_group=str(
            _mapping(spec.get("schedulingGroup"), "Pod", key, "spec.schedulingGroup").get("podGroupName")
            or ""
        ),
        dialect_groups=dialect_groups,
        task=str(annotations.get(VOLCANO_TASK_SPEC_KEY) or labels.get(VOLCANO_TASK_SPEC_KEY) or "")
        if dialect_groups
        else "",
        priority=priority,
        requests=requests,
        node_selector=dict(_mapping(spec.get("nodeSelector"), "Pod", key, "spec.nodeSelector")),
        required_node_affinity=node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution"),
        tolerations=tolerations,
        claims=_claims(spec, key),
        volume_claims=_volume_claims(spec, key) if "volumes" in spec else (),
        ephemeral_claims=_ephemeral_claims(spec, name, key) if "volumes" in spec else (),
        claim_statuses=claim_statuses,
        deleting=metadata.get("deletionTimestamp") is not None,
        phase=str(status.get("phase") or "Pending"),
        scheduled_condition=_scheduled_condition(status, key),
        scheduling_gated=bool(_list(spec.get("schedulingGates"), "Pod", key, "spec.schedulingGates")),
        placement=placement,
        images=_images(spec),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        preempted_by=_preempted_by(status, key),
        containers=containers,
        active_deadline_seconds=_active_deadline(spec, key),
        start_time=_start_time(status, key),
    )


# Spec fields parse_plain_pod leaves to parse_pod_fully whenever they are present at all.
_NOT_PLAIN_SPEC = ("initContainers", "overhead", "resources")


def _plain_claims(entries: Any) -> tuple[PodClaimRef, ...] | None:
    """``_claims``'s answer for well-formed ``spec.resourceClaims``, None for anything else."""
    if entries is None:
        return ()
    if type(entries) is not list:
        return None
    refs = []
    for entry in entries:
        if type(entry) is not dict:
            return None
        name = entry.get("name")
        if type(name) is not str or not name:
            return None
        refs.append(PodClaimRef(name, entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")))
    return tuple(refs)


def _plain_claim_statuses(entries: Any) -> dict[str, str | None] | None:
    """``parse_pod_fully``'s ``claim_statuses`` for well-formed ``status.resourceClaimStatuses``."""
    if entries is None:
        return {}
    if type(entries) is not list:
        return None
    statuses: dict[str, str | None] = {}
    for entry in entries:
        if type(entry) is not dict:
            return None
        statuses[str(entry.get("name", ""))] = entry.get("resourceClaimName")
    return statuses


def parse_plain_pod(obj: Mapping[str, Any]) -> PodInfo | None:
    """``parse_pod_fully``'s result for the common pod, at a fraction of its cost (it was most of the
    CPU of applying the initial lists): every field read as there, with none of the checks that
    only name the field of an error. None for a pod with any field of another type than the API's,
    an unusual quantity, or init containers, pod overhead, pod-level resources,
    PVC or ephemeral volumes, a DisruptionTarget condition: those, and every error, are
    parse_pod_fully's."""
    metadata = obj.get("metadata")
    if type(metadata) is not dict:
        return None
    namespace = metadata.get("namespace") or "default"
    name = metadata.get("name")
    if type(namespace) is not str or type(name) is not str or not name:
        return None
    labels = metadata.get("labels")
    labels = {} if labels is None else dict(labels) if type(labels) is dict else None
    annotations = metadata.get("annotations")
    if annotations is None:
        annotations = {}
    spec = obj.get("spec")
    spec = {} if spec is None else spec
    status = obj.get("status")
    status = {} if status is None else status
    if labels is None or type(annotations) is not dict or type(spec) is not dict or type(status) is not dict:
        return None
    for field in _NOT_PLAIN_SPEC:
        if field in spec:
            return None
    priority = spec.get("priority") or 0
    if type(priority) is not int:
        return None
    claims = _plain_claims(spec.get("resourceClaims"))
    claim_statuses = _plain_claim_statuses(status.get("resourceClaimStatuses"))
    if claims is None or claim_statuses is None:
        return None

    requests: dict[str, int] = {}
    containers = spec.get("containers")
    if containers is not None:
        if type(containers) is not list:
            return None
        for container in containers:
            if type(container) is not dict:
                return None
            resources = container.get("resources")
            if resources is None:
                continue
            if type(resources) is not dict:
                return None
            own: dict[str, int] = {}
            for lists in ("limits", "requests"):
                amounts = resources.get(lists)
                if amounts is None:
                    continue
                if type(amounts) is not dict:
                    return None
                for resource, text in amounts.items():
                    try:
                        amount = to_resource_amount(resource, text)
                    except (QuantityError, TypeError):
                        return None
                    if amount < 0:
                        return None
                    own[resource] = amount
            for resource, amount in own.items():
                requests[resource] = requests.get(resource, 0) + amount
        requests = {resource: amount for resource, amount in requests.items() if amount}
    extended: tuple[ContainerRequests, ...] = ()
    if any(is_dra_extended_resource_name(resource) for resource in requests):
        extended = _container_extended_requests(spec)

    required_node_affinity = None
    affinity = spec.get("affinity")
    if affinity is not None:
        if type(affinity) is not dict:
            return None
        node_affinity = affinity.get("nodeAffinity")
        if node_affinity is not None:
            if type(node_affinity) is not dict:
                return None
            required_node_affinity = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    tolerations = spec.get("tolerations")
    if tolerations is None:
        tolerations = ()
    elif type(tolerations) is list and all(type(toleration) is dict for toleration in tolerations):
        tolerations = tuple(tolerations)
    else:
        return None
    node_selector = spec.get("nodeSelector")
    if node_selector is None:
        node_selector = {}
    elif type(node_selector) is dict:
        node_selector = dict(node_selector)
    else:
        return None
    scheduling_group = spec.get("schedulingGroup")
    if scheduling_group is None:
        scheduling_group = {}
    elif type(scheduling_group) is not dict:
        return None
    gates = spec.get("schedulingGates")
    if gates is not None and type(gates) is not list:
        return None
    volumes = spec.get("volumes")
    if volumes is not None:
        if type(volumes) is not list:
            return None
        for volume in volumes:
            if (
                type(volume) is not dict
                or volume.get("persistentVolumeClaim") is not None
                or volume.get("ephemeral") is not None
            ):
                return None
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (type(deadline) is not int or deadline < 1):
        return None

    scheduled_condition = None
    conditions = status.get("conditions")
    if conditions is not None:
        if type(conditions) is not list:
            return None
        for condition in conditions:
            if type(condition) is not dict or condition.get("type") == DISRUPTION_TARGET:
                return None
            if condition.get("type") == "PodScheduled" and scheduled_condition is None:
                scheduled_condition = PodCondition(
                    str(condition.get("status", "")),
                    str(condition.get("reason", "")),
                    str(condition.get("message", "")),
                )
    start_time = status.get("startTime")
    if start_time is not None:
        if type(start_time) is not str:
            return None
        try:
            start_time = datetime.fromisoformat(start_time.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    try:
        placement = parse_placement(spec, metadata, namespace, labels)
    except PlacementFieldError:
        return None

    key = f"{namespace}/{name}"
    dialect_groups = _dialect_groups(labels, annotations) if labels or annotations else ()
    return PodInfo(
        uid=str(metadata.get("uid") or key),
        namespace=namespace,
        name=name,
        resource_version=str(metadata.get("resourceVersion") or ""),
        labels=labels,
        scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
        node_name=str(spec.get("nodeName") or ""),
        group_name=labels.get(POD_GROUP_LABEL, ""),
        scheduling_group=str(scheduling_group.get("podGroupName") or ""),
        dialect_groups=dialect_groups,
        task=str(annotations.get(VOLCANO_TASK_SPEC_KEY) or labels.get(VOLCANO_TASK_SPEC_KEY) or "")
        if dialect_groups
        else "",
        priority=priority,
        requests=requests,
        node_selector=node_selector,
        required_node_affinity=required_node_affinity,
        tolerations=tolerations,
        claims=claims,
        claim_statuses=claim_statuses,
        deleting=metadata.get("deletionTimestamp") is not None,
        phase=str(status.get("phase") or "Pending"),
        scheduled_condition=scheduled_condition,
        scheduling_gated=bool(gates),
        placement=placement,
        images=_images(spec),
        preemption_policy=str(spec.get("preemptionPolicy") or "PreemptLowerPriority"),
        nominated_node_name=str(status.get("nominatedNodeName") or ""),
        containers=extended,
        active_deadline_seconds=deadline,
        start_time=start_time,
    )
