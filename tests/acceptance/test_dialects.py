"""lockstep as the scheduler of other schedulers' group shapes, through the emulator with the operator
running, driven with the real ``kubectl``: scheduler-plugins coscheduling PodGroups, Volcano
PodGroups and Kueue plain pod groups. Each: a gang that fits is bound and its status is written in
that shape; a gang short of pods waits; bad input is refused naming the field and nothing is bound;
a pod claimed by two shapes for different groups is refused; a CRD installed after lockstep started
is picked up without a restart."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_harness import NAMESPACE, Env, eventually, simulated_cluster, write_kubeconfig

from lockstep.kube.client import EVENTS, PODS, PatchType

KUBECTL = shutil.which("kubectl")
pytestmark = pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed")

COSCHEDULING = "scheduling.x-k8s.io/v1alpha1"
VOLCANO = "scheduling.volcano.sh/v1beta1"
FAST_DISCOVERY = {"discovery_interval_seconds": 0.5}


class Kubectl:
    def __init__(self, env: Env, directory: Path) -> None:
        self.kubeconfig = write_kubeconfig(env.cluster.url, directory / "kubeconfig")
        self.cache = directory / "kubectl-cache"

    async def run(
        self, *args: str, stdin: str | None = None, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        assert KUBECTL is not None
        command = [
            KUBECTL,
            f"--kubeconfig={self.kubeconfig}",
            f"--cache-dir={self.cache}",
            "-n",
            NAMESPACE,
            *args,
        ]
        done = await asyncio.to_thread(
            subprocess.run, command, input=stdin, capture_output=True, text=True, timeout=30, check=False
        )
        if check and done.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr}")
        return done

    async def apply(self, *documents: dict[str, Any]) -> None:
        await self.run("apply", "-f", "-", stdin=yaml.safe_dump_all(documents))

    async def get(self, resource: str, name: str) -> dict[str, Any]:
        return json.loads((await self.run("get", resource, name, "-o", "json")).stdout)

    async def status(self, resource: str, name: str) -> dict[str, Any]:
        return dict((await self.get(resource, name)).get("status") or {})


def group_pod(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    cpu: str = "500m",
    gates: list[str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "schedulerName": "lockstep",
        "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
    }
    if gates:
        spec["schedulingGates"] = [{"name": gate} for gate in gates]
    metadata = {
        "name": name,
        "namespace": NAMESPACE,
        "labels": labels or {},
        "annotations": annotations or {},
    }
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def coscheduling_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": COSCHEDULING,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def coscheduling_pod(name: str, group: str, **options: Any) -> dict[str, Any]:
    return group_pod(name, labels={"scheduling.x-k8s.io/pod-group": group}, **options)


async def bound(env: Env, prefix: str) -> int:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return sum(
        1 for p in pods if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName")
    )


async def pod_condition(env: Env, name: str) -> dict[str, Any] | None:
    pod = await env.client.get(PODS, NAMESPACE, name)
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


async def events_about(env: Env, name: str, reason: str) -> list[dict[str, Any]]:
    items = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [e for e in items if e["involvedObject"]["name"] == name and e.get("reason") == reason]


async def _is(value: Any, expected: Any) -> bool:
    return await value == expected


# --- coscheduling -------------------------------------------------------------------------------------


async def test_a_coscheduling_gang_that_fits_is_bound_and_its_status_written_as_its_controller_does(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(install_crds=("coscheduling",), pod_run_seconds=None) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(
            coscheduling_group("nginx", minMember=3, scheduleTimeoutSeconds=10),
            *(coscheduling_pod(f"nginx-{i}", "nginx") for i in range(3)),
        )
        await eventually(lambda: _is(bound(env, "nginx"), 3), what="3 members bound")

        async def running() -> dict[str, Any] | None:
            status = await kubectl.status("podgroups.scheduling.x-k8s.io", "nginx")
            return status if status.get("phase") == "Running" else None

        status = await eventually(running, what="phase Running")
        assert status["running"] == 3
        assert status["scheduleStartTime"].endswith("Z")
        assert "scheduled" not in status  # not in the published schema: pruned if written
        columns = (await kubectl.run("get", "podgroups.scheduling.x-k8s.io", "nginx")).stdout
        assert "Running" in columns and "MINMEMBER" in columns


async def test_a_coscheduling_gang_short_of_pods_waits_pending_and_binds_when_the_last_arrives(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(install_crds=("coscheduling",)) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(
            coscheduling_group("short", minMember=3),
            *(coscheduling_pod(f"short-{i}", "short") for i in range(2)),
        )

        async def pending() -> bool:
            return (await kubectl.status("podgroups.scheduling.x-k8s.io", "short")).get("phase") == "Pending"

        await eventually(pending, what="phase Pending")
        await asyncio.sleep(0.5)
        assert await bound(env, "short") == 0
        await kubectl.apply(coscheduling_pod("short-2", "short"))
        await eventually(lambda: _is(bound(env, "short"), 3), what="all 3 bound once the third exists")


async def test_a_negative_min_member_is_refused_naming_the_field_and_nothing_is_bound(tmp_path: Path) -> None:
    async with simulated_cluster(install_crds=("coscheduling",)) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(coscheduling_group("bad", minMember=-1), coscheduling_pod("bad-0", "bad"))
        condition = await eventually(lambda: pod_condition(env, "bad-0"), what="PodScheduled=False")
        assert condition["status"] == "False"
        assert "spec.minMember: must not be negative, got -1" in condition["message"]
        invalid = await eventually(lambda: events_about(env, "bad", "InvalidSpec"), what="InvalidSpec event")
        assert "spec.minMember" in invalid[0]["message"]
        assert await bound(env, "bad") == 0


async def test_min_resources_beyond_every_node_make_the_group_unschedulable_with_that_reason(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(nodes=2, install_crds=("coscheduling",)) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(
            coscheduling_group("huge", minMember=2, minResources={"cpu": "1000"}),
            *(coscheduling_pod(f"huge-{i}", "huge") for i in range(2)),
        )
        condition = await eventually(lambda: pod_condition(env, "huge-0"), what="PodScheduled=False")
        assert "minResources exceed what every node together can hold: short of cpu" in condition["message"]
        assert "parked" in condition["message"] or condition["reason"] == "Unschedulable"
        assert await bound(env, "huge") == 0
        # a minimum within reach is only a pre-check: the gang is then placed
        await kubectl.apply(coscheduling_group("huge", minMember=2, minResources={"cpu": "1"}))
        await eventually(lambda: _is(bound(env, "huge"), 2), what="bound once minResources fit")


# --- precedence and discovery -------------------------------------------------------------------------


async def test_a_pod_claimed_by_two_shapes_for_different_groups_is_refused_naming_both(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(install_crds=("coscheduling",)) as env:
        kubectl = Kubectl(env, tmp_path)
        pod = group_pod(
            "torn-0",
            labels={"scheduling.lockstep.dev/pod-group": "ours", "scheduling.x-k8s.io/pod-group": "theirs"},
        )
        await kubectl.apply(coscheduling_group("theirs", minMember=1), pod)
        condition = await eventually(lambda: pod_condition(env, "torn-0"), what="PodScheduled=False")
        message = condition["message"]
        assert "PodGroup 'ours' (scheduling.lockstep.dev)" in message
        assert "PodGroup 'theirs' (scheduling.x-k8s.io)" in message
        assert (await env.client.get(PODS, NAMESPACE, "torn-0"))["spec"].get("nodeName") is None


async def test_a_crd_installed_after_lockstep_started_is_picked_up_without_a_restart(tmp_path: Path) -> None:
    async with simulated_cluster(operator_options=FAST_DISCOVERY) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(*(coscheduling_pod(f"late-{i}", "late") for i in range(2)))
        await asyncio.sleep(1.0)
        assert await bound(env, "late") == 0  # no PodGroup shape served: the pods wait
        await env.cluster.install_crds("coscheduling")
        await kubectl.apply(coscheduling_group("late", minMember=2))
        await eventually(lambda: _is(bound(env, "late"), 2), what="bound after the CRD was installed")


# --- helpers for the patches Kueue makes ---------------------------------------------------------------


async def ungate(env: Env, name: str, gate: str, node_selector: dict[str, str] | None = None) -> None:
    """What Kueue does on admission: write the flavor's node labels, then drop its gate."""
    pod = await env.client.get(PODS, NAMESPACE, name)
    spec = pod["spec"]
    patch: dict[str, Any] = {
        "spec": {"schedulingGates": [g for g in spec.get("schedulingGates") or [] if g["name"] != gate]}
    }
    if node_selector:
        patch["spec"]["nodeSelector"] = {**(spec.get("nodeSelector") or {}), **node_selector}
    await env.client.patch(PODS, NAMESPACE, name, patch, PatchType.MERGE)
