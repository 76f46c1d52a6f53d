"""Topology levels and best fit on the emulator with the operator running, on lockstep's PodGroup and
on 1.37's v1beta1 PodGroup. Six nodes in racks of two: zone a holds racks 0 and 2, zone b rack 1."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.kube.client import NODES, PODS, UPSTREAM_POD_GROUPS

ZONE = "topology.kubernetes.io/zone"
RACK = "lockstep.dev/rack"


async def labels_of(env: Env, prefix: str) -> list[dict[str, str]]:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    nodes = [p["spec"].get("nodeName") for p in pods if p["metadata"]["name"].startswith(prefix)]
    if not nodes or not all(nodes):
        return []
    return [(await env.client.get(NODES, None, node))["metadata"]["labels"] for node in nodes]


async def placed(env: Env, prefix: str, count: int) -> list[dict[str, str]] | None:
    labels = await labels_of(env, prefix)
    return labels if len(labels) == count else None


async def test_a_two_level_gang_takes_the_rack_of_the_tightest_zone_so_a_wider_gang_still_fits() -> None:
    async with simulated_cluster(nodes=6, devices_per_node=0, zones=2, rack_size=2) as env:
        levels: list[dict[str, Any]] = [{"key": ZONE}, {"key": RACK, "mode": "Preferred"}]
        for name, size in (("pair", 2), ("quad", 4)):
            group = podgroup(name, size)
            group["spec"]["schedulingConstraints"] = {"topology": levels}
            await env.create(group)
            for i in range(size):
                await env.create(pod(f"{name}-{i}", name, cpu="20"))
            await eventually(lambda n=name, s=size: placed(env, f"{n}-", s), what=f"{name} bound")
        pair = await labels_of(env, "pair-")
        assert len({labels[RACK] for labels in pair}) == 1  # one rack, preferred
        assert {labels[ZONE] for labels in pair} == {"zone-b"}  # of the zone it fills exactly
        where = f"placed in {ZONE}=zone-b, {RACK}={pair[0][RACK]} (best fit: 0 member slots left over"

        async def scheduled_message() -> str:
            status = await env.podgroup_status("pair")
            condition = next(
                (c for c in status.get("conditions") or [] if c["type"] == "PodGroupScheduled"), {}
            )
            return condition.get("message", "") if condition.get("status") == "True" else ""

        assert where in await eventually(scheduled_message, what="pair's PodGroupScheduled condition")
        assert len({labels[ZONE] for labels in await labels_of(env, "quad-")}) == 1


async def test_a_v1beta1_gang_with_a_required_zone_goes_best_fit() -> None:
    async with simulated_cluster(
        nodes=6, devices_per_node=0, zones=2, rack_size=2, kube_version="1.37"
    ) as env:
        for name, size in (("pair", 2), ("quad", 4)):
            await env.client.create(
                UPSTREAM_POD_GROUPS,
                NAMESPACE,
                {
                    "apiVersion": UPSTREAM_POD_GROUPS.api_version,
                    "kind": "PodGroup",
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {
                        "schedulingPolicy": {"gang": {"minCount": size}},
                        "schedulingConstraints": {"topology": [{"key": ZONE}]},
                    },
                },
            )
            for i in range(size):
                member = pod(f"{name}-{i}", None, cpu="20")
                member["spec"]["schedulingGroup"] = {"podGroupName": name}
                await env.client.create(PODS, NAMESPACE, member)
            await eventually(lambda n=name, s=size: placed(env, f"{n}-", s), what=f"{name} bound")
        assert {labels[ZONE] for labels in await labels_of(env, "pair-")} == {"zone-b"}
        where = f"placed in {ZONE}=zone-b (best fit: 0 member slots left over, the fewest of the 2 domains"

        async def scheduled_message() -> str:
            pair = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "pair")
            conditions = (pair.get("status") or {}).get("conditions") or []
            condition = next((c for c in conditions if c["type"] == "PodGroupInitiallyScheduled"), {})
            return condition.get("message", "") if condition.get("status") == "True" else ""

        assert where in await eventually(
            scheduled_message, what="pair's PodGroupInitiallyScheduled condition"
        )
        assert {labels[ZONE] for labels in await labels_of(env, "quad-")} == {"zone-a"}
