"""Start-up: from the exec of ``lockstep run`` to its first and its last binding, everything pre-created.

``python bench/startup.py [--nodes 1000] [--pods 5000] [--gang-size 8] [--runs 3] [--json]
[--tree NAME=DIR ...]``

As the kube-scheduler comparison was measured: ``lockstep sim`` runs with the nodes, then every
PodGroup and pod is created (nothing is scheduled, no operator runs), a watch on the pods is opened,
and only then is ``lockstep run --no-leader-elect`` exec'd. The clock runs from just before the exec
to the first and the last ``spec.nodeName`` the watch sees, and the CPU time the operator (and the
emulator) spent until the watch saw the first one (sampled every 10 ms from /proc: on a loaded
machine it varies less than the wall clock). Also reported: the operator's import time
(what ``lockstep run`` imports before it connects: ``lockstep.controller.main``, ``.runtime`` and
``lockstep.kube.credentials``; best of 5 fresh interpreters) and, per gang, the time from its first to
its last member bound. Each tree's ``lockstep`` package is byte-compiled first, as installed in the
image.

``--tree before=/tmp/old/operator --tree after=operator`` compares source trees (each a directory
holding the ``lockstep`` package; the emulator and the operator both run from it): their runs
alternate, so that they share the machine's load, and each tree gets its own rows.
"""

from __future__ import annotations

import argparse
import asyncio
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

from harness.api import ApiClient, load_kubeconfig
from harness.loadgen import CompletionWatcher, LoadGenerator, create_setup
from harness.procs import ProcessFailed, start_operator, start_sim
from harness.results import gang_bind_spreads, spread_summary
from harness.runner import node_shape
from harness.tracker import Tracker
from harness.workloads import GangSpec, Workload, namespace_manifest

IMPORT_PROBE = (
    "import time; t = time.perf_counter(); import lockstep.controller.main as m; "
    "m.skip_manifest_validation_import(); import lockstep.controller.runtime, lockstep.kube.credentials; "
    "print(time.perf_counter() - t)"
)


def import_seconds(envs: dict[str, dict[str, str] | None], tries: int = 5) -> dict[str, float]:
    """Per tree, the best of ``tries`` fresh interpreters importing the operator's entry module; the
    trees take turns."""
    best = dict.fromkeys(envs, float("inf"))
    for _ in range(tries):
        for name, env in envs.items():
            out = subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE], check=True, capture_output=True, text=True, env=env
            )
            best[name] = min(best[name], float(out.stdout.strip()))
    return best


def compile_bytecode(env: dict[str, str] | None = None) -> None:
    """Byte-compile the ``lockstep`` package that ``env`` imports, as ``pip install`` does in the
    image. Without it every exec compiled the operator's source again wherever PYTHONDONTWRITEBYTECODE
    is set (this machine): 0.2 s more CPU per start than a deployed operator spends."""
    compile_package = (
        "import compileall, pathlib, lockstep; "
        "compileall.compile_dir(pathlib.Path(lockstep.__file__).parent, quiet=1)"
    )
    subprocess.run([sys.executable, "-c", compile_package], check=True, env=env)


def tree_env(directory: str | None) -> dict[str, str] | None:
    """The environment for processes running the ``lockstep`` package of ``directory``."""
    if directory is None:
        return None
    return {**os.environ, "PYTHONPATH": str(Path(directory).resolve())}


