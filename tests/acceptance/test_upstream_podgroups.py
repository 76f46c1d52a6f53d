"""lockstep as a drop-in scheduler for upstream's scheduling.k8s.io/v1alpha2 PodGroups, against the
emulator (which serves them like a 1.36 cluster with GenericWorkload) with the operator running."""

from __future__ import annotations

from typing import Any

from acceptance_harness import DEVICE_CLASS, NAMESPACE, Env, eventually, simulated_cluster

from lockstep.kube.client import NODES, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS, UPSTREAM_POD_GROUPS

ZONE = "topology.kubernetes.io/zone"


def upstream_podgroup(name: str, min_count: int, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
    }


def member(name: str, group: str, cpu: str = "500m") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "schedulerName": "lockstep",
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
        },
    }


async def create_gang(env: Env, name: str, min_count: int, pods: int, cpu: str = "500m", **spec: Any) -> None:
    await env.client.create(UPSTREAM_POD_GROUPS, NAMESPACE, upstream_podgroup(name, min_count, **spec))
    for i in range(pods):
        await env.client.create(PODS, NAMESPACE, member(f"{name}-{i}", name, cpu))


async def bound(env: Env, prefix: str) -> int:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return sum(
        1 for p in pods if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
    )


async def scheduled_condition(env: Env, name: str) -> dict[str, Any] | None:
    group = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, name)
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "PodGroupScheduled"), None)


async def test_an_upstream_gang_that_fits_is_bound_and_its_condition_is_scheduled() -> None:
    async with simulated_cluster() as env:
        await create_gang(env, "trainer", 3, 3)
        await eventually(lambda: _equals(bound(env, "trainer"), 3), what="3 members bound")
        condition = await eventually(lambda: scheduled_condition(env, "trainer"), what="PodGroupScheduled")
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")


async def _equals(value: Any, expected: Any) -> bool:
    return await value == expected


async def test_an_upstream_gang_short_of_pods_waits_naming_the_missing_count() -> None:
    async with simulated_cluster() as env:
        await create_gang(env, "short", 4, 3)

        async def waiting() -> dict[str, Any] | None:
            condition = await scheduled_condition(env, "short")
            return condition if condition and "1 missing" in condition["message"] else None

        condition = await eventually(waiting, what="PodGroupScheduled=False naming the missing pod")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == "waiting for pods: 3 of minCount 4 present, 1 missing"
        assert await bound(env, "short") == 0


async def test_an_upstream_podgroup_template_claim_is_generated_allocated_and_reserved_for_the_group() -> (
    None
):
    async with simulated_cluster() as env:
        template = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "one-gpu", "namespace": NAMESPACE},
            "spec": {
                "spec": {
                    "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}
                }
            },
        }
        await env.client.create(RESOURCE_CLAIM_TEMPLATES, NAMESPACE, template)
        entry = [{"name": "shared", "resourceClaimTemplateName": "one-gpu"}]
        await create_gang(env, "dra", 2, 2, resourceClaims=entry)
        await eventually(lambda: _equals(bound(env, "dra"), 2), what="both members bound")
        group = await env.client.get(UPSTREAM_POD_GROUPS, NAMESPACE, "dra")
        (status,) = group["status"]["resourceClaimStatuses"]
        claim = await env.client.get(RESOURCE_CLAIMS, NAMESPACE, status["resourceClaimName"])
        # made by the cluster's resourceclaim controller (owned by the PodGroup), not by lockstep
        (owner,) = claim["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["uid"]) == ("PodGroup", group["metadata"]["uid"])
        assert claim["status"]["allocation"]["devices"]["results"]
        assert claim["status"]["reservedFor"] == [
            {
                "apiGroup": "scheduling.k8s.io",
                "resource": "podgroups",
                "name": "dra",
                "uid": group["metadata"]["uid"],
            }
        ]
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE)).get("items") or []
        assert len(claims) == 1


async def test_required_topology_fits_in_one_zone_and_is_refused_across_zones() -> None:
    # 4 nodes in 2 zones, each member takes most of a node: 3 members fit only across zones
    async with simulated_cluster(nodes=4, zones=2, rack_size=1) as env:
        topology = {"topology": [{"key": ZONE}]}
        await create_gang(env, "wide", 3, 3, cpu="20", schedulingConstraints=topology)

        async def refused() -> dict[str, Any] | None:
            condition = await scheduled_condition(env, "wide")
            return condition if condition and "no single domain fits" in condition["message"] else None

        condition = await eventually(refused, what="no single domain fits")
        assert condition["reason"] == "Unschedulable"
        assert condition["message"].count(f"{ZONE}=") == 2  # both domains tried, each named
        assert await bound(env, "wide") == 0

        await create_gang(env, "fits", 2, 2, cpu="20", schedulingConstraints=topology)
        await eventually(lambda: _equals(bound(env, "fits"), 2), what="the gang bound")
        pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
        nodes = [p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("fits-")]
        zones = {(await env.client.get(NODES, None, node))["metadata"]["labels"][ZONE] for node in nodes}
        assert len(zones) == 1
