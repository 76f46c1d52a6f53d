"""scheduling.k8s.io in 1.37: v1beta1 Workloads and PodGroups (gate ``GenericWorkload``) and v1alpha3
CompositePodGroups (gate ``CompositePodGroup``).

Upstream validates these kinds declaratively: the ``+k8s:`` tags of
``staging/src/k8s.io/api/scheduling/v1beta1/types.go`` (generated into
``pkg/apis/scheduling/v1beta1/zz_generated.validations.go``, messages from
``staging/src/k8s.io/apimachinery/pkg/api/validate``: ``union.go``, ``immutable.go``, ``update.go``,
``limits.go``, ``strfmt.go``, ``dependentrequired.go``), plus the hand-written rules of
``pkg/apis/scheduling/validation/validation.go`` (object names, the Workload's template names, depth,
priorities and children, the status' claim names). The strategies are
``pkg/registry/scheduling/podgroup/strategy.go``, ``pkg/registry/scheduling/workload/strategy.go`` and
``pkg/registry/scheduling/compositepodgroup/strategy.go`` (status reset on create, kept on update, gated
fields dropped unless in use); the protection finalizers come from the PodGroupProtection admission
plugin (``plugin/pkg/admission/podgroupprotection``), which stamps PodGroups and CompositePodGroups.

Declarative validation does not revalidate unchanged data: on update a field equal to the stored one is
not checked again (``old`` is None on create).
"""

from __future__ import annotations

import re
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.features import FeatureGates
from lockstep.sim.objectmeta import (
    dns1123_label_errors,
    dns1123_subdomain_errors,
    qualified_name_errors,
    validate_name,
)
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "scheduling.k8s.io"
PODGROUP_PROTECTION_FINALIZER = "scheduling.k8s.io/podgroup-protection"
# Not verified against a 1.37 server: the constant's value was not found in the sources read.
COMPOSITE_PODGROUP_PROTECTION_FINALIZER = "scheduling.k8s.io/compositepodgroup-protection"
MAX_TEMPLATES = 8
MAX_RESOURCE_CLAIMS = 4
MAX_TOPOLOGY = 1
MAX_TEMPLATE_DEPTH = 4
HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
PREEMPTION_POLICIES = ["Never", "PreemptLowerPriority"]
# metav1validation's validConditionStatuses.List(): sorted
CONDITION_STATUSES = ("False", "True", "Unknown")
CONDITION_REASON = re.compile(r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
CONDITION_REASON_MESSAGE = (
    "a condition reason must start with alphabetic character, optionally followed by a string of "
    "alphanumeric characters or '_,:', and must end with an alphanumeric character or '_' (e.g. "
    "'my_name',  or 'MY_NAME',  or 'MyName',  or 'ReasonA,ReasonB',  or 'ReasonA:ReasonB', regex used "
    "for validation is '[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?')"
)
MAX_CONDITION_REASON = 1024
MAX_CONDITION_MESSAGE = 32768

_UNSET = object()


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, dict) else None


def _sub(old: Any, key: str) -> Any:
    """The correlated old value of a field (``_UNSET`` on create)."""
    if old is _UNSET:
        return _UNSET
    return _get(old, key)


def _unchanged(new: Any, old: Any) -> bool:
    return old is not _UNSET and new == old


def _immutable(path: str, new: Any, old: Any) -> list[FieldError]:
    """``validate.Immutable``: ``field.Invalid(path, nil, "field is immutable")`` once a change is seen."""
    if old is _UNSET or new == old:
        return []
    return [fe.invalid(path, None, "field is immutable")]


def _union(
    path: str, new: Any, old: Any, members: tuple[str, ...], listed: tuple[str, ...] | None = None
) -> list[FieldError]:
    """``validate.Union``: exactly one member set; skipped on update when no member's set-ness changed.
    ``listed``: the members the messages name (a gated member is left out while its gate is off)."""

    def chosen(obj: Any) -> list[str]:
        # a pointer member is set when present and not null, a list member when it has items
        values = [_get(obj, m) for m in members]
        return [
            m
            for m, v in zip(members, values, strict=True)
            if (bool(v) if isinstance(v, list) else v is not None)
        ]

    specified = chosen(new)
    if old is not _UNSET and [m in specified for m in members] == [m in chosen(old) for m in members]:
        return []
    names = ", ".join(f"`{m}`" for m in (members if listed is None else listed))
    if len(specified) > 1:
        return [fe.invalid(path, "{" + ", ".join(specified) + "}", f"must specify exactly one of: {names}")]
    if not specified:
        return [fe.invalid(path, "", f"must specify one of: {names}")]
    return []


