from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

from harness.results import PhaseResult, WorkloadRun, summarize_runs

BENCH_DIR = Path(__file__).resolve().parents[3] / "bench"


def _load_run_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_run_under_test", BENCH_DIR / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(workload: str, run: int) -> WorkloadRun:
    def phase(name: str, rate: float) -> PhaseResult:
        return PhaseResult(
            phase=name,
            pods_expected=16,
            pods_bound=16,
            seconds=16 / rate,
            create_seconds=0.1,
            pods_per_second=rate,
            gang_latency_p50=0.01,
            gang_latency_p99=0.02,
            gangs_complete=2,
            timeline=[[0.0, 0], [8 / rate, 8], [16 / rate, 16]],
        )

    return WorkloadRun(
        workload, run, 0.01, {"lockstep": phase("lockstep", 100.0), "ceiling": phase("ceiling", 400.0)}, "now"
    )


def test_cli_rejects_unknown_workloads_and_bad_numbers(capsys: pytest.CaptureFixture[str]) -> None:
    run = _load_run_script()
    for argv, message in (
        (["nope"], "unknown workload(s) nope"),
        (["--runs", "0"], "--runs must be at least 1"),
        (["--scale", "-1"], "--scale must be positive"),
    ):
        with pytest.raises(SystemExit):
            run.parse_args(argv)
        assert message in capsys.readouterr().err
    args = run.parse_args(["basic", "mixed", "--runs", "1", "--scale", "0.1"])
    assert run.command_line(args) == "python bench/run.py basic mixed --runs 1 --scale 0.1"
    assert not args.profile and run.parse_args(["--profile"]).profile


def test_readme_section_replaces_only_its_own_block(tmp_path: Path) -> None:
    run = _load_run_script()
    section = run.readme_section([summarize_runs([_run("basic", 1)])], ["python bench/run.py basic --runs 1"])
    assert section.startswith(run.README_BEGIN) and section.endswith(run.README_END)
    assert "`python bench/run.py basic --runs 1`" in section
    assert "| basic | 1 | 16/16 | 100 | 0.1 | 400 | 0.25 |" in section
    assert "- basic: share of the ceiling >= 0.5: 0.25 (MISSED)" in section

    readme = tmp_path / "README.md"
    readme.write_text("# Benchmarks\n\n## Core\nother engineer's text\n")
    run.update_readme(readme, section)
    run.update_readme(readme, section.replace("| basic | 1 |", "| basic | 9 |"))
    text = readme.read_text()
    assert text.startswith("# Benchmarks\n\n## Core\nother engineer's text\n")
    assert text.count(run.README_BEGIN) == 1
    assert "| basic | 9 |" in text and "| basic | 1 |" not in text


def test_plot_draws_a_png_of_pods_bound_over_time(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib is the optional bench extra")
    from harness.plot import plot_bound_over_time

    path = plot_bound_over_time([_run("basic", 1), _run("mixed", 1)], tmp_path / "out" / "bound.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert path.stat().st_size > 5000


def test_recorded_runs_of_separate_invocations_load_in_workload_order(tmp_path: Path) -> None:
    run = _load_run_script()
    for recorded in (_run("mixed", 1), _run("basic", 2), _run("basic", 1)):
        path = tmp_path / f"{recorded.workload}.run{recorded.run}.json"
        path.write_text(json.dumps(recorded.to_json()))
    (tmp_path / "summary.json").write_text("{}")
    loaded = run.load_runs(tmp_path)
    assert [(r.workload, r.run) for r in loaded] == [("basic", 1), ("basic", 2), ("mixed", 1)]
    assert loaded[0] == _run("basic", 1)


def test_report_only_rebuilds_the_summary_from_recorded_runs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _load_run_script()
    recorded = _run("basic", 1)
    recorded.machine["command"] = "python bench/run.py basic --runs 1"
    (tmp_path / "basic.run1.json").write_text(json.dumps(recorded.to_json()))
    assert run.main(["--report-only", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["commands"] == ["python bench/run.py basic --runs 1"]
    assert [w["workload"] for w in summary["workloads"]] == ["basic"]
    assert "| basic | 1 | 16/16 |" in capsys.readouterr().out
    assert run.main(["--report-only", "--out", str(tmp_path / "empty")]) == 1
