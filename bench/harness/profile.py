"""Sampling profiles of the operator and the emulator during a phase, with py-spy, and their top frames.

py-spy is not a dependency: install it into the venv by hand (``pip install py-spy``) and pass
``--profile`` to ``bench/run.py``. Profiles are py-spy's collapsed stacks ("frame;frame;frame count").
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

SAMPLES_PER_SECOND = 97


class ProfilerUnavailable(RuntimeError):
    """py-spy is not installed."""


def py_spy() -> str:
    beside_python = Path(sys.executable).parent / "py-spy"
    found = str(beside_python) if beside_python.exists() else shutil.which("py-spy")
    if found is None:
        raise ProfilerUnavailable("--profile needs py-spy: pip install py-spy (into the venv, by hand)")
    return found


class Profiler:
    """``py-spy record`` attached to ``pid`` until stopped; writes collapsed stacks to ``output``."""

    def __init__(self, pid: int, output: Path) -> None:
        self.output = output
        self._log = output.with_name(output.stem + ".py-spy.log").open("wb")
        argv = [py_spy(), "record", "--pid", str(pid), "--rate", str(SAMPLES_PER_SECOND), "--format", "raw"]
        self.process = subprocess.Popen(
            [*argv, "--nonblocking", "--output", str(output)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def stop(self) -> Path:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()
        return self.output


@dataclass(frozen=True)
class FrameShare:
    frame: str
    self_share: float
    total_share: float


# Frames on nearly every stack (entry point, event loop) say nothing about where the time goes.
ALWAYS_ON_STACK = 0.9


def top_frames(collapsed: Iterable[str], limit: int = 15, by_total: bool = False) -> list[FrameShare]:
    """The frames with the most self time (the sampled leaf), or with ``by_total`` the most total time
    (anywhere on the stack, counted once per stack) leaving out frames on nearly every stack."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in collapsed:
        stack, _, count_text = line.rstrip("\n").rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        own[frames[-1]] += count
        for frame in set(frames):
            total[frame] += count
    if not samples:
        return []
    if by_total:
        ordered = sorted(total, key=lambda frame: (-total[frame], frame))
        ranked = [f for f in ordered if total[f] / samples < ALWAYS_ON_STACK][:limit]
    else:
        ranked = [f for f, _ in own.most_common(limit)]
    return [FrameShare(f, round(own[f] / samples, 4), round(total[f] / samples, 4)) for f in ranked]


def report(path: Path, title: str, limit: int = 15) -> str:
    """A plain-text table of the top frames of one profile."""
    with path.open(errors="replace") as collapsed:
        stacks = collapsed.readlines()
    lines = []
    for by_total in (False, True):
        ranking = "total" if by_total else "self"
        lines.append(f"{title} ({path.name}), by {ranking} time: self% total% frame")
        lines += [
            f"{f.self_share * 100:6.1f} {f.total_share * 100:6.1f}  {f.frame}"
            for f in top_frames(stacks, limit, by_total)
        ]
    return "\n".join(lines)
