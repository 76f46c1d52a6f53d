"""PodTopologySpread, NodePorts and ImageLocality: tables after kube-scheduler's podtopologyspread
filtering_test.go / scoring_test.go, nodeports node_ports_test.go and imagelocality
image_locality_test.go, and gang cycles."""

from __future__ import annotations

from typing import Any

import pytest
from sched_helpers import gang, make_node, make_scheduler, pod_dict, settle

from lockstep.api.node import parse_node
from lockstep.api.pod import parse_pod
from lockstep.config import Settings
from lockstep.scheduler.framework import Code, CycleState, GroupKey, NodeInfo, PodInfo
from lockstep.scheduler.placement import HostPort
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.plugins.image_locality import ImageLocality
from lockstep.scheduler.plugins.node_ports import NodePorts
from lockstep.scheduler.plugins.pod_topology_spread import PodTopologySpread
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache

HOST = "kubernetes.io/hostname"
ZONE = "zone"
OK, NO, NEVER = Code.SUCCESS, Code.UNSCHEDULABLE, Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def pod(
    name: str,
    labels: dict[str, str] | None = None,
    node: str = "",
    namespace: str = "default",
    group: str | None = None,
    **spec: Any,
) -> PodInfo:
    body = pod_dict(name, namespace=namespace, node_name=node, group=group, cpu="100m", memory=None, **spec)
    body["metadata"]["labels"].update(labels or {})
    return parse_pod(body)


def spread(
    max_skew: int = 1,
    key: str = ZONE,
    hard: bool = True,
    selector: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "maxSkew": max_skew,
        "topologyKey": key,
        "whenUnsatisfiable": "DoNotSchedule" if hard else "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"foo": ""}} if selector is None else selector,
        **extra,
    }


