"""The resourceclaim controller's decisions (pure functions, no server)."""

from __future__ import annotations

from typing import Any

from lockstep.sim.controllers.resourceclaim import (
    DELETE_PROTECTION_FINALIZER,
    POD_CLAIM_ANNOTATION,
    ClaimPlan,
    claim_from_template,
    generate_name,
    is_pod_done,
    plan_claim,
    plan_pod,
)

ALLOCATION = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "gpu-0"}]}}


def pod(name: str = "worker-0", uid: str = "uid-w0", **extra: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {
            "containers": [{"name": "main"}],
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "shared", "resourceClaimName": "group-claim"},
            ],
        },
        "status": {"phase": "Pending"},
    }
    for key, value in extra.items():
        obj[key].update(value)
    return obj


def generated_claim(owner: dict[str, Any], reserved: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    claim: dict[str, Any] = {
        "metadata": {
            "name": f"{owner['metadata']['name']}-gpu-abcde",
            "namespace": "ns",
            "uid": "claim-uid",
            "annotations": {POD_CLAIM_ANNOTATION: "gpu"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": owner["metadata"]["name"],
                    "uid": owner["metadata"]["uid"],
                    "controller": True,
                }
            ],
        },
        "status": {},
    }
    if reserved:
        claim["status"] = {"allocation": ALLOCATION, "reservedFor": reserved}
    return claim


def ref(p: dict[str, Any]) -> dict[str, Any]:
    return {"resource": "pods", "name": p["metadata"]["name"], "uid": p["metadata"]["uid"]}


def test_template_reference_gets_a_claim_and_direct_reference_does_not() -> None:
    assert plan_pod(pod(), []).create == {"gpu": "gpu-template"}


def test_existing_owned_claim_is_recorded_instead_of_created_again() -> None:
    worker = pod()
    plan = plan_pod(worker, [generated_claim(worker)])
    assert plan.create == {}
    assert plan.record == {"gpu": "worker-0-gpu-abcde"}


