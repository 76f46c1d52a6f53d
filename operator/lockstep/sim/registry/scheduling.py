"""scheduling.k8s.io: PriorityClasses (v1) and the alpha Workload API (v1alpha2 PodGroups and Workloads)."""

from __future__ import annotations

from lockstep.sim.objectmeta import PlainStrategy
from lockstep.sim.resources import ResourceType

GROUP = "scheduling.k8s.io"


def scheduling_alpha_types() -> list[ResourceType]:
    plain = PlainStrategy()
    return [
        ResourceType(
            GROUP,
            "v1",
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            False,
            plain,
            short_names=("pc",),
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1alpha2",
            "podgroups",
            "podgroup",
            "PodGroup",
            True,
            plain,
            subresources=("status",),
            has_generation=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1alpha2",
            "workloads",
            "workload",
            "Workload",
            True,
            plain,
            has_generation=True,
            smp_lists={},
        ),
    ]
