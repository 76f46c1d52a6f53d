from __future__ import annotations

import pytest

from harness.workloads import (
    BUILDERS,
    NAMESPACE,
    POD_GROUP_LABEL,
    UPSTREAM_BUILDERS,
    DeviceDriver,
    NodeShape,
    build,
    cluster_size,
    pod_manifest,
    podgroup_manifest,
    replacement,
)

SHAPE = NodeShape(cpu_millis=31_500, memory_mib=254 * 1024, pods=110)
DRIVER = DeviceDriver(device_class="gpu.sim.lockstep.dev", selector='device.attributes["d"].model == "m"')


def test_published_sizes_match_the_issue() -> None:
    basic = build("basic", 1.0, SHAPE, DRIVER)
    assert (basic.nodes, basic.pods_total, len(basic.gangs)) == (5000, 10000, 1250)
    assert {(g.pods, g.min_count) for g in basic.gangs} == {(8, 8)}

    claims = build("claim-template", 1.0, SHAPE, DRIVER)
    assert (claims.nodes, claims.devices_per_node, claims.pods_total) == (500, 8, 5000)
    assert {(g.pods, g.min_count, g.claim) for g in claims.gangs} == {(4, 4, "template")}
    # 4,000 devices for 5,000 single-device pods: only whole gangs up to the device count can bind.
    assert claims.pods_expected == 4000

    shared = build("shared-claim", 1.0, SHAPE, DRIVER)
    assert len(shared.gangs) == 1
    assert (shared.gangs[0].pods, shared.gangs[0].min_count, shared.gangs[0].claim) == (1000, 1000, "group")

    churn = build("churn", 1.0, SHAPE, DRIVER)
    assert churn.churn is not None and churn.churn.gangs == len(churn.gangs) // 10


def test_every_workload_scales_down_to_a_tiny_cluster() -> None:
    for name in BUILDERS:
        workload = build(name, 0.01, SHAPE, DRIVER)
        assert workload.nodes == cluster_size(name, 0.01)[0] >= 1
        assert 1 <= workload.pods_expected <= workload.pods_total <= 200
        names = [g.name for g in workload.gangs]
        assert len(names) == len(set(names)), f"{name}: gang names must be unique"


def test_upstream_shapes_have_scheduler_perf_sizes_and_lone_pods_carry_no_group() -> None:
    sizes = {name: build(name, 1.0, SHAPE, DRIVER) for name in UPSTREAM_BUILDERS}
    assert (sizes["upstream-basic-50k"].nodes, sizes["upstream-basic-50k"].pods_total) == (5000, 50000)
    assert {(g.pods, g.min_count) for g in sizes["upstream-gangs-3000"].gangs} == {(3, 3)}
    assert sizes["upstream-gangs-3000"].pods_total == 9000
    dra = sizes["upstream-claim-template"]
    assert dra.nodes * dra.devices_per_node == dra.pods_expected == 5000
    memory_run = sizes["upstream-claim-template-1000x8"]  # issue 29: kube-scheduler held 346 MB
    assert (memory_run.nodes, memory_run.devices_per_node, memory_run.pods_expected) == (1000, 8, 5000)
    assert memory_run.setup == dra.setup
    saturation = sizes["upstream-saturation"]
    assert saturation.nodes == saturation.pods_expected == 20000
    assert SHAPE.cpu_millis // saturation.gangs[0].cpu_millis == 1  # one pod per node

    daemonset = sizes["upstream-daemonset"]
    assert daemonset.nodes == daemonset.pods_expected == 15000
    pod = pod_manifest(daemonset.gangs[-1], 0, SHAPE)
    assert POD_GROUP_LABEL not in pod["metadata"]["labels"]
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchFields"][0]["values"] == ["node-14999"]
    for name in UPSTREAM_BUILDERS:
        tiny = build(name, 0.001, SHAPE, DRIVER)
        assert 1 <= tiny.pods_expected <= tiny.pods_total <= 60, name


