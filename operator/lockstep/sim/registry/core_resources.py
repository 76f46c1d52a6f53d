"""Compute resources of the core API: resource names (``pkg/apis/core/helper``), a container's
``resources`` as ``ValidateResourceRequirements`` checks them, and quantities as Go prints them."""

from __future__ import annotations

import functools
import re
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


def validate_resource_requirements(
    resources: Any, path: str, pod_claim_names: frozenset[str] = frozenset()
) -> list[FieldError]:
    """``ValidateResourceRequirements`` for a container's ``resources`` (requests already defaulted
    from limits): names, quantities, requests within limits, and for resources that cannot be
    overcommitted (extended resources, huge pages) a limit equal to the request; ``claims`` name
    entries of the pod's ``spec.resourceClaims`` (``pod_claim_names``)."""
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
        errors.extend(_resource_name_errors(field, name))
        errors.extend(_quantity_errors(field, name, value, text))
        uses_huge_pages = uses_huge_pages or _is_huge_pages(name)
    for name in sorted(requests):
        if ("requests", name) not in parsed:
            continue
        value, text = parsed["requests", name]
        field = f"{path}.requests[{name}]"
        errors.extend(_resource_name_errors(field, name))
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
