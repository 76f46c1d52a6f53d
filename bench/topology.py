"""Topology benchmark, in-process, no API: ``python bench/topology.py [--zones 4] [--json]``.

A cluster in three levels (by default 4 zones x 10 blocks x 125 nodes, racks of 16: 5,000 nodes) and
a stream of gangs of mixed sizes (8, 4, 16, 8, 64, 12, 8, 512 repeated until 90% of the nodes are
asked for), each member asking for a whole node, each gang with a required zone and preferred
block and rack. The real ``Scheduler`` places them one after another (as bench/core.py does), three
times: with best-fit domain choice (lockstep's), with roomiest-first (lockstep's order before best
fit) and with best fit but no joint search (greedy only). It then runs the same gangs without any
topology, for the cost per pod.

Reported per run: gangs placed; of the gangs a rack could hold (<= rack size), the fraction placed in
one rack; fragmentation: free nodes left in partly used racks; the group-cycle time (CPU) per gang,
p50 and p99, for gangs of 8, 64 and 512; CPU per pod over all cycles.
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
from typing import Any

from core import InstantPodAPI, add_members
from lockstep.config import Settings
from lockstep.scheduler.framework import NodeInfo, PodGroupInfo
from lockstep.scheduler.scheduler import Scheduler
from lockstep.scheduler.topology import DomainOrder, best_fit, roomiest_first
from lockstep.state.cluster import ClusterCache

ZONE, BLOCK, RACK = "topology.kubernetes.io/zone", "example.com/block", "example.com/rack"
SIZES = (8, 4, 16, 8, 64, 12, 8, 512)
CPU = 32_000


def build(cache: ClusterCache, zones: int, blocks: int, per_block: int, rack_size: int) -> None:
    for z in range(zones):
        for b in range(blocks):
            for n in range(per_block):
                name = f"z{z}-b{b}-n{n:03d}"
                labels = {ZONE: f"z{z}", BLOCK: f"z{z}-b{b}", RACK: f"r{n // rack_size}"}
                cache.upsert_node(NodeInfo(name, labels, {"cpu": CPU, "memory": 2**40, "pods": 110}))


def gangs(nodes: int) -> list[int]:
    sizes: list[int] = []
    while sum(sizes) < 0.9 * nodes:
        sizes.append(SIZES[len(sizes) % len(SIZES)])
    return sizes


def add_gang(cache: ClusterCache, index: int, size: int, topology: bool) -> None:
    name = f"g{index:05d}-{size}"
    group = PodGroupInfo("bench", name, uid=f"uid-{name}", min_count=size, is_gang=True)
    if topology:
        group = dataclasses.replace(group, topology_keys=(ZONE,), preferred_topology_keys=(BLOCK, RACK))
    cache.upsert_podgroup(group)
    add_members(cache, name, size, {"cpu": CPU, "memory": 2**30})


async def run(args: argparse.Namespace, order: DomainOrder, budget: int, topology: bool) -> dict[str, Any]:
    settings = Settings(leader_elect=False, joint_search_budget=budget)
    cache = ClusterCache(settings.scheduler_name)
    scheduler = Scheduler(settings, InstantPodAPI(cache), cache=cache)
    scheduler.cycle.domain_order = order
    build(cache, args.zones, args.blocks, args.per_block, args.rack_size)
    cycle_cpu: dict[int, list[float]] = {}
    total_cpu = 0.0
    sizes = gangs(len(cache.nodes))
    gc.collect()
    for index, size in enumerate(sizes):
        add_gang(cache, index, size, topology)
        c0 = time.process_time()
        while scheduler.schedule_one() is not None:
            pass
        spent = time.process_time() - c0
        total_cpu += spent
        cycle_cpu.setdefault(size, []).append(spent * 1000)
        await asyncio.sleep(0)
        await scheduler.wait_for_tasks()
        await asyncio.sleep(0)
    racks_of: dict[str, set[tuple[str, str]]] = {}
    used_in_rack: dict[tuple[str, str], int] = {}
    for pod in cache.pods.values():
        node = cache.nodes.get(pod.node_name)
        if node is None:
            continue
        rack = (node.labels[BLOCK], node.labels[RACK])
        racks_of.setdefault(pod.group_name, set()).add(rack)
        used_in_rack[rack] = used_in_rack.get(rack, 0) + 1
    rack_nodes: dict[tuple[str, str], int] = {}
    for node in cache.nodes.values():
        rack = (node.labels[BLOCK], node.labels[RACK])
        rack_nodes[rack] = rack_nodes.get(rack, 0) + 1
    small = [g for g in racks_of if int(g.rsplit("-", 1)[1]) <= args.rack_size]
    fragmented = sum(rack_nodes[r] - used for r, used in used_in_rack.items() if used < rack_nodes[r])
    placed_pods = sum(1 for p in cache.pods.values() if p.node_name)

    def percentile(values: list[float], q: float) -> float:
        values = sorted(values)
        return round(values[max(int(len(values) * q) - 1, 0)], 2) if values else 0.0

    return {
        "gangs": len(sizes),
        "gangs_placed": len(racks_of),
        "pods_placed": placed_pods,
        "one_rack_fraction": round(sum(1 for g in small if len(racks_of[g]) == 1) / max(len(small), 1), 3),
        "free_nodes_in_partly_used_racks": fragmented,
        **{
            f"cycle_cpu_ms_{size}": (
                round(statistics.median(cycle_cpu.get(size, [0.0])), 2),
                percentile(cycle_cpu.get(size, []), 0.99),
            )
            for size in (8, 64, 512)
        },
        "cpu_us_per_pod": round(total_cpu * 1e6 / max(placed_pods, 1), 1),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/topology.py", description=__doc__.splitlines()[0])
    parser.add_argument("--zones", type=int, default=4)
    parser.add_argument("--blocks", type=int, default=10, help="blocks per zone")
    parser.add_argument("--per-block", type=int, default=125, help="nodes per block")
    parser.add_argument("--rack-size", type=int, default=16)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs = {
        "best fit (lockstep)": (best_fit, 5000, True),
        "roomiest first": (roomiest_first, 5000, True),
        "best fit, greedy only": (best_fit, 0, True),
        "no topology": (best_fit, 5000, False),
    }
    results = {name: asyncio.run(run(args, *options)) for name, options in runs.items()}
    if args.json:
        print(json.dumps(results))
        return 0
    for name, result in results.items():
        print(name, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