def test_mixed_interleaves_infeasible_gangs_that_would_starve_the_feasible_ones_if_held() -> None:
    mixed = build("mixed", 1.0, SHAPE, DRIVER)
    feasible = [g for g in mixed.gangs if g.counted]
    infeasible = [g for g in mixed.gangs if not g.counted]
    assert mixed.pods_expected == sum(g.pods for g in feasible)
    assert [g.counted for g in mixed.gangs[:4]] == [True, False, True, False]
    slots = mixed.nodes * (SHAPE.cpu_millis // feasible[0].cpu_millis)
    free_after_feasible = slots - mixed.pods_expected
    holdable = sum(min(g.pods, g.min_count) - g.oversized_members for g in infeasible)
    assert holdable > free_after_feasible
    assert all(g.oversized_members == 1 or g.pods < g.min_count for g in infeasible)
    oversized = next(g for g in infeasible if g.oversized_members)
    big = pod_manifest(oversized, oversized.pods - 1, SHAPE)
    assert big["spec"]["containers"][0]["resources"]["requests"]["cpu"] == f"{SHAPE.cpu_millis * 2}m"
    alone = mixed.counted_alone()
    assert [g.name for g in alone.gangs] == [g.name for g in mixed.gangs], "same pods, same order"
    assert alone.pods_expected == mixed.pods_expected and not alone.baseline
    assert [g for g in alone.gangs if g.scheduler == "lockstep"] == feasible
    ignored = [g for g in alone.gangs if g.scheduler != "lockstep"]
    assert len(ignored) == len(infeasible)
    assert pod_manifest(ignored[0], 0, SHAPE)["spec"]["schedulerName"] == "default-scheduler"


def test_pod_manifest_is_a_lockstep_gang_member_with_a_template_claim() -> None:
    gang = build("claim-template", 0.01, SHAPE, DRIVER).gangs[0]
    pod = pod_manifest(gang, 2, SHAPE)
    assert pod["metadata"] == {
        "name": f"{gang.name}-2",
        "namespace": NAMESPACE,
        "labels": {POD_GROUP_LABEL: gang.name},
    }
    assert pod["spec"]["schedulerName"] == "lockstep"
    assert pod["spec"]["resourceClaims"] == [{"name": "gpu", "resourceClaimTemplateName": "bench-gpu"}]
    assert pod["spec"]["containers"][0]["resources"]["claims"] == [{"name": "gpu"}]
    group = podgroup_manifest(gang)
    assert group["spec"] == {"schedulingPolicy": {"gang": {"minCount": 4}}}


def test_claim_template_selects_the_drivers_devices_with_cel() -> None:
    workload = build("claim-template", 0.01, SHAPE, DRIVER)
    (template,) = workload.setup
    request = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]
    assert request["deviceClassName"] == DRIVER.device_class
    assert request["selectors"] == [{"cel": {"expression": DRIVER.selector}}]


def test_shared_claim_is_declared_once_on_the_podgroup() -> None:
    gang = build("shared-claim", 0.01, SHAPE, DRIVER).gangs[0]
    assert podgroup_manifest(gang)["spec"]["resourceClaims"] == [
        {"name": "gpu", "resourceClaimTemplateName": "bench-gpu"}
    ]
    assert "resourceClaims" not in pod_manifest(gang, 0, SHAPE)["spec"]


def test_replacement_gang_has_a_new_name_and_the_same_shape() -> None:
    gang = build("churn", 0.01, SHAPE, DRIVER).gangs[0]
    again = replacement(gang, 3)
    assert again.name == f"{gang.name}-r3"
    assert (again.pods, again.min_count, again.cpu_millis, again.counted) == (
        gang.pods,
        gang.min_count,
        gang.cpu_millis,
        gang.counted,
    )


def test_unknown_workload_and_bad_scale_are_named() -> None:
    with pytest.raises(ValueError, match="unknown workload 'nope'"):
        build("nope", 1.0, SHAPE, DRIVER)
    with pytest.raises(ValueError, match="workload basic: scale must be positive"):
        build("basic", 0, SHAPE, DRIVER)


def test_anti_affinity_members_avoid_their_own_gang_per_node() -> None:
    workload = build("anti-affinity", 0.01, SHAPE, DRIVER)
    gang = workload.gangs[0]
    pod = pod_manifest(gang, 0, SHAPE)
    (term,) = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term == {
        "labelSelector": {"matchLabels": {POD_GROUP_LABEL: gang.name}},
        "topologyKey": "kubernetes.io/hostname",
    }
    assert pod["metadata"]["labels"][POD_GROUP_LABEL] == gang.name
    assert "affinity" not in pod_manifest(build("basic", 0.01, SHAPE, DRIVER).gangs[0], 0, SHAPE)["spec"]
