"""Invariants a correct scheduler never breaks, checked over API state.

The checks are pure functions over already-listed API objects (plain JSON dicts as the API server
returns them), so tests can feed synthetic states; :func:`fetch_cluster_state` lists the objects over
HTTP and :class:`BindingHistory` follows a pod watch for the one invariant a snapshot cannot see (a pod
bound twice). Every check returns :class:`Violation` values naming the object and what is wrong.

Some states are legal for a moment while a scheduler is mid-flight (a gang whose binding POSTs are
still landing, a claim reserved in PreBind before its pod's Bind). Those violations are
``transient``: :class:`ViolationTracker` reports them only once they outlive a grace period.
"""

from __future__ import annotations

import re
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from fractions import Fraction
from typing import Any

import aiohttp

from lockstep.dra.k8s_types import QuantityError, parse_quantity

JsonObject = Mapping[str, Any]

POD_GROUP_LABEL = "scheduling.lockstep.dev/pod-group"
PODGROUPS_PATH = "/apis/scheduling.lockstep.dev/v1alpha1/podgroups"
RESOURCE_CLAIMS_PATH = "/apis/resource.k8s.io/v1/resourceclaims"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
# Pod-level spec.resources may set these and huge pages (PodLevelResources); others come from
# containers only.
POD_LEVEL_RESOURCES = frozenset({"cpu", "memory"})


class ViolationKind(StrEnum):
    NODE_OVER_ALLOCATABLE = "NodeOverAllocatable"
    DEVICE_ALLOCATED_TWICE = "DeviceAllocatedTwice"
    GANG_PARTIALLY_BOUND = "GangPartiallyBound"
    BOUND_POD_NOT_SCHEDULED = "BoundPodNotScheduled"
    CLAIM_RESERVED_FOR_MISSING_POD = "ClaimReservedForMissingPod"
    CLAIM_RESERVED_FOR_UNBOUND_POD = "ClaimReservedForUnboundPod"
    CLAIM_RESERVED_OFF_ALLOCATION_NODE = "ClaimReservedOffAllocationNode"
    ALLOCATION_WITHOUT_CONSUMER = "AllocationWithoutConsumer"
    POD_BOUND_TWICE = "PodBoundTwice"
    PREEMPTED_NOT_LOWER = "PreemptedEqualOrHigherPriority"
    GANG_BELOW_MIN_COUNT_BY_PREEMPTION = "GangBelowMinCountByPreemption"
    MALFORMED_OBJECT = "MalformedObject"


# Legal for a moment during a scheduling or deletion cycle; a violation only if it persists.
TRANSIENT_KINDS = frozenset(
    {
        ViolationKind.GANG_PARTIALLY_BOUND,
        ViolationKind.CLAIM_RESERVED_FOR_MISSING_POD,
        ViolationKind.CLAIM_RESERVED_FOR_UNBOUND_POD,
        ViolationKind.ALLOCATION_WITHOUT_CONSUMER,
        # a preemption's victims are marked one write at a time
        ViolationKind.GANG_BELOW_MIN_COUNT_BY_PREEMPTION,
    }
)


@dataclass(frozen=True, slots=True)
class Violation:
    kind: ViolationKind
    object_ref: str
    message: str

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT_KINDS

    def __str__(self) -> str:
        return f"{self.kind}: {self.object_ref}: {self.message}"


@dataclass(slots=True)
class ClusterState:
    nodes: list[JsonObject] = field(default_factory=list)
    pods: list[JsonObject] = field(default_factory=list)
    podgroups: list[JsonObject] = field(default_factory=list)
    claims: list[JsonObject] = field(default_factory=list)


def _meta(obj: JsonObject) -> JsonObject:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, Mapping) else {}


def _namespaced_name(obj: JsonObject) -> str:
    metadata = _meta(obj)
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata.get('name')}" if namespace else str(metadata.get("name"))


def _ref(kind: str, obj: JsonObject) -> str:
    return f"{kind}/{_namespaced_name(obj)}"


def _spec(obj: JsonObject) -> JsonObject:
    spec = obj.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _status(obj: JsonObject) -> JsonObject:
    status = obj.get("status")
    return status if isinstance(status, Mapping) else {}


def _node_name(pod: JsonObject) -> str:
    return str(_spec(pod).get("nodeName") or "")


