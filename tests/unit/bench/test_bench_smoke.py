"""The harness end to end against the real emulator and, for the full run, the real operator."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from harness.runner import run_phase, run_workload


def _missing(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is None
    except ModuleNotFoundError:
        return True


needs_emulator = pytest.mark.skipif(
    _missing("lockstep.sim.apiserver"), reason="the API emulator lockstep.sim.apiserver has not landed yet"
)
needs_operator = pytest.mark.skipif(
    _missing("lockstep.controller.main"), reason="the operator lockstep.controller.main has not landed yet"
)
TINY = 0.004  # basic: 20 nodes, 40 pods in 5 gangs of 8


@needs_emulator
async def test_ceiling_client_binds_every_pod_and_its_own_requests_are_not_counted(tmp_path: Path) -> None:
    result = await run_phase("basic", TINY, "ceiling", tmp_path)
    assert (result.pods_bound, result.pods_expected, result.gangs_complete) == (40, 40, 5)
    assert result.pods_per_second > 0
    assert result.timeline[-1][1] == 40
    # Every pod create and binding came from the benchmark itself, so none is left in the server's count.
    assert "create pods" not in result.server_requests
    assert "create pods/binding" not in result.server_requests


@needs_emulator
@needs_operator
@pytest.mark.slow
async def test_smallest_workload_through_the_operator(tmp_path: Path) -> None:
    run = await run_workload("basic", TINY, 1, tmp_path)
    lockstep = run.phases["lockstep"]
    assert lockstep.pods_bound == lockstep.pods_expected == 40
    assert lockstep.unexpected_bound == 0
    assert run.ceiling_ratio is not None and run.ceiling_ratio > 0
    # The operator binds every pod itself: at least one create pods/binding per pod is its own.
    assert lockstep.operator_requests.get("create pods/binding", 0) >= 40
    # Its own counters agree: one binding POST per pod at least.
    assert lockstep.operator_requests_by_method.get("POST", 0) >= 40
    assert lockstep.writes_per_pod is not None and lockstep.writes_per_pod >= 1.0
    assert lockstep.operator_rss_peak_mb is not None and lockstep.operator_rss_peak_mb > 10
    assert lockstep.operator_cpu_seconds is not None and lockstep.operator_cpu_seconds >= 0
