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


# --- Kueue plain pod groups ---------------------------------------------------------------------------

KUEUE_GATE = "kueue.x-k8s.io/admission"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
HOSTNAME = "kubernetes.io/hostname"


def kueue_pod(name: str, group: str, count: str, gates: tuple[str, ...] = (KUEUE_GATE,)) -> dict[str, Any]:
    return group_pod(
        name,
        labels={"kueue.x-k8s.io/pod-group-name": group, "kueue.x-k8s.io/managed": "true"},
        annotations={"kueue.x-k8s.io/pod-group-total-count": count},
        gates=list(gates),
    )


async def test_a_kueue_pod_group_waits_while_gated_then_binds_with_the_node_selector_kueue_wrote(
    tmp_path: Path,
) -> None:
    async with simulated_cluster() as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(*(kueue_pod(f"kq-{i}", "kq", "3", (KUEUE_GATE, TOPOLOGY_GATE)) for i in range(3)))
        await asyncio.sleep(1.0)
        assert await bound(env, "kq") == 0  # gated: not counted, not scheduled
        for i in range(3):  # admission: the flavor's labels, then the admission gate goes
            await ungate(env, f"kq-{i}", KUEUE_GATE, {"topology.kubernetes.io/zone": "zone-a"})
        await asyncio.sleep(1.0)
        assert await bound(env, "kq") == 0  # the topology gate (Kueue TAS) still holds them
        for i in range(2):  # TAS: the domain it chose, then the topology gate goes
            await ungate(env, f"kq-{i}", TOPOLOGY_GATE, {HOSTNAME: "node-002"})
        await asyncio.sleep(1.0)
        assert await bound(env, "kq") == 0  # a gang of 3: two ungated members wait for the third
        await ungate(env, "kq-2", TOPOLOGY_GATE, {HOSTNAME: "node-002"})
        await eventually(lambda: _is(bound(env, "kq"), 3), what="the gang bound once all are ungated")
        pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
        assert {p["spec"]["nodeName"] for p in pods if p["metadata"]["name"].startswith("kq-")} == {
            "node-002"
        }


async def test_a_kueue_total_count_that_is_not_a_number_is_refused_naming_the_annotation(
    tmp_path: Path,
) -> None:
    async with simulated_cluster() as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(kueue_pod("kbad-0", "kbad", "abc", ()), kueue_pod("kbad-1", "kbad", "abc", ()))
        condition = await eventually(lambda: pod_condition(env, "kbad-0"), what="PodScheduled=False")
        assert (
            "annotation kueue.x-k8s.io/pod-group-total-count: 'abc' is not a whole number"
            in condition["message"]
        )
        await asyncio.sleep(0.5)
        assert await bound(env, "kbad") == 0
        # a good group next to it is scheduled as usual
        await kubectl.apply(kueue_pod("kgood-0", "kgood", "2", ()), kueue_pod("kgood-1", "kgood", "2", ()))
        await eventually(lambda: _is(bound(env, "kgood"), 2), what="the valid Kueue group bound")
        assert await bound(env, "kbad") == 0


# --- Volcano ------------------------------------------------------------------------------------------


def volcano_group(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": VOLCANO,
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def volcano_pod(name: str, group: str, task: str = "", cpu: str = "500m") -> dict[str, Any]:
    annotations = {"scheduling.k8s.io/group-name": group}
    if task:
        annotations["volcano.sh/task-spec"] = task
    return group_pod(name, annotations=annotations, cpu=cpu)


async def volcano_status(kubectl: Kubectl, name: str) -> dict[str, Any]:
    return await kubectl.status("podgroups.scheduling.volcano.sh", name)


async def test_a_volcano_gang_that_fits_is_bound_and_its_status_written_as_volcano_does(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(install_crds=("volcano",)) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(
            volcano_group("mpi", minMember=3, minTaskMember={"master": 1, "worker": 2}, queue="research"),
            volcano_pod("mpi-0", "mpi", "master"),
            *(volcano_pod(f"mpi-{i}", "mpi", "worker") for i in (1, 2)),
        )
        await eventually(lambda: _is(bound(env, "mpi"), 3), what="3 members bound")

        async def running() -> dict[str, Any] | None:
            status = await volcano_status(kubectl, "mpi")
            return status if status.get("phase") == "Running" and status.get("running") == 3 else None

        status = await eventually(running, what="phase Running, 3 running")
        scheduled = next(c for c in status["conditions"] if c["type"] == "Scheduled")
        assert (scheduled["status"], scheduled["reason"]) == (
            "True",
            "tasks in gang are ready to be scheduled",
        )
        assert scheduled["transitionID"]
        told = await eventually(lambda: events_about(env, "mpi", "NotHonoured"), what="NotHonoured event")
        assert "spec.queue" in told[0]["message"] and "research" in told[0]["message"]


async def test_volcano_min_task_member_holds_the_gang_until_each_task_has_its_pods(tmp_path: Path) -> None:
    async with simulated_cluster(install_crds=("volcano",)) as env:
        kubectl = Kubectl(env, tmp_path)
        # minMember is met by three workers, but the master task has none yet
        await kubectl.apply(
            volcano_group("tasks", minMember=3, minTaskMember={"master": 1}),
            *(volcano_pod(f"tasks-{i}", "tasks", "worker") for i in range(3)),
        )

        async def not_enough_pods_of_task() -> dict[str, Any] | None:
            conditions = (await volcano_status(kubectl, "tasks")).get("conditions") or []
            return next((c for c in conditions if c.get("reason") == "NotEnoughPodsOfTask"), None)

        condition = await eventually(not_enough_pods_of_task, what="NotEnoughPodsOfTask")
        assert "task 'master': 0 present of minTaskMember 1" in condition["message"]
        assert (await volcano_status(kubectl, "tasks"))["phase"] == "Pending"
        assert await bound(env, "tasks") == 0
        await kubectl.apply(volcano_pod("tasks-3", "tasks", "master"))
        await eventually(lambda: _is(bound(env, "tasks"), 4), what="all bound once the master exists")


async def test_a_volcano_gang_short_of_pods_waits_with_not_enough_tasks_and_a_negative_min_member_is_refused(
    tmp_path: Path,
) -> None:
    async with simulated_cluster(install_crds=("volcano",)) as env:
        kubectl = Kubectl(env, tmp_path)
        await kubectl.apply(
            volcano_group("few", minMember=3),
            *(volcano_pod(f"few-{i}", "few") for i in range(2)),
            volcano_group("neg", minMember=-2),
            volcano_pod("neg-0", "neg"),
        )

        async def reason(name: str, wanted: str) -> dict[str, Any] | None:
            conditions = (await volcano_status(kubectl, name)).get("conditions") or []
            return next((c for c in conditions if c.get("reason") == wanted), None)

        await eventually(lambda: reason("few", "NotEnoughTasks"), what="NotEnoughTasks")
        refused = await eventually(lambda: reason("neg", "NotEnoughResources"), what="refusal on the status")
        assert "spec.minMember: must not be negative, got -2" in refused["message"]
        assert await bound(env, "few") == 0 and await bound(env, "neg") == 0
