"""Gangs with PersistentVolumeClaims on the simulated cluster (PV controller, provisioner, kubelets),
with the operator running in-process over HTTP."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.api.volume import SELECTED_NODE_ANNOTATION
from lockstep.kube.client import PERSISTENT_VOLUME_CLAIMS, PERSISTENT_VOLUMES, PODS
from lockstep.sim.controllers.provisioner import PROVISIONER_NAME


def storage_class(name: str, provisioner: str) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": name},
        "provisioner": provisioner,
        "volumeBindingMode": "WaitForFirstConsumer",
    }


def local_volume(
    name: str, node: str, storage: str = "10Gi", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    term = {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "capacity": {"storage": storage},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [term]}},
        },
    }


def volume_claim(name: str, storage_class: str, selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "resources": {"requests": {"storage": "5Gi"}},
    }
    if selector:
        spec["selector"] = selector
    return {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name}, "spec": spec}


def pod_with_claim(name: str, group: str | None, claim_name: str) -> dict[str, Any]:
    manifest = pod(name, group)
    manifest["spec"]["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    return manifest


async def claims(env: Env) -> dict[str, dict[str, Any]]:
    items = (await env.client.list(PERSISTENT_VOLUME_CLAIMS, NAMESPACE)).get("items") or []
    return {item["metadata"]["name"]: item for item in items}


async def volumes(env: Env) -> dict[str, dict[str, Any]]:
    items = (await env.client.list(PERSISTENT_VOLUMES, None)).get("items") or []
    return {item["metadata"]["name"]: item for item in items}


async def running(env: Env, group: str, count: int) -> bool:
    pods = await env.pods(group)
    return sum(1 for p in pods if p.get("status", {}).get("phase") == "Running") == count


def affinity_node(volume: dict[str, Any]) -> str:
    term = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"][0]
    return str(term["matchExpressions"][0]["values"][0])


async def test_gang_members_each_get_their_local_volume_on_its_node() -> None:
    """Each member's claim selects one local PV; the gang lands where the volumes are, every claim
    is bound to its own volume, and the pods run (the kubelet waited for the bindings)."""
    async with simulated_cluster(nodes=4, devices_per_node=0) as env:
        await env.create(storage_class("local", "kubernetes.io/no-provisioner"))
        nodes = ["node-003", "node-001", "node-002"]
        for i, node in enumerate(nodes):
            await env.create(local_volume(f"disk-{i}", node, labels={"disk": str(i)}))
            await env.create(volume_claim(f"data-{i}", "local", {"matchLabels": {"disk": str(i)}}))
        await env.create(podgroup("train", 3))
        for i in range(3):
            await env.create(pod_with_claim(f"train-{i}", "train", f"data-{i}"))
        await eventually(lambda: running(env, "train", 3), what="the gang running")
        placed = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in await env.pods("train")}
        assert placed == {f"train-{i}": node for i, node in enumerate(nodes)}
        bound = await claims(env)
        assert {name: c["spec"]["volumeName"] for name, c in bound.items()} == {
            f"data-{i}": f"disk-{i}" for i in range(3)
        }
        assert all(c["status"]["phase"] == "Bound" for c in bound.values())
        assert await env.invariant_violations() == []


async def test_one_volume_is_not_given_to_two_members_of_a_cycle() -> None:
    """Two local volumes on one node, a gang of three alike claims: the gang cannot be placed (a
    volume chosen for one member is not offered to the next), says why, and pre-binds nothing."""
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        await env.create(storage_class("local", "kubernetes.io/no-provisioner"))
        for i in range(2):
            await env.create(local_volume(f"disk-{i}", "node-000"))
        await env.create(podgroup("trio", 3))
        for i in range(3):
            await env.create(volume_claim(f"data-{i}", "local"))
            await env.create(pod_with_claim(f"trio-{i}", "trio", f"data-{i}"))

        async def conflict() -> dict[str, Any]:
            # The pods' informer may deliver the third member before the volume informer delivers its
            # claim: the first verdict can then be PVCNotFound, and the claim's arrival retries the gang.
            status = await env.podgroup_status("trio")
            reasons = {r["reason"] for r in status.get("unschedulableReasons") or []}
            return (
                status if status.get("phase") == "Unschedulable" and "VolumeBindConflict" in reasons else {}
            )

        await eventually(conflict, what="the gang Unschedulable for the volume conflict")
        assert await env.bound("trio") == 0
        assert all("claimRef" not in v["spec"] for v in (await volumes(env)).values())

        await env.create(local_volume("disk-2", "node-001"))  # room for the third member
        await eventually(lambda: running(env, "trio", 3), what="the gang running once a volume is added")
        names = {c["spec"]["volumeName"] for c in (await claims(env)).values()}
        assert names == {"disk-0", "disk-1", "disk-2"}


async def test_gang_volumes_are_provisioned_only_once_the_whole_gang_is_placed() -> None:
    async with simulated_cluster(nodes=3, devices_per_node=0) as env:
        await env.create(storage_class("scratch", PROVISIONER_NAME))
        await env.create(podgroup("gang", 3))
        for i in range(3):
            await env.create(volume_claim(f"scratch-{i}", "scratch"))
        for i in range(2):
            await env.create(pod_with_claim(f"gang-{i}", "gang", f"scratch-{i}"))

        async def waiting() -> bool:
            return (await env.podgroup_status("gang")).get("phase") == "Waiting"

        await eventually(waiting, what="the gang Waiting for its third member")
        assert not any(
            SELECTED_NODE_ANNOTATION in (c["metadata"].get("annotations") or {})
            for c in (await claims(env)).values()
        ), "no claim is written before the whole gang is placed"
        assert await volumes(env) == {}

        await env.create(pod_with_claim("gang-2", "gang", "scratch-2"))
        await eventually(lambda: running(env, "gang", 3), what="the gang running")
        nodes = {
            p["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"]: p["spec"]["nodeName"]
            for p in await env.pods("gang")
        }
        bound = await claims(env)
        provisioned = await volumes(env)
        for name, node in nodes.items():
            item = bound[name]
            assert item["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] == node
            assert affinity_node(provisioned[item["spec"]["volumeName"]]) == node


async def test_missing_claim_keeps_the_pod_pending_with_the_reason() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        await env.create(pod_with_claim("lonely", None, "absent"))

        async def reported() -> dict[str, Any]:
            pods = await env.pods()
            conditions = pods[0].get("status", {}).get("conditions") or [] if pods else []
            return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), {})

        condition = await eventually(reported, what="PodScheduled=False on the pod")
        assert 'persistentvolumeclaim "absent" not found' in condition["message"]
        assert condition["reason"] == "Unschedulable"
        assert not (await env.pods())[0]["spec"].get("nodeName")

        await env.create(storage_class("scratch", PROVISIONER_NAME))
        await env.create(volume_claim("absent", "scratch"))

        async def lonely_running() -> bool:
            return (await env.pods())[0].get("status", {}).get("phase") == "Running"

        await eventually(lonely_running, what="the pod running once its claim exists")


def pod_with_scratch(name: str, group: str | None) -> dict[str, Any]:
    """A pod with a generic ephemeral volume ``scratch`` of the provisioned class ``scratch``."""
    manifest = pod(name, group)
    template = {"metadata": {"labels": {"use": "scratch"}}, "spec": volume_claim("", "scratch")["spec"]}
    manifest["spec"]["volumes"] = [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": template}}]
    manifest["spec"]["containers"][0]["volumeMounts"] = [{"name": "scratch", "mountPath": "/scratch"}]
    return manifest


async def test_gang_with_ephemeral_volumes_is_provisioned_and_its_claims_go_with_the_pods() -> None:
    """Each member's ephemeral volume becomes the claim <pod>-scratch (the ephemeral volume
    controller), provisioned where the gang is placed; the pods run and the claims go with them. A pod
    whose <pod>-scratch claim exists but is not its own stays pending with upstream's reason."""
    async with simulated_cluster(nodes=3, devices_per_node=0) as env:
        await env.create(storage_class("scratch", PROVISIONER_NAME))
        squatter = volume_claim("lone-scratch", "scratch")
        await env.create(squatter)
        await env.create(podgroup("batch", 3))
        for i in range(3):
            await env.create(pod_with_scratch(f"batch-{i}", "batch"))
        await env.create(pod_with_scratch("lone", None))

        await eventually(lambda: running(env, "batch", 3), what="the gang running")
        nodes = {p["metadata"]["name"]: p["spec"]["nodeName"] for p in await env.pods("batch")}
        bound, provisioned = await claims(env), await volumes(env)
        for name, node in nodes.items():
            item = bound[f"{name}-scratch"]
            assert item["metadata"]["labels"] == {"use": "scratch"}
            assert [(r["kind"], r["name"], r["controller"]) for r in item["metadata"]["ownerReferences"]] == [
                ("Pod", name, True)
            ]
            assert item["status"]["phase"] == "Bound"
            assert item["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] == node
            assert affinity_node(provisioned[item["spec"]["volumeName"]]) == node

        async def lone_reported() -> dict[str, Any]:
            [lone] = [p for p in await env.pods() if p["metadata"]["name"] == "lone"]
            conditions = lone.get("status", {}).get("conditions") or []
            # An earlier verdict may wait for the claim to be made, if it reached the operator after the pod.
            return next(
                (
                    c
                    for c in conditions
                    if c["type"] == "PodScheduled" and "(pod is not owner)" in c.get("message", "")
                ),
                {},
            )

        condition = await eventually(
            lone_reported, what="PodScheduled=False on the pod whose claim is not its own"
        )
        assert (
            f"PVC {NAMESPACE}/lone-scratch was not created for pod {NAMESPACE}/lone (pod is not owner)"
            in condition["message"]
        )
        assert "ownerReferences" not in (await claims(env))["lone-scratch"]["metadata"]

        for name in nodes:
            await env.client.delete(PODS, NAMESPACE, name)

        async def claims_gone() -> bool:
            return not any(name.startswith("batch-") for name in await claims(env))

        await eventually(claims_gone, what="the gang's claims deleted with its pods")
        assert await env.invariant_violations() == []
