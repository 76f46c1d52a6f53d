"""Compute resources of the core API: resource names (``pkg/apis/core/helper``), a container's
``resources`` as ``ValidateResourceRequirements`` checks them, pod-level ``spec.resources``
(PodLevelResources: ``validatePodResources`` and the defaulting of ``SetDefaults_Pod``), and quantities as
Go prints them."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from lockstep.api.quantity import QuantityError, parse_quantity
from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import dns1123_label_errors, qualified_name_errors

JsonObject = dict[str, Any]

NATIVE_DOMAIN = "kubernetes.io/"
QUOTA_REQUESTS_PREFIX = "requests."
HUGE_PAGES_PREFIX = "hugepages-"
# sets.List(resourcehelper.SupportedPodLevelResources()): what a pod-level resource may be named.
SUPPORTED_POD_LEVEL_RESOURCES = ("cpu", HUGE_PAGES_PREFIX, "memory")
STANDARD_CONTAINER_RESOURCES = ("cpu", "memory", "ephemeral-storage")
# helper.standardResources: what an unprefixed resource name may be anywhere (quota included).
STANDARD_RESOURCES = frozenset(
    {
        "cpu",
        "memory",
        "ephemeral-storage",
        "requests.cpu",
        "requests.memory",
        "requests.ephemeral-storage",
        "limits.cpu",
        "limits.memory",
        "limits.ephemeral-storage",
        "pods",
        "quota",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "storage",
        "requests.storage",
        "services.nodeports",
        "services.loadbalancers",
    }
)
INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "quota",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)


def is_native_resource(name: str) -> bool:
    """In the kubernetes.io domain, explicitly or by having none. The implicit DRA names
    ``deviceclass.resource.kubernetes.io/<class>`` are native by this rule, so the extended-resource
    rules below do not apply to them (as upstream's validation has it)."""
    return "/" not in name or NATIVE_DOMAIN in name


@functools.lru_cache(maxsize=1024)
def is_extended_resource_name(name: str) -> bool:
    """``IsExtendedResourceName``: domain-prefixed outside kubernetes.io, and a valid quota name."""
    if is_native_resource(name) or name.startswith(QUOTA_REQUESTS_PREFIX):
        return False
    return not qualified_name_errors("", QUOTA_REQUESTS_PREFIX + name)


def _is_huge_pages(name: str) -> bool:
    return name.startswith(HUGE_PAGES_PREFIX)


def _overcommit_allowed(name: str) -> bool:
    return is_native_resource(name) and not _is_huge_pages(name)


def _is_integer_resource(name: str) -> bool:
    return name in INTEGER_RESOURCES or is_extended_resource_name(name)


# ---------------------------------------------------------------- quantities as Go prints them

_SPELLING = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?(.*)$")
_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_SI_OF_EXPONENT = {exponent: suffix for suffix, exponent in _DECIMAL_SI.items()}
_INT64_MAX = 2**63 - 1
_MILLI = Fraction(1, 1000)
_NANO = Fraction(1, 10**9)


def _round_up(value: Fraction, unit: Fraction) -> Fraction:
    """Round away from zero to a multiple of ``unit`` (inf.RoundUp)."""
    steps = abs(value) / unit
    whole = -(-steps.numerator // steps.denominator)
    return (whole if value >= 0 else -whole) * unit


def _decimal_text(value: Fraction, exponent_form: bool) -> str:
    """AsCanonicalBytes: the mantissa without trailing zeros, the exponent lowered to a multiple of 3."""
    exponent = 0
    while value.denominator != 1:
        value *= 10
        exponent -= 1
    mantissa = int(value)
    while mantissa and mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    while exponent % 3:
        mantissa *= 10
        exponent -= 1
    if exponent_form or exponent not in _SI_OF_EXPONENT:
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return f"{mantissa}{_SI_OF_EXPONENT[exponent]}"


def _canonical(value: Fraction, form: str) -> str:
    """``Quantity.String()`` of a quantity without a remembered spelling."""
    if value == 0:
        return "0"
    if form == "BinarySI" and abs(value) >= 1024 and value.denominator == 1:
        mantissa, power = int(value), 0
        while mantissa % 1024 == 0:
            mantissa //= 1024
            power += 10
        suffix = next((s for s, p in _BINARY_SI.items() if p == power), "")
        return f"{mantissa}{suffix}"
    return _decimal_text(value, form == "DecimalExponent")


def go_quantity_text(value: Any) -> str:
    """The text of a container resource quantity once kube-apiserver decoded it and rounded it up to
    milli-units (``SetDefaults_ResourceList``): the spelling sent when Go keeps it (a canonical one),
    else the canonical form (``0.5`` is ``500m``, ``1024Mi`` is ``1Gi``). Messages quote this text."""
    text = value if isinstance(value, str) else str(value)
    exact = parse_quantity(text)
    if text == "0":
        return text
    match = _SPELLING.match(text)
    assert match is not None  # parse_quantity accepted it
    _, num, denom, suffix = match.groups()
    denom = denom or ""
    if suffix in _DECIMAL_SI:
        form, exponent, binary = "DecimalSI", _DECIMAL_SI[suffix], False
    elif suffix in _BINARY_SI:
        form, exponent, binary = "BinarySI", _BINARY_SI[suffix], True
    else:
        form, exponent, binary = "DecimalExponent", int(suffix[1:]), False
    kept = ""  # the spelling ParseQuantity remembers (its int64 fast path, canonical input only)
    scale = 0
    if not binary and 18 - len(num + denom) >= 0 and exponent - len(denom) >= -9:
        scale = exponent - len(denom)
        shifted = num + denom
        if scale % 3 == 0 and not shifted.endswith("000") and shifted[:1] != "0":
            kept = text
    elif binary and not denom and 15 - len(num) - int(exponent * 3 / 10) - 1 >= 0:
        whole = int(num or "0")
        if whole << exponent <= _INT64_MAX and whole & 7:
            kept = text
    else:
        # the inf.Dec path rounds to nano-units, and keeps no spelling
        exact = _round_up(exact, _NANO)
        if binary:
            exact = min(exact, Fraction(_INT64_MAX))  # ParseQuantity's cap on binary amounts
            if 0 < abs(exact) < 1:
                form = "DecimalSI"
        scale = -9
    if scale < -3:
        kept, exact = "", _round_up(exact, _MILLI)
    return kept or _canonical(exact, form)


def stored_quantity(raw: Any) -> Any:
    """A container resource quantity as kube-apiserver stores and answers it (``SetDefaults_ResourceList``
    then the JSON encoder): always a string, ``1000m`` as ``1``, ``0.5`` as ``500m``. A value that is
    not a quantity is left for validation to refuse."""
    try:
        return _stored_quantity(raw)
    except (QuantityError, TypeError, ValueError):
        return raw


@functools.lru_cache(maxsize=4096, typed=True)
def _stored_quantity(raw: Any) -> str:
    return go_quantity_text(raw)


# ---------------------------------------------------------------- ValidateResourceRequirements


@functools.lru_cache(maxsize=4096)
def _resource_name_errors(field: str, name: str) -> tuple[FieldError, ...]:
    """``validateContainerResourceName``."""
    errors = qualified_name_errors(field, name)
    if errors:
        return tuple(errors)
    if "/" not in name:
        quota_huge_pages = _is_huge_pages(name.removeprefix(QUOTA_REQUESTS_PREFIX))
        if name not in STANDARD_RESOURCES and not quota_huge_pages:
            errors.append(fe.invalid(field, name, "must be a standard resource type or fully qualified"))
        if name not in STANDARD_CONTAINER_RESOURCES and not _is_huge_pages(name):
            errors.append(fe.invalid(field, name, "must be a standard resource for containers"))
    elif not is_native_resource(name) and not is_extended_resource_name(name):
        errors.append(fe.invalid(field, name, "doesn't follow extended resource name standard"))
    return tuple(errors)


@functools.lru_cache(maxsize=4096, typed=True)
def _defaulted_quantity(raw: Any) -> tuple[Fraction, str]:
    """A quantity's value once defaulting rounded it up to milli-units, and its text as Go prints it.
    Pods repeat a few spellings: each is worked out once."""
    return _round_up(parse_quantity(raw), _MILLI), go_quantity_text(raw)


def _huge_pages_errors(field: str, name: str, value: Fraction, text: str) -> list[FieldError]:
    """``validateResourceQuantityHugePageValue``: a whole number of pages."""
    try:
        page = parse_quantity(name.removeprefix(HUGE_PAGES_PREFIX))
    except QuantityError:
        page = Fraction(0)
    whole = int(value)
    if page > 0 and page.denominator == 1 and whole % int(page) == 0:
        return []
    return [fe.invalid(field, text, f"{text} is not positive integer multiple of {name}")]


def _quantity_errors(field: str, name: str, value: Fraction, text: str) -> list[FieldError]:
    """``ValidateResourceQuantityValue`` and the huge pages rule, for a value rounded to milli-units."""
    errors = []
    if value < 0:
        errors.append(fe.invalid(field, text, "must be greater than or equal to 0"))
    if _is_integer_resource(name) and value.denominator != 1:
        errors.append(fe.invalid(field, text, "must be an integer"))
    if _is_huge_pages(name):
        errors.extend(_huge_pages_errors(field, name, value, text))
    return errors


def _resource_list(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _claim_reference_errors(claims: Any, pod_claim_names: frozenset[str], path: str) -> list[FieldError]:
    """``validateResourceClaimNames``: each entry names one of the pod's ``spec.resourceClaims``
    (and optionally one of its requests), once."""
    errors: list[FieldError] = []
    seen: set[str] = set()
    for i, claim in enumerate(claims if isinstance(claims, list) else []):
        item = f"{path}[{i}]"
        claim = claim if isinstance(claim, dict) else {}
        name = str(claim.get("name") or "")
        if not name:
            errors.append(fe.required(item))
            continue
        key = name
        request = str(claim.get("request") or "")
        if request:
            errors.extend(dns1123_label_errors(f"{item}.request", request))
            key = f"{name}/{request}"
        if key in seen:
            errors.append(fe.duplicate(item, key))
        seen.add(key)
        if name not in pod_claim_names:
            known = ": " + ", ".join(sorted(pod_claim_names)) if pod_claim_names else " which is empty"
            errors.append(
                fe.value_not_found(item, name, "must be one of the names in pod.spec.resourceClaims" + known)
            )
    return errors


NameCheck = Callable[[str, str], tuple[FieldError, ...]]


def validate_resource_requirements(
    resources: Any,
    path: str,
    pod_claim_names: frozenset[str] = frozenset(),
    name_errors: NameCheck = _resource_name_errors,
) -> list[FieldError]:
    """``validateResourceRequirements`` for a container's ``resources`` (requests already defaulted
    from limits), or with ``_pod_resource_name_errors`` for the pod's: names, quantities, requests
    within limits, and for resources that cannot be overcommitted (extended resources, huge pages) a
    limit equal to the request; ``claims`` name entries of the pod's ``spec.resourceClaims``
    (``pod_claim_names``)."""
    if not isinstance(resources, dict):
        return []
    limits = _resource_list(resources.get("limits"))
    requests = _resource_list(resources.get("requests"))
    errors: list[FieldError] = []
    parsed: dict[tuple[str, str], tuple[Fraction, str]] = {}
    for section, amounts in (("limits", limits), ("requests", requests)):
        for name, raw in sorted(amounts.items()):
            try:
                parsed[section, name] = _defaulted_quantity(raw)
            except (QuantityError, TypeError):
                continue  # the decoder answers 400 for it (check_pod_quantities)
    uses_cpu_or_memory = any(name in ("cpu", "memory") for section in (limits, requests) for name in section)
    uses_huge_pages = False
    for name in sorted(limits):
        if ("limits", name) not in parsed:
            continue
        value, text = parsed["limits", name]
        field = f"{path}.limits[{name}]"
        errors.extend(name_errors(field, name))
        errors.extend(_quantity_errors(field, name, value, text))
        uses_huge_pages = uses_huge_pages or _is_huge_pages(name)
    for name in sorted(requests):
        if ("requests", name) not in parsed:
            continue
        value, text = parsed["requests", name]
        field = f"{path}.requests[{name}]"
        errors.extend(name_errors(field, name))
        errors.extend(_quantity_errors(field, name, value, text))
        limit = parsed.get(("limits", name))
        if limit is not None:
            limit_value, limit_text = limit
            if value != limit_value and not _overcommit_allowed(name):
                detail = f"must be equal to {name} limit of {limit_text}"
                errors.append(fe.invalid(f"{path}.requests", text, detail))
            elif value > limit_value:
                detail = f"must be less than or equal to {name} limit of {limit_text}"
                errors.append(fe.invalid(f"{path}.requests", text, detail))
        elif not _overcommit_allowed(name):
            errors.append(fe.required(f"{path}.limits", "Limit must be set for non overcommitable resources"))
        uses_huge_pages = uses_huge_pages or _is_huge_pages(name)
    if uses_huge_pages and not uses_cpu_or_memory:
        errors.append(fe.forbidden(path, "HugePages require cpu or memory"))
    errors.extend(_claim_reference_errors(resources.get("claims"), pod_claim_names, f"{path}.claims"))
    return errors


# ---------------------------------------------------------------- pod-level resources (PodLevelResources)


def is_supported_pod_level_resource(name: str) -> bool:
    """``resourcehelper.IsSupportedPodLevelResource``: cpu, memory and huge pages."""
    return name in ("cpu", "memory") or _is_huge_pages(name)


@functools.lru_cache(maxsize=1024)
def _pod_resource_name_errors(field: str, name: str) -> tuple[FieldError, ...]:
    """``validatePodResourceName``: ``validateResourceName``, then one of the supported names."""
    errors = qualified_name_errors(field, name)
    if errors:
        return tuple(errors)
    quota_huge_pages = _is_huge_pages(name.removeprefix(QUOTA_REQUESTS_PREFIX))
    if "/" not in name and name not in STANDARD_RESOURCES and not quota_huge_pages:
        return (fe.invalid(field, name, "must be a standard resource type or fully qualified"),)
    if not is_supported_pod_level_resource(name):
        return (fe.not_supported(field, name, list(SUPPORTED_POD_LEVEL_RESOURCES)),)
    return ()


@dataclass(frozen=True, slots=True)
class Amount:
    """A defaulted quantity: its value, its text as Go prints it, and the format a sum keeps."""

    value: Fraction
    text: str
    form: str

    def plus(self, other: Amount) -> Amount:
        """``Quantity.Add``: the sum keeps this one's format (the other's if this one is zero) and
        forgets the spelling."""
        form = self.form if self.value else other.form
        total = self.value + other.value
        return Amount(total, _canonical(total, form), form)


def _form_of(text: str) -> str:
    """The format Go remembers for a quantity it printed as ``text``."""
    match = _SPELLING.match(text)
    suffix = match.group(4) if match else ""
    if suffix in _BINARY_SI:
        return "BinarySI"
    return "DecimalSI" if suffix in _DECIMAL_SI else "DecimalExponent"


def resource_amounts(value: Any) -> dict[str, Amount]:
    """A ResourceList's quantities that parse (the decoder refuses the others: ``check_pod_quantities``)."""
    amounts: dict[str, Amount] = {}
    for name, raw in (value if isinstance(value, dict) else {}).items():
        try:
            number, text = _defaulted_quantity(raw)
        except (QuantityError, TypeError, ValueError):
            continue
        amounts[name] = Amount(number, text, _form_of(text))
    return amounts


def _add_amounts(total: dict[str, Amount], amounts: Mapping[str, Amount]) -> None:
    for name, amount in amounts.items():
        total[name] = total[name].plus(amount) if name in total else amount


def _max_amounts(peak: dict[str, Amount], amounts: Mapping[str, Amount]) -> None:
    for name, amount in amounts.items():
        if name not in peak or amount.value > peak[name].value:
            peak[name] = amount


def _containers(spec: Mapping[str, Any], list_name: str) -> Iterator[dict[str, Any]]:
    containers = spec.get(list_name)
    for container in containers if isinstance(containers, list) else ():
        if isinstance(container, dict):
            yield container


def _container_amounts(container: Mapping[str, Any], section: str) -> dict[str, Amount]:
    resources = container.get("resources")
    return resource_amounts(resources.get(section) if isinstance(resources, dict) else None)


def aggregate_container_resources(spec: Mapping[str, Any], section: str) -> dict[str, Amount]:
    """``resourcehelper.AggregateContainerRequests`` (``section="requests"``) or
    ``AggregateContainerLimits`` (``"limits"``): the app containers and the sidecars summed, and at
    least the largest init container plus the sidecars started before it."""
    total: dict[str, Amount] = {}
    for container in _containers(spec, "containers"):
        _add_amounts(total, _container_amounts(container, section))
    sidecars: dict[str, Amount] = {}
    init_peak: dict[str, Amount] = {}
    for container in _containers(spec, "initContainers"):
        own = _container_amounts(container, section)
        if container.get("restartPolicy") == "Always":
            _add_amounts(total, own)
            _add_amounts(sidecars, own)
            _max_amounts(init_peak, sidecars)
        else:
            running = dict(own)
            _add_amounts(running, sidecars)
            _max_amounts(init_peak, running)
    _max_amounts(total, init_peak)
    return total


def pod_level_resources_in_use(spec: Any) -> bool:
    """``podLevelResourcesInUse``: the pod sets pod-level requests or limits."""
    resources = spec.get("resources") if isinstance(spec, dict) else None
    return isinstance(resources, dict) and bool(resources.get("requests") or resources.get("limits"))


def default_pod_level_resources(spec: dict[str, Any]) -> None:
    """``SetDefaults_Pod`` with PodLevelResources, after the containers' requests were defaulted from
    their limits: ``defaultHugePagePodLimits`` (a huge page size the containers limit and the pod neither
    limits nor requests is limited to their aggregate limit), then ``defaultPodRequests`` (with pod-level
    limits, a missing cpu or memory request is the containers' aggregate request, and any other missing
    supported request is its pod-level limit). Pod-level limits are not defaulted from the containers'
    cpu and memory limits in 1.36 (that came with 1.37)."""
    resources = spec.get("resources")
    if not isinstance(resources, dict):
        return
    if any(not isinstance(resources.get(section), dict | None) for section in ("limits", "requests")):
        return  # not a ResourceList: the decoder refuses it
    limits = _resource_list(resources.get("limits"))
    requests = _resource_list(resources.get("requests"))
    if limits or requests:
        for name, total in aggregate_container_resources(spec, "limits").items():
            if _is_huge_pages(name) and name not in requests:
                limits.setdefault(name, total.text)
        if limits:
            resources["limits"] = limits
    if not limits:
        return
    for name, total in aggregate_container_resources(spec, "requests").items():
        if name not in requests and name in ("cpu", "memory"):
            requests[name] = total.text
    for name, limit in limits.items():
        if name not in requests and is_supported_pod_level_resource(name):
            requests[name] = limit
    if requests:
        resources["requests"] = requests


def _pod_resource_consistency_errors(
    spec: Mapping[str, Any], resources: Mapping[str, Any], path: str
) -> list[FieldError]:
    """``validatePodResourceConsistency``: a pod-level request at least the containers' aggregate
    request, a pod-level huge pages limit at least their aggregate limit, and no app container's limit
    above the pod-level limit (upstream builds that path on ``spec.resources``:
    ``spec.resources.containers[0][cpu].limits``)."""
    pod_requests = resource_amounts(resources.get("requests"))
    pod_limits = resource_amounts(resources.get("limits"))
    errors: list[FieldError] = []
    for name, total in sorted(aggregate_container_resources(spec, "requests").items()):
        request = pod_requests.get(name)
        if request is not None and total.value > request.value:
            detail = f"must be greater than or equal to aggregate container requests of {total.text}"
            errors.append(fe.invalid(f"{path}.requests[{name}]", request.text, detail))
    for name, total in sorted(aggregate_container_resources(spec, "limits").items()):
        limit = pod_limits.get(name)
        if _is_huge_pages(name) and limit is not None and total.value > limit.value:
            detail = f"must be greater than or equal to aggregate container limits of {total.text}"
            errors.append(fe.invalid(f"{path}.limits[{name}]", limit.text, detail))
    for index, container in enumerate(spec.get("containers") or ()):
        if not isinstance(container, dict):
            continue
        for name, own in sorted(_container_amounts(container, "limits").items()):
            limit = pod_limits.get(name)
            if limit is not None and own.value > limit.value:
                detail = f"must be less than or equal to pod limits of {limit.text}"
                errors.append(fe.invalid(f"{path}.containers[{index}][{name}].limits", own.text, detail))
    return errors


def validate_pod_resources(spec: Mapping[str, Any], pod_claim_names: frozenset[str]) -> list[FieldError]:
    """``validatePodResources``: pod-level ``spec.resources`` (after defaulting) as kube-apiserver 1.36
    validates them with PodLevelResources on."""
    resources = spec.get("resources")
    if not isinstance(resources, dict):
        return []
    path = "spec.resources"
    os = spec.get("os")
    if isinstance(os, dict) and os.get("name") == "windows":
        # upstream gives no further detail when the field may not be set at all
        return [fe.forbidden(path, "may not be set for a windows pod")]
    errors: list[FieldError] = []
    if resources.get("claims") is not None:
        errors.append(fe.forbidden(f"{path}.claims", "claims may not be set for Resources at pod-level"))
    errors.extend(validate_resource_requirements(resources, path, pod_claim_names, _pod_resource_name_errors))
    errors.extend(_pod_resource_consistency_errors(spec, resources, path))
    return errors


def positive_cpu_memory(value: Any) -> dict[str, Fraction]:
    """A ResourceList's cpu and memory above zero (what ``ComputePodQOS`` counts)."""
    return {
        name: amount.value
        for name, amount in resource_amounts(value).items()
        if name in ("cpu", "memory") and amount.value > 0
    }
