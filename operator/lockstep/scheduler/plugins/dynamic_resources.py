"""DynamicResources: places pods with their resource.k8s.io/v1 ResourceClaims.

PreFilter resolves the pod's claims (its own, the ones generated from its templates, its PodGroup's)
and sorts them: already allocated (in the assume cache or the informer), allocation pending in flight
(decided by an earlier member of the group), or to allocate. Filter checks a node against the
allocated and pending ones' nodeSelector and runs the allocator for the rest. Candidate nodes are
narrowed to those holding the allocated devices and, when devices are needed, to nodes with a free one.
In a gang, a member whose claims offer alternatives (firstAvailable) takes the first choice that still
leaves devices for the other members (upstream #138765: first fit can starve the rest of the gang).

Reserve (docs/architecture.md behaviours 1 and 4): an allocated claim is reused and nothing is recorded
in flight; a pending allocation is reused (a sharer is added, the node check still applies, upstream #140087);
otherwise the allocation found by Filter is recorded in flight. Every claim also gets the pod added to
its reservation plan.

PreBind writes a claim once per gang: one strict patch (the claim's resourceVersion) with the allocation
and the ``reservedFor`` entries of every planned member. Members wait for each other per claim, so a
later member finds itself reserved and writes nothing. On success the written claim is assumed and the
in-flight entry force-removed; on failure nothing is released here (Unreserve does it, once).
Unreserve removes the pod's sharer and restores the assumed claim only when that deleted the entry;
if the pod's reservation was already written it is taken out of ``reservedFor`` again in the background.

Binding conditions (DRADeviceBindingConditions with DRAResourceClaimDeviceStatus): when a claim's
allocation names devices with ``bindingConditions``, PreBind waits after writing it until the claim's
``status.devices`` shows every condition True, at most ``binding_timeout`` seconds, as upstream does.
The members of a gang wait together and share one verdict (:class:`_BindingWait`): one failure
condition, a timeout or a member that fails before binding fails every member, so the whole gang is
unreserved and retried and none of it binds. The allocations waited for are then cleared (allocation,
``reservedFor``, ``status.devices``) so the retry can choose other devices.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator, Callable, Collection, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from lockstep.api.resource import (
    DELETE_PROTECTION_FINALIZER,
    RESERVED_FOR_MAX_SIZE,
    AllocationResult,
    ResourceClaim,
    ResourceClaimConsumerReference,
)
from lockstep.dra.allocator import AllocationError, CompiledClaim, Picks
from lockstep.dra.claims import (
    ClaimsNotReady,
    check_owner,
    claim_status_patch,
    consumer_for,
    merged_consumers,
    pod_consumer,
    reserved_for_limit_message,
    resolve_claims,
)
from lockstep.dra.extended import (
    ExtendedClaimRequests,
    claim_for,
    dra_resources,
    in_memory_claim,
    is_dra_extended_resource_name,
    requests_and_mappings,
)
from lockstep.dra.features import allocator_features
from lockstep.dra.node_selector import node_selector_matches
from lockstep.dra.ports import ClaimStatusAPI, ClaimWriteOutcome, ExtendedClaimAPI, WriteResult
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import (
    BINDING_NOTE_SERVICE,
    BINDING_WAIT,
    CYCLE_PODS,
    PLACEMENT_CHOICE,
    SKIP,
    SUCCESS,
    Code,
    CycleState,
    GroupKey,
    NodeInfo,
    PodGroupInfo,
    PodInfo,
    Status,
)
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.state.assume_cache import AssumeCacheError
from lockstep.state.cluster import ClusterCache

log = logging.getLogger(__name__)

STORE_SERVICE = "dra.store"
CLAIM_API_SERVICE = "dra.claim_api"

_STATE_KEY = "DynamicResources"
RESERVATION_REMOVAL_ATTEMPTS = 5
GANG_LOOKAHEAD_MAX_MEMBERS = 32
GANG_LOOKAHEAD_MAX_SEARCHES = 2000
CANNOT_ALLOCATE = "cannot allocate all claims"  # kube-scheduler's DynamicResources Filter reason
SUMMARY_REASONS = 2  # distinct per-node reasons a pod's diagnosis quotes
_GANG_KEY = f"{_STATE_KEY}/gang"
_CLAIM_USERS_KEY = f"{_STATE_KEY}/claim-users"
_POSITIONS_KEY = f"{_STATE_KEY}/positions"
_BINDING_KEY = f"{_STATE_KEY}/binding-wait"
BINDING_TIMEOUT_SECONDS = 600.0  # upstream's DynamicResources BindingTimeout default
BINDING_POLL_SECONDS = 0.05
# resourceapi.DeviceRequestsMaxSize and AllocationResultsMaxSize
CLAIM_LIST_MAX_SIZE = 32
EXTENDED_CLAIM_INFORMER_TIMEOUT = 120.0  # upstream's AssumeExtendedResourceTimeoutDefaultSeconds


@dataclass(slots=True)
class _BindingWait:
    """The binding conditions one gang (or one pod outside a gang) waits for at PreBind.

    Reserve records each member and the claims whose allocations carry binding conditions; the verdict
    is decided once, after every member has written its claims, and every member gets it."""

    members: set[str] = field(default_factory=set)  # pods reserved in the cycle
    arrived: set[str] = field(default_factory=set)  # pods whose PreBind wrote their claims
    conditioned: dict[str, None] = field(default_factory=dict)  # claim keys with binding conditions
    verdict: asyncio.Future[Status] | None = None
    decider: asyncio.Task[None] | None = None
    waiting: int = 0  # members awaiting the verdict now

    def future(self) -> asyncio.Future[Status]:
        if self.verdict is None:
            self.verdict = asyncio.get_running_loop().create_future()
        return self.verdict

    def decide(self, status: Status) -> None:
        verdict = self.future()
        if not verdict.done():
            verdict.set_result(status)


@dataclass(slots=True)
class _ExtendedNeed:
    """The pod's DRA extended resources and the claim that gives them on each node tried."""

    classes: dict[str, str]  # extended resource -> DeviceClass providing it
    resources: frozenset[str] = frozenset()  # the keys of ``classes``
    # The resources DRA provides on a node (those it does not advertise) -> the claim for them there.
    variants: dict[frozenset[str], tuple[ExtendedClaimRequests, CompiledClaim]] = field(default_factory=dict)
    on_node: dict[str, frozenset[str]] = field(default_factory=dict)  # node -> resources DRA provides
    created: ResourceClaim | None = None  # the claim PreBind created, until the pod binds or leaves