async def one_run(
    nodes: int, pods: int, gang_size: int, workdir: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    gangs = tuple(
        GangSpec(f"start-{i:05d}", pods=gang_size, min_count=gang_size, cpu_millis=100)
        for i in range(pods // gang_size)
    )
    workload = Workload(
        name="startup",
        description="start-up",
        nodes=nodes,
        devices_per_node=0,
        gangs=gangs,
        pods_expected=len(gangs) * gang_size,
        setup=(namespace_manifest(),),
    )
    sim = await start_sim(nodes, 0, workdir, env=env)
    operator = None
    try:
        kubeconfig = workdir / "kubeconfig"
        async with ApiClient(load_kubeconfig(kubeconfig), connections=16) as client:
            listing = await client.get("/api/v1/nodes", {"limit": "1"})
            shape = node_shape(listing["items"][0])
            await create_setup(client, workload)
            tracker = Tracker(workload.pods_expected)
            await LoadGenerator(client, tracker, shape).run(gangs)
            tracker.creation_finished()
            watcher = CompletionWatcher(client, tracker)
            await watcher.start()
            sim_cpu_at_exec = sim.usage().cpu_seconds
            exec_at = time.monotonic()
            operator = start_operator(kubeconfig, workdir, env)
            deadline = exec_at + 300.0
            cpu_at_first_bind: tuple[float, float] | None = None
            while not tracker.complete.is_set():
                operator.check_alive()
                watcher.check()
                if time.monotonic() > deadline:
                    raise ProcessFailed(
                        f"lockstep run bound {tracker.bound_count} of {workload.pods_expected} pods in 300 s"
                    )
                if cpu_at_first_bind is None and tracker.bound_count:
                    cpu_at_first_bind = (operator.usage().cpu_seconds, sim.usage().cpu_seconds)
                await asyncio.sleep(0.05 if cpu_at_first_bind else 0.01)
            await watcher.stop()
            bound = [t.bound_at for t in tracker.pods.values() if t.bound_at is not None]
            first, last = min(bound) - exec_at, max(bound) - exec_at
            return {
                "nodes": nodes,
                "pods": workload.pods_expected,
                "gang_size": gang_size,
                "exec_to_first_bind_s": round(first, 3),
                "exec_to_all_bound_s": round(last, 3),
                "operator_cpu_to_first_bind_s": round(cpu_at_first_bind[0], 2) if cpu_at_first_bind else None,
                "sim_cpu_to_first_bind_s": round(cpu_at_first_bind[1] - sim_cpu_at_exec, 2)
                if cpu_at_first_bind
                else None,
                "pods_per_s_from_exec": round(workload.pods_expected / last, 1),
                "gang_bind_spread": spread_summary(gang_bind_spreads(tracker.pods)),
            }
    finally:
        if operator is not None:
            operator.stop()
        sim.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/startup.py", description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=5000)
    parser.add_argument("--gang-size", type=int, default=8)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    parser.add_argument(
        "--tree",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="a source tree to compare (its directory holding the lockstep package); runs alternate",
    )
    args = parser.parse_args(argv)
    trees: dict[str, str | None] = {}
    for tree in args.tree:
        name, separator, directory = tree.partition("=")
        if not separator or not name or not Path(directory, "lockstep").is_dir():
            parser.error(f"--tree {tree!r}: expected NAME=DIR with DIR/lockstep a package directory")
        trees[name] = directory
    args.trees = trees or {"": None}
    return args


def summary(runs: list[dict[str, Any]], import_s: float) -> dict[str, Any]:
    return {
        "import_s": round(import_s, 3),
        "runs": runs,
        "median_exec_to_first_bind_s": statistics.median(r["exec_to_first_bind_s"] for r in runs),
        "median_exec_to_all_bound_s": statistics.median(r["exec_to_all_bound_s"] for r in runs),
        "median_operator_cpu_to_first_bind_s": statistics.median(
            r["operator_cpu_to_first_bind_s"] for r in runs
        ),
    }


def print_table(name: str, result: dict[str, Any]) -> None:
    print(f"{name + ': ' if name else ''}operator import time: {result['import_s']:.3f} s (best of 5)")
    print(
        "| run | exec -> first bind | CPU to first bind: operator / emulator | exec -> all bound | pods/s "
        "| gang spread p50 / p99 / max | > 1 s |"
    )
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(result["runs"], 1):
        s = r["gang_bind_spread"]
        print(
            f"| {i} | {r['exec_to_first_bind_s']:.2f} s | {r['operator_cpu_to_first_bind_s']:.2f} / "
            f"{r['sim_cpu_to_first_bind_s']:.2f} s | {r['exec_to_all_bound_s']:.2f} s | "
            f"{r['pods_per_s_from_exec']:.0f} | {s['p50']:.3f} / {s['p99']:.3f} / {s['max']:.3f} s | "
            f"{s['over_1s']} |"
        )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.trees}
    for directory in args.trees.values():
        compile_bytecode(tree_env(directory))
    for _ in range(args.runs):
        for name, directory in args.trees.items():
            with tempfile.TemporaryDirectory(prefix="lockstep-startup-") as tmp:
                run = one_run(args.nodes, args.pods, args.gang_size, Path(tmp), tree_env(directory))
                runs[name].append(asyncio.run(run))
    imports = import_seconds({name: tree_env(directory) for name, directory in args.trees.items()})
    results = {name: summary(runs[name], imports[name]) for name in args.trees}
    if args.json:
        print(json.dumps(results.get("", {"trees": results})))
        return 0
    for name, result in results.items():
        print_table(name, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