def _is_terminal(pod: JsonObject) -> bool:
    return _status(pod).get("phase") in TERMINAL_PHASES


# --- resource accounting, as k8s.io/component-helpers/resource.PodRequests computes it ---------------

ResourceList = dict[str, Fraction]


class ResourceParseError(ValueError):
    pass


def _parse_resource_list(raw: Any, where: str) -> ResourceList:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise ResourceParseError(f"{where}: must be a map of resource name to quantity")
    parsed: ResourceList = {}
    for name, text in raw.items():
        try:
            parsed[str(name)] = parse_quantity(str(text)).value
        except QuantityError as exc:
            raise ResourceParseError(f"{where}.{name}: {text!r}: {exc}") from None
    return parsed


def _add(total: ResourceList, extra: Mapping[str, Fraction]) -> None:
    for name, value in extra.items():
        total[name] = total.get(name, Fraction(0)) + value


def _max_into(total: ResourceList, other: Mapping[str, Fraction]) -> None:
    for name, value in other.items():
        if value > total.get(name, Fraction(0)):
            total[name] = value


def _container_requests(container: Any, where: str) -> ResourceList:
    """Requests, defaulted from limits like the API server's defaulting does."""
    if not isinstance(container, Mapping):
        raise ResourceParseError(f"{where}: must be an object")
    resources = container.get("resources") or {}
    if not isinstance(resources, Mapping):
        raise ResourceParseError(f"{where}.resources: must be an object")
    requests = _parse_resource_list(resources.get("requests"), f"{where}.resources.requests")
    limits = _parse_resource_list(resources.get("limits"), f"{where}.resources.limits")
    for name, value in limits.items():
        requests.setdefault(name, value)
    return requests


def _containers(spec: JsonObject, key: str, where: str) -> list[Any]:
    containers = spec.get(key) or []
    if not isinstance(containers, list):
        raise ResourceParseError(f"{where}.{key}: must be a list")
    return containers


def pod_requests(pod: JsonObject) -> ResourceList:
    """The pod's effective requests: containers and running sidecars summed, init containers maxed
    over (each with the sidecars started before it), pod-level requests, plus overhead."""
    spec = _spec(pod)
    where = f"{_ref('Pod', pod)} spec"
    requests: ResourceList = {}
    for index, container in enumerate(_containers(spec, "containers", where)):
        _add(requests, _container_requests(container, f"{where}.containers[{index}]"))
    sidecars: ResourceList = {}
    init_peak: ResourceList = {}
    for index, container in enumerate(_containers(spec, "initContainers", where)):
        container_requests = _container_requests(container, f"{where}.initContainers[{index}]")
        if container.get("restartPolicy") == "Always":
            _add(requests, container_requests)
            _add(sidecars, container_requests)
            _max_into(init_peak, sidecars)
        else:
            during_init = dict(container_requests)
            _add(during_init, sidecars)
            _max_into(init_peak, during_init)
    _max_into(requests, init_peak)
    pod_resources = spec.get("resources") or {}
    if isinstance(pod_resources, Mapping):
        pod_level = _parse_resource_list(pod_resources.get("requests"), f"{where}.resources.requests")
        requests.update(
            {k: v for k, v in pod_level.items() if k in POD_LEVEL_RESOURCES or k.startswith("hugepages-")}
        )
    _add(requests, _parse_resource_list(spec.get("overhead"), f"{where}.overhead"))
    return {name: value for name, value in requests.items() if value != 0}


def _format_quantity(name: str, value: Fraction) -> str:
    if name == "cpu" and value.denominator != 1:
        millis = value * 1000
        return f"{millis.numerator}m" if millis.denominator == 1 else str(float(value))
    return str(value.numerator) if value.denominator == 1 else str(float(value))


