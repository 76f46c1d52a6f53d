"""The status patches the simulated kubelet writes."""

from __future__ import annotations

from lockstep.sim.kubelet import running_status, succeeded_status

POD = {
    "metadata": {"name": "w", "namespace": "ns", "uid": "u1"},
    "spec": {
        "nodeName": "node-000",
        "containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}],
    },
    "status": {"phase": "Pending", "startTime": "2026-01-01T00:00:00Z"},
}


def test_running_status_leaves_pod_scheduled_to_the_merge_and_reports_every_container() -> None:
    status = running_status(POD, "10.64.0.1", "10.0.0.1", "2026-01-01T00:00:05Z")["status"]
    assert status["phase"] == "Running"
    assert {c["type"] for c in status["conditions"]} == {"Initialized", "Ready", "ContainersReady"}
    assert all(c["status"] == "True" for c in status["conditions"])
    assert status["podIP"] == "10.64.0.1" and status["podIPs"] == [{"ip": "10.64.0.1"}]
    assert status["hostIP"] == "10.0.0.1"
    assert status["startTime"] == "2026-01-01T00:00:05Z"
    assert [(c["name"], c["ready"], "running" in c["state"]) for c in status["containerStatuses"]] == [
        ("a", True, True),
        ("b", True, True),
    ]


def test_succeeded_status_terminates_containers_with_exit_zero() -> None:
    status = succeeded_status(POD, "2026-01-01T00:01:00Z")["status"]
    assert status["phase"] == "Succeeded"
    terminated = [c["state"]["terminated"] for c in status["containerStatuses"]]
    assert [t["exitCode"] for t in terminated] == [0, 0]
    assert terminated[0]["startedAt"] == "2026-01-01T00:00:00Z"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "False",
        "ContainersReady": "False",
    }
