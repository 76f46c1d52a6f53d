"""``lockstep explain`` against a simulated cluster: the API's record plus a dry run that names the
plugin, the rejected nodes and the claim problems. No operator runs here: the dry run alone must
explain a group nobody has scheduled yet."""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from lockstep import POD_GROUP_LABEL
from lockstep.config import load_settings
from lockstep.explain import ExplainError, explain, explain_command, parse_reference
from lockstep.sim.cluster import SimCluster
from lockstep.sim.kubeconfig import write_kubeconfig

NAMESPACE = "explain"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[SimCluster, Path]]:
    sim = SimCluster(nodes=4, devices_per_node=2)
    url = await sim.start()
    try:
        await sim.http.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        yield sim, write_kubeconfig(url, tmp_path / "kubeconfig")
    finally:
        await sim.stop()


def podgroup(name: str, min_count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def pod(name: str, group: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {POD_GROUP_LABEL: group}},
        "spec": {
            "schedulerName": "lockstep",
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
            **spec,
        },
    }


async def create(sim: SimCluster, group: str, min_count: int, pods: list[dict[str, Any]]) -> None:
    base = f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/podgroups"
    await sim.http.create(base, podgroup(group, min_count))
    for body in pods:
        await sim.http.create(f"/api/v1/namespaces/{NAMESPACE}/pods", body)


async def test_names_the_plugin_and_nodes_that_reject_a_group(cluster: tuple[SimCluster, Path]) -> None:
    sim, kubeconfig = cluster
    misplaced = [pod(f"m-{i}", "m", nodeSelector={"lockstep.dev/rack": "nowhere"}) for i in range(2)]
    await create(sim, "m", 2, misplaced)
    text = await explain(f"{NAMESPACE}/m", load_settings(kubeconfig=str(kubeconfig)))
    assert "PodGroup explain/m (gang, minCount 2)" in text
    assert "0 of 2 member pods bound" in text
    assert "verdict: Unschedulable" in text
    assert "NodeAffinity rejected 4 nodes (node-000, node-001, node-002, ...)" in text


async def test_names_inter_pod_affinity_for_a_one_per_node_gang_larger_than_the_cluster(
    cluster: tuple[SimCluster, Path],
) -> None:
    sim, kubeconfig = cluster
    term = {
        "labelSelector": {"matchLabels": {POD_GROUP_LABEL: "wide"}},
        "topologyKey": "kubernetes.io/hostname",
    }
    affinity = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    await create(sim, "wide", 5, [pod(f"wide-{i}", "wide", affinity=affinity) for i in range(5)])
    text = await explain(f"{NAMESPACE}/wide", load_settings(kubeconfig=str(kubeconfig)))
    assert "verdict: Unschedulable" in text
    assert "InterPodAffinity rejected 4 nodes" in text
    assert "didn't match pod anti-affinity rules" in text


async def test_a_feasible_group_shows_where_it_would_go(cluster: tuple[SimCluster, Path]) -> None:
    sim, kubeconfig = cluster
    await create(sim, "ok", 3, [pod(f"ok-{i}", "ok") for i in range(3)])
    text = await explain(f"{NAMESPACE}/ok", load_settings(kubeconfig=str(kubeconfig)))
    assert "verdict: Success" in text
    assert sum(line.strip().startswith("would place explain/ok-") for line in text.splitlines()) == 3


async def test_too_few_pods_and_missing_claims_are_said(cluster: tuple[SimCluster, Path]) -> None:
    sim, kubeconfig = cluster
    claim_ref = [{"name": "gpu", "resourceClaimName": "does-not-exist"}]
    await create(sim, "few", 3, [pod("few-0", "few", resourceClaims=claim_ref)])
    text = await explain(f"{NAMESPACE}/few", load_settings(kubeconfig=str(kubeconfig)))
    assert "waiting for pods: 1 of minCount 3 exist, 2 missing" in text
    assert "does-not-exist [pod few-0 (gpu)]: does not exist" in text