def _gated(path: str, new: Any, old: Any, enabled: bool) -> list[FieldError]:
    """``+k8s:ifDisabled(Gate)=+k8s:forbidden``: set with the gate off is forbidden (ratcheted)."""
    if enabled or new is None or _unchanged(new, old):
        return []
    return [fe.forbidden(path, "")]


def _required_string(path: str, value: Any) -> list[FieldError]:
    return [fe.required(path)] if not value else []


def _long_name(path: str, value: Any) -> list[FieldError]:
    return dns1123_subdomain_errors(path, value) if isinstance(value, str) else []


def _short_name(path: str, value: Any) -> list[FieldError]:
    return dns1123_label_errors(path, value) if isinstance(value, str) else []


def _path_segment_name(path: str, value: Any) -> list[FieldError]:
    if not isinstance(value, str):
        return []
    if value in (".", ".."):
        return [fe.invalid(path, value, f"may not be '{value}'")]
    return [fe.invalid(path, value, f"may not contain '{c}'") for c in ("/", "%") if c in value]


def _ints(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Rules:
    """The declarative rules of the scheduling.k8s.io 1.37 types, for one set of gates."""

    def __init__(self, gates: FeatureGates) -> None:
        self.topology = gates["TopologyAwareWorkloadScheduling"]
        self.composite = gates["CompositePodGroup"]
        self.preemption = gates["PodGroupPreemptionPolicy"]
        self.claims = gates["DRAWorkloadResourceClaims"]

    # -- shared pieces

    def gang(self, path: str, new: Any, old: Any, count: str) -> list[FieldError]:
        value = _get(new, count)
        if _unchanged(value, _sub(old, count)):
            return []
        if not value:
            return [fe.required(f"{path}.{count}")]
        if _ints(value) and value < 1:
            return [fe.invalid(f"{path}.{count}", value, "must be greater than or equal to 1")]
        return []

    def policy(self, path: str, new: Any, old: Any, count: str = "minCount") -> list[FieldError]:
        if _unchanged(new, old):
            return []
        errors = _union(path, new, old, ("basic", "gang"))
        basic, old_basic = _get(new, "basic"), _sub(old, "basic")
        if not _unchanged(basic, old_basic):
            errors += _immutable(f"{path}.basic", basic, old_basic)
        gang, old_gang = _get(new, "gang"), _sub(old, "gang")
        if not _unchanged(gang, old_gang):
            if old_gang is not _UNSET and old_gang is None and gang is not None:
                errors.append(fe.invalid(f"{path}.gang", None, "field cannot be set once created"))
            elif old_gang is not _UNSET and old_gang is not None and gang is None:
                errors.append(fe.invalid(f"{path}.gang", None, "field cannot be cleared once set"))
            elif gang is not None:
                errors += self.gang(f"{path}.gang", gang, old_gang, count)
        return errors

    def constraints(self, path: str, new: Any, old: Any, gated: bool = True) -> list[FieldError]:
        if _unchanged(new, old):
            return []
        if gated and not self.topology:
            # ifDisabled=forbidden and immutable both report a change (upstream's "... with TAS disabled")
            return _gated(path, new, old, False) + _immutable(path, new, old)
        errors = _immutable(path, new, old)
        if errors or new is None:
            return errors
        topology = _get(new, "topology") or []
        if len(topology) > MAX_TOPOLOGY:
            return [fe.too_many(f"{path}.topology", len(topology), MAX_TOPOLOGY)]
        for i, entry in enumerate(topology):
            key = _get(entry, "key")
            where = f"{path}.topology[{i}].key"
            errors += _required_string(where, key) or qualified_name_errors(where, key)
        return errors

    def resource_claims(self, path: str, new: Any, old: Any) -> list[FieldError]:
        claims = new if isinstance(new, list) else []
        new, old = new or None, old if old is _UNSET else (old or None)
        if _unchanged(new, old):
            return []
        errors = _immutable(path, new, old)
        if errors:
            return errors
        if len(claims) > MAX_RESOURCE_CLAIMS:
            return [fe.too_many(path, len(claims), MAX_RESOURCE_CLAIMS)]
        seen: set[Any] = set()
        for i, claim in enumerate(claims):
            where = f"{path}[{i}]"
            name = _get(claim, "name")
            if name in seen:
                errors.append(fe.duplicate(where, claim))
            seen.add(name)
            errors += _union(where, claim, _UNSET, ("resourceClaimName", "resourceClaimTemplateName"))
            errors += _required_string(f"{where}.name", name) or _short_name(f"{where}.name", name)
            for key in ("resourceClaimName", "resourceClaimTemplateName"):
                errors += _long_name(f"{where}.{key}", _get(claim, key))
        return errors

    def disruption_mode(self, path: str, new: Any, old: Any, required: bool) -> list[FieldError]:
        if _unchanged(new, old):
            return []
        errors = _immutable(path, new, old)
        if errors:
            return errors
        if new is None:
            return [fe.required(path)] if required else []
        return _union(path, new, old, ("single", "all"))

    def priority_fields(self, path: str, new: Any, old: Any) -> list[FieldError]:
        errors: list[FieldError] = []
        name, old_name = _get(new, "priorityClassName") or "", _sub(old, "priorityClassName")
        old_name = old_name if old_name is _UNSET else (old_name or "")
        if not _unchanged(name, old_name):
            errors += _immutable(f"{path}.priorityClassName", name, old_name) or (
                _long_name(f"{path}.priorityClassName", name) if name else []
            )
        priority, old_priority = _get(new, "priority"), _sub(old, "priority")
        if not _unchanged(priority, old_priority):
            immutable = _immutable(f"{path}.priority", priority, old_priority)
            errors += immutable
            if not immutable and _ints(priority) and priority > HIGHEST_USER_DEFINABLE_PRIORITY:
                errors.append(
                    fe.invalid(
                        f"{path}.priority",
                        priority,
                        f"must be less than or equal to {HIGHEST_USER_DEFINABLE_PRIORITY}",
                    )
                )
        policy, old_policy = _get(new, "preemptionPolicy"), _sub(old, "preemptionPolicy")
        if not _unchanged(policy, old_policy):
            where = f"{path}.preemptionPolicy"
            gated = _gated(where, policy, old_policy, self.preemption)
            immutable = _immutable(where, policy, old_policy)
            errors += gated + immutable
            if not gated and not immutable and policy is not None and policy not in PREEMPTION_POLICIES:
                errors.append(fe.not_supported(where, policy, PREEMPTION_POLICIES))
        return errors

    def workload_ref(self, path: str, new: Any, old: Any) -> list[FieldError]:
        if _unchanged(new, old):
            return []
        errors = _immutable(path, new, old)
        if errors or new is None:
            return errors
        workload, template = _get(new, "workloadName"), _get(new, "templateName")
        errors += _required_string(f"{path}.workloadName", workload) or _long_name(
            f"{path}.workloadName", workload
        )
        errors += _required_string(f"{path}.templateName", template) or _short_name(
            f"{path}.templateName", template
        )
        return errors

    def parent(self, path: str, spec: Any, old_spec: Any) -> list[FieldError]:
        new, old = _get(spec, "parentCompositePodGroupName"), _sub(old_spec, "parentCompositePodGroupName")
        errors: list[FieldError] = []
        # +k8s:dependentRequired("workloadRef"): checked unless neither side's set-ness changed
        has_parent, has_ref = new is not None, _get(spec, "workloadRef") is not None
        changed = old_spec is _UNSET or (
            has_parent != (old is not None) or has_ref != (_get(old_spec, "workloadRef") is not None)
        )
        if changed and has_parent and not has_ref:
            errors.append(
                fe.required(
                    path.rsplit(".", 1)[0] + ".workloadRef",
                    "must be set when parentCompositePodGroupName is set",
                )
            )
        if _unchanged(new, old):
            return errors
        gated = _gated(path, new, old, self.composite)
        immutable = _immutable(path, new, old)
        if gated:
            return errors + gated + immutable
        if immutable or new is None:
            return errors + immutable
        return errors + _long_name(path, new)

    def conditions(self, path: str, conditions: Any) -> list[FieldError]:
        """``metav1validation.ValidateConditions``: types unique and qualified names, a known status, a
        non-negative observedGeneration, lastTransitionTime and reason set, the reason's format and
        length (1024) and the message's length (32768)."""
        errors: list[FieldError] = []
        seen: set[Any] = set()
        for i, condition in enumerate(conditions or []):
            where = f"{path}[{i}]"
            condition = condition if isinstance(condition, dict) else {}
            kind = condition.get("type")
            if kind in seen:
                errors.append(fe.duplicate(f"{where}.type", kind))
            else:
                seen.add(kind)
            errors += qualified_name_errors(f"{where}.type", kind if kind is not None else "")
            status = condition.get("status")
            if status not in CONDITION_STATUSES:
                errors.append(fe.not_supported(f"{where}.status", status, list(CONDITION_STATUSES)))
            generation = condition.get("observedGeneration")
            if isinstance(generation, int) and not isinstance(generation, bool) and generation < 0:
                errors.append(
                    fe.invalid(
                        f"{where}.observedGeneration", generation, "must be greater than or equal to zero"
                    )
                )
            if not condition.get("lastTransitionTime"):
                errors.append(fe.required(f"{where}.lastTransitionTime", "must be set"))
            reason = condition.get("reason")
            if not reason:
                errors.append(fe.required(f"{where}.reason", "must be set"))
            elif isinstance(reason, str):
                if not CONDITION_REASON.match(reason):
                    errors.append(fe.invalid(f"{where}.reason", reason, CONDITION_REASON_MESSAGE))
                if len(reason) > MAX_CONDITION_REASON:
                    errors.append(fe.too_long(f"{where}.reason", MAX_CONDITION_REASON))
            message = condition.get("message")
            if isinstance(message, str) and len(message) > MAX_CONDITION_MESSAGE:
                errors.append(fe.too_long(f"{where}.message", MAX_CONDITION_MESSAGE))
        return errors

    # -- PodGroup

    def pod_group_spec(self, spec: Any, old: Any) -> list[FieldError]:
        path = "spec"
        errors = self.parent(f"{path}.parentCompositePodGroupName", spec, old)
        errors += self.workload_ref(
            f"{path}.workloadRef", _get(spec, "workloadRef"), _sub(old, "workloadRef")
        )
        policy = _get(spec, "schedulingPolicy")
        if policy is None and not _unchanged(policy, _sub(old, "schedulingPolicy")):
            errors.append(fe.invalid(f"{path}.schedulingPolicy", "", "must specify one of: `basic`, `gang`"))
        else:
            errors += self.policy(f"{path}.schedulingPolicy", policy, _sub(old, "schedulingPolicy"))
        errors += self.constraints(
            f"{path}.schedulingConstraints",
            _get(spec, "schedulingConstraints"),
            _sub(old, "schedulingConstraints"),
        )
        errors += self.resource_claims(
            f"{path}.resourceClaims", _get(spec, "resourceClaims"), _sub(old, "resourceClaims")
        )
        errors += self.disruption_mode(
            f"{path}.disruptionMode", _get(spec, "disruptionMode"), _sub(old, "disruptionMode"), True
        )
        errors += self.priority_fields(path, spec, old)
        return errors

    # -- Workload

    def templates(self, path: str, new: Any, old: Any, composite: bool) -> list[FieldError]:
        items = new if isinstance(new, list) else []
        new, old = new or None, old if old is _UNSET else (old or None)
        if _unchanged(new, old):
            return []
        if composite and not self.composite:
            return _gated(path, new, old, False)
        # maxItems short-circuits the items' own rules, not the update's no-add/no-remove checks
        # (workload/declarative_validation_test.go, "invalid update too many podGroupTemplates")
        errors: list[FieldError] = []
        if len(items) > MAX_TEMPLATES:
            errors.append(fe.too_many(path, len(items), MAX_TEMPLATES))
        olds = {} if old is _UNSET else {_get(t, "name"): t for t in old or []}
        if errors and old is _UNSET:
            return errors
        if old is not _UNSET:
            names = {_get(t, "name") for t in items}
            for i, template in enumerate(items):
                if _get(template, "name") not in olds:
                    errors.append(fe.forbidden(f"{path}[{i}]", "item may not be added"))
            errors += [fe.forbidden(path, "item may not be removed") for name in olds if name not in names]
            if errors:
                return errors
        seen: set[Any] = set()
        for i, template in enumerate(items):
            name = _get(template, "name")
            if name in seen:
                errors.append(fe.duplicate(f"{path}[{i}]", template))
            seen.add(name)
        for i, template in enumerate(items):
            previous = olds.get(_get(template, "name"), _UNSET) if old is not _UNSET else _UNSET
            if _unchanged(template, previous):
                continue
            where = f"{path}[{i}]"
            name = _get(template, "name")
            errors += _required_string(f"{where}.name", name) or _short_name(f"{where}.name", name)
            count = "minGroupCount" if composite else "minCount"
            errors += self.policy(
                f"{where}.schedulingPolicy",
                _get(template, "schedulingPolicy"),
                _sub(previous, "schedulingPolicy"),
                count,
            )
            errors += self.constraints(
                f"{where}.schedulingConstraints",
                _get(template, "schedulingConstraints"),
                _sub(previous, "schedulingConstraints"),
                gated=not composite,
            )
            if not composite:
                errors += self.resource_claims(
                    f"{where}.resourceClaims",
                    _get(template, "resourceClaims"),
                    _sub(previous, "resourceClaims"),
                )
            errors += self.disruption_mode(
                f"{where}.disruptionMode",
                _get(template, "disruptionMode"),
                _sub(previous, "disruptionMode"),
                False,
            )
            errors += self.priority_fields(where, template, previous)
            if composite:
                errors += self.templates(
                    f"{where}.podGroupTemplates",
                    _get(template, "podGroupTemplates"),
                    _sub(previous, "podGroupTemplates"),
                    False,
                )
                errors += self.templates(
                    f"{where}.compositePodGroupTemplates",
                    _get(template, "compositePodGroupTemplates"),
                    _sub(previous, "compositePodGroupTemplates"),
                    True,
                )
        return errors

    def workload_spec(self, spec: Any, old: Any) -> list[FieldError]:
        members = ("podGroupTemplates", "compositePodGroupTemplates")
        errors = _union("spec", spec, old, members, members if self.composite else members[:1])
        ref, old_ref = _get(spec, "controllerRef"), _sub(old, "controllerRef")
        if not _unchanged(ref, old_ref):
            immutable = _immutable("spec.controllerRef", ref, old_ref)
            errors += immutable
            if not immutable and ref is not None:
                group = _get(ref, "apiGroup")
                errors += _long_name("spec.controllerRef.apiGroup", group) if group else []
                for key in ("kind", "name"):
                    value = _get(ref, key)
                    where = f"spec.controllerRef.{key}"
                    errors += _required_string(where, value) or _path_segment_name(where, value)
        errors += self.templates(
            "spec.podGroupTemplates", _get(spec, "podGroupTemplates"), _sub(old, "podGroupTemplates"), False
        )
        errors += self.templates(
            "spec.compositePodGroupTemplates",
            _get(spec, "compositePodGroupTemplates"),
            _sub(old, "compositePodGroupTemplates"),
            True,
        )
        return errors + _workload_hierarchy(spec if isinstance(spec, dict) else {})


def workload_building_block_errors(
    gates: FeatureGates, path: str, new: JsonObject, old: JsonObject | None
) -> list[FieldError]:
    """The declarative rules of the v1alpha3 building blocks a controller embeds in its own API (a Job's
    ``spec.scheduling``), as ``workloadbuilder.Validate`` runs them and as the Job's API recommends
    them (staging/src/k8s.io/api/scheduling/v1alpha3/types.go, ``WorkloadPodGroup*``):
    ``schedulingPolicy`` one of ``basic``/``gang`` and never added or removed (``+k8s:update=NoSet``,
    ``NoUnset``), ``gang.minCount`` optional and at least 1, ``schedulingConstraints``,
    ``disruptionMode`` and ``resourceClaims`` immutable. ``old`` is None on create."""
    prior: Any = _UNSET if old is None else old
    rules = _Rules(gates)
    errors: list[FieldError] = []
    policy, old_policy = new.get("schedulingPolicy"), _sub(prior, "schedulingPolicy")
    where = f"{path}.schedulingPolicy"
    if not _unchanged(policy, old_policy):
        if old_policy is not _UNSET and old_policy is None and policy is not None:
            errors.append(fe.invalid(where, None, "field cannot be set once created"))
        elif old_policy is not _UNSET and old_policy is not None and policy is None:
            errors.append(fe.invalid(where, None, "field cannot be cleared once set"))
        elif policy is not None:
            errors += _union(where, policy, old_policy, ("basic", "gang"))
            count = _get(_get(policy, "gang"), "minCount")
            old_count = _get(_get(old_policy, "gang"), "minCount")
            if count is not None and count != old_count and _ints(count) and count < 1:
                detail = "must be greater than or equal to 1"
                errors.append(fe.invalid(f"{where}.gang.minCount", count, detail))
    errors += rules.constraints(
        f"{path}.schedulingConstraints",
        new.get("schedulingConstraints"),
        _sub(prior, "schedulingConstraints"),
        gated=False,
    )
    errors += rules.disruption_mode(
        f"{path}.disruptionMode", new.get("disruptionMode"), _sub(prior, "disruptionMode"), False
    )
    errors += rules.resource_claims(
        f"{path}.resourceClaims", new.get("resourceClaims"), _sub(prior, "resourceClaims")
    )
    return errors


def _templates_of(obj: Any, key: str) -> list[JsonObject]:
    items = _get(obj, key)
    return [t for t in items if isinstance(t, dict)] if isinstance(items, list) else []


def _workload_hierarchy(spec: JsonObject) -> list[FieldError]:
    """validation.go's ``ValidateWorkloadSpec``: template names unique across the whole hierarchy, at
    most ``MAX_TEMPLATE_DEPTH`` levels of composite templates, one priority configuration, and every
    composite template with a child."""
    errors: list[FieldError] = []
    names = {t.get("name") for t in _templates_of(spec, "podGroupTemplates")}

    def composite_names(path: str, templates: list[JsonObject]) -> None:
        listed: set[Any] = set()
        for i, child in enumerate(templates):
            if child.get("name") in names:
                errors.append(fe.duplicate(f"{path}.compositePodGroupTemplates[{i}].name", child.get("name")))
            listed.add(child.get("name"))
        names.update(listed)
        for i, child in enumerate(templates):
            where = f"{path}.compositePodGroupTemplates[{i}]"
            pods: set[Any] = set()
            for j, grandchild in enumerate(_templates_of(child, "podGroupTemplates")):
                if grandchild.get("name") in names:
                    errors.append(
                        fe.duplicate(f"{where}.podGroupTemplates[{j}].name", grandchild.get("name"))
                    )
                pods.add(grandchild.get("name"))
            names.update(pods)
            composite_names(where, _templates_of(child, "compositePodGroupTemplates"))

    composite_names("spec", _templates_of(spec, "compositePodGroupTemplates"))

    def deep(template: JsonObject, depth: int) -> bool:
        if depth == MAX_TEMPLATE_DEPTH:
            return False
        return all(deep(child, depth + 1) for child in _templates_of(template, "compositePodGroupTemplates"))

    for i, template in enumerate(_templates_of(spec, "compositePodGroupTemplates")):
        if not deep(template, 1):
            errors.append(
                fe.invalid(
                    f"spec.compositePodGroupTemplates[{i}]",
                    template.get("compositePodGroupTemplates"),
                    f"maximum template hierarchy depth is {MAX_TEMPLATE_DEPTH}",
                )
            )

    configurations: list[tuple[Any, Any]] = []

    def collect(template: JsonObject) -> None:
        configurations.append((template.get("priorityClassName") or "", template.get("priority")))
        for child in _templates_of(template, "compositePodGroupTemplates"):
            collect(child)
        for child in _templates_of(template, "podGroupTemplates"):
            configurations.append((child.get("priorityClassName") or "", child.get("priority")))

    top = [
        (t.get("priorityClassName") or "", t.get("priority"))
        for t in _templates_of(spec, "podGroupTemplates")
    ]
    if len(set(top)) > 1:
        errors.append(fe.invalid("spec", None, "detected multiple priority configurations"))
    else:
        configurations.extend(top[:1])
        for template in _templates_of(spec, "compositePodGroupTemplates"):
            collect(template)
        if len(set(configurations)) > 1:
            errors.append(
                fe.invalid(
                    "spec",
                    None,
                    "all priority and priorityClassName values must be identical, detected multiple values",
                )
            )

    def children(path: str, template: JsonObject) -> None:
        if not _templates_of(template, "podGroupTemplates") and not _templates_of(
            template, "compositePodGroupTemplates"
        ):
            errors.append(
                fe.invalid(
                    path,
                    template.get("name", ""),
                    "must have at least one child PodGroupTemplate or CompositePodGroupTemplate",
                )
            )
        for i, child in enumerate(_templates_of(template, "compositePodGroupTemplates")):
            children(f"{path}.compositePodGroupTemplates[{i}]", child)

    for i, template in enumerate(_templates_of(spec, "compositePodGroupTemplates")):
        children(f"spec.compositePodGroupTemplates[{i}]", template)
    return errors


def _add_finalizer(obj: JsonObject, finalizer: str) -> None:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)


