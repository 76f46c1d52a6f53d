"""scheduling.k8s.io: PriorityClasses (v1, always served) and the alpha Workload API (v1alpha2 PodGroups and
Workloads, with the ``GenericWorkload`` gate)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import ApiError, FieldError
from lockstep.sim.objectmeta import PlainStrategy, validate_name
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "scheduling.k8s.io"

# ---------------------------------------------------------------- v1 PriorityClasses

PRIORITY_CLASS_STORAGE = f"{GROUP}/priorityclasses"
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
PREEMPTION_POLICIES = ("Never", "PreemptLowerPriority")
DEFAULT_PREEMPTION_POLICY = "PreemptLowerPriority"


def global_default_class(classes: Iterable[JsonObject]) -> JsonObject | None:
    """The PriorityClass marked globalDefault (the highest value if several), as admission picks it."""
    defaults = [c for c in classes if c.get("globalDefault") is True]
    return max(defaults, key=lambda c: int(c.get("value") or 0), default=None)


class PriorityClassStrategy(Strategy):
    """pkg/registry/scheduling/priorityclass and its validation, plus the Priority admission plugin's
    one rule for classes: a single globalDefault."""

    def admit(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext) -> None:
        if obj.get("globalDefault") is not True:
            return
        name = obj["metadata"].get("name", "")
        existing = global_default_class(
            c for c in ctx.objects_of(PRIORITY_CLASS_STORAGE) if c["metadata"].get("name") != name
        )
        if existing is not None:
            raise ApiError(
                403,
                "Forbidden",
                f'priorityclasses.scheduling.k8s.io "{name}" is forbidden: PriorityClass '
                f"{existing['metadata']['name']} is already marked as default. Only one default can exist",
                {"name": name, "group": GROUP, "kind": "priorityclasses"},
            )

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        obj.setdefault("preemptionPolicy", DEFAULT_PREEMPTION_POLICY)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors: list[FieldError] = []
        if old is None:
            errors.extend(validate_name(obj["metadata"].get("name")))
        value = obj.get("value")
        if isinstance(value, bool) or not isinstance(value, int):
            errors.append(
                fe.required("value")
                if value is None
                else fe.type_invalid("value", value, "must be an integer")
            )
        elif value > HIGHEST_USER_DEFINABLE_PRIORITY:
            errors.append(
                fe.forbidden(
                    "value",
                    f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
                )
            )
        policy = obj.get("preemptionPolicy")
        if policy not in PREEMPTION_POLICIES:
            errors.append(fe.not_supported("preemptionPolicy", policy, list(PREEMPTION_POLICIES)))
        if old is not None:
            if obj.get("value") != old.get("value"):
                errors.append(fe.forbidden("value", "may not be changed in an update."))
            if obj.get("preemptionPolicy") != old.get("preemptionPolicy"):
                errors.append(fe.invalid("preemptionPolicy", policy, "field is immutable"))
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        fields = ("value", "globalDefault", "description", "preemptionPolicy")
        return any(new.get(f) != old.get(f) for f in fields)


def admit_pod_priority(pod: JsonObject, ctx: WriteContext) -> None:
    """The Priority admission plugin on pod create: ``spec.priority`` and ``spec.preemptionPolicy``
    come from the pod's PriorityClass (or the global default); an unknown class and a client-set
    value that differs from the computed one are refused with 403."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    classes = ctx.objects_of(PRIORITY_CLASS_STORAGE)
    class_name = spec.get("priorityClassName")
    name = pod["metadata"].get("name") or pod["metadata"].get("generateName") or ""
    if class_name:
        chosen = next((c for c in classes if c["metadata"].get("name") == class_name), None)
        if chosen is None:
            raise _pod_forbidden(name, f"no PriorityClass with name {class_name} was found")
    else:
        chosen = global_default_class(classes)
        if chosen is not None:
            spec["priorityClassName"] = chosen["metadata"]["name"]
    priority = int(chosen.get("value") or 0) if chosen is not None else 0
    policy = chosen.get("preemptionPolicy") if chosen is not None else DEFAULT_PREEMPTION_POLICY
    given = spec.get("priority")
    if given is not None and given != priority:
        raise _pod_forbidden(
            name,
            f"the integer value of priority ({given}) must not be provided in pod spec; "
            f"priority admission controller computed {priority} from the given PriorityClass name",
        )
    spec["priority"] = priority
    given_policy = spec.get("preemptionPolicy")
    if given_policy is not None and given_policy != policy:
        raise _pod_forbidden(
            name,
            f"the string value of PreemptionPolicy ({given_policy}) must not be provided in pod spec; "
            f"priority admission controller computed {policy} from the given PriorityClass name",
        )
    spec["preemptionPolicy"] = policy


def _pod_forbidden(name: str, why: str) -> ApiError:
    return ApiError(403, "Forbidden", f'pods "{name}" is forbidden: {why}', {"name": name, "kind": "pods"})


def scheduling_types() -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1",
            "priorityclasses",
            "priorityclass",
            "PriorityClass",
            False,
            PriorityClassStrategy(),
            short_names=("pc",),
            has_generation=True,
            smp_lists={},
        )
    ]


# ---------------------------------------------------------------- v1alpha2 Workload API


def scheduling_alpha_types() -> list[ResourceType]:
    plain = PlainStrategy()
    return [
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
