"""Simulated node generation: names, topology labels, capacity, taints, CRD location."""

from __future__ import annotations

from collections import defaultdict

import pytest

from lockstep.sim.cluster import (
    HOSTNAME_LABEL,
    RACK_LABEL,
    TAINT_KEY,
    ZONE_LABEL,
    NodeShape,
    find_crd_file,
    load_crd,
    make_node,
    node_name,
)


def nodes(count: int, **kwargs: object) -> list[dict]:
    return [make_node(i, count, **kwargs) for i in range(count)]  # type: ignore[arg-type]


def test_names_are_unique_and_sort_in_index_order() -> None:
    names = [node["metadata"]["name"] for node in nodes(1200)]
    assert len(set(names)) == 1200
    assert names == sorted(names)
    assert node_name(7, 10) == "node-007"


def test_labels_put_whole_racks_of_eight_into_a_few_zones() -> None:
    generated = nodes(40)
    racks: dict[str, set[str]] = defaultdict(set)
    rack_sizes: dict[str, int] = defaultdict(int)
    for node in generated:
        labels = node["metadata"]["labels"]
        assert labels[HOSTNAME_LABEL] == node["metadata"]["name"]
        racks[labels[RACK_LABEL]].add(labels[ZONE_LABEL])
        rack_sizes[labels[RACK_LABEL]] += 1
    assert set(rack_sizes.values()) == {8}
    assert all(len(zones) == 1 for zones in racks.values()), "a rack spans zones"
    assert {z for zones in racks.values() for z in zones} == {"zone-a", "zone-b", "zone-c"}


def test_status_is_ready_with_allocatable_below_capacity() -> None:
    node = make_node(3, 10)
    status = node["status"]
    assert status["capacity"] == {"cpu": "32", "memory": "256Gi", "pods": "110", "ephemeral-storage": "500Gi"}
    assert status["allocatable"] == {
        "cpu": "31500m",
        "memory": "254Gi",
        "pods": "110",
        "ephemeral-storage": "490Gi",
    }
    ready = [c for c in status["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert {"type": "InternalIP", "address": "10.0.0.4"} in status["addresses"]
    assert node["spec"]["podCIDR"] == "10.64.3.0/24"


def test_taints_only_on_a_deterministic_subset_when_asked() -> None:
    assert not any("taints" in node["spec"] for node in nodes(20))
    tainted = [n["metadata"]["name"] for n in nodes(20, taint_every=5) if n["spec"].get("taints")]
    assert tainted == ["node-004", "node-009", "node-014", "node-019"]
    taint = make_node(4, 20, taint_every=5)["spec"]["taints"][0]
    assert taint == {"key": TAINT_KEY, "value": "infra", "effect": "NoSchedule"}


def test_bad_shapes_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"NodeShape.memory_gi"):
        NodeShape(memory_gi=1)
    with pytest.raises(ValueError, match=r"zones"):
        make_node(0, 1, zones=0)
    with pytest.raises(ValueError, match=r"index 5 out of range"):
        make_node(5, 5)


def test_crd_is_found_in_the_repository() -> None:
    crd = load_crd(find_crd_file())
    assert crd["metadata"]["name"] == "podgroups.scheduling.lockstep.dev"
