"""ResourceStore: everything DRA the scheduler knows, fed by the watch handlers.

Claims live in an AssumeCache (the scheduler's own writes are seen before their watch events), pending
allocations in InFlightClaims, published devices in a DeviceInventory. The set of devices in use (by an
allocation in the cache or in flight; admin-access results do not count) is kept incrementally by
listening to both, so checking a device costs two dict lookups whatever the number of claims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from fractions import Fraction

from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.dra.allocator import Allocator
from lockstep.dra.claims import GroupClaimsReport, ensure_group_claims
from lockstep.dra.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    IMPLICIT_EXTENDED_RESOURCE_PREFIX,
    is_extended_claim_of,
)
from lockstep.dra.features import Features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.k8s_types import parse_quantity
from lockstep.dra.ports import GroupClaimAPI
from lockstep.scheduler.framework import PodInfo
from lockstep.state.assume_cache import AssumeCache
from lockstep.state.inflight import InFlightClaims

GroupRef = tuple[str, str]  # (namespace, PodGroup name)


def _newest_first(device_class: DeviceClass) -> tuple[float, str]:
    created = device_class.metadata.creation_timestamp
    return (-created.timestamp() if created is not None else 0.0, device_class.metadata.name)


def _allocated_devices(claim: ResourceClaim | None) -> list[DeviceID]:
    """The devices a claim holds exclusively: not with admin access, not a share (``shareID``)."""
    if claim is None or claim.status.allocation is None:
        return []
    return [
        (result.driver, result.pool, result.device)
        for result in claim.status.allocation.devices.results
        if not result.admin_access and not result.share_id
    ]


def _shares(claim: ResourceClaim | None) -> list[tuple[DeviceID, str, dict[str, Fraction]]]:
    """The shares of multi-allocatable devices a claim holds: (device, shareID, consumed capacity)."""
    if claim is None or claim.status.allocation is None:
        return []
    return [
        (
            (result.driver, result.pool, result.device),
            result.share_id,
            {name: parse_quantity(text).value for name, text in (result.consumed_capacity or {}).items()},
        )
        for result in claim.status.allocation.devices.results
        if result.share_id
    ]


class _DeviceUsage:
    """Device -> the allocations using it, tagged by source ("claim" in the cache, "flight" pending).

    ``on_busy``/``on_free`` see a device's first user arrive and its last user leave."""

    __slots__ = ("_shares", "_users", "in_use", "on_busy", "on_free")

    def __init__(self) -> None:
        self._users: dict[DeviceID, set[tuple[str, str]]] = {}
        # The allocator asks this for every candidate device: the dict's own method, no Python frame.
        self.in_use: Callable[[DeviceID], bool] = self._users.__contains__
        # Multi-allocatable devices: device -> (source, claim uid, shareID) -> consumed capacity.
        self._shares: dict[DeviceID, dict[tuple[str, str, str], dict[str, Fraction]]] = {}
        self.on_busy: Callable[[DeviceID], None] | None = None
        self.on_free: Callable[[DeviceID], None] | None = None

    def consumed_capacity(self, device_id: DeviceID) -> dict[str, Fraction]:
        """What the shares of a multi-allocatable device consume, summed per capacity."""
        total: dict[str, Fraction] = defaultdict(Fraction)
        for consumed in self._shares.get(device_id, {}).values():
            for name, amount in consumed.items():
                total[name] += amount
        return total

    def _add_shares(self, source: str, claim: ResourceClaim) -> None:
        for device_id, share_id, consumed in _shares(claim):
            self._shares.setdefault(device_id, {})[(source, claim.metadata.uid, share_id)] = consumed

    def _remove_shares(self, source: str, claim: ResourceClaim) -> None:
        for device_id, share_id, _ in _shares(claim):
            shares = self._shares.get(device_id)
            if shares is not None:
                shares.pop((source, claim.metadata.uid, share_id), None)
                if not shares:
                    del self._shares[device_id]

    def add(self, source: str, claim: ResourceClaim) -> None:
        self._add_shares(source, claim)
        for device_id in _allocated_devices(claim):
            users = self._users.get(device_id)
            if users is None:
                users = self._users[device_id] = set()
                if self.on_busy is not None:
                    self.on_busy(device_id)
            users.add((source, claim.metadata.uid))

    def remove(self, source: str, claim: ResourceClaim) -> None:
        self._remove_shares(source, claim)
        for device_id in _allocated_devices(claim):
            users = self._users.get(device_id)
            if users is None:
                continue
            users.discard((source, claim.metadata.uid))
            if not users:
                del self._users[device_id]
                if self.on_free is not None:
                    self.on_free(device_id)

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._users


