"""InterPodAffinity: tables after kube-scheduler's interpodaffinity filtering_test.go and
scoring_test.go (same scenarios, our pod builders), and gang cycles where members assumed earlier in
the cycle count like bound pods."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import FakeClock, gang, make_node, make_scheduler, pod_dict, settle

from lockstep.api.pod import parse_pod
from lockstep.scheduler.framework import Code, CycleState, GroupKey, PodInfo
from lockstep.scheduler.plugins.inter_pod_affinity import InterPodAffinity
from lockstep.state.cluster import ClusterCache

HOST = "kubernetes.io/hostname"
REGION = "region"
ZONE = "zone"


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    node: str = "",
    namespace: str = "default",
    affinity: dict[str, Any] | None = None,
    group: str | None = None,
    scheduler: str = "lockstep",
) -> PodInfo:
    body = pod_dict(
        name, namespace=namespace, node_name=node, group=group, cpu="100m", memory=None, scheduler=scheduler
    )
    body["metadata"]["labels"].update(labels or {})
    if affinity:
        body["spec"]["affinity"] = affinity
    return parse_pod(body)


def term(
    key: str = "service",
    operator: str = "In",
    values: list[str] | None = None,
    topology: str = REGION,
    **extra: Any,
) -> dict[str, Any]:
    expression: dict[str, Any] = {"key": key, "operator": operator}
    if values is not None:
        expression["values"] = values
    return {"labelSelector": {"matchExpressions": [expression]}, "topologyKey": topology, **extra}


def required(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(kind: str, *weighted: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {
        kind: {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": w, "podAffinityTerm": t} for w, t in weighted
            ]
        }
    }


def cluster(nodes: dict[str, dict[str, str]], existing: list[PodInfo] = ()) -> ClusterCache:  # type: ignore[assignment]
    cache = ClusterCache("lockstep")
    for name, labels in nodes.items():
        cache.upsert_node(make_node(name, labels={HOST: name, **labels}))
    for placed in existing:
        cache.upsert_pod(placed)
    return cache


def verdicts(cache: ClusterCache, incoming: PodInfo) -> dict[str, Code]:
    plugin = InterPodAffinity(cache)
    state = CycleState()
    pre = plugin.pre_filter(state, incoming)
    if pre.code is Code.SKIP:
        return {name: Code.SUCCESS for name in cache.nodes}
    return {name: plugin.filter(state, incoming, node).code for name, node in cache.nodes.items()}


OK, NO, NEVER = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE
ONE_NODE = {"node1": {REGION: "r1"}}

# (name, existing pods, incoming pod, verdict on node1)
SINGLE_NODE_CASES = [
    ("no affinity, no pods", [], pod("p"), OK),
    (
        "affinity In matches the existing pod",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAffinity", term(values=["securityscan", "value2"]))),
        OK,
    ),
    (
        "affinity NotIn matches the existing pod",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAffinity", term(operator="NotIn", values=["value1", "value2"]))),
        OK,
    ),
    (
        "affinity does not match a pod of another namespace",
        [pod("e", {"service": "securityscan"}, "node1", namespace="other")],
        pod("p", affinity=required("podAffinity", term(values=["securityscan"]))),
        NEVER,
    ),
    (
        "affinity with unmatched labelSelector",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAffinity", term(values=["antivirusscan"]))),
        NEVER,
    ),
    (
        "affinity names the other namespace",
        [pod("e", {"service": "securityscan"}, "node1", namespace="other")],
        pod("p", affinity=required("podAffinity", term(values=["securityscan"], namespaces=["other"]))),
        OK,
    ),
    (
        "affinity with an empty namespaceSelector matches every namespace",
        [pod("e", {"service": "securityscan"}, "node1", namespace="other")],
        pod("p", affinity=required("podAffinity", term(values=["securityscan"], namespaceSelector={}))),
        OK,
    ),
    (
        "all affinity terms must match the same pod",
        [pod("e", {"service": "securityscan"}, "node1"), pod("f", {"tier": "db"}, "node1")],
        pod(
            "p",
            affinity=required("podAffinity", term(values=["securityscan"]), term(key="tier", values=["db"])),
        ),
        NEVER,
    ),
    (
        "anti-affinity matches the existing pod",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAntiAffinity", term(values=["securityscan"]))),
        NO,
    ),
    (
        "anti-affinity does not match",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAntiAffinity", term(values=["antivirusscan"]))),
        OK,
    ),
    (
        "the existing pod's anti-affinity rejects the incoming pod (symmetry)",
        [
            pod(
                "e",
                {"service": "securityscan"},
                "node1",
                affinity=required("podAntiAffinity", term(key="app", values=["web"])),
            )
        ],
        pod("p", {"app": "web"}),
        NO,
    ),
    (
        "the existing pod's anti-affinity in another topology does not",
        [
            pod(
                "e",
                {"service": "securityscan"},
                "node1",
                affinity=required("podAntiAffinity", term(key="app", values=["web"], topology="missing")),
            )
        ],
        pod("p", {"app": "web"}),
        OK,
    ),
    (
        "the first pod of a self-affine series goes anywhere the topology key is",
        [],
        pod("p", {"app": "web"}, affinity=required("podAffinity", term(key="app", values=["web"]))),
        OK,
    ),
    (
        "self-affinity needs the topology key on the node",
        [],
        pod(
            "p",
            {"app": "web"},
            affinity=required("podAffinity", term(key="app", values=["web"], topology="missing")),
        ),
        NEVER,
    ),
    (
        "a pod not matching its own affinity waits for a matching pod",
        [],
        pod("p", {"app": "db"}, affinity=required("podAffinity", term(key="app", values=["web"]))),
        NEVER,
    ),
    (
        "a null labelSelector matches nothing",
        [pod("e", {"service": "securityscan"}, "node1")],
        pod("p", affinity=required("podAntiAffinity", {"topologyKey": REGION})),
        OK,
    ),
]


@pytest.mark.parametrize(
    ("existing", "incoming", "expected"),
    [case[1:] for case in SINGLE_NODE_CASES],
    ids=[case[0] for case in SINGLE_NODE_CASES],
)
def test_required_affinity_single_node(existing: list[PodInfo], incoming: PodInfo, expected: Code) -> None:
    assert verdicts(cluster(ONE_NODE, existing), incoming)["node1"] is expected


def test_topology_domains_span_nodes() -> None:
    """Anti-affinity on region rejects every node of the region that holds a matching pod."""
    nodes = {"a": {REGION: "r1"}, "b": {REGION: "r1"}, "c": {REGION: "r2"}}
    cache = cluster(nodes, [pod("e", {"service": "securityscan"}, "a")])
    incoming = pod("p", affinity=required("podAntiAffinity", term(values=["securityscan"])))
    assert verdicts(cache, incoming) == {"a": NO, "b": NO, "c": OK}
    affine = pod("q", affinity=required("podAffinity", term(values=["securityscan"])))
    assert verdicts(cache, affine) == {"a": OK, "b": OK, "c": NEVER}


def test_namespace_selector_uses_namespace_labels() -> None:
    cache = cluster(ONE_NODE, [pod("e", {"service": "s"}, "node1", namespace="team1")])
    cache.upsert_namespace("team1", {"team": "a"})
    cache.upsert_namespace("team2", {"team": "b"})
    selecting = {"namespaceSelector": {"matchLabels": {"team": "a"}}}
    assert (
        verdicts(cache, pod("p", affinity=required("podAntiAffinity", term(values=["s"], **selecting))))[
            "node1"
        ]
        is NO
    )
    other = {"namespaceSelector": {"matchLabels": {"team": "b"}}}
    assert (
        verdicts(cache, pod("p", affinity=required("podAntiAffinity", term(values=["s"], **other))))["node1"]
        is OK
    )


def test_existing_anti_affinity_with_namespace_selector_reads_the_incoming_namespace() -> None:
    guard = pod(
        "e",
        {},
        "node1",
        affinity=required(
            "podAntiAffinity",
            term(key="app", values=["web"], namespaceSelector={"matchLabels": {"env": "prod"}}),
        ),
    )
    cache = cluster(ONE_NODE, [guard])
    cache.upsert_namespace("prod", {"env": "prod"})
    cache.upsert_namespace("dev", {"env": "dev"})
    assert verdicts(cache, pod("p", {"app": "web"}, namespace="prod"))["node1"] is NO
    assert verdicts(cache, pod("p", {"app": "web"}, namespace="dev"))["node1"] is OK


def test_match_label_keys_and_mismatch_label_keys() -> None:
    nodes = {"a": {REGION: "r1"}, "b": {REGION: "r2"}}
    cache = cluster(
        nodes, [pod("old", {"app": "x", "rev": "1"}, "a"), pod("new", {"app": "x", "rev": "2"}, "b")]
    )
    # anti-affinity to the pods of the same revision only
    same_rev = pod(
        "p",
        {"app": "x", "rev": "2"},
        affinity=required("podAntiAffinity", term(key="app", values=["x"], matchLabelKeys=["rev"])),
    )
    assert verdicts(cache, same_rev) == {"a": OK, "b": NO}
    # anti-affinity to the pods of any other revision
    other_rev = pod(
        "q",
        {"app": "x", "rev": "2"},
        affinity=required("podAntiAffinity", term(key="app", values=["x"], mismatchLabelKeys=["rev"])),
    )
    assert verdicts(cache, other_rev) == {"a": NO, "b": OK}


def test_no_affinity_anywhere_skips_the_plugin() -> None:
    cache = cluster(ONE_NODE, [pod("e", {"service": "s"}, "node1")])
    assert InterPodAffinity(cache).pre_filter(CycleState(), pod("p", {"app": "web"})).code is Code.SKIP


def test_placed_pods_leave_the_indexes_when_forgotten() -> None:
    """Taking a pod out of the snapshot (a failed cycle, or a planner trying a victim) lifts its
    anti-affinity and its matches."""
    cache = cluster(ONE_NODE)
    guard = pod("g", {"app": "web"}, affinity=required("podAntiAffinity", term(key="app", values=["web"])))
    cache.upsert_pod(guard)
    cache.assume(guard, "node1")
    incoming = pod("p", {"app": "web"})
    assert verdicts(cache, incoming)["node1"] is NO
    cache.forget(guard.uid)
    assert verdicts(cache, incoming)["node1"] is OK
    assert not cache.placed_pods.anti_affinity_terms


def scores(cache: ClusterCache, incoming: PodInfo) -> dict[str, int]:
    plugin = InterPodAffinity(cache)
    state = CycleState()
    nodes = list(cache.nodes.values())
    if plugin.pre_score(state, incoming, nodes).code is Code.SKIP:
        return {}
    raw = [plugin.score(state, incoming, node) for node in nodes]
    plugin.normalize_scores(state, incoming, raw)
    return dict(zip(cache.nodes, raw, strict=True))


def test_preferred_affinity_and_anti_affinity_scores() -> None:
    nodes = {"a": {REGION: "r1"}, "b": {REGION: "r2"}, "c": {REGION: "r3"}}
    cache = cluster(nodes, [pod("e", {"security": "S1"}, "a"), pod("f", {"security": "S2"}, "b")])
    likes = pod("p", affinity=preferred("podAffinity", (5, term(key="security", values=["S1"]))))
    assert scores(cache, likes) == {"a": 100, "b": 0, "c": 0}
    avoids = pod("p", affinity=preferred("podAntiAffinity", (5, term(key="security", values=["S1"]))))
    assert scores(cache, avoids) == {"a": 0, "b": 100, "c": 100}
    both = pod(
        "p",
        affinity={
            **preferred("podAffinity", (8, term(key="security", values=["S2"]))),
            **preferred("podAntiAffinity", (5, term(key="security", values=["S1"]))),
        },
    )
    assert scores(cache, both) == {"a": 0, "b": 100, "c": 38}


def test_existing_pods_terms_score_the_incoming_pod() -> None:
    """Symmetry in scoring: an existing pod's required affinity (hardPodAffinityWeight) and
    preferred anti-affinity terms that match the incoming pod."""
    nodes = {"a": {REGION: "r1"}, "b": {REGION: "r2"}}
    hard = pod("e", {}, "a", affinity=required("podAffinity", term(key="app", values=["web"])))
    cache = cluster(nodes, [hard])
    assert scores(cache, pod("p", {"app": "web"})) == {"a": 100, "b": 0}
    soft = pod("f", {}, "a", affinity=preferred("podAntiAffinity", (10, term(key="app", values=["db"]))))
    cache = cluster(nodes, [soft])
    assert scores(cache, pod("p", {"app": "db"})) == {"a": 0, "b": 100}
    assert scores(cache, pod("p", {"app": "web"})) == {}


ANTI_SELF = required("podAntiAffinity", term(key="app", values=["worker"], topology=HOST))


async def test_one_per_node_gang_lands_on_distinct_nodes() -> None:
    scheduler, api, cache = make_scheduler()
    for i in range(4):
        cache.upsert_node(make_node(f"n{i}", labels={HOST: f"n{i}"}))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(pod(f"w{i}", {"app": "worker"}, affinity=ANTI_SELF, group="g"))
    await settle(scheduler)
    nodes = [p.node_name for p in api.pods.values()]
    assert all(nodes) and len(set(nodes)) == 3


async def test_one_per_node_gang_too_big_is_unschedulable_with_the_reason() -> None:
    scheduler, api, cache = make_scheduler()
    for i in range(2):
        cache.upsert_node(make_node(f"n{i}", labels={HOST: f"n{i}"}))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(pod(f"w{i}", {"app": "worker"}, affinity=ANTI_SELF, group="g"))
    await settle(scheduler)
    assert api.bind_calls == []
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert attempt.causes.get("PodAntiAffinityRulesNotMatch") == 2
    assert "didn't match pod anti-affinity rules" in attempt.message


async def test_a_gang_member_respects_a_bound_pods_anti_affinity() -> None:
    scheduler, api, cache = make_scheduler()
    for i in range(3):
        cache.upsert_node(make_node(f"n{i}", labels={HOST: f"n{i}"}))
    loner = pod(
        "loner",
        {},
        "n0",
        affinity=required("podAntiAffinity", term(key="app", values=["worker"], topology=HOST)),
    )
    api.add(loner)
    cache.upsert_podgroup(gang("g", 2))
    for i in range(2):
        api.add(pod(f"w{i}", {"app": "worker"}, group="g"))
    await settle(scheduler)
    placed = [p.node_name for p in api.pods.values() if p.name != "loner"]
    assert all(placed) and "n0" not in placed


async def test_a_group_waiting_for_an_affine_pod_is_woken_when_one_is_bound() -> None:
    """Required affinity to pods that do not exist yet is unresolvable now: the group waits without
    a timer, and a matching pod bound by anyone wakes it (kube-scheduler's Pod/Add hint)."""
    clock = FakeClock()
    scheduler, api, cache = make_scheduler(clock=clock)
    for i in range(2):
        cache.upsert_node(make_node(f"n{i}", labels={HOST: f"n{i}"}))
    cache.upsert_podgroup(gang("g", 2))
    near_cache = required("podAffinity", term(key="app", values=["cache"], topology=HOST))
    for i in range(2):
        api.add(pod(f"w{i}", {"app": "web"}, affinity=near_cache, group="g"))
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE and attempt.next_retry_at is None
    assert "a pod is bound to a node" in attempt.message
    clock.advance(3600)
    await settle(scheduler)
    assert scheduler.attempts[GroupKey("default", "g")].attempt == attempt.attempt  # no timer
    api.add(pod("cache", {"app": "cache"}, "n1", scheduler="default-scheduler"))
    await settle(scheduler)
    assert [p.node_name for p in api.pods.values() if p.name.startswith("w")] == ["n1", "n1"]
