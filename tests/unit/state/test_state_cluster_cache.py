"""The cluster cache: node accounting from bound and assumed pods, indexes, and the events that
can help a parked group."""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from lockstep.api.podgroup import PodGroup
from lockstep.scheduler.framework import GroupKey, NodeInfo, PodGroupInfo, PodInfo
from lockstep.state.cluster import ClusterCache, ClusterEvent

G = GroupKey("ns", "g")


def node(name: str, cpu: int = 4000, labels: dict[str, str] | None = None, **kwargs: object) -> NodeInfo:
    return NodeInfo(
        name=name, labels=labels or {}, allocatable={"cpu": cpu, "memory": 8 * 2**30, "pods": 10}, **kwargs
    )  # type: ignore[arg-type]


def pod(name: str, cpu: int = 1000, group: str = "g", node_name: str = "", **kwargs: object) -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace="ns",
        name=name,
        scheduler_name=str(kwargs.pop("scheduler_name", "lockstep")),
        group_name=group,
        node_name=node_name,
        requests={"cpu": cpu, "memory": 2**30},
        **kwargs,  # type: ignore[arg-type]
    )


class Events:
    def __init__(self) -> None:
        self.seen: list[tuple[ClusterEvent, GroupKey | None]] = []

    def on_cluster_event(self, event: ClusterEvent, group: GroupKey | None) -> None:
        self.seen.append((event, group))

    def take(self) -> list[tuple[ClusterEvent, GroupKey | None]]:
        seen, self.seen = self.seen, []
        return seen


def cache_with_events() -> tuple[ClusterCache, Events]:
    cache = ClusterCache("lockstep")
    events = Events()
    cache.add_listener(events)
    return cache, events


def test_bound_and_assumed_pods_are_counted_on_their_node() -> None:
    cache, _ = cache_with_events()
    cache.upsert_node(node("n1"))
    cache.upsert_pod(pod("bound", node_name="n1"))
    waiting = pod("waiting")
    cache.upsert_pod(waiting)
    assert cache.nodes["n1"].requested["cpu"] == 1000 and cache.nodes["n1"].pod_count == 1
    cache.assume(waiting, "n1")
    assert cache.nodes["n1"].requested["cpu"] == 2000 and cache.is_assumed(waiting.uid)
    cache.forget(waiting.uid)
    assert cache.nodes["n1"].requested["cpu"] == 1000 and cache.nodes["n1"].pod_count == 1


def test_the_watch_confirming_a_binding_replaces_the_assumption() -> None:
    cache, _ = cache_with_events()
    cache.upsert_node(node("n1"))
    p = pod("p")
    cache.upsert_pod(p)
    cache.assume(p, "n1")
    cache.upsert_pod(dataclasses.replace(p, node_name="n1", resource_version="2"))
    assert not cache.is_assumed(p.uid)
    assert cache.nodes["n1"].requested["cpu"] == 1000 and cache.nodes["n1"].pod_count == 1
    cache.forget(p.uid)  # a late forget must not drop a confirmed pod
    assert cache.nodes["n1"].pod_count == 1


def test_a_binding_that_landed_elsewhere_moves_the_usage() -> None:
    cache, _ = cache_with_events()
    cache.upsert_node(node("n1"))
    cache.upsert_node(node("n2"))
    p = pod("p")
    cache.upsert_pod(p)
    cache.assume(p, "n1")
    cache.upsert_pod(dataclasses.replace(p, node_name="n2"))
    assert cache.nodes["n1"].pod_count == 0 and cache.nodes["n2"].pod_count == 1


def test_pods_bound_to_a_node_seen_later_are_counted_when_it_arrives() -> None:
    cache, _ = cache_with_events()
    cache.upsert_pod(pod("early", node_name="late-node", scheduler_name="default-scheduler"))
    cache.upsert_node(node("late-node"))
    assert cache.nodes["late-node"].requested["cpu"] == 1000
    cache.upsert_node(node("late-node", cpu=8000))  # an update keeps the usage
    assert cache.nodes["late-node"].requested["cpu"] == 1000


