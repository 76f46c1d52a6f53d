"""ResourceStore: everything DRA the scheduler knows, fed by the watch handlers.

Claims live in an AssumeCache (the scheduler's own writes are seen before their watch events), pending
allocations in InFlightClaims, published devices in a DeviceInventory. The set of devices in use (by an
allocation in the cache or in flight; admin-access results do not count) is kept incrementally by
listening to both, so checking a device costs two dict lookups whatever the number of claims.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, ResourceSlice
from lockstep.dra.allocator import Allocator
from lockstep.dra.claims import GroupClaimsReport, ensure_group_claims
from lockstep.dra.features import Features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.ports import GroupClaimAPI
from lockstep.state.assume_cache import AssumeCache
from lockstep.state.inflight import InFlightClaims

GroupRef = tuple[str, str]  # (namespace, PodGroup name)


def _allocated_devices(claim: ResourceClaim | None) -> list[DeviceID]:
    if claim is None or claim.status.allocation is None:
        return []
    return [
        (result.driver, result.pool, result.device)
        for result in claim.status.allocation.devices.results
        if not result.admin_access
    ]


class _DeviceUsage:
    __slots__ = ("_users",)

    def __init__(self) -> None:
        self._users: dict[DeviceID, set[str]] = {}

    def add(self, claim: ResourceClaim) -> None:
        for device_id in _allocated_devices(claim):
            self._users.setdefault(device_id, set()).add(claim.metadata.uid)

    def remove(self, claim: ResourceClaim) -> None:
        for device_id in _allocated_devices(claim):
            users = self._users.get(device_id)
            if users is not None:
                users.discard(claim.metadata.uid)
                if not users:
                    del self._users[device_id]

    def __contains__(self, device_id: object) -> bool:
        return device_id in self._users


class ResourceStore:
    def __init__(self, features: Features, on_resources_changed: Callable[[], None] | None = None) -> None:
        self.features = features
        self.claims: AssumeCache[ResourceClaim] = AssumeCache()
        self._by_claims = _DeviceUsage()
        self._in_flight_usage = _DeviceUsage()
        self.in_flight = InFlightClaims(self.claims, self._in_flight_usage.add, self._in_flight_usage.remove)
        self.claims.add_listener(self._claim_changed)
        self.inventory = DeviceInventory()
        self.classes: dict[str, DeviceClass] = {}
        self.templates: dict[str, ResourceClaimTemplate] = {}
        self._group_claims: dict[GroupRef, dict[str, str | None]] = {}
        self._on_resources_changed = on_resources_changed
        self.allocator = Allocator(features, self.inventory, self.classes, self.device_in_use)

    def device_in_use(self, device_id: DeviceID) -> bool:
        return device_id in self._by_claims or device_id in self._in_flight_usage

    def _changed(self) -> None:
        if self._on_resources_changed is not None:
            self._on_resources_changed()

    def _claim_changed(self, old: ResourceClaim | None, new: ResourceClaim | None) -> None:
        if old is not None:
            self._by_claims.remove(old)
        if new is not None:
            self._by_claims.add(new)
        if old is not None and old.allocated and (new is None or not new.allocated):
            self._changed()

    # --- watch feed ---------------------------------------------------------------------------------

    def upsert_claim(self, claim: ResourceClaim) -> None:
        self.claims.on_informer_update(claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        self.claims.on_informer_delete(f"{namespace}/{name}")

    def upsert_slice(self, resource_slice: ResourceSlice) -> None:
        self.inventory.update_slice(resource_slice)
        self._changed()

    def delete_slice(self, name: str) -> None:
        self.inventory.delete_slice(name)

    def upsert_class(self, device_class: DeviceClass) -> None:
        self.classes[device_class.metadata.name] = device_class
        self._changed()

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_template(self, template: ResourceClaimTemplate) -> None:
        self.templates[f"{template.metadata.namespace}/{template.metadata.name}"] = template
        self._changed()

    def delete_template(self, namespace: str, name: str) -> None:
        self.templates.pop(f"{namespace}/{name}", None)

    def upsert_pod_group(self, podgroup: PodGroup) -> None:
        """Remember which claims the PodGroup's status names for its spec.resourceClaims entries."""
        self.record_group_claims(
            (podgroup.metadata.namespace, podgroup.metadata.name),
            {s.name: s.resource_claim_name for s in podgroup.status.resource_claim_statuses},
        )

    def delete_pod_group(self, namespace: str, name: str) -> None:
        self._group_claims.pop((namespace, name), None)

    def record_group_claims(self, group: GroupRef, claim_names: Mapping[str, str | None]) -> None:
        before = self._group_claims.get(group)
        merged = {**(before or {}), **claim_names}
        self._group_claims[group] = merged
        if merged != before:
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
