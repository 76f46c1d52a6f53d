"""Property test: allocations never share a device, satisfy their selectors and constraints, and the
search finds an allocation whenever one exists (checked by brute force on small inventories)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

from dra_builders import CLASS, DRIVER, claim, device, device_class, exactly, match, resource_slice
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockstep.dra.allocator import Allocator
from lockstep.dra.features import Features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.k8s_types import parse_quantity

# (CEL expression, the same condition in Python over the device's attributes)
SELECTORS: list[tuple[str, Callable[[dict[str, Any]], bool]]] = [
    ("", lambda attrs: True),
    (f'device.attributes["{DRIVER}"].model == "a"', lambda attrs: attrs["model"] == "a"),
    (f'device.attributes["{DRIVER}"].memory >= 2', lambda attrs: attrs["memory"] >= 2),
    (f'device.attributes["{DRIVER}"].numa.includes(1)', lambda attrs: 1 in attrs["numa"]),
]
NODES = ("node-0", "node-1")

device_attributes = st.fixed_dictionaries(
    {
        "model": st.sampled_from(["a", "b"]),
        "memory": st.integers(1, 4),
        "numa": st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True),
    }
)
request_spec = st.tuples(st.integers(1, 3), st.integers(0, len(SELECTORS) - 1))
claim_spec = st.tuples(
    st.lists(request_spec, min_size=1, max_size=2),
    st.booleans(),  # matchAttribute numa over all requests
    st.sampled_from(NODES),
)


def _satisfies(
    chosen: list[list[str]], requests: list[tuple[int, int]], constrained: bool, attrs: dict[str, Any]
) -> bool:
    for names, (count, selector) in zip(chosen, requests, strict=True):
        if len(names) != count or not all(SELECTORS[selector][1](attrs[name]) for name in names):
            return False
    flat = [name for names in chosen for name in names]
    if len(set(flat)) != len(flat):
        return False
    if constrained:
        common = set.intersection(*(set(attrs[name]["numa"]) for name in flat))
        if not common:
            return False
    return True


def _exists(
    free: list[str], requests: list[tuple[int, int]], constrained: bool, attrs: dict[str, Any]
) -> bool:
    def assign(index: int, left: list[str], chosen: list[list[str]]) -> bool:
        if index == len(requests):
            return _satisfies(chosen, requests, constrained, attrs)
        return any(
            assign(index + 1, [n for n in left if n not in combo], [*chosen, list(combo)])
            for combo in itertools.combinations(left, requests[index][0])
        )

    return assign(0, free, [])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    inventory=st.lists(st.lists(device_attributes, min_size=1, max_size=6), min_size=2, max_size=2),
    claims=st.lists(claim_spec, min_size=1, max_size=5),
)
def test_allocations_are_exclusive_valid_and_complete(
    inventory: list[list[dict[str, Any]]], claims: list[tuple[list[tuple[int, int]], bool, str]]
) -> None:
    attrs: dict[str, dict[str, Any]] = {}
    devices = DeviceInventory()
    for node, node_devices in zip(NODES, inventory, strict=True):
        entries = []
        for i, attributes in enumerate(node_devices):
            name = f"{node}-d{i}"
            attrs[name] = attributes
            entries.append(device(name, **attributes))
        devices.update_slice(resource_slice(f"slice-{node}", entries, node))
    taken: set[DeviceID] = set()
    features = Features(prioritized_list=True, list_type_attributes=True)
    allocator = Allocator(features, devices, {CLASS: device_class()}, taken.__contains__)
    for number, (requests, constrained, node) in enumerate(claims):
        request_dicts = [
            exactly(f"r{i}", count, *([SELECTORS[selector][0]] if SELECTORS[selector][0] else []))
            for i, (count, selector) in enumerate(requests)
        ]
        constraints = [match(f"{DRIVER}/numa")] if constrained else []
        compiled = allocator.compile(claim(f"c{number}", *request_dicts, constraints=constraints))
        result = allocator.allocate([compiled], node, {})
        free = [name for name in attrs if name.startswith(node) and (DRIVER, node, name) not in taken]
        if result is None:
            assert not _exists(free, requests, constrained, attrs), "an allocation existed but was not found"
            continue
        [allocation] = result
        chosen: list[list[str]] = [[] for _ in requests]
        for entry in allocation.devices.results:
            device_id = (entry.driver, entry.pool, entry.device)
            assert device_id not in taken, "device allocated twice"
            assert entry.pool == node
            chosen[int(entry.request.removeprefix("r"))].append(entry.device)
        assert _satisfies(chosen, requests, constrained, attrs)
        taken.update((DRIVER, node, name) for names in chosen for name in names)


# --- 1.36 invariants: shared counters never over-committed, untolerated taints never allocated -------

TAINT_KEYS = ("k0", "k1")
partition_spec = st.fixed_dictionaries(
    {
        "memory": st.integers(1, 4),
        "sm": st.integers(0, 3),
        "taint": st.sampled_from(
            [None, *[(key, effect) for key in TAINT_KEYS for effect in ("NoSchedule", "NoExecute", "None")]]
        ),
    }
)
counters_claim = st.tuples(
    st.integers(1, 2),  # count
    st.lists(st.sampled_from(TAINT_KEYS), max_size=2, unique=True),  # tolerated keys (Exists)
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    partitions=st.lists(partition_spec, min_size=1, max_size=6),
    capacity=st.fixed_dictionaries({"memory": st.integers(2, 8), "sm": st.integers(1, 6)}),
    claims=st.lists(counters_claim, min_size=1, max_size=6),
    gang=st.booleans(),
)
def test_counters_never_go_negative_and_untolerated_taints_are_never_allocated(
    partitions: list[dict[str, Any]],
    capacity: dict[str, int],
    claims: list[tuple[int, list[str]]],
    gang: bool,
) -> None:
    devices = []
    for i, spec in enumerate(partitions):
        entry: dict[str, Any] = {
            "name": f"p{i}",
            "consumesCounters": [
                {"counterSet": "gpu0", "counters": {k: {"value": str(spec[k])} for k in ("memory", "sm")}}
            ],
        }
        if spec["taint"] is not None:
            entry["taints"] = [{"key": spec["taint"][0], "effect": spec["taint"][1]}]
        devices.append(entry)
    inventory = DeviceInventory()
    counters = {"gpu0": {k: str(v) for k, v in capacity.items()}}
    inventory.update_slice(
        resource_slice("c", [], "node-0", pool="p", slice_count=2, shared_counters=counters)
    )
    inventory.update_slice(resource_slice("d", devices, "node-0", pool="p", slice_count=2))
    taken: set[DeviceID] = set()
    allocator = Allocator(
        Features(device_taints=True, partitionable_devices=True),
        inventory,
        {CLASS: device_class()},
        taken.__contains__,
    )
    compiled = [
        allocator.compile(
            claim(
                f"c{n}",
                exactly("r", count, tolerations=[{"key": key, "operator": "Exists"} for key in tolerated]),
            )
        )
        for n, (count, tolerated) in enumerate(claims)
    ]
    # One pod with every claim (a gang's claims reserved in one cycle), or one claim after the other.
    batches = [compiled] if gang else [[c] for c in compiled]
    for batch in batches:
        result = allocator.allocate(batch, "node-0", {})
        if result is None:
            continue
        for (count, tolerated), allocation in zip(
            [claims[int(c.key.rsplit("/c", 1)[1])] for c in batch], result, strict=True
        ):
            assert len(allocation.devices.results) == count
            for entry in allocation.devices.results:
                spec = partitions[int(entry.device.removeprefix("p"))]
                if spec["taint"] is not None and spec["taint"][1] != "None":
                    assert spec["taint"][0] in tolerated, "an untolerated taint was allocated"
                device_id = (entry.driver, entry.pool, entry.device)
                assert device_id not in taken, "device allocated twice"
                taken.add(device_id)
        for counter in ("memory", "sm"):
            used = sum(partitions[int(name.removeprefix("p"))][counter] for _, _, name in taken)
            assert used <= capacity[counter], (
                f"counter {counter} over-committed: {used} > {capacity[counter]}"
            )


share_request = st.one_of(st.none(), st.integers(1, 12))  # Gi of bandwidth, None: the policy default


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    capacity=st.integers(4, 16),
    step=st.sampled_from([1, 2, 3]),
    default=st.integers(1, 4),
    batches=st.lists(st.lists(share_request, min_size=1, max_size=3), min_size=1, max_size=6),
)
def test_shares_of_a_multi_allocatable_device_never_exceed_its_capacity(
    capacity: int, step: int, default: int, batches: list[list[int | None]]
) -> None:
    from fractions import Fraction

    from lockstep.dra.store import ResourceStore

    policy = {"default": f"{default}Gi", "validRange": {"min": "1Gi", "step": f"{step}Gi"}}
    nic = {
        "name": "nic",
        "allowMultipleAllocations": True,
        "capacity": {"bandwidth": {"value": f"{capacity}Gi", "requestPolicy": policy}},
    }
    store = ResourceStore(Features(consumable_capacity=True))
    store.upsert_class(device_class())
    store.upsert_slice(resource_slice("s", [nic], "node-0"))
    allocator = store.allocator
    number = 0
    for batch in batches:  # one pod's claims, allocated in one search
        claims = []
        for amount in batch:
            request = exactly("r")
            if amount is not None:
                request["exactly"]["capacity"] = {"requests": {"bandwidth": f"{amount}Gi"}}
            number += 1
            claims.append(claim(f"c{number}", request, uid=f"uid-{number}"))
        results = allocator.allocate([allocator.compile(c) for c in claims], "node-0", {})
        if results is None:
            continue
        for c, allocation in zip(claims, results, strict=True):
            store.upsert_claim(
                c.model_copy(update={"status": c.status.model_copy(update={"allocation": allocation})})
            )
        used = allocator.consumed_capacity((DRIVER, "node-0", "nic"))["bandwidth"]
        assert used <= Fraction(capacity * 2**30), f"bandwidth over-committed: {used} > {capacity}Gi"
        for allocation in results:
            consumed = allocation.devices.results[0].consumed_capacity or {}
            gi = Fraction(parse_quantity(consumed["bandwidth"]).value, 2**30)
            assert gi == default or (gi >= 1 and (gi - 1) % step == 0), f"{gi}Gi is not on the policy's steps"
