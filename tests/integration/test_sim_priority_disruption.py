"""The simulated cluster's priority and disruption parts over HTTP: PriorityClasses and priority
admission, kubelets honouring a pod's grace period, the disruption controller and pods/eviction."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockstep.sim.cluster import SimCluster
from lockstep.sim.watching import ApiError, KubeHttp

NS = "prio"
PODS = f"/api/v1/namespaces/{NS}/pods"
PDBS = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets"
CLASSES = "/apis/scheduling.k8s.io/v1/priorityclasses"


async def eventually_true(probe: Any, what: str, seconds: float = 10.0) -> Any:
    deadline = time.monotonic() + seconds
    last = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}")


async def gone(http: KubeHttp, path: str) -> bool:
    try:
        await http.get(path)
    except ApiError as exc:
        if exc.status == 404:
            return True
        raise
    return False


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    # containers that ignore SIGTERM: a terminating pod stays for its whole grace period
    sim = SimCluster(nodes=2, devices_per_node=0, kubelet_start_delay=0.02, kubelet_delete_delay=None)
    await sim.start()
    try:
        await sim.http.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        yield sim
    finally:
        await sim.stop()


def pod(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"app": "guarded"}},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "automountServiceAccountToken": False,
            **spec,
        },
    }


async def running(http: KubeHttp, name: str, node: str = "node-000", **spec: Any) -> None:
    await http.create(PODS, pod(name, **spec))
    await http.create(f"{PODS}/{name}/binding", {"metadata": {"name": name}, "target": {"name": node}})

    async def ready() -> bool:
        return (await http.get(f"{PODS}/{name}"))["status"].get("phase") == "Running"

    await eventually_true(ready, f"{name} running")


async def test_priority_comes_from_the_class_and_the_global_default(cluster: SimCluster) -> None:
    http = cluster.http
    never = await http.create(
        CLASSES, {"metadata": {"name": "batch"}, "value": 10, "preemptionPolicy": "Never"}
    )
    assert never["preemptionPolicy"] == "Never" and never["metadata"]["generation"] == 1
    created = await http.create(PODS, pod("batch-0", priorityClassName="batch"))
    assert (created["spec"]["priority"], created["spec"]["preemptionPolicy"]) == (10, "Never")
    # a pod may repeat the computed values, not contradict them
    same = await http.create(PODS, pod("batch-1", priorityClassName="batch", priority=10))
    assert same["spec"]["priority"] == 10
    with pytest.raises(ApiError) as refused:
        await http.create(
            PODS, pod("batch-2", priorityClassName="batch", preemptionPolicy="PreemptLowerPriority")
        )
    assert refused.value.status == 403
    assert "the string value of PreemptionPolicy (PreemptLowerPriority) must not be provided" in str(
        refused.value.body
    )

    await http.create(CLASSES, {"metadata": {"name": "standard"}, "value": 100, "globalDefault": True})
    defaulted = await http.create(PODS, pod("plain"))
    assert defaulted["spec"]["priorityClassName"] == "standard"
    assert (defaulted["spec"]["priority"], defaulted["spec"]["preemptionPolicy"]) == (
        100,
        "PreemptLowerPriority",
    )
    with pytest.raises(ApiError) as second_default:
        await http.create(CLASSES, {"metadata": {"name": "other"}, "value": 1, "globalDefault": True})
    assert second_default.value.status == 403
    assert "PriorityClass standard is already marked as default" in str(second_default.value.body)

    with pytest.raises(ApiError) as immutable:
        await http.patch(f"{CLASSES}/standard", {"value": 101})
    assert immutable.value.status == 422
    assert "value: Forbidden: may not be changed in an update." in str(immutable.value.body)


async def test_a_bound_pod_stays_terminating_for_its_grace_period(cluster: SimCluster) -> None:
    http = cluster.http
    await running(http, "slow", terminationGracePeriodSeconds=1)
    started = time.monotonic()
    deleted = await http.delete(f"{PODS}/slow")
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 1
    await eventually_true(lambda: gone(http, f"{PODS}/slow"), "the pod to go")
    # Polled every 20 ms: gone earlier, it would be seen earlier (a fixed sleep and a look could
    # oversleep the grace period on a loaded machine).
    assert time.monotonic() - started >= 0.95, "the kubelet removed the pod before its grace period ended"

    # a second DELETE with a shorter grace period brings the removal forward
    await running(http, "shortened", terminationGracePeriodSeconds=30)
    await http.delete(f"{PODS}/shortened")
    await http.delete(f"{PODS}/shortened", {"gracePeriodSeconds": 1})
    await eventually_true(lambda: gone(http, f"{PODS}/shortened"), "the shortened pod to go", seconds=5)


async def test_eviction_respects_the_budget_the_disruption_controller_computes(cluster: SimCluster) -> None:
    http = cluster.http
    for name in ("a", "b"):
        await running(http, name, terminationGracePeriodSeconds=0)
    await http.create(
        PDBS,
        {
            "metadata": {"name": "guard"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}},
        },
    )

    async def observed() -> dict[str, Any] | None:
        status = (await http.get(f"{PDBS}/guard"))["status"]
        return status if status.get("observedGeneration") == 1 and status["currentHealthy"] == 2 else None

    status = await eventually_true(observed, "the PDB status")
    assert (status["expectedPods"], status["desiredHealthy"], status["disruptionsAllowed"]) == (2, 1, 1)
    assert status["conditions"][0]["reason"] == "SufficientPods"

    evicted = await http.create(
        f"{PODS}/a/eviction", {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "a"}}
    )
    assert evicted == {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}
    # At once, whatever the controller has seen yet: the eviction took the one disruption allowed.
    with pytest.raises(ApiError) as refused:
        await http.create(f"{PODS}/b/eviction", {"metadata": {"name": "b"}})
    assert refused.value.status == 429
    assert "The disruption budget guard needs 1 healthy pods" in str(refused.value.body)
    await eventually_true(lambda: gone(http, f"{PODS}/a"), "the evicted pod to go")

    async def settled() -> dict[str, Any] | None:
        status = (await http.get(f"{PDBS}/guard"))["status"]
        return status if status["expectedPods"] == 1 and "disruptedPods" not in status else None

    status = await eventually_true(settled, "the eviction to be confirmed")
    assert (status["currentHealthy"], status["disruptionsAllowed"]) == (1, 0)
    assert status["conditions"][0]["reason"] == "InsufficientPods"
    # The refusal quotes the budget's status: until the controller has seen a go, it says 2 healthy.
    with pytest.raises(ApiError) as refused:
        await http.create(f"{PODS}/b/eviction", {"metadata": {"name": "b"}})
    assert refused.value.status == 429
    assert "The disruption budget guard needs 1 healthy pods and has 1 currently" in str(refused.value.body)
    assert not await gone(http, f"{PODS}/b")


async def test_an_eviction_appends_disruption_target_after_the_pods_conditions(cluster: SimCluster) -> None:
    http = cluster.http
    await running(http, "kept", terminationGracePeriodSeconds=30)  # terminating for a while: readable
    before = [c["type"] for c in (await http.get(f"{PODS}/kept"))["status"]["conditions"]]
    assert "DisruptionTarget" not in before and before
    await http.create(f"{PODS}/kept/eviction", {"metadata": {"name": "kept"}})
    after = (await http.get(f"{PODS}/kept"))["status"]["conditions"]
    # kube-apiserver 1.36.2 (podutil.UpdatePodCondition): appended, the others keep their order
    assert [c["type"] for c in after] == [*before, "DisruptionTarget"]
    assert after[-1]["reason"] == "EvictionByEvictionAPI"