def _drop_unless_used(spec: JsonObject, old_spec: Any, key: str, enabled: bool) -> None:
    """A strategy's ``dropDisabled...Fields``: a gated field is dropped unless the stored one uses it."""
    if not enabled and not _get(old_spec, key) and key in spec:
        del spec[key]


class PodGroupStrategy(Strategy):
    """pkg/registry/scheduling/podgroup/strategy.go on the v1beta1 shape: ``disruptionMode`` defaults to
    ``{single: {}}``, the protection finalizer is stamped at create, only ``gang.minCount`` is mutable, and
    ``/status`` holds conditions and the claims' names (entries of ``spec.resourceClaims``)."""

    drops_unknown_fields = True  # e.g. a topology entry's "mode": upstream's TopologyConstraint has key only

    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates
        self.rules = _Rules(gates)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        if spec.get("disruptionMode") is None:
            spec["disruptionMode"] = {"single": {}}
        old_spec = (old or {}).get("spec")
        _drop_unless_used(
            spec, old_spec, "schedulingConstraints", self.gates["TopologyAwareWorkloadScheduling"]
        )
        _drop_unless_used(spec, old_spec, "resourceClaims", self.gates["DRAWorkloadResourceClaims"])
        if old is None:
            obj["status"] = {}  # PrepareForCreate: status must not be set by the user on create
        status = obj.setdefault("status", {})
        if (
            isinstance(status, dict)
            and not self.gates["DRAWorkloadResourceClaims"]
            and not _get(old_spec, "resourceClaims")
        ):
            status.pop("resourceClaimStatuses", None)
        if old is None:
            _add_finalizer(obj, PODGROUP_PROTECTION_FINALIZER)

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec")
        if old is None:
            return validate_name(obj["metadata"].get("name")) + self.rules.pod_group_spec(spec, _UNSET)
        if ctx.subresource:
            return self._validate_status(obj.get("status") or {}, old.get("status") or {}, spec or {})
        return self.rules.pod_group_spec(spec, old.get("spec"))

    def _validate_status(self, status: JsonObject, old: JsonObject, spec: JsonObject) -> list[FieldError]:
        errors = self.rules.conditions("status.conditions", status.get("conditions"))
        entries = status.get("resourceClaimStatuses") or []
        if entries == (old.get("resourceClaimStatuses") or []):
            return errors
        if len(entries) > MAX_RESOURCE_CLAIMS:
            return [*errors, fe.too_many("status.resourceClaimStatuses", len(entries), MAX_RESOURCE_CLAIMS)]
        declared = {c.get("name") for c in spec.get("resourceClaims") or [] if isinstance(c, dict)}
        seen: set[Any] = set()
        for i, entry in enumerate(entries):
            where = f"status.resourceClaimStatuses[{i}]"
            name = _get(entry, "name")
            if name in seen:
                errors.append(fe.duplicate(where, entry))
            seen.add(name)
            errors += _long_name(f"{where}.resourceClaimName", _get(entry, "resourceClaimName"))
            if name not in declared:
                errors.append(
                    fe.invalid(
                        f"{where}.name", name, "must match the name of an entry in `spec.resourceClaims`"
                    )
                )
        return errors