def test_finished_and_deleted_pods_free_their_node_and_say_so() -> None:
    cache, events = cache_with_events()
    cache.upsert_node(node("n1"))
    done = pod("done", node_name="n1")
    gone = pod("gone", node_name="n1")
    cache.upsert_pod(done)
    cache.upsert_pod(gone)
    events.take()
    cache.upsert_pod(dataclasses.replace(done, phase="Succeeded"))
    assert (ClusterEvent.ASSIGNED_POD_REMOVED, None) in events.take()
    cache.delete_pod(gone.uid)
    assert (ClusterEvent.ASSIGNED_POD_REMOVED, None) in events.take()
    assert cache.nodes["n1"].pod_count == 0 and cache.nodes["n1"].requested["cpu"] == 0


def test_member_events_and_counts() -> None:
    cache, events = cache_with_events()
    cache.upsert_podgroup(PodGroupInfo("ns", "g", min_count=2, is_gang=True))
    assert events.take() == [(ClusterEvent.GROUP_ADDED, G)]
    a, b = pod("a"), pod("b")
    cache.upsert_pod(a)
    cache.upsert_pod(b)
    assert events.take() == [(ClusterEvent.MEMBER_ADDED, G)] * 2
    cache.upsert_pod(dataclasses.replace(a, resource_version="7"))  # status noise: no event
    assert events.take() == []
    cache.upsert_pod(dataclasses.replace(a, tolerations=({"operator": "Exists"},)))
    assert events.take() == [(ClusterEvent.MEMBER_CHANGED, G)]
    cache.upsert_pod(pod("other", scheduler_name="default-scheduler"))  # not ours
    assert events.take() == []
    assert cache.live_member_count(G) == 2 and cache.scheduled_count(G) == 0
    cache.assume(a, "n1")
    assert cache.scheduled_count(G) == 1
    assert [p.name for p in cache.unscheduled_members(G)] == ["b"]
    cache.upsert_pod(dataclasses.replace(b, deleting=True))
    assert cache.live_member_count(G) == 1 and cache.unscheduled_members(G) == []
    cache.delete_pod(b.uid)
    assert events.take()[-1] == (ClusterEvent.MEMBER_REMOVED, G)


def test_podgroup_updates_report_min_count_lowered_only_when_lowered() -> None:
    cache, events = cache_with_events()
    raw = {
        "metadata": {"name": "g", "namespace": "ns", "uid": "u1", "generation": 1},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 4}}, "scheduleTimeoutSeconds": 60},
    }
    cache.upsert_podgroup(PodGroup.model_validate(raw))
    info = cache.podgroup(G)
    assert info is not None and (info.min_count, info.is_gang, info.schedule_timeout_seconds) == (
        4,
        True,
        60.0,
    )
    events.take()
    raw["spec"]["schedulingPolicy"] = {"gang": {"minCount": 6}}
    cache.upsert_podgroup(PodGroup.model_validate(raw))
    assert events.take() == [(ClusterEvent.GROUP_UPDATED, G)]
    raw["spec"]["schedulingPolicy"] = {"gang": {"minCount": 2}}
    cache.upsert_podgroup(PodGroup.model_validate(raw))
    assert events.take() == [(ClusterEvent.GROUP_MIN_COUNT_LOWERED, G)]
    cache.delete_podgroup("ns", "g")
    assert events.take() == [(ClusterEvent.GROUP_DELETED, G)]
    assert cache.podgroup(G) is None


def test_only_node_changes_that_can_admit_pods_are_reported() -> None:
    cache, events = cache_with_events()
    cache.upsert_node(node("n1", labels={"zone": "a"}, unschedulable=True))
    assert events.take() == [(ClusterEvent.NODE_ADDED, None)]
    cache.upsert_node(node("n1", labels={"zone": "a"}, unschedulable=True))  # a heartbeat
    cache.upsert_node(node("n1", cpu=2000, labels={"zone": "a"}, unschedulable=True))  # shrank
    assert events.take() == []
    cache.upsert_node(node("n1", cpu=2000, labels={"zone": "a"}))  # uncordoned
    cache.upsert_node(node("n1", cpu=2000, labels={"zone": "b"}))  # relabelled
    cache.upsert_node(node("n1", cpu=3000, labels={"zone": "b"}))  # grew
    assert events.take() == [(ClusterEvent.NODE_CHANGED, None)] * 3
    cache.on_claims_changed()
    assert events.take() == [(ClusterEvent.CLAIMS_CHANGED, None)]


