"""The emulator's feature gates: kube-apiserver's gates that change what the emulator serves or accepts.

``lockstep sim --feature-gates``, ``SimCluster(feature_gates=...)`` and ``ApiServer(feature_gates=...)``
take them in kube-apiserver's syntax (``Name=true,Other=false``); an unknown gate is an error naming
it. Each kube version (``lockstep.sim.versions``) has its own gates: ``GATES_BY_VERSION``. A strategy
reads its gates from the ``FeatureGates`` its registry module was built with, as a kube-apiserver
strategy reads ``utilfeature.DefaultFeatureGate``.

To add a gate, add one line to the version's table: its name as kube-apiserver spells it and the
emulator's default. The defaults are those of a cluster of that version run with what the demo and
the examples need (upstream's default is said where the emulator differs). A gate lockstep run also
has (``lockstep.config.KNOWN_FEATURE_GATES``) defaults the same on both sides, kube's default, so
``lockstep sim`` and ``lockstep run`` agree with no flag; the demo turns on what its examples need
on both.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from lockstep.config import parse_feature_gates
from lockstep.sim.versions import KubeVersion, kube_version

GATES_1_36: Mapping[str, bool] = {
    # ResourceSlice attributes of list type (ints, bools, strings, versions), KEP-5491. Alpha and off
    # upstream, and here: lockstep run's default too (kube-scheduler's). With it on (the demo turns it
    # on for both) the simulated DRA driver publishes the list attribute numaNodes.
    "DRAListTypeAttributes": False,
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

# 1.37's defaults as pkg/features' versioned specs give them at 1.37. GangScheduling and
# WorkloadAwarePreemption are gone (folded into GenericWorkload).
GATES_1_37: Mapping[str, bool] = {
    # Alpha and off upstream and here, as in 1.36.
    "DRAListTypeAttributes": False,
    # scheduling.k8s.io/v1beta1 Workloads and PodGroups (beta, off upstream in 1.37: a beta API is
    # off by default); on here, as the alpha was in 1.36.
    "GenericWorkload": True,
    # scheduling.k8s.io/v1alpha3 CompositePodGroups, the Workload's compositePodGroupTemplates and a
    # PodGroup's parentCompositePodGroupName (alpha, off upstream); on here so the kind is served.
    "CompositePodGroup": True,
    # PodGroup (and template) schedulingConstraints (alpha, off upstream); on here as 1.36's alpha
    # API served them unconditionally.
    "TopologyAwareWorkloadScheduling": True,
    # PodGroup resourceClaims and status.resourceClaimStatuses (beta, off upstream in 1.37); on here
    # as 1.36's alpha API served them, and the resourceclaim controller's PodGroup half needs them.
    "DRAWorkloadResourceClaims": True,
    # PodGroup (and template) preemptionPolicy (alpha, off upstream, off here: forbidden).
    "PodGroupPreemptionPolicy": False,
    # Job spec.scheduling and the Job controller's Workload and PodGroup (alpha, KEP-5547, off
    # upstream, off here as well): on, every root Job gets an upstream PodGroup (Basic without
    # spec.scheduling) and its pods name it; a Job joining lockstep's PodGroup through the pod template
    # lines still does (tests/acceptance/test_upstream_137.py runs both with the gate on).
    "WorkloadWithJob": False,
    # DRA: GA in 1.37 (DRADeviceTaints, DRAResourceClaimDeviceStatus, DRAExtendedResource) or
    # beta and on (DRAPartitionableDevices, DRADeviceBindingConditions, DRAConsumableCapacity).
    "DRADeviceTaints": True,
    "DRAPartitionableDevices": True,
    "DRADeviceBindingConditions": True,
    "DRAResourceClaimDeviceStatus": True,
    "DRAConsumableCapacity": True,
    "DRAExtendedResource": True,
    # Pod-level spec.resources (beta, on upstream).
    "PodLevelResources": True,
}

GATES_BY_VERSION: Mapping[str, Mapping[str, bool]] = {"1.36": GATES_1_36, "1.37": GATES_1_37}


def gates_of(version: str | KubeVersion | None = None) -> Mapping[str, bool]:
    """The gates a kube version knows, with the emulator's defaults (None: the default version)."""
    return GATES_BY_VERSION[kube_version(version).name]


class FeatureGates(Mapping[str, bool]):
    """An immutable set of the emulator's gates for one kube version; every gate of that version's
    table has a value, and a gate of another version is an error naming it."""

    __slots__ = ("_gates", "kube_version")

    def __init__(
        self, value: str | Mapping[str, Any] | None = None, kube: str | KubeVersion | None = None
    ) -> None:
        self.kube_version = kube_version(kube)
        self._gates = parse_feature_gates(value, gates_of(self.kube_version))

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
        return f"FeatureGates({str(self)!r}, kube={self.kube_version.name!r})"