class ResourceStore:
    def __init__(
        self,
        features: Features,
        on_resources_changed: Callable[[], None] | None = None,
        on_claim_added: Callable[[ResourceClaim], None] | None = None,
    ) -> None:
        """``on_resources_changed``: something that can let waiting pods fit (devices freed, a slice,
        class or template changed). ``on_claim_added``: a claim appeared; without it that counts as
        ``on_resources_changed`` too."""
        self.features = features
        self.claims: AssumeCache[ResourceClaim] = AssumeCache()
        self._usage = _DeviceUsage()
        self._usage.on_busy = self._device_busy
        self._usage.on_free = self._device_free
        self.in_flight = InFlightClaims(
            self.claims,
            lambda claim: self._usage.add("flight", claim),
            lambda claim: self._usage.remove("flight", claim),
        )
        self.claims.add_listener(self._claim_changed)
        self.inventory = DeviceInventory()
        self.classes: dict[str, DeviceClass] = {}
        self._extended_classes: dict[str, DeviceClass] | None = None  # extendedResourceName -> class
        self._extended_claims: dict[str, set[str]] = {}  # pod uid -> its extended resource claims' keys
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self._group_claims: dict[GroupRef, dict[str, str | None]] = {}
        self._on_resources_changed = on_resources_changed
        self._on_claim_added = on_claim_added
        self.allocator = Allocator(
            features, self.inventory, self.classes, self._usage.in_use, self._usage.consumed_capacity
        )

        # Free node-local devices per node, recounted when the inventory changes.
        self._free_on_node: dict[str, int] = {}
        self._nodes_with_free: set[str] = set()
        self._counted_version = -1

    @contextmanager
    def claims_released(self, leaving: Collection[str], live: Callable[[str], bool]) -> Iterator[int]:
        """For a preemption's trial: the devices of allocated claims that only pods in ``leaving``
        (uids) or pods that are gone (``live(uid)`` false) hold count as free during the block, as
        they will be once the resourceclaim controller releases them. A claim reserved for a
        PodGroup is held while the PodGroup exists, and one reserved for nobody stays allocated."""
        released = [
            claim
            for claim in self.claims.values()
            if claim.allocated
            and claim.status.reserved_for
            and all(
                ref.resource == "pods" and (ref.uid in leaving or not live(ref.uid))
                for ref in claim.status.reserved_for
            )
        ]
        for claim in released:
            self._usage.remove("claim", claim)
        try:
            yield len(released)
        finally:
            for claim in released:
                self._usage.add("claim", claim)

    def device_in_use(self, device_id: DeviceID) -> bool:
        return device_id in self._usage

    def nodes_with_free_devices(self) -> set[str] | None:
        """Nodes with at least one free node-local device, or None when some devices are not bound to
        a single node (nodeSelector or allNodes slices): then any node may still get devices."""
        if self.inventory.shared_devices():
            return None
        if self._counted_version != self.inventory.version:
            self._recount()
        return self._nodes_with_free

    def _recount(self) -> None:
        self._free_on_node = {
            node: sum(1 for device in self.inventory.node_local_devices(node) if device.id not in self._usage)
            for node in self.inventory.nodes()
        }
        self._nodes_with_free = {node for node, free in self._free_on_node.items() if free}
        self._counted_version = self.inventory.version

    def _device_busy(self, device_id: DeviceID) -> None:
        node = self.inventory.node_of(device_id)
        if node is not None and self._counted_version == self.inventory.version:
            self._free_on_node[node] -= 1
            if not self._free_on_node[node]:
                self._nodes_with_free.discard(node)

    def _device_free(self, device_id: DeviceID) -> None:
        node = self.inventory.node_of(device_id)
        if node is not None and self._counted_version == self.inventory.version:
            self._free_on_node[node] += 1
            self._nodes_with_free.add(node)

    def _changed(self) -> None:
        if self._on_resources_changed is not None:
            self._on_resources_changed()

    def _claim_changed(self, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        if old is not None:
            self._usage.remove("claim", old)
            if old.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION):
                self._index_extended_claim(old, add=False)
                if new is None and not old.allocated:  # (an allocated one frees devices: below)
                    self._changed()  # a pod's left-over claim is gone: it can be scheduled again
        if new is not None:
            self._usage.add("claim", new)
            if new.metadata.annotations.get(EXTENDED_RESOURCE_CLAIM_ANNOTATION):
                self._index_extended_claim(new, add=True)
        if old is None and new is not None:
            # A new claim frees no device: it helps only the pods that wait for it to appear.
            if self._on_claim_added is not None:
                self._on_claim_added(new)
            else:
                self._changed()
        elif old is not None and old.allocated and (new is None or not new.allocated):
            self._changed()  # an allocation was released

    def _index_extended_claim(self, claim: ResourceClaim, add: bool) -> None:
        for ref in claim.metadata.owner_references:
            if ref.controller and ref.kind == "Pod":
                keys = self._extended_claims.setdefault(ref.uid, set())
                if add:
                    keys.add(claim.key)
                else:
                    keys.discard(claim.key)
                    if not keys:
                        del self._extended_claims[ref.uid]

    def extended_claim_of(self, pod: PodInfo) -> ResourceClaim | None:
        """The extended resource claim the pod controls, if one exists (upstream
        ``findExtendedResourceClaim``)."""
        for key in sorted(self._extended_claims.get(pod.uid, ())):
            claim = self.claims.get(key)
            if claim is not None and is_extended_claim_of(claim, pod):
                return claim
        return None

    # --- watch feed ---------------------------------------------------------------------------------

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self.claims.on_informer_update(claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        self.claims.on_informer_delete(f"{namespace}/{name}")

    def upsert_slice(self, resource_slice: ResourceSlice) -> None:
        if self.inventory.update_slice(resource_slice):
            self._changed()

    def delete_slice(self, name: str) -> None:
        self.inventory.delete_slice(name)

    def upsert_class(self, device_class: DeviceClass) -> None:
        stored = self.classes.get(device_class.metadata.name)
        rv = device_class.metadata.resource_version
        if stored is not None and rv and stored.metadata.resource_version == rv:
            return  # a resync: keep the compiled claims that refer to the stored object
        self.classes[device_class.metadata.name] = device_class
        self._extended_classes = None
        self._changed()

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)
        self._extended_classes = None

    def extended_resource_class(self, resource: str) -> DeviceClass | None:
        """The DeviceClass that provides an extended resource (its spec.extendedResourceName, or the
        implicit ``deviceclass.resource.kubernetes.io/<class>``), None if none does. Several classes
        naming one resource: the newest wins, then the first by name, as kube-scheduler chooses."""
        if resource.startswith(IMPLICIT_EXTENDED_RESOURCE_PREFIX):
            return self.classes.get(resource.removeprefix(IMPLICIT_EXTENDED_RESOURCE_PREFIX))
        if self._extended_classes is None:
            chosen: dict[str, DeviceClass] = {}
            for device_class in sorted(self.classes.values(), key=_newest_first):
                name = device_class.spec.extended_resource_name
                if name:
                    chosen.setdefault(name, device_class)
            self._extended_classes = chosen
        return self._extended_classes.get(resource)

    def extended_resource_class_name(self, resource: str) -> str | None:
        device_class = self.extended_resource_class(resource)
        return None if device_class is None else device_class.metadata.name

    def upsert_template(self, template: ResourceClaimTemplate) -> None:
        self.templates[f"{template.metadata.namespace}/{template.metadata.name}"] = template
        self._changed()

    def delete_template(self, namespace: str, name: str) -> None:
        self.templates.pop(f"{namespace}/{name}", None)

    def upsert_pod_group(self, podgroup: PodGroup | UpstreamPodGroup) -> None:
        """Remember which claims the PodGroup's status names for its spec.resourceClaims entries."""
        self.record_group_claims(
            (podgroup.metadata.namespace, podgroup.metadata.name),
            {s.name: s.resource_claim_name for s in podgroup.status.resource_claim_statuses},
        )

    def delete_pod_group(self, namespace: str, name: str) -> None:
        self._group_claims.pop((namespace, name), None)

    def record_group_claims(self, group: GroupRef, claim_names: Mapping[str, str | None]) -> None:
        before = self._group_claims.get(group, {})
        merged = {**before, **claim_names}
        self._group_claims[group] = merged
        if merged != before:  # a PodGroup without claims, seen for the first time, changes nothing
            self._changed()

    def group_claim_names(self, group: GroupRef) -> Mapping[str, str | None]:
        return self._group_claims.get(group, {})

    async def ensure_group_claims(self, podgroup: PodGroup, api: GroupClaimAPI) -> GroupClaimsReport:
        """Create the PodGroup's missing template claims, record them in its status and here."""
        report = await ensure_group_claims(
            podgroup, self.templates.get, self.claims.get, api, self.upsert_claim
        )
        if report.recorded:
            self.record_group_claims(
                (podgroup.metadata.namespace, podgroup.metadata.name),
                {s["name"]: s["resourceClaimName"] for s in report.statuses},
            )
        return report
