"""policy/v1: PodDisruptionBudgets, and the pods/eviction subresource that honours them (kube-apiserver's
``pkg/registry/policy/poddisruptionbudget`` and ``pkg/registry/core/pod/storage/eviction.go``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import ApiError, FieldError, bad_request
from lockstep.sim.objectmeta import now_rfc3339
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "policy"
PDB_STORAGE = f"{GROUP}/poddisruptionbudgets"
UNHEALTHY_POD_EVICTION_POLICIES = ("AlwaysAllow", "IfHealthyBudget")
STATUS_COUNTS = ("disruptionsAllowed", "currentHealthy", "desiredHealthy", "expectedPods")
EVICTION_CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "EvictionByEvictionAPI",
    "message": "Eviction API: evicting",
}
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)
PERCENT_MESSAGE = (
    "a valid percent string must be a numeric string followed by an ending '%' "
    "(e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')"
)
VIOLATES_BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector over ``labels``; in policy/v1 an empty selector matches every pod."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for requirement in selector.get("matchExpressions") or []:
        key, operator = requirement.get("key"), requirement.get("operator")
        values = requirement.get("values") or []
        present = key in labels
        if operator == "In" and not (present and labels[key] in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


def scaled_value(value: int | str, total: int) -> int:
    """An IntOrString budget against ``total`` pods (percentages rounded up, as the disruption controller)."""
    if isinstance(value, str):
        return math.ceil(int(value.rstrip("%")) * total / 100)
    return value


def _validate_int_or_percent(path: str, value: Any) -> list[FieldError]:
    if isinstance(value, bool) or not isinstance(value, int | str):
        return [fe.invalid(path, value, "must be an integer or percentage (e.g '5%')")]
    if isinstance(value, str):
        digits = value[:-1]
        if not value.endswith("%") or not digits.isdigit():
            return [fe.invalid(path, value, PERCENT_MESSAGE)]
        if int(digits) > 100:
            return [fe.invalid(path, value, "must not be greater than 100%")]
        return []
    if value < 0:
        return [fe.invalid(path, value, "must be greater than or equal to 0")]
    return []


class PodDisruptionBudgetStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        if old is None:
            obj["status"] = {}  # PrepareForCreate: the disruption controller owns the status

    def normalize(self, rt: ResourceType, obj: JsonObject) -> None:
        status = obj.setdefault("status", {})
        if isinstance(status, dict):
            for count in STATUS_COUNTS:
                status.setdefault(count, 0)
            if not status.get("disruptedPods"):
                status.pop("disruptedPods", None)  # omitempty

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec") or {}
        errors: list[FieldError] = []
        min_available, max_unavailable = spec.get("minAvailable"), spec.get("maxUnavailable")
        if min_available is not None and max_unavailable is not None:
            errors.append(fe.invalid("spec", spec, "minAvailable and maxUnavailable cannot be both set"))
        if min_available is not None:
            errors.extend(_validate_int_or_percent("spec.minAvailable", min_available))
        if max_unavailable is not None:
            errors.extend(_validate_int_or_percent("spec.maxUnavailable", max_unavailable))
        policy = spec.get("unhealthyPodEvictionPolicy")
        if policy is not None and policy not in UNHEALTHY_POD_EVICTION_POLICIES:
            errors.append(
                fe.not_supported(
                    "spec.unhealthyPodEvictionPolicy", policy, list(UNHEALTHY_POD_EVICTION_POLICIES)
                )
            )
        return errors


def policy_types() -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1",
            "poddisruptionbudgets",
            "poddisruptionbudget",
            "PodDisruptionBudget",
            True,
            PodDisruptionBudgetStrategy(),
            short_names=("pdb",),
            subresources=("status",),
            has_generation=True,
            smp_lists={("status", "conditions"): "type"},
        )
    ]


# ---------------------------------------------------------------- pods/eviction


def pod_is_ready(pod: JsonObject) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _too_many_requests(cause: str, retry_after: int) -> ApiError:
    details: JsonObject = {"causes": [{"reason": "DisruptionBudget", "message": cause}]}
    headers: dict[str, str] = {}
    if retry_after:
        details["retryAfterSeconds"] = retry_after
        headers["Retry-After"] = str(retry_after)
    return ApiError(429, "TooManyRequests", VIOLATES_BUDGET, details, headers=headers)


def evict(
    pod: JsonObject,
    eviction: Any,
    budgets: Iterable[JsonObject],
    write_budget_status: Callable[[JsonObject, JsonObject], None],
    mark_and_delete: Callable[[JsonObject, JsonObject], None],
) -> None:
    """Evict ``pod`` as the eviction subresource does, or raise the API's refusal.

    ``write_budget_status(budget, status)`` stores a PDB's new status (guarded by its
    resourceVersion); ``mark_and_delete(condition, delete_options)`` adds the DisruptionTarget
    condition to the pod and deletes it."""
    if not isinstance(eviction, dict):
        raise bad_request("an Eviction must be a JSON object")
    name = pod["metadata"]["name"]
    requested = (eviction.get("metadata") or {}).get("name")
    if requested and requested != name:
        raise bad_request("name in URL does not match name in Eviction object")
    options = eviction.get("deleteOptions") or {}
    if not isinstance(options, dict):
        raise bad_request("deleteOptions must be an object")
    phase = (pod.get("status") or {}).get("phase")
    if phase in ("Succeeded", "Failed", "Pending") or pod["metadata"].get("deletionTimestamp"):
        mark_and_delete(EVICTION_CONDITION, options)  # nothing a budget protects
        return
    labels = pod["metadata"].get("labels") or {}
    matching = [b for b in budgets if selector_matches((b.get("spec") or {}).get("selector"), labels)]
    if len(matching) > 1:
        # kube-apiserver's own answer (an InternalError) for a pod under several budgets
        raise ApiError(
            500,
            None,
            "This pod has more than one PodDisruptionBudget, "
            "which the eviction subresource does not support.",
        )
    if not matching:
        mark_and_delete(EVICTION_CONDITION, options)
        return
    budget = matching[0]
    spec, status = budget.get("spec") or {}, dict(budget.get("status") or {})
    if not pod_is_ready(pod):
        policy = spec.get("unhealthyPodEvictionPolicy") or "IfHealthyBudget"
        healthy_enough = status.get("currentHealthy", 0) >= status.get("desiredHealthy", 0) > 0
        if policy == "AlwaysAllow" or healthy_enough:
            mark_and_delete(EVICTION_CONDITION, options)
            return
    budget_name = budget["metadata"]["name"]
    if int(status.get("observedGeneration") or 0) < int(budget["metadata"].get("generation") or 1):
        raise _too_many_requests(
            f"The disruption budget {budget_name} is still being processed by the server.", 10
        )
    if int(status.get("disruptionsAllowed") or 0) <= 0:
        raise _too_many_requests(
            f"The disruption budget {budget_name} needs {status.get('desiredHealthy', 0)} healthy pods "
            f"and has {status.get('currentHealthy', 0)} currently",
            0,
        )
    status["disruptionsAllowed"] = int(status["disruptionsAllowed"]) - 1
    status["disruptedPods"] = {**(status.get("disruptedPods") or {}), name: now_rfc3339()}
    write_budget_status(budget, status)
    mark_and_delete(EVICTION_CONDITION, options)
