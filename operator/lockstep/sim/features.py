"""The emulator's feature gates: kube-apiserver's gates that change what the emulator serves or accepts.

``lockstep sim --feature-gates``, ``SimCluster(feature_gates=...)`` and ``ApiServer(feature_gates=...)``
take them in kube-apiserver's syntax (``Name=true,Other=false``); an unknown gate is an error naming
it. A strategy reads its gates from the ``FeatureGates`` its registry module was built with, as a
kube-apiserver strategy reads ``utilfeature.DefaultFeatureGate``.

To add a gate, add one line to ``GATES``: its name as kube-apiserver spells it and the emulator's
default. The defaults are those of a v1.36 cluster run with what the demo and the examples need.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from lockstep.config import parse_feature_gates

GATES: Mapping[str, bool] = {
    # ResourceSlice attributes of list type (ints, bools, strings, versions), KEP-5491. Alpha and off
    # upstream; on here because the simulated DRA driver publishes the list attribute numaNodes.
    "DRAListTypeAttributes": True,
    # scheduling.k8s.io/v1alpha2 Workloads and PodGroups (and the pod's spec.schedulingGroup).
    "GenericWorkload": True,
    # The DRA betas on in 1.36: the ResourceSlice, ResourceClaim and DeviceClass fields they serve.
    "DRADeviceTaints": True,
    "DRAPartitionableDevices": True,
    "DRADeviceBindingConditions": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAConsumableCapacity": True,
    "DRAExtendedResource": True,
    # Pod-level spec.resources (beta, on upstream since 1.34): defaulted and validated as 1.36 does.
    "PodLevelResources": True,
}


class FeatureGates(Mapping[str, bool]):
    """An immutable set of the emulator's gates; every gate of ``GATES`` has a value."""

    __slots__ = ("_gates",)

    def __init__(self, value: str | Mapping[str, Any] | None = None) -> None:
        self._gates = parse_feature_gates(value, GATES)

    def __getitem__(self, name: str) -> bool:
        return self._gates[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._gates)

    def __len__(self) -> int:
        return len(self._gates)

    def __str__(self) -> str:
        """The gates in the flag's syntax."""
        return ",".join(f"{name}={str(value).lower()}" for name, value in sorted(self.items()))

    def __repr__(self) -> str:
        return f"FeatureGates({str(self)!r})"
