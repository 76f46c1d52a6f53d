"""Fault injection and request counters for tests and benchmarks."""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from lockstep.sim.errors import ApiError

FAILURE_STATUSES = (409, 429, 500)


@dataclass
class FaultRule:
    """Requests matching every set filter get ``latency`` seconds of delay (or a uniform draw from
    ``latency`` to ``latency_max``) and, with ``status``, fail with that code: for each match with
    ``probability``, or only for the next ``count`` matches."""

    verb: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    status: int | None = None
    probability: float = 1.0
    count: int | None = None
    latency: float = 0.0
    latency_max: float | None = None
    retry_after_seconds: int = 1
    id: int = field(default=0, compare=False)

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in FAILURE_STATUSES:
            raise ValueError(f"FaultRule.status must be one of {FAILURE_STATUSES}, got {self.status}")
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"FaultRule.probability must be within [0, 1], got {self.probability}")
        if self.count is not None and self.count < 0:
            raise ValueError(f"FaultRule.count must not be negative, got {self.count}")
        if self.latency < 0 or (self.latency_max is not None and self.latency_max < self.latency):
            raise ValueError("FaultRule.latency must be >= 0 and latency_max >= latency")

    @classmethod
    def from_json(cls, data: Any) -> FaultRule:
        if not isinstance(data, dict):
            raise ValueError("a fault rule must be a JSON object")
        known = set(cls.__dataclass_fields__) - {"id"}
        unknown = sorted(set(data) - known - {"action"})
        if unknown:
            raise ValueError(f"unknown fault rule field(s): {', '.join(unknown)}")
        return cls(**{k: v for k, v in data.items() if k in known})

    def matches(self, verb: str, resource: str, subresource: str, namespace: str, name: str) -> bool:
        return (
            (self.verb is None or self.verb == verb)
            and (self.resource is None or self.resource == resource)
            and (self.subresource is None or self.subresource == subresource)
            and (self.namespace is None or self.namespace == namespace)
            and (self.name is None or self.name == name)
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def failure(rule: FaultRule, resource: str, name: str) -> ApiError:
    if rule.status == 429:
        return ApiError(
            429,
            "TooManyRequests",
            "Too many requests, please try again later.",
            {"retryAfterSeconds": rule.retry_after_seconds},
            headers={"Retry-After": str(rule.retry_after_seconds)},
        )
    if rule.status == 409:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {resource} "{name}": injected conflict',
            {"name": name, "kind": resource},
        )
    return ApiError(500, "InternalError", "Internal error occurred: injected fault", {})


class Faults:
    """The active fault rules. Decides, per request, the delay and an optional injected error."""

    def __init__(self) -> None:
        self.rules: list[FaultRule] = []
        self._next_id = 1
        self.rng = random.Random()

    def add(self, rule: FaultRule) -> FaultRule:
        rule.id = self._next_id
        self._next_id += 1
        self.rules.append(rule)
        return rule

    def remove(self, rule_id: int) -> bool:
        before = len(self.rules)
        self.rules = [r for r in self.rules if r.id != rule_id]
        return len(self.rules) != before

    def clear(self) -> None:
        self.rules = []

    def decide(
        self, verb: str, resource: str, subresource: str, namespace: str, name: str
    ) -> tuple[float, ApiError | None]:
        delay = 0.0
        error: ApiError | None = None
        for rule in self.rules:
            if not rule.matches(verb, resource, subresource, namespace, name):
                continue
            if rule.latency or rule.latency_max:
                high = rule.latency_max if rule.latency_max is not None else rule.latency
                delay += self.rng.uniform(rule.latency, high)
            if rule.status is None or error is not None:
                continue
            if rule.count is not None:
                if rule.count > 0:
                    rule.count -= 1
                    error = failure(rule, resource, name)
            elif self.rng.random() < rule.probability:
                error = failure(rule, resource, name)
        return delay, error


class RequestStats:
    """Request counters by verb, resource and subresource."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str, str]] = Counter()

    def count(self, verb: str, resource: str, subresource: str) -> None:
        self.counts[(verb, resource, subresource)] += 1

    def snapshot(self) -> dict[str, int]:
        """``{"verb resource[/subresource]": n}``, e.g. ``{"create pods/binding": 1000}``."""
        out: dict[str, int] = {}
        for (verb, resource, sub), n in sorted(self.counts.items()):
            out[f"{verb} {resource}{'/' + sub if sub else ''}"] = n
        return out

    def writes(self) -> int:
        return sum(
            n for (verb, _, _), n in self.counts.items() if verb in ("create", "update", "patch", "delete")
        )

    def reset(self) -> None:
        self.counts.clear()