def check_nodes_within_allocatable(
    nodes: Iterable[JsonObject], pods: Iterable[JsonObject]
) -> list[Violation]:
    """No node holds more bound, non-terminal pods (or requests) than its status.allocatable. An
    extended resource the pod's ``status.extendedResourceClaimStatus`` maps comes from DRA devices (the
    device checks judge it), not from the node's allocatable."""
    violations: list[Violation] = []
    used: dict[str, ResourceList] = defaultdict(dict)
    pods_on: dict[str, list[str]] = defaultdict(list)
    for pod in pods:
        node_name = _node_name(pod)
        if not node_name or _is_terminal(pod):
            continue
        try:
            requests = pod_requests(pod)
        except ResourceParseError as exc:
            violations.append(Violation(ViolationKind.MALFORMED_OBJECT, _ref("Pod", pod), str(exc)))
            continue
        for mapping in (_status(pod).get("extendedResourceClaimStatus") or {}).get("requestMappings") or ():
            if isinstance(mapping, Mapping):
                requests.pop(str(mapping.get("resourceName")), None)
        requests["pods"] = Fraction(1)
        _add(used[node_name], requests)
        pods_on[node_name].append(_namespaced_name(pod))
    for node in nodes:
        name = str(_meta(node).get("name"))
        if name not in used:
            continue
        try:
            allocatable = _parse_resource_list(_status(node).get("allocatable"), "status.allocatable")
        except ResourceParseError as exc:
            violations.append(Violation(ViolationKind.MALFORMED_OBJECT, f"Node/{name}", str(exc)))
            continue
        for resource, amount in sorted(used[name].items()):
            limit = allocatable.get(resource, Fraction(0))
            if amount > limit:
                violations.append(
                    Violation(
                        ViolationKind.NODE_OVER_ALLOCATABLE,
                        f"Node/{name}",
                        f"{resource}: bound pods request {_format_quantity(resource, amount)}, allocatable "
                        f"is {_format_quantity(resource, limit)} (pods: {', '.join(sorted(pods_on[name]))})",
                    )
                )
    return violations


# --- DRA --------------------------------------------------------------------------------------------


def _allocation(claim: JsonObject) -> JsonObject:
    allocation = _status(claim).get("allocation")
    return allocation if isinstance(allocation, Mapping) else {}


def _allocation_results(claim: JsonObject) -> list[JsonObject]:
    devices = _allocation(claim).get("devices")
    results = devices.get("results") if isinstance(devices, Mapping) else None
    return [r for r in results if isinstance(r, Mapping)] if isinstance(results, list) else []


def check_devices_allocated_once(claims: Iterable[JsonObject]) -> list[Violation]:
    """No device (driver, pool, device) is in the allocation of two claims. Admin-access results and
    shared results of multi-allocatable devices (those carrying a shareID) may legally repeat."""
    holders: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for claim in claims:
        seen_in_claim: set[tuple[str, str, str]] = set()
        for result in _allocation_results(claim):
            if result.get("adminAccess") or result.get("shareID"):
                continue
            device = (str(result.get("driver")), str(result.get("pool")), str(result.get("device")))
            if device in seen_in_claim:
                continue
            seen_in_claim.add(device)
            holders[device].append(_namespaced_name(claim))
    return [
        Violation(
            ViolationKind.DEVICE_ALLOCATED_TWICE,
            f"Device/{driver}/{pool}/{device}",
            f"allocated to {len(claims_holding)} claims: {', '.join(sorted(claims_holding))}",
        )
        for (driver, pool, device), claims_holding in sorted(holders.items())
        if len(claims_holding) > 1
    ]


def _label_matches(labels: Mapping[str, str], requirement: JsonObject) -> bool:
    key = str(requirement.get("key"))
    operator = requirement.get("operator")
    values = [str(v) for v in requirement.get("values") or []]
    present = key in labels
    value = labels.get(key)
    if operator == "In":
        return present and value in values
    if operator == "NotIn":
        return not present or value not in values
    if operator == "Exists":
        return present
    if operator == "DoesNotExist":
        return not present
    if operator in ("Gt", "Lt") and present and len(values) == 1:
        try:
            actual, bound = int(str(value)), int(values[0])
        except ValueError:
            return False
        return actual > bound if operator == "Gt" else actual < bound
    return False


def node_matches_selector(node: JsonObject, selector: JsonObject) -> bool:
    """v1.NodeSelector semantics: terms are ORed, requirements within a term ANDed; a term with no
    requirements matches nothing."""
    labels = _meta(node).get("labels") or {}
    fields = {"metadata.name": str(_meta(node).get("name"))}
    for term in selector.get("nodeSelectorTerms") or []:
        expressions = term.get("matchExpressions") or []
        field_expressions = term.get("matchFields") or []
        if not expressions and not field_expressions:
            continue
        if all(_label_matches(labels, r) for r in expressions) and all(
            _label_matches(fields, r) for r in field_expressions
        ):
            return True
    return False