def test_recorded_claim_and_terminating_pod_need_nothing() -> None:
    recorded = pod(status={"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "x"}]})
    assert plan_pod(recorded, []) == plan_pod(pod(metadata={"deletionTimestamp": "2026-01-01T00:00:00Z"}), [])
    assert plan_pod(recorded, []).create == {}


def test_claim_from_template_is_owned_by_the_pod_and_annotated() -> None:
    template = {
        "spec": {
            "metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "c"}}]}},
        }
    }
    claim = claim_from_template(pod(), "gpu", template)
    meta = claim["metadata"]
    assert meta["generateName"] == "worker-0-gpu-"
    assert meta["annotations"] == {"note": "x", POD_CLAIM_ANNOTATION: "gpu"}
    assert meta["labels"] == {"team": "a"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "worker-0",
            "uid": "uid-w0",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"] == template["spec"]["spec"]


def test_generate_name_shortens_both_parts_proportionally() -> None:
    # 60 + 30 characters plus two hyphens is 92 > 57: each part keeps 57/92 of its length.
    assert generate_name("p" * 60, "c" * 30) == "p" * 37 + "-" + "c" * 18


def test_reservation_of_a_deleted_pod_is_dropped_and_the_claim_deallocated() -> None:
    gone = pod("gone", "uid-gone")
    claim = {
        "metadata": {
            "name": "shared",
            "namespace": "ns",
            "uid": "c",
            "finalizers": [DELETE_PROTECTION_FINALIZER],
        },
        "status": {"allocation": ALLOCATION, "reservedFor": [ref(gone)]},
    }
    plan = plan_claim(claim, {"gone": None}, set())
    assert plan == ClaimPlan(reserved_for=[], deallocate=True, remove_finalizer=True, delete=False)


def test_a_claim_without_the_finalizer_keeps_its_allocation_like_upstream() -> None:
    gone = pod("gone", "uid-gone")
    claim = {
        "metadata": {"name": "shared", "namespace": "ns", "uid": "c"},
        "status": {"allocation": ALLOCATION, "reservedFor": [ref(gone)]},
    }
    assert plan_claim(claim, {"gone": None}, set()) == ClaimPlan(reserved_for=[])


def test_a_deleted_claim_keeps_its_finalizer_while_a_pod_uses_it_then_loses_it() -> None:
    running = pod("a", "uid-a", status={"phase": "Running"})
    claim = {
        "metadata": {
            "name": "shared",
            "namespace": "ns",
            "uid": "c",
            "finalizers": [DELETE_PROTECTION_FINALIZER],
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {"allocation": ALLOCATION, "reservedFor": [ref(running)]},
    }
    assert plan_claim(claim, {"a": running}, set()) == ClaimPlan()
    assert plan_claim(claim, {"a": None}, set()) == ClaimPlan(
        reserved_for=[], deallocate=True, remove_finalizer=True
    )
    unreserved = {**claim, "status": {"allocation": ALLOCATION}}
    assert plan_claim(unreserved, {}, set()) == ClaimPlan(deallocate=True, remove_finalizer=True)


def test_only_stale_entries_are_dropped_and_allocation_kept_while_others_reserve() -> None:
    running = pod("a", "uid-a", status={"phase": "Running"})
    done = pod("b", "uid-b", status={"phase": "Succeeded"})
    replaced = pod("c", "uid-c-new")
    claim = {
        "metadata": {"name": "shared", "namespace": "ns", "uid": "c"},
        "status": {
            "allocation": ALLOCATION,
            "reservedFor": [ref(running), ref(done), {"resource": "pods", "name": "c", "uid": "uid-c-old"}],
        },
    }
    plan = plan_claim(claim, {"a": running, "b": done, "c": replaced}, set())
    assert plan.reserved_for == [ref(running)]
    assert not plan.deallocate and not plan.delete


def test_pod_seen_deleted_is_dropped_even_if_a_stale_copy_exists() -> None:
    worker = pod(status={"phase": "Running"})
    claim = {
        "metadata": {"name": "x", "namespace": "ns", "uid": "c"},
        "status": {"allocation": ALLOCATION, "reservedFor": [ref(worker)]},
    }
    assert plan_claim(claim, {"worker-0": worker}, {"uid-w0"}).reserved_for == []


def test_unused_claim_that_was_never_reserved_is_not_deallocated() -> None:
    claim = {"metadata": {"name": "x", "namespace": "ns", "uid": "c"}, "status": {"allocation": ALLOCATION}}
    assert plan_claim(claim, {}, set()) == ClaimPlan()


def test_podgroup_claims_and_non_pod_consumers_are_left_alone() -> None:
    claim = {
        "metadata": {
            "name": "group-gpu",
            "namespace": "ns",
            "uid": "c",
            "ownerReferences": [
                {
                    "apiVersion": "scheduling.lockstep.dev/v1alpha1",
                    "kind": "PodGroup",
                    "name": "g",
                    "uid": "g",
                    "controller": True,
                }
            ],
        },
        "status": {
            "allocation": ALLOCATION,
            "reservedFor": [
                {"apiGroup": "scheduling.lockstep.dev", "resource": "podgroups", "name": "g", "uid": "g"}
            ],
        },
    }
    assert plan_claim(claim, {}, set()) == ClaimPlan()
    unreserved = {**claim, "status": {}}
    assert plan_claim(unreserved, {}, set()).delete is False


def test_generated_claim_is_deleted_when_its_pod_is_gone_replaced_or_done() -> None:
    worker = pod()
    claim = generated_claim(worker)
    assert plan_claim(claim, {"worker-0": None}, set()).delete
    assert plan_claim(claim, {"worker-0": pod(uid="other")}, set()).delete
    assert plan_claim(claim, {"worker-0": pod(status={"phase": "Failed"})}, set()).delete
    assert not plan_claim(claim, {"worker-0": worker}, set()).delete
    reserved = generated_claim(worker, [ref(worker)])
    assert not plan_claim(reserved, {"worker-0": worker}, set()).delete


def test_pod_done_means_terminal_or_deleted_while_unbound() -> None:
    assert is_pod_done(pod(status={"phase": "Succeeded"}))
    assert is_pod_done(pod(metadata={"deletionTimestamp": "t"}))
    assert not is_pod_done(pod(metadata={"deletionTimestamp": "t"}, spec={"nodeName": "node-000"}))
    assert not is_pod_done(pod(status={"phase": "Running"}))
