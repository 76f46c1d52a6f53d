"""Upstream's scheduler_perf shapes through the emulator: ``python bench/upstream.py [workload ...]``.

Each workload of ``harness.workloads.UPSTREAM_BUILDERS`` runs once as ``bench/run.py`` runs its own
(a ceiling phase and a lockstep phase, each on a fresh ``lockstep sim``), and its JSON goes to
``--out``. The table adds what scale costs: the operator's resident memory once it has the nodes
(after the warm-up, before the workload), its peak, the growth per 1,000 pods, and, fitted over the
rows with different node counts, its memory per node.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from harness.procs import ProcessFailed
from harness.results import WorkloadRun
from harness.runner import run_workload
from harness.workloads import UPSTREAM_BUILDERS

BENCH_DIR = Path(__file__).resolve().parent


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/upstream.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "workloads", nargs="*", help=f"workloads to run (default: all of {', '.join(UPSTREAM_BUILDERS)})"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiply nodes and pods (default 1.0)")
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results" / "upstream")
    parser.add_argument("--report-only", action="store_true", help="only print the table of --out's runs")
    parser.add_argument(
        "--no-kubelets",
        action="store_true",
        help="the emulator's kubelets start no pod (a real API server without kubelets, as the issue's runs)",
    )
    args = parser.parse_args(argv)
    unknown = [w for w in args.workloads if w not in UPSTREAM_BUILDERS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(UPSTREAM_BUILDERS)}")
    if args.scale <= 0:
        parser.error(f"--scale must be positive, got {args.scale}")
    return args


def memory_per_node_kb(runs: Sequence[WorkloadRun]) -> float | None:
    """Least-squares slope of the operator's RSS with the nodes only, over the runs' node counts."""
    points = [
        (
            run.phases["lockstep"].extra.get("nodes", 0.0),
            run.phases["lockstep"].extra["operator_rss_start_mb"],
        )
        for run in runs
        if "lockstep" in run.phases and "operator_rss_start_mb" in run.phases["lockstep"].extra
    ]
    if len({x for x, _ in points}) < 2:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sum((x - mean_x) ** 2 for x, _ in points)
    return round(slope * 1000, 1)


def table(runs: Sequence[WorkloadRun]) -> str:
    lines = [
        "| workload | scale | nodes | bound | pods/s | ceiling pods/s | ratio | operator CPU (ms/pod) | "
        "operator RSS with nodes / peak (MB) | MB per 1,000 pods | emulator CPU (s) / RSS (MB) | "
        "started (UTC) | load avg |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in runs:
        lockstep, ceiling = run.phases.get("lockstep"), run.phases.get("ceiling")
        if lockstep is None or ceiling is None:
            continue
        cpu = lockstep.operator_cpu_seconds or 0.0
        start = lockstep.extra.get("operator_rss_start_mb", 0.0)
        peak = lockstep.operator_rss_peak_mb or 0.0
        sim = (
            f"{lockstep.extra.get('sim_cpu_seconds', 0):.1f} / {lockstep.extra.get('sim_rss_peak_mb', 0):.0f}"
        )
        per_pod = (peak - start) / lockstep.pods_bound * 1000 if lockstep.pods_bound else 0.0
        lines.append(
            f"| {run.workload} | {run.scale:g} | {int(lockstep.extra.get('nodes', 0)):,} | "
            f"{lockstep.pods_bound:,}/{lockstep.pods_expected:,} | {lockstep.pods_per_second:,.0f} | "
            f"{ceiling.pods_per_second:,.0f} | {run.ceiling_ratio or 0:.2f} | "
            f"{cpu / max(1, lockstep.pods_bound) * 1000:.2f} | {start:.0f} / {peak:.0f} | {per_pod:.1f} | "
            f"{sim} | "
            f"{run.started[11:16]} | {lockstep.load_average} |"
        )
    per_node = memory_per_node_kb(runs)
    if per_node is not None:
        lines.append("")
        lines.append(
            f"Operator RSS with the nodes only, fitted over the node counts above: {per_node} kB per node."
        )
    return "\n".join(lines)


def load_runs(out: Path) -> list[WorkloadRun]:
    order = list(UPSTREAM_BUILDERS)
    runs = [WorkloadRun.from_json(json.loads(path.read_text())) for path in out.glob("*.json")]
    return sorted(runs, key=lambda r: order.index(r.workload) if r.workload in order else len(order))


async def run_all(args: argparse.Namespace, workdir: Path) -> list[str]:
    failures: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads or list(UPSTREAM_BUILDERS):
        print(f"[upstream] {workload} at scale {args.scale}, load {os.getloadavg()[0]:.2f}", flush=True)
        try:
            run = await run_workload(workload, args.scale, 1, workdir, kubelets=not args.no_kubelets)
        except ProcessFailed as exc:
            failures.append(str(exc))
            print(f"[upstream] FAILED: {exc}", file=sys.stderr, flush=True)
            continue
        command = (
            f"python bench/upstream.py {workload}"
            + (f" --scale {args.scale}" if args.scale != 1 else "")
            + (" --no-kubelets" if args.no_kubelets else "")
        )
        run.machine["command"] = command
        run.machine["finished"] = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
        (args.out / f"{workload}.json").write_text(json.dumps(run.to_json(), indent=1) + "\n")
        print(table([run]), flush=True)
    return failures


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    failures: list[str] = []
    if not args.report_only:
        with tempfile.TemporaryDirectory(prefix="lockstep-upstream-") as tmp:
            failures = asyncio.run(run_all(args, Path(tmp)))
    print(table(load_runs(args.out)))
    for failure in failures:
        print(f"[upstream] failed: {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