def check_claim_reservations(
    claims: Iterable[JsonObject], pods: Iterable[JsonObject], nodes: Iterable[JsonObject]
) -> list[Violation]:
    """Every pod in a claim's status.reservedFor exists (same UID), is bound, and is bound to a node
    that the allocation's nodeSelector admits."""
    pods_by_key = {(_meta(p).get("namespace"), _meta(p).get("name")): p for p in pods}
    nodes_by_name = {_meta(n).get("name"): n for n in nodes}
    violations: list[Violation] = []
    for claim in claims:
        namespace = _meta(claim).get("namespace")
        claim_ref = _ref("ResourceClaim", claim)
        selector = _allocation(claim).get("nodeSelector")
        for consumer in _status(claim).get("reservedFor") or []:
            if consumer.get("resource") != "pods" or consumer.get("apiGroup") not in (None, ""):
                continue
            pod_name = consumer.get("name")
            pod = pods_by_key.get((namespace, pod_name))
            if pod is None or (consumer.get("uid") and _meta(pod).get("uid") != consumer.get("uid")):
                violations.append(
                    Violation(
                        ViolationKind.CLAIM_RESERVED_FOR_MISSING_POD,
                        claim_ref,
                        f"reserved for pod {namespace}/{pod_name} (uid {consumer.get('uid')}), "
                        "which does not exist",
                    )
                )
                continue
            node_name = _node_name(pod)
            if not node_name:
                violations.append(
                    Violation(
                        ViolationKind.CLAIM_RESERVED_FOR_UNBOUND_POD,
                        claim_ref,
                        f"reserved for pod {namespace}/{pod_name}, which is not bound to a node",
                    )
                )
                continue
            if not isinstance(selector, Mapping):
                continue
            node = nodes_by_name.get(node_name)
            if node is None:
                # The node was deleted under its pods: the pod GC deletes them, and the resourceclaim
                # controller then drops the reservation, as in Kubernetes; the claim is not misplaced.
                continue
            if not node_matches_selector(node, selector):
                violations.append(
                    Violation(
                        ViolationKind.CLAIM_RESERVED_OFF_ALLOCATION_NODE,
                        claim_ref,
                        f"reserved for pod {namespace}/{pod_name} bound to node {node_name}, which the "
                        "allocation nodeSelector excludes",
                    )
                )
    return violations


def check_allocations_have_consumers(claims: Iterable[JsonObject]) -> list[Violation]:
    """An allocation is written together with its first reservation, and the resourceclaim controller
    deallocates when the last consumer goes; an allocated claim reserved for nobody is an in-flight
    allocation that outlived its pods."""
    return [
        Violation(
            ViolationKind.ALLOCATION_WITHOUT_CONSUMER,
            _ref("ResourceClaim", claim),
            f"allocated ({len(_allocation_results(claim))} devices) but reserved for no consumer",
        )
        for claim in claims
        if _allocation(claim) and not _status(claim).get("reservedFor")
    ]


# --- pods and gangs -----------------------------------------------------------------------------------


def check_bound_pods_scheduled(pods: Iterable[JsonObject]) -> list[Violation]:
    """spec.nodeName is the truth: a bound pod never carries PodScheduled=False."""
    violations: list[Violation] = []
    for pod in pods:
        if not _node_name(pod):
            continue
        for condition in _status(pod).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                violations.append(
                    Violation(
                        ViolationKind.BOUND_POD_NOT_SCHEDULED,
                        _ref("Pod", pod),
                        f"bound to {_node_name(pod)} but PodScheduled=False "
                        f"(reason {condition.get('reason')!r}: {condition.get('message')!r})",
                    )
                )
    return violations


def _gang_min_count(podgroup: JsonObject) -> int | None:
    policy = _spec(podgroup).get("schedulingPolicy")
    gang = policy.get("gang") if isinstance(policy, Mapping) else None
    min_count = gang.get("minCount") if isinstance(gang, Mapping) else None
    return min_count if isinstance(min_count, int) and not isinstance(min_count, bool) else None