def test_label_index_follows_node_updates_and_deletes() -> None:
    cache, _ = cache_with_events()
    cache.upsert_node(node("n1", labels={"zone": "a"}))
    cache.upsert_node(node("n2", labels={"zone": "a"}))
    assert cache.nodes_with_label("zone", "a") == {"n1", "n2"}
    cache.upsert_node(node("n2", labels={"zone": "b"}))
    assert cache.nodes_with_label("zone", "a") == {"n1"}
    assert cache.nodes_with_label("zone", "b") == {"n2"}
    cache.delete_node("n1")
    assert cache.nodes_with_label("zone", "a") == set()
    assert "n1" not in cache.nodes


def test_free_cpu_index_orders_nodes_and_skips_ones_that_cannot_fit() -> None:
    cache = ClusterCache("lockstep", topology_key="zone")
    cache.upsert_node(node("empty", cpu=16000, labels={"zone": "a"}))
    cache.upsert_node(node("half", cpu=16000, labels={"zone": "b"}))
    cache.upsert_node(node("full", cpu=16000, labels={"zone": "a"}))
    cache.upsert_pod(pod("h", cpu=8000, node_name="half"))
    cache.upsert_pod(pod("f", cpu=15500, node_name="full"))
    assert list(cache.nodes_by_free_cpu(1000, most_free_first=True)) == ["empty", "half"]
    assert list(cache.nodes_by_free_cpu(1000, most_free_first=False)) == ["half", "empty"]
    assert list(cache.nodes_by_free_cpu(100, most_free_first=False)) == ["full", "half", "empty"]
    assert list(cache.nodes_by_free_cpu(0, True, domain="a")) == ["empty", "full"]
    cache.delete_pod("uid-f")
    assert list(cache.nodes_by_free_cpu(1000, True, domain="a")) == ["empty", "full"]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 16000), min_size=1, max_size=12),
    st.lists(st.tuples(st.integers(0, 11), st.integers(0, 11)), max_size=12),
    st.integers(0, 16000),
    st.booleans(),
)
def test_ordering_a_few_nodes_by_free_cpu_keeps_the_order_of_the_whole_index(
    used: list[int], moves: list[tuple[int, int]], at_least: int, most_free_first: bool
) -> None:
    cache = ClusterCache("lockstep")
    for i in range(len(used)):
        cache.upsert_node(node(f"n{i}", cpu=16000))
    for i, cpu in enumerate(used):
        cache.upsert_pod(pod(f"p{i}", cpu=cpu, node_name=f"n{i}"))
    for step, (source, target) in enumerate(moves):  # pods leave and arrive: nodes change buckets
        if source < len(used):
            cache.delete_pod(f"uid-p{source}")
        if target < len(used):
            cache.upsert_pod(pod(f"q{step}", cpu=used[target] // 2, node_name=f"n{target}"))
    some = {f"n{i}" for i in range(0, len(used), 2)}
    whole = [name for name in cache.nodes_by_free_cpu(at_least, most_free_first) if name in some]
    assert cache.order_by_free_cpu(some, at_least, most_free_first) == whole


def test_free_cpu_per_domain_follows_pods_nodes_and_labels() -> None:
    cache = ClusterCache("lockstep", topology_key="zone")
    cache.upsert_node(node("a1", cpu=4000, labels={"zone": "a"}))
    cache.upsert_node(node("a2", cpu=4000, labels={"zone": "a"}))
    cache.upsert_node(node("b1", cpu=2000, labels={"zone": "b"}))
    cache.upsert_node(node("none", cpu=9000))
    assert cache.domain_free_cpu() == {"a": 8000, "b": 2000}
    p = pod("p", cpu=1500)
    cache.upsert_pod(p)
    cache.assume(p, "a1")
    assert cache.domain_free_cpu()["a"] == 6500
    cache.upsert_node(node("a1", cpu=4000, labels={"zone": "b"}))  # relabelled with its pod
    assert cache.domain_free_cpu() == {"a": 4000, "b": 4500}
    cache.forget(p.uid)
    cache.delete_node("b1")
    assert cache.domain_free_cpu() == {"a": 4000, "b": 4000}
    cache.delete_node("a2")
    assert cache.domain_free_cpu() == {"b": 4000}


OPERATIONS = st.lists(
    st.tuples(
        st.sampled_from(
            ["add", "bind", "assume", "forget", "delete", "finish", "deleting", "marked", "regroup", "node"]
        ),
        st.integers(0, 5),  # pod
        st.integers(0, 2),  # node
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(operations=OPERATIONS)
def test_incremental_counts_always_match_a_recount(operations: list[tuple[str, int, int]]) -> None:
    cache = ClusterCache("lockstep", topology_key="zone")
    for n in range(2):  # node 2 appears only through the "node" operation
        cache.upsert_node(node(f"n{n}", cpu=8000, labels={"zone": f"z{n}"}))
    for op, p, n in operations:
        uid = f"uid-p{p}"
        current = cache.get_pod(uid)
        if op == "add" and current is None:
            cache.upsert_pod(pod(f"p{p}", cpu=100 * (p + 1), group=f"g{p % 2}", priority=p))
        elif current is None:
            continue
        elif op == "bind":
            cache.upsert_pod(dataclasses.replace(current, node_name=current.node_name or f"n{n}"))
        elif op == "assume" and not current.node_name:
            cache.assume(current, f"n{n}")
        elif op == "forget":
            cache.forget(uid, report_freed=bool(n))
        elif op == "delete":
            cache.delete_pod(uid)
        elif op == "finish":
            cache.upsert_pod(dataclasses.replace(current, phase="Succeeded"))
        elif op == "deleting":
            cache.upsert_pod(dataclasses.replace(current, deleting=True))
        elif op == "marked":
            cache.upsert_pod(dataclasses.replace(current, preempted_by=GroupKey("ns", "high") if n else None))
        elif op == "regroup":
            cache.upsert_pod(dataclasses.replace(current, group_name=f"g{n}"))
        elif op == "node":
            cache.upsert_node(node(f"n{n + 1 if n < 2 else 2}", cpu=8000 + n, labels={"zone": f"z{n % 2}"}))
    pods = list(cache.pods.values())
    placed = [p for p in pods if not p.terminal and (p.node_name or cache.is_assumed(p.uid))]
    assert cache.lowest_placed_priority() == min((p.priority for p in placed), default=None)
    assert {p.uid for p in cache.leaving_pods()} == {
        p.uid for p in pods if p.deleting or p.preempted_by is not None
    }
    for name, info in cache.nodes.items():
        on_node = [p for p in pods if not p.terminal and (p.node_name or cache.assumed_node(p.uid)) == name]
        assert info.pod_count == len(on_node)
        assert info.requested.get("cpu", 0) == sum(p.requests["cpu"] for p in on_node)
    for g in range(3):
        key = GroupKey("ns", f"g{g}")
        members = [p for p in pods if p.group_name == f"g{g}" and not p.terminal]
        live = [p for p in members if not p.deleting]
        assert cache.live_member_count(key) == len(live)
        assert cache.scheduled_count(key) == sum(1 for p in live if p.node_name or cache.is_assumed(p.uid))
        assert cache.group_priority(key) == max((p.priority for p in members), default=0)
        assert sorted(p.uid for p in cache.unscheduled_members(key)) == sorted(
            p.uid for p in live if not p.node_name and not cache.is_assumed(p.uid)
        )
    free = {}
    for info in cache.nodes.values():
        zone = info.labels["zone"]
        free[zone] = free.get(zone, 0) + info.allocatable["cpu"] - info.requested.get("cpu", 0)
    assert dict(cache.domain_free_cpu()) == free
