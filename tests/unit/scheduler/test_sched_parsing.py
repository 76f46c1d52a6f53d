"""Quantities, pod requests and node parsing: the edge where raw API dicts become scheduler views."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import pod_dict

from lockstep.api.node import parse_node
from lockstep.api.pod import InvalidObjectError, parse_pod, pod_requests
from lockstep.api.quantity import QuantityError, parse_quantity, to_milli, to_units


@pytest.mark.parametrize(
    ("text", "milli", "units"),
    [
        ("100m", 100, 1),
        ("0.1", 100, 1),
        ("1", 1000, 1),
        ("2.5", 2500, 3),
        ("1u", 1, 1),  # rounds up to one milli
        ("1n", 1, 1),
        ("1Ki", 1_024_000, 1024),
        ("1.5Gi", 1_610_612_736_000, 1_610_612_736),
        ("129M", 129_000_000_000, 129_000_000),
        ("123Mi", 128_974_848_000, 128_974_848),
        ("2e3", 2_000_000, 2000),
        ("1E", 10**21, 10**18),
        (".5", 500, 1),
        ("5.", 5000, 5),
        (4, 4000, 4),  # a plain JSON number
    ],
)
def test_quantities_convert_exactly_and_round_up(text: str | int, milli: int, units: int) -> None:
    assert to_milli(text) == milli
    assert to_units(text) == units


@pytest.mark.parametrize("text", ["", "abc", "1.5.3", "1Qi", "e3", "1e", "--1", "1 Gi", " 1", "1\n"])
def test_malformed_quantities_are_rejected(text: str) -> None:
    with pytest.raises(QuantityError, match="quantity"):
        parse_quantity(text)


def _requests(spec: dict[str, Any]) -> dict[str, int]:
    return pod_requests(spec, "ns/p")


def _container(name: str, cpu: str, memory: str | None = None, **extra: Any) -> dict[str, Any]:
    requests = {"cpu": cpu} | ({"memory": memory} if memory else {})
    return {"name": name, "resources": {"requests": requests}, **extra}


def test_requests_sum_app_containers_and_take_the_larger_init_container() -> None:
    spec = {
        "containers": [_container("a", "500m", "1Gi"), _container("b", "250m", "1Gi")],
        "initContainers": [_container("init", "2", "512Mi")],
    }
    assert _requests(spec) == {"cpu": 2000, "memory": 2 * 2**30}


def test_sidecars_add_to_app_containers_and_to_later_init_containers() -> None:
    spec = {
        "containers": [_container("app", "1")],
        "initContainers": [
            _container("sidecar", "500m", restartPolicy="Always"),
            _container("migrate", "1200m"),
        ],
    }
    # app + sidecar = 1.5; the init container runs next to the sidecar: 1.2 + 0.5 = 1.7.
    assert _requests(spec) == {"cpu": 1700}


def test_overhead_is_added_and_limits_stand_in_for_missing_requests() -> None:
    spec = {
        "containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "2"}}}],
        "overhead": {"cpu": "250m", "memory": "64Mi"},
    }
    assert _requests(spec) == {"cpu": 1250, "memory": 64 * 2**20, "nvidia.com/gpu": 2}


def test_pod_level_resources_replace_container_cpu_and_memory() -> None:
    spec = {
        "resources": {"requests": {"cpu": "3"}, "limits": {"memory": "2Gi"}},
        "containers": [
            _container("a", "1", "1Gi", resources={"requests": {"cpu": "1", "nvidia.com/gpu": "1"}})
        ],
        "overhead": {"cpu": "100m"},
    }
    assert _requests(spec) == {"cpu": 3100, "memory": 2 * 2**30, "nvidia.com/gpu": 1}


def test_pod_level_huge_pages_replace_the_containers_as_kube_scheduler_does() -> None:
    huge = {"requests": {"hugepages-2Mi": "4Mi"}, "limits": {"hugepages-2Mi": "4Mi"}}
    spec = {
        "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "10Mi"}},
        "containers": [_container("a", "1", resources=huge), _container("b", "1", resources=huge)],
    }
    assert _requests(spec) == {"cpu": 1000, "hugepages-2Mi": 10 * 2**20}


def test_parse_pod_reads_the_fields_the_scheduler_uses() -> None:
    raw = pod_dict(
        "p",
        group="train",
        priority=7,
        nodeSelector={"disk": "ssd"},
        tolerations=[{"key": "gpu", "operator": "Exists"}],
        resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
        affinity={
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
        },
    )
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    raw["status"]["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]
    pod = parse_pod(raw)
    assert (pod.key, pod.group_name, pod.priority, pod.scheduler_name) == (
        "default/p",
        "train",
        7,
        "lockstep",
    )
    assert pod.requests == {"cpu": 1000, "memory": 2**30}
    assert pod.node_selector == {"disk": "ssd"}
    assert pod.required_node_affinity == {"nodeSelectorTerms": []}
    assert pod.claims[0].resource_claim_template_name == "gpu-template"
    assert pod.deleting
    assert pod.scheduled_condition is not None and pod.scheduled_condition.reason == "Unschedulable"
    assert pod.group_key.name == "train" and pod.group_key.pod_group


def test_scheduling_gates_are_read() -> None:
    assert parse_pod(pod_dict("g", schedulingGates=[{"name": "example.com/wait"}])).scheduling_gated
    assert not parse_pod(pod_dict("open", schedulingGates=[])).scheduling_gated


def test_a_pod_without_the_group_label_is_a_group_of_its_own() -> None:
    key = parse_pod(pod_dict("solo")).group_key
    assert (key.namespace, key.name, key.pod_group) == ("default", "solo", False)


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (
            lambda raw: raw["spec"]["containers"][0]["resources"]["requests"].update(cpu="lots"),
            "requests.cpu",
        ),
        (
            lambda raw: raw["spec"]["containers"][0]["resources"]["requests"].update(memory="-1Gi"),
            "requests.memory",
        ),
        (lambda raw: raw["spec"].update(priority="high"), "spec.priority"),
        (lambda raw: raw["spec"].update(containers="main"), "spec.containers"),
        (
            lambda raw: raw["spec"].update(resourceClaims=[{"resourceClaimName": "x"}]),
            "spec.resourceClaims[0].name",
        ),
    ],
)
def test_bad_pod_fields_are_errors_naming_pod_and_field(mutate: Any, field: str) -> None:
    raw = pod_dict("bad")
    mutate(raw)
    with pytest.raises(InvalidObjectError) as info:
        parse_pod(raw)
    assert "Pod default/bad" in str(info.value)
    assert field in str(info.value)


def test_parse_node_reads_allocatable_taints_and_cordon() -> None:
    node = parse_node(
        {
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {
                "unschedulable": True,
                "taints": [{"key": "gpu", "value": "yes", "effect": "NoSchedule"}],
            },
            "status": {
                "capacity": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                "allocatable": {"cpu": "15500m", "memory": "60Gi", "pods": "110", "nvidia.com/gpu": "4"},
            },
        }
    )
    assert node.allocatable == {"cpu": 15500, "memory": 60 * 2**30, "pods": 110, "nvidia.com/gpu": 4}
    assert node.unschedulable and node.labels == {"zone": "a"}
    assert node.taints[0]["key"] == "gpu"


def test_parse_node_falls_back_to_capacity() -> None:
    node = parse_node({"metadata": {"name": "n1"}, "status": {"capacity": {"cpu": "2"}}})
    assert node.allocatable == {"cpu": 2000}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({"metadata": {}}, "metadata.name"),
        (
            {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k", "effect": "Sometimes"}]}},
            "spec.taints[0].effect",
        ),
        ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "x"}}}, "status.allocatable.cpu"),
    ],
)
def test_bad_node_fields_are_errors_naming_node_and_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidObjectError, match="Node") as info:
        parse_node(raw)
    assert field in str(info.value)
