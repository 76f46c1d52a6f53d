"""Benchmarks through the API: ``python bench/run.py [workload ...] [--runs 3] [--out bench/results/]``.

For each workload and run it starts ``lockstep sim`` and ``lockstep run`` as separate processes,
creates the workload through the API, watches pods until they are bound, and measures the ceiling
client on a fresh emulator in the same run. Writes one JSON file per run, ``summary.json``, a PNG of
pods bound over time, and prints the markdown table (``--readme`` also puts it in bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import platform
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from harness.plot import PlotUnavailable, plot_bound_over_time
from harness.procs import ProcessFailed
from harness.results import WorkloadRun, WorkloadSummary, check_targets, markdown_table, summarize_runs
from harness.runner import run_workload
from harness.workloads import BUILDERS

BENCH_DIR = Path(__file__).resolve().parent
README_BEGIN = "<!-- through-the-api:results:begin -->"
README_END = "<!-- through-the-api:results:end -->"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/run.py", description=__doc__.splitlines()[0])
    parser.add_argument(
        "workloads", nargs="*", help=f"workloads to run (default: all of {', '.join(BUILDERS)})"
    )
    parser.add_argument(
        "--runs", type=int, default=3, help="runs per workload; figures are medians (default 3)"
    )
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply nodes and pods by this (default 1.0, the published size)",
    )
    parser.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="directory for JSON and PNG")
    parser.add_argument(
        "--no-kubelets",
        action="store_true",
        help="the emulator's kubelets start no pod (a real API server without kubelets, as the issue's runs)",
    )
    parser.add_argument("--readme", action="store_true", help="write the table into bench/README.md")
    parser.add_argument(
        "--workdir", type=Path, default=None, help="where process logs go (default: a temp dir)"
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="run nothing: rebuild summary.json, the table and the plot from the runs recorded in --out",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the operator and the emulator with py-spy; their top frames go to --out",
    )
    args = parser.parse_args(argv)
    unknown = [w for w in args.workloads if w not in BUILDERS]
    if unknown:
        parser.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(BUILDERS)}")
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")
    if args.scale <= 0:
        parser.error(f"--scale must be positive, got {args.scale}")
    return args


def command_line(args: argparse.Namespace) -> str:
    parts = ["python bench/run.py", *args.workloads, f"--runs {args.runs}"]
    if args.scale != 1.0:
        parts.append(f"--scale {args.scale}")
    if args.no_kubelets:
        parts.append("--no-kubelets")
    return " ".join(parts)


def readme_section(
    summaries: Sequence[WorkloadSummary], commands: Sequence[str], commits: Sequence[str] = ()
) -> str:
    machine = f"{os.cpu_count()} CPUs, {platform.platform()}, Python {platform.python_version()}"
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        README_BEGIN,
        f"Recorded {date} with {', '.join(f'`{c}`' for c in commands)} (code at "
        f"{', '.join(commits) or 'an unknown commit'}); machine: {machine}. Medians of "
        "`runs` runs; latency is last member created to all members bound; load avg is the 1-minute "
        "load average when the lockstep phase ended (other work shared the machine).",
        "",
        markdown_table(summaries),
        "",
    ]
    for summary in summaries:
        for line in check_targets(summary):
            lines.append(f"- {summary.workload}: {line}")
    lines.append(README_END)
    return "\n".join(lines)


def update_readme(readme: Path, section: str) -> None:
    text = readme.read_text() if readme.exists() else ""
    if README_BEGIN in text and README_END in text:
        head, _, rest = text.partition(README_BEGIN)
        _, _, tail = rest.partition(README_END)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    readme.write_text(text)


def load_runs(out: Path) -> list[WorkloadRun]:
    """Every run recorded in ``out`` (this invocation's and earlier ones' of other workloads), in
    workload order, so separate invocations per workload add up to one table."""
    runs = [WorkloadRun.from_json(json.loads(path.read_text())) for path in out.glob("*.run*.json")]
    order = list(BUILDERS)
    return sorted(runs, key=lambda r: (order.index(r.workload) if r.workload in order else len(order), r.run))


async def run_all(args: argparse.Namespace, workdir: Path) -> tuple[list[WorkloadRun], list[str]]:
    runs: list[WorkloadRun] = []
    failures: list[str] = []
    args.out.mkdir(parents=True, exist_ok=True)
    for workload in args.workloads or list(BUILDERS):
        for stale in args.out.glob(f"{workload}.run*.json"):
            stale.unlink()
        for index in range(1, args.runs + 1):
            print(f"[bench] {workload}: run {index}/{args.runs}", flush=True)
            try:
                run = await run_workload(
                    workload,
                    args.scale,
                    index,
                    workdir,
                    args.out if args.profile else None,
                    kubelets=not args.no_kubelets,
                )
            except ProcessFailed as exc:
                failures.append(str(exc))
                print(f"[bench] FAILED: {exc}", file=sys.stderr, flush=True)
                break
            run.machine["command"] = command_line(args)
            runs.append(run)
            (args.out / f"{workload}.run{index}.json").write_text(json.dumps(run.to_json(), indent=1) + "\n")
            lockstep = run.phases.get("lockstep")
            if lockstep is not None:
                print(
                    f"[bench] {workload}: {lockstep.pods_bound}/{lockstep.pods_expected} bound, "
                    f"{lockstep.pods_per_second:,.0f} pods/s, ceiling ratio {run.ceiling_ratio}",
                    flush=True,
                )
                print(
                    f"[bench] {workload}: bound by second {', '.join(map(str, lockstep.bound_per_second))}",
                    flush=True,
                )
    return runs, failures


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lockstep-bench-") as tmp:
        workdir = args.workdir or Path(tmp)
        runs, failures = ([], []) if args.report_only else asyncio.run(run_all(args, workdir))
    recorded = load_runs(args.out)
    by_workload: dict[str, list[WorkloadRun]] = {}
    for run in recorded:
        by_workload.setdefault(run.workload, []).append(run)
    summaries = [summarize_runs(group) for group in by_workload.values()]
    if summaries:
        commands = sorted({str(run.machine.get("command", "")) for run in recorded} - {""})
        (args.out / "summary.json").write_text(
            json.dumps({"commands": commands, "workloads": [asdict(s) for s in summaries]}, indent=1) + "\n"
        )
        commits = sorted({str(run.machine.get("commit", "")) for run in recorded} - {""})
        section = readme_section(summaries, commands, commits)
        print(section)
        if args.readme:
            update_readme(BENCH_DIR / "README.md", section)
        try:
            print(f"[bench] plot: {plot_bound_over_time(recorded, args.out / 'pods-bound.png')}")
        except PlotUnavailable as exc:
            print(f"[bench] no plot: {exc}", file=sys.stderr)
    for failure in failures:
        print(f"[bench] failed: {failure}", file=sys.stderr)
    return 1 if failures or not (runs or (args.report_only and recorded)) else 0


if __name__ == "__main__":
    sys.exit(main())
