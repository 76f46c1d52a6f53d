"""Capacity reservation and backfill, the whole operator against the simulated cluster over HTTP.

Three nodes of 4 allocatable cpus are kept full by a stream of 1-cpu pods that run a second or two
(``sim.lockstep.dev/run-seconds``) and are replaced as they finish; a gang of two 4-cpu pods needs two
empty nodes, which such a stream never leaves without a reservation.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import random
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, operator_settings, pod, podgroup, simulated_cluster

from lockstep.api.groups import RESERVATION_TIMEOUT_ANNOTATION as RESERVATION_TIMEOUT
from lockstep.explain import describe_reservation
from lockstep.kube.client import EVENTS, POD_GROUPS, PODS, UPSTREAM_POD_GROUPS, ResourceKind
from lockstep.scheduler.reservation import RESERVATION_ANNOTATION
from lockstep.sim.cluster import NodeShape
from lockstep.sim.workload import RUN_SECONDS

PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)
SHAPE = NodeShape(cpu_millis=4500, reserved_cpu_millis=500, memory_gi=18, reserved_memory_gi=2)
FILLER = "filler"


def _settings(**overrides: Any) -> Any:
    # No delay: the gang reserves at its first failure, before the stream can happen to leave it room.
    return operator_settings(reservation_delay_seconds=0.0, **overrides)


@contextlib.asynccontextmanager
async def busy_cluster(
    *, nodes: int = 3, kinds: tuple[Kind, ...] = (((1.0, 2.0), None),), **settings: Any
) -> AsyncIterator[tuple[Env, Stream]]:
    async with simulated_cluster(nodes=nodes, shape=SHAPE, settings=_settings(**settings)) as env:
        stream = Stream(env, 4 * nodes, kinds)
        await stream.fill()
        task = asyncio.create_task(stream.run())
        try:
            yield env, stream
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


Kind = tuple[tuple[float, float], int | None]  # (run seconds from, to), activeDeadlineSeconds


class Stream:
    """Keeps ``size`` 1-cpu filler pods alive: finished ones are deleted and replaced. Each new pod is
    of the next kind in turn."""

    def __init__(self, env: Env, size: int, kinds: tuple[Kind, ...]) -> None:
        self.env = env
        self.size = size
        self.kinds = itertools.cycle(kinds)
        self.names = itertools.count()
        self.random = random.Random(7)

    def manifest(self) -> dict[str, Any]:
        manifest = pod(f"{FILLER}-{next(self.names)}", cpu="1", memory="64Mi")
        manifest["metadata"]["labels"]["app"] = FILLER
        run, deadline = next(self.kinds)
        manifest["metadata"]["annotations"] = {RUN_SECONDS: f"{self.random.uniform(*run):.2f}"}
        manifest["spec"]["restartPolicy"] = "Never"
        manifest["spec"]["terminationGracePeriodSeconds"] = 0
        if deadline is not None:
            manifest["spec"]["activeDeadlineSeconds"] = deadline
        return manifest

    async def fillers(self) -> list[dict[str, Any]]:
        listed = await self.env.client.list(PODS, NAMESPACE, label_selector=f"app={FILLER}")
        return list(listed.get("items") or [])

    async def fill(self) -> None:
        for _ in range(self.size):
            await self.env.create(self.manifest())
        await eventually(self._all_bound, what="the fillers bound")

    async def _all_bound(self) -> bool:
        return sum(1 for p in await self.fillers() if p["spec"].get("nodeName")) >= self.size

    async def run(self) -> None:
        while True:
            live = 0
            for item in await self.fillers():
                if item["status"].get("phase") in ("Succeeded", "Failed"):
                    with contextlib.suppress(Exception):
                        await self.env.client.delete(PODS, NAMESPACE, item["metadata"]["name"])
                elif not item["metadata"].get("deletionTimestamp"):
                    live += 1
            for _ in range(self.size - live):
                await self.env.create(self.manifest())
            await asyncio.sleep(0.1)


def big_gang(name: str = "big", size: int = 2, **spec: Any) -> list[dict[str, Any]]:
    group = podgroup(name, size)
    group["spec"].update(spec)
    return [group] + [pod(f"{name}-{i}", name, cpu="4", memory="64Mi") for i in range(size)]


async def create_all(env: Env, objects: list[dict[str, Any]]) -> None:
    for obj in objects:
        await env.create(obj)


async def reservation(env: Env, name: str = "big") -> dict[str, Any]:
    return dict((await env.podgroup_status(name)).get("reservation") or {})


async def events(env: Env, reason: str, name: str | None = None) -> list[dict[str, Any]]:
    items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e for e in items if e.get("reason") == reason and name in (None, e["involvedObject"].get("name"))]


def when(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


async def test_a_starved_gang_reserves_binds_and_small_pods_keep_binding_elsewhere() -> None:
    async with busy_cluster() as (env, stream):
        await create_all(env, big_gang())
        held = await eventually(lambda: reservation(env), within=20, what="a reservation in the status")
        nodes = {node["name"] for node in held["nodes"]}
        assert len(nodes) == 2 and held["timeoutSeconds"] == 600
        assert all(node["resources"]["cpu"] == "4" for node in held["nodes"])
        explained = "\n".join(describe_reservation(await env.client.get(POD_GROUPS, NAMESPACE, "big")))
        assert "reservation (capacity held for this gang):" in explained
        assert all(f"{node}: holds cpu 4" in explained for node in nodes)
        (reserving,) = await events(env, "Reserving", "big")
        assert "capacity held on 2 nodes" in reserving["message"]
        metrics = env.operator.metrics.render().decode()
        assert "lockstep_reservations 1.0" in metrics
        assert 'lockstep_reserved_capacity{resource="cpu"} 8000.0' in metrics

        async def bound_elsewhere() -> bool:
            return any(
                p["spec"].get("nodeName") not in (None, *nodes)
                and int(p["metadata"]["name"].split("-")[1]) > 12
                for p in await stream.fillers()
            )

        await eventually(bound_elsewhere, within=10, what="a new small pod bound on the node not held")

        async def told_why() -> bool:  # the pods' conditions say it too, but are rewritten at each attempt
            return any(
                "capacity held for gang acceptance/big" in e.get("message", "")
                for e in await events(env, "FailedScheduling")
                if e["involvedObject"].get("name", "").startswith(FILLER)
            )

        await eventually(told_why, within=10, what="a small pod told the capacity is held")
        await eventually(lambda: _bound(env, "big", 2), within=30, what="the gang bound")
        assert {p["spec"]["nodeName"] for p in await env.pods("big")} == nodes
        await eventually(lambda: events(env, "ReservationReleased", "big"), what="ReservationReleased")
        await eventually(lambda: _cleared(env), what="status.reservation cleared")


async def test_a_restarted_operator_keeps_the_reservation_it_finds_in_the_status() -> None:
    async with busy_cluster() as (env, stream):
        await create_all(env, big_gang())
        held = await eventually(lambda: reservation(env), within=20, what="a reservation in the status")
        nodes = {node["name"] for node in held["nodes"]}
        await env.stop_operators()
        assert (await reservation(env))["since"] == held["since"]  # recorded, not only in memory
        restarted_at = max(int(p["metadata"]["name"].split("-")[1]) for p in await stream.fillers())
        await env.start_operator(_settings())

        async def no_filler_on_held_nodes() -> bool:
            newer = [
                p
                for p in await stream.fillers()
                if int(p["metadata"]["name"].split("-")[1]) > restarted_at
                and p["spec"].get("nodeName") in nodes
            ]
            assert newer == [], (
                f"the restarted operator put {[p['metadata']['name'] for p in newer]} on held nodes"
            )
            return await _bound(env, "big", 2)

        await eventually(no_filler_on_held_nodes, within=30, what="the gang bound after the restart")
        assert {p["spec"]["nodeName"] for p in await env.pods("big")} == nodes
        assert len(await events(env, "Reserving", "big")) == 1  # restored, not made again


async def test_backfill_uses_held_capacity_only_for_pods_that_end_before_the_gang_can_fit() -> None:
    # long pods (2 to 4 s, deadline 8) make the expected completion; short ones (deadline 1) backfill
    async with busy_cluster(kinds=(((2.0, 4.0), 8), ((0.3, 0.6), 1))) as (env, stream):
        await create_all(env, big_gang())
        held = await eventually(lambda: reservation(env), within=20, what="a reservation in the status")
        nodes = {node["name"] for node in held["nodes"]}
        expected = when(held["expectedCompletion"])
        assert held["podsWithoutDeadline"] == 0
        since = when(held["since"])
        backfilled: dict[str, dict[str, Any]] = {}

        async def gang_bound() -> bool:
            for p in await stream.fillers():
                started = p["status"].get("startTime")
                if p["spec"].get("nodeName") in nodes and started and when(started) > since + 0.5:
                    backfilled[p["metadata"]["name"]] = p
            return await _bound(env, "big", 2)

        await eventually(gang_bound, within=30, what="the gang bound")
        assert backfilled, "no pod was backfilled on the held nodes"
        for name, p in backfilled.items():
            end = when(p["status"]["startTime"]) + p["spec"]["activeDeadlineSeconds"]
            assert end <= expected + 1.0, (
                f"{name} backfilled beyond the expected completion"
            )  # startTime is whole seconds
        assert "lockstep_backfilled_pods_total" in env.operator.metrics.render().decode()


async def test_a_higher_priority_pod_takes_held_capacity_an_equal_one_does_not() -> None:
    async with busy_cluster() as (env, _):
        for name, value in (("high", 1000),):
            await env.client.create(PRIORITY_CLASSES, None, {"metadata": {"name": name}, "value": value})
        await create_all(env, big_gang())
        held = await eventually(lambda: reservation(env), within=20, what="a reservation in the status")
        node = sorted(n["name"] for n in held["nodes"])[0]
        for name, priority_class in (("urgent", "high"), ("peer", None)):
            manifest = pod(name, cpu="1", memory="64Mi")
            manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
            if priority_class:
                manifest["spec"]["priorityClassName"] = priority_class
            await env.create(manifest)
        urgent = await eventually(lambda: _node_of(env, "urgent"), within=10, what="the urgent pod bound")
        assert urgent == node
        assert await _node_of(env, "peer") in ("", node)  # only once the gang has bound and left room


async def test_a_reservation_times_out_and_goes_to_the_next_gang_a_parked_one_never_reserves() -> None:
    async with busy_cluster(kinds=(((600.0, 600.0), None),)) as (env, _):  # nothing ever finishes
        await create_all(env, big_gang("first", reservation={"timeoutSeconds": 2}))
        await eventually(lambda: reservation(env, "first"), within=10, what="the first gang's reservation")
        await create_all(env, big_gang("second"))
        await create_all(env, [podgroup("huge", 1), pod("huge-0", "huge", cpu="5")])  # larger than any node
        await eventually(lambda: events(env, "ReservationTimedOut", "first"), within=10, what="a timeout")
        await eventually(lambda: reservation(env, "second"), within=10, what="the second gang's reservation")
        assert await reservation(env, "huge") == {}
        assert await events(env, "Reserving", "huge") == []


async def _bound(env: Env, group: str, count: int) -> bool:
    return await env.bound(group) >= count


async def _cleared(env: Env) -> bool:
    return not await reservation(env)


async def _node_of(env: Env, name: str) -> str:
    return str((await env.client.get(PODS, NAMESPACE, name))["spec"].get("nodeName") or "")


async def test_an_upstream_gang_records_its_reservation_in_an_annotation_and_keeps_it_over_a_restart() -> (
    None
):
    async with busy_cluster() as (env, _):
        await env.client.create(
            UPSTREAM_POD_GROUPS,
            NAMESPACE,
            {
                "apiVersion": UPSTREAM_POD_GROUPS.api_version,
                "kind": "PodGroup",
                "metadata": {
                    "name": "up",
                    "namespace": NAMESPACE,
                    "annotations": {RESERVATION_TIMEOUT: "120"},
                },
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            },
        )
        for i in range(2):
            manifest = pod(f"up-{i}", cpu="4", memory="64Mi")
            manifest["spec"]["schedulingGroup"] = {"podGroupName": "up"}
            await env.create(manifest)

        async def recorded() -> dict[str, Any]:
            group = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "up")
            value = (group["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION)
            return json.loads(value) if value else {}

        held = await eventually(recorded, within=10, what="the reservation annotation")
        assert held["timeoutSeconds"] == 120 and len(held["nodes"]) == 2
        await env.stop_operators()
        await env.start_operator(_settings())
        await eventually(lambda: _bound_upstream(env), within=30, what="the upstream gang bound")
        assert {
            p["spec"]["nodeName"] for p in await env.pods() if p["metadata"]["name"].startswith("up-")
        } == {n["name"] for n in held["nodes"]}
        await eventually(lambda: _not_recorded(recorded), what="the annotation removed")


async def _bound_upstream(env: Env) -> bool:
    return (
        sum(
            1
            for p in await env.pods()
            if p["metadata"]["name"].startswith("up-") and p["spec"].get("nodeName")
        )
        == 2
    )


async def _not_recorded(recorded: Any) -> bool:
    return not await recorded()
