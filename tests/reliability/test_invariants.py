"""The invariant checker over synthetic states: each invariant caught when broken, silent when kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.api.pod import pod_requests as scheduler_pod_requests
from lockstep.sim.invariants import (
    BindingHistory,
    ClusterState,
    PreemptionHistory,
    RecordedRequest,
    ViolationKind,
    ViolationTracker,
    check_allocations_have_consumers,
    check_bound_pods_scheduled,
    check_claim_reservations,
    check_devices_allocated_once,
    check_gangs_bound,
    check_nodes_within_allocatable,
    check_single_binding_per_pod,
    check_state,
    gang_min_counts,
    node_matches_selector,
    pod_requests,
)

NS = "team"


def node(name: str, cpu: str = "4", memory: str = "8Gi", pods: str = "110", **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": pods}},
    }


def pod(
    name: str,
    node_name: str = "",
    cpu: str | None = None,
    group: str | None = None,
    uid: str | None = None,
    phase: str = "Pending",
    **spec: Any,
) -> dict[str, Any]:
    containers = spec.pop(
        "containers", [{"name": "main", "resources": {"requests": {"cpu": cpu}} if cpu else {}}]
    )
    body: dict[str, Any] = {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid or f"uid-{name}",
            "labels": {"scheduling.lockstep.dev/pod-group": group} if group else {},
        },
        "spec": {"schedulerName": "lockstep", "containers": containers, **spec},
        "status": {"phase": phase},
    }
    if node_name:
        body["spec"]["nodeName"] = node_name
    return body


def gang(name: str, min_count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }


def claim(
    name: str,
    devices: Sequence[tuple[str, str, str]] = (),
    reserved_for: list[dict[str, str]] | None = None,
    node_selector: dict[str, Any] | None = None,
    **result_extra: Any,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if devices:
        status["allocation"] = {
            "devices": {
                "results": [
                    {"request": "gpu", "driver": d, "pool": p, "device": dev, **result_extra}
                    for d, p, dev in devices
                ]
            }
        }
        if node_selector is not None:
            status["allocation"]["nodeSelector"] = node_selector
    if reserved_for is not None:
        status["reservedFor"] = reserved_for
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {"devices": {"requests": []}},
        "status": status,
    }


def reserved(pod_name: str) -> dict[str, str]:
    return {"resource": "pods", "name": pod_name, "uid": f"uid-{pod_name}"}


def on_node(node_name: str) -> dict[str, Any]:
    return {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
        ]
    }


def kinds(violations: list[Any]) -> list[ViolationKind]:
    return [v.kind for v in violations]


# --- node over allocatable -------------------------------------------------------------------------


def test_node_over_allocatable_cpu_is_reported_with_the_pods() -> None:
    violations = check_nodes_within_allocatable(
        [node("n1", cpu="2")], [pod("a", "n1", cpu="1500m"), pod("b", "n1", cpu="1")]
    )
    assert kinds(violations) == [ViolationKind.NODE_OVER_ALLOCATABLE]
    assert violations[0].object_ref == "Node/n1"
    assert "cpu" in violations[0].message and "2500m" in violations[0].message
    assert "team/a" in violations[0].message and "team/b" in violations[0].message


def test_node_exactly_full_is_clean() -> None:
    assert (
        check_nodes_within_allocatable(
            [node("n1", cpu="2")], [pod("a", "n1", cpu="1"), pod("b", "n1", cpu="1000m")]
        )
        == []
    )


def test_unbound_and_terminal_pods_do_not_count() -> None:
    pods = [pod("a", "", cpu="3"), pod("b", "n1", cpu="3", phase="Succeeded"), pod("c", "n1", cpu="2")]
    assert check_nodes_within_allocatable([node("n1", cpu="2")], pods) == []


def test_pod_count_is_limited_by_allocatable_pods() -> None:
    violations = check_nodes_within_allocatable([node("n1", pods="1")], [pod("a", "n1"), pod("b", "n1")])
    assert kinds(violations) == [ViolationKind.NODE_OVER_ALLOCATABLE]
    assert violations[0].message.startswith("pods:")


def test_resource_the_node_lacks_is_over_allocatable() -> None:
    gpu_pod = pod("a", "n1", containers=[{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}])
    assert kinds(check_nodes_within_allocatable([node("n1")], [gpu_pod])) == [
        ViolationKind.NODE_OVER_ALLOCATABLE
    ]


def test_an_extended_resource_dra_provides_is_not_counted_against_allocatable() -> None:
    """A pod whose status.extendedResourceClaimStatus maps example.com/gpu got it from DRA devices."""
    gpu_pod = pod("a", "n1", containers=[{"name": "c", "resources": {"requests": {"example.com/gpu": "1"}}}])
    mapping = {
        "containerName": "c",
        "resourceName": "example.com/gpu",
        "requestName": "container-0-request-0",
    }
    gpu_pod["status"]["extendedResourceClaimStatus"] = {
        "requestMappings": [mapping],
        "resourceClaimName": "a-extended-resources-x",
    }
    assert check_nodes_within_allocatable([node("n1")], [gpu_pod]) == []


def test_init_containers_and_overhead_count_like_kubernetes() -> None:
    # containers 1 cpu + sidecar 500m = 1.5; first init 2 cpu with no sidecar yet; peak 2, + 250m overhead
    heavy = pod(
        "a",
        "n1",
        containers=[{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
        initContainers=[
            {"name": "setup", "resources": {"requests": {"cpu": "2"}}},
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}},
            {"name": "late", "resources": {"requests": {"cpu": "1200m"}}},
        ],
        overhead={"cpu": "250m"},
    )
    requests = pod_requests(heavy)
    # late init runs beside the 500m sidecar: 1.7 < 2, so the first init container is the peak
    assert requests["cpu"] * 1000 == 2250
    assert check_nodes_within_allocatable([node("n1", cpu="2250m")], [heavy]) == []
    assert kinds(check_nodes_within_allocatable([node("n1", cpu="2")], [heavy])) == [
        ViolationKind.NODE_OVER_ALLOCATABLE
    ]


def test_sidecars_started_before_an_init_container_add_to_its_peak() -> None:
    spec_pod = pod(
        "a",
        containers=[{"name": "main", "resources": {"requests": {"memory": "100Mi"}}}],
        initContainers=[
            {"name": "proxy", "restartPolicy": "Always", "resources": {"requests": {"memory": "300Mi"}}},
            {"name": "migrate", "resources": {"requests": {"memory": "1Gi"}}},
        ],
    )
    assert pod_requests(spec_pod)["memory"] == (1024 + 300) * 2**20


def test_limits_default_requests_and_pod_level_requests_win() -> None:
    limited = pod("a", containers=[{"name": "c", "resources": {"limits": {"cpu": "3"}}}])
    assert pod_requests(limited)["cpu"] == 3
    pod_level = pod(
        "b",
        containers=[{"name": "c", "resources": {"requests": {"cpu": "1"}}}],
        resources={"requests": {"cpu": "4"}},
    )
    assert pod_requests(pod_level)["cpu"] == 4
    huge_pages = pod(
        "c",
        containers=[{"name": "c", "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "2Mi"}}}],
        resources={"requests": {"hugepages-2Mi": "6Mi"}},
    )
    assert pod_requests(huge_pages)["hugepages-2Mi"] == 6 * 2**20


def test_unparseable_quantity_is_reported_as_malformed_pod() -> None:
    bad = pod("a", "n1", containers=[{"name": "c", "resources": {"requests": {"cpu": "lots"}}}])
    violations = check_nodes_within_allocatable([node("n1")], [bad])
    assert kinds(violations) == [ViolationKind.MALFORMED_OBJECT]
    assert violations[0].object_ref == "Pod/team/a"
    assert "containers[0].resources.requests.cpu" in violations[0].message


# --- device in two allocations ---------------------------------------------------------------------


def test_device_in_two_claims_is_reported() -> None:
    claims = [
        claim("c1", [("gpu.example.com", "n1", "gpu-0")]),
        claim("c2", [("gpu.example.com", "n1", "gpu-0")]),
    ]
    violations = check_devices_allocated_once(claims)
    assert kinds(violations) == [ViolationKind.DEVICE_ALLOCATED_TWICE]
    assert violations[0].object_ref == "Device/gpu.example.com/n1/gpu-0"
    assert "team/c1" in violations[0].message and "team/c2" in violations[0].message


def test_distinct_devices_pools_and_admin_access_are_clean() -> None:
    claims = [
        claim("c1", [("gpu.example.com", "n1", "gpu-0")]),
        claim("c2", [("gpu.example.com", "n1", "gpu-1")]),
        claim("c3", [("gpu.example.com", "n2", "gpu-0")]),
        claim("c4", [("gpu.example.com", "n1", "gpu-0")], adminAccess=True),
        claim("unallocated"),
    ]
    assert check_devices_allocated_once(claims) == []


# --- gang partially bound --------------------------------------------------------------------------


def test_gang_below_min_count_bound_is_reported() -> None:
    pods = [pod("w0", "n1", group="g"), pod("w1", group="g"), pod("w2", group="g")]
    violations = check_gangs_bound([gang("g", 3)], pods)
    assert kinds(violations) == [ViolationKind.GANG_PARTIALLY_BOUND]
    assert violations[0].object_ref == "PodGroup/team/g"
    assert "1 of 3" in violations[0].message
    assert violations[0].transient


def test_gang_unbound_or_fully_bound_is_clean() -> None:
    unbound = [pod(f"u{i}", group="u") for i in range(3)]
    bound = [pod(f"b{i}", "n1", group="b") for i in range(2)] + [pod("b2", group="b")]
    assert check_gangs_bound([gang("u", 3), gang("b", 2)], unbound + bound) == []


def test_gang_with_deleted_members_is_excused() -> None:
    # minCount 3, but only 2 members left and one of them bound: members were deleted
    assert check_gangs_bound([gang("g", 3)], [pod("w0", "n1", group="g"), pod("w1", group="g")]) == []


def test_basic_group_is_never_partially_bound() -> None:
    basic = {"metadata": {"name": "b", "namespace": NS}, "spec": {"schedulingPolicy": {"basic": {}}}}
    assert check_gangs_bound([basic], [pod("a", "n1", group="b"), pod("c", group="b")]) == []


# --- bound but PodScheduled=False ------------------------------------------------------------------


def test_bound_pod_with_podscheduled_false_is_reported() -> None:
    stale = pod("a", "n1")
    stale["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    violations = check_bound_pods_scheduled([stale])
    assert kinds(violations) == [ViolationKind.BOUND_POD_NOT_SCHEDULED]
    assert "n1" in violations[0].message and "Unschedulable" in violations[0].message


def test_unbound_pod_with_podscheduled_false_and_bound_pod_with_true_are_clean() -> None:
    waiting = pod("a")
    waiting["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    running = pod("b", "n1")
    running["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert check_bound_pods_scheduled([waiting, running]) == []


# --- claim reservations ----------------------------------------------------------------------------


def test_claim_reserved_for_missing_pod_is_reported() -> None:
    violations = check_claim_reservations([claim("c", reserved_for=[reserved("gone")])], [], [])
    assert kinds(violations) == [ViolationKind.CLAIM_RESERVED_FOR_MISSING_POD]
    assert violations[0].object_ref == "ResourceClaim/team/c"
    assert "team/gone" in violations[0].message


def test_claim_reserved_for_recreated_pod_with_other_uid_is_missing() -> None:
    recreated = pod("p", "n1", uid="a-new-uid")
    violations = check_claim_reservations(
        [claim("c", reserved_for=[reserved("p")])], [recreated], [node("n1")]
    )
    assert kinds(violations) == [ViolationKind.CLAIM_RESERVED_FOR_MISSING_POD]


def test_claim_reserved_for_unbound_pod_is_reported_as_transient() -> None:
    violations = check_claim_reservations(
        [claim("c", reserved_for=[reserved("p")])], [pod("p")], [node("n1")]
    )
    assert kinds(violations) == [ViolationKind.CLAIM_RESERVED_FOR_UNBOUND_POD]
    assert violations[0].transient


def test_claim_reserved_for_pod_on_node_outside_allocation_is_reported() -> None:
    allocated = claim("c", [("d", "n1", "dev")], reserved_for=[reserved("p")], node_selector=on_node("n1"))
    violations = check_claim_reservations([allocated], [pod("p", "n2")], [node("n1"), node("n2")])
    assert kinds(violations) == [ViolationKind.CLAIM_RESERVED_OFF_ALLOCATION_NODE]
    assert not violations[0].transient
    assert "n2" in violations[0].message


def test_claim_reserved_for_pod_on_a_deleted_node_is_left_to_the_pod_gc() -> None:
    allocated = claim("c", [("d", "n1", "dev")], reserved_for=[reserved("p")], node_selector=on_node("n1"))
    assert check_claim_reservations([allocated], [pod("p", "n1")], [node("n2")]) == []


def test_claim_reserved_for_pod_on_allocation_node_is_clean() -> None:
    allocated = claim(
        "c",
        [("d", "n1", "dev")],
        reserved_for=[
            reserved("p"),
            {"apiGroup": "scheduling.lockstep.dev", "resource": "podgroups", "name": "g"},
        ],
        node_selector=on_node("n1"),
    )
    assert check_claim_reservations([allocated], [pod("p", "n1")], [node("n1"), node("n2")]) == []


def test_allocated_claim_reserved_for_nobody_is_a_leaked_allocation() -> None:
    leaked = claim("c", [("d", "n1", "dev")], reserved_for=[])
    violations = check_allocations_have_consumers([leaked])
    assert kinds(violations) == [ViolationKind.ALLOCATION_WITHOUT_CONSUMER]
    assert violations[0].object_ref == "ResourceClaim/team/c"
    assert violations[0].transient


def test_reserved_or_unallocated_claims_have_no_leaked_allocation() -> None:
    in_use = claim("c1", [("d", "n1", "dev")], reserved_for=[reserved("p")])
    assert check_allocations_have_consumers([in_use, claim("c2"), claim("c3", reserved_for=[])]) == []


@pytest.mark.parametrize(
    ("requirement", "matches"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "rack", "operator": "DoesNotExist"}, True),
        ({"key": "gpus", "operator": "Gt", "values": ["3"]}, True),
        ({"key": "gpus", "operator": "Lt", "values": ["3"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["3"]}, False),
    ],
)
def test_node_selector_operators(requirement: dict[str, Any], matches: bool) -> None:
    labelled = node("n1", zone="a", gpus="4")
    assert (
        node_matches_selector(labelled, {"nodeSelectorTerms": [{"matchExpressions": [requirement]}]})
        is matches
    )


def test_node_selector_terms_are_ored_and_empty_terms_match_nothing() -> None:
    labelled = node("n1", zone="a")
    miss = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}
    hit = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert node_matches_selector(labelled, {"nodeSelectorTerms": [miss, hit]})
    assert not node_matches_selector(labelled, {"nodeSelectorTerms": [{}]})


# --- pod bound twice -------------------------------------------------------------------------------


def test_binding_history_reports_a_pod_moved_between_nodes() -> None:
    history = BindingHistory()
    history.observe(pod("p"))
    history.observe(pod("p", "n1"))
    history.observe(pod("p", "n1"))
    history.observe(pod("p", "n2"))
    violations = history.violations()
    assert kinds(violations) == [ViolationKind.POD_BOUND_TWICE]
    assert "n1" in violations[0].message and "n2" in violations[0].message


def test_binding_history_is_clean_for_single_bindings_and_recreated_pods() -> None:
    history = BindingHistory()
    history.observe(pod("p", "n1"))
    history.observe(pod("p", "n2", uid="recreated"))
    history.observe(pod("q", "n1"))
    assert history.violations() == []
    assert history.bound_pods == 3


def victim(body: dict[str, Any], preemptor_priority: int) -> dict[str, Any]:
    condition = {
        "type": "DisruptionTarget",
        "status": "True",
        "reason": "PreemptionByScheduler",
        "message": f"lockstep: preempted by group {NS}/urgent, priority {preemptor_priority}",
    }
    return {**body, "status": {**body["status"], "conditions": [condition]}}


def test_preemption_history_reports_a_victim_of_equal_priority_and_a_gang_left_below_min_count() -> None:
    history = PreemptionHistory()
    members = [pod(f"g-{i}", "n1", group="g", priority=10) for i in range(4)]
    for member in members:
        history.observe("ADDED", member)
    history.observe("MODIFIED", victim(members[0], 10))  # equal priority: never a victim
    history.observe("MODIFIED", victim(members[1], 100))
    min_counts = gang_min_counts([gang("g", 3)])
    violations = history.violations(min_counts)
    assert kinds(violations) == [
        ViolationKind.PREEMPTED_NOT_LOWER,
        ViolationKind.GANG_BELOW_MIN_COUNT_BY_PREEMPTION,
    ]
    assert "priority 10 preempted by a group of priority 10" in violations[0].message
    assert "2 members left running after a preemption, minCount is 3" in violations[1].message
    assert violations[1].transient  # the victims of one plan are marked one write at a time


def test_preemption_history_is_clean_for_a_gang_taken_whole_or_keeping_min_count() -> None:
    history = PreemptionHistory()
    whole = [pod(f"w-{i}", "n1", group="w", priority=1) for i in range(2)]
    spare = [pod(f"s-{i}", "n2", group="s", priority=1) for i in range(3)]
    for member in whole + spare:
        history.observe("ADDED", member)
    for member in whole:
        history.observe("MODIFIED", victim(member, 100))
    history.observe("MODIFIED", victim(spare[0], 100))
    history.observe("DELETED", victim(spare[0], 100))
    assert history.violations(gang_min_counts([gang("w", 2), gang("s", 2)])) == []
    assert len(history.victims) == 3


def test_two_successful_binding_posts_are_reported() -> None:
    path = f"/api/v1/namespaces/{NS}/pods/p/binding"
    requests = [
        RecordedRequest("POST", path, 201),
        RecordedRequest("POST", path, 409),
        RecordedRequest("POST", f"/api/v1/namespaces/{NS}/pods/q/binding", 201),
        RecordedRequest("POST", path, 201),
    ]
    violations = check_single_binding_per_pod(requests)
    assert kinds(violations) == [ViolationKind.POD_BOUND_TWICE]
    assert violations[0].object_ref == f"Pod/{NS}/p"


def test_single_successful_binding_per_pod_is_clean() -> None:
    path = f"/api/v1/namespaces/{NS}/pods/p/binding"
    requests = [
        RecordedRequest("POST", path, 500),
        RecordedRequest("POST", path, 201),
        RecordedRequest("GET", path, 200),
    ]
    assert check_single_binding_per_pod(requests) == []


# --- aggregation and persistence -------------------------------------------------------------------


def test_check_state_is_clean_for_a_consistent_cluster() -> None:
    state = ClusterState(
        nodes=[node("n1", cpu="2"), node("n2", cpu="2")],
        pods=[pod("w0", "n1", cpu="1", group="g"), pod("w1", "n2", cpu="1", group="g")],
        podgroups=[gang("g", 2)],
        claims=[claim("c", [("d", "n1", "x")], reserved_for=[reserved("w0")], node_selector=on_node("n1"))],
    )
    assert check_state(state) == []


def test_check_state_collects_every_kind() -> None:
    stale = pod("w0", "n1", cpu="3", group="g")
    stale["status"]["conditions"] = [{"type": "PodScheduled", "status": "False"}]
    state = ClusterState(
        nodes=[node("n1", cpu="2")],
        pods=[stale, pod("w1", group="g")],
        podgroups=[gang("g", 2)],
        claims=[
            claim("c1", [("d", "p", "x")], reserved_for=[reserved("nope")]),
            claim("c2", [("d", "p", "x")]),
        ],
    )
    assert set(kinds(check_state(state))) == {
        ViolationKind.NODE_OVER_ALLOCATABLE,
        ViolationKind.DEVICE_ALLOCATED_TWICE,
        ViolationKind.GANG_PARTIALLY_BOUND,
        ViolationKind.BOUND_POD_NOT_SCHEDULED,
        ViolationKind.CLAIM_RESERVED_FOR_MISSING_POD,
        ViolationKind.ALLOCATION_WITHOUT_CONSUMER,
    }


def test_tracker_confirms_persistent_kinds_at_once_and_transient_ones_after_grace() -> None:
    now = [0.0]
    tracker = ViolationTracker(grace_seconds=5, clock=lambda: now[0])
    partial = check_gangs_bound([gang("g", 2)], [pod("a", "n1", group="g"), pod("b", group="g")])
    double = check_devices_allocated_once([claim("c1", [("d", "p", "x")]), claim("c2", [("d", "p", "x")])])
    assert kinds(tracker.update(partial + double)) == [ViolationKind.DEVICE_ALLOCATED_TWICE]
    now[0] = 4.0
    assert tracker.update(partial + double) == []
    now[0] = 5.0
    assert kinds(tracker.update(partial)) == [ViolationKind.GANG_PARTIALLY_BOUND]
    assert len(tracker.confirmed) == 2


def test_tracker_forgets_a_transient_violation_that_clears() -> None:
    now = [0.0]
    tracker = ViolationTracker(grace_seconds=5, clock=lambda: now[0])
    partial = check_gangs_bound([gang("g", 2)], [pod("a", "n1", group="g"), pod("b", group="g")])
    tracker.update(partial)
    now[0] = 3.0
    tracker.update([])
    now[0] = 6.0
    assert tracker.update(partial) == []
    assert tracker.confirmed == {}


# --- differential: the checker's arithmetic against the scheduler's own parsing ---------------------

# Whole base units (millicores, bytes, devices), where both sides are exact.
RESOURCE_LISTS = st.fixed_dictionaries(
    {},
    optional={
        "cpu": st.one_of(st.integers(0, 64).map(str), st.integers(0, 64_000).map(lambda m: f"{m}m")),
        "memory": st.one_of(st.integers(0, 4096).map(lambda m: f"{m}Mi"), st.integers(0, 10**9).map(str)),
        "example.com/gpu": st.integers(0, 8).map(str),
    },
)
CONTAINERS = st.lists(
    st.builds(
        lambda requests, limits, sidecar: {
            "name": "c",
            "resources": {"requests": requests, "limits": limits},
            **({"restartPolicy": "Always"} if sidecar else {}),
        },
        RESOURCE_LISTS,
        RESOURCE_LISTS,
        st.booleans(),
    ),
    max_size=4,
)


@given(containers=CONTAINERS, init_containers=CONTAINERS, overhead=RESOURCE_LISTS)
@settings(max_examples=150, deadline=None)
def test_checker_requests_agree_with_the_scheduler_parsing(
    containers: list[dict[str, Any]], init_containers: list[dict[str, Any]], overhead: dict[str, str]
) -> None:
    for container in containers:
        container.pop("restartPolicy", None)
    spec = {"containers": containers, "initContainers": init_containers, "overhead": overhead}
    ours = pod_requests({"metadata": {"name": "p", "namespace": NS}, "spec": spec})
    in_base_units = {name: int(value * 1000 if name == "cpu" else value) for name, value in ours.items()}
    assert in_base_units == scheduler_pod_requests(spec, f"{NS}/p")
