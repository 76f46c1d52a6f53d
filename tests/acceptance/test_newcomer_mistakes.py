"""What a newcomer trips over, said where they look (issue 28, point 3): every pod affected by a
PodGroup lockstep cannot use gets PodScheduled=False naming the field or the missing object and an
Event of its own, and the PodGroup's status states the real reason (not "waiting to exist")."""

from __future__ import annotations

import dataclasses
from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION
from lockstep.kube.client import EVENTS, PODS, ResourceKind

PRIORITY_CLASSES = ResourceKind(
    "scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False
)


async def scheduled_condition(env: Env, name: str) -> dict[str, Any]:
    raw = await env.client.get(PODS, NAMESPACE, name)
    conditions = (raw.get("status") or {}).get("conditions") or []
    found = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
    return found if found is not None and found.get("status") == "False" else {}


async def pod_events(env: Env, name: str) -> list[str]:
    events = (await env.client.list(EVENTS, NAMESPACE)).get("items") or []
    return [
        f"{e.get('reason')}: {e.get('message')}"
        for e in events
        if e["involvedObject"].get("kind") == "Pod" and e["involvedObject"].get("name") == name
    ]


def short_grace(env: Env, seconds: float) -> None:
    scheduler = env.operator.core.scheduler  # type: ignore[union-attr]
    scheduler.options = dataclasses.replace(scheduler.options, missing_podgroup_grace_seconds=seconds)


async def test_an_unknown_priority_class_is_said_on_every_pod_and_the_podgroup() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        group = podgroup("prio", 2)
        group["spec"]["priorityClassName"] = "nosuch"
        await env.create(group)
        for i in range(2):
            await env.create(pod(f"prio-{i}", "prio"))
        for i in range(2):
            condition = await eventually(lambda i=i: scheduled_condition(env, f"prio-{i}"), what="condition")
            assert condition["reason"] == "InvalidPodGroup"
            assert "spec.priorityClassName: no PriorityClass named 'nosuch'" in condition["message"]
            events = await eventually(lambda i=i: pod_events(env, f"prio-{i}"), what="event on the pod")
            assert any("spec.priorityClassName" in e for e in events), events

        async def refused() -> dict[str, Any]:
            status = await env.podgroup_status("prio")
            return status if status.get("phase") == "Unschedulable" else {}

        status = await eventually(refused, what="PodGroup Unschedulable")
        (condition,) = [c for c in status["conditions"] if c["type"] == "PodGroupScheduled"]
        assert "spec.priorityClassName" in condition["message"]
        assert "to exist" not in condition["message"]
        assert [r["reason"] for r in status["unschedulableReasons"]] == ["InvalidPodGroup"]

        await env.client.create(
            PRIORITY_CLASSES,
            None,
            {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "nosuch"},
             "value": 10},
        )  # fmt: skip
        await eventually(lambda: _equals(env.bound("prio"), 2), what="bound once the class exists")


async def test_a_bad_min_count_and_a_missing_podgroup_are_said_on_the_pods() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=0) as env:
        short_grace(env, 0.3)
        for name, value in (("zero", "zero"), ("nought", "0")):
            manifest = pod(f"{name}-0", name)
            manifest["metadata"]["annotations"] = {MIN_COUNT_ANNOTATION: value}
            await env.create(manifest)
        await env.create(pod("lost-0", "nosuchgroup"))

        for name in ("zero-0", "nought-0"):
            condition = await eventually(lambda n=name: scheduled_condition(env, n), what=f"{name} told")
            assert condition["reason"] == "InvalidMinCount"
            assert f"annotation {MIN_COUNT_ANNOTATION}" in condition["message"]
            assert "no PodGroup" in condition["message"]
            events = await eventually(lambda n=name: pod_events(env, n), what="event on the pod")
            assert any(MIN_COUNT_ANNOTATION in e for e in events), events

        condition = await eventually(lambda: scheduled_condition(env, "lost-0"), what="lost-0 told")
        assert condition["reason"] == "PodGroupNotFound"
        assert f"PodGroup {NAMESPACE}/nosuchgroup" in condition["message"]
        assert "label scheduling.lockstep.dev/pod-group" in condition["message"]
        assert await eventually(lambda: pod_events(env, "lost-0"), what="event on lost-0")

        await env.create(podgroup("nosuchgroup", 1))
        await eventually(lambda: _equals(env.bound("nosuchgroup"), 1), what="bound once it exists")
        assert await env.invariant_violations() == []


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)
