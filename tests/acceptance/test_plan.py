"""``lockstep plan`` against an emulated cluster with the operator running: its answer (fits or not,
where, why, whom a preemption would take) is what the operator then does with the same objects.
Each simulated node has 31.5 allocatable cpus."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from acceptance_harness import (
    NAMESPACE,
    Env,
    eventually,
    operator_settings,
    pod,
    podgroup,
    simulated_cluster,
    write_kubeconfig,
)

from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION
from lockstep.kube.client import PODS, ResourceKind
from lockstep.plan import BAD_INPUT, DOES_NOT_FIT, FITS, plan, plan_command

JOBS = ResourceKind("batch", "v1", "jobs", "Job")


def job(name: str, parallelism: int, min_count: int, cpu: str) -> dict[str, Any]:
    template = pod("x", name, cpu=cpu)
    template["metadata"] = {
        "labels": {"scheduling.lockstep.dev/pod-group": name},
        "annotations": {MIN_COUNT_ANNOTATION: str(min_count)},
    }
    template["spec"]["restartPolicy"] = "Never"
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"parallelism": parallelism, "completions": parallelism, "template": template},
    }


def write(path: Path, objects: list[dict[str, Any]]) -> str:
    path.write_text(yaml.safe_dump_all(objects))
    return str(path)


async def nodes_of(env: Env, prefix: str) -> dict[str, str]:
    pods = (await env.client.list(PODS, NAMESPACE)).get("items") or []
    return {
        f"{NAMESPACE}/{p['metadata']['name']}": p["spec"]["nodeName"]
        for p in pods
        if p["metadata"]["name"].startswith(prefix) and p["spec"].get("nodeName")
    }


async def test_plan_says_what_the_operator_then_does(tmp_path: Path) -> None:
    async with simulated_cluster(nodes=2, devices_per_node=0) as env:
        kubeconfig = write_kubeconfig(env.cluster.url, tmp_path / "kubeconfig")
        settings = operator_settings(kubeconfig=str(kubeconfig))
        fit = [podgroup("fit", 3), *(pod(f"fit-{i}", "fit", cpu="10") for i in range(3))]
        big = [podgroup("big", 2), *(pod(f"big-{i}", "big", cpu="40") for i in range(2))]
        files = [write(tmp_path / "fit.yaml", fit), write(tmp_path / "big.yaml", big)]
        files.append(write(tmp_path / "job.yaml", [job("trainjob", 2, 2, "1")]))

        answers = {a["group"]: a for a in await plan(files, settings)}

        fits = answers[f"{NAMESPACE}/fit"]
        assert fits["fits"] and fits["verdict"] == "Success" and len(fits["placements"]) == 3
        assert answers[f"{NAMESPACE}/trainjob"]["fits"]  # its PodGroup made from the template lines
        refused = answers[f"{NAMESPACE}/big"]
        assert not refused["fits"] and refused["verdict"] == "Unschedulable"
        assert refused["unplaced"][0]["rejections"][0]["plugin"] == "NodeResourcesFit"
        # no reservation can help a member larger than every node
        assert refused["reservation"] == {
            "held": False,
            "possible": False,
            "why": "it would not fit even with every pod on every node finished",
        }
        assert await env.pods() == [], "plan wrote nothing"

        for obj in (*fit, *big):
            await env.create(obj)
        await env.client.create(JOBS, NAMESPACE, job("trainjob", 2, 2, "1"))
        planned = {p["pod"]: p["node"] for p in fits["placements"]}
        bound = await eventually(
            lambda: _when(nodes_of(env, "fit-"), lambda n: len(n) == 3), what="fit bound"
        )
        assert bound == planned
        await eventually(lambda: _when(nodes_of(env, "trainjob-"), lambda n: len(n) == 2), what="job bound")
        # a gang that fits once fit's pods are gone: what a reservation would hold, and when
        later = [podgroup("later", 2), *(pod(f"later-{i}", "later", cpu="25") for i in range(2))]
        (waiting,) = await plan([write(tmp_path / "later.yaml", later)], settings)
        assert not waiting["fits"]
        hint = waiting["reservation"]
        assert (hint["held"], hint["possible"], hint["waitingFor"]) == (False, True, 5)  # fit, trainjob
        assert sorted(n["name"] for n in hint["nodes"]) == ["node-000", "node-001"]
        assert hint["expectedStart"] == "unknown"  # those pods declare no activeDeadlineSeconds

        async def unschedulable() -> dict[str, Any]:
            status = await env.podgroup_status("big")
            return status if status.get("phase") == "Unschedulable" else {}

        status = await eventually(unschedulable, what="big Unschedulable")
        assert [r["reason"] for r in status["unschedulableReasons"]] == ["InsufficientCPU"]


async def test_plan_exit_codes_and_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0, start_operator=False) as env:
        kubeconfig = str(write_kubeconfig(env.cluster.url, tmp_path / "kubeconfig"))

        def run(*files: str, output: str = "json") -> int:
            args = argparse.Namespace(
                filename=list(files),
                output=output,
                namespace="default",
                kubeconfig=kubeconfig,
                feature_gates=None,
            )
            return plan_command(args)

        small = write(tmp_path / "small.yaml", [podgroup("small", 1), pod("small-0", "small")])
        huge = write(tmp_path / "huge.yaml", [podgroup("huge", 1), pod("huge-0", "huge", cpu="64")])
        bad = write(
            tmp_path / "bad.yaml",
            [{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}}],
        )
        other = write(tmp_path / "other.yaml", [pod("o", None, scheduler="default-scheduler")])

        assert await _in_thread(run, small) == FITS
        out = capsys.readouterr().out
        answer = json.loads(out[out.index('{\n  "fits"') :])  # after the emulator's own lines
        assert answer["fits"] is True
        assert answer["groups"][0]["placements"] == [{"pod": f"{NAMESPACE}/small-0", "node": "node-000"}]
        assert await _in_thread(run, small, huge, output="text") == DOES_NOT_FIT
        text = capsys.readouterr().out
        assert f"PodGroup {NAMESPACE}/small (gang, minCount 1): fits now" in text
        assert f"PodGroup {NAMESPACE}/huge (gang, minCount 1): does not fit now" in text
        assert "NodeResourcesFit rejected 1 nodes (node-000)" in text
        assert "reservation: none can help: it would not fit even with every pod on every node" in text
        assert "expected start: unknown" in text
        assert await _in_thread(run, bad) == BAD_INPUT
        assert "apps/v1 Deployment is not planned" in capsys.readouterr().err
        assert await _in_thread(run, other) == BAD_INPUT
        assert "spec.schedulerName is 'default-scheduler'" in capsys.readouterr().err
        assert await _in_thread(run, str(tmp_path / "missing.yaml")) == BAD_INPUT


async def _in_thread(function: Any, *args: Any, **kwargs: Any) -> Any:
    import asyncio

    return await asyncio.to_thread(function, *args, **kwargs)


async def _when(value: Any, test: Any) -> Any:
    result = await value
    return result if test(result) else None
