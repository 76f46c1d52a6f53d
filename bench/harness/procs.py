"""The emulator and the operator as separate processes, as in a cluster, and what they cost.

CPU time and peak RSS come from ``/proc/<pid>/stat`` (utime + stime) and ``/proc/<pid>/status``
(VmHWM), so nothing beyond the standard library is needed.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.api import ApiClient, load_kubeconfig

LOCKSTEP = [sys.executable, "-m", "lockstep"]
BIGSIM = [sys.executable, str(Path(__file__).resolve().parent / "bigsim.py")]
STOP_GRACE_SECONDS = 10.0
# ``lockstep sim`` gives itself 60 s to start, enough for 5,000 nodes on a busy machine; bigger
# clusters get as much per node.
SIM_START_NODES = 5000
SIM_START_SECONDS = 60.0


class ProcessFailed(RuntimeError):
    """A child process exited or never became ready; the message carries the tail of its log."""


@dataclass(frozen=True)
class ProcessUsage:
    cpu_seconds: float
    rss_peak_mb: float
    rss_mb: float = 0.0


def parse_cpu_seconds(stat_line: str, ticks_per_second: int) -> float:
    """utime + stime of a ``/proc/<pid>/stat`` line; the command name may contain spaces or parens."""
    fields = stat_line[stat_line.rindex(")") + 2 :].split()
    # fields[0] is the state (field 3 of proc(5)); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / ticks_per_second


def parse_status_mb(status_text: str, field: str = "VmHWM") -> float:
    """VmHWM (or another ``field``, VmRSS) of a ``/proc/<pid>/status`` text, in MB (10^6 bytes)."""
    for line in status_text.splitlines():
        if line.startswith(f"{field}:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"/proc status {field} in unexpected unit {unit!r}")
            return int(value) * 1024 / 1e6
    raise ValueError(f"/proc status has no {field} line")


def process_usage(pid: int) -> ProcessUsage:
    stat = Path(f"/proc/{pid}/stat").read_text()
    status = Path(f"/proc/{pid}/status").read_text()
    return ProcessUsage(
        cpu_seconds=parse_cpu_seconds(stat, os.sysconf("SC_CLK_TCK")),
        rss_peak_mb=parse_status_mb(status),
        rss_mb=parse_status_mb(status, "VmRSS"),
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def log_tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class Child:
    """A child process whose stdout and stderr go to ``log``; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str] | None = None) -> None:
        self.name = name
        self.argv = argv
        self.log = log
        self.metrics_url: str | None = None
        self._log_file = log.open("wb")
        self.process = subprocess.Popen(argv, stdout=self._log_file, stderr=subprocess.STDOUT, env=env)

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise ProcessFailed(
                f"{self.name} exited with code {code}: {' '.join(self.argv)}\n--- {self.log} ---\n"
                f"{log_tail(self.log)}"
            )

    def usage(self) -> ProcessUsage:
        return process_usage(self.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log_file.close()


async def start_sim(
    nodes: int,
    devices_per_node: int,
    workdir: Path,
    max_pods: int | None = None,
    ready_within: float = 120.0,
    env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    write_latency_ms: float = 0.0,
) -> Child:
    """``lockstep sim`` in its own process; returns once its kubeconfig works and all nodes exist.

    With ``max_pods``, or more than ``SIM_START_NODES`` nodes, the same emulator is started through
    ``bigsim.py``, with that many pods per node and time to create every node.
    ``env`` replaces the process environment (another ``PYTHONPATH``: another tree's emulator);
    ``extra_args`` go to ``lockstep sim`` (its periods, say), which ``bigsim.py`` does not take;
    ``write_latency_ms`` goes to either (only when set: older trees' emulators do not know it).
    """
    kubeconfig = workdir / "kubeconfig"
    kubeconfig.unlink(missing_ok=True)
    if max_pods is None and nodes <= SIM_START_NODES:
        program = [*LOCKSTEP, "sim"]
    elif extra_args:
        raise ValueError(f"start_sim: extra_args {list(extra_args)} need lockstep sim, not bigsim.py")
    else:
        start_timeout = SIM_START_SECONDS * max(1.0, nodes / SIM_START_NODES)
        ready_within = max(ready_within, start_timeout * 2)
        program = [*BIGSIM, "--start-timeout", str(start_timeout)]
        if max_pods is not None:
            program += ["--max-pods", str(max_pods)]
    argv = [
        *program,
        "--nodes",
        str(nodes),
        "--devices-per-node",
        str(devices_per_node),
        "--port",
        str(free_port()),
        "--kubeconfig",
        str(kubeconfig),
        *(["--write-latency-ms", str(write_latency_ms)] if write_latency_ms else []),
        *extra_args,
    ]
    child = Child("lockstep sim", argv, workdir / "sim.log", env)
    deadline = time.monotonic() + ready_within
    try:
        while not kubeconfig.exists():
            child.check_alive()
            if time.monotonic() > deadline:
                raise ProcessFailed(
                    f"lockstep sim wrote no kubeconfig at {kubeconfig} within {ready_within:.0f} s"
                )
            await asyncio.sleep(0.1)
        async with ApiClient(load_kubeconfig(kubeconfig), connections=2) as client:
            while True:
                child.check_alive()
                with contextlib.suppress(OSError, ValueError):
                    listing = await client.get("/api/v1/nodes")
                    if len(listing.get("items", [])) >= nodes:
                        return child
                if time.monotonic() > deadline:
                    raise ProcessFailed(
                        f"lockstep sim did not show {nodes} nodes within {ready_within:.0f} s"
                    )
                await asyncio.sleep(0.2)
    except BaseException:
        child.stop()
        raise


def start_operator(kubeconfig: Path, workdir: Path, env: dict[str, str] | None = None) -> Child:
    """``lockstep run`` against the emulator: no leader election, logs at warning, metrics on a free
    port (``child.metrics_url``). ``env`` replaces the process environment, as for :func:`start_sim`."""
    metrics_port = free_port()
    argv = [
        *LOCKSTEP,
        "run",
        "--kubeconfig",
        str(kubeconfig),
        "--no-leader-elect",
        "--metrics-bind-address",
        f"127.0.0.1:{metrics_port}",
        "--health-bind-address",
        f"127.0.0.1:{free_port()}",
        "--log-format",
        "json",
        "--log-level",
        os.environ.get("LOCKSTEP_BENCH_LOG_LEVEL", "warning"),
    ]
    child = Child("lockstep run", argv, workdir / "operator.log", env)
    child.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    return child
