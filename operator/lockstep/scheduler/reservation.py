"""Capacity reservation and EASY backfill: a large gang on a busy cluster is not starved by small pods.

A gang whose cycle failed only for lack of free capacity (no member rejected as unresolvable, and no
preemption it may make would help) becomes a *candidate*. Once it has been one for
``--reservation-delay-seconds`` and leads the candidates (priority first, then how long it has
waited; a gang whose reservation timed out goes last), it reserves, if one of the
``--max-reservations`` slots is free or it has a higher priority than the lowest holder (which then
yields its slot).

Node choice: nodes are ranked by how many pods would have to finish there (fewest first), then by
the latest known end of those pods (soonest first; a pod without ``activeDeadlineSeconds`` never
ends as far as lockstep knows), then by name. Trial runs of the real group cycle (every filter,
affinity, the required topology, DRA allocation) with the pods of the first k nodes left out find the
smallest k at which the whole gang fits (a binary search; a gang that would not fit even with every
pod gone never reserves). Where that trial put the gang's pods is what is held: per node, the sum of
their requests, one pod slot each, and, when they use ResourceClaims, the node's devices.

Holding: during the cycle of any other group of lower or equal priority, a pod may use a held node
only in the room that remains with the gang's share counted as used (the ``CapacityReservation``
filter, which names the gang in the pod's diagnosis). A higher-priority group ignores the hold; if
it places pods on a held node the reservation plans again at its gang's next attempt.

Backfill (EASY): a pod may use held capacity when it is sure to have ended before the reservation's
*expected completion*, the latest known end (``status.startTime + activeDeadlineSeconds``) among the
pods the reservation waits for at its creation. The pod's own end is counted from the moment it is
placed plus ``BACKFILL_START_SLACK`` (the time it may take to start), so a backfilled pod cannot
outlive the expected completion: the kubelet ends it at its deadline. A node where a pod waited for
has no deadline gets no backfill, nor does any node of a reservation whose expected completion is
unknown.

This module is pure (the scheduler drives it); the PodGroup status and Events say what it decides.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from lockstep.api.podgroup import ReservationStatus
from lockstep.api.quantity import to_resource_amount
from lockstep.scheduler.framework import SUCCESS, GroupKey, NodeInfo, PodGroupInfo, PodInfo, Status
from lockstep.state.cluster import ClusterCache

if TYPE_CHECKING:  # the plugin module imports this one, and the profile the plugin, before the cycle
    from lockstep.scheduler.preemption import PreemptionPlanner

PLUGIN = "CapacityReservation"
HELD_CAUSE = "CapacityHeld"
POLICY_NEVER = "Never"
# Where an upstream PodGroup (no status field for it) records its reservation: to_status as JSON.
RESERVATION_ANNOTATION = "scheduling.lockstep.dev/reservation"
PODS = "pods"  # the pod slots a hold takes, next to the requested resources
# How long a backfilled pod may take from its placement to its start (status.startTime): its
# activeDeadlineSeconds counts from then.
BACKFILL_START_SLACK = 1.0


class Ending(StrEnum):
    """How a reservation ended (the Event and the metric's label)."""

    COMPLETED = "completed"  # the gang was placed
    TIMED_OUT = "timed_out"
    YIELDED = "yielded"  # a higher-priority gang took its slot
    RELEASED = "released"  # no longer needed or wanted: preempting instead, Never, deleted, ...


def known_end(pod: PodInfo, now: float) -> float | None:
    """When the kubelet ends the pod at the latest (its start, or now when it has not started, plus
    activeDeadlineSeconds); None without a deadline."""
    if pod.active_deadline_seconds is None:
        return None
    start = pod.start_time if pod.start_time is not None else now
    return start + pod.active_deadline_seconds


@dataclass(frozen=True, slots=True)
class NodeHold:
    """What a reservation holds on one node: requests in base units, ``pods`` slots, devices."""

    node: str
    requests: Mapping[str, int]
    devices: bool = False


@dataclass(slots=True)
class Reservation:
    group: GroupKey
    holds: dict[str, NodeHold]
    since: float  # wall clock
    timeout: float  # seconds
    expected_completion: float | None  # wall clock
    backfilled: int = 0
    replan: bool = False  # a higher-priority group took some of its capacity
    # As of the gang's last attempt: pods still to finish per node, how many of them have no deadline,
    # and the nodes where one of them has none (no backfill there).
    waiting: dict[str, int] = field(default_factory=dict)
    without_deadline: int = 0
    no_backfill: frozenset[str] = frozenset()

    @property
    def expires_at(self) -> float:
        return self.since + self.timeout

    @property
    def waiting_for(self) -> int:
        return sum(self.waiting.values())

    def held_total(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for hold in self.holds.values():
            for resource, amount in hold.requests.items():
                total[resource] = total.get(resource, 0) + amount
        return total


@dataclass(slots=True)
class _Candidate:
    since: float  # first failure for lack of capacity (wall clock)
    priority: int
    timed_out: bool = False


def waited_pods(cache: ClusterCache, hold: NodeHold, group: GroupKey, now: float) -> list[PodInfo] | None:
    """The pods on the hold's node that must finish before its share fits there, soonest known end
    first (pods without a deadline last); None when it cannot fit even with every one of them gone."""
    node = cache.nodes.get(hold.node)
    if node is None:
        return None
    others = [p for p in cache.pods_on_node(hold.node) if p.group_key != group]
    ends = {p.uid: known_end(p, now) for p in others}
    others.sort(key=lambda p: (ends[p.uid] is None, ends[p.uid] or 0.0, p.uid))
    used = dict(node.requested)
    used[PODS] = node.pod_count
    capacity = dict(node.allocatable)

    def fits() -> bool:
        for resource, amount in hold.requests.items():
            limit = capacity.get(resource)
            if limit is None and resource == PODS:
                continue
            if used.get(resource, 0) + amount > (limit or 0):
                return False
        return True

    waited: list[PodInfo] = []
    rest = iter(others)
    while not fits():
        pod = next(rest, None)
        if pod is None:
            return None
        waited.append(pod)
        for resource, amount in pod.requests.items():
            used[resource] = used.get(resource, 0) - amount
        used[PODS] -= 1
    if hold.devices:  # which devices the gang needs is not known per pod: wait for every claim user
        waited += [p for p in rest if p.claims]
    return waited


class ReservationPlanner:
    """Chooses a gang's nodes with trial runs of the real group cycle (see the module docstring)."""

    def __init__(self, cache: ClusterCache, trials: PreemptionPlanner) -> None:
        self.cache = cache
        self.trials = trials

    def plan(
        self, key: GroupKey, group: PodGroupInfo | None, pods: Sequence[PodInfo], now: float
    ) -> dict[str, NodeHold] | str:
        """The holds, or why there can be none. Call inside the holds of other reservations."""
        cache = self.cache
        on_node: dict[str, list[PodInfo]] = {}
        for name in cache.nodes:
            on_node[name] = [p for p in cache.pods_on_node(name) if p.group_key != key]

        def latest_end(name: str) -> float:
            ends = [known_end(p, now) for p in on_node[name]]
            return max((e if e is not None else float("inf") for e in ends), default=0.0)

        order = sorted(on_node, key=lambda name: (len(on_node[name]), latest_end(name), name))
        if not order:
            return "the cluster has no nodes"

        def trial(k: int) -> tuple[tuple[PodInfo, str], ...] | None:
            removed = [p for name in order[:k] for p in on_node[name]]
            return self.trials.fits(group, pods, removed)

        best = trial(len(order))
        if best is None:
            return "it would not fit even with every pod on every node finished"
        low, high = 1, len(order)  # the smallest k that fits is in [low, high]
        while low < high:
            middle = (low + high) // 2
            found = trial(middle)
            if found is not None:
                best, high = found, middle
            else:
                low = middle + 1
        shared_claims = bool(group is not None and group.claims)
        requests: dict[str, dict[str, int]] = {}
        devices: set[str] = set()
        for pod, node in best:
            held = requests.setdefault(node, {})
            for resource, amount in pod.requests.items():
                held[resource] = held.get(resource, 0) + amount
            held[PODS] = held.get(PODS, 0) + 1
            if pod.claims or shared_claims:
                devices.add(node)
        return {node: NodeHold(node, held, node in devices) for node, held in sorted(requests.items())}


# The reservation changed (created, re-planned, restored: ``None`` ending) or ended.
ReservationListener = Callable[[Reservation, Ending | None, str], None]


class ReservationBook:
    """The reservations held, the gangs waiting for one, and the held-capacity check of the filter."""

    def __init__(
        self,
        *,
        enabled: bool = True,
        max_reservations: int = 1,
        delay: float = 0.0,
        timeout: float = 600.0,
        clock: Callable[[], float],
        priority_of: Callable[[GroupKey], int] = lambda key: 0,
    ) -> None:
        self.enabled = enabled
        self.max_reservations = max_reservations
        self.delay = delay
        self.timeout = timeout
        self.clock = clock
        self.priority_of = priority_of
        self.reservations: dict[GroupKey, Reservation] = {}
        self._candidates: dict[GroupKey, _Candidate] = {}
        self._holding: tuple[Reservation, ...] = ()  # the reservations the running cycle must respect
        self.backfilling: dict[str, GroupKey] = {}  # pod uid -> reservation whose capacity it took
        self.listeners: list[ReservationListener] = []

    # ------------------------------------------------------------------ the filter's side

    @contextmanager
    def holding_for(self, key: GroupKey, priority: int) -> Iterator[None]:
        """For the cycle of group ``key`` of ``priority``: every other reservation of at least that
        priority holds its capacity."""
        previous = self._holding
        self._holding = tuple(
            r for r in self.reservations.values() if r.group != key and self.priority_of(r.group) >= priority
        )
        try:
            yield
        finally:
            self._holding = previous

    @property
    def holding(self) -> bool:
        return bool(self._holding)

    def check(self, pod: PodInfo, node: NodeInfo) -> tuple[Status, GroupKey | None]:
        """Whether ``pod`` may go on ``node`` with the held capacity respected; with the reservation
        whose capacity it takes as a backfill (None: it takes none)."""
        holds = [(r, r.holds[node.name]) for r in self._holding if node.name in r.holds]
        if not holds or not self._takes_held(pod, node, [hold for _, hold in holds]):
            return SUCCESS, None
        now = self.clock()
        if self._backfills(pod, node.name, [r for r, _ in holds], now):
            return SUCCESS, holds[0][0].group
        gangs = ", ".join(sorted({str(r.group) for r, _ in holds}))
        return Status.unschedulable(
            PLUGIN, HELD_CAUSE, f"node {node.name}: capacity held for gang {gangs}"
        ), None

    @staticmethod
    def _takes_held(pod: PodInfo, node: NodeInfo, holds: Sequence[NodeHold]) -> bool:
        need: dict[str, int] = {}
        for hold in holds:
            for resource, amount in hold.requests.items():
                need[resource] = need.get(resource, 0) + amount
        requested, allocatable = node.requested, node.allocatable
        for resource, amount in pod.requests.items():
            if amount and requested.get(resource, 0) + amount + need.get(resource, 0) > allocatable.get(
                resource, 0
            ):
                return True
        pods = allocatable.get(PODS)
        if pods is not None and node.pod_count + 1 + need.get(PODS, 0) > pods:
            return True
        return bool(pod.claims) and any(hold.devices for hold in holds)

    @staticmethod
    def _backfills(pod: PodInfo, node: str, reservations: Sequence[Reservation], now: float) -> bool:
        if pod.active_deadline_seconds is None:
            return False
        end = now + BACKFILL_START_SLACK + pod.active_deadline_seconds
        return all(
            r.expected_completion is not None and node not in r.no_backfill and end <= r.expected_completion
            for r in reservations
        )

    def backfill_reserved(self, uid: str, key: GroupKey) -> None:
        self.backfilling[uid] = key

    def backfill_unreserved(self, uid: str) -> None:
        self.backfilling.pop(uid, None)

    def backfill_bound(self, uid: str) -> bool:
        """A pod placed on held capacity was bound: counted on its reservation (True: it was one)."""
        key = self.backfilling.pop(uid, None)
        if key is None:
            return False
        reservation = self.reservations.get(key)
        if reservation is not None:
            reservation.backfilled += 1
        return True

    # ------------------------------------------------------------------ the scheduler's side

    def on_unfit(
        self,
        key: GroupKey,
        group: PodGroupInfo | None,
        priority: int,
        cache: ClusterCache,
        plan: Callable[[], dict[str, NodeHold] | str],
    ) -> tuple[str | None, float | None]:
        """The gang did not fit for lack of free capacity (and no preemption helps): keep, make, plan
        again or time out its reservation. Returns what to add to its status message and when it
        should be attempted again at the latest (the end of its delay, or of its reservation)."""
        now = self.clock()
        if not self.enabled or group is None or not group.is_gang or group.reservation_policy == POLICY_NEVER:
            why = "the PodGroup's spec.reservation.policy is Never" if group is not None else "not a gang"
            self.drop(key, why if self.enabled else "reservation is turned off")
            return None, None
        candidate = self._candidates.get(key)
        if candidate is None:
            candidate = self._candidates[key] = _Candidate(now, priority)
        candidate.priority = priority
        timeout = group.reservation_timeout_seconds or self.timeout
        current = self.reservations.get(key)
        if current is not None:
            current.timeout = timeout
            if now >= current.expires_at:
                self._end(
                    current,
                    Ending.TIMED_OUT,
                    f"not completed within {timeout:g}s: released for the next gang",
                )
                candidate.timed_out = True
                current = None
            elif not current.replan and self.refresh(current, cache):
                return describe(current), current.expires_at
        if current is None and now < candidate.since + self.delay:
            wait = candidate.since + self.delay - now
            return f"reserves capacity in {wait:.0f}s if it still does not fit", candidate.since + self.delay
        if current is None and not self._take_slot(key, candidate, now):
            holders = ", ".join(str(r.group) for r in self.reservations.values())
            return f"waits for a reservation slot (held by {holders})", None
        holds = plan()
        if isinstance(holds, str):
            if current is not None:
                self._end(current, Ending.RELEASED, f"cannot be planned again: {holds}")
            self._candidates.pop(key, None)
            return f"no capacity reservation: {holds}", None
        reservation = Reservation(
            key,
            holds,
            since=current.since if current is not None else now,
            timeout=timeout,
            expected_completion=None,
            backfilled=current.backfilled if current is not None else 0,
        )
        self.refresh(reservation, cache, first=True)
        self.reservations[key] = reservation
        self._tell(
            reservation, None, ("planned again: " if current is not None else "") + describe(reservation)
        )
        return describe(reservation), reservation.expires_at

    def _take_slot(self, key: GroupKey, candidate: _Candidate, now: float) -> bool:
        """Whether the gang may reserve now: no better candidate waits for the free slots, or it
        outranks (strictly higher priority) the lowest holder, which yields."""

        def rank(c: _Candidate) -> tuple[bool, int, float]:
            return (c.timed_out, -c.priority, c.since)

        ahead = sum(
            1
            for other, c in self._candidates.items()
            if other != key
            and other not in self.reservations
            and now >= c.since + self.delay
            and rank(c) < rank(candidate)
        )
        if ahead < self.max_reservations - len(self.reservations):
            return True
        if ahead or not self.reservations:
            return False
        lowest = min(self.reservations.values(), key=lambda r: (self.priority_of(r.group), -r.since))
        if self.priority_of(lowest.group) >= candidate.priority:
            return False
        self._end(lowest, Ending.YIELDED, f"yielded to the higher-priority gang {key}")
        return True

    def refresh(self, reservation: Reservation, cache: ClusterCache, first: bool = False) -> bool:
        """Recount the pods the reservation waits for (and, when ``first``, fix its expected completion);
        False when a held share cannot fit on its node any more (node gone or shrunk)."""
        now = self.clock()
        waiting: dict[str, int] = {}
        without = 0
        no_backfill: set[str] = set()
        ends: list[float] = []
        broken = False
        for name, hold in reservation.holds.items():
            waited = waited_pods(cache, hold, reservation.group, now)
            if waited is None:
                broken = True
                continue
            waiting[name] = len(waited)
            for pod in waited:
                end = known_end(pod, now)
                if end is None:
                    without += 1
                    no_backfill.add(name)
                else:
                    ends.append(end)
        reservation.waiting = waiting
        reservation.without_deadline = without
        reservation.no_backfill = frozenset(no_backfill)
        if first:
            reservation.expected_completion = max(ends) if ends else (now if not without else None)
        return not broken

    def on_placed(self, key: GroupKey, priority: int, nodes: Iterable[str]) -> list[GroupKey]:
        """A group's cycle placed pods on ``nodes``: its own reservation is complete; a lower-priority
        reservation whose held nodes it used plans again. Returns the gangs to attempt again."""
        self._candidates.pop(key, None)
        own = self.reservations.get(key)
        if own is not None:
            self._end(own, Ending.COMPLETED, "the gang fits: its pods are being bound")
        used = set(nodes)
        replan: list[GroupKey] = []
        for reservation in self.reservations.values():
            if (
                not reservation.replan
                and self.priority_of(reservation.group) < priority
                and used & reservation.holds.keys()
            ):
                reservation.replan = True
                replan.append(reservation.group)
        return replan

    def drop(self, key: GroupKey, why: str) -> None:
        """The gang is no longer a candidate (it fits otherwise, preempts, is parked, opted out, is gone)."""
        self._candidates.pop(key, None)
        reservation = self.reservations.get(key)
        if reservation is not None:
            self._end(reservation, Ending.RELEASED, why)

    def restore(self, reservation: Reservation) -> None:
        """A reservation read back from the API (start-up, a new leader)."""
        self.reservations[reservation.group] = reservation
        self._candidates.setdefault(
            reservation.group, _Candidate(reservation.since, self.priority_of(reservation.group))
        )
        self._tell(reservation, None, "restored: " + describe(reservation))

    def forget(self, key: GroupKey) -> None:
        """Without a word (a non-leader following what the leader recorded)."""
        self._candidates.pop(key, None)
        self.reservations.pop(key, None)

    def next_expiry(self) -> float | None:
        return min((r.expires_at for r in self.reservations.values()), default=None)

    def _end(self, reservation: Reservation, ending: Ending, message: str) -> None:
        self.reservations.pop(reservation.group, None)
        for uid, key in list(self.backfilling.items()):
            if key == reservation.group:
                del self.backfilling[uid]
        self._tell(reservation, ending, message)

    def _tell(self, reservation: Reservation, ending: Ending | None, message: str) -> None:
        for listener in self.listeners:
            listener(reservation, ending, message)


def describe(reservation: Reservation) -> str:
    nodes = sorted(reservation.holds)
    shown = ", ".join(nodes[:8]) + (f" and {len(nodes) - 8} more" if len(nodes) > 8 else "")
    text = f"capacity held on {len(nodes)} node{'s' if len(nodes) != 1 else ''} ({shown})"
    waiting = reservation.waiting_for
    text += f", waiting for {waiting} pod{'s' if waiting != 1 else ''} to finish"
    if reservation.without_deadline:
        text += f" ({reservation.without_deadline} without activeDeadlineSeconds)"
    if reservation.expected_completion is not None:
        text += f", expected by {timestamp(reservation.expected_completion)}"
    return text


def timestamp(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# ---------------------------------------------------------------------- recorded in the API


def quantity(resource: str, amount: int) -> str:
    """A held amount as a Kubernetes quantity: cpu in cores or millicores, the rest in base units."""
    if resource == "cpu":
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    return str(amount)


def to_status(reservation: Reservation) -> dict[str, Any]:
    """``status.reservation`` of a lockstep PodGroup (and the annotation of an upstream one)."""
    nodes = []
    for name, hold in sorted(reservation.holds.items()):
        node: dict[str, Any] = {
            "name": name,
            "resources": {r: quantity(r, amount) for r, amount in sorted(hold.requests.items())},
        }
        if hold.devices:
            node["devices"] = True
        if name in reservation.waiting:
            node["waitingFor"] = reservation.waiting[name]
        nodes.append(node)
    status: dict[str, Any] = {
        "nodes": nodes,
        "waitingFor": reservation.waiting_for,
        "podsWithoutDeadline": reservation.without_deadline,
        "since": timestamp(reservation.since),
        "timeoutSeconds": max(math.ceil(reservation.timeout), 1),
        "backfilled": reservation.backfilled,
    }
    if reservation.expected_completion is not None:
        status["expectedCompletion"] = timestamp(reservation.expected_completion)
    return status


def from_status(key: GroupKey, recorded: ReservationStatus) -> Reservation:
    """A reservation as the PodGroup records it (a restart, a new leader)."""
    holds = {
        node.name: NodeHold(
            node.name,
            {r: to_resource_amount(r, text) for r, text in node.resources.items()},
            node.devices,
        )
        for node in recorded.nodes
    }
    expected = recorded.expected_completion
    return Reservation(
        key,
        holds,
        since=recorded.since.timestamp(),
        timeout=float(recorded.timeout_seconds),
        expected_completion=expected.timestamp() if expected is not None else None,
        backfilled=recorded.backfilled or 0,
        waiting={node.name: node.waiting_for or 0 for node in recorded.nodes},
        without_deadline=recorded.pods_without_deadline or 0,
        no_backfill=frozenset(holds),  # until the gang's next attempt looks at the nodes again
    )