class WorkloadStrategy(Strategy):
    """pkg/registry/scheduling/workload/strategy.go on the v1beta1 shape: exactly one of
    ``podGroupTemplates`` and ``compositePodGroupTemplates``, at most 8, none added or removed on update;
    a template's fields are immutable but for ``gang.minCount``/``minGroupCount``."""

    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates
        self.rules = _Rules(gates)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return
        old_spec = (old or {}).get("spec")
        old_templates = {_get(t, "name"): t for t in _templates_of(old_spec, "podGroupTemplates")}
        for template in _templates_of(spec, "podGroupTemplates"):
            previous = old_templates.get(template.get("name"))
            _drop_unless_used(
                template, previous, "schedulingConstraints", self.gates["TopologyAwareWorkloadScheduling"]
            )
            _drop_unless_used(template, previous, "resourceClaims", self.gates["DRAWorkloadResourceClaims"])

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec")
        if old is None:
            return validate_name(obj["metadata"].get("name")) + self.rules.workload_spec(spec, _UNSET)
        return self.rules.workload_spec(spec, old.get("spec"))


class CompositePodGroupStrategy(Strategy):
    """pkg/registry/scheduling/compositepodgroup/strategy.go (v1alpha3): ``workloadRef`` and
    ``schedulingPolicy`` (basic or ``gang: {minGroupCount}``) required, ``disruptionMode``,
    ``priorityClassName``, ``priority`` and ``preemptionPolicy`` as a PodGroup's, all immutable (the
    whole ``schedulingPolicy`` too, ``minGroupCount`` included); the CompositePodGroup protection
    finalizer is stamped at create; ``/status`` holds conditions."""

    def __init__(self, gates: FeatureGates) -> None:
        self.gates = gates
        self.rules = _Rules(gates)

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        old_spec = (old or {}).get("spec")
        _drop_unless_used(
            spec, old_spec, "schedulingConstraints", self.gates["TopologyAwareWorkloadScheduling"]
        )
        if old is None:
            obj["status"] = {}  # PrepareForCreate resets the status
            _add_finalizer(obj, COMPOSITE_PODGROUP_PROTECTION_FINALIZER)
        obj.setdefault("status", {})

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec")
        if old is None:
            return validate_name(obj["metadata"].get("name")) + self._spec(spec, _UNSET)
        if ctx.subresource:
            return self.rules.conditions("status.conditions", (obj.get("status") or {}).get("conditions"))
        return self._spec(spec, old.get("spec"))

    def _spec(self, spec: Any, old: Any) -> list[FieldError]:
        rules = self.rules
        errors = rules.parent("spec.parentCompositePodGroupName", spec, old)
        ref, old_ref = _get(spec, "workloadRef"), _sub(old, "workloadRef")
        if ref is None and not _unchanged(ref, old_ref):
            errors.append(fe.required("spec.workloadRef"))
        else:
            errors += rules.workload_ref("spec.workloadRef", ref, old_ref)
        policy, old_policy = _get(spec, "schedulingPolicy"), _sub(old, "schedulingPolicy")
        if policy is None and not _unchanged(policy, old_policy):
            errors.append(fe.invalid("spec.schedulingPolicy", "", "must specify one of: `basic`, `gang`"))
        elif old_policy is not _UNSET and policy != old_policy:
            # compositepodgroup/strategy_test.go's TestStrategyUpdate: a changed minGroupCount, or gang
            # turned basic, is one "field is immutable" error: the whole policy is immutable
            errors += _union("spec.schedulingPolicy", policy, old_policy, ("basic", "gang"))
            errors += _immutable("spec.schedulingPolicy", policy, old_policy)
        else:
            errors += rules.policy("spec.schedulingPolicy", policy, old_policy, "minGroupCount")
        errors += rules.constraints(
            "spec.schedulingConstraints",
            _get(spec, "schedulingConstraints"),
            _sub(old, "schedulingConstraints"),
        )
        errors += rules.disruption_mode(
            "spec.disruptionMode", _get(spec, "disruptionMode"), _sub(old, "disruptionMode"), False
        )
        return errors + rules.priority_fields("spec", spec, old)


def scheduling_137_types(gates: FeatureGates) -> list[ResourceType]:
    """The 1.37 Workload API the gates serve: v1beta1 podgroups (+status) and workloads with
    ``GenericWorkload``, v1alpha3 compositepodgroups (+status) with ``CompositePodGroup`` too."""
    if not gates["GenericWorkload"]:
        return []
    types = [
        ResourceType(
            GROUP,
            "v1beta1",
            "podgroups",
            "podgroup",
            "PodGroup",
            True,
            PodGroupStrategy(gates),
            subresources=("status",),
            returns_deleted_object=True,
            smp_lists={},
        ),
        ResourceType(
            GROUP,
            "v1beta1",
            "workloads",
            "workload",
            "Workload",
            True,
            WorkloadStrategy(gates),
            returns_deleted_object=True,
            smp_lists={},
        ),
    ]
    if gates["CompositePodGroup"]:
        types.append(
            ResourceType(
                GROUP,
                "v1alpha3",
                "compositepodgroups",
                "compositepodgroup",
                "CompositePodGroup",
                True,
                CompositePodGroupStrategy(gates),
                subresources=("status",),
                returns_deleted_object=True,
                smp_lists={},
            )
        )
    return types
