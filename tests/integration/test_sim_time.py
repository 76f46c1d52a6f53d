"""Time in the simulated cluster, over HTTP: simulated workloads (run time, exit code, restartPolicy),
activeDeadlineSeconds, a Job whose pods finish, and lost nodes (node lifecycle, taint eviction, pod GC)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from test_sim_cluster import eventually, get_or_none

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.kubelet import LOST_ANNOTATION
from lockstep.sim.faults import FaultRule
from lockstep.sim.workload import EXIT_CODE, RUN_SECONDS

NS = "clock"
PODS = f"/api/v1/namespaces/{NS}/pods"
JOBS = f"/apis/batch/v1/namespaces/{NS}/jobs"
CONTAINER = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
UNREACHABLE = "node.kubernetes.io/unreachable"


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    sim = SimCluster(
        nodes=2,
        devices_per_node=0,
        kubelet_start_delay=0.02,
        kubelet_delete_delay=0.02,
        node_monitor_grace_period=0.5,
        node_monitor_period=0.1,
        pod_gc_period=0.2,
    )
    await sim.start()
    try:
        await sim.http.create("/api/v1/namespaces", {"metadata": {"name": NS}})
        yield sim
    finally:
        await sim.stop()


async def run_pod(
    sim: SimCluster, name: str, annotations: dict[str, str] | None = None, node: str = "node-000", **spec: Any
) -> None:
    """Create the pod and bind it to ``node``, as a scheduler would."""
    metadata: dict[str, Any] = {"name": name}
    if annotations:
        metadata["annotations"] = annotations
    body = {
        "metadata": metadata,
        "spec": {"automountServiceAccountToken": False, "containers": [CONTAINER], **spec},
    }
    await sim.http.create(PODS, body)
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": node}}
    await sim.http.create(f"{PODS}/{name}/binding", binding)


async def pod_in_phase(sim: SimCluster, name: str, phase: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        pod = await get_or_none(sim.http, f"{PODS}/{name}")
        return pod if pod is not None and pod["status"].get("phase") == phase else None

    pod: dict[str, Any] = await eventually(probe, f"pod {name} {phase}")
    return pod


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    return next(c for c in obj["status"].get("conditions") or [] if c["type"] == kind)


async def test_run_seconds_then_the_pod_succeeds_with_terminated_containers(cluster: SimCluster) -> None:
    await run_pod(cluster, "short", {RUN_SECONDS: "1"}, restartPolicy="Never")
    await pod_in_phase(cluster, "short", "Running")
    running_seen = time.monotonic()

    pod = await pod_in_phase(cluster, "short", "Succeeded")

    assert time.monotonic() - running_seen > 0.7  # it ran for its second, less the polling
    (status,) = pod["status"]["containerStatuses"]
    terminated = status["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (0, "Completed")
    assert terminated["startedAt"] <= terminated["finishedAt"]
    assert (status["ready"], status["restartCount"]) == (False, 0)
    assert (condition(pod, "Ready")["status"], condition(pod, "Ready")["reason"]) == ("False", "PodCompleted")


async def test_a_non_zero_exit_code_fails_the_pod(cluster: SimCluster) -> None:
    await run_pod(cluster, "crash", {RUN_SECONDS: "0.2", EXIT_CODE: "3"}, restartPolicy="Never")

    pod = await pod_in_phase(cluster, "crash", "Failed")

    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (3, "Error")
    assert condition(pod, "Ready")["reason"] == "PodFailed"
    assert "reason" not in pod["status"]  # only a kubelet decision (a deadline, an eviction) sets one


async def test_bad_annotations_are_a_warning_event_and_the_pod_runs_without_them(cluster: SimCluster) -> None:
    await run_pod(cluster, "odd", {RUN_SECONDS: "soon", EXIT_CODE: "-1"}, restartPolicy="Never")

    async def warning() -> list[dict[str, Any]]:
        listed = await cluster.http.get(
            f"/api/v1/namespaces/{NS}/events", {"fieldSelector": "involvedObject.name=odd,type=Warning"}
        )
        return list(listed["items"])

    (event,) = await eventually(warning, "the Warning event")
    assert event["reason"] == "InvalidSimulatedWorkload"
    assert RUN_SECONDS in event["message"] and "'soon'" in event["message"]
    assert EXIT_CODE in event["message"] and "'-1'" in event["message"]
    assert event["source"]["component"] == "kubelet"
    await pod_in_phase(cluster, "odd", "Running")
    await asyncio.sleep(0.5)  # without a run time (none cluster-wide) the containers keep running
    pod = await pod_in_phase(cluster, "odd", "Running")
    assert "running" in pod["status"]["containerStatuses"][0]["state"]


async def test_active_deadline_fails_the_pod_with_deadline_exceeded(cluster: SimCluster) -> None:
    await run_pod(cluster, "slow", {RUN_SECONDS: "60"}, restartPolicy="Never", activeDeadlineSeconds=1)
    await pod_in_phase(cluster, "slow", "Running")
    running_seen = time.monotonic()

    pod = await pod_in_phase(cluster, "slow", "Failed")

    assert time.monotonic() - running_seen > 0.7
    assert pod["status"]["reason"] == "DeadlineExceeded"
    assert pod["status"]["message"] == "Pod was active on the node longer than the specified deadline"
    terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert (terminated["exitCode"], terminated["reason"]) == (143, "Error")
    listed = await cluster.http.get(
        f"/api/v1/namespaces/{NS}/events",
        {"fieldSelector": "involvedObject.name=slow,reason=DeadlineExceeded"},
    )
    assert [e["type"] for e in listed["items"]] == ["Normal"]


async def test_on_failure_restarts_the_container_and_the_pod_keeps_running(cluster: SimCluster) -> None:
    await run_pod(cluster, "flaky", {RUN_SECONDS: "0.2", EXIT_CODE: "1"}, restartPolicy="OnFailure")

    async def restarted_twice() -> dict[str, Any] | None:
        pod = await cluster.http.get(f"{PODS}/flaky")
        statuses = pod["status"].get("containerStatuses") or [{}]
        return pod if statuses[0].get("restartCount", 0) >= 2 else None

    pod = await eventually(restarted_twice, "two restarts")
    assert pod["status"]["phase"] == "Running"
    (status,) = pod["status"]["containerStatuses"]
    assert "running" in status["state"]
    last = status["lastState"]["terminated"]
    assert (last["exitCode"], last["reason"]) == (1, "Error")


async def test_a_job_whose_pods_run_one_second_completes(cluster: SimCluster) -> None:
    template = {
        "metadata": {"annotations": {RUN_SECONDS: "1"}},
        "spec": {"restartPolicy": "OnFailure", "containers": [CONTAINER]},
    }
    await cluster.http.create(
        JOBS,
        {"metadata": {"name": "batch"}, "spec": {"completions": 2, "parallelism": 2, "template": template}},
    )

    async def bind_pending() -> bool:
        listed = await cluster.http.get(PODS, {"labelSelector": "batch.kubernetes.io/job-name=batch"})
        for item in listed["items"]:
            if not item["spec"].get("nodeName"):
                binding = {"metadata": {"name": item["metadata"]["name"]}, "target": {"name": "node-001"}}
                await cluster.http.create(f"{PODS}/{item['metadata']['name']}/binding", binding)
        return len(listed["items"]) == 2

    await eventually(bind_pending, "the job's two pods bound")

    async def complete() -> dict[str, Any] | None:
        job = await cluster.http.get(f"{JOBS}/batch")
        conditions = {c["type"]: c for c in job["status"].get("conditions") or []}
        return job if conditions.get("Complete", {}).get("status") == "True" else None

    job = await eventually(complete, "the job Complete")
    assert job["status"]["succeeded"] == 2 and "active" not in job["status"]
    assert condition(job, "Complete")["reason"] == "CompletionsReached"
    assert condition(job, "SuccessCriteriaMet")["status"] == "True"
    assert job["status"]["completionTime"]
    listed = await cluster.http.get(PODS, {"labelSelector": "batch.kubernetes.io/job-name=batch"})
    assert sorted(p["status"]["phase"] for p in listed["items"]) == ["Succeeded", "Succeeded"]


def taints_of(node: dict[str, Any]) -> set[tuple[str, str]]:
    return {(t["key"], t["effect"]) for t in node["spec"].get("taints") or []}


async def test_a_lost_node_is_unknown_tainted_and_evicts_pods_after_their_toleration(
    cluster: SimCluster,
) -> None:
    short = [{"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 1}]
    await run_pod(cluster, "brief", tolerations=short)
    await run_pod(cluster, "patient")  # DefaultTolerationSeconds: 300 s
    await pod_in_phase(cluster, "brief", "Running")
    await pod_in_phase(cluster, "patient", "Running")
    http = cluster.http

    await cluster.lose_node("node-000")

    async def unreachable() -> dict[str, Any] | None:
        node = await http.get("/api/v1/nodes/node-000")
        wanted = {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
        return node if wanted <= taints_of(node) else None

    node = await eventually(unreachable, "the unreachable taints")
    tainted_seen = time.monotonic()
    ready = condition(node, "Ready")
    assert (ready["status"], ready["reason"]) == ("Unknown", "NodeStatusUnknown")
    assert ready["message"] == "Kubelet stopped posting node status."
    assert condition(node, "MemoryPressure")["status"] == "Unknown"
    assert next(t for t in node["spec"]["taints"] if t["effect"] == "NoExecute")["timeAdded"]
    other = await http.get("/api/v1/nodes/node-001")
    assert condition(other, "Ready")["status"] == "True" and not taints_of(other)
    for name in ("brief", "patient"):
        pod = await http.get(f"{PODS}/{name}")
        assert condition(pod, "Ready")["status"] == "False"
    before = [c["type"] for c in (await http.get(f"{PODS}/brief"))["status"]["conditions"]]

    async def evicted() -> dict[str, Any] | None:
        pod = await http.get(f"{PODS}/brief")
        return pod if pod["metadata"].get("deletionTimestamp") else None

    pod = await eventually(evicted, "the pod with a 1 s toleration evicted")
    assert time.monotonic() - tainted_seen > 0.5
    disruption = condition(pod, "DisruptionTarget")
    assert (disruption["status"], disruption["reason"]) == ("True", "DeletionByTaintManager")
    # upstream's UpdatePodCondition: after the pod's other conditions, which keep their order
    assert [c["type"] for c in pod["status"]["conditions"]] == [*before, "DisruptionTarget"]
    assert pod["status"]["phase"] == "Running"  # its kubelet cannot report: it stays, terminating
    await asyncio.sleep(0.5)
    assert await get_or_none(http, f"{PODS}/brief") is not None
    patient = await http.get(f"{PODS}/patient")
    assert not patient["metadata"].get("deletionTimestamp")

    await cluster.restore_node("node-000")

    async def healthy() -> bool:
        node = await http.get("/api/v1/nodes/node-000")
        return condition(node, "Ready")["status"] == "True" and not taints_of(node)

    await eventually(healthy, "the node Ready and untainted")
    await eventually(
        lambda: _gone(cluster, "brief"), "the evicted pod removed by its kubelet once the node is back"
    )

    async def patient_ready() -> bool:
        return condition(await http.get(f"{PODS}/patient"), "Ready")["status"] == "True"

    await eventually(patient_ready, "the remaining pod Ready again")


async def test_pod_gc_force_deletes_terminating_pods_of_an_out_of_service_node(cluster: SimCluster) -> None:
    await run_pod(cluster, "stuck", node="node-001")
    await pod_in_phase(cluster, "stuck", "Running")
    http = cluster.http
    await cluster.lose_node("node-001")

    async def unknown() -> dict[str, Any] | None:
        node = await http.get("/api/v1/nodes/node-001")
        return node if (UNREACHABLE, "NoExecute") in taints_of(node) else None

    await eventually(unknown, "the node unreachable")
    await http.delete(f"{PODS}/stuck")
    await asyncio.sleep(0.5)  # nobody removes a terminating pod of a lost node...
    assert (await http.get(f"{PODS}/stuck"))["metadata"].get("deletionTimestamp")

    node = await http.get("/api/v1/nodes/node-001")
    taints = [*node["spec"]["taints"], {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]
    await http.patch("/api/v1/nodes/node-001", {"spec": {"taints": taints}})

    await eventually(lambda: _gone(cluster, "stuck"), "the pod force-deleted")  # ...but the pod GC, then
    node = await http.get("/api/v1/nodes/node-001")
    assert ("node.kubernetes.io/out-of-service", "NoExecute") in taints_of(node)


async def test_kubectl_loses_a_node_by_its_lost_annotation_and_restores_it_by_removing_it(
    cluster: SimCluster,
) -> None:
    await run_pod(cluster, "cut-off", {RUN_SECONDS: "0.5"}, restartPolicy="Never", node="node-001")
    await pod_in_phase(cluster, "cut-off", "Running")
    http = cluster.http
    await http.patch("/api/v1/nodes/node-001", {"metadata": {"annotations": {LOST_ANNOTATION: "true"}}})

    async def unreachable() -> bool:
        node = await http.get("/api/v1/nodes/node-001")
        return condition(node, "Ready")["status"] == "Unknown" and (UNREACHABLE, "NoExecute") in taints_of(
            node
        )

    await eventually(unreachable, "the annotated node Ready Unknown and tainted unreachable")
    await asyncio.sleep(0.5)  # its containers exited meanwhile, but its kubelet is cut off
    assert (await http.get(f"{PODS}/cut-off"))["status"]["phase"] == "Running"

    await http.patch("/api/v1/nodes/node-001", {"metadata": {"annotations": {LOST_ANNOTATION: None}}})

    async def healthy() -> bool:
        node = await http.get("/api/v1/nodes/node-001")
        return condition(node, "Ready")["status"] == "True" and not taints_of(node)

    await eventually(healthy, "the node Ready and untainted once the annotation is gone")
    await pod_in_phase(cluster, "cut-off", "Succeeded")


async def test_the_pods_of_a_deleted_node_are_deleted_by_the_pod_gc_after_its_quarantine(
    cluster: SimCluster,
) -> None:
    await run_pod(cluster, "unlucky", node="node-001")  # first in the pod GC's pass
    await run_pod(cluster, "orphan", node="node-001")
    await pod_in_phase(cluster, "unlucky", "Running")
    await pod_in_phase(cluster, "orphan", "Running")
    # every write of the pod GC to the first pod fails: the others are collected all the same
    cluster.server.faults.add(FaultRule(verb="patch", resource="pods", name="unlucky", status=500))
    http = cluster.http
    await http.delete("/api/v1/nodes/node-001")
    deleted = time.monotonic()
    await eventually(lambda: _gone(cluster, "orphan"), "the orphaned pod deleted by the pod GC")
    assert time.monotonic() - deleted >= 0.4  # twice pod_gc_period: the node was missing that long
    assert not await _gone(cluster, "unlucky")


async def _gone(sim: SimCluster, name: str) -> bool:
    return await get_or_none(sim.http, f"{PODS}/{name}") is None


async def test_a_pod_that_finishes_on_a_lost_node_is_reported_once_the_node_is_back(
    cluster: SimCluster,
) -> None:
    await run_pod(cluster, "unseen", {RUN_SECONDS: "0.5"}, restartPolicy="Never")
    await pod_in_phase(cluster, "unseen", "Running")
    await cluster.lose_node("node-000")

    await asyncio.sleep(1.0)  # its containers exited meanwhile, but nobody can say so
    pod = await cluster.http.get(f"{PODS}/unseen")
    assert pod["status"]["phase"] == "Running"

    await cluster.restore_node("node-000")
    pod = await pod_in_phase(cluster, "unseen", "Succeeded")
    assert condition(pod, "Ready")["status"] == "False"
    with pytest.raises(ValueError, match="not a simulated node"):
        await cluster.lose_node("node-999")


async def job_pods(sim: SimCluster, job: str) -> list[dict[str, Any]]:
    listed = await sim.http.get(PODS, {"labelSelector": f"batch.kubernetes.io/job-name={job}"})
    items: list[dict[str, Any]] = listed["items"]
    return items


async def job_condition(sim: SimCluster, job: str, kind: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        found = await sim.http.get(f"{JOBS}/{job}")
        conditions = {c["type"]: c for c in found["status"].get("conditions") or []}
        return found if conditions.get(kind, {}).get("status") == "True" else None

    found: dict[str, Any] = await eventually(probe, f"job {job} {kind}")
    return found


async def test_an_indexed_job_replaces_a_failed_index_after_another_completed_and_completes(
    cluster: SimCluster,
) -> None:
    """kubernetes #142330 without a scheduler: index 0 finishes first, index 1 fails after that; the
    Job controller retries index 1 only, within backoffLimit, and the Job completes."""
    template = {
        "metadata": {"annotations": {RUN_SECONDS: "0.3"}},
        "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
    }
    spec = {"completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimit": 1}
    await cluster.http.create(JOBS, {"metadata": {"name": "idx"}, "spec": {**spec, "template": template}})
    pods = await eventually(lambda: _two(job_pods(cluster, "idx")), "two pods")
    by_index = {p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]: p for p in pods}
    first, second = by_index["0"]["metadata"]["name"], by_index["1"]["metadata"]["name"]
    await cluster.http.patch(f"{PODS}/{second}", {"metadata": {"annotations": {EXIT_CODE: "3"}}})
    binding = {"metadata": {"name": first}, "target": {"name": "node-000"}}
    await cluster.http.create(f"{PODS}/{first}/binding", binding)
    await pod_in_phase(cluster, first, "Succeeded")
    await cluster.http.create(f"{PODS}/{second}/binding", {**binding, "metadata": {"name": second}})
    await pod_in_phase(cluster, second, "Failed")

    async def replacement() -> dict[str, Any] | None:
        for pod in await job_pods(cluster, "idx"):
            index = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
            if pod["metadata"]["name"] not in (first, second) and index == "1":
                return pod
        return None

    retry = await eventually(replacement, "a new pod for index 1")
    assert len(await job_pods(cluster, "idx")) == 3  # index 0 is not run again
    name = retry["metadata"]["name"]
    await cluster.http.create(f"{PODS}/{name}/binding", {**binding, "metadata": {"name": name}})
    job = await job_condition(cluster, "idx", "Complete")
    assert (job["status"]["succeeded"], job["status"]["failed"]) == (2, 1)


async def _two(pods: Any) -> list[dict[str, Any]] | None:
    items: list[dict[str, Any]] = await pods
    return items if len(items) == 2 else None


async def test_a_job_past_its_backoff_limit_fails_with_backoff_limit_exceeded(cluster: SimCluster) -> None:
    template = {
        "metadata": {"annotations": {RUN_SECONDS: "0.05", EXIT_CODE: "1"}},
        "spec": {"restartPolicy": "Never", "containers": [CONTAINER]},
    }
    spec = {"completions": 1, "parallelism": 1, "backoffLimit": 1, "template": template}
    await cluster.http.create(JOBS, {"metadata": {"name": "doomed"}, "spec": spec})

    async def bind_pending() -> dict[str, Any] | None:
        for item in await job_pods(cluster, "doomed"):
            if not item["spec"].get("nodeName") and not item["metadata"].get("deletionTimestamp"):
                binding = {"metadata": {"name": item["metadata"]["name"]}, "target": {"name": "node-001"}}
                await cluster.http.create(f"{PODS}/{item['metadata']['name']}/binding", binding)
        found = await cluster.http.get(f"{JOBS}/doomed")
        return found if any(c["type"] == "Failed" for c in found["status"].get("conditions") or []) else None

    job = await eventually(bind_pending, "the job Failed")
    failed = condition(job, "Failed")
    assert (failed["reason"], failed["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert condition(job, "FailureTarget")["reason"] == "BackoffLimitExceeded"
    assert job["status"]["failed"] == 2  # the first try and one retry: backoffLimit 1
    await asyncio.sleep(0.3)
    assert len(await job_pods(cluster, "doomed")) == 2  # nothing created after the failure
