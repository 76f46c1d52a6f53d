"""The devices ResourceSlices publish, indexed by node, with per-device caches.

Only complete pools of their newest generation count: a pool whose slices of the newest generation are
fewer than ``resourceSliceCount`` is skipped until the driver has published the rest, and slices of
older generations are ignored. A pool's ``sharedCounters`` (in slices of their own) are gathered per
pool; a device that consumes a counter set or counter its pool does not define is never usable, as
upstream treats such a pool as invalid. Every device is a :class:`DeviceEntry` built once per slice
resourceVersion; it carries its CEL activation and the memoized results of the selectors evaluated
against it, so a selector runs once per (expression, device, slice version) however many pods ask.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from lockstep.api.resource import (
    BLOCKING_TAINT_EFFECTS,
    Device,
    DeviceAttribute,
    DeviceCapacity,
    DeviceTaint,
    NodeSelector,
    ResourceSlice,
)
from lockstep.dra.cel_errors import CELError, qualify
from lockstep.dra.k8s_types import Quantity, SemverError, parse_quantity, parse_semver
from lockstep.dra.node_selector import node_selector_matches

if TYPE_CHECKING:
    from lockstep.dra.cel import Selector
    from lockstep.dra.cel_fast import FastDevice

DeviceID = tuple[str, str, str]  # (driver, pool, device)
PoolID = tuple[str, str]  # (driver, pool)
CounterID = tuple[str, str]  # (counter set, counter)
AttributeSet = frozenset[tuple[str, Any]]

_SCALAR_KINDS = (("int_value", "int"), ("bool_value", "bool"), ("string_value", "string"))
_LIST_KINDS = (("int_values", "int"), ("bool_values", "bool"), ("string_values", "string"))


def attribute_set(attribute: DeviceAttribute, list_type_attributes: bool) -> AttributeSet | None:
    """The values of an attribute as a typed set for matchAttribute; a scalar is a one-element set.

    None when the attribute cannot take part: a list attribute while list types are off, or an
    unparsable version.
    """
    try:
        for field, kind in _SCALAR_KINDS:
            value = getattr(attribute, field)
            if value is not None:
                return frozenset({(kind, value)})
        if attribute.version_value is not None:
            return frozenset({("version", parse_semver(attribute.version_value))})
        if not list_type_attributes:
            return None
        for field, kind in _LIST_KINDS:
            values = getattr(attribute, field)
            if values is not None:
                return frozenset((kind, v) for v in values)
        if attribute.version_values is not None:
            return frozenset(("version", parse_semver(v)) for v in attribute.version_values)
    except SemverError:
        return None
    return None


class DeviceEntry:
    """One published device plus its caches (valid for one resourceVersion of its slice)."""

    __slots__ = (
        "_activations",
        "_attribute_sets",
        "_fast_devices",
        "_results",
        "all_nodes",
        "allow_multiple_allocations",
        "attributes",
        "binding_conditions",
        "binding_failure_conditions",
        "binds_to_node",
        "capacity",
        "capacity_policies",
        "consumes",
        "driver",
        "id",
        "name",
        "node_name",
        "node_selector",
        "pool",
        "pool_id",
        "taints",
    )

    def __init__(
        self,
        driver: str,
        pool: str,
        name: str,
        attributes: Mapping[str, DeviceAttribute],
        capacity: Mapping[str, Quantity],
        node_name: str | None,
        node_selector: NodeSelector | None,
        all_nodes: bool,
        allow_multiple_allocations: bool = False,
        shared_results: dict[tuple[str, bool], bool | CELError] | None = None,
    ) -> None:
        self.driver, self.pool, self.name = driver, pool, name
        self.id: DeviceID = (driver, pool, name)
        # Fully qualified attribute names ("domain/id"); unqualified names get the driver as domain.
        self.attributes = {"/".join(qualify(key, driver)): value for key, value in attributes.items()}
        self.capacity = dict(capacity)
        self.node_name = node_name
        self.node_selector = node_selector
        self.all_nodes = all_nodes
        self.allow_multiple_allocations = allow_multiple_allocations
        self.pool_id: PoolID = (driver, pool)
        # Set by _slice_entries from the published device (kept out of the constructor's hot path).
        self.taints: tuple[DeviceTaint, ...] = ()  # only the effects that block allocation
        self.consumes: tuple[tuple[CounterID, Fraction], ...] = ()
        self.binding_conditions: tuple[str, ...] = ()
        self.binding_failure_conditions: tuple[str, ...] = ()
        self.binds_to_node = False
        self.capacity_policies: Mapping[str, DeviceCapacity] = {}
        self._activations: dict[bool, dict[str, Any] | CELError] = {}
        self._fast_devices: dict[bool, FastDevice] = {}
        # Selector verdicts; devices with identical content may share one dict (see content_key).
        self._results: dict[tuple[str, bool], bool | CELError] = (
            shared_results if shared_results is not None else {}
        )
        self._attribute_sets: dict[tuple[str, bool], AttributeSet | None] = {}

    def __repr__(self) -> str:
        return f"DeviceEntry({'/'.join(self.id)})"

    def available_on(self, node_name: str, labels: Mapping[str, str]) -> bool:
        if self.node_name is not None:
            return self.node_name == node_name
        if self.node_selector is not None:
            return node_selector_matches(self.node_selector, node_name, labels)
        return self.all_nodes

    def _activation(self, list_type_attributes: bool, expression: str) -> dict[str, Any]:
        activation = self._activations.get(list_type_attributes)
        if activation is None:
            from lockstep.dra.cel import device_activation

            try:
                activation = device_activation(
                    self.driver,
                    {key: value.as_api() for key, value in self.attributes.items()},
                    self.capacity,
                    list_type_attributes,
                    self.allow_multiple_allocations,
                )
            except (ValueError, SemverError) as exc:
                activation = CELError(expression, f"device {'/'.join(self.id)} has a bad attribute: {exc}")
            self._activations[list_type_attributes] = activation
        if isinstance(activation, CELError):
            raise CELError(expression, activation.problem)
        return activation

    def _fast_verdict(self, selector: Selector, list_type_attributes: bool) -> bool | None:
        if selector.fast is None:
            return None
        device = self._fast_devices.get(list_type_attributes)
        if device is None:
            from lockstep.dra.cel_fast import fast_device

            device = fast_device(
                self.driver,
                {key: value.as_api() for key, value in self.attributes.items()},
                self.capacity,
                list_type_attributes,
                self.allow_multiple_allocations,
            )
            self._fast_devices[list_type_attributes] = device
        return selector.fast.verdict(device)

    def matches(self, selector: Selector, list_type_attributes: bool) -> bool:
        """The selector's verdict on this device, evaluated once; raises CELError (also memoized)."""
        key = (selector.expression, list_type_attributes)
        result = self._results.get(key)
        if result is None:
            result = self._fast_verdict(selector, list_type_attributes)
            if result is None:
                try:
                    result = selector.matches(self._activation(list_type_attributes, selector.expression))
                except CELError as exc:
                    result = exc
            self._results[key] = result
        if isinstance(result, CELError):
            raise result
        return result

    def attribute_set(self, qualified_name: str, list_type_attributes: bool) -> AttributeSet | None:
        key = (qualified_name, list_type_attributes)
        if key not in self._attribute_sets:
            attribute = self.attributes.get(qualified_name)
            self._attribute_sets[key] = (
                attribute_set(attribute, list_type_attributes) if attribute is not None else None
            )
        return self._attribute_sets[key]


