"""The emulator's registry: one module per API group, each holding its kinds' strategies
(defaulting, validation, status rules) as kube-apiserver's ``pkg/registry/<group>/<kind>`` does.

To serve a new kind, add its ``ResourceType`` to its group's module (a new module for a new group)
and list the module's types in ``served_types``. A kind or field behind a kube-apiserver feature gate
reads the gate from the ``FeatureGates`` passed in (``lockstep.sim.features``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lockstep.sim import OPTIONAL_CRD_NAMES, crd
from lockstep.sim.features import FeatureGates
from lockstep.sim.registry import coscheduling, volcano
from lockstep.sim.registry.batch import batch_types
from lockstep.sim.registry.coordination import coordination_types
from lockstep.sim.registry.core import core_types
from lockstep.sim.registry.core_storage import core_storage_types
from lockstep.sim.registry.events import event_types
from lockstep.sim.registry.policy import policy_types
from lockstep.sim.registry.resource import dra_types
from lockstep.sim.registry.scheduling import scheduling_alpha_types, scheduling_types
from lockstep.sim.registry.scheduling.v1beta1 import scheduling_137_types
from lockstep.sim.registry.storage import storage_types
from lockstep.sim.resources import ResourceType

# Other schedulers' CRDs, installed only when asked (SimCluster(install_crds=...), lockstep sim
# --install-crds): one module per API group, each holding the published schema.
OPTIONAL_CRDS: dict[str, Callable[[], dict[str, Any]]] = dict(
    zip(OPTIONAL_CRD_NAMES, (coscheduling.crd, volcano.crd), strict=True)
)


def served_types(gates: FeatureGates) -> list[ResourceType]:
    """Every built-in kind the emulator serves with these gates (and their kube version), in
    registration order. The Workload API is the version's: 1.36 serves scheduling.k8s.io/v1alpha2,
    1.37 v1beta1 (and v1alpha3 CompositePodGroups)."""
    types = [
        *core_types(gates),
        *core_storage_types(),
        *event_types(),
        *coordination_types(),
        *storage_types(),
        *dra_types(gates),
        *scheduling_types(),
        *policy_types(),
        *batch_types(gates),
        crd.crd_type(),
    ]
    if gates.kube_version.minor >= 37:
        types.extend(scheduling_137_types(gates))
    elif gates["GenericWorkload"]:
        types.extend(scheduling_alpha_types())
    return types
