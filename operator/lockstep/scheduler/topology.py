"""Topology domains for a group cycle: which domains exist at each level, and in which order to try them.

A group's topology is a list of levels, outermost first: the required ones (every member on nodes
with one value of each required label) and the preferred ones (best effort, inside the required
domain). A *domain* of a level is a set of nodes sharing one value of the level's label and of every
level above it, so a rack named ``r1`` in two blocks is two domains.

The group cycle (``lockstep.scheduler.cycle``) tries the levels innermost first: the smallest preferred
domain that can hold the whole group, then the next level up, finally the required domain (or, with
no required level, the whole cluster). Within a level it tries domains in :func:`best_fit` order;
:func:`why_chosen` says, for the status and ``lockstep explain``, why the domain it placed the group
in was chosen.

Room is estimated, not simulated: :func:`member_slots` is an upper bound on how many of the group's
members a node can still take (free capacity over the smallest request of each resource any member
makes). A domain whose bound is below the members still needed cannot hold the group and is not
tried; the estimate never skips a domain that could.

:class:`DomainIndex` keeps, across cycles, the grouping of the nodes into the domains of each level
(until a node is added, deleted or relabelled: ``ClusterCache.node_generation``) and each domain's
room per member unit, updated node by node as usage changes (``ClusterCache.watch_node_usage``), so
a cycle does not walk every node to find its domains. It returns what :func:`domains_of` would.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from lockstep.scheduler.framework import NodeInfo, PodInfo

if TYPE_CHECKING:
    from lockstep.state.cluster import ClusterCache

UNBOUNDED = 1 << 30  # slots of a node when the members request nothing it counts


@dataclass(frozen=True, slots=True)
class Level:
    key: str  # the node label of this level
    preferred: bool  # a preferred level (else the required one, or the whole cluster with key "")
    keys: tuple[str, ...]  # the labels that name a domain of this level: required ones, then preferred


@dataclass(frozen=True, slots=True)
class Domain:
    """The nodes of one domain of one level, with the room the group has there."""

    labels: tuple[tuple[str, str], ...]  # (key, value) of every label naming the domain
    nodes: frozenset[str]
    slots: int  # upper bound of the group's members the domain can still take
    free_cpu: int  # millicores free in the domain (roomiest-first order)
    parent_slots: int = 0  # slots of the domain of the level above holding this one (0: none above)

    @property
    def name(self) -> str:
        return ",".join(f"{key}={value}" for key, value in self.labels) or "the whole cluster"


def levels(required: Sequence[str], preferred: Sequence[str]) -> list[Level]:
    """The levels to try, innermost first: each preferred level (named with the required keys and the
    preferred ones above it), then the required level (``key`` "" and no keys: the whole cluster)."""
    order = [Level(key, True, (*required, *preferred[: index + 1])) for index, key in enumerate(preferred)]
    order.reverse()
    order.append(Level(required[-1] if required else "", False, tuple(required)))
    return order


def member_unit(pods: Sequence[PodInfo]) -> dict[str, int]:
    """The smallest amount of each resource that every member requests (resources some member does
    not request are left out): no member fits where this does not."""
    unit: dict[str, int] | None = None
    for pod in pods:
        requests = pod.requests
        if unit is None:
            unit = {name: amount for name, amount in requests.items() if amount > 0}
        else:
            unit = {name: min(amount, requests.get(name, 0)) for name, amount in unit.items()}
            unit = {name: amount for name, amount in unit.items() if amount > 0}
    return unit or {}


def member_slots(node: NodeInfo, unit: Mapping[str, int]) -> int:
    """How many members of at least ``unit`` each the node can still take (an upper bound)."""
    slots = UNBOUNDED
    allocatable, requested = node.allocatable, node.requested
    for name, amount in unit.items():
        slots = min(slots, max(allocatable.get(name, 0) - requested.get(name, 0), 0) // amount)
    pods = allocatable.get("pods")
    if pods is not None:
        slots = min(slots, max(pods - node.pod_count, 0))
    return slots


def domains_of(
    nodes: Iterable[NodeInfo],
    keys: Sequence[str],
    slots: Mapping[str, int],
    above: Mapping[tuple[tuple[str, str], ...], int] | None = None,
) -> list[Domain]:
    """The domains named by ``keys`` (every node carrying all of them), with their room; ``above``:
    the slots of each domain of the level above, by its labels."""
    members: dict[tuple[str, ...], list[NodeInfo]] = {}
    for node in nodes:
        labels = node.labels
        values = tuple(labels.get(key) for key in keys)
        if None in values:
            continue
        members.setdefault(values, []).append(node)  # type: ignore[arg-type]
    found = []
    for values, in_domain in members.items():
        room = min(sum(slots[node.name] for node in in_domain), UNBOUNDED)
        free = sum(node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0) for node in in_domain)
        named = tuple(zip(keys, values, strict=True))
        parent = above.get(named[:-1], 0) if above else 0
        found.append(Domain(named, frozenset(n.name for n in in_domain), room, free, parent))
    return found


def _free_cpu(node: NodeInfo) -> int:
    return node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)


@dataclass(slots=True)
class _Grouping:
    """The domains of one level (named by ``keys``), in the order their first node appears in the
    cache, and which domain each node is in."""

    labels: list[tuple[tuple[str, str], ...]]
    nodes: list[frozenset[str]]
    domain_of: dict[str, int]


@dataclass(slots=True)
class _Room:
    """The member slots and free cpu of every node for one member unit, and their sums per domain
    of each level looked at (by the level's keys: slots, free cpu, one entry per domain)."""

    slots: dict[str, int]
    free_cpu: dict[str, int]
    sums: dict[tuple[str, ...], tuple[list[int], list[int]]] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)  # nodes whose usage changed since last read