async def test_an_extended_resource_pod_shows_the_claim_it_would_get(
    cluster: tuple[SimCluster, Path],
) -> None:
    """The dry run allocates a pod's DRA extended resources like a claim (named after the one PreBind
    would create), and the claims list shows the claim the pod's status names."""
    sim, kubeconfig = cluster
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "ext"},
        "spec": {"selectors": [{"cel": {"expression": "true"}}], "extendedResourceName": "example.com/gpu"},
    }
    await sim.http.create("/apis/resource.k8s.io/v1/deviceclasses", device_class)

    def asking(name: str, gpus: int) -> dict[str, Any]:
        body = pod(name, name)
        resources = body["spec"]["containers"][0]["resources"]
        resources["requests"]["example.com/gpu"] = str(gpus)
        resources["limits"] = {"example.com/gpu": str(gpus)}
        return body

    await create(sim, "fits", 1, [asking("fits", 2)])
    text = await explain(f"{NAMESPACE}/fits", load_settings(kubeconfig=str(kubeconfig)))
    assert "verdict: Success" in text
    await create(sim, "big", 1, [asking("big", 3)])  # the nodes have 2 devices each
    text = await explain(f"{NAMESPACE}/big", load_settings(kubeconfig=str(kubeconfig)))
    assert "DynamicResources rejected 4 nodes" in text and "explain/big-extended-resources" in text
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "fits-extended-resources-abcde"},
        "spec": {"devices": {"requests": []}},
    }
    await sim.http.create(f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", claim)
    status = {
        "status": {
            "extendedResourceClaimStatus": {
                "requestMappings": [
                    {
                        "containerName": "c",
                        "resourceName": "example.com/gpu",
                        "requestName": "container-0-request-1",
                    }
                ],
                "resourceClaimName": "fits-extended-resources-abcde",
            }
        }
    }
    await sim.http.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/fits/status", status)
    text = await explain(f"{NAMESPACE}/fits", load_settings(kubeconfig=str(kubeconfig)))
    assert "fits-extended-resources-abcde [pod fits (extended resources)]: not allocated" in text


async def test_unknown_group_is_an_error_naming_it_and_the_pods_naming_it(
    cluster: tuple[SimCluster, Path],
) -> None:
    sim, kubeconfig = cluster
    with pytest.raises(ExplainError, match="PodGroup explain/ghost not found; no pod in explain names it"):
        await explain(f"{NAMESPACE}/ghost", load_settings(kubeconfig=str(kubeconfig)))
    for name in ("ghost-0", "ghost-1"):
        await sim.http.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod(name, "ghost"))
    with pytest.raises(ExplainError) as raised:
        await explain(f"{NAMESPACE}/ghost", load_settings(kubeconfig=str(kubeconfig)))
    text = str(raised.value)
    assert f"2 pods name it through the label {POD_GROUP_LABEL}:" in text
    assert "\n  ghost-0" in text and "\n  ghost-1" in text


def test_reference_must_be_namespace_slash_name(capsys: pytest.CaptureFixture[str]) -> None:
    assert parse_reference("ns/g") == ("ns", "g", False)
    assert parse_reference("podgroups.scheduling.k8s.io/g", "ns") == ("ns", "g", True)
    for bad in ("g", "/g", "ns/", "a/b/c"):
        with pytest.raises(ExplainError, match="expected NAMESPACE/PODGROUP"):
            parse_reference(bad)
    args = argparse.Namespace(podgroup="nope", kubeconfig=None, feature_gates=None, namespace="default")
    assert explain_command(args) == 1
    assert (
        "expected NAMESPACE/PODGROUP or podgroups.scheduling.k8s.io/NAME, got 'nope'"
        in capsys.readouterr().err
    )


def test_claim_consumers_name_a_podgroup_reservation_and_count_pods() -> None:
    from lockstep.explain import _consumers

    group = {"apiGroup": "scheduling.lockstep.dev", "resource": "podgroups", "name": "team", "uid": "u"}
    pod_refs = [{"resource": "pods", "name": f"p{i}", "uid": f"p{i}"} for i in range(3)]
    assert _consumers([group]) == "PodGroup team"
    assert _consumers(pod_refs) == "3 pods"
    assert _consumers(pod_refs[:1]) == "1 pod"
    assert _consumers([group, *pod_refs]) == "PodGroup team, 3 pods"


