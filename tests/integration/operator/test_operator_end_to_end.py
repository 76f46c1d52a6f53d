"""The whole operator in-process against a simulated cluster over HTTP: gangs, single pods, status,
events, metrics, probes, and that pods of other schedulers are never written."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from acceptance_harness import (
    GPU_TEMPLATE,
    NAMESPACE,
    Env,
    claim,
    eventually,
    operator_settings,
    pod,
    podgroup,
    simulated_cluster,
    write_kubeconfig,
)
from structlog.testing import capture_logs

from lockstep.controller.runtime import WatchMode
from lockstep.kube.client import EVENTS, POD_GROUPS, PODS, RESOURCE_CLAIM_TEMPLATES, RESOURCE_CLAIMS
from lockstep.sim.faults import FaultRule


@pytest.mark.parametrize("pod_watch", [WatchMode.RAW, WatchMode.KOPF])
async def test_a_gang_of_eight_binds_and_its_podgroup_says_scheduled(pod_watch: WatchMode) -> None:
    async with simulated_cluster(nodes=4, pod_watch=pod_watch) as env:
        await env.create(podgroup("train", 8))
        for i in range(8):
            await env.create(pod(f"train-{i}", "train", cpu="2"))
        await env.create(pod("solo"))  # our scheduler, no group label: scheduled as a single pod
        await env.create(pod("theirs", scheduler="default-scheduler"))

        async def scheduled() -> dict:
            status = await env.podgroup_status("train")
            return status if status.get("phase") in ("Scheduled", "Running") else {}

        status = await eventually(scheduled, what="PodGroup train Scheduled")
        assert await env.bound("train") == 8
        condition = next(c for c in status["conditions"] if c["type"] == "PodGroupScheduled")
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
        assert status["scheduled"] == 8 and status["total"] == 8
        assert status["observedGeneration"] >= 1

        async def solo_bound() -> bool:
            return bool((await env.client.get(PODS, NAMESPACE, "solo"))["spec"].get("nodeName"))

        await eventually(solo_bound, what="the single pod bound")
        theirs = await env.client.get(PODS, NAMESPACE, "theirs")
        assert not theirs["spec"].get("nodeName")
        assert not theirs.get("status", {}).get("conditions")  # never written to

        events = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
        reasons = {(e["involvedObject"]["kind"], e["involvedObject"]["name"], e["reason"]) for e in events}
        assert ("PodGroup", "train", "Scheduled") in reasons
        assert ("Pod", "solo", "Scheduled") in reasons

        operator = env.operator
        assert operator.metrics_port is not None
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{operator.metrics_port}/metrics") as response,
        ):
            text = await response.text()
        assert 'scheduler_podgroup_schedule_attempts_total{result="scheduled"}' in text
        assert 'scheduler_pending_pods{queue="active"}' in text
        assert 'scheduler_podgroup_scheduling_attempt_duration_seconds_count{result="scheduled"}' in text
        assert 'lockstep_bindings_total{result="bound"} 9.0' in text
        assert "lockstep_inflight_claim_allocations 0.0" in text
        assert operator.health_url is not None
        health_url = operator.health_url

        async def liveness() -> dict[str, Any] | None:
            # Kopf serves it; it starts after the first binding, so it may not be up yet.
            try:
                async with aiohttp.ClientSession() as session, session.get(health_url) as response:
                    answer: dict[str, Any] = await response.json()
                    return answer
            except aiohttp.ClientConnectorError:
                return None

        health = await eventually(liveness, what="the liveness endpoint")
        assert health["scheduler"]["leader"] is True
        assert health["scheduler"]["queue_depth"] >= 0
        assert health["scheduler"]["last_successful_cycle"]
        probe = operator.probe()
        assert probe["leader"] is True and probe["last_successful_cycle"] is not None
        assert await env.invariant_violations() == []


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")
async def test_kubectl_wait_for_podgroup_scheduled(tmp_path: Path) -> None:
    async with simulated_cluster(nodes=2) as env:
        kubeconfig = write_kubeconfig(env.cluster.url, tmp_path / "kubeconfig")
        waiter = await asyncio.create_subprocess_exec(
            "kubectl",
            f"--kubeconfig={kubeconfig}",
            "wait",
            "--for=condition=PodGroupScheduled",
            f"--namespace={NAMESPACE}",
            "--timeout=30s",
            "podgroups.scheduling.lockstep.dev/pair",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        await env.create(podgroup("pair", 2))
        for i in range(2):
            await env.create(pod(f"pair-{i}", "pair"))
        stdout, stderr = await asyncio.wait_for(waiter.communicate(), 40)
        assert waiter.returncode == 0, stderr.decode()
        assert "condition met" in stdout.decode()


async def test_namespaced_operator_schedules_only_its_namespaces() -> None:
    async with simulated_cluster(
        nodes=2, settings=operator_settings(namespaces=NAMESPACE), extra_namespaces=("elsewhere",)
    ) as env:
        await env.create(podgroup("mine", 2))
        for i in range(2):
            await env.create(pod(f"mine-{i}", "mine"))
        elsewhere = pod("other", None)
        elsewhere["metadata"]["namespace"] = "elsewhere"
        await env.client.create(PODS, "elsewhere", elsewhere)

        await eventually(lambda: bound(env, "mine", 2), what="the gang in the watched namespace bound")
        await asyncio.sleep(0.5)
        other = await env.client.get(PODS, "elsewhere", "other")
        assert not other["spec"].get("nodeName")
        assert not (other.get("status") or {}).get("conditions")


async def bound(env: Env, group: str, count: int) -> bool:
    return await env.bound(group) == count


async def test_a_failed_status_write_is_retried() -> None:
    async with simulated_cluster(nodes=2, operator_options={"status_retry_seconds": 0.2}) as env:
        env.cluster.server.faults.add(
            FaultRule(verb="patch", resource="podgroups", subresource="status", status=500, count=3)
        )
        await env.create(podgroup("flaky", 2))
        for i in range(2):
            await env.create(pod(f"flaky-{i}", "flaky"))
        await eventually(lambda: bound(env, "flaky", 2), what="the gang bound")

        async def reported() -> bool:
            status = await env.podgroup_status("flaky")
            return status.get("phase") in ("Scheduled", "Running") and status.get("scheduled") == 2

        await eventually(reported, what="the status to be written after the injected failures")
        errors = env.operator.metrics.registry.get_sample_value(
            "lockstep_podgroup_status_writes_total", {"result": "error"}
        )
        assert errors == 3


async def test_a_podgroup_template_claim_is_created_once_and_shared_by_the_gang() -> None:
    with capture_logs() as logs:
        await _shared_group_claim_scenario(logs)


async def _shared_group_claim_scenario(logs: list[dict[str, Any]]) -> None:
    async with simulated_cluster(nodes=2, devices_per_node=2) as env:
        await env.client.create(RESOURCE_CLAIM_TEMPLATES, NAMESPACE, GPU_TEMPLATE)
        await env.create(
            podgroup("team", 3, claims=[{"name": "shared", "resourceClaimTemplateName": "one-gpu"}])
        )
        for i in range(3):
            await env.create(pod(f"team-{i}", "team"))
        await eventually(lambda: bound(env, "team", 3), what="the gang bound with its group claim")
        status = await env.podgroup_status("team")
        [entry] = status["resourceClaimStatuses"]
        assert entry["name"] == "shared"
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE))["items"]
        assert [c["metadata"]["name"] for c in claims] == [entry["resourceClaimName"]]
        [made] = claims
        assert made["metadata"]["ownerReferences"][0]["kind"] == "PodGroup"
        # Reserved once, for the PodGroup (the pods do not list the claim, so the kubelet never asks).
        team_uid = (await env.client.get(POD_GROUPS, NAMESPACE, "team"))["metadata"]["uid"]
        assert made["status"]["reservedFor"] == [
            {"apiGroup": "scheduling.lockstep.dev", "resource": "podgroups", "name": "team", "uid": team_uid}
        ]
        assert len(made["status"]["allocation"]["devices"]["results"]) == 1

        async def bound_logged() -> list[dict[str, Any]]:
            # The log line follows the binding's answer, which the API (and so the test) may show first.
            lines = [line for line in logs if line.get("event") == "bound"]
            return lines if len(lines) == 3 else []

        bound_lines = await eventually(bound_logged, what="a 'bound' log line per member")
        assert {line["claim"] for line in bound_lines} == {f"{NAMESPACE}/{entry['resourceClaimName']}"}
        assert {line["podgroup"] for line in bound_lines} == {f"{NAMESPACE}/team"}


async def test_deleting_a_podgroup_releases_its_named_claim_once_its_pods_are_gone() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        await env.create(claim("fabric"))
        await env.create(podgroup("team", 2, claims=[{"name": "fabric", "resourceClaimName": "fabric"}]))
        for i in range(2):
            await env.create(pod(f"team-{i}", "team"))
        await eventually(lambda: bound(env, "team", 2), what="the gang bound with its named group claim")
        held = await env.claim("fabric")
        assert [r["name"] for r in held["status"]["reservedFor"]] == ["team"]

        await env.client.delete(POD_GROUPS, NAMESPACE, "team")
        await asyncio.sleep(0.5)
        held = await env.claim("fabric")
        assert [r["name"] for r in held["status"]["reservedFor"]] == ["team"], "released under running pods"
        for i in range(2):
            await env.client.delete(PODS, NAMESPACE, f"team-{i}")

        async def released() -> bool:
            status = (await env.claim("fabric")).get("status") or {}
            return not status.get("reservedFor") and not status.get("allocation")

        await eventually(released, what="the claim released once the deleted PodGroup's pods were gone")


async def test_a_single_pod_that_fits_nowhere_says_why_on_the_pod() -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        await env.create(pod("huge", cpu="100"))

        async def failed() -> dict[str, Any]:
            raw = await env.client.get(PODS, NAMESPACE, "huge")
            conditions = (raw.get("status") or {}).get("conditions") or []
            return next((c for c in conditions if c["type"] == "PodScheduled" and c["status"] == "False"), {})

        condition = await eventually(failed, what="PodScheduled=False on the pod")
        assert condition["reason"] == "Unschedulable"
        assert condition["message"] == "0/2 nodes are available: 2 Insufficient cpu."

        async def event() -> list[dict[str, Any]]:
            events = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
            return [
                e
                for e in events
                if e["involvedObject"]["name"] == "huge" and e["reason"] == "FailedScheduling"
            ]

        [failed_scheduling] = await eventually(event, what="a FailedScheduling event on the pod")
        assert failed_scheduling["type"] == "Warning" and failed_scheduling["involvedObject"]["kind"] == "Pod"