def check_gangs_bound(podgroups: Iterable[JsonObject], pods: Iterable[JsonObject]) -> list[Violation]:
    """A gang has either no member bound or at least minCount. Excused when fewer than minCount members
    exist any more (members were deleted, or the group has no more pods to give)."""
    members: dict[tuple[Any, str], list[JsonObject]] = defaultdict(list)
    for pod in pods:
        group = (_meta(pod).get("labels") or {}).get(POD_GROUP_LABEL)
        if group:
            members[(_meta(pod).get("namespace"), group)].append(pod)
    violations: list[Violation] = []
    for podgroup in podgroups:
        min_count = _gang_min_count(podgroup)
        if min_count is None:
            continue
        group_members = members.get((_meta(podgroup).get("namespace"), str(_meta(podgroup).get("name"))), [])
        bound = sum(1 for pod in group_members if _node_name(pod))
        if 0 < bound < min_count <= len(group_members):
            violations.append(
                Violation(
                    ViolationKind.GANG_PARTIALLY_BOUND,
                    _ref("PodGroup", podgroup),
                    f"{bound} of {len(group_members)} members bound, minCount is {min_count}",
                )
            )
    return violations


def check_state(state: ClusterState) -> list[Violation]:
    """Every snapshot invariant over one consistent listing."""
    return [
        *check_nodes_within_allocatable(state.nodes, state.pods),
        *check_devices_allocated_once(state.claims),
        *check_gangs_bound(state.podgroups, state.pods),
        *check_bound_pods_scheduled(state.pods),
        *check_claim_reservations(state.claims, state.pods, state.nodes),
        *check_allocations_have_consumers(state.claims),
    ]


# --- history -----------------------------------------------------------------------------------------


class BindingHistory:
    """Follows pod watch events and records every pod whose spec.nodeName changed from one node to
    another: a pod bound twice. Keyed by UID, so a deleted and recreated pod starts afresh."""

    def __init__(self) -> None:
        self._bound_to: dict[str, str] = {}
        self._violations: list[Violation] = []

    def observe(self, pod: JsonObject) -> None:
        uid = str(_meta(pod).get("uid") or _namespaced_name(pod))
        node_name = _node_name(pod)
        if not node_name:
            return
        previous = self._bound_to.setdefault(uid, node_name)
        if previous != node_name:
            self._violations.append(
                Violation(
                    ViolationKind.POD_BOUND_TWICE,
                    _ref("Pod", pod),
                    f"bound to {previous}, later to {node_name}",
                )
            )
            self._bound_to[uid] = node_name

    @property
    def bound_pods(self) -> int:
        return len(self._bound_to)

    def violations(self) -> list[Violation]:
        return list(self._violations)


_PREEMPTOR_PRIORITY = re.compile(r"^lockstep: preempted by (?:group|pod) \S+, priority (-?\d+)")


class PreemptionHistory:
    """Follows pod watch events for what a preemption must never do: take a victim whose priority is
    not below the preemptor's (lockstep's DisruptionTarget message names the preemptor's priority),
    or leave a gang running below minCount (once a member is a victim, the members still bound and
    not victims must be none or at least minCount)."""

    def __init__(self) -> None:
        self.victims: dict[str, tuple[str, int, int]] = {}  # uid -> (pod ref, priority, preemptor's)
        self._bound: dict[tuple[str, str], set[str]] = defaultdict(set)  # gang -> live bound non-victims
        self.preempted_groups: set[tuple[str, str]] = set()  # (namespace, group) of every victim

    def observe(self, event_type: str, pod: JsonObject) -> None:
        meta = _meta(pod)
        uid = str(meta.get("uid") or _namespaced_name(pod))
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        key = (str(meta.get("namespace")), str(group)) if group else None
        preemptor_priority = _preemptor_priority(pod)
        if preemptor_priority is not None:
            priority = _spec(pod).get("priority")
            self.victims.setdefault(
                uid, (_ref("Pod", pod), priority if isinstance(priority, int) else 0, preemptor_priority)
            )
            if key is not None:
                self.preempted_groups.add(key)
        if key is None:
            return
        alive = event_type != "DELETED" and not meta.get("deletionTimestamp") and not _is_terminal(pod)
        if alive and _node_name(pod) and uid not in self.victims:
            self._bound[key].add(uid)
        else:
            self._bound[key].discard(uid)

    def violations(self, min_counts: Mapping[tuple[str, str], int]) -> list[Violation]:
        """``min_counts``: each gang's minCount by (namespace, PodGroup name)."""
        found = [
            Violation(
                ViolationKind.PREEMPTED_NOT_LOWER,
                ref,
                f"priority {priority} preempted by a group of priority {preemptor}",
            )
            for ref, priority, preemptor in self.victims.values()
            if priority >= preemptor
        ]
        for key in sorted(self.preempted_groups):
            min_count = min_counts.get(key)
            left = len(self._bound.get(key, ()))
            if min_count is not None and 0 < left < min_count:
                found.append(
                    Violation(
                        ViolationKind.GANG_BELOW_MIN_COUNT_BY_PREEMPTION,
                        f"PodGroup {key[0]}/{key[1]}",
                        f"{left} members left running after a preemption, minCount is {min_count}",
                    )
                )
        return found


