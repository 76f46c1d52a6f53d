"""The simulated cluster's own controllers under the faults the soak injects. The soak can only blame
lockstep for what is left over if the emulated kube-controller-manager converges through those faults."""

from __future__ import annotations

from reliability_harness import (
    CLAIMS,
    DEVICE_CLASS,
    NAMESPACE,
    PODS,
    RunningCluster,
    claim,
    create,
    create_group,
    pod,
    unique,
    wait_until,
)


def test_reservation_of_a_deleted_pod_is_released_through_an_injected_conflict(sim: RunningCluster) -> None:
    name = unique("release")
    node = sim.cluster.node_names[0]
    create(sim, CLAIMS, claim(f"{name}-claim", DEVICE_CLASS))
    create_group(sim, None, [pod(name, name, claim={"resourceClaimName": f"{name}-claim"})])
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }
    assert sim.http.post(f"{PODS.format(ns=NAMESPACE)}/{name}/binding", binding).status == 201
    uid = sim.http.get(f"{PODS.format(ns=NAMESPACE)}/{name}").body["metadata"]["uid"]
    status = {
        "allocation": {
            "devices": {
                "results": [{"request": "gpu", "driver": DEVICE_CLASS, "pool": node, "device": "gpu-0"}]
            }
        },
        "reservedFor": [{"resource": "pods", "name": name, "uid": uid}],
    }
    claim_path = f"{CLAIMS.format(ns=NAMESPACE)}/{name}-claim"
    allocated = sim.http.call(
        "PATCH", f"{claim_path}/status", {"status": status}, content_type="application/merge-patch+json"
    )
    assert allocated.status == 200, allocated.message
    conflict_once = {
        "verb": "patch",
        "resource": "resourceclaims",
        "subresource": "status",
        "status": 409,
        "count": 1,
    }
    assert sim.http.post("/__sim/faults", conflict_once).status == 200
    try:
        assert (
            sim.http.call("DELETE", f"{PODS.format(ns=NAMESPACE)}/{name}", {"gracePeriodSeconds": 0}).status
            == 200
        )
        wait_until(
            lambda: not (sim.http.get(claim_path).body.get("status") or {}).get("reservedFor"),
            5,
            0.2,
            f"the reservation of deleted pod {name} to be released",
        )
    finally:
        sim.http.delete("/__sim/faults")