FOUR_NODES = {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"}


def cluster(zones: dict[str, str | None], existing: list[PodInfo] = (), **node_kwargs: Any) -> ClusterCache:  # type: ignore[assignment]
    cache = ClusterCache("lockstep")
    for name, zone in zones.items():
        labels = {HOST: name, **({ZONE: zone} if zone else {})}
        cache.upsert_node(make_node(name, labels=labels, **node_kwargs.get(name, {})))
    for placed in existing:
        cache.upsert_pod(placed)
    return cache


def placed(
    counts: dict[str, int], labels: dict[str, str] | None = None, namespace: str = "default"
) -> list[PodInfo]:
    return [
        pod(f"{node}-{i}-{namespace}", labels if labels is not None else {"foo": ""}, node, namespace)
        for node, count in counts.items()
        for i in range(count)
    ]


def verdicts(
    cache: ClusterCache, incoming: PodInfo, plugin: PodTopologySpread | None = None
) -> dict[str, Code]:
    plugin = plugin or PodTopologySpread(cache)
    state = CycleState()
    if plugin.pre_filter(state, incoming).code is Code.SKIP:
        return {name: OK for name in cache.nodes}
    return {name: plugin.filter(state, incoming, node).code for name, node in cache.nodes.items()}


FOO = {"foo": ""}
# (name, existing pods per node, incoming constraints, nodes that fit)
SPREAD_CASES = [
    ("no existing pods", {}, [spread()], {"node-a", "node-b", "node-x", "node-y"}),
    (
        "no existing pods, incoming pod doesn't match itself",
        {},
        [spread(selector={"matchLabels": {"bar": ""}})],
        {"node-a", "node-b", "node-x", "node-y"},
    ),
    (
        "pods spread across zones as 3/3, all nodes fit",
        {"node-a": 1, "node-b": 2, "node-x": 2, "node-y": 1},
        [spread()],
        {"node-a", "node-b", "node-x", "node-y"},
    ),
    (
        "pods spread across zones as 3/1, only zone2 fits",
        {"node-a": 1, "node-b": 2, "node-x": 1},
        [spread()],
        {"node-x", "node-y"},
    ),
    (
        "pods spread across zones as 3/2, maxSkew 2: all fit",
        {"node-a": 2, "node-b": 1, "node-x": 2},
        [spread(2)],
        {"node-a", "node-b", "node-x", "node-y"},
    ),
    (
        "pods spread across nodes as 2/1/0/3, only node-x fits",
        {"node-a": 2, "node-b": 1, "node-y": 3},
        [spread(key=HOST)],
        {"node-x"},
    ),
    (
        "pods spread across nodes as 2/1/0/3, maxSkew 2: node-b and node-x fit",
        {"node-a": 2, "node-b": 1, "node-y": 3},
        [spread(2, key=HOST)],
        {"node-b", "node-x"},
    ),
    (
        "two constraints: zone 3/3 and node 2/1/0/3: only node-x",
        {"node-a": 2, "node-b": 1, "node-y": 3},
        [spread(), spread(key=HOST)],
        {"node-x"},
    ),
    (
        "minDomains 3 over 2 zones: the global minimum is 0",
        {"node-a": 1, "node-x": 1},
        [spread(minDomains=3)],
        set(),
    ),
    (
        "minDomains 2 over 2 zones: as without it",
        {"node-a": 1, "node-x": 1},
        [spread(minDomains=2)],
        set(FOUR_NODES),
    ),
]


@pytest.mark.parametrize(
    ("existing", "constraints", "fits"), [c[1:] for c in SPREAD_CASES], ids=[c[0] for c in SPREAD_CASES]
)
def test_single_and_multiple_constraints(
    existing: dict[str, int], constraints: list[dict[str, Any]], fits: set[str]
) -> None:
    cache = cluster(FOUR_NODES, placed(existing))
    result = verdicts(cache, pod("p", FOO, topologySpreadConstraints=constraints))
    assert {name for name, code in result.items() if code is OK} == fits


def test_pods_of_other_namespaces_and_terminating_pods_do_not_count() -> None:
    existing = placed({"node-a": 3}, namespace="other")
    dying = pod("dying", FOO, "node-x")
    dying.deleting = True
    cache = cluster(FOUR_NODES, [*existing, dying])
    assert set(verdicts(cache, pod("p", FOO, topologySpreadConstraints=[spread()])).values()) == {OK}


def test_a_node_without_the_topology_key_is_unresolvable() -> None:
    cache = cluster({**FOUR_NODES, "node-b": None}, placed({"node-a": 1}))
    result = verdicts(cache, pod("p", FOO, topologySpreadConstraints=[spread()]))
    assert result["node-b"] is NEVER
    assert result["node-x"] is OK


def test_node_affinity_policy_honor_and_ignore() -> None:
    """Honor (default): domains and counts only on nodes the pod's nodeSelector allows."""
    zones = {"node-a": "zone1", "node-x": "zone2", "node-z": "zone3"}
    cache = ClusterCache("lockstep")
    for name, zone in zones.items():
        cache.upsert_node(
            make_node(name, labels={HOST: name, ZONE: zone, "pool": "b" if zone == "zone3" else "a"})
        )
    for existing in placed({"node-a": 1, "node-x": 1}):
        cache.upsert_pod(existing)
    honored = pod("p", FOO, nodeSelector={"pool": "a"}, topologySpreadConstraints=[spread()])
    assert verdicts(cache, honored)["node-a"] is OK  # zone3 is not counted: min is 1
    ignored = pod(
        "p", FOO, nodeSelector={"pool": "a"}, topologySpreadConstraints=[spread(nodeAffinityPolicy="Ignore")]
    )
    assert verdicts(cache, ignored)["node-a"] is NO  # zone3 counts with 0 pods


def test_node_taints_policy_honor_and_ignore() -> None:
    taint = {"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}
    cache = cluster(
        {"node-a": "zone1", "node-x": "zone2", "node-t": "zone3"},
        placed({"node-a": 1, "node-x": 1}),
        **{"node-t": taint},
    )
    ignored = pod("p", FOO, topologySpreadConstraints=[spread()])
    assert verdicts(cache, ignored)["node-a"] is NO  # default Ignore: the tainted zone counts
    honored = pod("p", FOO, topologySpreadConstraints=[spread(nodeTaintsPolicy="Honor")])
    assert verdicts(cache, honored)["node-a"] is OK


def test_match_label_keys_count_only_the_same_revision() -> None:
    existing = placed({"node-a": 2}, {"foo": "", "rev": "1"}) + placed({"node-x": 1}, {"foo": "", "rev": "2"})
    cache = cluster(FOUR_NODES, existing)
    incoming = pod("p", {"foo": "", "rev": "2"}, topologySpreadConstraints=[spread(matchLabelKeys=["rev"])])
    assert {n for n, c in verdicts(cache, incoming).items() if c is OK} == {"node-a", "node-b"}


def scores(
    cache: ClusterCache, incoming: PodInfo, plugin: PodTopologySpread | None = None
) -> dict[str, int] | None:
    plugin = plugin or PodTopologySpread(cache)
    state = CycleState()
    nodes = list(cache.nodes.values())
    if plugin.pre_score(state, incoming, nodes).code is Code.SKIP:
        return None
    raw = [plugin.score(state, incoming, node) for node in nodes]
    plugin.normalize_scores(state, incoming, raw)
    return dict(zip(cache.nodes, raw, strict=True))


def test_schedule_anyway_scores_the_emptier_domains_higher() -> None:
    cache = cluster(FOUR_NODES, placed({"node-a": 2, "node-b": 1, "node-x": 1}))
    result = scores(cache, pod("p", FOO, topologySpreadConstraints=[spread(hard=False)]))
    assert result is not None
    assert result["node-x"] == result["node-y"] == 100
    assert result["node-a"] == result["node-b"] < 100
    by_node = scores(cache, pod("p", FOO, topologySpreadConstraints=[spread(hard=False, key=HOST)]))
    assert by_node is not None and by_node["node-y"] == 100 and by_node["node-a"] < by_node["node-b"] < 100


def test_default_constraints_apply_to_controller_owned_pods_only() -> None:
    settings = Settings(leader_elect=False)
    cache = cluster(FOUR_NODES)
    plugin = PodTopologySpread.from_context(PluginContext(settings, cache, WaitingPods()))
    owner = {
        "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-1", "controller": True}
        ]
    }

    def owned(name: str, node: str = "") -> PodInfo:
        body = pod_dict(name, node_name=node, cpu="100m", memory=None)
        body["metadata"].update(owner)
        return parse_pod(body)

    for existing in (owned("a1", "node-a"), owned("a2", "node-a"), owned("b1", "node-b")):
        cache.upsert_pod(existing)
    assert scores(cache, pod("lonely"), plugin) is None
    result = scores(cache, owned("new"), plugin)
    assert result is not None
    assert result["node-x"] == result["node-y"] == 100 and result["node-a"] < result["node-b"] < 100
    none = PodTopologySpread.from_context(
        PluginContext(Settings(leader_elect=False, default_spread_constraints="none"), cache, WaitingPods())
    )
    assert scores(cache, owned("new"), none) is None


