"""scheduling.k8s.io: PriorityClasses (v1, always served) and the alpha Workload API (v1alpha2 PodGroups and
Workloads, with the ``GenericWorkload`` gate)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import ApiError, FieldError
from lockstep.sim.objectmeta import DNS1123_LABEL, LABEL_MESSAGE, validate_name
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

PODGROUP_PROTECTION_FINALIZER = "scheduling.k8s.io/podgroup-protection"
MAX_POD_GROUP_RESOURCE_CLAIMS = 4
MAX_POD_GROUP_TEMPLATES = 8
MAX_TOPOLOGY_CONSTRAINTS = 1
DISRUPTION_MODES = ("Pod", "PodGroup")
CONDITION_STATUSES = ("True", "False", "Unknown")


def _validate_policy(policy: Any, path: str) -> list[FieldError]:
    if not isinstance(policy, dict):
        return [fe.required(path)]
    chosen = [key for key in ("basic", "gang") if policy.get(key) is not None]
    if not chosen:
        return [fe.invalid(path, "", "must specify one of: `basic`, `gang`")]
    if len(chosen) > 1:
        return [fe.invalid(path, "{basic, gang}", "must specify exactly one of: `basic`, `gang`")]
    gang = policy.get("gang")
    if isinstance(gang, dict):
        min_count = gang.get("minCount")
        if not min_count:
            return [fe.required(f"{path}.gang.minCount")]
        if not isinstance(min_count, int) or min_count < 1:
            return [fe.invalid(f"{path}.gang.minCount", min_count, "must be greater than or equal to 1")]
    return []


def _validate_constraints(constraints: Any, path: str) -> list[FieldError]:
    if constraints is None:
        return []
    topology = (constraints or {}).get("topology") or []
    if len(topology) > MAX_TOPOLOGY_CONSTRAINTS:
        return [fe.too_many(f"{path}.topology", len(topology), MAX_TOPOLOGY_CONSTRAINTS)]
    errors: list[FieldError] = []
    for i, entry in enumerate(topology):
        if not isinstance(entry, dict) or not entry.get("key"):
            errors.append(fe.required(f"{path}.topology[{i}].key"))
    return errors


def _validate_resource_claims(claims: Any) -> list[FieldError]:
    claims = claims or []
    if len(claims) > MAX_POD_GROUP_RESOURCE_CLAIMS:
        return [fe.too_many("spec.resourceClaims", len(claims), MAX_POD_GROUP_RESOURCE_CLAIMS)]
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, claim in enumerate(claims):
        path = f"spec.resourceClaims[{i}]"
        claim = claim if isinstance(claim, dict) else {}
        name = claim.get("name")
        if not name:
            errors.append(fe.required(f"{path}.name"))
        elif not DNS1123_LABEL.match(str(name)):
            errors.append(fe.invalid(f"{path}.name", name, LABEL_MESSAGE))
        elif name in seen:
            errors.append(fe.duplicate(f"{path}.name", name))
        else:
            seen.add(name)
        sources = [key for key in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(key)]
        if len(sources) != 1:
            errors.append(
                fe.invalid(
                    path,
                    claim,
                    "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
    return errors


def _validate_conditions(conditions: Any) -> list[FieldError]:
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, condition in enumerate(conditions or []):
        path = f"status.conditions[{i}]"
        condition = condition if isinstance(condition, dict) else {}
        kind = condition.get("type")
        if not kind:
            errors.append(fe.required(f"{path}.type"))
        elif kind in seen:
            errors.append(fe.duplicate(f"{path}.type", kind))
        else:
            seen.add(kind)
        if condition.get("status") not in CONDITION_STATUSES:
            errors.append(
                fe.not_supported(f"{path}.status", condition.get("status"), list(CONDITION_STATUSES))
            )
        if not condition.get("lastTransitionTime"):
            errors.append(fe.required(f"{path}.lastTransitionTime", "must be set"))
        if not condition.get("reason"):
            errors.append(fe.required(f"{path}.reason", "must be set"))
    return errors


class PodGroupStrategy(Strategy):
    """The spec is immutable; the server adds the protection finalizer at create; status names only
    claims of ``spec.resourceClaims``."""

    drops_unknown_fields = True  # e.g. a topology entry's "mode": upstream's TopologyConstraint has key only

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("podGroupTemplateRef", None)
        spec.setdefault("disruptionMode", "Pod")
        obj.setdefault("status", {})
        if old is None:
            finalizers = obj["metadata"].setdefault("finalizers", [])
            if PODGROUP_PROTECTION_FINALIZER not in finalizers:
                finalizers.append(PODGROUP_PROTECTION_FINALIZER)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if old is None:
            return validate_name(obj["metadata"].get("name")) + self._validate_spec(spec)
        if ctx.subresource:
            return self._validate_status(obj.get("status") or {}, spec)
        old_spec = old.get("spec") or {}
        return [
            fe.invalid(f"spec.{key}", None, "field is immutable")
            for key in sorted(set(spec) | set(old_spec))
            if spec.get(key) != old_spec.get(key)
        ]

    @staticmethod
    def _validate_spec(spec: JsonObject) -> list[FieldError]:
        errors = _validate_policy(spec.get("schedulingPolicy"), "spec.schedulingPolicy")
        ref = spec.get("podGroupTemplateRef")
        if isinstance(ref, dict):
            workload = ref.get("workload") or {}
            for key in ("workloadName", "podGroupTemplateName"):
                if not workload.get(key):
                    errors.append(fe.required(f"spec.podGroupTemplateRef.workload.{key}"))
        errors.extend(_validate_constraints(spec.get("schedulingConstraints"), "spec.schedulingConstraints"))
        errors.extend(_validate_resource_claims(spec.get("resourceClaims")))
        mode = spec.get("disruptionMode")
        if mode not in DISRUPTION_MODES:
            errors.append(fe.not_supported("spec.disruptionMode", mode, list(DISRUPTION_MODES)))
        priority = spec.get("priority")
        if priority is not None and not isinstance(priority, int):
            errors.append(fe.invalid("spec.priority", priority, "must be an integer"))
        return errors

    @staticmethod
    def _validate_status(status: JsonObject, spec: JsonObject) -> list[FieldError]:
        errors = _validate_conditions(status.get("conditions"))
        declared = {c.get("name") for c in spec.get("resourceClaims") or [] if isinstance(c, dict)}
        for i, entry in enumerate(status.get("resourceClaimStatuses") or []):
            path = f"status.resourceClaimStatuses[{i}]"
            entry = entry if isinstance(entry, dict) else {}
            name = entry.get("name")
            if name not in declared:
                errors.append(
                    fe.invalid(
                        f"{path}.name", name, "must match the name of an entry in `spec.resourceClaims`"
                    )
                )
            claim_name = entry.get("resourceClaimName")
            if claim_name is not None:
                errors.extend(
                    FieldError(e.reason, f"{path}.resourceClaimName", e.detail)
                    for e in validate_name(claim_name)
                )
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


class WorkloadStrategy(Strategy):
    """A Workload's templates are immutable; it has no status of its own in v1alpha2."""

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        for template in spec.get("podGroupTemplates") or []:
            if isinstance(template, dict):
                template.setdefault("schedulingConstraints", None)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        if old is not None:
            old_spec = old.get("spec") or {}
            return [
                fe.invalid(f"spec.{key}", None, "field is immutable")
                for key in sorted(set(spec) | set(old_spec))
                if spec.get(key) != old_spec.get(key)
            ]
        errors = validate_name(obj["metadata"].get("name"))
        templates = spec.get("podGroupTemplates") or []
        if not templates:
            return [*errors, fe.required("spec.podGroupTemplates")]
        if len(templates) > MAX_POD_GROUP_TEMPLATES:
            return [*errors, fe.too_many("spec.podGroupTemplates", len(templates), MAX_POD_GROUP_TEMPLATES)]
        seen: set[str] = set()
        for i, template in enumerate(templates):
            path = f"spec.podGroupTemplates[{i}]"
            template = template if isinstance(template, dict) else {}
            name = template.get("name")
            if not name:
                errors.append(fe.required(f"{path}.name"))
            elif name in seen:
                errors.append(fe.duplicate(f"{path}.name", name))
            else:
                seen.add(name)
            errors.extend(_validate_policy(template.get("schedulingPolicy"), f"{path}.schedulingPolicy"))
            errors.extend(
                _validate_constraints(template.get("schedulingConstraints"), f"{path}.schedulingConstraints")
            )
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


def scheduling_alpha_types() -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1alpha2",
            "podgroups",
            "podgroup",
            "PodGroup",
            True,
            PodGroupStrategy(),
            subresources=("status",),
            returns_deleted_object=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1alpha2",
            "workloads",
            "workload",
            "Workload",
            True,
            WorkloadStrategy(),
            returns_deleted_object=True,
            smp_lists={},
        ),
    ]
