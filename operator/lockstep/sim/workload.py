"""How a pod's simulated containers behave: the ``sim.lockstep.dev/`` pod annotations.

A Job's or JobSet's pod template carries them, so every pod made from it behaves alike. The
simulated kubelet (``controllers/kubelet.py``) reads them when it starts the pod; every container of
the pod behaves the same way.

- ``sim.lockstep.dev/run-seconds``: seconds (decimals allowed) the containers run after they start,
  then exit. Without it, the cluster-wide ``SimCluster(pod_run_seconds=...)`` applies (None: they run
  until the pod is deleted).
- ``sim.lockstep.dev/exit-code``: the code they exit with, 0 to 255 (default 0). 0 is a container
  terminated with reason ``Completed``, anything else with reason ``Error``.

A value that is not a number, is negative, or (exit code) not a whole number up to 255 is reported
on the pod as a Warning Event naming the annotation, and the pod runs as if it were absent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lockstep.sim.watching import JsonObject

PREFIX = "sim.lockstep.dev/"
RUN_SECONDS = PREFIX + "run-seconds"
EXIT_CODE = PREFIX + "exit-code"
INVALID_REASON = "InvalidSimulatedWorkload"  # the Warning Event's reason


@dataclass(frozen=True)
class Workload:
    """What the simulated containers of one pod do once started."""

    run_seconds: float | None  # None: they run until the pod is deleted
    exit_code: int = 0


def _run_seconds(value: str) -> float | None:
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _exit_code(value: str) -> int | None:
    try:
        code = int(value.strip())
    except ValueError:
        return None
    return code if 0 <= code <= 255 else None


def parse_workload(pod: JsonObject, default_run_seconds: float | None) -> tuple[Workload, list[str]]:
    """The pod's workload and one message per annotation that could not be used (ignored)."""
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    problems: list[str] = []
    run_seconds = default_run_seconds
    exit_code = 0
    if RUN_SECONDS in annotations:
        raw = str(annotations[RUN_SECONDS])
        parsed = _run_seconds(raw)
        if parsed is None:
            problems.append(f"annotation {RUN_SECONDS}: {raw!r} is not a number of seconds >= 0; ignored")
        else:
            run_seconds = parsed
    if EXIT_CODE in annotations:
        raw = str(annotations[EXIT_CODE])
        code = _exit_code(raw)
        if code is None:
            problems.append(f"annotation {EXIT_CODE}: {raw!r} is not an exit code (0 to 255); ignored")
        else:
            exit_code = code
    return Workload(run_seconds, exit_code), problems
