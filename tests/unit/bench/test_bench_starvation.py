"""The pure parts of bench/starvation.py: percentiles, deadlines, utilization and the summary."""

from __future__ import annotations

from starvation import Gang, Samples, deadline_for, percentile, summarize


def test_nearest_rank_percentiles() -> None:
    assert percentile([], 0.5) == 0.0
    assert percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0
    assert percentile([1.0, 2.0, 3.0, 4.0], 1.0) == 4.0


def test_a_small_pod_declares_its_runtime_rounded_up_plus_a_second() -> None:
    assert deadline_for(1.0) == 2
    assert deadline_for(1.01) == 3


def test_a_gang_never_bound_counts_as_waiting_until_the_end_and_says_so() -> None:
    samples = Samples()
    samples.add(16, 32, False)
    samples.add(24, 32, True)
    gangs = [Gang("a", 10.0, bound=14.0), Gang("b", 20.0)]
    result = summarize("on", gangs, small_bound=40, samples=samples, end=30.0)
    assert result["gangs_bound"] == 1 and result["gang_wait_censored"] is True
    assert result["gang_wait_p50_s"] == 4.0 and result["gang_wait_max_s"] == 10.0
    assert result["small_pods_per_s"] == 2.0
    assert result["utilization"] == 0.625 and result["utilization_while_reserved"] == 0.75