async def test_a_gang_spreads_over_three_zones_with_max_skew_one() -> None:
    scheduler, api, cache = make_scheduler()
    for z in range(3):
        for n in range(2):
            name = f"z{z}-n{n}"
            cache.upsert_node(make_node(name, labels={HOST: name, ZONE: f"zone{z}"}))
    cache.upsert_podgroup(gang("g", 6))
    constraint = spread(selector={"matchLabels": {"app": "trainer"}})
    for i in range(6):
        api.add(pod(f"t{i}", {"app": "trainer"}, group="g", topologySpreadConstraints=[constraint]))
    await settle(scheduler)
    zones = [cache.nodes[p.node_name].labels[ZONE] for p in api.pods.values()]
    assert sorted(zones) == ["zone0", "zone0", "zone1", "zone1", "zone2", "zone2"]


# NodePorts, after node_ports_test.go: (name, ports in use on the node, wanted ports, fits)
def ports(*specs: str) -> list[dict[str, Any]]:
    """'UDP/127.0.0.1/8080' -> a container port."""
    result = []
    for spec in specs:
        protocol, ip, port = spec.split("/")
        entry: dict[str, Any] = {"containerPort": int(port), "hostPort": int(port), "protocol": protocol}
        if ip:
            entry["hostIP"] = ip
        result.append(entry)
    return result