class DomainIndex:
    """The domains of each level with their room, kept across cycles (see the module's docstring)."""

    MAX_UNITS = 8  # member units whose room is kept (the least recently used is dropped)

    def __init__(self, cache: ClusterCache) -> None:
        self._cache = cache
        self._changed: set[str] | None = None  # from the cache, once asked
        self._generation = -1
        self._groupings: dict[tuple[str, ...], _Grouping] = {}
        self._rooms: OrderedDict[tuple[tuple[str, int], ...], _Room] = OrderedDict()

    def domains(
        self,
        keys: Sequence[str],
        unit: Mapping[str, int],
        above: Mapping[tuple[tuple[str, str], ...], int] | None = None,
    ) -> list[Domain]:
        """What ``domains_of(cache.nodes.values(), keys, slots, above)`` returns, with ``slots``
        each node's ``member_slots`` for ``unit``."""
        keys = tuple(keys)
        grouping = self._grouping(keys)
        room = self._room(unit)
        sums = room.sums.get(keys)
        if sums is None:
            slot_sums, free_sums = [0] * len(grouping.nodes), [0] * len(grouping.nodes)
            for index, names in enumerate(grouping.nodes):
                slot_sums[index] = sum(room.slots[name] for name in names)
                free_sums[index] = sum(room.free_cpu[name] for name in names)
            sums = room.sums[keys] = (slot_sums, free_sums)
        slot_sums, free_sums = sums
        found = []
        for index, named in enumerate(grouping.labels):
            parent = above.get(named[:-1], 0) if above else 0
            room_left = min(slot_sums[index], UNBOUNDED)
            found.append(Domain(named, grouping.nodes[index], room_left, free_sums[index], parent))
        return found

    def _refresh(self) -> None:
        cache = self._cache
        if self._changed is None:
            self._changed = cache.watch_node_usage()
        if cache.node_generation != self._generation:
            self._generation = cache.node_generation
            self._groupings.clear()
            self._rooms.clear()
            self._changed.clear()
        elif self._changed:
            for room in self._rooms.values():
                room.changed |= self._changed
            self._changed.clear()

    def _grouping(self, keys: tuple[str, ...]) -> _Grouping:
        self._refresh()
        grouping = self._groupings.get(keys)
        if grouping is not None:
            return grouping
        members: dict[tuple[str, ...], list[str]] = {}
        for node in self._cache.nodes.values():
            labels = node.labels
            values = tuple(labels.get(key) for key in keys)
            if None in values:
                continue
            members.setdefault(values, []).append(node.name)  # type: ignore[arg-type]
        grouping = _Grouping([], [], {})
        for index, (values, names) in enumerate(members.items()):
            grouping.labels.append(tuple(zip(keys, values, strict=True)))
            grouping.nodes.append(frozenset(names))
            for name in names:
                grouping.domain_of[name] = index
        self._groupings[keys] = grouping
        return grouping

    def _room(self, unit: Mapping[str, int]) -> _Room:
        self._refresh()
        nodes = self._cache.nodes
        key = tuple(sorted(unit.items()))
        room = self._rooms.get(key)
        if room is None:
            room = _Room(
                {name: member_slots(node, unit) for name, node in nodes.items()},
                {name: _free_cpu(node) for name, node in nodes.items()},
            )
            self._rooms[key] = room
            if len(self._rooms) > self.MAX_UNITS:
                self._rooms.popitem(last=False)
            return room
        self._rooms.move_to_end(key)
        for name in room.changed:
            node = nodes[name]
            slots, free = member_slots(node, unit), _free_cpu(node)
            slot_change, free_change = slots - room.slots[name], free - room.free_cpu[name]
            if not (slot_change or free_change):
                continue
            room.slots[name], room.free_cpu[name] = slots, free
            for level, (slot_sums, free_sums) in room.sums.items():
                index = self._groupings[level].domain_of.get(name)
                if index is not None:
                    slot_sums[index] += slot_change
                    free_sums[index] += free_change
        room.changed.clear()
        return room