def content_key(driver: str, device: Device) -> tuple[Any, ...]:
    """Everything a selector can see of a device: equal keys give equal verdicts."""
    attributes = tuple(
        sorted(
            (
                name,
                tuple((kind, tuple(v) if isinstance(v, list) else v) for kind, v in value.as_api().items()),
            )
            for name, value in device.attributes.items()
        )
    )
    capacity = tuple(sorted((name, value.quantity.value) for name, value in device.capacity.items()))
    return (driver, attributes, capacity, bool(device.allow_multiple_allocations))


def _consumption(device: Device) -> tuple[tuple[CounterID, Fraction], ...]:
    totals: dict[CounterID, Fraction] = defaultdict(Fraction)
    for consumption in device.consumes_counters:
        for name, counter in consumption.counters.items():
            totals[(consumption.counter_set, name)] += parse_quantity(counter.value).value
    return tuple(totals.items())


SharedResults = dict[tuple[Any, ...], dict[tuple[str, bool], "bool | CELError"]]


def _slice_entries(resource_slice: ResourceSlice, shared: SharedResults) -> list[DeviceEntry]:
    spec = resource_slice.spec
    entries = []
    for device in spec.devices:
        if spec.per_device_node_selection:
            node_name, node_selector, all_nodes = (
                device.node_name,
                device.node_selector,
                bool(device.all_nodes),
            )
        else:
            node_name, node_selector, all_nodes = spec.node_name, spec.node_selector, bool(spec.all_nodes)
        entry = DeviceEntry(
            spec.driver,
            spec.pool.name,
            device.name,
            device.attributes,
            {key: value.quantity for key, value in device.capacity.items()},
            node_name or None,
            node_selector,
            all_nodes,
            bool(device.allow_multiple_allocations),
            shared.setdefault(content_key(spec.driver, device), {}),
        )
        if device.taints:
            entry.taints = tuple(t for t in device.taints if t.effect in BLOCKING_TAINT_EFFECTS)
        if device.consumes_counters:
            entry.consumes = _consumption(device)
        if device.binding_conditions:
            entry.binding_conditions = tuple(device.binding_conditions)
            entry.binding_failure_conditions = tuple(device.binding_failure_conditions)
        entry.binds_to_node = bool(device.binds_to_node)
        if device.capacity:
            entry.capacity_policies = device.capacity
        entries.append(entry)
    return entries


