from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_harness import NAMESPACE, OperatorProcess, RunningCluster, running_cluster, running_operator


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningCluster]:
    """A small simulated cluster (2 nodes, 2 devices each) with the PodGroup CRD and a namespace."""
    with running_cluster(tmp_path_factory.mktemp("sim"), nodes=2, devices_per_node=2) as running:
        running.http.ensure_namespace(NAMESPACE)
        yield running


@pytest.fixture(scope="module")
def operator(sim: RunningCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    """``lockstep run`` (debug logging) against the module's cluster; fails if it ever exits."""
    with running_operator(sim, tmp_path_factory.mktemp("operator") / "operator.log") as process:
        yield process


# bench/soak.py imports its siblings as ``harness``, as ``python bench/soak.py`` does.
BENCH_DIR = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH_DIR) not in sys.path:
    sys.path.insert(0, str(BENCH_DIR))