def best_fit(
    domains: Collection[Domain], needed: int, wanted: int, placed: Collection[str] = ()
) -> list[Domain]:
    """The order in which to try domains for a group that must place ``needed`` more members and
    would like to place ``wanted`` (its pending members), some already ``placed`` (on these nodes):
    best fit.

    0. When members are placed, only the domains holding all of them (the group is all in one
       domain or not in any of that level).
    1. Domains with room for every wanted member, the least room left over first: the domain the
       group fills most tightly, so the roomy ones stay whole for larger groups.
    2. Then domains with room for the needed members but not all wanted ones, roomiest first (the
       most members placed).
    3. Domains without room for the needed members are left out.

    Ties go to the domain inside the tightest domain of the level above (a rack of the fullest zone),
    then to the least free cpu, then by name, so the order is deterministic."""
    if placed:
        domains = [d for d in domains if d.nodes.issuperset(placed)]
    whole = sorted(
        (d for d in domains if d.slots >= wanted),
        key=lambda d: (d.slots - wanted, d.parent_slots, d.free_cpu, d.name),
    )
    partial = sorted(
        (d for d in domains if needed <= d.slots < wanted),
        key=lambda d: (-d.slots, d.parent_slots, d.free_cpu, d.name),
    )
    return whole + partial


def roomiest_first(
    domains: Collection[Domain], needed: int, wanted: int, placed: Collection[str] = ()
) -> list[Domain]:
    """lockstep's order before best fit, kept to measure against (bench/topology.py): most free cpu
    first, every domain with room for the needed members."""
    if placed:
        domains = [d for d in domains if d.nodes.issuperset(placed)]
    return sorted((d for d in domains if d.slots >= needed), key=lambda d: (-d.free_cpu, d.name))


DomainOrder = Callable[[Collection[Domain], int, int, Collection[str]], list[Domain]]


def why_chosen(
    domain: Domain,
    candidates: Sequence[Domain],
    wanted: int,
    placed: Collection[str] = (),
    order: DomainOrder = best_fit,
) -> str:
    """Why the cycle placed the group in ``domain``, for ``wanted`` members to place, for the status
    and ``lockstep explain``. ``candidates``: the level's domains as ``order`` ranked them (the
    group's ``placed`` members limit them to the domain holding those); ``domain`` is the first of
    them where the whole cycle succeeded, or the one tried when ``order`` ranked none."""
    if not domain.labels:
        return "no required level"
    if placed:
        return f"already holds the group's placed members, on {len(placed)} nodes"
    if not any(d is domain for d in candidates):
        return "no domain has room by the estimate: the roomiest, tried for what its nodes lack"
    if order is not best_fit:
        name = getattr(order, "__name__", "domain order").replace("_", " ")
        return f"{name}: room for at most {domain.slots}, {wanted} to place"
    if domain.slots >= UNBOUNDED:
        return f"best fit: room for all {wanted} members, not bounded by requests"
    left = domain.slots - wanted
    slots_left = f"{left} member slot{'' if left == 1 else 's'} left over"
    if left >= 0:
        whole = sum(1 for d in candidates if d.slots >= wanted)
        if whole == 1:
            return f"best fit: the only domain with room for all {wanted} members, {slots_left}"
        return f"best fit: {slots_left}, the fewest of the {whole} domains with room for all {wanted} members"
    return (
        f"room for {domain.slots} of the {wanted} members, the most of the domains with room for the "
        "members needed"
    )


@dataclass(frozen=True, slots=True)
class DomainTry:
    """One domain the cycle considered, for the status and ``lockstep explain``."""

    level: str  # the level's key ("" for the whole cluster)
    preferred: bool
    domain: str
    verdict: str  # why it failed, or why it was chosen
    chosen: bool = False

    def describe(self) -> str:
        return f"{self.domain} ({self.verdict})"
