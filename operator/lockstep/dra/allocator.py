"""The structured-parameters allocator: picks devices for a pod's claims on one node.

A claim is compiled once (:meth:`Allocator.compile`): its requests with their DeviceClass and CEL
selectors, its ``matchAttribute`` constraints. Allocation is a depth-first search over every request
of every claim the pod still needs allocated, choosing devices in slice order and backtracking when a
constraint rejects an earlier choice or a later request runs out of devices. ``firstAvailable``
sub-requests are tried in order (results named ``<request>/<subrequest>``). Devices in use (in any
claim's allocation or in flight, as told by ``in_use``) are skipped unless the request has admin
access.

With the 1.36 features (upstream's incubating allocator): a device with a ``NoSchedule`` or
``NoExecute`` taint is skipped unless the request or sub-request tolerates it; a device consuming a
pool's shared counters is taken only while every counter it consumes stays covered, counting the
devices of every allocated and in-flight claim plus the search's own choices (:class:`_CounterLedger`);
devices with binding conditions are skipped when DeviceBindingAndStatus is off, and devices consuming
counters when PartitionableDevices is off, as upstream does. With ConsumableCapacity a device with
``allowMultipleAllocations`` is shared: any number of requests may take it while their consumed
capacity (``lockstep.dra.capacity``), with that of the shares allocated or in flight, fits; each share
gets a ``shareID`` and its ``consumedCapacity`` in the result.

Errors in the claim itself (unknown DeviceClass, a disabled feature, a CEL compile or runtime error)
raise :class:`AllocationError`; "no devices left on this node" is a ``None`` result, and
:meth:`Allocator.explain` then says which claim, request, selector or constraint could not be met.
The explanation is computed only after a failed search, so the successful path pays nothing for it.
"""

from __future__ import annotations

import re
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lockstep.api.resource import (
    ALLOCATION_MODE_ALL,
    AllocationResult,
    DeviceAllocationResult,
    DeviceClass,
    DeviceRequestAllocationResult,
    DeviceSelector,
    DeviceTaint,
    DeviceToleration,
    NodeSelector,
    ResourceClaim,
    ResourceClaimSpec,
)
from lockstep.dra import capacity
from lockstep.dra.cel_errors import CELError
from lockstep.dra.features import Features
from lockstep.dra.inventory import AttributeSet, CounterID, DeviceEntry, DeviceID, DeviceInventory, PoolID
from lockstep.dra.k8s_types import QuantityError, parse_quantity
from lockstep.dra.node_selector import node_name_selector

if TYPE_CHECKING:
    from lockstep.dra.cel import Selector

DEFAULT_MAX_STEPS = 200_000
MAX_CACHED_CANDIDATE_LISTS = 200_000
MAX_COMPILED_SPECS = 10_000

LIST_TYPE_GATE = (
    "the DRAListTypeAttributes feature gate (lockstep run --feature-gates DRAListTypeAttributes=true)"
)


class AllocationError(Exception):
    """The claim cannot be allocated on any node until the claim, a class or a device changes."""

    def __init__(self, claim_key: str, problem: str) -> None:
        super().__init__(f"ResourceClaim {claim_key}: {problem}")
        self.claim_key = claim_key
        self.problem = problem


@dataclass(frozen=True, slots=True)
class RequestAlternative:
    """An ``exactly`` request or one ``firstAvailable`` sub-request, ready to match devices."""

    result_name: str
    device_class: DeviceClass
    selectors: tuple[Selector, ...]
    all_devices: bool
    count: int
    admin_access: bool
    # Requests with the same selectors (class ones included) and tolerations match the same devices:
    # the candidate cache key.
    signature: tuple[Any, ...]
    tolerations: tuple[DeviceToleration, ...] = ()
    # capacity.requests: name -> (amount, spelling)
    capacity_requests: tuple[tuple[str, Fraction, str], ...] = ()

    def tolerates(self, taint: DeviceTaint) -> bool:
        return any(toleration.tolerates(taint) for toleration in self.tolerations)


@dataclass(frozen=True, slots=True)
class CompiledRequest:
    name: str
    alternatives: tuple[RequestAlternative, ...]


@dataclass(frozen=True, slots=True)
class CompiledConstraint:
    requests: frozenset[str] | None  # None: every request of the claim
    attribute: str

    def applies_to(self, request_name: str) -> bool:
        return self.requests is None or request_name in self.requests


@dataclass(frozen=True, slots=True)
class CompiledClaim:
    claim: ResourceClaim
    requests: tuple[CompiledRequest, ...]
    constraints: tuple[CompiledConstraint, ...]

    @property
    def key(self) -> str:
        return self.claim.key


Picks = list[tuple[RequestAlternative, DeviceEntry]]  # the devices chosen for one claim


class _BudgetExceeded(Exception):
    pass


