"""The CI form of the chaos soak: 200 pods, 2 SIGKILLs, at most 45 s of scheduling under faults."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from reliability_harness import REPO_ROOT, operator_available, sim_available


@pytest.mark.slow
def test_short_soak_keeps_every_invariant(tmp_path: Path) -> None:
    reason = sim_available() or operator_available()
    if reason is not None:
        pytest.skip(reason)
    report_path = tmp_path / "soak.json"
    result = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "bench" / "soak.py"),
            "--pods=200",
            "--kills=2",
            "--max-seconds=45",
            "--replicas=1",
            "--nodes=10",
            "--devices-per-node=8",
            f"--workdir={tmp_path / 'work'}",
            f"--report={report_path}",
        ],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=REPO_ROOT,
    )
    assert report_path.exists(), (
        f"soak wrote no report (exit {result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
    )
    report = json.loads(report_path.read_text())
    assert report["kills"] == 2
    # every fault class it claims happened, so its invariants checked something
    assert report["preemption_victims"] >= 1 and report["node_losses"] == 1, json.dumps(report, indent=2)
    assert report["member_failures"] >= 1 and report["stale_gang_evictions"] >= 1, json.dumps(
        report, indent=2
    )
    # a zoned gang's replacement was placed, and judged against its zone constraint
    assert report["replacements_bound"] >= 1 and report["topology_checks"] > 0, json.dumps(report, indent=2)
    assert report["checks"] > 0, "the invariants were never checked"
    assert report["failures"] == [], json.dumps(report, indent=2)
    assert result.returncode == 0, result.stdout[-4000:]
