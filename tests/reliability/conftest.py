from __future__ import annotations

from collections.abc import Iterator

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
