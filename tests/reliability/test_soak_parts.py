"""The soak's own judgement: the workload it plans and how it reads logs and cluster state."""

from __future__ import annotations

import json
import random

from lockstep.sim.invariants import ClusterState
from soak import (
    OVERSIZED_CPU_MILLIS,
    GroupPlan,
    has_clear_unschedulable_condition,
    leadership_overlap,
    plan_workload,
    pod_manifest,
    settled,
    shared_nodes,
    unexplained_errors,
)


def test_planned_workload_is_mixed_and_its_unfittable_groups_truly_cannot_fit() -> None:
    plans = plan_workload(2000, random.Random(9))
    assert 2000 <= sum(p.pods for p in plans) < 2012
    assert {p.claims for p in plans} == {"none", "per-pod", "shared", "volumes", "extended"}
    assert {p.policy for p in plans} == {"gang", "basic"}
    never = [p for p in plans if not p.fits]
    assert never, "the soak must include groups that can never fit"
    for plan in never:
        assert plan.min_count > plan.pods or plan.cpu_millis == OVERSIZED_CPU_MILLIS
    assert any(p.min_count > p.pods for p in never) and any(
        p.cpu_millis == OVERSIZED_CPU_MILLIS for p in never
    )
    classes = {p.priority_class for p in plans}
    assert classes == {"soak-low", "soak-high"}
    assert pod_manifest(plans[0], 0)["spec"]["priorityClassName"] == plans[0].priority_class


def test_pods_with_claims_reference_them_from_the_container() -> None:
    plan = GroupPlan("shared-1", "gang", 3, 3, 100, 64, "shared", True)
    manifest = pod_manifest(plan, 2)
    assert manifest["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "shared-1-shared"}]
    assert manifest["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    assert manifest["metadata"]["labels"] == {"scheduling.lockstep.dev/pod-group": "shared-1"}


def test_pods_of_a_volumes_group_each_mount_their_own_claim() -> None:
    plan = GroupPlan("volumes-1", "gang", 2, 2, 100, 64, "volumes", True)
    manifests = [pod_manifest(plan, i) for i in range(2)]
    names = [m["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] for m in manifests]
    assert names == ["volumes-1-0-data", "volumes-1-1-data"]
    assert "resourceClaims" not in manifests[0]["spec"]


def test_pods_of_an_extended_group_ask_for_the_extended_resource_and_list_no_claim() -> None:
    plan = GroupPlan("extended-1", "gang", 2, 2, 100, 64, "extended", True)
    resources = pod_manifest(plan, 0)["spec"]["containers"][0]["resources"]
    assert resources["requests"]["example.com/gpu"] == resources["limits"]["example.com/gpu"] == "1"
    assert "resourceClaims" not in pod_manifest(plan, 0)["spec"]


def record(level: str, event: str, **extra: str) -> str:
    return json.dumps({"level": level, "event": event, **extra})


def test_error_lines_explained_only_by_injected_faults() -> None:
    explained = record("error", "bind failed", error="POST binding: 500 InternalError: injected fault")
    unexplained = record("error", "scheduler loop crashed", error="KeyError: 'spec'")
    lines = [
        explained,
        unexplained,
        record("info", "KeyError mentioned at info level"),
        record("warning", "retrying", error="HTTP 500"),
        "Traceback (most recent call last):",
    ]
    assert unexplained_errors(lines) == [unexplained, "Traceback (most recent call last):"]


def member(group: str, name: str, node: str = "") -> dict[str, object]:
    labels = {"scheduling.lockstep.dev/pod-group": group}
    return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node} if node else {}}


def test_settled_needs_min_count_for_gangs_every_pod_for_basic_groups_and_a_reason_for_the_rest() -> None:
    gang = GroupPlan("g", "gang", 3, 2, 100, 64, "none", True)
    basic = GroupPlan("b", "basic", 2, 1, 100, 64, "none", True)
    never = GroupPlan("n", "gang", 2, 4, 100, 64, "none", False)
    pods = [member("g", "g-0", "n1"), member("g", "g-1", "n1"), member("g", "g-2"), member("b", "b-0", "n1")]
    condition = {"type": "PodGroupScheduled", "status": "False", "reason": "Waiting", "message": "2 of 4"}
    explained = [{"metadata": {"name": "n"}, "status": {"conditions": [condition]}}]
    all_pods = [*pods, member("b", "b-1", "n2")]
    assert not settled(
        ClusterState(pods=[*pods, member("b", "b-1")], podgroups=explained), [gang, basic, never]
    )
    assert not settled(ClusterState(pods=all_pods), [gang, basic, never])  # "n" does not say why yet
    assert settled(ClusterState(pods=all_pods, podgroups=explained), [gang, basic, never])


def test_clear_condition_needs_status_false_with_reason_and_message() -> None:
    plan = GroupPlan("n", "gang", 2, 4, 100, 64, "none", False)

    def group(**condition: str) -> ClusterState:
        status = {"conditions": [{"type": "PodGroupScheduled", **condition}]}
        return ClusterState(podgroups=[{"metadata": {"name": "n"}, "status": status}])

    assert has_clear_unschedulable_condition(
        group(status="False", reason="Unschedulable", message="minCount 4 cannot be satisfied: 2 pods exist"),
        plan,
    )
    assert not has_clear_unschedulable_condition(
        group(status="False", reason="Unschedulable", message=""), plan
    )
    assert not has_clear_unschedulable_condition(group(status="True", reason="Scheduled", message="ok"), plan)
    assert not has_clear_unschedulable_condition(ClusterState(), plan)


def lead(timestamp: str, event: str) -> str:
    return json.dumps({"event": event, "timestamp": f"2026-01-01T00:00:{timestamp}Z", "level": "info"})


def test_leadership_overlap_is_reported_only_for_concurrent_leaders() -> None:
    handed_over = [lead("01", "became leader"), lead("05", "lost leadership")]
    taker = [record("info", "starting"), lead("06", "became leader")]
    assert leadership_overlap(handed_over, taker) is None
    still_leading = [lead("01", "became leader")]
    assert "two leaders at once" in str(leadership_overlap(still_leading, taker))
    assert leadership_overlap([record("info", "starting")], taker) is None


def test_one_per_node_groups_carry_anti_affinity_and_sharing_a_node_is_reported() -> None:
    plans = plan_workload(2000, random.Random(9))
    spread = [p for p in plans if p.one_per_node]
    assert spread and all(p.fits and p.pods <= 8 for p in spread)
    manifest = pod_manifest(spread[0], 0)
    (term,) = manifest["spec"]["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"] == {"matchLabels": {"scheduling.lockstep.dev/pod-group": spread[0].name}}

    def member(name: str, node: str) -> dict[str, object]:
        labels = {"scheduling.lockstep.dev/pod-group": "s"}
        return {"metadata": {"name": name, "labels": labels}, "spec": {"nodeName": node}}

    plan = GroupPlan("s", "gang", 2, 2, 100, 64, "none", True, True)
    assert shared_nodes(ClusterState(pods=[member("s-0", "a"), member("s-1", "b")]), [plan]) == []
    assert shared_nodes(ClusterState(pods=[member("s-0", "a"), member("s-1", "a")]), [plan]) == [
        "s: s-0 and s-1 on a"
    ]
