from __future__ import annotations

import pytest

from harness.results import (
    PhaseResult,
    PodTimes,
    WorkloadRun,
    bound_per_second,
    bound_timeline,
    check_targets,
    gang_bind_spreads,
    gang_latencies,
    markdown_table,
    operator_requests,
    per_pod_by_verb,
    percentile,
    server_minus_own,
    spread_summary,
    summarize_phase,
    summarize_runs,
    writes_per_pod,
)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 0, 1.0),
        ([1.0, 2.0, 3.0, 4.0], 100, 4.0),
        (list(range(1, 101)), 99, 99.01),
        ([10.0, 0.0, 20.0], 75, 15.0),
    ],
)
def test_percentile_interpolates_between_ranks_like_numpy(
    values: list[float], q: float, expected: float
) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_rejects_empty_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="empty"):
        percentile([], 50)
    with pytest.raises(ValueError, match=r"0\.\.100"):
        percentile([1.0], 101)


def test_gang_latency_is_last_bind_minus_last_create_and_skips_incomplete_gangs() -> None:
    pods = {
        "a-0": PodTimes("a", created_at=1.0, bound_at=2.5),
        "a-1": PodTimes("a", created_at=1.5, bound_at=3.0),
        "b-0": PodTimes("b", created_at=1.0, bound_at=1.2),
        "b-1": PodTimes("b", created_at=2.0, bound_at=None),
        "c-0": PodTimes("c", created_at=None, bound_at=4.0),
    }
    assert gang_latencies(pods) == [pytest.approx(1.5)]


def test_gang_bind_spread_is_last_minus_first_bind_of_complete_gangs() -> None:
    pods = {
        "a-0": PodTimes("a", bound_at=2.0),
        "a-1": PodTimes("a", bound_at=3.5),
        "a-2": PodTimes("a", bound_at=2.2),
        "b-0": PodTimes("b", bound_at=1.0),
        "b-1": PodTimes("b", bound_at=None),
        "c-0": PodTimes("c", bound_at=4.0),
    }
    assert sorted(gang_bind_spreads(pods)) == [pytest.approx(0.0), pytest.approx(1.5)]
    summary = spread_summary([0.0, 0.1, 1.5])
    assert summary["over_1s"] == 1
    assert summary["max"] == 1.5
    assert summary["gangs"] == 3
    assert spread_summary([])["gangs"] == 0


def test_bound_timeline_is_cumulative_downsampled_and_ends_at_the_last_bind() -> None:
    timeline = bound_timeline([10.0 + i / 100 for i in range(1000)], origin=10.0, points=100)
    assert timeline[0] == [0.0, 0]
    assert timeline[-1] == [pytest.approx(9.99), 1000]
    assert len(timeline) <= 102
    counts = [count for _, count in timeline]
    assert counts == sorted(counts)
    assert bound_timeline([], origin=0.0) == []


def test_server_minus_own_leaves_what_others_sent() -> None:
    before = {"create pods": 10, "watch pods": 2}
    after = {"create pods": 110, "create pods/binding": 100, "patch pods/status": 100, "watch pods": 3}
    own = {"create pods": 100}
    assert server_minus_own(before, after, own) == {
        "create pods/binding": 100,
        "patch pods/status": 100,
        "watch pods": 1,
    }


def test_server_minus_own_refuses_stats_that_count_less_than_was_sent() -> None:
    with pytest.raises(ValueError, match="'create pods' requests \\(5\\)"):
        server_minus_own({}, {"create pods": 5}, {"create pods": 6})


def test_operator_requests_are_the_phase_less_the_emulators_own_controllers() -> None:
    # The ceiling phase of the same workload saw only the kubelets' status patches and claim creates.
    emulator = {"patch pods/status": 100, "create resourceclaims": 100}
    lockstep = {
        "patch pods/status": 103,
        "create resourceclaims": 100,
        "create pods/binding": 100,
        "patch podgroups/status": 12,
        "watch pods": 1,
    }
    operator = operator_requests(lockstep, emulator)
    assert operator == {
        "create pods/binding": 100,
        "patch podgroups/status": 12,
        "patch pods/status": 3,
        "watch pods": 1,
    }
    by_verb = per_pod_by_verb(operator, pods=100)
    assert by_verb == {"create": 1.0, "patch": 0.15, "watch": 0.01}
    assert writes_per_pod(by_verb) == pytest.approx(1.15)
    with pytest.raises(ValueError, match="at least one pod"):
        per_pod_by_verb(operator, pods=0)


def _result(phase: str, pods_per_second: float, **fields: object) -> PhaseResult:
    base: dict[str, object] = {
        "phase": phase,
        "pods_expected": 80,
        "pods_bound": 80,
        "seconds": 1.0,
        "create_seconds": 0.5,
        "pods_per_second": pods_per_second,
        "gang_latency_p50": 0.1,
        "gang_latency_p99": 0.2,
        "gangs_complete": 10,
    }
    base.update(fields)
    return PhaseResult(**base)  # type: ignore[arg-type]


