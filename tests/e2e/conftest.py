"""End-to-end fixtures: a ``lockstep sim`` subprocess and a real ``kubectl`` pointed at it."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

KUBECTL = shutil.which("kubectl")
MANIFESTS = Path(__file__).parent / "manifests"
REPO = Path(__file__).resolve().parents[2]
SIM_START_TIMEOUT = 60.0
KUBECTL_TIMEOUT = 30.0
OPERATOR_START_TIMEOUT = 60.0


@dataclass
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit {self.returncode}\nstdout:\n{self.stdout}\nstderr:\n{self.stderr}"


@dataclass
class Kubectl:
    """Runs one kubectl binary against the simulated cluster with its own cache directory."""

    binary: str
    kubeconfig: Path
    cache_dir: Path

    def using(self, binary: str) -> Kubectl:
        """The same cluster and cache through another kubectl binary."""
        return Kubectl(binary, self.kubeconfig, self.cache_dir)

    def run(self, *args: str, check: bool = True, stdin: str | None = None) -> KubectlResult:
        command = [self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache_dir}", *args]
        completed = subprocess.run(
            command, input=stdin, capture_output=True, text=True, timeout=KUBECTL_TIMEOUT, check=False
        )
        result = KubectlResult(completed.returncode, completed.stdout, completed.stderr)
        if check and completed.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed: {result}")
        return result

    def start(self, *args: str) -> subprocess.Popen[str]:
        command = [self.binary, f"--kubeconfig={self.kubeconfig}", f"--cache-dir={self.cache_dir}", *args]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@dataclass
class RunningSim:
    process: subprocess.Popen[str]
    kubeconfig: Path
    server_url: str


def _start_sim(kubeconfig: Path) -> RunningSim:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    command = [sys.executable, "-m", "lockstep", "sim", "--nodes", "3", "--devices-per-node", "2"]
    command += ["--kubeconfig", str(kubeconfig)]
    stderr_path = kubeconfig.with_name("sim.stderr")
    with stderr_path.open("w") as stderr:
        # stderr goes to a file: a pipe nobody reads could fill up and stall the simulator.
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            cwd=REPO,
            env=env,
        )
    deadline = time.monotonic() + SIM_START_TIMEOUT
    # The kubeconfig is written just before the export line is printed.
    while not kubeconfig.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not kubeconfig.exists():
        process.kill()
        process.wait(timeout=10)
        raise AssertionError(
            f"lockstep sim did not start (exit {process.returncode}):\n{stderr_path.read_text()}"
        )
    assert process.stdout is not None
    assert process.stdout.readline().strip() == f"export KUBECONFIG={kubeconfig}"
    config = kubeconfig.read_text()
    server_url = next(
        part.split("server:", 1)[1].strip() for part in config.splitlines() if "server:" in part
    )
    return RunningSim(process, kubeconfig, server_url)


def _stop_sim(sim: RunningSim) -> int:
    sim.process.send_signal(signal.SIGTERM)
    try:
        return sim.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        sim.process.kill()
        sim.process.wait(timeout=10)
        raise


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningSim]:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    running = _start_sim(tmp_path_factory.mktemp("sim") / "kubeconfig")
    try:
        yield running
    finally:
        exit_code = _stop_sim(running)
        assert exit_code == 0, f"lockstep sim exited {exit_code} on SIGTERM"


@pytest.fixture
def kubectl(sim: RunningSim, tmp_path: Path) -> Kubectl:
    assert KUBECTL is not None
    return Kubectl(KUBECTL, sim.kubeconfig, tmp_path / "kubectl-cache")


def _wait_until_healthy(operator: subprocess.Popen[str], health_port: int) -> None:
    deadline = time.monotonic() + OPERATOR_START_TIMEOUT
    while True:
        assert operator.poll() is None, f"lockstep run exited {operator.returncode}"
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        assert time.monotonic() < deadline, "lockstep run did not answer /healthz"
        time.sleep(0.2)


@pytest.fixture
def wait_until_healthy() -> Callable[[subprocess.Popen[str], int], None]:
    """Waits for a started ``lockstep run`` to answer /healthz on its health port; fails if it exits."""
    return _wait_until_healthy
