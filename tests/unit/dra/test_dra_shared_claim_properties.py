"""Property test of behaviour 4 with injected write failures: whatever fails where, each successful
signal is released exactly once, the claim ends reserved for exactly the members that bound, and no
device stays taken by a forgotten in-flight allocation."""

from __future__ import annotations

import asyncio

from dra_builders import DRIVER, claim, device, device_class, exactly, resource_slice
from dra_memory_api import MemoryClaimAPI
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.dra.features import Features
from lockstep.dra.ports import WriteResult
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import CycleState, NodeInfo, PodClaimRef, PodInfo
from lockstep.scheduler.plugins.dynamic_resources import DynamicResources

FAILURES = [None, WriteResult.CONFLICT, WriteResult.ERROR, WriteResult.NOT_FOUND]
NODE = NodeInfo(name="node-a")


async def scenario(
    members: int, failures: list[WriteResult | None], bind_fails: list[bool], echo: bool
) -> None:
    store = ResourceStore(Features(prioritized_list=True))
    store.upsert_class(device_class())
    store.upsert_slice(resource_slice("s", [device("gpu-0")], NODE.name))
    api = MemoryClaimAPI(store, echo=echo)
    api.add(claim("shared", exactly("gpu"), uid="uid-shared"))
    plugin = DynamicResources(store, api)
    placed = []
    for i in range(members):
        pod = PodInfo(uid=f"uid-m{i}", namespace="ns", name=f"m{i}", claims=(PodClaimRef("gpu", "shared"),))
        state = CycleState()
        assert plugin.pre_filter(state, pod).ok
        assert plugin.filter(state, pod, NODE).ok
        assert plugin.reserve(state, pod, NODE.name).ok
        placed.append((pod, state))
    api.failures = list(failures)

    async def pre_bind(pod: PodInfo, state: CycleState) -> bool:
        status = await plugin.pre_bind(state, pod, NODE.name)
        if not status.ok:
            plugin.unreserve(state, pod, NODE.name)
        return status.ok

    pre_bound = await asyncio.gather(*(pre_bind(pod, state) for pod, state in placed))
    api.failures.clear()  # the injected failures were for PreBind; a removal may meet a conflict below
    api.fail_next(WriteResult.CONFLICT)
    # Some members then fail to bind after their PreBind succeeded: the binding cycle unreserves them.
    bound = set()
    for (pod, state), ok, fails in zip(placed, pre_bound, bind_fails + [False] * members, strict=False):
        if ok and fails:
            plugin.unreserve(state, pod, NODE.name)
        elif ok:
            bound.add(pod.name)
    await plugin.wait_for_background()
    assert len(store.in_flight) == 0
    latest = store.claims.get("ns/shared")
    assert latest is not None
    assert {ref.name for ref in latest.status.reserved_for} == bound
    # Unreserving never brings back a stale unallocated copy; the claim is deallocated (in a write)
    # only when no member that pre-bound is left holding it.
    assert latest.allocated == (any(pre_bound) and bool(bound))
    assert store.device_in_use((DRIVER, NODE.name, "gpu-0")) == latest.allocated


@settings(max_examples=50, deadline=None)
@given(
    members=st.integers(1, 5),
    failures=st.lists(st.sampled_from(FAILURES), max_size=6),
    bind_fails=st.lists(st.booleans(), max_size=5),
    echo=st.booleans(),  # without the watch echo the scheduler relies on its assumed claims alone
)
def test_shared_claim_accounting_survives_any_failures(
    members: int, failures: list[WriteResult | None], bind_fails: list[bool], echo: bool
) -> None:
    asyncio.run(scenario(members, failures, bind_fails, echo))