@dataclass(slots=True)
class _PodClaims:
    """The pod's claims as PreFilter sorted them; carried to Filter, Reserve, PreBind, Unreserve."""

    claims: list[ResourceClaim]
    # Who each claim is reserved for when this pod uses it: the pod, or its PodGroup (a group claim).
    consumers: list[ResourceClaimConsumerReference] = field(default_factory=list)
    # Claims allocated already (cache) or pending (in flight): index in ``claims`` -> that allocation.
    placed: dict[int, AllocationResult] = field(default_factory=dict)
    to_allocate: list[int] = field(default_factory=list)
    compiled: list[CompiledClaim] = field(default_factory=list)
    found: dict[str, list[Picks]] = field(default_factory=dict)  # node -> devices per to_allocate claim
    crowding: set[str] = field(default_factory=set)  # nodes where every choice starves the rest of the gang
    node_labels: dict[str, Mapping[str, str]] = field(default_factory=dict)  # nodes Filter saw
    signaled: list[tuple[str, str]] = field(default_factory=list)  # (claim uid, claim key) signaled
    planned: list[str] = field(default_factory=list)  # claim keys the pod was added to the plan of
    rejections: dict[str, str] = field(default_factory=dict)  # node -> why Filter found no devices there
    # claim key -> what the pod and the later members sharing the claim need on one node (empty: no sharers)
    sharer_needs: dict[str, dict[str, int]] = field(default_factory=dict)
    extended: _ExtendedNeed | None = None  # DRA extended resources (DRAExtendedResource)

    def compiled_on(self, node: str) -> list[CompiledClaim]:
        """The claims to allocate on ``node``: ``compiled``, then the extended resource claim if DRA
        provides any of the pod's extended resources there."""
        extended = self.extended
        served = None if extended is None else extended.on_node.get(node)
        if not served:
            return self.compiled
        assert extended is not None
        return [*self.compiled, extended.variants[served][1]]


def _later_in_cycle(state: CycleState, pod: PodInfo, at_most: int | None = None) -> list[PodInfo]:
    """The pods the group cycle places after ``pod``; none if there are more than ``at_most``."""
    pods: tuple[PodInfo, ...] = state.group_data.get(CYCLE_PODS, ())
    positions: dict[str, int] | None = state.group_data.get(_POSITIONS_KEY)
    if positions is None:
        positions = {member.uid: position for position, member in enumerate(pods)}
        state.group_data[_POSITIONS_KEY] = positions
    position = positions.get(pod.uid)
    if position is None or (at_most is not None and len(pods) - position - 1 > at_most):
        return []
    return list(pods[position + 1 :])


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'s' if count != 1 else ''}"


def _node_names(allocation: AllocationResult) -> set[str] | None:
    """The nodes an allocation's nodeSelector names by metadata.name, or None if it does not."""
    selector = allocation.node_selector
    if selector is None or len(selector.node_selector_terms) != 1:
        return None
    names: set[str] | None = None
    for requirement in selector.node_selector_terms[0].match_fields:
        if requirement.key == "metadata.name" and requirement.operator == "In":
            values = set(requirement.values)
            names = values if names is None else names & values
    return names


def dra_extended_resources(ctx: PluginContext) -> Callable[[str], bool] | None:
    """For NodeResourcesFit: whether a DeviceClass provides an extended resource; None when
    DRAExtendedResource is off or the scheduler has no DRA wiring."""
    store = ctx.services.get(STORE_SERVICE)
    if not isinstance(store, ResourceStore) or not store.features.extended_resource:
        return None
    return lambda resource: (
        is_dra_extended_resource_name(resource) and store.extended_resource_class(resource) is not None
    )


