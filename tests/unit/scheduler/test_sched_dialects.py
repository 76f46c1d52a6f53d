"""Other schedulers' group shapes at the edge: the adapters into the one group model, the precedence
of a pod's group claims, and the status rules taken from each owner's controller."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep.api import coscheduling, kueue, volcano
from lockstep.api.pod import parse_pod
from lockstep.scheduler.framework import DIALECT_COSCHEDULING, DIALECT_KUEUE, DIALECT_VOLCANO, GroupKey


def pod(labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None, **spec: Any) -> Any:
    return parse_pod(
        {
            "metadata": {
                "name": "p",
                "namespace": "ns",
                "labels": labels or {},
                "annotations": annotations or {},
            },
            "spec": spec,
        }
    )


def group(api: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": api, "kind": "PodGroup", "metadata": {"name": "g", "namespace": "ns"}, "spec": spec}


@pytest.mark.parametrize(
    ("labels", "annotations", "spec", "key"),
    [
        ({"scheduling.x-k8s.io/pod-group": "g"}, {}, {}, GroupKey("ns", "g", dialect=DIALECT_COSCHEDULING)),
        ({}, {"scheduling.k8s.io/group-name": "g"}, {}, GroupKey("ns", "g", dialect=DIALECT_VOLCANO)),
        ({"kueue.x-k8s.io/pod-group-name": "g"}, {}, {}, GroupKey("ns", "g", dialect=DIALECT_KUEUE)),
        # the same name in several shapes: the first in precedence order is the group
        (
            {"scheduling.lockstep.dev/pod-group": "g", "scheduling.x-k8s.io/pod-group": "g"},
            {},
            {},
            GroupKey("ns", "g"),
        ),
        (
            {"scheduling.x-k8s.io/pod-group": "g", "kueue.x-k8s.io/pod-group-name": "g"},
            {"scheduling.k8s.io/group-name": "g"},
            {},
            GroupKey("ns", "g", dialect=DIALECT_COSCHEDULING),
        ),
        (
            {"scheduling.x-k8s.io/pod-group": "g"},
            {},
            {"schedulingGroup": {"podGroupName": "g"}},
            GroupKey("ns", "g", upstream=True),
        ),
    ],
)
def test_a_pods_group_follows_the_precedence_of_shapes(
    labels: dict[str, str], annotations: dict[str, str], spec: dict[str, Any], key: GroupKey
) -> None:
    parsed = pod(labels, annotations, **spec)
    assert parsed.conflicting_groups is None and parsed.dialect_conflict is None
    assert parsed.group_key == key


def test_a_pod_whose_shapes_name_different_groups_is_refused_naming_each() -> None:
    parsed = pod({"kueue.x-k8s.io/pod-group-name": "k"}, {"scheduling.k8s.io/group-name": "v"})
    assert not parsed.group_key.pod_group
    message = parsed.dialect_conflict or ""
    assert "the annotation scheduling.k8s.io/group-name names PodGroup 'v' (scheduling.volcano.sh)" in message
    assert "the label kueue.x-k8s.io/pod-group-name names PodGroup 'k' (kueue.x-k8s.io)" in message


def test_coscheduling_fields_map_to_the_group_model() -> None:
    info = coscheduling.from_coscheduling(
        group(
            coscheduling.API_VERSION,
            minMember=3,
            minResources={"cpu": "2", "memory": "1Gi"},
            scheduleTimeoutSeconds=9,
        )
    )
    assert (info.min_count, info.is_gang, info.schedule_timeout_seconds) == (3, True, 9.0)
    assert dict(info.min_resources) == {"cpu": 2000, "memory": 2**30, "pods": 3}
    assert coscheduling.from_coscheduling(group(coscheduling.API_VERSION)).is_gang is False
    assert (
        coscheduling.from_coscheduling(group(coscheduling.API_VERSION, minMember=2)).schedule_timeout_seconds
        == 60.0
    )


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": -1}, "spec.minMember: must not be negative"),
        ({"scheduleTimeoutSeconds": 0}, "spec.scheduleTimeoutSeconds: must be at least 1"),
        ({"minResources": {"cpu": "-1"}}, "spec.minResources.cpu: must not be negative"),
    ],
)
def test_coscheduling_fields_lockstep_cannot_use_refuse_the_group_naming_them(
    spec: dict[str, Any], field: str
) -> None:
    assert field in coscheduling.from_coscheduling(group(coscheduling.API_VERSION, **spec)).refusal


@pytest.mark.parametrize(
    ("current", "counts", "phase"),
    [
        ("", (3, 0, 0, 0, 0), "Pending"),  # minMember, pods, running, succeeded, failed
        ("", (3, 3, 0, 0, 0), "Scheduling"),
        ("Pending", (3, 3, 3, 0, 0), "Running"),
        ("Running", (3, 3, 1, 2, 0), "Running"),
        ("Running", (3, 3, 0, 3, 0), "Finished"),
        ("Running", (3, 3, 1, 0, 2), "Failed"),  # failed + running reach minMember
        ("Scheduling", (3, 2, 0, 0, 0), "Pending"),
        ("Finished", (3, 0, 0, 0, 0), "Finished"),
    ],
)
def test_coscheduling_phase_follows_its_controller(current: str, counts: tuple[int, ...], phase: str) -> None:
    min_member, pods, running, succeeded, failed = counts
    assert coscheduling.phase_for(current, min_member, pods, running, succeeded, failed) == phase


def test_volcano_fields_map_and_unhonoured_ones_are_named() -> None:
    info = volcano.from_volcano(
        group(
            volcano.API_VERSION, minMember=2, minTaskMember={"ps": 1, "worker": 0}, priorityClassName="high"
        ),
        {"high": 1000},
    )
    assert (info.min_count, info.is_gang, info.priority, info.min_task_members) == (
        2,
        True,
        1000,
        (("ps", 1),),
    )
    assert (
        "spec.minTaskMember[ps]: must not be negative"
        in volcano.from_volcano(group(volcano.API_VERSION, minTaskMember={"ps": -1}), {}).refusal
    )
    named = volcano.not_honoured({"queue": "q1", "networkTopology": {"mode": "hard"}})
    assert [field.split(" ")[0] for field in named] == ["spec.queue", "spec.networkTopology"]
    assert volcano.not_honoured({"queue": "default"}) == []


@pytest.mark.parametrize(
    ("current", "counts", "phase"),
    [
        (
            "Pending",
            (3, 0, 0, 0, 3, False),
            "Pending",
        ),  # minMember, allocated, running, succeeded, live, unschedulable
        ("Inqueue", (3, 2, 0, 0, 3, True), "Inqueue"),
        ("Inqueue", (3, 3, 0, 0, 3, False), "Running"),
        ("Running", (3, 1, 1, 0, 3, True), "Unknown"),
        ("Running", (3, 0, 0, 3, 0, False), "Completed"),
    ],
)
def test_volcano_phase_follows_its_scheduler(current: str, counts: tuple[Any, ...], phase: str) -> None:
    assert volcano.phase_for(current, *counts) == phase


@pytest.mark.parametrize(
    ("asks", "min_count", "problem"),
    [
        ({"a": 2, "b": 2}, 2, ""),
        ({"a": "annotation kueue.x-k8s.io/pod-group-total-count: 'abc' is not a whole number"}, 1, "'abc'"),
        (
            {"a": 2, "b": 3},
            1,
            "members disagree on kueue.x-k8s.io/pod-group-total-count: 2 (pod a), 3 (pod b)",
        ),
    ],
)
def test_kueue_pods_make_one_gang_of_their_total_count(
    asks: dict[str, Any], min_count: int, problem: str
) -> None:
    info = kueue.group_info("ns", "g", asks)
    assert info.min_count == min_count and info.dialect == DIALECT_KUEUE
    assert (problem in info.refusal) if problem else not info.refusal
    assert isinstance(kueue.total_count({kueue.TOTAL_COUNT_ANNOTATION: "abc"}), str)
    assert isinstance(kueue.total_count({kueue.TOTAL_COUNT_ANNOTATION: "0"}), str)
    assert kueue.total_count({kueue.TOTAL_COUNT_ANNOTATION: "4"}) == 4