async def test_a_group_that_could_preempt_shows_the_plan_and_a_preemption_in_progress(
    cluster: tuple[SimCluster, Path],
) -> None:
    sim, kubeconfig = cluster
    classes = "/apis/scheduling.k8s.io/v1/priorityclasses"
    await sim.http.create(classes, {"metadata": {"name": "explain-low"}, "value": 1})
    await sim.http.create(classes, {"metadata": {"name": "explain-high"}, "value": 100})
    big = {"requests": {"cpu": "30"}}
    low = [pod(f"low-{i}", "low", priorityClassName="explain-low") for i in range(4)]
    for body in low:
        body["spec"]["containers"][0]["resources"] = big
    await create(sim, "low", 4, low)
    for i in range(4):  # no operator runs: bind by hand, one per node
        await sim.http.create(
            f"/api/v1/namespaces/{NAMESPACE}/pods/low-{i}/binding",
            {"metadata": {"name": f"low-{i}"}, "target": {"name": f"node-00{i}"}},
        )
    urgent = pod("urgent-0", "urgent", priorityClassName="explain-high")
    urgent["spec"]["containers"][0]["resources"] = big
    await create(sim, "urgent", 1, [urgent])
    settings = load_settings(kubeconfig=str(kubeconfig))
    text = await explain(f"{NAMESPACE}/urgent", settings)
    assert (
        "preemption: planned: preempting group explain/low (4 pods)" in text
    )  # a gang at minCount goes whole
    assert sum(line.strip().startswith("would preempt explain/low-") for line in text.splitlines()) == 4
    assert "would nominate explain/urgent-0 for node-00" in text
    assert "preemption in progress" not in text

    # what the operator writes when it preempts, as explain reads it back (it writes nothing itself)
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": "lockstep: preempted by group explain/urgent, priority 100",
    }
    for i in range(4):
        await sim.http.patch(
            f"/api/v1/namespaces/{NAMESPACE}/pods/low-{i}/status", {"status": {"conditions": [condition]}}
        )
    await sim.http.patch(
        f"/api/v1/namespaces/{NAMESPACE}/pods/urgent-0/status", {"status": {"nominatedNodeName": "node-001"}}
    )
    text = await explain(f"{NAMESPACE}/urgent", settings)
    assert "nominated: urgent-0 on node-001" in text
    assert "victims not gone yet: explain/low-0 of low on node-000 (marked)" in text
    assert "preemption: waiting: fits once 4 pods already leaving" in text
    low_0 = await sim.http.get(f"/api/v1/namespaces/{NAMESPACE}/pods/low-0")
    assert "deletionTimestamp" not in low_0["metadata"]


def test_claims_say_where_their_binding_conditions_stand() -> None:
    from lockstep.explain import binding_state

    result = {
        "request": "r",
        "driver": "d",
        "pool": "p",
        "device": "f0",
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/attach-failed"],
    }
    allocated = {"status": {"allocation": {"devices": {"results": [result]}}}}
    assert binding_state(allocated) == "; binding waits for example.com/attached on f0"

    def reported(condition: str) -> dict[str, Any]:
        conditions = [{"type": condition, "status": "True"}]
        devices = [{"driver": "d", "pool": "p", "device": "f0", "conditions": conditions}]
        return {"status": {**allocated["status"], "devices": devices}}

    assert binding_state(reported("example.com/attached")) == ""
    assert (
        binding_state(reported("example.com/attach-failed"))
        == "; binding failed: example.com/attach-failed on f0"
    )
    assert binding_state({"status": {"allocation": {"devices": {"results": [{"device": "x"}]}}}}) == ""


async def test_explains_an_upstream_podgroup_and_its_members(cluster: tuple[SimCluster, Path]) -> None:
    sim, kubeconfig = cluster
    await sim.http.create(
        f"/apis/scheduling.k8s.io/v1beta1/namespaces/{NAMESPACE}/podgroups",
        {"metadata": {"name": "up"}, "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}},
    )
    for i in range(2):
        member = pod(f"up-{i}", "ignored", schedulingGroup={"podGroupName": "up"})
        member["metadata"]["labels"] = {}
        member["spec"]["nodeSelector"] = {"lockstep.dev/rack": "rack-missing"}
        await sim.http.create(f"/api/v1/namespaces/{NAMESPACE}/pods", member)
    text = await explain(
        "podgroups.scheduling.k8s.io/up", load_settings(kubeconfig=str(kubeconfig)), NAMESPACE
    )
    assert text.startswith(f"PodGroup {NAMESPACE}/up (scheduling.k8s.io/v1beta1, gang, minCount 2)")
    assert "0 of 2 member pods bound" in text
    assert "up-0" in text and "up-1" in text
    assert "NodeAffinity rejected 4 nodes" in text
