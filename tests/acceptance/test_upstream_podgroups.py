"""lockstep as a drop-in scheduler for upstream's scheduling.k8s.io PodGroups, against the emulator
with the operator running: each upstream case runs on a 1.37 cluster (v1beta1) and on a 1.36 cluster
(v1alpha2, GenericWorkload), the same behaviour under each version's names."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from acceptance_harness import DEVICE_CLASS, NAMESPACE, Env, eventually, pod, simulated_cluster

from lockstep import POD_GROUP_LABEL
from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION
from lockstep.kube.client import (
    EVENTS,
    NODES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    UPSTREAM_POD_GROUPS,
    UPSTREAM_POD_GROUPS_V1ALPHA2,
    ApiError,
    PatchType,
    ResourceKind,
)

ZONE = "topology.kubernetes.io/zone"


@dataclass(frozen=True)
class Shape:
    """One Kubernetes version's Workload API: the emulator's version, the PodGroup kind it serves and
    the condition kube-scheduler of that version writes."""

    kube_version: str
    kind: ResourceKind
    condition_type: str

    def podgroup(self, name: str, min_count: int, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": self.kind.api_version,
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, **spec},
        }


SHAPES = (
    Shape("1.37", UPSTREAM_POD_GROUPS, "PodGroupInitiallyScheduled"),
    Shape("1.36", UPSTREAM_POD_GROUPS_V1ALPHA2, "PodGroupScheduled"),
)


@pytest.fixture(params=SHAPES, ids=lambda shape: shape.kind.api_version)
def shape(request: pytest.FixtureRequest) -> Shape:
    return request.param  # type: ignore[no-any-return]


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


async def create_gang(
    env: Env, shape: Shape, name: str, min_count: int, pods: int, cpu: str = "500m", **spec: Any
) -> None:
    await env.client.create(shape.kind, NAMESPACE, shape.podgroup(name, min_count, **spec))
    for i in range(pods):
        await env.client.create(PODS, NAMESPACE, member(f"{name}-{i}", name, cpu))


async def bound(env: Env, prefix: str) -> int:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return sum(
        1 for p in pods if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
    )


async def scheduled_condition(env: Env, shape: Shape, name: str) -> dict[str, Any] | None:
    group = await env.client.get(shape.kind, NAMESPACE, name)
    conditions = (group.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == shape.condition_type), None)


async def test_an_upstream_gang_that_fits_is_bound_and_its_condition_is_scheduled(shape: Shape) -> None:
    async with simulated_cluster(kube_version=shape.kube_version) as env:
        await create_gang(env, shape, "trainer", 3, 3)
        await eventually(lambda: _equals(bound(env, "trainer"), 3), what="3 members bound")
        condition = await eventually(
            lambda: scheduled_condition(env, shape, "trainer"), what=shape.condition_type
        )
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")


async def _equals(value: Any, expected: Any) -> bool:
    return await value == expected


async def test_an_upstream_gang_short_of_pods_waits_naming_the_missing_count(shape: Shape) -> None:
    async with simulated_cluster(kube_version=shape.kube_version) as env:
        await create_gang(env, shape, "short", 4, 3)

        async def waiting() -> dict[str, Any] | None:
            condition = await scheduled_condition(env, shape, "short")
            return condition if condition and "1 missing" in condition["message"] else None

        condition = await eventually(waiting, what="the condition False naming the missing pod")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == "waiting for pods: 3 of minCount 4 present, 1 missing"
        assert await bound(env, "short") == 0


async def test_an_upstream_podgroup_template_claim_is_generated_allocated_and_reserved_for_the_group(
    shape: Shape,
) -> None:
    async with simulated_cluster(kube_version=shape.kube_version) as env:
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
        await create_gang(env, shape, "dra", 2, 2, resourceClaims=entry)
        await eventually(lambda: _equals(bound(env, "dra"), 2), what="both members bound")
        group = await env.client.get(shape.kind, NAMESPACE, "dra")
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


async def test_required_topology_fits_in_one_zone_and_is_refused_across_zones(shape: Shape) -> None:
    # 4 nodes in 2 zones, each member takes most of a node: 3 members fit only across zones
    async with simulated_cluster(nodes=4, zones=2, rack_size=1, kube_version=shape.kube_version) as env:
        topology = {"topology": [{"key": ZONE}]}
        await create_gang(env, shape, "wide", 3, 3, cpu="20", schedulingConstraints=topology)

        async def refused() -> dict[str, Any] | None:
            condition = await scheduled_condition(env, shape, "wide")
            return condition if condition and "no single domain fits" in condition["message"] else None

        condition = await eventually(refused, what="no single domain fits")
        assert condition["reason"] == "Unschedulable"
        assert condition["message"].count(f"{ZONE}=") == 2  # both domains tried, each named
        assert await bound(env, "wide") == 0

        await create_gang(env, shape, "fits", 2, 2, cpu="20", schedulingConstraints=topology)
        await eventually(lambda: _equals(bound(env, "fits"), 2), what="the gang bound")
        pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
        nodes = [p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("fits-")]
        zones = {(await env.client.get(NODES, None, node))["metadata"]["labels"][ZONE] for node in nodes}
        assert len(zones) == 1


JOBS = ResourceKind("batch", "v1", "jobs", "Job")


def job(name: str, parallelism: int, min_count: str, *, gates: list[str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "lockstep",
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "500m"}}}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "completionMode": "Indexed",
            "template": {
                "metadata": {
                    "labels": {POD_GROUP_LABEL: name},
                    "annotations": {MIN_COUNT_ANNOTATION: min_count},
                },
                "spec": spec,
            },
        },
    }


async def test_a_job_with_the_two_template_lines_binds_as_a_gang_in_a_podgroup_it_owns() -> None:
    async with simulated_cluster() as env:
        created = await env.client.create(JOBS, NAMESPACE, job("trainer", 3, "3"))
        await eventually(lambda: _equals(env.bound("trainer"), 3), what="the Job's 3 pods bound")
        group = await env.client.get(POD_GROUPS, NAMESPACE, "trainer")
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
        (owner,) = group["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("Job", "trainer", created["metadata"]["uid"])


async def test_a_job_short_of_pods_waits_naming_the_missing_count() -> None:
    async with simulated_cluster() as env:
        await env.client.create(JOBS, NAMESPACE, job("short", 2, "3"))

        async def waiting() -> dict[str, Any] | None:
            try:
                status = await env.podgroup_status("short")
            except ApiError:
                return None
            return status if status.get("phase") == "Waiting" else None

        status = await eventually(waiting, what="the Job's PodGroup waiting")
        condition = next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")
        assert "2 of minCount 3 present, 1 missing" in condition["message"]
        assert await env.bound("short") == 0


async def test_gated_job_pods_stay_absent_until_ungated() -> None:
    async with simulated_cluster() as env:
        await env.client.create(JOBS, NAMESPACE, job("queued", 2, "2", gates=["example.com/admission"]))
        pods = await eventually(lambda: _pods_of(env, "queued", 2), what="the Job's 2 gated pods")
        await asyncio.sleep(1.0)
        assert await env.bound("queued") == 0
        for item in pods:
            await env.client.patch(
                PODS,
                NAMESPACE,
                item["metadata"]["name"],
                {"spec": {"schedulingGates": None}},
                PatchType.MERGE,
            )
        await eventually(lambda: _equals(env.bound("queued"), 2), what="both pods bound once ungated")


async def _pods_of(env: Env, group: str, count: int) -> list[dict[str, Any]] | None:
    pods = await env.pods(group)
    return pods if len(pods) == count else None


async def test_conflicting_min_counts_use_the_lowest_and_are_reported_on_a_podgroup_without_owner() -> None:
    async with simulated_cluster() as env:
        for name, count in (("mixed-0", "3"), ("mixed-1", "2")):
            manifest = pod(name, "mixed")
            manifest["metadata"]["annotations"] = {MIN_COUNT_ANNOTATION: count}
            await env.client.create(PODS, NAMESPACE, manifest)
        await eventually(lambda: _equals(env.bound("mixed"), 2), what="both pods bound with minCount 2")
        group = await env.client.get(POD_GROUPS, NAMESPACE, "mixed")
        assert group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
        assert "ownerReferences" not in group["metadata"]

        async def reported() -> list[dict[str, Any]]:
            items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
            return [e for e in items if e.get("reason") == "ConflictingMinCount"]

        (event,) = await eventually(reported, what="a ConflictingMinCount event")
        assert event["involvedObject"]["name"] == "mixed"
        assert "3 (pod mixed-0)" in event["message"] and "minCount 2 is used" in event["message"]