def _preemptor_priority(pod: JsonObject) -> int | None:
    for condition in _status(pod).get("conditions") or []:
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == "DisruptionTarget"
            and condition.get("status") == "True"
            and condition.get("reason") == "PreemptionByScheduler"
        ):
            match = _PREEMPTOR_PRIORITY.match(str(condition.get("message") or ""))
            if match is not None:
                return int(match.group(1))
    return None


def gang_min_counts(podgroups: Iterable[JsonObject]) -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for podgroup in podgroups:
        min_count = _gang_min_count(podgroup)
        if min_count is not None:
            counts[(str(_meta(podgroup).get("namespace")), str(_meta(podgroup).get("name")))] = min_count
    return counts


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the API emulator's request log records it."""

    method: str
    path: str
    status: int


def check_single_binding_per_pod(requests: Iterable[RecordedRequest]) -> list[Violation]:
    """At most one successful POST to a pod's binding subresource. Assumes pod names are not reused
    within the log (the soak and tests never recreate a pod under the same name)."""
    successes: Counter[str] = Counter()
    for request in requests:
        if request.method != "POST" or not 200 <= request.status < 300:
            continue
        parts = request.path.split("?", 1)[0].strip("/").split("/")
        # api/v1/namespaces/<ns>/pods/<name>/binding
        if (
            len(parts) == 7
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4::2] == ["pods", "binding"]
        ):
            successes[f"{parts[3]}/{parts[5]}"] += 1
    return [
        Violation(ViolationKind.POD_BOUND_TWICE, f"Pod/{pod}", f"{count} successful binding POSTs")
        for pod, count in sorted(successes.items())
        if count > 1
    ]


class ViolationTracker:
    """Turns repeated snapshots into verdicts: a violation of a persistent kind counts at once, a
    transient one only once it has been seen continuously for ``grace_seconds``."""

    def __init__(self, grace_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.grace_seconds = grace_seconds
        self._clock = clock
        self._first_seen: dict[tuple[ViolationKind, str], float] = {}
        self.confirmed: dict[tuple[ViolationKind, str], Violation] = {}

    def update(self, violations: Iterable[Violation]) -> list[Violation]:
        """Feed one snapshot's violations; returns those newly confirmed by it."""
        now = self._clock()
        current: dict[tuple[ViolationKind, str], Violation] = {}
        for violation in violations:
            current.setdefault((violation.kind, violation.object_ref), violation)
        self._first_seen = {key: self._first_seen.get(key, now) for key in current}
        newly: list[Violation] = []
        for key, violation in current.items():
            if key in self.confirmed:
                continue
            if not violation.transient or now - self._first_seen[key] >= self.grace_seconds:
                self.confirmed[key] = violation
                newly.append(violation)
        return newly


# --- fetching ----------------------------------------------------------------------------------------


async def _list_items(session: aiohttp.ClientSession, base_url: str, path: str) -> list[JsonObject]:
    async with session.get(base_url.rstrip("/") + path) as response:
        if response.status == 404:
            return []
        response.raise_for_status()
        body = await response.json()
    items = body.get("items") if isinstance(body, Mapping) else None
    return list(items) if isinstance(items, list) else []


async def fetch_cluster_state(session: aiohttp.ClientSession, base_url: str) -> ClusterState:
    """List nodes, pods, PodGroups and ResourceClaims (a missing API group lists as empty). Pods are
    listed last, so a pod bound between listings is seen bound rather than missing."""
    nodes = await _list_items(session, base_url, "/api/v1/nodes")
    podgroups = await _list_items(session, base_url, PODGROUPS_PATH)
    claims = await _list_items(session, base_url, RESOURCE_CLAIMS_PATH)
    pods = await _list_items(session, base_url, "/api/v1/pods")
    return ClusterState(nodes=nodes, pods=pods, podgroups=podgroups, claims=claims)
