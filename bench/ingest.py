"""Ingest: the operator's CPU per object to apply the initial node and pod lists, and watch events.

``python bench/ingest.py [--nodes 1000] [--pods 5000] [--gang-size 8] [--rounds 3] [--json]
[--tree NAME=DIR ...]``

``lockstep sim`` runs with the nodes, and the PodGroups and pods ``bench/startup.py`` creates are
created in it (nothing scheduled, no operator running). Then, per round and tree (the trees take
turns), a fresh interpreter running that tree's ``lockstep`` builds an operator's scheduler core and
sinks as ``lockstep run`` does (``Operator._build``, ``Operator._sinks``; nothing is scheduled), lists
the namespaces and PodGroups (not timed), and then times in process CPU (``time.process_time``):

- "nodes + pods": ``Operator._start_raw_watches`` for the nodes and the pods, as at start-up (the
  operator's own raw watches and client: HTTP, JSON decoding, delivery, and its collector policy);
- "pods again": the pods listed and delivered once more through a new raw watch (every pod known
  already: the cost of a watch event that changes nothing the scheduler reads).

with the cyclic collector's CPU and collections during each (gc callbacks). The emulator runs in
its own process and is not counted.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.trees import add_shape_and_tree_arguments, parse_trees

BENCH = Path(__file__).resolve().parent
PHASES = ("nodes + pods", "pods again")


class GcClock:
    """The CPU time the cyclic collector takes while installed, and how many collections of each
    generation."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.process_time()
        else:
            self.seconds += time.process_time() - self._started
            self.collections[info["generation"]] += 1


async def apply(kubeconfig: str) -> dict[str, Any]:
    """In the tree on ``PYTHONPATH``: the operator's sinks fed by its own raw watches; see the doc."""
    from lockstep.config import load_settings
    from lockstep.controller.runtime import Operator, _with_kind
    from lockstep.kube.client import NAMESPACES, NODES, POD_GROUPS, PODS, KubeClient, ResourceKind
    from lockstep.kube.credentials import load_connection_info
    from lockstep.kube.watch import RawWatch
    from lockstep.logging import configure_logging

    settings = load_settings(
        leader_elect=False, metrics_bind_address="", health_bind_address="127.0.0.1:0", log_level="warning"
    )
    configure_logging("json", "warning")
    connection = await load_connection_info(kubeconfig)
    operator = Operator(settings, connection)
    client = KubeClient(connection)
    try:
        operator.client = client
        operator._build(client, client)
        sinks = operator._sinks()
        assert operator.core is not None

        def watch(kind: ResourceKind) -> RawWatch:
            selector = f"spec.schedulerName={settings.scheduler_name}" if kind is PODS else None
            return RawWatch(client, kind, _with_kind(kind, sinks[kind]), field_selector=selector)

        for kind in (NAMESPACES, POD_GROUPS):
            await watch(kind).sync()
        clock = GcClock()
        gc.callbacks.append(clock)
        results: dict[str, Any] = {}

        async def initial_lists() -> int:
            await operator._start_raw_watches({kind: sinks[kind] for kind in (NODES, PODS)})
            return len(operator.core.cache._nodes) + len(operator.core.cache._pods)  # type: ignore[union-attr]

        async def pods_again() -> int:
            again = watch(PODS)
            await again.sync()
            return len(again._known)

        for phase, step in (("nodes + pods", initial_lists), ("pods again", pods_again)):
            gc_before, collections_before = clock.seconds, list(clock.collections)
            wall, cpu = time.perf_counter(), time.process_time()
            objects = await step()
            cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
            results[phase] = {
                "objects": objects,
                "cpu_s": round(cpu, 4),
                "wall_s": round(wall, 4),
                "gc_s": round(clock.seconds - gc_before, 4),
                "collections": [a - b for a, b in zip(clock.collections, collections_before, strict=True)],
                "us_per_object": round(1e6 * cpu / max(objects, 1), 1),
            }
        gc.callbacks.remove(clock)
        for task in operator._tasks:
            task.cancel()
        await asyncio.gather(*operator._tasks, return_exceptions=True)
        return results
    finally:
        await client.close()


async def populate(nodes: int, pods: int, gang_size: int, workdir: Path) -> Any:
    """The emulator with ``bench/startup.py``'s objects in it; returns its process."""
    from harness.api import ApiClient, load_kubeconfig
    from harness.loadgen import LoadGenerator, create_setup
    from harness.procs import start_sim
    from harness.runner import node_shape
    from harness.tracker import Tracker
    from harness.workloads import startup_workload

    workload = startup_workload(nodes, pods, gang_size)
    sim = await start_sim(nodes, 0, workdir)
    try:
        async with ApiClient(load_kubeconfig(workdir / "kubeconfig"), connections=16) as client:
            listing = await client.get("/api/v1/nodes", {"limit": "1"})
            await create_setup(client, workload)
            tracker = Tracker(workload.pods_expected)
            await LoadGenerator(client, tracker, node_shape(listing["items"][0])).run(workload.gangs)
    except BaseException:
        sim.stop()
        raise
    return sim


def run_tree(directory: str | None, kubeconfig: Path) -> dict[str, Any]:
    pythonpath = [str(BENCH)] if directory is None else [str(Path(directory).resolve()), str(BENCH)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(pythonpath)}
    out = subprocess.run(
        [sys.executable, __file__, "--apply", str(kubeconfig)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/ingest.py", description=__doc__.splitlines()[0])
    add_shape_and_tree_arguments(parser, "--rounds", 3)
    parser.add_argument("--apply", metavar="KUBECONFIG", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.trees = parse_trees(parser, args)
    return args


def print_table(results: dict[str, list[dict[str, Any]]]) -> None:
    print("| tree | phase | objects | CPU per object (median; each round) | GC of the CPU (median) |")
    print("|---|---|---|---|---|")
    for name, rounds in results.items():
        for phase in PHASES:
            per_object = [r[phase]["us_per_object"] for r in rounds]
            gc_share = statistics.median(r[phase]["gc_s"] / max(r[phase]["cpu_s"], 1e-9) for r in rounds)
            print(
                f"| {name} | {phase} | {rounds[0][phase]['objects']} | "
                f"{statistics.median(per_object):.1f} us ({', '.join(f'{v:.1f}' for v in per_object)}) | "
                f"{100 * gc_share:.0f}% |"
            )
    first, *others = results
    for name in others:
        for phase in PHASES:
            ratio = statistics.median(r[phase]["us_per_object"] for r in results[name]) / statistics.median(
                r[phase]["us_per_object"] for r in results[first]
            )
            print(f"{phase}: {name} / {first} = {ratio:.2f}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.apply:
        print(json.dumps(asyncio.run(apply(args.apply))))
        return 0
    sys.path.insert(0, str(BENCH))
    with tempfile.TemporaryDirectory(prefix="lockstep-ingest-") as tmp:
        workdir = Path(tmp)
        sim = asyncio.run(populate(args.nodes, args.pods, args.gang_size, workdir))
        try:
            results: dict[str, list[dict[str, Any]]] = {name: [] for name in args.trees}
            for _ in range(args.rounds):
                for name, directory in args.trees.items():
                    results[name].append(run_tree(directory, workdir / "kubeconfig"))
        finally:
            sim.stop()
    if args.json:
        print(json.dumps(results))
    else:
        print_table(results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
