"""The allocator's feature set, derived from the feature gates in one place (DESIGN.md behaviour 5).

Upstream forgot to pass DRAListTypeAttributes into ``AllocatorFeatures`` (#139332), so list-type
attributes never reached the allocator. Here ``allocator_features`` is the only mapping from gates to
features, ``GATE_FEATURES`` names the field each gate drives (a test checks that every field is
populated), and the allocator refuses a feature set it does not support instead of silently ignoring
part of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields


@dataclass(frozen=True, slots=True)
class Features:
    """Field names follow upstream ``structured.Features``."""

    admin_access: bool = False
    prioritized_list: bool = False
    list_type_attributes: bool = False
    # Known upstream features lockstep's allocator does not implement; see SUPPORTED_FEATURES.
    consumable_capacity: bool = False
    device_binding_and_status: bool = False
    device_taints: bool = False
    partitionable_devices: bool = False

    def enabled(self) -> frozenset[str]:
        return frozenset(f.name for f in fields(self) if getattr(self, f.name))


# Feature gate -> the Features field it enables.
GATE_FEATURES: Mapping[str, str] = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAListTypeAttributes": "list_type_attributes",
}

SUPPORTED_FEATURES = frozenset({"admin_access", "prioritized_list", "list_type_attributes"})


class UnsupportedFeaturesError(ValueError):
    pass


def allocator_features(gates: Mapping[str, bool]) -> Features:
    """The allocator's features for the given gates (``Settings.feature_gates``)."""
    return Features(**{feature: bool(gates.get(gate, False)) for gate, feature in GATE_FEATURES.items()})


def require_supported(features: Features) -> None:
    """Raise UnsupportedFeaturesError when ``features`` asks for something the allocator cannot do."""
    unsupported = features.enabled() - SUPPORTED_FEATURES
    if unsupported:
        raise UnsupportedFeaturesError(
            "no allocator available for feature set "
            f"{{{', '.join(sorted(features.enabled()))}}}: unsupported {', '.join(sorted(unsupported))}"
        )
