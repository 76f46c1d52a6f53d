"""Consumable capacity (DRAConsumableCapacity): what a request consumes of a device's capacities.

Follows upstream's ``consumable_capacity.go``: a request names capacities (unqualified names mean the
device's driver as domain); every capacity of the device is consumed, by the requested amount rounded
up by the capacity's ``requestPolicy`` (``validRange`` min and step, or the next of ``validValues``),
or, when the request does not name it, by the policy's ``default`` or else the whole capacity. An
amount the policy does not allow (above ``validRange.max``, off the step, not a valid value) or a
capacity the device lacks makes the device unusable for the request. Amounts are exact fractions.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from lockstep.api.resource import CapacityRequestPolicy, DeviceCapacity
from lockstep.dra.k8s_types import parse_quantity

Consumption = dict[str, Fraction]  # the device's capacity name -> amount


def _value(text: str | None) -> Fraction | None:
    return None if text is None else parse_quantity(text).value


def _device_name(request_name: str, driver: str, capacity: Mapping[str, DeviceCapacity]) -> str | None:
    """The device's spelling of a requested capacity name (upstream resolveCapacityName)."""
    if request_name in capacity:
        return request_name
    domain, slash, identifier = request_name.partition("/")
    if slash:
        return identifier if domain == driver and identifier in capacity else None
    qualified = f"{driver}/{request_name}"
    return qualified if qualified in capacity else None


def _rounded(requested: Fraction, policy: CapacityRequestPolicy | None) -> Fraction:
    if policy is None:
        return requested
    valid_range = policy.valid_range
    if valid_range is not None:
        minimum = parse_quantity(valid_range.min).value
        if requested < minimum:
            return minimum
        if valid_range.step is None:
            return requested
        step = parse_quantity(valid_range.step).value
        steps = -((minimum - requested) // step)  # ceil((requested - minimum) / step)
        return minimum + step * steps
    for valid in policy.valid_values or ():
        value = parse_quantity(valid).value
        if requested <= value:
            return value
    return requested


def _violates(amount: Fraction, policy: CapacityRequestPolicy | None) -> bool:
    if policy is None or (policy.default is not None and amount == _value(policy.default)):
        return False
    valid_range = policy.valid_range
    if valid_range is not None:
        maximum = _value(valid_range.max)
        if maximum is not None and amount > maximum:
            return True
        if valid_range.step is not None:
            minimum, step = parse_quantity(valid_range.min).value, parse_quantity(valid_range.step).value
            return (amount - minimum) % step != 0
        return False
    if policy.valid_values:
        return all(amount != parse_quantity(v).value for v in policy.valid_values)
    return False


def consumption(
    requests: Mapping[str, Fraction], driver: str, capacity: Mapping[str, DeviceCapacity]
) -> Consumption | None:
    """What the request consumes of each capacity of the device, or None when the device cannot serve
    it (a requested capacity it lacks, an amount its policy forbids or above the capacity)."""
    resolved: dict[str, Fraction] = {}
    for name, amount in requests.items():
        device_name = _device_name(name, driver, capacity)
        if device_name is None:
            return None
        resolved[device_name] = amount
    consumed: Consumption = {}
    for name, published in capacity.items():
        policy = published.request_policy
        requested = resolved.get(name)
        if requested is None:
            default = policy.default if policy is not None else None
            amount = parse_quantity(default if default is not None else published.value).value
        else:
            amount = _rounded(requested, policy)
        if _violates(amount, policy) or amount > published.quantity.value:
            return None
        consumed[name] = amount
    return consumed


def fits(
    consumed: Consumption, capacity: Mapping[str, DeviceCapacity], *already: Mapping[str, Fraction]
) -> bool:
    """Whether ``consumed`` fits on top of what ``already`` holds, for every capacity."""
    return all(
        amount + sum(used.get(name, Fraction(0)) for used in already) <= capacity[name].quantity.value
        for name, amount in consumed.items()
    )


def quantity_text(amount: Fraction) -> str:
    """An amount as a Quantity string: the largest decimal suffix that keeps it exact."""
    if amount.denominator != 1:
        milli = amount * 1000
        return f"{int(milli)}m" if milli.denominator == 1 else str(float(amount))
    value = int(amount)
    for suffix, power in (("E", 18), ("P", 15), ("T", 12), ("G", 9), ("M", 6), ("k", 3)):
        if value and value % 10**power == 0:
            return f"{value // 10**power}{suffix}"
    for suffix, power in (("Ei", 60), ("Pi", 50), ("Ti", 40), ("Gi", 30), ("Mi", 20), ("Ki", 10)):
        if value and value % (1 << power) == 0:
            return f"{value >> power}{suffix}"
    return str(value)


def consumed_texts(
    consumed: Consumption, requests: Mapping[str, str], driver: str, capacity: Mapping[str, DeviceCapacity]
) -> dict[str, str]:
    """``consumedCapacity`` of an allocation result: each amount in the spelling the request, the
    policy default or the published capacity used for it, else a canonical one."""
    spellings: dict[tuple[str, Fraction], str] = {}
    for name, published in capacity.items():
        spellings[(name, published.quantity.value)] = published.value
        policy = published.request_policy
        if policy is not None and policy.default is not None:
            spellings[(name, parse_quantity(policy.default).value)] = policy.default
    for name, text in requests.items():
        device_name = _device_name(name, driver, capacity)
        if device_name is not None:
            spellings[(device_name, parse_quantity(text).value)] = text
    return {name: spellings.get((name, amount)) or quantity_text(amount) for name, amount in consumed.items()}
