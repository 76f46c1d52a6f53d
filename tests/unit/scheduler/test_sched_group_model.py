"""One group model for both API shapes: the two adapters, the group's priority, required topology,
and pods that join upstream PodGroups (or name two groups)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import pytest
from pydantic import ValidationError
from sched_helpers import gang, make_node, make_pod, make_scheduler, settle

from lockstep.api.groups import UnknownPriorityClassError, from_lockstep, from_upstream
from lockstep.api.podgroup import PodGroup
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.scheduler.framework import Code, GroupKey, PodClaimRef

ZONE = "topology.kubernetes.io/zone"


def spec_with_everything(min_count: int = 2) -> dict[str, Any]:
    return {
        "schedulingPolicy": {"gang": {"minCount": min_count}},
        "schedulingConstraints": {"topology": [{"key": ZONE}]},
        "priorityClassName": "high",
        "disruptionMode": "PodGroup",
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
    }


def test_both_shapes_become_the_same_group_model_but_for_their_identity() -> None:
    metadata = {"name": "g", "namespace": "ns", "uid": "u1"}
    ours = from_lockstep(
        PodGroup.model_validate({"metadata": metadata, "spec": spec_with_everything()}), {"high": 7}
    )
    theirs = from_upstream(
        UpstreamPodGroup.model_validate({"metadata": metadata, "spec": spec_with_everything()}), {"high": 7}
    )
    assert (ours.priority, ours.topology_keys, ours.disruption_mode, ours.min_count) == (
        7,
        (ZONE,),
        "all",
        2,
    )
    assert dataclasses.replace(theirs, upstream=False) == ours
    assert theirs.key == GroupKey("ns", "g", upstream=True) != ours.key


def test_spec_priority_wins_and_a_missing_class_is_refused_naming_the_field() -> None:
    spec = {**spec_with_everything(), "priority": 3}
    assert from_lockstep(PodGroup.model_validate({"metadata": {"name": "g"}, "spec": spec}), {}).priority == 3
    unknown = PodGroup.model_validate(
        {"metadata": {"name": "g", "namespace": "ns"}, "spec": spec_with_everything()}
    )
    with pytest.raises(
        UnknownPriorityClassError, match=re.escape("spec.priorityClassName: no PriorityClass named 'high'")
    ):
        from_lockstep(unknown, {})


def test_old_lockstep_podgroups_stay_valid_with_the_defaults() -> None:
    old = PodGroup.model_validate({"metadata": {"name": "g"}, "spec": {"schedulingPolicy": {"basic": {}}}})
    info = from_lockstep(old, {})
    assert (info.priority, info.topology_keys, info.disruption_mode) == (None, (), "single")
    assert info.preemption_policy is None


@pytest.mark.parametrize(
    ("given", "internal"),
    [("Pod", "single"), ("PodGroup", "all"), ("single", "single"), ("all", "all")],
)
def test_both_disruption_mode_spellings_of_lockstep_podgroups_mean_one_thing(
    given: str, internal: str
) -> None:
    spec = {"schedulingPolicy": {"basic": {}}, "disruptionMode": given}
    assert from_lockstep(PodGroup.model_validate({"spec": spec}), {}).disruption_mode == internal


@pytest.mark.parametrize(
    ("api_version", "given", "internal"),
    [
        ("scheduling.k8s.io/v1beta1", {"single": {}}, "single"),
        ("scheduling.k8s.io/v1beta1", {"all": {}}, "all"),
        ("scheduling.k8s.io/v1alpha2", "Pod", "single"),
        ("scheduling.k8s.io/v1alpha2", "PodGroup", "all"),
    ],
)
def test_upstream_disruption_modes_of_both_versions_mean_one_thing(
    api_version: str, given: Any, internal: str
) -> None:
    raw = {"apiVersion": api_version, "spec": {"schedulingPolicy": {"basic": {}}, "disruptionMode": given}}
    assert from_upstream(UpstreamPodGroup.model_validate(raw), {}).disruption_mode == internal


@pytest.mark.parametrize("given", [{}, {"single": {}, "all": {}}, {"whole": {}}, "Node", "all"])
def test_an_upstream_disruption_mode_of_neither_shape_is_refused_naming_the_field(given: Any) -> None:
    raw = {"apiVersion": "scheduling.k8s.io/v1beta1", "spec": {"schedulingPolicy": {"basic": {}}}}
    raw["spec"]["disruptionMode"] = given
    with pytest.raises(ValidationError, match=r"spec\.disruptionMode"):
        UpstreamPodGroup.model_validate(raw)


def test_the_group_preemption_policy_reaches_the_group_model_from_both_shapes() -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2}}, "preemptionPolicy": "Never"}
    assert from_lockstep(PodGroup.model_validate({"spec": spec}), {}).preemption_policy == "Never"
    raw = {"apiVersion": "scheduling.k8s.io/v1beta1", "spec": spec}
    assert from_upstream(UpstreamPodGroup.model_validate(raw), {}).preemption_policy == "Never"


def test_the_condition_upstream_writes_is_named_per_version() -> None:
    spec = {"schedulingPolicy": {"basic": {}}}
    beta = UpstreamPodGroup.model_validate({"apiVersion": "scheduling.k8s.io/v1beta1", "spec": spec})
    alpha = UpstreamPodGroup.model_validate({"apiVersion": "scheduling.k8s.io/v1alpha2", "spec": spec})
    assert (beta.condition_type, alpha.condition_type) == ("PodGroupInitiallyScheduled", "PodGroupScheduled")


async def test_the_group_priority_orders_the_queue_over_member_priorities() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="2"))
    cache.upsert_podgroup(dataclasses.replace(gang("low", 2), priority=1))
    cache.upsert_podgroup(dataclasses.replace(gang("high", 2), priority=100))
    for i in range(2):
        api.add(make_pod(f"low-{i}", cpu="1", group="low", priority=1000))
    for i in range(2):
        api.add(make_pod(f"high-{i}", cpu="1", group="high"))
    await settle(scheduler)
    assert {p.name for p in api.pods.values() if p.node_name} == {"high-0", "high-1"}


def zones(cache: Any, cpus: dict[str, str]) -> None:
    for name, cpu in cpus.items():
        cache.upsert_node(make_node(name, cpu=cpu, labels={ZONE: name.split("-")[0]}))


async def test_required_topology_places_the_whole_gang_in_one_zone() -> None:
    scheduler, api, cache = make_scheduler()
    zones(cache, {"a-0": "2", "a-1": "1", "b-0": "2", "b-1": "2"})
    cache.upsert_podgroup(dataclasses.replace(gang("g", 4), topology_keys=(ZONE,)))
    for i in range(4):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert sorted(p.node_name for p in api.pods.values()) == ["b-0", "b-0", "b-1", "b-1"]


async def test_required_topology_refuses_a_gang_that_fits_only_across_zones() -> None:
    scheduler, api, cache = make_scheduler()
    zones(cache, {"a-0": "2", "b-0": "2"})
    cache.upsert_podgroup(dataclasses.replace(gang("g", 3), topology_keys=(ZONE,)))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    assert api.bind_calls == []
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert attempt.message.startswith("no single domain fits: 2 domains tried: ")
    assert f"{ZONE}=a (" in attempt.message and f"{ZONE}=b (" in attempt.message
    assert dict(attempt.causes) == {"InsufficientCPU": 1}  # what the first domain tried lacked
    # without the constraint the same gang spreads over both zones
    cache.upsert_podgroup(gang("g", 3))
    scheduler.clock.advance(120)  # type: ignore[attr-defined]
    await settle(scheduler)
    assert len(api.bind_calls) == 3


async def test_pods_join_an_upstream_podgroup_by_scheduling_group() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    cache.upsert_podgroup(dataclasses.replace(gang("g", 2), upstream=True))
    for i in range(2):
        api.add(make_pod(f"p{i}", cpu="1", schedulingGroup={"podGroupName": "g"}))
    await settle(scheduler)
    assert len(api.bind_calls) == 2
    assert scheduler.attempts[GroupKey("default", "g", upstream=True)].code is Code.SUCCESS


async def test_a_pod_naming_a_missing_upstream_podgroup_waits_and_its_condition_says_so() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    api.add(make_pod("orphan", cpu="1", schedulingGroup={"podGroupName": "missing"}))
    await settle(scheduler)
    assert api.bind_calls == []
    condition = api.pods["default/orphan"].scheduled_condition
    assert condition is not None and condition.status == "False"
    assert "waiting for PodGroup default/missing to exist" in condition.message


async def test_a_pod_naming_two_groups_is_refused_naming_both_and_nothing_is_bound() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    cache.upsert_podgroup(dataclasses.replace(gang("theirs", 1), upstream=True))
    cache.upsert_podgroup(gang("ours", 1))
    api.add(make_pod("torn", cpu="1", group="ours", schedulingGroup={"podGroupName": "theirs"}))
    await settle(scheduler)
    assert api.bind_calls == []
    condition = api.pods["default/torn"].scheduled_condition
    assert condition is not None and condition.status == "False" and condition.reason == "Unschedulable"
    assert "'ours' (scheduling.lockstep.dev)" in condition.message
    assert "'theirs' (scheduling.k8s.io)" in condition.message
    assert "PodGroup default/theirs is a gang" in condition.message


async def test_the_label_gang_wins_beside_the_basic_podgroup_the_137_job_controller_makes() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    basic = dataclasses.replace(gang("job-abc-job-pgt-0-xyz", 1), is_gang=False, upstream=True)
    cache.upsert_podgroup(basic)
    cache.upsert_podgroup(gang("trainer", 2))
    for i in range(2):
        api.add(make_pod(f"t{i}", cpu="1", group="trainer", schedulingGroup={"podGroupName": basic.name}))
    await settle(scheduler)
    assert len(api.bind_calls) == 2
    assert scheduler.attempts[GroupKey("default", "trainer")].code is Code.SUCCESS


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        ({"claims": (PodClaimRef("gpu", "shared", None),)}, "has resourceClaims"),
        ({"topology_keys": (ZONE,)}, "has a topology constraint"),
    ],
)
async def test_a_basic_upstream_podgroup_that_asks_for_something_keeps_the_pod_out(
    extra: dict[str, Any], said: str
) -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    theirs = dataclasses.replace(gang("theirs", 1), is_gang=False, upstream=True, **extra)
    cache.upsert_podgroup(theirs)
    cache.upsert_podgroup(gang("ours", 1))
    api.add(make_pod("torn", cpu="1", group="ours", schedulingGroup={"podGroupName": "theirs"}))
    await settle(scheduler)
    assert api.bind_calls == []
    condition = api.pods["default/torn"].scheduled_condition
    assert condition is not None and f"PodGroup default/theirs {said}" in condition.message


async def test_a_second_group_not_seen_yet_is_waited_for_then_joined() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    cache.upsert_podgroup(gang("ours", 1))
    api.add(make_pod("early", cpu="1", group="ours", schedulingGroup={"podGroupName": "later"}))
    await settle(scheduler)
    assert api.bind_calls == []
    condition = api.pods["default/early"].scheduled_condition
    assert condition is not None and "waiting for PodGroup default/later to exist" in condition.message
    cache.upsert_podgroup(dataclasses.replace(gang("later", 1), is_gang=False, upstream=True))
    scheduler.clock.advance(120)  # type: ignore[attr-defined]
    await settle(scheduler)
    assert len(api.bind_calls) == 1