class DeviceInventory:
    """All usable devices; ``version`` changes whenever the set of usable devices may have changed."""

    __slots__ = (
        "_by_id",
        "_by_node",
        "_counter_users",
        "_counters",
        "_dirty",
        "_entries",
        "_incomplete",
        "_node_of",
        "_non_local",
        "_shared_results",
        "_slices",
        "version",
    )

    def __init__(self) -> None:
        self._slices: dict[str, ResourceSlice] = {}
        self._entries: dict[str, tuple[str, list[DeviceEntry]]] = {}  # slice name -> (rv, entries)
        self._by_node: dict[str, list[DeviceEntry]] = {}
        self._non_local: list[DeviceEntry] = []
        self._node_of: dict[DeviceID, str] = {}
        self._by_id: dict[DeviceID, DeviceEntry] = {}
        # Per complete pool with shared counters: counter -> what the pool has, and the devices consuming.
        self._counters: dict[PoolID, dict[CounterID, Fraction]] = {}
        self._counter_users: dict[PoolID, list[DeviceEntry]] = {}
        self._incomplete: dict[PoolID, list[ResourceSlice]] = {}  # pool -> its newest slices
        # Selector verdicts by device content: 4,000 devices of a few models are evaluated a few times.
        self._shared_results: SharedResults = {}
        self._dirty = False
        self.version = 0

    def update_slice(self, resource_slice: ResourceSlice) -> bool:
        """Store a slice; False (and nothing invalidated) if this resourceVersion is stored already."""
        name, rv = resource_slice.metadata.name, resource_slice.metadata.resource_version
        stored = self._slices.get(name)
        if stored is not None and rv and stored.metadata.resource_version == rv:
            return False
        self._slices[name] = resource_slice
        self._dirty = True
        self.version += 1
        return True

    def delete_slice(self, name: str) -> None:
        if self._slices.pop(name, None) is not None:
            self._entries.pop(name, None)
            self._dirty = True
            self.version += 1

    def _entries_of(self, resource_slice: ResourceSlice) -> list[DeviceEntry]:
        name, rv = resource_slice.metadata.name, resource_slice.metadata.resource_version
        cached = self._entries.get(name)
        if cached is None or cached[0] != rv or not rv:
            if len(self._shared_results) > 100_000:
                self._shared_results = {}
            cached = (rv, _slice_entries(resource_slice, self._shared_results))
            self._entries[name] = cached
        return cached[1]

    def _rebuild(self) -> None:
        pools: dict[tuple[str, str], list[ResourceSlice]] = defaultdict(list)
        for resource_slice in self._slices.values():
            pools[(resource_slice.spec.driver, resource_slice.spec.pool.name)].append(resource_slice)
        by_node: dict[str, list[DeviceEntry]] = defaultdict(list)
        non_local: list[DeviceEntry] = []
        counters: dict[PoolID, dict[CounterID, Fraction]] = {}
        counter_users: dict[PoolID, list[DeviceEntry]] = {}
        incomplete: dict[PoolID, list[ResourceSlice]] = {}
        for pool_id, slices in pools.items():
            newest = max(s.spec.pool.generation for s in slices)
            current = [s for s in slices if s.spec.pool.generation == newest]
            if len(current) < max(s.spec.pool.resource_slice_count for s in current):
                incomplete[pool_id] = current  # the driver has not published all slices yet
                continue
            available = {
                (counter_set.name, name): parse_quantity(counter.value).value
                for resource_slice in current
                for counter_set in resource_slice.spec.shared_counters
                for name, counter in counter_set.counters.items()
            }
            users: list[DeviceEntry] = []
            for resource_slice in sorted(current, key=lambda s: s.metadata.name):
                for entry in self._entries_of(resource_slice):
                    if entry.consumes:
                        if any(counter not in available for counter, _ in entry.consumes):
                            continue  # consumes what the pool does not have: unusable
                        users.append(entry)
                    if entry.node_name is not None:
                        by_node[entry.node_name].append(entry)
                    else:
                        non_local.append(entry)
            if users:
                counters[pool_id], counter_users[pool_id] = available, users
        self._by_node, self._non_local = dict(by_node), non_local
        self._counters, self._counter_users = counters, counter_users
        self._incomplete = incomplete
        self._node_of = {entry.id: node for node, entries in self._by_node.items() for entry in entries}
        self._by_id = {entry.id: entry for entries in self._by_node.values() for entry in entries}
        self._by_id.update((entry.id, entry) for entry in non_local)
        self._dirty = False

    def node_local_devices(self, node_name: str) -> list[DeviceEntry]:
        if self._dirty:
            self._rebuild()
        return self._by_node.get(node_name, [])

    def nodes(self) -> list[str]:
        """Nodes with node-local devices."""
        if self._dirty:
            self._rebuild()
        return list(self._by_node)

    def node_of(self, device_id: DeviceID) -> str | None:
        """The node of a usable node-local device."""
        if self._dirty:
            self._rebuild()
        return self._node_of.get(device_id)

    def shared_devices(self) -> list[DeviceEntry]:
        """Devices of slices with a nodeSelector or allNodes: check ``available_on`` per node."""
        if self._dirty:
            self._rebuild()
        return self._non_local

    def all_devices(self) -> list[DeviceEntry]:
        if self._dirty:
            self._rebuild()
        return [entry for entries in self._by_node.values() for entry in entries] + self._non_local

    def device(self, device_id: DeviceID) -> DeviceEntry | None:
        """A usable device by its ID."""
        if self._dirty:
            self._rebuild()
        return self._by_id.get(device_id)

    def pool_counters(self, pool_id: PoolID) -> tuple[Mapping[CounterID, Fraction], list[DeviceEntry]]:
        """A pool's shared counters and the devices consuming them (empty for pools without)."""
        if self._dirty:
            self._rebuild()
        return self._counters.get(pool_id, {}), self._counter_users.get(pool_id, [])

    def incomplete_pool_on(self, node_name: str, labels: Mapping[str, str]) -> str | None:
        """A pool being updated (fewer slices of its newest generation than ``resourceSliceCount``)
        that may hold devices for this node, described; None if there is none."""
        if self._dirty:
            self._rebuild()
        for (driver, pool), slices in self._incomplete.items():
            for resource_slice in slices:
                spec = resource_slice.spec
                if spec.node_name:
                    relevant = spec.node_name == node_name
                elif spec.node_selector is not None:
                    relevant = node_selector_matches(spec.node_selector, node_name, labels)
                else:
                    relevant = True  # allNodes, or per-device node selection
                if relevant:
                    wanted = max(s.spec.pool.resource_slice_count for s in slices)
                    published = f"{len(slices)} of {wanted} slices published"
                    return f"resource pool {driver}/{pool} is being updated ({published})"
        return None
