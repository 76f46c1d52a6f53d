"""Property tests over random clusters and groups: whatever the cluster and whatever fails, the
scheduler never binds a gang below minCount in a cycle, never overcommits a node, never binds a
pod twice, and pairs every Reserve with exactly one Unreserve or one binding."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import MemoryPodAPI, RecordingPlugin, gang, make_node, make_pod, make_scheduler, settle

from lockstep.scheduler.framework import Code, PodGroupInfo
from lockstep.scheduler.ports import BindOutcome, BindResult
from lockstep.scheduler.scheduler import Scheduler

ZONE = "topology.kubernetes.io/zone"

node_st = st.fixed_dictionaries(
    {
        "cpu": st.integers(1, 16).map(lambda n: f"{n * 500}m"),
        "memory": st.integers(1, 16).map(lambda n: f"{n}Gi"),
        "pods": st.integers(1, 8),
        "zone": st.sampled_from(["a", "b"]),
        "tainted": st.booleans(),
    }
)
pod_st = st.fixed_dictionaries(
    {
        "cpu": st.integers(1, 40).map(lambda n: f"{n * 100}m"),
        "memory": st.integers(1, 16).map(lambda n: f"{n * 512}Mi"),
        "tolerates": st.booleans(),
        "zone": st.sampled_from([None, None, "a", "b"]),
    }
)
group_st = st.tuples(
    st.lists(pod_st, min_size=1, max_size=6), st.integers(0, 6)
)  # (pods, minCount; 0: basic)
cluster_st = st.tuples(st.lists(node_st, min_size=1, max_size=8), st.lists(group_st, min_size=1, max_size=5))


def _build(
    nodes: list[dict[str, Any]], groups: list[tuple[list[dict[str, Any]], int]], **kwargs: Any
) -> tuple[Scheduler, MemoryPodAPI, RecordingPlugin, dict[str, PodGroupInfo | None]]:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder], **kwargs)
    for i, spec in enumerate(nodes):
        taints = [{"key": "t", "effect": "NoSchedule"}] if spec["tainted"] else []
        cache.upsert_node(
            make_node(
                f"n{i}",
                cpu=spec["cpu"],
                memory=spec["memory"],
                pods=spec["pods"],
                labels={ZONE: spec["zone"]},
                taints=taints,
            )
        )
    infos: dict[str, PodGroupInfo | None] = {}
    for g, (pods, min_count) in enumerate(groups):
        name = f"g{g}"
        info = gang(name, min(min_count, len(pods))) if min_count else None
        infos[name] = info
        if info is not None:
            cache.upsert_podgroup(info)
        for p, spec in enumerate(pods):
            extra: dict[str, Any] = {}
            if spec["tolerates"]:
                extra["tolerations"] = [{"key": "t", "operator": "Exists"}]
            if spec["zone"]:
                extra["nodeSelector"] = {ZONE: spec["zone"]}
            api.add(
                make_pod(
                    f"{name}-{p}",
                    cpu=spec["cpu"],
                    memory=spec["memory"],
                    group=name if info else None,
                    **extra,
                )
            )
    return scheduler, api, recorder, infos


async def _run_rounds(scheduler: Scheduler, rounds: int = 4) -> None:
    for _ in range(rounds):
        await settle(scheduler)
        scheduler.clock.advance(70)  # type: ignore[attr-defined]
    await settle(scheduler)


def _check_no_overcommit(scheduler: Scheduler, api: MemoryPodAPI) -> None:
    """Bound pods (in the API) plus pods still reserved in a binding cycle fit their nodes, and the
    cache counts exactly those."""
    usage: dict[str, Counter[str]] = {}
    for pod in api.pods.values():
        node_name = pod.node_name or scheduler.cache.assumed_node(pod.uid)
        if node_name:
            counter = usage.setdefault(node_name, Counter())
            counter.update(pod.requests)
            counter["pods"] += 1
    for node_name, used in usage.items():
        allocatable = scheduler.cache.nodes[node_name].allocatable
        for resource, amount in used.items():
            assert amount <= allocatable.get(resource, 0), f"{node_name} overcommitted on {resource}"
        node = scheduler.cache.nodes[node_name]
        assert node.pod_count == used["pods"]  # the cache agrees with the API
        assert node.requested.get("cpu", 0) == used["cpu"]


def _check_success_attempts_reach_min_count(
    scheduler: Scheduler, infos: dict[str, PodGroupInfo | None]
) -> None:
    for key, attempt in scheduler.attempts.items():
        info = infos.get(key.name)
        if info is not None and attempt.code is Code.SUCCESS:
            assert attempt.scheduled >= info.min_count


async def _property_without_failures(nodes: Any, groups: Any) -> None:
    scheduler, api, recorder, infos = _build(nodes, groups)
    await _run_rounds(scheduler)
    _check_no_overcommit(scheduler, api)
    _check_success_attempts_reach_min_count(scheduler, infos)
    assert all(n == 1 for n in Counter(pod for pod, _ in api.bind_calls).values()), "a pod was bound twice"
    for name, info in infos.items():
        bound = sum(1 for p in api.pods.values() if p.name.startswith(f"{name}-") and p.node_name)
        if info is not None:
            assert bound == 0 or bound >= info.min_count, f"{name}: {bound} bound, minCount {info.min_count}"
    for pod in api.pods.values():
        reserves = recorder.reserved.count(pod.name)
        assert reserves == recorder.releases(pod.name) + (1 if pod.node_name else 0)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=cluster_st)
def test_random_clusters_respect_gangs_capacity_and_single_binding(cluster: Any) -> None:
    asyncio.run(_property_without_failures(*cluster))


async def _property_with_failures(nodes: Any, groups: Any, failures: list[int]) -> None:
    scheduler, api, recorder, infos = _build(nodes, groups)
    outcomes = {
        0: BindOutcome(BindResult.ERROR, "500"),
        1: BindOutcome(BindResult.CONFLICT, "409"),
        2: BindOutcome(BindResult.NOT_FOUND),
    }
    api.inject_bind.extend(outcomes[f] for f in failures)
    recorder.fail_pre_bind.update(f"g{i % max(len(groups), 1)}-0" for i in failures[:1])
    await _run_rounds(scheduler)
    _check_no_overcommit(scheduler, api)
    _check_success_attempts_reach_min_count(scheduler, infos)
    await scheduler.close()  # members still waiting at Permit give their reservations back
    await asyncio.sleep(0)
    for pod in api.pods.values():
        reserves = recorder.reserved.count(pod.name)
        assert reserves == recorder.releases(pod.name) + (1 if pod.node_name else 0), pod.name
        assert not scheduler.cache.is_assumed(pod.uid)
    assert len(scheduler.waiting) == 0


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cluster=cluster_st, failures=st.lists(st.integers(0, 2), max_size=4))
def test_random_failures_release_every_reservation_exactly_once(cluster: Any, failures: list[int]) -> None:
    asyncio.run(_property_with_failures(*cluster, failures))