class DynamicResources:
    name: ClassVar[str] = "DynamicResources"

    def __init__(
        self,
        store: ResourceStore,
        claim_api: ClaimStatusAPI | None,
        cache: ClusterCache | None = None,
        note_binding: Callable[[GroupKey, str], None] | None = None,
    ) -> None:
        """``note_binding``: told what a placed group's binding waits for (its status shows it)."""
        self.store = store
        self.note_binding = note_binding
        self.claim_api = claim_api
        self.cache = cache  # the nodes, for the gang lookahead
        # Reservation plans: claim key -> pod uid -> consumer, for pods reserved but not yet written.
        self._plans: dict[str, dict[str, ResourceClaimConsumerReference]] = {}
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._deciders: set[asyncio.Task[None]] = set()  # one per group waiting for binding conditions
        self._deleting: set[str] = set()  # UIDs of extended resource claims being deleted
        self.binding_timeout = BINDING_TIMEOUT_SECONDS
        # PodGroup (namespace/name, or the pod's key outside a group) -> what it waits for at PreBind.
        self.binding_waits: dict[str, str] = {}

    @classmethod
    def from_context(cls, ctx: PluginContext) -> DynamicResources:
        """Uses the store and claim API the operator hands over in ``ctx.services``; without them
        (a scheduler without DRA wiring) an empty store, and PreBind refuses to write."""
        store = ctx.services.get(STORE_SERVICE)
        if not isinstance(store, ResourceStore):
            store = ResourceStore(allocator_features(ctx.settings.feature_gates), ctx.cache.on_claims_changed)
        claim_api = ctx.services.get(CLAIM_API_SERVICE)
        note = ctx.services.get(BINDING_NOTE_SERVICE)
        return cls(
            store,
            claim_api if isinstance(claim_api, ClaimStatusAPI) else None,
            ctx.cache,
            note if callable(note) else None,
        )

    def _state_key(self, pod: PodInfo) -> str:
        return f"{_STATE_KEY}/{pod.uid}"

    def _pod_claims(self, state: CycleState, pod: PodInfo) -> _PodClaims | None:
        value = state.read(self._state_key(pod))
        return value if isinstance(value, _PodClaims) else None

    def _consumers(self, claim: ResourceClaim) -> set[str]:
        planned = self._plans.get(claim.key, {})
        return {ref.uid for ref in claim.status.reserved_for} | {ref.uid for ref in planned.values()}

    # --- PreFilter / Filter ------------------------------------------------------------------------

    def pre_filter(self, state: CycleState, pod: PodInfo) -> Status:
        extended = None
        if self.store.features.extended_resource:
            classes = dra_resources(pod, self.store.extended_resource_class_name)
            if classes:
                left_over = self.store.extended_claim_of(pod)
                if left_over is not None:
                    # As kube-scheduler: a claim from an earlier attempt is never reused (its devices
                    # were chosen for another node); it is deleted and the pod scheduled afresh.
                    self._delete_extended_claim(left_over, pod)
                    return Status(
                        Code.WAIT,
                        (
                            f"deleting ResourceClaim {left_over.key}, left for the pod's extended resources "
                            "by an earlier scheduling attempt",
                        ),
                        self.name,
                        "ClaimPending",
                    )
                extended = _ExtendedNeed(classes, frozenset(classes))
        if not pod.claims and (state.group is None or not state.group.claims) and extended is None:
            return SKIP
        group_names = (
            self.store.group_claim_names((state.group.namespace, state.group.name)) if state.group else {}
        )
        try:
            sources = resolve_claims(pod, state.group, group_names)
        except ClaimsNotReady as exc:
            # Transient, like upstream's PreEnqueue "ResourceClaim not created yet": the group waits,
            # and the claim's creation (a claim or pod status event) queues it again.
            return Status(Code.WAIT, (str(exc),), self.name, "ClaimPending")
        if not sources and extended is None:
            return SKIP
        pod_claims = _PodClaims([], extended=extended)
        for index, source in enumerate(sources):
            claim = self.store.claims.get(source.key)
            if claim is None and source.generated:
                # Named in a status already, but its creation has not reached the informer yet.
                return Status(
                    Code.WAIT,
                    (f"waiting for ResourceClaim {source.key} ({source.description}) to appear",),
                    self.name,
                    "ClaimPending",
                )
            if claim is None:
                return Status.unresolvable(
                    self.name, "ClaimNotFound", f"ResourceClaim {source.key} ({source.description}) not found"
                )
            if claim.metadata.deletion_timestamp is not None:
                return Status.unresolvable(
                    self.name, "ClaimDeleting", f"ResourceClaim {source.key} is being deleted"
                )
            problem = check_owner(claim, source, pod)
            if problem is not None:
                return Status.unresolvable(self.name, "ClaimNotOwned", problem)
            consumer = consumer_for(source, pod, state.group)
            consumers = self._consumers(claim)
            if consumer.uid not in consumers and len(consumers) >= RESERVED_FOR_MAX_SIZE:
                message = reserved_for_limit_message(claim.key, pod.key, len(consumers) + 1)
                if self._all_of_group(consumers, pod):
                    # Only the group's own members hold the entries: nothing else leaving can help.
                    return Status.unresolvable(self.name, "ReservedForLimit", message)
                return Status.unschedulable(self.name, "ReservedForLimit", message)
            pod_claims.claims.append(claim)
            pod_claims.consumers.append(consumer)
            pending = claim.status.allocation or self.store.in_flight.get(claim.metadata.uid)
            if pending is not None:
                pod_claims.placed[index] = pending
                continue
            try:
                pod_claims.compiled.append(self.store.allocator.compile(claim))
            except AllocationError as exc:
                return Status.unresolvable(self.name, "ClaimUnallocatable", str(exc))
            pod_claims.to_allocate.append(index)
        if pod_claims.to_allocate and not self._may_use_busy_devices(pod_claims):
            free = self.store.nodes_with_free_devices()
            if free is not None and not free:
                claims = ", ".join(compiled.key for compiled in pod_claims.compiled)
                return Status.unschedulable(
                    self.name,
                    "InsufficientDevices",
                    f"claim{'s' if len(pod_claims.compiled) > 1 else ''} {claims}: no node has a free "
                    "device (every published device is allocated)",
                )
        state.write(self._state_key(pod), pod_claims)
        return SUCCESS

    def _all_of_group(self, consumer_uids: set[str], pod: PodInfo) -> bool:
        """Whether every consumer is a member of ``pod``'s group (a pod the cache knows)."""
        if self.cache is None:
            return False
        group = pod.group_key
        for uid in consumer_uids:
            member = self.cache.get_pod(uid)
            if member is None or member.group_key != group:
                return False
        return True

    @staticmethod
    def _may_use_busy_devices(pod_claims: _PodClaims) -> bool:
        return any(
            alternative.admin_access
            for compiled in pod_claims.compiled
            for request in compiled.requests
            for alternative in request.alternatives
        )

    def candidate_nodes(self, state: CycleState, pod: PodInfo) -> Collection[str] | None:
        """Narrow the nodes to try: those holding the devices of allocated or pending claims, and,
        when devices must be allocated, those with a free device (None: no narrowing)."""
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None:
            return None
        narrowed: set[str] | None = None
        for allocation in pod_claims.placed.values():
            names = _node_names(allocation)
            if names is not None:
                narrowed = names if narrowed is None else narrowed & names
        if pod_claims.to_allocate and not self._may_use_busy_devices(pod_claims):
            free = self.store.nodes_with_free_devices()
            if free is not None:
                narrowed = free if narrowed is None else narrowed & free
        if pod_claims.extended is not None and self.cache is not None:
            free = self.store.nodes_with_free_devices()
            if free is not None:
                # A node gives the extended resources through a device plugin, or needs a free device.
                allowed = free | self._advertising(state, frozenset(pod_claims.extended.classes))
                narrowed = allowed if narrowed is None else narrowed & allowed
        return narrowed

    def _advertising(self, state: CycleState, resources: frozenset[str]) -> set[str]:
        """The nodes whose allocatable has any of ``resources`` (once per group cycle)."""
        assert self.cache is not None
        key = f"{_STATE_KEY}/advertising/{','.join(sorted(resources))}"
        nodes: set[str] | None = state.group_data.get(key)
        if nodes is None:
            nodes = {
                node.name
                for node in self.cache.nodes.values()
                if any(node.allocatable.get(resource, 0) > 0 for resource in resources)
            }
            state.group_data[key] = nodes
        return nodes

    def filter(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> Status:
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None:
            return SUCCESS
        pod_claims.node_labels[node.name] = node.labels
        for index, allocation in pod_claims.placed.items():
            selector = allocation.node_selector
            if selector is not None and not node_selector_matches(selector, node.name, node.labels):
                return Status.unresolvable(
                    self.name,
                    "ClaimNotOnNode",
                    f"ResourceClaim {pod_claims.claims[index].key} is allocated to devices not available "
                    "on the node",
                )
        if pod_claims.extended is not None:
            unusable = self._extended_claim_on(pod, pod_claims.extended, node)
            if unusable is not None:
                return unusable
        compiled = pod_claims.compiled_on(node.name)
        if not compiled:
            return SUCCESS
        allocator = self.store.allocator
        choice: int = state.read(PLACEMENT_CHOICE, 0)
        if choice:
            return self._other_choice(pod_claims, compiled, node, choice)
        rest = self._rest_of_gang(state, pod, pod_claims)
        try:
            found = None
            if rest:
                found = allocator.find(
                    compiled,
                    node.name,
                    node.labels,
                    accept=lambda picks: self._rest_fits(rest, picks),
                )
                if found is None:
                    pod_claims.crowding.add(node.name)
            if found is None:
                found = allocator.find(compiled, node.name, node.labels)
            if found is None:
                reason = allocator.explain(compiled, node.name, node.labels)
                pod_claims.rejections[node.name] = reason
                return Status.unschedulable(self.name, "InsufficientDevices", reason, summary=CANNOT_ALLOCATE)
        except AllocationError as exc:
            pod_claims.rejections[node.name] = str(exc)
            return Status.unresolvable(self.name, "ClaimUnallocatable", str(exc), summary=CANNOT_ALLOCATE)
        crowded = self._sharers_do_not_fit(state, pod, pod_claims, found, node)
        if crowded is not None:
            return crowded
        pod_claims.found[node.name] = found
        return SUCCESS

    def has_choices(self, state: CycleState, pod: PodInfo) -> bool:
        pod_claims = self._pod_claims(state, pod)
        return pod_claims is not None and bool(pod_claims.compiled or pod_claims.extended)

    def _other_choice(
        self, pod_claims: _PodClaims, compiled: list[CompiledClaim], node: NodeInfo, choice: int
    ) -> Status:
        """The joint search's ``choice``-th way (0 is the first) to allocate the pod's devices on the
        node, in the allocator's search order."""
        seen = 0

        def skip(picks: list[Picks]) -> bool:
            nonlocal seen
            seen += 1
            return seen > choice

        try:
            found = self.store.allocator.find(compiled, node.name, node.labels, accept=skip)
        except AllocationError as exc:
            return Status.unresolvable(self.name, "ClaimUnallocatable", str(exc))
        if found is None:
            return Status.unschedulable(
                self.name, "InsufficientDevices", f"no choice of devices numbered {choice} on {node.name}"
            )
        pod_claims.found[node.name] = found
        return SUCCESS

    def _extended_claim_on(self, pod: PodInfo, extended: _ExtendedNeed, node: NodeInfo) -> Status | None:
        """Decide which of the pod's extended resources DRA provides on ``node`` (those the node does not
        advertise in its allocatable: a device plugin serves the others, and NodeResourcesFit counts
        them) and prepare the claim for them; a Status when that claim cannot be made."""
        allocatable = node.allocatable
        served = extended.resources  # usually: no node advertises a resource a DeviceClass provides
        for resource in served:
            if allocatable.get(resource, 0) > 0:
                served = frozenset(r for r in extended.classes if allocatable.get(r, 0) <= 0)
                break
        extended.on_node[node.name] = served
        if not served or served in extended.variants:
            return None
        requests = requests_and_mappings(pod.containers, {r: extended.classes[r] for r in served})
        if not requests.requests:
            resources = ", ".join(sorted(served))
            return Status.unresolvable(
                self.name,
                "ExtendedResourceNotInteger",
                f"spec.containers[].resources.requests[{resources}]: DRA provides whole devices, the "
                "containers' quantities must be whole numbers",
            )
        devices = sum(request["exactly"]["count"] for request in requests.requests)
        if len(requests.requests) > CLAIM_LIST_MAX_SIZE or devices > CLAIM_LIST_MAX_SIZE:
            return Status.unresolvable(
                self.name,
                "ExtendedResourceClaimTooLarge",
                f"the claim for the pod's extended resources ({', '.join(sorted(served))}) would hold "
                f"{_counted(len(requests.requests), 'request')} for {_counted(devices, 'device')}; a "
                "ResourceClaim allows at most "
                f"{CLAIM_LIST_MAX_SIZE} of each",
            )
        try:
            compiled = self.store.allocator.compile(in_memory_claim(pod, requests))
        except AllocationError as exc:
            return Status.unresolvable(self.name, "ClaimUnallocatable", str(exc))
        extended.variants[served] = (requests, compiled)
        return None

    def _sharers_do_not_fit(
        self, state: CycleState, pod: PodInfo, pod_claims: _PodClaims, found: list[Picks], node: NodeInfo
    ) -> Status | None:
        """A claim allocated node-local devices pins every pod that shares it to this node: the members
        placed after this pod that use it must fit here too (pods, cpu, memory), or the gang would
        strand on a node that cannot hold it."""
        group = state.group
        if group is None:
            return None
        for position, picks in enumerate(found[: len(pod_claims.to_allocate)]):
            claim = pod_claims.claims[pod_claims.to_allocate[position]]
            needed = pod_claims.sharer_needs.get(claim.key)
            if needed is None:  # the same for every node: computed on the first Filter call only
                needed = {}
                sharers = self._sharers(state, pod, group, claim.key)
                if sharers:
                    needed["pods"] = len(sharers) + 1
                    for member in (pod, *sharers):
                        for resource in ("cpu", "memory"):
                            needed[resource] = needed.get(resource, 0) + member.requests.get(resource, 0)
                pod_claims.sharer_needs[claim.key] = needed
            if not needed or not any(device.node_name is not None for _, device in picks):
                continue  # nobody else uses the claim, or its devices do not pin it to the node
            for resource, amount in needed.items():
                if resource not in node.allocatable:
                    continue
                used = node.pod_count if resource == "pods" else node.requested.get(resource, 0)
                if node.allocatable[resource] - used < amount:
                    return Status.unschedulable(
                        self.name,
                        "ClaimSharersDoNotFit",
                        f"ResourceClaim {claim.key} would pin its {needed['pods']} pods to {node.name}, "
                        f"which lacks {resource} for them",
                    )
        return None

    def _sharers(self, state: CycleState, pod: PodInfo, group: PodGroupInfo, claim_key: str) -> list[PodInfo]:
        """The members placed after ``pod`` in this cycle that use the claim too."""
        users: dict[str, list[tuple[int, PodInfo]]] | None = state.group_data.get(_CLAIM_USERS_KEY)
        if users is None:
            users = {}
            names = self.store.group_claim_names((group.namespace, group.name))
            for position, member in enumerate(state.group_data.get(CYCLE_PODS, ())):
                try:
                    sources = resolve_claims(member, group, names)
                except ClaimsNotReady:
                    continue
                for source in sources:
                    users.setdefault(source.key, []).append((position, member))
            state.group_data[_CLAIM_USERS_KEY] = users
        mine = next((position for position, member in users.get(claim_key, ()) if member.uid == pod.uid), -1)
        return [member for position, member in users.get(claim_key, ()) if position > mine]

    def rejection_summary(self, state: CycleState, pod: PodInfo) -> str | None:
        """Filter's reasons for the nodes it rejected, identical ones once with their node count, most
        frequent first: the claim, request or constraint that could not be met and why."""
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None or not pod_claims.rejections:
            return None
        counts = Counter(pod_claims.rejections.values())
        if len(counts) == 1:
            return next(iter(counts))  # the diagnosis counts the nodes already
        ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
        shown = [f"{reason} ({_counted(count, 'node')})" for reason, count in ranked[:SUMMARY_REASONS]]
        rest = ranked[SUMMARY_REASONS:]
        if rest:
            nodes = sum(count for _, count in rest)
            shown.append(f"{_counted(len(rest), 'other reason')} on {_counted(nodes, 'node')}")
        return "; ".join(shown)

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        """Nothing to score for a pod without devices to allocate (every node would score 100)."""
        pod_claims = self._pod_claims(state, pod)
        return SUCCESS if pod_claims is not None and pod_claims.crowding else SKIP

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        """Prefer nodes where the pod's devices leave room for the rest of its gang."""
        pod_claims = self._pod_claims(state, pod)
        return 0 if pod_claims is not None and node.name in pod_claims.crowding else 100

    # --- gang lookahead (upstream #138765) ---------------------------------------------------------

    def _rest_of_gang(
        self, state: CycleState, pod: PodInfo, pod_claims: _PodClaims
    ) -> list[list[CompiledClaim]]:
        """The claims the members placed after ``pod`` in this cycle still need allocated, when the pod's
        own choice matters for them: its claims offer alternatives (firstAvailable) and at most
        GANG_LOOKAHEAD_MAX_MEMBERS members follow. Empty otherwise."""
        group = state.group
        if self.cache is None or group is None or not group.is_gang:
            return []
        if not any(len(r.alternatives) > 1 for compiled in pod_claims.compiled for r in compiled.requests):
            return []
        others = _later_in_cycle(state, pod, at_most=GANG_LOOKAHEAD_MAX_MEMBERS)
        if not others:
            return []
        own = {claim.key for claim in pod_claims.claims}
        compiled_by_member: dict[str, list[CompiledClaim]] = state.group_data.setdefault(_GANG_KEY, {})
        names = self.store.group_claim_names((group.namespace, group.name))
        rest = []
        for member in others:
            if member.uid not in compiled_by_member:
                compiled_by_member[member.uid] = self._claims_to_allocate(member, group, names)
            claims = [c for c in compiled_by_member[member.uid] if c.key not in own]
            if claims:
                rest.append(claims)
        return rest

    def _claims_to_allocate(
        self, member: PodInfo, group: PodGroupInfo, names: Mapping[str, str | None]
    ) -> list[CompiledClaim]:
        try:
            sources = resolve_claims(member, group, names)
        except ClaimsNotReady:
            return []
        compiled = []
        for source in sources:
            claim = self.store.claims.get(source.key)
            if claim is None or claim.allocated or claim.metadata.uid in self.store.in_flight:
                continue
            try:
                compiled.append(self.store.allocator.compile(claim))
            except AllocationError:
                continue  # that member fails on its own; it says why in its own PreFilter
        return compiled

    def _rest_fits(self, rest: list[list[CompiledClaim]], picks: list[Picks]) -> bool:
        """Whether, with the devices of ``picks`` taken, every other member finds devices on some node
        (first fit, each member's preferred alternative first, shared claims once)."""
        assert self.cache is not None
        allocator = self.store.allocator
        # Devices the choice takes whole (a share of a multi-allocatable device leaves it to others).
        busy = {
            device.id
            for chosen in picks
            for alternative, device in chosen
            if not alternative.admin_access and not allocator.shared(device)
        }
        free_nodes = self.store.nodes_with_free_devices()
        nodes = [n for n in self.cache.nodes.values() if free_nodes is None or n.name in free_nodes]
        simulated: set[str] = set()
        budget = GANG_LOOKAHEAD_MAX_SEARCHES
        for member_claims in rest:
            claims = [c for c in member_claims if c.key not in simulated]
            if not claims:
                continue
            for node in nodes:
                budget -= 1
                if budget < 0:
                    return True  # too costly to tell: do not penalize the choice
                try:
                    found = allocator.find(claims, node.name, node.labels, busy)
                except AllocationError:
                    found = None
                if found is not None:
                    busy.update(
                        d.id
                        for chosen in found
                        for a, d in chosen
                        if not a.admin_access and not allocator.shared(d)
                    )
                    simulated.update(c.key for c in claims)
                    break
            else:
                return False
        return True

    # --- Reserve / Unreserve -----------------------------------------------------------------------

    def _allocations_for(self, pod_claims: _PodClaims, node: str) -> list[AllocationResult] | None:
        """Filter's choice for ``node`` if all its devices (and the shared counters they consume) are
        still free, else a fresh search."""
        allocator = self.store.allocator
        compiled = pod_claims.compiled_on(node)
        found = pod_claims.found.get(node)
        if found is None or not allocator.still_available(found):
            found = allocator.find(compiled, node, pod_claims.node_labels.get(node, {}))
        return None if found is None else allocator.results(compiled, found, node)

    def reserve(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None:
            if self._in_gang(state):  # it waits for its gang's binding conditions all the same
                self._binding_wait(state, pod).members.add(pod.uid)
            return SUCCESS
        if pod_claims.extended is not None and node_name not in pod_claims.extended.on_node:
            return Status.error(
                self.name, f"pod {pod.key}: {node_name} was not filtered for its extended resources"
            )
        new_allocations: dict[int, AllocationResult] = {}
        extended_allocation: AllocationResult | None = None
        if pod_claims.compiled_on(node_name):
            try:
                found = self._allocations_for(pod_claims, node_name)
            except AllocationError as exc:
                return Status.unresolvable(self.name, "ClaimUnallocatable", str(exc))
            if found is None:
                return Status.unschedulable(
                    self.name,
                    "InsufficientDevices",
                    f"the devices chosen on {node_name} were taken meanwhile",
                )
            own = len(pod_claims.to_allocate)
            new_allocations = dict(zip(pod_claims.to_allocate, found[:own], strict=True))
            extended_allocation = found[own] if len(found) > own else None
        for index, claim in enumerate(pod_claims.claims):
            uid, key = claim.metadata.uid, claim.key
            latest = self.store.claims.get(key) or claim
            if latest.status.allocation is not None:
                # Behaviour 1: allocated already (by an earlier member's PreBind or anyone): reuse it,
                # record nothing in flight.
                status = self._check_node(latest.status.allocation, latest, pod_claims, node_name)
            elif (pending := self.store.in_flight.get(uid)) is not None:
                status = self._check_node(pending, latest, pod_claims, node_name)
                if status.ok:
                    self.store.in_flight.signal(uid, latest)
                    pod_claims.signaled.append((uid, key))
            elif index in new_allocations:
                allocated = latest.model_copy(
                    update={"status": latest.status.model_copy(update={"allocation": new_allocations[index]})}
                )
                if self.store.in_flight.signal(uid, allocated):
                    pod_claims.signaled.append((uid, key))
                status = SUCCESS
            else:
                status = Status.unschedulable(
                    self.name, "ClaimChanged", f"ResourceClaim {key} lost its allocation since PreFilter"
                )
            if not status.ok:
                return status
            consumer = pod_claims.consumers[index]
            consumers = self._consumers(latest)
            if consumer.uid not in consumers and len(consumers) >= RESERVED_FOR_MAX_SIZE:
                return Status.unschedulable(
                    self.name,
                    "ReservedForLimit",
                    reserved_for_limit_message(key, pod.key, len(consumers) + 1),
                )
            self._plans.setdefault(key, {})[pod.uid] = consumer
            pod_claims.planned.append(key)
        if extended_allocation is not None:
            # Its devices count as taken (under a UID no claim has) until the created claim is known.
            claim = self._extended_variant(pod_claims, node_name)[1].claim
            allocated = claim.model_copy(
                update={"status": claim.status.model_copy(update={"allocation": extended_allocation})}
            )
            if self.store.in_flight.signal(claim.metadata.uid, allocated):
                pod_claims.signaled.append((claim.metadata.uid, claim.key))
        if self.store.features.device_binding_and_status:
            wait = self._binding_wait(state, pod)
            wait.members.add(pod.uid)
            for index, claim in enumerate(pod_claims.claims):
                allocation = new_allocations.get(index) or pod_claims.placed.get(index)
                current = self.store.claims.get(claim.key)
                if current is not None and current.status.allocation is not None:
                    allocation = current.status.allocation
                if allocation is not None and any(r.binding_conditions for r in allocation.devices.results):
                    wait.conditioned[claim.key] = None
            if extended_allocation is not None and any(
                r.binding_conditions for r in extended_allocation.devices.results
            ):
                wait.conditioned[self._extended_variant(pod_claims, node_name)[1].key] = None
        return SUCCESS

    @staticmethod
    def _extended_variant(pod_claims: _PodClaims, node: str) -> tuple[ExtendedClaimRequests, CompiledClaim]:
        extended = pod_claims.extended
        assert extended is not None
        return extended.variants[extended.on_node[node]]

    def _in_gang(self, state: CycleState) -> bool:
        return (
            self.store.features.device_binding_and_status and state.group is not None and state.group.is_gang
        )

    def _binding_wait(self, state: CycleState, pod: PodInfo) -> _BindingWait:
        """The gang's shared wait, or the pod's own outside a gang."""
        gang = state.group is not None and state.group.is_gang
        key = _BINDING_KEY if gang else f"{_BINDING_KEY}/{pod.uid}"
        wait = state.group_data.get(key)
        if not isinstance(wait, _BindingWait):
            wait = state.group_data[key] = _BindingWait()
        return wait

    def _check_node(
        self, allocation: AllocationResult, claim: ResourceClaim, pod_claims: _PodClaims, node_name: str
    ) -> Status:
        """The node must satisfy the allocation's nodeSelector, also for a reused pending one (#140087)."""
        selector = allocation.node_selector
        labels = pod_claims.node_labels.get(node_name, {})
        if selector is None or node_selector_matches(selector, node_name, labels):
            return SUCCESS
        return Status.unschedulable(
            self.name,
            "ClaimNotOnNode",
            f"ResourceClaim {claim.key} is allocated to devices not available on {node_name}",
        )

    def unreserve(self, state: CycleState, pod: PodInfo, node_name: str) -> None:
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None and not self._in_gang(state):
            return
        if self.store.features.device_binding_and_status:
            wait = self._binding_wait(state, pod)
            wait.members.discard(pod.uid)
            bound = wait.verdict is not None and wait.verdict.done() and wait.verdict.result().ok
            if wait.conditioned and not bound:
                wait.decide(
                    Status.unschedulable(
                        self.name, "GangMemberFailed", f"pod {pod.key} of the gang did not bind"
                    )
                )
                for conditioned in pod_claims.claims if pod_claims is not None else ():
                    if conditioned.key in wait.conditioned:
                        self._in_background(self._clear_conditioned_allocation(conditioned.key))
        if pod_claims is None:
            return
        for uid, key in pod_claims.signaled:
            if self.store.in_flight.maybe_remove(uid, force=False):
                self.store.claims.restore(key)
        pod_claims.signaled.clear()
        if pod_claims.extended is not None and pod_claims.extended.created is not None:
            self._delete_extended_claim(pod_claims.extended.created, pod)
            pod_claims.extended.created = None
        for key in pod_claims.planned:
            self._unplan(key, pod.uid)
        pod_claims.planned.clear()
        for claim in pod_claims.claims:
            latest = self.store.claims.get(claim.key)
            if latest is not None and latest.is_reserved_for(pod.uid):
                self._in_background(self._remove_reservation(claim.key, pod.uid, f"pod {pod.key}"))

    def _reserved_for_podgroup(self, namespace: str, uid: str) -> list[str]:
        claims = self.store.claims.values()
        return [c.key for c in claims if c.metadata.namespace == namespace and c.is_reserved_for(uid)]

    def release_podgroup(self, namespace: str, name: str, uid: str) -> None:
        """The PodGroup is gone: take it out of the ``reservedFor`` of the claims reserved for it (the
        resourceclaim controller only knows pods), deallocating a claim nobody else holds."""
        if not uid:
            return
        for key in self._reserved_for_podgroup(namespace, uid):
            self.release_reservation(key, uid, f"PodGroup {namespace}/{name}")

    async def release_podgroup_now(self, namespace: str, name: str, uid: str) -> list[str]:
        """:meth:`release_podgroup`, awaited (a terminating PodGroup keeps its finalizer until its
        claims are released); returns the keys of the claims still reserved for it."""
        keys = self._reserved_for_podgroup(namespace, uid)
        who = f"PodGroup {namespace}/{name}"
        await asyncio.gather(*(self._remove_reservation(key, uid, who) for key in keys))
        return self._reserved_for_podgroup(namespace, uid)

    def release_reservation(self, claim_key: str, consumer_uid: str, consumer: str) -> None:
        """Take ``consumer`` out of the claim's ``reservedFor`` in the background."""
        self._in_background(self._remove_reservation(claim_key, consumer_uid, consumer))

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        try:
            task = asyncio.get_running_loop().create_task(work)
        except RuntimeError:  # no event loop: nothing was written by this process, nothing to undo
            work.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _remove_reservation(self, key: str, consumer_uid: str, consumer: str) -> None:
        """Take a consumer out of ``reservedFor`` (a pod that will not bind, as kube-scheduler's Unreserve
        does, or a deleted PodGroup), so the claim is not held for it. When it was the last consumer the
        allocation is cleared in the same write (the resourceclaim controller deallocates only when it
        removes the last reservation itself, so a claim emptied here would otherwise hold its devices
        forever), then the delete-protection finalizer is removed."""
        deallocated = False
        for attempt in range(1, RESERVATION_REMOVAL_ATTEMPTS + 1):
            async with self._claim_lock(key):
                latest = self.store.claims.get(key)
                if latest is None or self.claim_api is None:
                    return
                if latest.is_reserved_for(consumer_uid):
                    remaining = [ref for ref in latest.status.reserved_for if ref.uid != consumer_uid]
                    status = claim_status_patch(None, remaining)
                    if not remaining:
                        status["allocation"] = None
                    outcome = await self.claim_api.write_claim_status(latest, status)
                    if outcome.result is WriteResult.NOT_FOUND:
                        return
                    latest = outcome.claim if outcome.result is WriteResult.WRITTEN else None
                    if latest is not None:
                        deallocated = not remaining
                        with contextlib.suppress(AssumeCacheError):
                            self.store.claims.assume(latest)
                if latest is not None:
                    # Deallocated here: drop the delete-protection finalizer too, as the resourceclaim
                    # controller does after its own deallocation (a deleted claim then goes away).
                    if not deallocated or latest.allocated:
                        return
                    if DELETE_PROTECTION_FINALIZER not in latest.metadata.finalizers:
                        return
                    kept = [f for f in latest.metadata.finalizers if f != DELETE_PROTECTION_FINALIZER]
                    outcome = await self.claim_api.write_claim_finalizers(latest, kept)
                    if outcome.result is WriteResult.NOT_FOUND:
                        return
                    if outcome.result is WriteResult.WRITTEN and outcome.claim is not None:
                        with contextlib.suppress(AssumeCacheError):
                            self.store.claims.assume(outcome.claim)
                        return
            await asyncio.sleep(0.05 * attempt)  # a conflict: wait for the informer's newer copy
        log.warning(
            "could not release ResourceClaim %s for %s after %d attempts: %s %s",
            key,
            consumer,
            RESERVATION_REMOVAL_ATTEMPTS,
            outcome.result.value,
            outcome.message,
        )

    async def wait_for_background(self) -> None:
        """Wait until the reservation removals started by Unreserve are done (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def _unplan(self, key: str, pod_uid: str) -> None:
        plan = self._plans.get(key)
        if plan is not None:
            plan.pop(pod_uid, None)
            if not plan:
                del self._plans[key]

    # --- PreBind -----------------------------------------------------------------------------------

    @asynccontextmanager
    async def _claim_lock(self, key: str) -> AsyncIterator[None]:
        lock, users = self._locks.get(key) or (asyncio.Lock(), 0)
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users == 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def pre_bind_writes(self, state: CycleState, pod: PodInfo, node_name: str) -> bool:
        pod_claims = self._pod_claims(state, pod)
        return pod_claims is not None and (bool(pod_claims.claims) or pod_claims.extended is not None)

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        pod_claims = self._pod_claims(state, pod)
        if pod_claims is None:
            return await self._await_binding_conditions(state, pod) if self._in_gang(state) else SUCCESS
        for claim, consumer in zip(pod_claims.claims, pod_claims.consumers, strict=True):
            async with self._claim_lock(claim.key):
                status = await self._write_claim(claim, pod, consumer)
            if not status.ok:
                return status
        extended = pod_claims.extended
        if extended is not None and extended.on_node.get(node_name):
            status = await self._create_extended_claim(state, pod, pod_claims, node_name)
            if not status.ok:
                return status
        if not self.store.features.device_binding_and_status:
            return SUCCESS
        return await self._await_binding_conditions(state, pod)

    async def _await_binding_conditions(self, state: CycleState, pod: PodInfo) -> Status:
        """The verdict on the binding conditions the pod's gang (or the pod) waits for."""
        wait = self._binding_wait(state, pod)
        if not wait.conditioned:
            return SUCCESS
        wait.arrived.add(pod.uid)
        verdict = wait.future()
        if wait.decider is None and wait.members <= wait.arrived:
            wait.decider = asyncio.get_running_loop().create_task(self._decide_binding(state, pod, wait))
            self._deciders.add(wait.decider)
            wait.decider.add_done_callback(self._deciders.discard)
        wait.waiting += 1
        try:
            return await asyncio.shield(verdict)
        finally:
            wait.waiting -= 1
            if not wait.waiting and wait.decider is not None and not verdict.done():
                wait.decider.cancel()  # every member gave up (cancelled at shutdown): stop polling

    async def _decide_binding(self, state: CycleState, pod: PodInfo, wait: _BindingWait) -> None:
        """Wait until every conditioned claim's devices report their binding conditions True (then
        everyone binds), or a failure condition, a deleted allocation or the timeout fails everyone."""
        who = f"PodGroup {state.group.namespace}/{state.group.name}" if state.group else f"pod {pod.key}"
        deadline = asyncio.get_running_loop().time() + self.binding_timeout
        try:
            while True:
                status, pending = self._binding_status(list(wait.conditioned))
                if status is not None:
                    if status.ok and who in self.binding_waits and self.note_binding and state.group:
                        self.note_binding(state.group.key, "binding conditions met, binding")
                    wait.decide(status)
                    return
                message = f"{BINDING_WAIT}: {pending}"
                if self.binding_waits.get(who) != message:
                    self.binding_waits[who] = message
                    if self.note_binding is not None and state.group is not None:
                        self.note_binding(state.group.key, message)
                if asyncio.get_running_loop().time() >= deadline:
                    wait.decide(
                        Status.unschedulable(
                            self.name,
                            "BindingTimeout",
                            f"binding conditions not met within {self.binding_timeout:g}s: {pending}",
                        )
                    )
                    return
                await asyncio.sleep(BINDING_POLL_SECONDS)
        finally:
            self.binding_waits.pop(who, None)
            wait.decide(Status.error(self.name, "the wait for binding conditions ended without a verdict"))

    def _binding_status(self, keys: list[str]) -> tuple[Status | None, str]:
        """(SUCCESS when every binding condition is True, a failure, or None and what is pending)."""
        pending: list[str] = []
        for key in keys:
            claim = self.store.claims.get(key)
            allocation = None if claim is None else claim.status.allocation
            if claim is None or allocation is None:
                return (
                    Status.unschedulable(
                        self.name, "ClaimChanged", f"ResourceClaim {key} lost its allocation while binding"
                    ),
                    "",
                )
            reported = {
                (d.driver, d.pool, d.device, d.share_id): {c.type: c.status for c in d.conditions}
                for d in claim.status.devices
            }
            for result in allocation.devices.results:
                if not result.binding_conditions:
                    continue
                conditions = reported.get((result.driver, result.pool, result.device, result.share_id), {})
                failed = [c for c in result.binding_failure_conditions or () if conditions.get(c) == "True"]
                if failed:
                    return (
                        Status.unschedulable(
                            self.name,
                            "BindingConditionFailed",
                            f"ResourceClaim {key} device {result.device}: binding failure condition "
                            f"{failed[0]} is True",
                        ),
                        "",
                    )
                missing = [c for c in result.binding_conditions if conditions.get(c) != "True"]
                if missing:
                    pending.append(f"ResourceClaim {key} device {result.device} ({', '.join(missing)})")
        if pending:
            return None, "; ".join(pending)
        return SUCCESS, ""

    async def _clear_conditioned_allocation(self, key: str) -> None:
        """A binding that failed or timed out: clear the claim's allocation, reservations and device
        status, as upstream's Unreserve does, so a retry can pick other devices."""
        async with self._claim_lock(key):
            latest = self.store.claims.get(key)
            if latest is None or latest.status.allocation is None or self.claim_api is None:
                return
            outcome = await self.claim_api.write_claim_status(
                latest, {"reservedFor": [], "allocation": None, "devices": None}
            )
            if outcome.result is WriteResult.WRITTEN and outcome.claim is not None:
                with contextlib.suppress(AssumeCacheError):
                    self.store.claims.assume(outcome.claim)
            else:
                log.warning(
                    "could not clear the allocation of ResourceClaim %s after its binding failed: %s %s",
                    key,
                    outcome.result.value,
                    outcome.message,
                )

    async def _write_claim(
        self, claim: ResourceClaim, pod: PodInfo, consumer: ResourceClaimConsumerReference
    ) -> Status:
        uid, key = claim.metadata.uid, claim.key
        latest = self.store.claims.get(key)
        if latest is None or latest.metadata.uid != uid:
            return Status.unschedulable(self.name, "ClaimNotFound", f"ResourceClaim {key} was deleted")
        if latest.status.allocation is not None and latest.is_reserved_for(consumer.uid):
            return SUCCESS  # an earlier member's write reserved it for this pod (or its PodGroup) too
        allocation = None
        if latest.status.allocation is None:
            allocation = self.store.in_flight.get(uid)
            if allocation is None:
                return Status.error(self.name, f"ResourceClaim {key} has no allocation and none is pending")
        planned = list(self._plans.get(key, {}).values())
        if not any(ref.uid == consumer.uid for ref in planned):
            planned.append(consumer)
        consumers = merged_consumers(latest, planned)
        if len(consumers) > RESERVED_FOR_MAX_SIZE:
            return Status.unschedulable(
                self.name, "ReservedForLimit", reserved_for_limit_message(key, pod.key, len(consumers))
            )
        if self.claim_api is None:
            return Status.error(self.name, f"ResourceClaim {key}: no claim API is configured to write it")
        if allocation is not None and latest.metadata.deletion_timestamp is not None:
            self._unplan(key, pod.uid)
            return Status.unschedulable(self.name, "ClaimDeleting", f"ResourceClaim {key} is being deleted")
        if allocation is not None and DELETE_PROTECTION_FINALIZER not in latest.metadata.finalizers:
            # As kube-scheduler's bindClaim: the finalizer goes on in a write of the claim itself before
            # the allocation is written, so a claim whose devices are in use cannot vanish; the
            # resourceclaim controller (or lockstep's own deallocation) removes it again.
            finalizers = [*latest.metadata.finalizers, DELETE_PROTECTION_FINALIZER]
            outcome = await self.claim_api.write_claim_finalizers(latest, finalizers)
            if outcome.result is not WriteResult.WRITTEN or outcome.claim is None:
                return self._write_failed(key, pod, "adding its delete-protection finalizer", outcome)
            latest = outcome.claim
            with contextlib.suppress(AssumeCacheError):
                self.store.claims.assume(latest)
        outcome = await self.claim_api.write_claim_status(latest, claim_status_patch(allocation, consumers))
        if outcome.result is not WriteResult.WRITTEN or outcome.claim is None:
            what = f"writing {'allocation and ' if allocation else ''}reservedFor"
            return self._write_failed(key, pod, what, outcome)
        # AssumeCacheError: the informer already delivered something at least as new.
        with contextlib.suppress(AssumeCacheError):
            self.store.claims.assume(outcome.claim)
        self.store.in_flight.maybe_remove(uid, force=True)
        written = {ref.uid for ref in consumers}
        plan = self._plans.get(key, {})
        for pod_uid in [uid for uid, ref in plan.items() if ref.uid in written]:
            self._unplan(key, pod_uid)
        return SUCCESS

    # --- DRA extended resources ---------------------------------------------------------------------

    async def _create_extended_claim(
        self, state: CycleState, pod: PodInfo, pod_claims: _PodClaims, node_name: str
    ) -> Status:
        """As kube-scheduler's PreBind: create the pod's extended resource claim (with the delete-protection
        finalizer), write the allocation Reserve chose with the pod in ``reservedFor``, then name the claim
        in the pod's ``status.extendedResourceClaimStatus``. Unreserve deletes a claim created here."""
        extended = pod_claims.extended
        assert extended is not None
        requests, compiled = self._extended_variant(pod_claims, node_name)
        pending_key, pending_uid = compiled.key, compiled.claim.metadata.uid
        allocation = self.store.in_flight.get(pending_uid)
        api = self.claim_api
        if allocation is None:
            return Status.error(self.name, f"{pending_key}: the devices chosen at Reserve are not pending")
        if api is None or not isinstance(api, ExtendedClaimAPI):
            return Status.error(self.name, f"{pending_key}: no claim API is configured to create it")
        outcome = await api.create_claim(claim_for(pod, requests))
        if outcome.result is not WriteResult.WRITTEN or outcome.claim is None:
            return self._extended_write_failed(pod, "creating the ResourceClaim", outcome)
        created = extended.created = outcome.claim
        # The allocation and the pod's record of the claim are independent writes: made together. The
        # kubelet prepares the claim only once it is allocated and reserved for the pod.
        claim_status = {
            "requestMappings": list(requests.mappings),
            "resourceClaimName": created.metadata.name,
        }
        outcome, recorded = await asyncio.gather(
            api.write_claim_status(created, claim_status_patch(allocation, [pod_consumer(pod)])),
            api.record_extended_claim(pod, claim_status),
        )
        if outcome.result is not WriteResult.WRITTEN or outcome.claim is None:
            return self._extended_write_failed(pod, f"writing the allocation of {created.key}", outcome)
        written = extended.created = outcome.claim
        await self._until_known(written)
        self.store.in_flight.maybe_remove(pending_uid, force=True)
        pod_claims.signaled = [(uid, key) for uid, key in pod_claims.signaled if uid != pending_uid]
        if recorded.result is not WriteResult.WRITTEN:
            return self._extended_write_failed(
                pod, f"naming {written.key} in status.extendedResourceClaimStatus", recorded
            )
        wait = state.group_data.get(_BINDING_KEY) or state.group_data.get(f"{_BINDING_KEY}/{pod.uid}")
        if isinstance(wait, _BindingWait) and pending_key in wait.conditioned:
            del wait.conditioned[pending_key]
            wait.conditioned[written.key] = None
        log.info("created ResourceClaim %s for the extended resources of pod %s", written.key, pod.key)
        return SUCCESS

    async def _until_known(self, claim: ResourceClaim) -> None:
        """Wait until the claims informer has delivered the created claim (at most
        EXTENDED_CLAIM_INFORMER_TIMEOUT, as upstream), so its devices never look free in between."""
        deadline = asyncio.get_running_loop().time() + EXTENDED_CLAIM_INFORMER_TIMEOUT
        while True:
            with contextlib.suppress(AssumeCacheError):
                self.store.claims.assume(claim)
                return
            if asyncio.get_running_loop().time() >= deadline:
                log.warning("ResourceClaim %s was created but its informer has not delivered it", claim.key)
                return
            await asyncio.sleep(BINDING_POLL_SECONDS)

    def _extended_write_failed(self, pod: PodInfo, what: str, outcome: ClaimWriteOutcome) -> Status:
        detail = f"{outcome.result.value}{': ' + outcome.message if outcome.message else ''}"
        message = f"extended resources of pod {pod.key}: {what} failed: {detail}"
        if outcome.result in (WriteResult.CONFLICT, WriteResult.NOT_FOUND):
            return Status.unschedulable(self.name, "ClaimChanged", message)
        return Status.error(self.name, message)

    def _delete_extended_claim(self, claim: ResourceClaim, pod: PodInfo) -> None:
        if claim.metadata.uid not in self._deleting:
            self._deleting.add(claim.metadata.uid)
            self._in_background(self._remove_extended_claim(claim, pod))

    async def _remove_extended_claim(self, claim: ResourceClaim, pod: PodInfo) -> None:
        """Upstream's ``deleteClaim``: drop the delete-protection finalizer, then delete the claim."""
        try:
            if not isinstance(self.claim_api, ExtendedClaimAPI):
                return
            for attempt in range(1, RESERVATION_REMOVAL_ATTEMPTS + 1):
                latest = self.store.claims.get(claim.key) or claim
                if latest.metadata.uid != claim.metadata.uid:
                    return
                outcome = ClaimWriteOutcome(WriteResult.WRITTEN, latest)
                if DELETE_PROTECTION_FINALIZER in latest.metadata.finalizers:
                    kept = [f for f in latest.metadata.finalizers if f != DELETE_PROTECTION_FINALIZER]
                    outcome = await self.claim_api.write_claim_finalizers(latest, kept)
                if outcome.result is WriteResult.WRITTEN:
                    outcome = await self.claim_api.delete_claim(latest)
                if outcome.result in (WriteResult.WRITTEN, WriteResult.NOT_FOUND):
                    log.info("deleted ResourceClaim %s of pod %s, which did not bind", claim.key, pod.key)
                    return
                await asyncio.sleep(0.05 * attempt)  # a conflict: wait for the informer's newer copy
            log.warning(
                "could not delete ResourceClaim %s of pod %s: %s %s",
                claim.key,
                pod.key,
                outcome.result.value,
                outcome.message,
            )
        finally:
            self._deleting.discard(claim.metadata.uid)

    def _write_failed(self, key: str, pod: PodInfo, what: str, outcome: ClaimWriteOutcome) -> Status:
        # This pod will be unreserved; later members must not write its reservation.
        self._unplan(key, pod.uid)
        detail = f"{outcome.result.value}{': ' + outcome.message if outcome.message else ''}"
        message = f"ResourceClaim {key}: {what} failed: {detail}"
        if outcome.result in (WriteResult.CONFLICT, WriteResult.NOT_FOUND):
            return Status.unschedulable(self.name, "ClaimChanged", message)
        return Status.error(self.name, message)
