"""Scheduler core benchmark, in-process, no API: ``python bench/core.py [--nodes 5000] [--gangs 1000]``.

``--anti-affinity``: each gang's members carry a required pod anti-affinity on
``kubernetes.io/hostname`` against their own gang (one member per node), so InterPodAffinity runs
for every pod and every later pod's symmetric check sees every gang placed before.

Builds a cluster cache with N nodes (10 zones), then feeds gangs of 8 pods (a PodGroup and its
members, as watch events would) to the real ``Scheduler`` with an in-memory pod port whose bindings
succeed at once and echo back to the cache as watch events. Reports the group-cycle time (median
and p99 of ``Scheduler.schedule_one()`` for one gang: queue pop, PreEnqueue, filter, score,
reserve, PlacementFeasible, spawning the binding tasks), in wall-clock and CPU time, and pods
placed per second end to end (all cycles plus all binding tasks and echoes, until every pod is
bound), per wall-clock second and per CPU second of this process.

``--upstream NAME [--scale S]``: instead of gangs of 8, the pods (and PodGroups) of one of upstream's
scheduler_perf shapes in ``bench/harness/workloads.py`` (not the DRA one: this cache has no
devices), parsed from the same manifests ``bench/upstream.py`` creates; ``--nodes`` overrides the
shape's node count except for the DaemonSet's pinned pods. Also reports this process's resident
memory after the nodes and after the pods.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.workloads import (
    UPSTREAM_BUILDERS,
    DeviceDriver,
    NodeShape,
    Workload,
    build,
    pod_manifest,
    podgroup_manifest,
)
from lockstep import POD_GROUP_LABEL
from lockstep.api.placement import PlacementSpec, parse_placement
from lockstep.api.pod import parse_pod
from lockstep.api.podgroup import PodGroup
from lockstep.config import ScoreStrategy, Settings
from lockstep.scheduler.framework import NodeInfo, PodCondition, PodGroupInfo, PodInfo
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult
from lockstep.scheduler.scheduler import Scheduler, SchedulerOptions
from lockstep.sim.cluster import node_name
from lockstep.state.cluster import ClusterCache

TARGET_MEDIAN_MS = 5.0
TARGET_PODS_PER_SECOND = 2000.0


class InstantPodAPI:
    """Bindings succeed at once; each is echoed to the cache like the pod's watch event."""

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache
        self.bound = 0

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        self.bound += 1
        echoed = dataclasses.replace(
            pod, node_name=node_name, scheduled_condition=PodCondition("True", "", "")
        )
        asyncio.get_running_loop().call_soon(self.cache.upsert_pod, echoed)
        return BindOutcome(BindResult.BOUND)

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.cache.get_pod_by_name(namespace, name)

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        return PatchOutcome(PatchResult.OK)


NODE_SHAPE = NodeShape(cpu_millis=32_000, memory_mib=128 * 1024, pods=110)
NO_DEVICES = DeviceDriver(device_class="", selector="")
UPSTREAM_IN_PROCESS = [name for name in UPSTREAM_BUILDERS if not name.startswith("upstream-claim-template")]


def build_nodes(cache: ClusterCache, count: int, zones: int) -> None:
    for i in range(count):
        name = node_name(i, count)  # the emulator's names, which the DaemonSet's pods are pinned to
        cache.upsert_node(
            NodeInfo(
                name=name,
                labels={"topology.kubernetes.io/zone": f"zone-{i % zones}", "kubernetes.io/hostname": name},
                allocatable={
                    "cpu": NODE_SHAPE.cpu_millis,
                    "memory": NODE_SHAPE.memory_mib * 2**20,
                    "pods": NODE_SHAPE.pods,
                },
            )
        )


def add_upstream(cache: ClusterCache, workload: Workload) -> None:
    """The workload's PodGroups and pods as the watches would deliver them, parsed like the operator's."""
    for gang in workload.gangs:
        if gang.pod_group:
            podgroup = podgroup_manifest(gang, "bench")
            podgroup["metadata"] |= {"uid": f"uid-{gang.name}", "resourceVersion": "1"}
            cache.upsert_podgroup(PodGroup.model_validate(podgroup))
        for index in range(gang.pods):
            pod = pod_manifest(gang, index, NODE_SHAPE, "bench")
            pod["metadata"] |= {"uid": f"uid-{pod['metadata']['name']}", "resourceVersion": "1"}
            cache.upsert_pod(parse_pod(pod))


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e6
    return 0.0


