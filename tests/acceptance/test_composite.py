"""CompositePodGroups (Kubernetes 1.37, ``scheduling.k8s.io/v1alpha3``, KEP-6012) through the emulator
with the operator running, driven with the real ``kubectl``, on both PodGroup shapes: upstream's
v1beta1 PodGroup and lockstep's own, each naming its parent in ``spec.parentCompositePodGroupName``.

Six nodes in racks of two (one 20-cpu member per node): zone a holds racks 0 and 2, zone b rack 1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from acceptance_harness import NAMESPACE, eventually, pod, podgroup, simulated_cluster
from test_dialects import KUBECTL, Kubectl

from lockstep.config import load_settings
from lockstep.explain import explain
from lockstep.plan import plan

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "27-composite-gang.yaml"

ZONE = "topology.kubernetes.io/zone"
RACK = "lockstep.dev/rack"
CPG = "scheduling.k8s.io/v1alpha3"
WORKLOAD_REF = {"workloadName": "training", "templateName": "replica"}

pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")


def composite(name: str, min_groups: int, key: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": "training", "templateName": "root"},
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}},
    }
    if key:
        spec["schedulingConstraints"] = {"topology": [{"key": key}]}
    return {"apiVersion": CPG, "kind": "CompositePodGroup", "metadata": {"name": name}, "spec": spec}


def upstream_child(name: str, size: int, parent: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "parentCompositePodGroupName": parent,
            "workloadRef": WORKLOAD_REF,
            "schedulingPolicy": {"gang": {"minCount": size}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        },
    }


def upstream_member(name: str, group: str, cpu: str = "20") -> dict[str, Any]:
    member = pod(name, None, cpu=cpu)
    member["spec"]["schedulingGroup"] = {"podGroupName": group}
    return member


async def listed(kubectl: Kubectl, resource: str) -> list[dict[str, Any]]:
    return list(json.loads((await kubectl.run("get", resource, "-o", "json")).stdout)["items"])


async def nodes_of(kubectl: Kubectl, prefix: str) -> list[str]:
    pods = await listed(kubectl, "pods")
    return [p["spec"].get("nodeName", "") for p in pods if p["metadata"]["name"].startswith(prefix)]


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


async def test_a_composite_of_two_rack_gangs_lands_in_the_one_zone_holding_both(tmp_path: Path) -> None:
    """Zone b has one rack: it holds one child, not both, so the composite goes to zone a, one rack per
    child; the composite's and the children's conditions say so. A PodGroup naming a composite that does
    not exist waits, its pod told the field."""
    async with simulated_cluster(
        nodes=6, devices_per_node=0, zones=2, rack_size=2, kube_version="1.37"
    ) as env:
        kubectl = Kubectl(env, tmp_path)
        settings = load_settings(kubeconfig=str(kubectl.kubeconfig))
        # lockstep plan of the example: both replicas fit, in one zone (zone a: one rack each)
        answers = {a["group"]: a for a in await plan([str(EXAMPLE)], settings, NAMESPACE)}
        for replica in ("demo/replica-0", "demo/replica-1"):
            assert answers[replica]["fits"] and len(answers[replica]["placements"]) == 2
        assert await env.pods() == [], "plan wrote nothing"
        await kubectl.apply(
            composite("training", 2, ZONE),
            upstream_child("replica-0", 2, "training"),
            upstream_child("replica-1", 2, "training"),
            upstream_child("orphan", 1, "missing"),
            *(upstream_member(f"replica-{r}-{i}", f"replica-{r}") for r in range(2) for i in range(2)),
            upstream_member("orphan-0", "orphan", cpu="1"),
        )

        async def placed() -> list[str] | None:
            nodes = await nodes_of(kubectl, "replica-")
            return nodes if len(nodes) == 4 and all(nodes) else None

        await eventually(placed, what="both children bound")
        labels = {n["metadata"]["name"]: n["metadata"]["labels"] for n in await listed(kubectl, "nodes")}
        racks = {}
        for r in range(2):
            nodes = await nodes_of(kubectl, f"replica-{r}-")
            assert len({labels[n][RACK] for n in nodes}) == 1, f"replica-{r} in one rack"
            racks[r] = labels[nodes[0]][RACK]
            assert {labels[n][ZONE] for n in nodes} == {"zone-a"}
        assert racks[0] != racks[1]  # zone a's two racks, one each

        async def scheduled(resource: str, name: str, kind: str) -> dict[str, Any] | None:
            found = condition(await kubectl.get(resource, name), kind)
            return found if found is not None and found["status"] == "True" else None

        await eventually(
            lambda: scheduled("compositepodgroups", "training", "CompositePodGroupInitiallyScheduled"),
            what="the composite's condition",
        )
        for r in range(2):
            await eventually(
                lambda r=r: scheduled(
                    "podgroups.v1beta1.scheduling.k8s.io", f"replica-{r}", "PodGroupInitiallyScheduled"
                ),
                what=f"replica-{r}'s condition",
            )

        async def told() -> str | None:
            found = condition(await kubectl.get("pods", "orphan-0"), "PodScheduled")
            return found["message"] if found is not None and found["status"] == "False" else None

        message = await eventually(told, what="the orphan told why")
        assert (
            "spec.parentCompositePodGroupName: CompositePodGroup acceptance/missing does not exist" in message
        )
        assert (await kubectl.get("pods", "orphan-0"))["spec"].get("nodeName") is None


async def test_lockstep_podgroups_under_a_composite_bind_all_or_nothing(tmp_path: Path) -> None:
    """lockstep's own PodGroups as children: minGroupCount 2 of which one child cannot fit binds none,
    the composite is Unschedulable naming the child; once the child is deleted and a fitting one
    created, both children bind."""
    async with simulated_cluster(nodes=4, devices_per_node=0, kube_version="1.37") as env:
        kubectl = Kubectl(env, tmp_path)
        children = []
        for name in ("fits", "too-big"):
            group = podgroup(name, 2)
            group["spec"]["parentCompositePodGroupName"] = "pair"
            children.append(group)
        await kubectl.apply(
            composite("pair", 2),
            *children,
            *(pod(f"fits-{i}", "fits", cpu="1") for i in range(2)),
            *(pod(f"too-big-{i}", "too-big", cpu="100") for i in range(2)),
        )

        async def unschedulable() -> str | None:
            found = condition(
                await kubectl.get("compositepodgroups", "pair"), "CompositePodGroupInitiallyScheduled"
            )
            return found["message"] if found is not None and found["reason"] == "Unschedulable" else None

        message = await eventually(unschedulable, what="the composite Unschedulable")
        assert "minGroupCount 2: 1 of 2 child groups placed whole" in message
        assert "PodGroup acceptance/too-big" in message
        assert await env.bound("fits") == 0  # all or nothing
        text = await explain("acceptance/fits", load_settings(kubeconfig=str(kubectl.kubeconfig)))
        assert "CompositePodGroup acceptance/pair (gang, minGroupCount 2):" in text
        assert "1 of 2 child groups placed whole" in text

        await kubectl.run("delete", "pods", "too-big-0", "too-big-1", "--wait=false")
        await kubectl.apply(*(pod(f"small-{i}", "too-big", cpu="1") for i in range(2)))
        await eventually(lambda: _all_bound(env, ("fits", "too-big"), 2), what="both children bound")


async def _all_bound(env: Any, groups: tuple[str, ...], each: int) -> bool:
    return all([await env.bound(group) == each for group in groups])


async def test_a_composite_in_disruption_mode_all_is_preempted_whole_and_says_so(tmp_path: Path) -> None:
    """One node: a low-priority composite (disruptionMode all) of two one-pod gangs fills it; a
    high-priority composite needing most of the node preempts both low pods, not one, and the low
    composite's DisruptionTarget is True (PreemptionByScheduler)."""
    async with simulated_cluster(nodes=1, devices_per_node=0, kube_version="1.37") as env:
        kubectl = Kubectl(env, tmp_path)
        classes = [
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": n},
                "value": v,
            }
            for n, v in (("low", 10), ("high", 1000))
        ]
        low = composite("low", 2)
        low["spec"].update(disruptionMode={"all": {}}, priorityClassName="low")
        high = composite("high", 1)
        high["spec"]["priorityClassName"] = "high"
        members = []
        for name, parent, cpu, priority in (("low-0", "low", "15", "low"), ("low-1", "low", "15", "low")):
            child = upstream_child(name, 1, parent)
            del child["spec"]["schedulingConstraints"]
            members += [child, upstream_member(f"{name}-pod", name, cpu=cpu)]
            members[-1]["spec"]["priorityClassName"] = priority
        await kubectl.apply(*classes, low, *members)
        await eventually(lambda: _all_bound_upstream(kubectl, ("low-0-pod", "low-1-pod")), what="low bound")

        urgent = upstream_child("urgent", 1, "high")
        del urgent["spec"]["schedulingConstraints"]
        preemptor = upstream_member("urgent-pod", "urgent", cpu="20")
        preemptor["spec"]["priorityClassName"] = "high"
        await kubectl.apply(high, urgent, preemptor)
        await eventually(lambda: _all_bound_upstream(kubectl, ("urgent-pod",)), what="the preemptor bound")
        remaining = {p["metadata"]["name"] for p in await listed(kubectl, "pods")}
        assert not remaining & {"low-0-pod", "low-1-pod"}, "the low composite was preempted whole"
        target = condition(await kubectl.get("compositepodgroups", "low"), "DisruptionTarget")
        assert target is not None and (target["status"], target["reason"]) == (
            "True",
            "PreemptionByScheduler",
        )


async def _all_bound_upstream(kubectl: Kubectl, names: tuple[str, ...]) -> bool:
    pods = {p["metadata"]["name"]: p for p in await listed(kubectl, "pods")}
    return all(name in pods and pods[name]["spec"].get("nodeName") for name in names)
