"""CompositePodGroup benchmark, in-process, no API: ``python bench/composite.py [--nodes 1000] [--json]``.

scheduler_perf's CPG shapes (``test/integration/scheduler_perf/cpg/performance-config.yaml``) at a
smaller scale: ``CPGGangScheduling`` (CPGs of gang minGroupCount 2 over 2 gangs of minCount 3, pods of
100m) and a topology variant in the way of ``CPGTopologyAwareScheduling`` (the composite in one block,
each child in one rack). The real ``Scheduler`` places every hierarchy (as bench/core.py does); the
same PodGroups are then placed again as flat gangs (no parent; without topology, and each in a rack),
in the same run, for the cost of the composite cycle per pod.

Reported per run: hierarchies (or gangs) placed, pods placed, the cycle time (CPU) per hierarchy p50
and p99, and CPU per pod over all cycles.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

from core import InstantPodAPI, add_members
from lockstep.config import Settings
from lockstep.scheduler.framework import CompositeInfo, NodeInfo, PodGroupInfo
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

BLOCK, RACK = "example.com/block", "example.com/rack"
CPU = 4_000
GROUPS_PER_CPG, MIN_COUNT, POD_CPU = 2, 3, 100


def build(cache: ClusterCache, nodes: int, block_size: int, rack_size: int) -> None:
    for n in range(nodes):
        labels = {BLOCK: f"b{n // block_size}", RACK: f"r{n // rack_size}"}
        cache.upsert_node(NodeInfo(f"n{n:05d}", labels, {"cpu": CPU, "memory": 2**40, "pods": 110}))


def add_hierarchy(cache: ClusterCache, index: int, shape: str) -> None:
    name = f"cpg{index:05d}"
    if not shape.startswith("flat"):
        topology = (BLOCK,) if shape == "topology" else ()
        cache.upsert_composite(
            CompositeInfo(
                "bench", name, uid=f"uid-{name}", is_gang=True, min_group_count=2, topology_keys=topology
            )
        )
    for g in range(GROUPS_PER_CPG):
        group = f"{name}-pg{g}"
        cache.upsert_podgroup(
            PodGroupInfo(
                "bench",
                group,
                uid=f"uid-{group}",
                min_count=MIN_COUNT,
                is_gang=True,
                parent="" if shape.startswith("flat") else name,
                topology_keys=(RACK,) if shape in ("topology", "flat-rack") else (),
            )
        )
        add_members(cache, group, MIN_COUNT, {"cpu": POD_CPU, "memory": 2**20})


async def run(args: argparse.Namespace, shape: str) -> dict[str, Any]:
    settings = Settings(leader_elect=False)
    cache = ClusterCache(settings.scheduler_name)
    scheduler = Scheduler(settings, InstantPodAPI(cache), cache=cache)
    build(cache, args.nodes, args.block_size, args.rack_size)
    cycle_ms: list[float] = []
    total = 0.0
    gc.collect()
    for index in range(args.cpgs):
        add_hierarchy(cache, index, shape)
        c0 = time.process_time()
        while scheduler.schedule_one() is not None:
            pass
        spent = time.process_time() - c0
        total += spent
        cycle_ms.append(spent * 1000)
        await asyncio.sleep(0)
        await scheduler.wait_for_tasks()
        await asyncio.sleep(0)
    placed = sum(1 for p in cache.pods.values() if p.node_name)
    cycle_ms.sort()
    return {
        "hierarchies": args.cpgs,
        "pods_placed": placed,
        "cycle_cpu_ms_p50": round(statistics.median(cycle_ms), 2),
        "cycle_cpu_ms_p99": round(cycle_ms[max(int(len(cycle_ms) * 0.99) - 1, 0)], 2),
        "cpu_us_per_pod": round(total * 1e6 / max(placed, 1), 1),
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/composite.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--cpgs", type=int, default=100, help="hierarchies (scheduler_perf: initCPGs)")
    parser.add_argument("--block-size", type=int, default=100)
    parser.add_argument("--rack-size", type=int, default=10)
    parser.add_argument("--json", action="store_true")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    shapes = {
        "CPGGangScheduling (composite)": "gang",
        "CPG with block/rack topology": "topology",
        "same PodGroups as flat gangs": "flat",
        "same PodGroups as flat gangs, each in a rack": "flat-rack",
    }
    results = {name: asyncio.run(run(args, shape)) for name, shape in shapes.items()}
    if args.json:
        print(json.dumps(results))
        return 0
    for name, result in results.items():
        print(name, json.dumps(result))
    for name, against in ((0, 2), (1, 3)):
        mine, theirs = results[list(shapes)[name]], results[list(shapes)[against]]
        ratio = mine["cpu_us_per_pod"] / max(theirs["cpu_us_per_pod"], 0.1)
        print(f"{list(shapes)[name]}: {ratio:.2f}x the CPU per pod of {list(shapes)[against]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
