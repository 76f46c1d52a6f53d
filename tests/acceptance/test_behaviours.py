"""The five behaviours of docs/architecture.md, each forced with fault injection, against the API
emulator with the operator running in-process over HTTP."""

from __future__ import annotations

from typing import Any

from acceptance_harness import (
    NAMESPACE,
    Env,
    PodEvents,
    claim,
    eventually,
    operator_settings,
    pod,
    podgroup,
    simulated_cluster,
)

from lockstep.kube.client import NODES, RESOURCE_CLAIMS
from lockstep.sim.faults import FaultRule

SHARED = [{"name": "gpu", "resourceClaimName": "shared"}]


async def all_bound(env: Env, group: str, count: int) -> bool:
    return await env.bound(group) == count


def conflicts(env: Env, resource: str) -> float:
    value = env.operator.metrics.registry.get_sample_value(
        "lockstep_api_conflicts_total", {"resource": resource}
    )
    return value or 0.0


def devices_in_api(claims: list[dict[str, Any]]) -> set[tuple[str, str, str]]:
    used = set()
    for item in claims:
        allocation = (item.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            used.add((result["driver"], result["pool"], result["device"]))
    return used


class RecordingInFlight:
    """Wraps the operator's InFlightClaims to record every ``signal`` and whether it recorded."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.signals: list[tuple[str, bool]] = []

    def signal(self, claim_uid: str, allocated_claim: Any) -> bool:
        recorded: bool = self.inner.signal(claim_uid, allocated_claim)
        self.signals.append((claim_uid, recorded))
        return recorded

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __len__(self) -> int:
        return len(self.inner)

    def __contains__(self, claim_uid: object) -> bool:
        return claim_uid in self.inner


async def test_behaviour_1_claim_already_allocated_at_reserve() -> None:
    """A late member's Reserve finds the shared claim already allocated by the first member's
    PreBind (whose binding is held back): it records nothing in flight and reuses the allocation."""
    async with simulated_cluster(nodes=2, devices_per_node=2) as env:
        store = env.operator.core.resources  # type: ignore[union-attr]
        in_flight = RecordingInFlight(store.in_flight)
        store.in_flight = in_flight  # type: ignore[assignment]
        signals = in_flight.signals
        env.cluster.server.faults.add(
            FaultRule(verb="create", resource="pods", subresource="binding", latency=0.5)
        )
        await env.create(claim("shared"))
        await env.create(podgroup("g", 1))
        await env.create(pod("g-0", "g", claims=SHARED))

        async def allocated() -> dict[str, Any]:
            item = await env.claim("shared")
            return item if item.get("status", {}).get("allocation") else {}

        first = await eventually(allocated, what="the first member's PreBind to allocate the claim")
        assert await env.bound("g") == 0, "the first member's binding is still held back"
        signals_before = len(signals)
        assert signals_before == 1 and signals[0][1] is True  # the first member's own pending allocation
        for i in range(1, 4):
            await env.create(pod(f"g-{i}", "g", claims=SHARED))

        await eventually(lambda: all_bound(env, "g", 4), what="all four members bound")
        late = signals[signals_before:]
        # Reserve of the late members reused the allocation: nothing recorded in flight for them.
        assert not any(recorded for _, recorded in late), late
        assert len(store.in_flight) == 0
        final = await env.claim("shared")
        assert final["status"]["allocation"] == first["status"]["allocation"]
        assert len(final["status"]["reservedFor"]) == 4
        assert conflicts(env, "resourceclaims/status") == 0  # no "allocated elsewhere" retries
        attempts = env.operator.core.scheduler.attempts  # type: ignore[union-attr]
        assert all("ClaimChanged" not in a.causes and a.reason != "SchedulerError" for a in attempts.values())
        assert await env.invariant_violations() == []


async def test_behaviour_2_placement_statuses_waiting_unschedulable_and_too_few_pods() -> None:
    async with simulated_cluster(nodes=3, devices_per_node=0) as env:
        # Fits, but only 2 of minCount 3 pods exist yet: Waiting, and the status says why.
        await env.create(podgroup("short", 3))
        for i in range(2):
            await env.create(pod(f"short-{i}", "short", cpu="100m"))
        # Needs 4 nodes with 20 cpu free; there are 3.
        await env.create(podgroup("big", 4))
        for i in range(4):
            await env.create(pod(f"big-{i}", "big", cpu="20"))

        async def phase_is(name: str, *phases: str) -> dict[str, Any]:
            status = await env.podgroup_status(name)
            return status if status.get("phase") in phases else {}

        short = await eventually(lambda: phase_is("short", "Waiting"), what="short Waiting")
        condition = next(c for c in short["conditions"] if c["type"] == "PodGroupScheduled")
        assert (condition["status"], condition["reason"]) == ("False", "Waiting")
        assert "1 missing" in condition["message"]
        assert {"reason": "TooFewPods", "count": 1, "message": "2 of minCount 3 pods exist"} in short[
            "unschedulableReasons"
        ]

        big = await eventually(lambda: phase_is("big", "Unschedulable"), what="big Unschedulable")
        condition = next(c for c in big["conditions"] if c["type"] == "PodGroupScheduled")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "cannot be satisfied" in condition["message"]
        cpu = next(r for r in big["unschedulableReasons"] if r["reason"] == "InsufficientCPU")
        assert "NodeResourcesFit rejected" in cpu["message"] and "node-00" in cpu["message"], cpu
        assert big["nextRetryTime"]
        assert await env.bound("big") == 0  # all or nothing

        # The missing pod arrives and a node is added: both groups recover.
        await env.create(pod("short-2", "short", cpu="100m"))
        node = await env.client.get(NODES, None, env.cluster.node_names[0])
        node["metadata"] = {
            "name": "node-extra",
            "labels": {**node["metadata"]["labels"], "kubernetes.io/hostname": "node-extra"},
        }
        await env.client.create(NODES, None, node)
        await eventually(lambda: phase_is("short", "Scheduled", "Running"), what="short Scheduled")
        big = await eventually(
            lambda: phase_is("big", "Scheduled", "Running"), what="big Scheduled after a node was added"
        )
        assert big["unschedulableReasons"] == [] and big.get("nextRetryTime") is None
        assert await env.bound("big") == 4


async def test_behaviour_3_async_binding_race_never_leaves_a_bound_pod_unscheduled() -> None:
    """The first binding fails (injected 500) and the failure's PodScheduled=False patch is delayed,
    so the retried binding lands first: the strict patch gets 409 and writes nothing."""
    async with simulated_cluster(nodes=3, devices_per_node=0) as env, PodEvents(env.client) as pod_events:
        server = env.cluster.server
        server.faults.add(
            FaultRule(verb="create", resource="pods", subresource="binding", status=500, count=1)
        )
        server.faults.add(FaultRule(verb="patch", resource="pods", subresource="status", latency=1.0))
        await env.create(podgroup("race", 3))
        for i in range(3):
            await env.create(pod(f"race-{i}", "race"))

        await eventually(lambda: all_bound(env, "race", 3), what="all members bound")

        async def patch_answered() -> bool:
            return conflicts(env, "pods/status") >= 1

        await eventually(patch_answered, what="the delayed failure patch to be refused with 409")
        assert pod_events.events > 0
        assert pod_events.violations() == []
        bindings = env.operator.metrics.registry.get_sample_value(
            "lockstep_bindings_total", {"result": "bound"}
        )
        assert bindings == 3
        assert await env.invariant_violations() == []


async def test_behaviour_4_failed_claim_status_write_keeps_sharer_counts_right() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=2) as env:
        store = env.operator.core.resources  # type: ignore[union-attr]
        env.cluster.server.faults.add(
            FaultRule(verb="patch", resource="resourceclaims", subresource="status", status=500, count=1)
        )
        await env.create(claim("shared"))
        await env.create(podgroup("g", 4))
        for i in range(4):
            await env.create(pod(f"g-{i}", "g", claims=SHARED))

        await eventually(lambda: all_bound(env, "g", 4), what="the gang bound after the injected failure")
        final = await env.claim("shared")
        assert sorted(ref["name"] for ref in final["status"]["reservedFor"]) == [f"g-{i}" for i in range(4)]

        async def converged() -> bool:
            # Not poisoned: what the scheduler believes (assumed or informed) is what the API holds.
            cached = store.claims.get(f"{NAMESPACE}/shared")
            latest = await env.claim("shared")
            return (
                cached is not None
                and cached.metadata.resource_version == latest["metadata"]["resourceVersion"]
                and cached.status.allocation is not None
                and cached.status.allocation.model_dump(by_alias=True, exclude_none=True)["devices"][
                    "results"
                ]
                == latest["status"]["allocation"]["devices"]["results"]
            )

        await eventually(converged, what="the assume cache to match the API")
        assert len(store.in_flight) == 0
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE))["items"]
        in_api = devices_in_api(claims)
        held = {d.id for d in store.inventory.all_devices() if store.device_in_use(d.id)}
        assert held == in_api  # no device held by a leaked in-flight allocation
        assert await env.invariant_violations() == []


LIST_CONSTRAINT = [{"requests": ["gpu"], "matchAttribute": "gpu.sim.lockstep.dev/numaNodes"}]


async def test_behaviour_5_list_type_matchattribute_follows_the_feature_gate() -> None:
    gates = "DRAListTypeAttributes=true"  # the API server serves list attributes: numaNodes is published
    async with simulated_cluster(
        nodes=1, devices_per_node=2, start_operator=False, feature_gates=gates
    ) as env:
        await env.create(claim("pair", count=2, constraints=LIST_CONSTRAINT))
        await env.create(podgroup("numa", 1))
        await env.create(pod("numa-0", "numa", claims=[{"name": "gpu", "resourceClaimName": "pair"}]))

        await env.start_operator(operator_settings(feature_gates="DRAListTypeAttributes=false"))

        async def unschedulable() -> dict[str, Any]:
            status = await env.podgroup_status("numa")
            return status if status.get("phase") == "Unschedulable" else {}

        status = await eventually(unschedulable, what="Unschedulable without the gate")
        condition = next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert "numa-0" in condition["message"]
        assert [r["reason"] for r in status["unschedulableReasons"]] == ["InsufficientDevices"]
        # The reason names the claim, the constraint and the gate that would make it fit.
        message = condition["message"]
        assert 'claim acceptance/pair: constraint matchAttribute "gpu.sim.lockstep.dev/numaNodes"' in message
        assert "needs the DRAListTypeAttributes feature gate" in message
        # The per-cause breakdown carries the same explanation, not only a count.
        (devices,) = status["unschedulableReasons"]
        assert "needs the DRAListTypeAttributes feature gate" in devices["message"]
        assert not (await env.claim("pair")).get("status", {}).get("allocation")
        await env.stop_operators()

        await env.start_operator(operator_settings(feature_gates="DRAListTypeAttributes=true"))
        await eventually(lambda: all_bound(env, "numa", 1), what="bound with DRAListTypeAttributes=true")
        results = (await env.claim("pair"))["status"]["allocation"]["devices"]["results"]
        assert sorted(r["device"] for r in results) == ["gpu-0", "gpu-1"]
