"""Placement parity with kube-scheduler's default plugins, gang-aware, on the emulator with the
operator running: pod anti-affinity, topology spread, host ports, and refused pod fields."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import NODES, PODS

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"


def member(name: str, group: str | None, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body = pod(name, group, cpu="100m")
    body["metadata"]["labels"].update(labels or {})
    body["spec"].update(spec)
    return body


def one_per_node(app: str) -> dict[str, Any]:
    term = {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": HOST}
    return {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}


async def phase(env: Env, name: str, *phases: str) -> dict[str, Any]:
    status = await env.podgroup_status(name)
    return status if status.get("phase") in phases else {}


async def nodes_of(env: Env, group: str | None = None, names: tuple[str, ...] = ()) -> list[str]:
    pods = await env.pods(group) if group else [p for p in await env.pods() if p["metadata"]["name"] in names]
    return [p["spec"].get("nodeName", "") for p in pods]


def scheduled_condition(obj: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in obj["status"].get("conditions", []) if c["type"] == "PodScheduled")


async def test_a_one_per_node_gang_spreads_or_is_unschedulable_with_the_reason() -> None:
    async with simulated_cluster(nodes=3, devices_per_node=0) as env:
        await env.create(podgroup("spread", 3))
        for i in range(3):
            await env.create(
                member(f"spread-{i}", "spread", {"app": "spread"}, affinity=one_per_node("spread"))
            )
        await eventually(lambda: phase(env, "spread", "Scheduled", "Running"), what="spread Scheduled")
        placed = await nodes_of(env, "spread")
        assert len(set(placed)) == 3 and all(placed)

        await env.create(podgroup("crowd", 4))
        for i in range(4):
            await env.create(member(f"crowd-{i}", "crowd", {"app": "crowd"}, affinity=one_per_node("crowd")))
        crowd = await eventually(lambda: phase(env, "crowd", "Unschedulable"), what="crowd Unschedulable")
        reasons = {r["reason"]: r for r in crowd["unschedulableReasons"]}
        assert "PodAntiAffinityRulesNotMatch" in reasons, crowd
        assert "InterPodAffinity" in reasons["PodAntiAffinityRulesNotMatch"]["message"]
        condition = next(c for c in crowd["conditions"] if c["type"] == "PodGroupScheduled")
        assert "node(s) didn't match pod anti-affinity rules" in condition["message"]
        assert await env.bound("crowd") == 0
        assert await env.invariant_violations() == []


async def test_a_gang_spreads_over_three_zones_with_max_skew_one() -> None:
    async with simulated_cluster(nodes=6, devices_per_node=0, zones=3, rack_size=1) as env:
        constraint = {
            "maxSkew": 1,
            "topologyKey": ZONE,
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"app": "trainer"}},
        }
        await env.create(podgroup("trainer", 6))
        for i in range(6):
            await env.create(
                member(f"trainer-{i}", "trainer", {"app": "trainer"}, topologySpreadConstraints=[constraint])
            )
        await eventually(lambda: phase(env, "trainer", "Scheduled", "Running"), what="trainer Scheduled")
        nodes = {n["metadata"]["name"]: n for n in (await env.client.list(NODES))["items"]}
        zones = sorted(nodes[name]["metadata"]["labels"][ZONE] for name in await nodes_of(env, "trainer"))
        assert len(set(zones)) == 3 and all(zones.count(z) == 2 for z in set(zones)), zones


async def test_host_ports_conflict_within_a_gang_and_against_bound_pods() -> None:
    port = [{"containerPort": 8080, "hostPort": 8080, "protocol": "TCP"}]

    def with_port(name: str, group: str | None) -> dict[str, Any]:
        body = member(name, group)
        body["spec"]["containers"][0]["ports"] = port
        return body

    async with simulated_cluster(nodes=3, devices_per_node=0) as env:
        await env.create(with_port("web", None))

        async def web_bound() -> list[str]:
            found = await nodes_of(env, names=("web",))
            return found if all(found) else []

        web_node = (await eventually(web_bound, what="web bound"))[0]
        await env.create(podgroup("pair", 2))
        for i in range(2):
            await env.create(with_port(f"pair-{i}", "pair"))
        await eventually(lambda: phase(env, "pair", "Scheduled", "Running"), what="pair Scheduled")
        pair = await nodes_of(env, "pair")
        assert len(set(pair)) == 2 and web_node not in pair

        await env.create(podgroup("late", 1))
        await env.create(with_port("late-0", "late"))
        late = await eventually(lambda: phase(env, "late", "Unschedulable"), what="late Unschedulable")
        assert {r["reason"] for r in late["unschedulableReasons"]} == {"HostPortConflict"}
        assert await env.bound("late") == 0


async def test_an_unsupported_field_is_refused_and_named() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        await env.create(podgroup("inline", 2))
        await env.create(member("inline-0", "inline"))
        volume = {"name": "scratch", "csi": {"driver": "scratch.example.com"}}
        await env.create(member("inline-1", "inline", volumes=[volume]))
        status = await eventually(lambda: phase(env, "inline", "Unschedulable"), what="inline Unschedulable")
        reasons = {r["reason"] for r in status["unschedulableReasons"]}
        assert "UnsupportedPodSpec" in reasons, status
        condition = next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")
        assert "spec.volumes[0].csi is not supported" in condition["message"]

        async def refused() -> dict[str, Any]:
            refused_pod = await env.client.get(PODS, NAMESPACE, "inline-1")
            conditions = refused_pod["status"].get("conditions", [])
            return refused_pod if any(c["type"] == "PodScheduled" for c in conditions) else {}

        refused_pod = await eventually(refused, what="inline-1 PodScheduled=False")
        condition = scheduled_condition(refused_pod)
        assert (condition["status"], condition["reason"]) == ("False", "UnsupportedPodSpec")
        assert "spec.volumes[0].csi" in condition["message"]
        assert await env.bound("inline") == 0
