"""coordination.k8s.io: Leases."""

from __future__ import annotations

from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import (
    check_micro_time,
)
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]


class LeaseStrategy(Strategy):
    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        for key in ("acquireTime", "renewTime"):
            check_micro_time(rt, obj, ("spec", key))

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        duration = spec.get("leaseDurationSeconds")
        if duration is not None and duration <= 0:
            errors.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
        transitions = spec.get("leaseTransitions")
        if transitions is not None and transitions < 0:
            errors.append(
                fe.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0")
            )
        return errors


# ---------------------------------------------------------------- generic


def coordination_types() -> list[ResourceType]:
    return [
        ResourceType(
            "coordination.k8s.io",
            "v1",
            "leases",
            "lease",
            "Lease",
            True,
            LeaseStrategy(),
            unconditional_update=False,
            smp_lists={},
        ),
    ]
