"""The status patches the simulated kubelet writes."""

from __future__ import annotations

from lockstep.sim.controllers.dra_driver import DRIVER_NAME
from lockstep.sim.controllers.kubelet import running_status, terminated_status, unprepared_claim

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
    assert {c["type"] for c in status["conditions"]} == {
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
    }
    assert all(c["status"] == "True" for c in status["conditions"])
    assert status["podIP"] == "10.64.0.1" and status["podIPs"] == [{"ip": "10.64.0.1"}]
    assert status["hostIP"] == "10.0.0.1"
    assert status["startTime"] == "2026-01-01T00:00:05Z"
    assert [(c["name"], c["ready"], "running" in c["state"]) for c in status["containerStatuses"]] == [
        ("a", True, True),
        ("b", True, True),
    ]


def test_a_zero_exit_terminates_containers_and_the_pod_succeeds() -> None:
    status = terminated_status(POD, 0, "2026-01-01T00:01:00Z")["status"]
    assert status["phase"] == "Succeeded"
    terminated = [c["state"]["terminated"] for c in status["containerStatuses"]]
    assert [t["exitCode"] for t in terminated] == [0, 0]
    assert terminated[0]["startedAt"] == "2026-01-01T00:00:00Z"
    assert {c["type"]: c["status"] for c in status["conditions"]} == {
        "Ready": "False",
        "ContainersReady": "False",
    }


def claim_pod(**status: object) -> dict:
    return {
        "metadata": {"name": "w", "namespace": "ns", "uid": "u1"},
        "spec": {
            "nodeName": "node-001",
            "containers": [{"name": "a"}],
            "resourceClaims": [
                {"name": "own", "resourceClaimTemplateName": "t"},
                {"name": "shared", "resourceClaimName": "group-gpu"},
            ],
        },
        "status": {"phase": "Pending", **status},
    }


def allocated(pool: str, reserved_uids: list[str]) -> dict:
    return {
        "status": {
            "allocation": {
                "devices": {
                    "results": [{"request": "r", "driver": DRIVER_NAME, "pool": pool, "device": "gpu-0"}]
                }
            },
            "reservedFor": [{"resource": "pods", "name": "w", "uid": uid} for uid in reserved_uids],
        }
    }


RECORDED = {"resourceClaimStatuses": [{"name": "own", "resourceClaimName": "w-own-abcde"}]}


def test_pod_starts_only_when_every_claim_is_allocated_on_its_node_and_reserved_for_it() -> None:
    ready = {
        "ns/w-own-abcde": allocated("node-001", ["u1"]),
        "ns/group-gpu": allocated("node-001", ["u0", "u1"]),
    }
    assert unprepared_claim(claim_pod(**RECORDED), ready) is None
    assert "no ResourceClaim recorded" in (unprepared_claim(claim_pod(), ready) or "")
    missing = {"ns/w-own-abcde": ready["ns/w-own-abcde"]}
    assert (
        unprepared_claim(claim_pod(**RECORDED), missing) == "claim shared: ResourceClaim group-gpu not found"
    )
    unallocated = {**ready, "ns/group-gpu": {"status": {}}}
    assert "is not allocated" in (unprepared_claim(claim_pod(**RECORDED), unallocated) or "")
    not_reserved = {**ready, "ns/group-gpu": allocated("node-001", ["u0"])}
    assert "is not reserved for the pod" in (unprepared_claim(claim_pod(**RECORDED), not_reserved) or "")
    elsewhere = {**ready, "ns/w-own-abcde": allocated("node-002", ["u1"])}
    assert unprepared_claim(claim_pod(**RECORDED), elsewhere) == (
        "claim own: device node-002/gpu-0 of ResourceClaim w-own-abcde is not on node node-001"
    )