def test_summarize_phase_measures_only_counted_pods_from_the_first_create() -> None:
    pods = {f"g-{i}": PodTimes("g", created_at=100.0 + i, bound_at=102.0 + i) for i in range(4)}
    pods["other-0"] = PodTimes("other", created_at=100.0, bound_at=101.0)
    result = summarize_phase("lockstep", pods, [f"g-{i}" for i in range(4)], start=100.0, create_seconds=3.5)
    assert result.pods_bound == 4
    assert result.seconds == pytest.approx(5.0)
    assert result.pods_per_second == pytest.approx(0.8)
    assert result.create_seconds == pytest.approx(3.5)
    assert result.unexpected_bound == 1
    assert result.gang_latency_p50 == pytest.approx(2.0)
    assert result.timeline[-1] == [5.0, 4]


def test_summaries_are_medians_over_runs_and_ratio_is_from_the_same_run() -> None:
    runs = [
        WorkloadRun(
            "basic",
            run,
            1.0,
            {
                "lockstep": _result(
                    "lockstep", lockstep, server_requests={"create pods/binding": 80, "patch pods/status": 80}
                ),
                "ceiling": _result("ceiling", ceiling, server_requests={"patch pods/status": 80}),
            },
            "2026-01-01T00:00:00+00:00",
        )
        for run, lockstep, ceiling in ((1, 600.0, 1000.0), (2, 300.0, 1000.0), (3, 900.0, 1200.0))
    ]
    assert runs[2].ceiling_ratio == 0.75
    for run in runs:
        run.attribute_requests()
    assert runs[0].phases["lockstep"].operator_requests == {"create pods/binding": 80}
    assert runs[0].phases["lockstep"].writes_per_pod == 1.0
    summary = summarize_runs(runs)
    assert summary.runs == 3
    assert summary.pods_per_second == 600.0
    assert summary.ceiling_pods_per_second == 1000.0
    assert summary.ceiling_ratio == 0.6
    assert summary.requests_per_pod == {"create": 1.0}
    table = markdown_table([summary])
    assert "| basic | 3 | 80/80 | 600 | 0.5 | 1,000 | 0.60 |" in table
    assert "create 1.00" in table


def test_targets_report_met_missed_and_unmeasured() -> None:
    run = WorkloadRun(
        "basic",
        1,
        1.0,
        {
            "lockstep": _result("lockstep", 450.0, writes_per_pod=1.0, pods_bound=79),
            "ceiling": _result("ceiling", 800.0),
        },
        "now",
    )
    lines = check_targets(summarize_runs([run]))
    assert "throughput >= 500: 450 (MISSED)" in lines
    assert "share of the ceiling >= 0.5: 0.562 (met)" in lines
    assert "API writes per pod <= 1.1: 1 (met)" in lines
    assert "operator peak RSS (MB) <= 300: not measured" in lines
    assert "only 79 of 80 expected pods bound (MISSED)" in lines


def test_run_json_round_trips() -> None:
    run = WorkloadRun("mixed", 2, 0.1, {"lockstep": _result("lockstep", 10.0)}, "now", {"cpus": 2})
    again = WorkloadRun.from_json(run.to_json())
    assert again == run
    assert run.to_json()["ceiling_ratio"] is None


def test_summaries_refuse_mixed_workloads() -> None:
    runs = [WorkloadRun(name, 1, 1.0, {}, "now") for name in ("basic", "churn")]
    with pytest.raises(ValueError, match="different workloads"):
        summarize_runs(runs)


def test_targets_of_a_workload_that_bound_nothing_are_missed_and_explained() -> None:
    stuck = _result(
        "lockstep",
        0.0,
        pods_expected=1000,
        pods_bound=0,
        seconds=0.0,
        gang_latency_p50=None,
        gang_latency_p99=None,
        notes=["1 PodGroup(s) Unschedulable: reservedFor would need 257 entries (claim a)"],
    )
    other = _result(
        "lockstep",
        0.0,
        pods_expected=1000,
        pods_bound=0,
        seconds=0.0,
        notes=["1 PodGroup(s) Unschedulable: reservedFor would need 257 entries (claim b)"],
    )
    runs = [WorkloadRun("shared-claim", i, 1.0, {"lockstep": p}, "now") for i, p in ((1, stuck), (2, other))]
    lines = check_targets(summarize_runs(runs))
    assert lines[0] == "seconds to bind all <= 10: not measured, no pod was bound (MISSED)"
    assert "only 0 of 1,000 expected pods bound (MISSED)" in lines
    assert (
        lines[-1]
        == "why: 1 PodGroup(s) Unschedulable: reservedFor would need 257 entries (claim a) (and 1 more)"
    )


def test_time_target_is_missed_when_not_every_pod_was_bound() -> None:
    partial = _result("lockstep", 50.0, pods_expected=1000, pods_bound=999, seconds=2.0)
    lines = check_targets(summarize_runs([WorkloadRun("shared-claim", 1, 1.0, {"lockstep": partial}, "now")]))
    assert lines[0] == "seconds to bind all <= 10: not all pods were bound (MISSED)"


def test_bound_per_second_counts_cumulative_bindings_at_each_second_end() -> None:
    assert bound_per_second([10.5, 10.9, 12.2, 13.0], origin=10.0) == [2, 2, 4]
    assert bound_per_second([], origin=0.0) == []