def _selectors(
    selectors: Sequence[DeviceSelector], features: Features, claim_key: str, where: str
) -> list[Selector]:
    from lockstep.dra.cel import compile_selector

    compiled = []
    for index, selector in enumerate(selectors):
        if selector.cel is None:
            raise AllocationError(claim_key, f"{where}.selectors[{index}]: only cel selectors are supported")
        try:
            compiled.append(compile_selector(selector.cel.expression, features.list_type_attributes))
        except CELError as exc:
            raise AllocationError(claim_key, f"{where}.selectors[{index}]: {exc}") from None
    return compiled


class Allocator:
    """Allocates claims against one DeviceInventory; caches compiled claims and candidate devices."""

    def __init__(
        self,
        features: Features,
        inventory: DeviceInventory,
        classes: Mapping[str, DeviceClass],
        in_use: Callable[[DeviceID], bool],
        consumed_capacity: Callable[[DeviceID], Mapping[str, Fraction]] = lambda _: {},
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> None:
        """``consumed_capacity``: what the allocated and in-flight shares of a multi-allocatable device
        consume, per capacity."""
        self.features = features
        self.consumed_capacity = consumed_capacity
        self._inventory = inventory
        self._classes = classes
        self.in_use = in_use
        # kube-scheduler's DRASchedulerFilterTimeout gives up on a node after a while; lockstep bounds
        # the search by steps instead (deterministic, and it runs on the event loop).
        self.max_steps: float = max_steps if features.filter_timeout else float("inf")
        # (node, claims) of the last search that hit max_steps: explain says so instead of guessing.
        self.gave_up: tuple[str, tuple[str, ...]] | None = None
        # id(spec) -> (the spec, kept so that its id is not reused, its requests, its constraints)
        self._compiled: dict[
            int, tuple[ResourceClaimSpec, tuple[CompiledRequest, ...], tuple[CompiledConstraint, ...]]
        ] = {}
        self._candidates: dict[tuple[tuple[Any, ...], str | None], list[DeviceEntry] | CELError] = {}
        self._candidates_version = -1

    # --- compiling claims ---------------------------------------------------------------------------

    def compile(self, claim: ResourceClaim) -> CompiledClaim:
        """The claim's requests and constraints, checked; raises AllocationError naming the field.
        Claims parsed from the API share one spec object per spec (``lockstep.api.resource``), so
        the compiled requests are kept per spec, not per claim: the claims made from one template
        compile once, and no claim is kept alive by the cache."""
        spec = claim.spec
        shared = self._compiled.get(id(spec))
        if (
            shared is not None
            and shared[0] is spec
            and all(
                self._classes.get(alt.device_class.metadata.name) is alt.device_class
                for request in shared[1]
                for alt in request.alternatives
            )
        ):
            return CompiledClaim(claim, shared[1], shared[2])
        compiled = self._compile(claim)
        if len(self._compiled) >= MAX_COMPILED_SPECS:
            self._compiled.clear()
        self._compiled[id(spec)] = (spec, compiled.requests, compiled.constraints)
        return compiled

    def _alternative(
        self, claim_key: str, where: str, result_name: str, request: Any, admin_access: bool
    ) -> RequestAlternative:
        device_class = self._classes.get(request.device_class_name)
        if device_class is None:
            raise AllocationError(
                claim_key, f"{where}.deviceClassName: DeviceClass {request.device_class_name!r} not found"
            )
        class_selectors = _selectors(
            device_class.spec.selectors,
            self.features,
            claim_key,
            f"DeviceClass {device_class.metadata.name} spec",
        )
        request_selectors = _selectors(request.selectors, self.features, claim_key, where)
        capacity_requests: list[tuple[str, Fraction, str]] = []
        if request.capacity is not None:
            if not self.features.consumable_capacity:
                raise AllocationError(
                    claim_key, f"{where}.capacity: has capacity requests, but DRAConsumableCapacity is off"
                )
            for name, text in request.capacity.requests.items():
                try:
                    capacity_requests.append((name, parse_quantity(text).value, text))
                except QuantityError as exc:
                    raise AllocationError(claim_key, f"{where}.capacity.requests[{name}]: {exc}") from None
        selectors = tuple(class_selectors + request_selectors)
        tolerations = tuple(request.tolerations)
        return RequestAlternative(
            result_name=result_name,
            device_class=device_class,
            selectors=selectors,
            all_devices=request.allocation_mode == ALLOCATION_MODE_ALL,
            count=request.count,
            admin_access=admin_access,
            signature=(
                device_class.metadata.name,
                tuple(s.expression for s in selectors),
                tuple((t.key, t.operator, t.value, t.effect) for t in tolerations),
                tuple(capacity_requests),
            ),
            tolerations=tolerations,
            capacity_requests=tuple(capacity_requests),
        )

    def _compile(self, claim: ResourceClaim) -> CompiledClaim:
        key = claim.key
        devices = claim.spec.devices
        requests = []
        alternatives: tuple[RequestAlternative, ...]
        for index, request in enumerate(devices.requests):
            where = f"spec.devices.requests[{index}]"
            if request.exactly is not None:
                admin = bool(request.exactly.admin_access)
                if admin and not self.features.admin_access:
                    raise AllocationError(
                        key,
                        f"{where}.exactly.adminAccess: admin access is requested, but DRAAdminAccess is off",
                    )
                alternatives = (
                    self._alternative(key, f"{where}.exactly", request.name, request.exactly, admin),
                )
            else:
                if not self.features.prioritized_list:
                    raise AllocationError(
                        key,
                        f"{where}.firstAvailable: prioritized lists are used, but DRAPrioritizedList is off",
                    )
                alternatives = tuple(
                    self._alternative(
                        key, f"{where}.firstAvailable[{sub_index}]", f"{request.name}/{sub.name}", sub, False
                    )
                    for sub_index, sub in enumerate(request.first_available or ())
                )
            requests.append(CompiledRequest(request.name, alternatives))
        request_names = {request.name for request in devices.requests}
        constraints = []
        for index, constraint in enumerate(devices.constraints):
            where = f"spec.devices.constraints[{index}]"
            if constraint.distinct_attribute is not None:
                raise AllocationError(
                    key, f"{where}.distinctAttribute: not supported by lockstep's allocator"
                )
            if not constraint.match_attribute:
                raise AllocationError(key, f"{where}: matchAttribute must be set")
            unknown = [name for name in constraint.requests if name.split("/", 1)[0] not in request_names]
            if unknown:
                raise AllocationError(key, f"{where}.requests: unknown request {unknown[0]!r}")
            if "/" not in constraint.match_attribute:
                raise AllocationError(
                    key,
                    f"{where}.matchAttribute: {constraint.match_attribute!r} must be qualified (domain/name)",
                )
            scope = frozenset(constraint.requests) if constraint.requests else None
            constraints.append(CompiledConstraint(scope, constraint.match_attribute))
        return CompiledClaim(claim, tuple(requests), tuple(constraints))

    # --- candidates ----------------------------------------------------------------------------------

    def candidates(
        self, alternative: RequestAlternative, node_name: str, labels: Mapping[str, str], claim_key: str
    ) -> list[DeviceEntry]:
        """Devices on the node that match the alternative's selectors (busy or not), cached."""
        if self._candidates_version != self._inventory.version:
            self._candidates.clear()
            self._candidates_version = self._inventory.version
        local = self._cached_candidates(alternative, node_name, claim_key)
        shared = self._cached_candidates(alternative, None, claim_key)
        if not shared:
            return local
        return local + [device for device in shared if device.available_on(node_name, labels)]

    def _cached_candidates(
        self, alternative: RequestAlternative, node_name: str | None, claim_key: str
    ) -> list[DeviceEntry]:
        """Matching node-local devices of ``node_name``, or with None the matching shared devices."""
        cache_key = (alternative.signature, node_name)
        cached = self._candidates.get(cache_key)
        if cached is None:
            devices = (
                self._inventory.shared_devices()
                if node_name is None
                else self._inventory.node_local_devices(node_name)
            )
            try:
                cached = [
                    device
                    for device in devices
                    if self._usable(device, alternative) and self._matches(device, alternative.selectors)
                ]
            except CELError as exc:
                cached = exc
            if len(self._candidates) >= MAX_CACHED_CANDIDATE_LISTS:
                self._candidates.clear()
            self._candidates[cache_key] = cached
        if isinstance(cached, CELError):
            devices = (
                self._inventory.shared_devices()
                if node_name is None
                else self._inventory.node_local_devices(node_name)
            )
            hint = self._list_type_hint(cached.expression, devices)
            # celpy appends its whole activation to some errors; the expression and problem suffice.
            problem = str(cached).split(" (in activation", 1)[0]
            raise AllocationError(claim_key, f"request {alternative.result_name!r}: {problem}{hint}")
        return cached

    def _list_type_hint(self, expression: str, devices: Iterable[DeviceEntry]) -> str:
        """With list types off: why a selector may fail or match nothing (it uses includes() or a
        list-type attribute that CEL cannot see); "" otherwise."""
        if self.features.list_type_attributes:
            return ""
        if ".includes(" in expression:
            return f"; includes() needs {LIST_TYPE_GATE}"
        for name in _list_attributes(devices):
            if re.search(rf"\b{re.escape(name.rpartition('/')[2])}\b", expression):
                return (
                    f'; "{name}" is a list-type attribute on these devices, visible to CEL only with '
                    f"{LIST_TYPE_GATE}"
                )
        return ""

    def _matches(self, device: DeviceEntry, selectors: tuple[Selector, ...]) -> bool:
        list_types = self.features.list_type_attributes
        return all(device.matches(selector, list_types) for selector in selectors)

    def _usable(self, device: DeviceEntry, alternative: RequestAlternative) -> bool:
        """What the features and the request's tolerations allow, whatever else is allocated."""
        if device.binding_conditions and not self.features.device_binding_and_status:
            return False
        if device.consumes and not self.features.partitionable_devices:
            return False
        if (
            self.features.consumable_capacity
            and (alternative.capacity_requests or device.allow_multiple_allocations)
            and self.consumption(alternative, device) is None
        ):
            return False
        return not (self.untolerated_taint(device, alternative))

    def incomplete_pool_on(self, node_name: str, labels: Mapping[str, str]) -> str | None:
        return self._inventory.incomplete_pool_on(node_name, labels)

    def shared(self, device: DeviceEntry) -> bool:
        """Whether several requests may take the device, each consuming part of its capacity."""
        return device.allow_multiple_allocations and self.features.consumable_capacity

    def consumption(
        self, alternative: RequestAlternative, device: DeviceEntry
    ) -> capacity.Consumption | None:
        requests = {name: amount for name, amount, _ in alternative.capacity_requests}
        return capacity.consumption(requests, device.driver, device.capacity_policies)

    def untolerated_taint(self, device: DeviceEntry, alternative: RequestAlternative) -> DeviceTaint | None:
        """The first taint of the device that keeps it from this request (None with DeviceTaints off)."""
        if not self.features.device_taints:
            return None
        return next((taint for taint in device.taints if not alternative.tolerates(taint)), None)

    def counter_ledger(self, busy: Collection[DeviceID] = ()) -> _CounterLedger:
        return _CounterLedger(
            self._inventory, lambda d: self.in_use(d) or bool(self.consumed_capacity(d)), busy
        )

    # --- the search ----------------------------------------------------------------------------------

    def find(
        self,
        claims: Sequence[CompiledClaim],
        node_name: str,
        labels: Mapping[str, str],
        busy: Collection[DeviceID] = (),
        accept: Callable[[list[Picks]], bool] | None = None,
    ) -> list[Picks] | None:
        """The devices for each claim, all on this node and mutually consistent, or None if impossible.

        ``busy`` devices count as in use (a simulation's own choices). ``accept`` may veto a complete
        solution; the search then goes on to the next one. Raises AllocationError when a selector
        fails to evaluate on a device of this node.
        """
        if accept is None and len(claims) == 1 and not claims[0].constraints and len(claims[0].requests) == 1:
            simple = self._find_single_request(claims[0], node_name, labels, busy)
            if simple is not None:
                return simple or None
        search = _Search(self, claims, node_name, labels, busy, accept)
        try:
            found = search.place(0)
        except _BudgetExceeded:
            self.gave_up = (node_name, tuple(claim.key for claim in claims))
            return None
        return search.picks if found else None

    def _find_single_request(
        self, claim: CompiledClaim, node_name: str, labels: Mapping[str, str], busy: Collection[DeviceID]
    ) -> list[Picks] | None:
        """The common case (one request, no constraints) without the search machinery: [] if
        impossible, None if the request needs the general search (allocation mode All)."""
        in_use = self.in_use
        ledger: _CounterLedger | None = None
        for alternative in claim.requests[0].alternatives:
            if alternative.all_devices:
                return None
            picks: Picks = []
            taken: list[DeviceEntry] = []
            for device in self.candidates(alternative, node_name, labels, claim.key):
                if alternative.admin_access or not (in_use(device.id) or device.id in busy):
                    shared_in_use = False
                    if self.shared(device):
                        consumed = self.consumption(alternative, device)
                        already = self.consumed_capacity(device.id)
                        if consumed is None or not capacity.fits(consumed, device.capacity_policies, already):
                            continue
                        shared_in_use = bool(already)
                    if device.consumes and not shared_in_use:
                        ledger = ledger or self.counter_ledger(busy)
                        if not ledger.take(device):
                            continue
                        taken.append(device)
                    picks.append((alternative, device))
                    if len(picks) == alternative.count:
                        return [picks]
            if ledger is not None:
                for device in taken:
                    ledger.release(device)
        return []

    def still_available(self, found: Sequence[Picks]) -> bool:
        """Whether the devices a search chose are still free, counters included (Reserve after Filter)."""
        ledger: _CounterLedger | None = None
        sharing: dict[DeviceID, list[capacity.Consumption]] = defaultdict(list)
        for picks in found:
            for alternative, device in picks:
                if not alternative.admin_access and self.in_use(device.id):
                    return False
                shared_in_use = False
                if self.shared(device):
                    consumed = self.consumption(alternative, device)
                    already = self.consumed_capacity(device.id)
                    if consumed is None or not capacity.fits(
                        consumed, device.capacity_policies, already, *sharing[device.id]
                    ):
                        return False
                    shared_in_use = bool(already or sharing[device.id])
                    sharing[device.id].append(consumed)
                if device.consumes and not shared_in_use:
                    ledger = ledger or self.counter_ledger()
                    if not ledger.take(device):
                        return False
        return True

    def allocate(
        self, claims: Sequence[CompiledClaim], node_name: str, labels: Mapping[str, str]
    ) -> list[AllocationResult] | None:
        """``find``, as the AllocationResults kube-scheduler would write."""
        found = self.find(claims, node_name, labels)
        return None if found is None else self.results(claims, found, node_name)

    # --- explaining a failed search ------------------------------------------------------------------

    def explain(
        self,
        claims: Sequence[CompiledClaim],
        node_name: str,
        labels: Mapping[str, str],
        busy: Collection[DeviceID] = (),
    ) -> str:
        """Why ``find`` found nothing on this node: the first request or constraint that cannot be met,
        named with its claim. Raises AllocationError as ``find`` does."""
        if self.gave_up == (node_name, tuple(claim.key for claim in claims)):
            self.gave_up = None
            return (
                f"claims {', '.join(c.key for c in claims)}: the search for devices on this node gave up "
                f"after {self.max_steps:g} steps (DRASchedulerFilterTimeout)"
            )
        for claim in claims:
            problem = self._explain_claim(claim, node_name, labels, busy)
            if problem is not None:
                return f"claim {claim.key}: {problem}"
        if len(claims) == 1:
            return (
                f"claim {claims[0].key}: no combination of the free devices on this node satisfies "
                "its requests and constraints together"
            )
        return (
            f"claims {', '.join(c.key for c in claims)}: each could be allocated on this node, "
            "but not all of them together"
        )

    def _explain_claim(
        self, claim: CompiledClaim, node_name: str, labels: Mapping[str, str], busy: Collection[DeviceID]
    ) -> str | None:
        usable: dict[str, tuple[RequestAlternative, list[DeviceEntry]]] = {}
        for request in claim.requests:
            problems = []
            for alternative in request.alternatives:
                candidates = self.candidates(alternative, node_name, labels, claim.key)
                free = [
                    device
                    for device in candidates
                    if alternative.admin_access or not (self.in_use(device.id) or device.id in busy)
                ]
                ledger = self.counter_ledger(busy)
                short = [device for device in free if device.consumes and not ledger.fits(device)]
                free = [device for device in free if device not in short]
                problem = self._explain_request(alternative, candidates, free, node_name, labels)
                if problem is not None and short:
                    problem += f"; {ledger.explain(short[0])}"
                if problem is not None:
                    excluded = self._explain_excluded(alternative, node_name, labels)
                    if excluded:
                        problem += f"; {excluded}"
                if problem is None:
                    usable[request.name] = (alternative, free)
                    break
                problems.append(f'request "{alternative.result_name}": {problem}')
            else:
                return "; ".join(problems)
        for constraint in claim.constraints:
            problem = self._explain_constraint(constraint, usable)
            if problem is not None:
                return problem
        return None

    def _explain_request(
        self,
        alternative: RequestAlternative,
        candidates: list[DeviceEntry],
        free: list[DeviceEntry],
        node_name: str,
        labels: Mapping[str, str],
    ) -> str | None:
        class_name = alternative.device_class.metadata.name
        if alternative.all_devices:
            updating = self._inventory.incomplete_pool_on(node_name, labels)
            if updating is not None:
                return f"allocationMode All needs every matching device, but {updating}"
            if not candidates:
                return self._explain_selectors(alternative, node_name, labels)
            if len(free) < len(candidates):
                return (
                    f'allocationMode All needs every device of class "{class_name}" that matches its '
                    f"selectors, {len(candidates) - len(free)} of the {len(candidates)} on this node are "
                    "allocated"
                )
            return None
        if len(free) >= alternative.count:
            return None
        if not candidates:
            return self._explain_selectors(alternative, node_name, labels)
        return (
            f'needs {alternative.count} devices of class "{class_name}", {len(free)} match its selectors '
            f"on this node and are free ({len(candidates)} match, {len(candidates) - len(free)} allocated)"
        )

    def _explain_excluded(
        self, alternative: RequestAlternative, node_name: str, labels: Mapping[str, str]
    ) -> str:
        """The devices matching the selectors that a taint or a disabled feature keeps from the request."""
        devices = self._inventory.node_local_devices(node_name) + [
            device for device in self._inventory.shared_devices() if device.available_on(node_name, labels)
        ]
        reasons = []
        for device in devices:
            if self._usable(device, alternative):
                continue
            try:
                if not self._matches(device, alternative.selectors):
                    continue
            except CELError:
                continue
            taint = self.untolerated_taint(device, alternative)
            if taint is not None:
                reasons.append(f"device {device.name} tainted {taint.key}:{taint.effect}")
            elif device.binding_conditions:
                reasons.append(
                    f"device {device.name} has bindingConditions, used only with the "
                    "DRADeviceBindingConditions and DRAResourceClaimDeviceStatus feature gates"
                )
            else:
                reasons.append(
                    f"device {device.name} consumes shared counters, used only with the "
                    "DRAPartitionableDevices feature gate"
                )
        if len(reasons) > 3:
            reasons = [*reasons[:3], f"{len(reasons) - 3} more"]
        return ", ".join(reasons)

    def _explain_selectors(
        self, alternative: RequestAlternative, node_name: str, labels: Mapping[str, str]
    ) -> str:
        """Which selector leaves no device on the node (the class's first, then the request's)."""
        devices = self._inventory.node_local_devices(node_name) + [
            device for device in self._inventory.shared_devices() if device.available_on(node_name, labels)
        ]
        class_name = alternative.device_class.metadata.name
        if not devices:
            return f'needs devices of class "{class_name}", this node has none published'
        list_types = self.features.list_type_attributes
        class_selectors = len(alternative.device_class.spec.selectors)
        for index, selector in enumerate(alternative.selectors):
            owner = f'DeviceClass "{class_name}" selector' if index < class_selectors else "selector"
            hint = self._list_type_hint(selector.expression, devices)
            try:
                if any(device.matches(selector, list_types) for device in devices):
                    continue
            except CELError as exc:
                return f"{owner}: {str(exc).split(' (in activation', 1)[0]}{hint}"
            return f"{owner} {selector.expression} matches no device on this node{hint}"
        return (
            f'its selectors (with those of DeviceClass "{class_name}") each match some of the '
            f"{len(devices)} devices on this node, but no device matches all of them"
        )

    def _explain_constraint(
        self,
        constraint: CompiledConstraint,
        usable: Mapping[str, tuple[RequestAlternative, list[DeviceEntry]]],
    ) -> str | None:
        covered = [
            (name, alternative, free)
            for name, (alternative, free) in usable.items()
            if constraint.applies_to(name) or constraint.applies_to(alternative.result_name)
        ]
        if not covered:
            return None
        attribute = constraint.attribute
        label = (
            f'constraint matchAttribute "{attribute}" over requests '
            f"[{', '.join(alternative.result_name for _, alternative, _ in covered)}]"
        )
        needed = sum(len(free) if alt.all_devices else alt.count for _, alt, free in covered)
        devices = list({device.id: device for _, _, free in covered for device in free}.values())
        if not self.features.list_type_attributes and any(
            _is_list_attribute(device, attribute) for device in devices
        ):
            return (
                f'{label}: "{attribute}" is a list-type attribute on these devices; matching list '
                f"attributes needs {LIST_TYPE_GATE}"
            )
        list_types = self.features.list_type_attributes
        values: Counter[tuple[str, Any]] = Counter()
        having = 0
        for device in devices:
            device_values = device.attribute_set(attribute, list_types)
            if device_values is not None:
                having += 1
                values.update(device_values)
        if having < needed:
            return (
                f"{label}: needs {needed} devices with the attribute, {having} of the {len(devices)} free "
                "matching devices on this node have it"
            )
        if max(values.values(), default=0) < needed:
            return f"{label}: no set of {needed} devices shares a value"
        return None

    def results(
        self, claims: Sequence[CompiledClaim], found: Sequence[Picks], node_name: str
    ) -> list[AllocationResult]:
        return [self._result(claim, picks, node_name) for claim, picks in zip(claims, found, strict=True)]

    def _share(self, alternative: RequestAlternative, device: DeviceEntry) -> dict[str, Any]:
        """``shareID`` and ``consumedCapacity`` of a result on a multi-allocatable device."""
        if not self.shared(device):
            return {}
        consumed = self.consumption(alternative, device) or {}
        texts = {name: text for name, _, text in alternative.capacity_requests}
        return {
            "share_id": str(uuid.uuid4()),
            "consumed_capacity": capacity.consumed_texts(
                consumed, texts, device.driver, device.capacity_policies
            ),
        }

    def _result(self, claim: CompiledClaim, picks: Picks, node_name: str) -> AllocationResult:
        results = [
            DeviceRequestAllocationResult(
                request=alternative.result_name,
                driver=device.driver,
                pool=device.pool,
                device=device.name,
                admin_access=True if alternative.admin_access else None,
                tolerations=list(alternative.tolerations) or None,
                binding_conditions=list(device.binding_conditions) or None,
                binding_failure_conditions=list(device.binding_failure_conditions) or None,
                **self._share(alternative, device),
            )
            for alternative, device in picks
        ]
        node_selector: NodeSelector | None = None
        if any(device.node_name is not None or device.binds_to_node for _, device in picks):
            node_selector = node_name_selector(node_name)
        else:
            node_selector = next((d.node_selector for _, d in picks if d.node_selector is not None), None)
        config: list[dict[str, Any]] = []
        by_class: dict[str, tuple[DeviceClass, list[str]]] = {}
        for alternative, _ in picks:
            entry = by_class.setdefault(
                alternative.device_class.metadata.name, (alternative.device_class, [])
            )
            if alternative.result_name not in entry[1]:
                entry[1].append(alternative.result_name)
        for device_class, request_names in by_class.values():
            for class_config in device_class.spec.config:
                config.append({"source": "FromClass", "requests": request_names, **class_config})
        for claim_config in claim.claim.spec.devices.config:
            config.append({"source": "FromClaim", **claim_config})
        return AllocationResult(
            devices=DeviceAllocationResult(results=results, config=config),
            node_selector=node_selector,
            allocation_timestamp=datetime.now(UTC).replace(microsecond=0),
        )


def _is_list_attribute(device: DeviceEntry, qualified_name: str) -> bool:
    attribute = device.attributes.get(qualified_name)
    return attribute is not None and any(
        values is not None
        for values in (
            attribute.int_values,
            attribute.bool_values,
            attribute.string_values,
            attribute.version_values,
        )
    )


def _list_attributes(devices: Iterable[DeviceEntry]) -> list[str]:
    """The qualified names of the list-type attributes of these devices, each once, in order."""
    names: dict[str, None] = {}
    for device in devices:
        for name in device.attributes:
            if name not in names and _is_list_attribute(device, name):
                names[name] = None
    return list(names)


class _Search:
    """Depth-first search state for one allocate() call."""

    def __init__(
        self,
        allocator: Allocator,
        claims: Sequence[CompiledClaim],
        node_name: str,
        labels: Mapping[str, str],
        busy: Collection[DeviceID],
        accept: Callable[[list[Picks]], bool] | None,
    ) -> None:
        self.allocator = allocator
        self.busy = busy
        self.accept = accept
        self.claims = claims
        self.node_name = node_name
        self.labels = labels
        self.slots = [(index, request) for index, claim in enumerate(claims) for request in claim.requests]
        self.picks: list[Picks] = [[] for _ in claims]
        self.chosen: set[DeviceID] = set()
        self.intersections: list[list[AttributeSet | None]] = [[None] * len(c.constraints) for c in claims]
        self.steps = 0
        self.list_types = allocator.features.list_type_attributes
        self.ledger = allocator.counter_ledger(busy)
        # Shares of multi-allocatable devices taken by this search, and per push what to undo.
        self.sharing: dict[DeviceID, list[capacity.Consumption]] = defaultdict(list)
        self.undo: list[tuple[bool, bool]] = []  # (took counters, took a share)

    def place(self, slot_index: int) -> bool:
        if slot_index == len(self.slots):
            return self.accept is None or self.accept(self.picks)
        claim_index, request = self.slots[slot_index]
        claim = self.claims[claim_index]
        for alternative in request.alternatives:
            candidates = self.allocator.candidates(alternative, self.node_name, self.labels, claim.key)
            free = [
                device
                for device in candidates
                if (device.id not in self.chosen or self.allocator.shared(device))
                and (
                    alternative.admin_access
                    or not (self.allocator.in_use(device.id) or device.id in self.busy)
                )
            ]
            if alternative.all_devices:
                # "All" cannot be known while a pool is incomplete (upstream refuses it too).
                if (
                    candidates
                    and len(free) == len(candidates)
                    and self.allocator.incomplete_pool_on(self.node_name, self.labels) is None
                    and self._take_all(claim_index, request, alternative, free, slot_index)
                ):
                    return True
            elif len(free) >= alternative.count and self._choose(
                claim_index, request, alternative, free, 0, alternative.count, slot_index
            ):
                return True
        return False

    def _take_all(
        self,
        claim_index: int,
        request: CompiledRequest,
        alternative: RequestAlternative,
        devices: list[DeviceEntry],
        slot_index: int,
    ) -> bool:
        saved = [list(self.intersections[claim_index])]
        for device in devices:
            if not self._constrain(claim_index, request.name, alternative, device):
                self.intersections[claim_index] = saved[0]
                return False
        taken: list[DeviceEntry] = []
        for device in devices:
            if not self._push(claim_index, alternative, device):
                for pushed in reversed(taken):
                    self._pop(claim_index, pushed)
                self.intersections[claim_index] = saved[0]
                return False
            taken.append(device)
        if self.place(slot_index + 1):
            return True
        for device in devices:
            self._pop(claim_index, device)
        self.intersections[claim_index] = saved[0]
        return False

    def _choose(
        self,
        claim_index: int,
        request: CompiledRequest,
        alternative: RequestAlternative,
        free: list[DeviceEntry],
        start: int,
        remaining: int,
        slot_index: int,
    ) -> bool:
        if remaining == 0:
            return self.place(slot_index + 1)
        for position in range(start, len(free) - remaining + 1):
            self.steps += 1
            if self.steps > self.allocator.max_steps:
                raise _BudgetExceeded
            device = free[position]
            saved = list(self.intersections[claim_index])
            if not self._constrain(claim_index, request.name, alternative, device) or not self._push(
                claim_index, alternative, device
            ):
                self.intersections[claim_index] = saved
                continue
            if self._choose(claim_index, request, alternative, free, position + 1, remaining - 1, slot_index):
                return True
            self._pop(claim_index, device)
            self.intersections[claim_index] = saved
        return False

    def _constrain(
        self, claim_index: int, request_name: str, alternative: RequestAlternative, device: DeviceEntry
    ) -> bool:
        """Narrow every constraint that covers this request by the device's values; False if one empties."""
        intersections = self.intersections[claim_index]
        for index, constraint in enumerate(self.claims[claim_index].constraints):
            if not (constraint.applies_to(request_name) or constraint.applies_to(alternative.result_name)):
                continue
            values = device.attribute_set(constraint.attribute, self.list_types)
            if values is None:
                return False
            current = intersections[index]
            narrowed = values if current is None else current & values
            if not narrowed:
                return False
            intersections[index] = narrowed
        return True

    def _push(self, claim_index: int, alternative: RequestAlternative, device: DeviceEntry) -> bool:
        """Take the device; False (nothing taken) when the counters it consumes are used up or, for a
        multi-allocatable device, its capacity is."""
        consumed: capacity.Consumption | None = None
        shared_in_use = False
        if self.allocator.shared(device):
            consumed = self.allocator.consumption(alternative, device)
            already = self.allocator.consumed_capacity(device.id)
            shares = self.sharing[device.id]
            if consumed is None or not capacity.fits(consumed, device.capacity_policies, already, *shares):
                return False
            shared_in_use = bool(already or shares)
        took_counters = bool(device.consumes) and not shared_in_use
        if took_counters and not self.ledger.take(device):
            return False
        if consumed is not None:
            self.sharing[device.id].append(consumed)
        self.undo.append((took_counters, consumed is not None))
        self.picks[claim_index].append((alternative, device))
        self.chosen.add(device.id)
        return True

    def _pop(self, claim_index: int, device: DeviceEntry) -> None:
        self.picks[claim_index].pop()
        took_counters, shared = self.undo.pop()
        if shared:
            self.sharing[device.id].pop()
            if not self.sharing[device.id]:
                self.chosen.discard(device.id)
        else:
            self.chosen.discard(device.id)
        if took_counters:
            self.ledger.release(device)


class _CounterLedger:
    """What the devices in use leave of each pool's shared counters, while a search takes devices.

    A pool's consumption is summed once per ledger, the first time a device of that pool is looked at,
    over the pool's counter-consuming devices that are in use (allocated or in flight) or ``busy``."""

    __slots__ = ("_busy", "_consumed", "_in_use", "_inventory")

    def __init__(
        self, inventory: DeviceInventory, in_use: Callable[[DeviceID], bool], busy: Collection[DeviceID]
    ) -> None:
        self._inventory = inventory
        self._in_use = in_use
        self._busy = busy
        self._consumed: dict[PoolID, dict[CounterID, Fraction]] = {}

    def _pool(self, pool_id: PoolID) -> dict[CounterID, Fraction]:
        consumed = self._consumed.get(pool_id)
        if consumed is None:
            consumed = defaultdict(Fraction)
            for user in self._inventory.pool_counters(pool_id)[1]:
                if self._in_use(user.id) or user.id in self._busy:
                    for counter, amount in user.consumes:
                        consumed[counter] += amount
            self._consumed[pool_id] = consumed
        return consumed

    def fits(self, device: DeviceEntry) -> bool:
        available = self._inventory.pool_counters(device.pool_id)[0]
        consumed = self._pool(device.pool_id)
        return all(
            counter in available and consumed[counter] + amount <= available[counter]
            for counter, amount in device.consumes
        )

    def take(self, device: DeviceEntry) -> bool:
        if not self.fits(device):
            return False
        consumed = self._pool(device.pool_id)
        for counter, amount in device.consumes:
            consumed[counter] += amount
        return True

    def release(self, device: DeviceEntry) -> None:
        consumed = self._pool(device.pool_id)
        for counter, amount in device.consumes:
            consumed[counter] -= amount

    def left(self, pool_id: PoolID) -> dict[CounterID, Fraction]:
        """Each counter of the pool minus what is consumed (for tests and explanations)."""
        available = self._inventory.pool_counters(pool_id)[0]
        consumed = self._pool(pool_id)
        return {counter: amount - consumed[counter] for counter, amount in available.items()}

    def explain(self, device: DeviceEntry) -> str:
        left = self.left(device.pool_id)
        for (counter_set, name), amount in device.consumes:
            remaining = left.get((counter_set, name), Fraction(0))
            if amount > remaining:
                left_text = format_amount(max(remaining, Fraction(0)))
                return (
                    f'device {device.name} needs {format_amount(amount)} of counter "{name}" in counter set '
                    f'"{counter_set}", {left_text} left by the devices in use'
                )
        return f"device {device.name}: its shared counters are used up"


def format_amount(amount: Fraction) -> str:
    """A quantity as Kubernetes would print it: binary suffix when exact, else the plain number."""
    if amount.denominator == 1 and amount:
        value = int(amount)
        for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
            if value % (1 << power) == 0:
                return f"{value >> power}{suffix}"
        return str(value)
    return str(float(amount)) if amount.denominator != 1 else "0"
