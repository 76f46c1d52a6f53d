"""The DRA feature set, derived from the feature gates in one place (docs/architecture.md behaviour 5).

Upstream forgot to pass DRAListTypeAttributes into ``AllocatorFeatures`` (#139332), so list-type
attributes never reached the allocator. Here ``allocator_features`` is the only mapping from gates to
features: ``GATE_FEATURES`` names the field each gate drives (a test checks that every field is
populated), and a feature driven by several gates is on only when all of them are (upstream's
``DeviceBindingAndStatus = DRADeviceBindingConditions && DRAResourceClaimDeviceStatus``). Every feature
is implemented, on and off, so no feature set needs refusing (upstream's "no allocator available").
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Features:
    """The allocator's fields follow upstream ``structured.Features``; ``extended_resource`` and
    ``filter_timeout`` are the DynamicResources plugin's own."""

    admin_access: bool = False
    prioritized_list: bool = False
    list_type_attributes: bool = False
    consumable_capacity: bool = False
    device_binding_and_status: bool = False
    device_taints: bool = False
    partitionable_devices: bool = False
    extended_resource: bool = False
    filter_timeout: bool = False

    def enabled(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self) if getattr(self, f.name))


# Feature gate -> the Features field it enables (together with every other gate naming that field).
GATE_FEATURES: Mapping[str, str] = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAListTypeAttributes": "list_type_attributes",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "device_binding_and_status",
    "DRAResourceClaimDeviceStatus": "device_binding_and_status",
    "DRADeviceTaints": "device_taints",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRAExtendedResource": "extended_resource",
    "DRASchedulerFilterTimeout": "filter_timeout",
}

# The gates each feature needs, all of them on.
FEATURE_GATES: Mapping[str, tuple[str, ...]] = {
    feature: tuple(gate for gate, f in GATE_FEATURES.items() if f == feature)
    for feature in dict.fromkeys(GATE_FEATURES.values())
}


def allocator_features(gates: Mapping[str, bool]) -> Features:
    """The features for the given gates (``Settings.feature_gates``)."""
    states: dict[str, bool] = defaultdict(lambda: True)
    for gate, feature in GATE_FEATURES.items():
        states[feature] = states[feature] and bool(gates.get(gate, False))
    return Features(**states)