def one_per_node(name: str) -> dict[str, object]:
    """A pod spec's required anti-affinity against the members of gang ``name`` on the same node."""
    term = {
        "labelSelector": {"matchLabels": {POD_GROUP_LABEL: name}},
        "topologyKey": "kubernetes.io/hostname",
    }
    return {"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}}


def add_gang(
    cache: ClusterCache, index: int, size: int, cpu_milli: int, memory: int, anti_affinity: bool = False
) -> None:
    name = f"gang-{index:05d}"
    cache.upsert_podgroup(PodGroupInfo("bench", name, uid=f"uid-{name}", min_count=size, is_gang=True))
    labels = {POD_GROUP_LABEL: name}
    placement = parse_placement(one_per_node(name), {}, "bench", labels) if anti_affinity else None
    add_members(cache, name, size, {"cpu": cpu_milli, "memory": memory}, placement)


def add_members(
    cache: ClusterCache,
    group: str,
    count: int,
    requests: dict[str, int],
    placement: PlacementSpec | None = None,
) -> None:
    """``count`` pending lockstep pods ``<group>-<i>`` of PodGroup ``bench/<group>``."""
    for member in range(count):
        pod_name = f"{group}-{member}"
        cache.upsert_pod(
            PodInfo(
                uid=f"uid-{pod_name}",
                namespace="bench",
                name=pod_name,
                resource_version="1",
                labels={POD_GROUP_LABEL: group},
                scheduler_name="lockstep",
                group_name=group,
                requests=requests,
                placement=placement,
            )
        )


async def run(args: argparse.Namespace) -> dict[str, float]:
    settings = Settings(leader_elect=False, score_strategy=ScoreStrategy(args.strategy))
    cache = ClusterCache(settings.scheduler_name)
    api = InstantPodAPI(cache)
    scheduler = Scheduler(
        settings, api, cache=cache, options=SchedulerOptions(feasible_nodes_to_find=args.feasible)
    )
    rss_start = rss_mb()
    workload = build(args.upstream, args.scale, NODE_SHAPE, NO_DEVICES) if args.upstream else None
    nodes = args.nodes if workload is None or args.nodes_given else workload.nodes
    build_nodes(cache, nodes, args.zones)
    gc.collect()
    rss_nodes = rss_mb()
    if workload is None:
        for index in range(args.gangs):
            add_gang(
                cache, index, args.gang_size, args.cpu_milli, args.memory_mib * 2**20, args.anti_affinity
            )
        pods_expected = args.gangs * args.gang_size
    else:
        add_upstream(cache, workload)
        pods_expected = workload.pods_expected
    gc.collect()
    cycle_ms: list[float] = []
    cycle_cpu_ms: list[float] = []
    started = time.perf_counter()
    cpu_started = time.process_time()
    while True:
        t0, c0 = time.perf_counter(), time.process_time()
        key = scheduler.schedule_one()
        if key is None:
            break
        cycle_ms.append((time.perf_counter() - t0) * 1000)
        cycle_cpu_ms.append((time.process_time() - c0) * 1000)
        if len(cycle_ms) % 50 == 0:
            await asyncio.sleep(0)  # let binding tasks and echoes run, as the real loop does
    await scheduler.wait_for_tasks()
    await asyncio.sleep(0)
    elapsed = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu_started
    placed_pods = sum(1 for p in cache.pods.values() if p.node_name)
    zones_per_gang: dict[str, set[str]] = {}
    for pod in cache.pods.values():
        node = cache.nodes.get(pod.node_name)
        if node is not None:
            zones_per_gang.setdefault(pod.group_name, set()).add(node.labels["topology.kubernetes.io/zone"])
    in_one_zone = sum(1 for zones in zones_per_gang.values() if len(zones) == 1)
    nodes_per_gang: dict[str, set[str]] = {}
    for pod in cache.pods.values():
        nodes_per_gang.setdefault(pod.group_name, set()).add(pod.node_name)
    one_per_node = sum(1 for gang, nodes in nodes_per_gang.items() if len(nodes) == args.gang_size)
    cycle_cpu_total_ms = sum(cycle_cpu_ms)
    cycle_ms.sort()
    cycle_cpu_ms.sort()
    rss_end = rss_mb()
    result = {
        "workload": args.upstream or "gangs",
        "nodes": nodes,
        "gangs": len(workload.gangs) if workload else args.gangs,
        "gang_size": workload.gangs[0].pods if workload else args.gang_size,
        "pods_expected": pods_expected,
        "pods_bound": placed_pods,
        "median_cycle_ms": round(statistics.median(cycle_ms), 3),
        "p99_cycle_ms": round(cycle_ms[int(len(cycle_ms) * 0.99) - 1], 3),
        "median_cycle_cpu_ms": round(statistics.median(cycle_cpu_ms), 3),
        "p99_cycle_cpu_ms": round(cycle_cpu_ms[int(len(cycle_cpu_ms) * 0.99) - 1], 3),
        "pods_per_second": round(placed_pods / elapsed, 1),
        "pods_per_cpu_second": round(placed_pods / cpu_seconds, 1),
        "elapsed_s": round(elapsed, 3),
        "gangs_in_one_zone": in_one_zone,
        "gangs_one_member_per_node": one_per_node,
        "cycle_cpu_us_per_pod": round(cycle_cpu_total_ms * 1000 / max(1, placed_pods), 1),
        "cpu_us_per_pod": round(cpu_seconds * 1e6 / max(1, placed_pods), 1),
        "rss_nodes_mb": round(rss_nodes - rss_start, 1),
        "rss_pods_mb": round(rss_end - rss_nodes, 1),
        "kb_per_node": round((rss_nodes - rss_start) * 1000 / nodes, 2),
        "kb_per_pod": round((rss_end - rss_nodes) * 1000 / max(1, pods_expected), 2),
    }
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/core.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=None, help="default 5000, or the --upstream shape's")
    parser.add_argument("--zones", type=int, default=10)
    parser.add_argument("--gangs", type=int, default=1000)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--cpu-milli", type=int, default=2000, help="cpu request per pod (default 2000m)")
    parser.add_argument(
        "--memory-mib", type=int, default=4096, help="memory request per pod (default 4096Mi)"
    )
    parser.add_argument("--strategy", choices=[s.value for s in ScoreStrategy], default="least-allocated")
    parser.add_argument("--feasible", type=int, default=SchedulerOptions().feasible_nodes_to_find)
    parser.add_argument(
        "--anti-affinity",
        action="store_true",
        help="members of a gang avoid each other's nodes (one per node)",
    )
    parser.add_argument(
        "--upstream",
        choices=UPSTREAM_IN_PROCESS,
        default=None,
        help="one of upstream's shapes, not gangs of 8",
    )
    parser.add_argument("--scale", type=float, default=1.0, help="of the --upstream shape (default 1.0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON only")
    args = parser.parse_args(argv)
    args.nodes_given = args.nodes is not None
    if args.nodes is None:
        args.nodes = 5000
    if args.upstream == "upstream-daemonset" and args.nodes_given:
        parser.error("--nodes: the DaemonSet's pods are pinned one to each node; use --scale")
    if args.scale <= 0:
        parser.error(f"--scale must be positive, got {args.scale}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>18}: {value}")
    ok = result["median_cycle_ms"] <= TARGET_MEDIAN_MS and result["pods_per_second"] >= TARGET_PODS_PER_SECOND
    expected = result["pods_expected"]
    if result["pods_bound"] != expected:
        print(f"only {result['pods_bound']} of {expected} pods were bound", file=sys.stderr)
        return 1
    if args.anti_affinity and result["gangs_one_member_per_node"] != args.gangs:
        print("a gang with one-per-node anti-affinity shares a node", file=sys.stderr)
        return 1
    if not args.json:
        print(
            f"targets (median <= {TARGET_MEDIAN_MS} ms, >= {TARGET_PODS_PER_SECOND:g} pods/s): "
            + ("met" if ok else "NOT met")
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
