"""SIGKILL and restart of the operator between scheduling decisions: the new incarnation starts from
what the API shows and neither forgets pending work nor places what cannot fit."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from reliability_harness import (
    NAMESPACE,
    PODGROUPS,
    OperatorProcess,
    RunningCluster,
    bound,
    create_group,
    http_get_text,
    operator_available,
    pod,
    podgroup,
    unique,
    wait_until,
)

from lockstep.sim.invariants import check_state


@pytest.fixture
def operator_process(sim: RunningCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    reason = operator_available()
    if reason is not None:
        pytest.skip(reason)
    process = OperatorProcess(sim.kubeconfig, tmp_path / "operator.log")
    yield process
    process.stop()


def start_healthy(operator: OperatorProcess) -> None:
    operator.start()
    wait_until(
        lambda: operator.exited() is not None or http_get_text(operator.health_url)[0] == 200,
        60,
        0.2,
        "the operator's /healthz",
    )
    assert operator.exited() is None, operator.log_path.read_text()[-3000:]


def unschedulable_reported(sim: RunningCluster, group: str) -> bool:
    got = sim.http.get(f"{PODGROUPS.format(ns=NAMESPACE)}/{group}").body
    return any(
        c.get("type") == "PodGroupScheduled" and c.get("status") == "False" and c.get("reason")
        for c in (got.get("status") or {}).get("conditions") or []
    )


def test_restarted_operator_keeps_what_cannot_fit_unbound_and_binds_the_rest(
    sim: RunningCluster, operator_process: OperatorProcess
) -> None:
    start_healthy(operator_process)
    oversized = unique("oversized")
    create_group(
        sim, podgroup(oversized, 3), [pod(f"{oversized}-{i}", oversized, cpu="64") for i in range(3)]
    )
    wait_until(
        lambda: unschedulable_reported(sim, oversized), 30, 0.2, f"{oversized} to be reported unschedulable"
    )
    operator_process.kill()

    # Work that arrives while no operator runs, then a fresh incarnation.
    pending = unique("pending")
    create_group(sim, podgroup(pending, 4), [pod(f"{pending}-{i}", pending) for i in range(4)])
    start_healthy(operator_process)
    wait_until(lambda: bound(sim, pending) == 4, 30, 0.2, f"gang {pending} to bind after the restart")
    assert bound(sim, oversized) == 0, "a restarted operator placed pods larger than any node"
    assert unschedulable_reported(sim, oversized)
    assert [v for v in check_state(sim.state()) if not v.transient] == []
