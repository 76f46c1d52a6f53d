"""PNG of pods bound over time: one panel per workload, one line per phase of each run.

matplotlib is the ``bench`` extra (``pip install -e '.[bench]'``); without it the plot is skipped with
a message, and the JSON results are complete anyway.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from harness.results import WorkloadRun

PHASE_STYLE = {"lockstep": "tab:blue", "ceiling": "tab:gray", "baseline": "tab:green"}


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def plot_bound_over_time(runs: Sequence[WorkloadRun], path: Path) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(
            "matplotlib is not installed: pip install -e '.[bench]' to draw the plot"
        ) from None
    if not runs:
        raise ValueError("no runs to plot")
    workloads = sorted({r.workload for r in runs}, key=[r.workload for r in runs].index)
    columns = min(3, len(workloads))
    rows = math.ceil(len(workloads) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(5 * columns, 3.6 * rows), squeeze=False)
    for panel, workload in zip(axes.flat, workloads, strict=False):
        for run in (r for r in runs if r.workload == workload):
            for phase, result in run.phases.items():
                if not result.timeline:
                    continue
                seconds = [point[0] for point in result.timeline]
                bound = [point[1] for point in result.timeline]
                label = f"{phase} ({result.pods_per_second:,.0f}/s)" if run.run == 1 else None
                panel.plot(seconds, bound, color=PHASE_STYLE.get(phase, "tab:red"), alpha=0.8, label=label)
        panel.set_title(workload)
        panel.set_xlabel("seconds since the first create (ceiling: first binding)")
        panel.set_ylabel("pods bound")
        panel.grid(alpha=0.3)
        panel.legend(loc="lower right", fontsize="small")
    for panel in list(axes.flat)[len(workloads) :]:
        panel.set_visible(False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
