"""The invariant checker against real API objects: a deliberately bad "scheduler" (these tests, writing
bindings and claim status by hand) breaks each invariant through the emulator, and the checker, reading
over HTTP, names the breakage. Without this, a checker that silently reads nothing would pass the soak."""

from __future__ import annotations

from typing import Any

from reliability_harness import (
    CLAIMS,
    NAMESPACE,
    PODGROUPS,
    PODS,
    RunningCluster,
    claim,
    create,
    create_group,
    pod,
    podgroup,
    unique,
)

from lockstep.sim.invariants import BindingHistory, Violation, ViolationKind, check_state

DEVICE_CLASS = "gpu.sim.lockstep.dev"


def bind(sim: RunningCluster, name: str, node: str) -> int:
    body = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    }
    return sim.http.post(f"{PODS.format(ns=NAMESPACE)}/{name}/binding", body).status


def violations_about(sim: RunningCluster, kind: ViolationKind, ref: str) -> list[Violation]:
    return [v for v in check_state(sim.state()) if v.kind is kind and v.object_ref == ref]


def test_checker_sees_a_node_filled_beyond_allocatable(sim: RunningCluster) -> None:
    group = unique("overfill")
    node = sim.cluster.node_names[0]
    create_group(sim, None, [pod(f"{group}-{i}", group, cpu="20") for i in range(2)])
    assert bind(sim, f"{group}-0", node) == 201
    assert violations_about(sim, ViolationKind.NODE_OVER_ALLOCATABLE, f"Node/{node}") == []
    assert bind(sim, f"{group}-1", node) == 201
    (violation,) = violations_about(sim, ViolationKind.NODE_OVER_ALLOCATABLE, f"Node/{node}")
    assert "cpu" in violation.message and f"{NAMESPACE}/{group}-1" in violation.message


def test_checker_sees_a_half_bound_gang_and_the_api_refuses_a_second_binding(sim: RunningCluster) -> None:
    group = unique("half")
    create_group(sim, podgroup(group, 3), [pod(f"{group}-{i}", group) for i in range(3)])
    ref = f"PodGroup/{NAMESPACE}/{group}"
    assert violations_about(sim, ViolationKind.GANG_PARTIALLY_BOUND, ref) == []
    assert bind(sim, f"{group}-0", sim.cluster.node_names[0]) == 201
    (violation,) = violations_about(sim, ViolationKind.GANG_PARTIALLY_BOUND, ref)
    assert "1 of 3" in violation.message

    history = BindingHistory()
    history.observe(sim.http.get(f"{PODS.format(ns=NAMESPACE)}/{group}-0").body)
    assert bind(sim, f"{group}-0", sim.cluster.node_names[1]) == 409
    history.observe(sim.http.get(f"{PODS.format(ns=NAMESPACE)}/{group}-0").body)
    assert history.violations() == []


def test_checker_sees_a_bound_pod_marked_unschedulable(sim: RunningCluster) -> None:
    group = unique("stale")
    create_group(sim, None, [pod(f"{group}-0", group)])
    assert bind(sim, f"{group}-0", sim.cluster.node_names[0]) == 201
    ref = f"Pod/{NAMESPACE}/{group}-0"
    assert violations_about(sim, ViolationKind.BOUND_POD_NOT_SCHEDULED, ref) == []
    stale_failure = {
        "status": {
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "late failure",
                }
            ]
        }
    }
    patched = sim.http.call(
        "PATCH",
        f"{PODS.format(ns=NAMESPACE)}/{group}-0/status",
        stale_failure,
        content_type="application/strategic-merge-patch+json",
    )
    assert patched.status == 200, patched.message
    (violation,) = violations_about(sim, ViolationKind.BOUND_POD_NOT_SCHEDULED, ref)
    assert "late failure" in violation.message


def allocate(
    sim: RunningCluster, name: str, node: str, device: str, reserved_for: list[dict[str, Any]]
) -> int:
    status: dict[str, Any] = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DEVICE_CLASS, "pool": node, "device": device}]
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
        }
    }
    if reserved_for:
        status["reservedFor"] = reserved_for
    response = sim.http.call(
        "PATCH",
        f"{CLAIMS.format(ns=NAMESPACE)}/{name}/status",
        {"status": status},
        content_type="application/merge-patch+json",
    )
    return response.status


def test_checker_sees_a_device_in_two_claims_and_a_reservation_off_the_allocation_node(
    sim: RunningCluster,
) -> None:
    group = unique("dra")
    node, other = sim.cluster.node_names[0], sim.cluster.node_names[1]
    for suffix in ("a", "b"):
        create(sim, CLAIMS, claim(f"{group}-{suffix}", DEVICE_CLASS))
    create_group(sim, None, [pod(f"{group}-0", group, claim={"resourceClaimName": f"{group}-a"})])
    assert bind(sim, f"{group}-0", other) == 201
    uid = sim.http.get(f"{PODS.format(ns=NAMESPACE)}/{group}-0").body["metadata"]["uid"]
    consumer = [{"resource": "pods", "name": f"{group}-0", "uid": uid}]
    assert allocate(sim, f"{group}-a", node, "gpu-0", consumer) == 200
    (off_node,) = violations_about(
        sim, ViolationKind.CLAIM_RESERVED_OFF_ALLOCATION_NODE, f"ResourceClaim/{NAMESPACE}/{group}-a"
    )
    assert other in off_node.message

    device_ref = f"Device/{DEVICE_CLASS}/{node}/gpu-0"
    assert violations_about(sim, ViolationKind.DEVICE_ALLOCATED_TWICE, device_ref) == []
    assert allocate(sim, f"{group}-b", node, "gpu-0", []) == 200
    (twice,) = violations_about(sim, ViolationKind.DEVICE_ALLOCATED_TWICE, device_ref)
    assert f"{NAMESPACE}/{group}-a" in twice.message and f"{NAMESPACE}/{group}-b" in twice.message
    assert violations_about(
        sim, ViolationKind.ALLOCATION_WITHOUT_CONSUMER, f"ResourceClaim/{NAMESPACE}/{group}-b"
    )


def test_checker_reads_podgroups_and_claims_from_the_api(sim: RunningCluster) -> None:
    group = unique("listed")
    create(sim, PODGROUPS, podgroup(group, 2))
    create(sim, CLAIMS, claim(f"{group}-claim", DEVICE_CLASS))
    state = sim.state()
    assert any(g["metadata"]["name"] == group for g in state.podgroups)
    assert any(c["metadata"]["name"] == f"{group}-claim" for c in state.claims)
    assert len(state.nodes) == len(sim.cluster.node_names)