PORT_CASES = [
    ("nothing running", [], ["UDP/127.0.0.1/8080"], True),
    ("other port", ["UDP/127.0.0.1/9090"], ["UDP/127.0.0.1/8080"], True),
    ("same udp port", ["UDP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], False),
    ("same tcp port", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.1/8080"], False),
    ("different host ip", ["TCP/127.0.0.1/8080"], ["TCP/127.0.0.2/8080"], True),
    ("different protocol", ["TCP/127.0.0.1/8080"], ["UDP/127.0.0.1/8080"], True),
    ("second udp port conflict", ["UDP/127.0.0.1/8080"], ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"], False),
    (
        "first tcp port conflict",
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
        ["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
        False,
    ),
    ("first tcp port conflict due to 0.0.0.0 hostIP", ["TCP/0.0.0.0/8001"], ["TCP/127.0.0.1/8001"], False),
    ("TCP hostPort conflict due to 0.0.0.0 hostIP", ["TCP/127.0.0.1/8001"], ["TCP/0.0.0.0/8001"], False),
    (
        "second tcp port conflict to 0.0.0.0 hostIP",
        ["TCP//8001"],
        ["UDP/127.0.0.1/8001", "TCP/127.0.0.1/8001"],
        False,
    ),
    ("second different protocol", ["UDP/0.0.0.0/8001"], ["TCP/0.0.0.0/8001"], True),
    (
        "UDP hostPort conflict due to 0.0.0.0 hostIP",
        ["UDP/0.0.0.0/8001", "TCP/0.0.0.0/8001"],
        ["TCP/0.0.0.0/8001", "UDP/127.0.0.1/8001"],
        False,
    ),
]


def with_ports(name: str, wanted: list[str], node: str = "", group: str | None = None) -> PodInfo:
    body = pod_dict(name, node_name=node, group=group, cpu="100m", memory=None)
    body["spec"]["containers"][0]["ports"] = ports(*wanted)
    return parse_pod(body)


@pytest.mark.parametrize(
    ("used", "wanted", "fits"), [c[1:] for c in PORT_CASES], ids=[c[0] for c in PORT_CASES]
)
def test_node_ports(used: list[str], wanted: list[str], fits: bool) -> None:
    cache = cluster({"n": None}, [with_ports("existing", used, "n")] if used else [])
    plugin = NodePorts(cache)
    incoming = with_ports("p", wanted)
    state = CycleState()
    assert plugin.pre_filter(state, incoming).code is OK
    assert (plugin.filter(state, incoming, cache.nodes["n"]).code is OK) is fits


def test_host_network_ports_are_host_ports_and_ports_without_host_port_are_not() -> None:
    body = pod_dict("p", hostNetwork=True)
    body["spec"]["containers"][0]["ports"] = [{"containerPort": 53, "protocol": "UDP"}]
    parsed = parse_pod(body)
    assert parsed.placement is not None and parsed.placement.host_ports == (HostPort("0.0.0.0", "UDP", 53),)
    plain = pod_dict("q")
    plain["spec"]["containers"][0]["ports"] = [{"containerPort": 80}]
    assert parse_pod(plain).placement is None


async def test_host_ports_conflict_within_a_gang_and_with_bound_pods() -> None:
    scheduler, api, cache = make_scheduler()
    for i in range(3):
        cache.upsert_node(make_node(f"n{i}"))
    api.add(with_ports("bound", ["TCP//8080"], node="n0"))
    cache.upsert_podgroup(gang("g", 2))
    for i in range(2):
        api.add(with_ports(f"w{i}", ["TCP//8080"], group="g"))
    await settle(scheduler)
    assert sorted(p.node_name for p in api.pods.values() if p.name != "bound") == ["n1", "n2"]
    cache.upsert_podgroup(gang("h", 1))
    api.add(with_ports("late", ["TCP/10.0.0.1/8080"], group="h"))
    await settle(scheduler)
    assert api.pods["default/late"].node_name == ""
    attempt = scheduler.attempts[GroupKey("default", "h")]
    assert attempt.causes == {"HostPortConflict": 3}
    assert "didn't have free ports" in attempt.message


def image_node(name: str, images: dict[str, int]) -> NodeInfo:
    return parse_node(
        {
            "metadata": {"name": name},
            "status": {
                "allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "images": [{"names": [image], "sizeBytes": size} for image, size in images.items()],
            },
        }
    )


MB = 1024 * 1024


@pytest.mark.parametrize(
    ("images", "expected"),
    [
        # after image_locality_test.go: two nodes, sizes scaled by the share of nodes holding the image
        (["gcr.io/40", "gcr.io/250"], {"node1": 0, "node2": 5}),
        (["gcr.io/40", "gcr.io/300"], {"node1": 7, "node2": 0}),
        (["gcr.io/2000:latest", "gcr.io/10"], {"node1": 0, "node2": 0}),
    ],
)
def test_image_locality(images: list[str], expected: dict[str, int]) -> None:
    cache = ClusterCache("lockstep")
    cache.upsert_node(image_node("node1", {"gcr.io/40:latest": 40 * MB, "gcr.io/300:latest": 300 * MB}))
    cache.upsert_node(image_node("node2", {"gcr.io/250:latest": 250 * MB, "gcr.io/10:latest": 10 * MB}))
    body = pod_dict("p")
    body["spec"]["containers"] = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    incoming = parse_pod(body)
    plugin = ImageLocality(cache)
    nodes = list(cache.nodes.values())
    assert plugin.pre_score(CycleState(), incoming, nodes).code is OK
    assert {n.name: plugin.score(CycleState(), incoming, n) for n in nodes} == expected


def test_image_locality_costs_nothing_when_no_node_reports_images() -> None:
    cache = cluster({"n": None})
    assert (
        ImageLocality(cache).pre_score(CycleState(), pod("p"), list(cache.nodes.values())).code is Code.SKIP
    )


FOO_EXISTS = {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
BAR_EXISTS = {"matchExpressions": [{"key": "bar", "operator": "Exists"}]}
# scoring_test.go: (name, constraints as (maxSkew, key, selector), incoming labels, nodes as
# name -> zone (None: no zone; "-": no hostname label either), candidate nodes (the others failed
# Filter), existing pods as (node, labels), expected normalized scores)
SCORE_CASES = [
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=2",
        [(2, HOST, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": None, "node-b": None, "node-c": None, "node-d": None},
        None,
        [("node-a", FOO)] * 2 + [("node-b", FOO)] + [("node-d", FOO)] * 3,
        {"node-a": 33, "node-b": 66, "node-c": 100, "node-d": 16},
    ),
    (
        "one constraint on node, all 4 nodes are candidates, maxSkew=3",
        [(3, HOST, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": None, "node-b": None, "node-c": None, "node-d": None},
        None,
        [("node-a", FOO)] * 4 + [("node-b", FOO)] * 3 + [("node-c", FOO)] * 2 + [("node-d", FOO)],
        {"node-a": 44, "node-b": 66, "node-c": 77, "node-d": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates",
        [(1, HOST, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": None, "node-b": None, "node-x": None, "node-y": None},
        ["node-a", "node-b", "node-x"],
        [("node-a", FOO)] * 4 + [("node-b", FOO)] * 2 + [("node-x", FOO)] + [("node-y", FOO)] * 3,
        {"node-a": 33, "node-b": 83, "node-x": 100},
    ),
    (
        "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
        [(1, HOST, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": None, "node-b": "-", "node-x": None, "node-y": None},
        ["node-a", "node-b", "node-x"],
        [("node-a", FOO)] * 4 + [("node-b", FOO)] * 2 + [("node-x", FOO)] + [("node-y", FOO)] * 3,
        {"node-a": 16, "node-b": 0, "node-x": 100},
    ),
    (
        "one constraint on zone, 3 out of 4 nodes are candidates",
        [(1, ZONE, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"},
        ["node-a", "node-b", "node-x"],
        [("node-a", FOO)] * 4 + [("node-b", FOO)] * 2 + [("node-x", FOO)] + [("node-y", FOO)] * 3,
        {"node-a": 75, "node-b": 75, "node-x": 100},
    ),
    (
        "two Constraints on zone and node, 2 out of 4 nodes are candidates",
        [(1, ZONE, FOO_EXISTS), (1, HOST, FOO_EXISTS)],
        {"foo": ""},
        {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"},
        ["node-a", "node-x"],
        [("node-a", FOO)] * 2 + [("node-b", FOO)] + [("node-x", FOO)] * 2 + [("node-y", FOO)] * 4,
        {"node-a": 100, "node-x": 63},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors",
        [(1, ZONE, FOO_EXISTS), (1, HOST, BAR_EXISTS)],
        {"foo": "", "bar": ""},
        {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"},
        None,
        [("node-a", FOO), ("node-b", {"foo": "", "bar": ""}), ("node-y", FOO), ("node-y", {"bar": ""})],
        {"node-a": 60, "node-b": 20, "node-x": 100, "node-y": 60},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
        [(1, ZONE, FOO_EXISTS), (1, HOST, BAR_EXISTS)],
        {"foo": "", "bar": ""},
        {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"},
        None,
        [("node-b", {"bar": ""}), ("node-x", FOO), ("node-y", {"foo": "", "bar": ""})],
        {"node-a": 100, "node-b": 60, "node-x": 40, "node-y": 0},
    ),
    (
        "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
        [(1, ZONE, FOO_EXISTS), (1, HOST, BAR_EXISTS)],
        {"foo": "", "bar": ""},
        {"node-a": "zone1", "node-b": "zone1", "node-x": "zone2", "node-y": "zone2"},
        ["node-a", "node-b", "node-x"],
        [("node-a", FOO), ("node-b", {"foo": "", "bar": ""}), ("node-y", FOO), ("node-y", {"bar": ""})],
        {"node-a": 50, "node-b": 25, "node-x": 100},
    ),
]


@pytest.mark.parametrize(
    ("constraints", "labels", "nodes", "candidates", "existing", "expected"),
    [c[1:] for c in SCORE_CASES],
    ids=[c[0] for c in SCORE_CASES],
)
def test_scoring_tables(
    constraints: list[tuple[int, str, dict[str, Any]]],
    labels: dict[str, str],
    nodes: dict[str, str | None],
    candidates: list[str] | None,
    existing: list[tuple[str, dict[str, str]]],
    expected: dict[str, int],
) -> None:
    cache = ClusterCache("lockstep")
    for name, zone in nodes.items():
        node_labels = {"n": name} if zone == "-" else {HOST: name, **({ZONE: zone} if zone else {})}
        cache.upsert_node(make_node(name, labels=node_labels))
    for i, (node, pod_labels) in enumerate(existing):
        cache.upsert_pod(pod(f"e{i}", pod_labels, node))
    incoming = pod(
        "p",
        labels,
        topologySpreadConstraints=[spread(s, key, hard=False, selector=sel) for s, key, sel in constraints],
    )
    plugin = PodTopologySpread(cache)
    feasible = [cache.nodes[n] for n in (candidates or nodes)]
    state = CycleState()
    assert plugin.pre_score(state, incoming, feasible).code is OK
    raw = [plugin.score(state, incoming, node) for node in feasible]
    plugin.normalize_scores(state, incoming, raw)
    assert dict(zip((n.name for n in feasible), raw, strict=True)) == expected
