"""examples/gang-health/README.md, run as written: ``lockstep sim`` and ``lockstep run`` started with the
README's command lines, then its kubectl steps run by bash (``-e``: a ``kubectl wait`` that times out
fails the test). A KeepMinCount gang Job loses a node (the ``sim.lockstep.dev/lost`` annotation),
goes below minCount, and is whole again in the same zone once its replacements are bound; the node is
then deleted and the pod GC removes its terminating pods."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
README = REPO / "examples" / "gang-health" / "README.md"
GUIDE = REPO / "docs" / "user-guide.md"
KUBECTL = shutil.which("kubectl")
STEPS_TIMEOUT = 240.0
ZONE = "topology.kubernetes.io/zone"


def shell_blocks(markdown: str) -> list[str]:
    return re.findall(r"^```sh\n(.*?)^```$", markdown, flags=re.DOTALL | re.MULTILINE)


def readme_command(block: str, program: str) -> list[str]:
    """The README's command line starting with ``program`` (its comment dropped)."""
    line = next(line for line in block.splitlines() if line.startswith(program + " "))
    return shlex.split(line, comments=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def stop(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=10)


@pytest.fixture
def cluster(
    tmp_path: Path, wait_until_healthy: Callable[[subprocess.Popen[str], int], None]
) -> Iterator[dict[str, str]]:
    """The README's two terminals: yields the environment its kubectl steps run in."""
    if KUBECTL is None:
        pytest.skip("kubectl is not installed")
    start = shell_blocks(README.read_text())[0]
    kubeconfig = tmp_path / "kubeconfig"
    sim_command = readme_command(start, "lockstep sim")
    run_command = readme_command(start, "lockstep run")
    lockstep = [sys.executable, "-m", "lockstep"]
    sim = subprocess.Popen(
        [*lockstep, *sim_command[1:], "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
    )
    assert sim.stdout is not None
    line = sim.stdout.readline()
    if not line.startswith("export KUBECONFIG="):
        stop(sim)
        raise AssertionError(f"lockstep sim did not start: {line!r}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env |= {"KUBECONFIG": str(kubeconfig), "KUBECACHEDIR": str(tmp_path / "kubectl-cache")}
    health_port = free_port()
    operator_env = env | {
        "LOCKSTEP_HEALTH_BIND_ADDRESS": f"127.0.0.1:{health_port}",
        "LOCKSTEP_METRICS_BIND_ADDRESS": f"127.0.0.1:{free_port()}",
    }
    log = (tmp_path / "operator.log").open("w")
    operator = subprocess.Popen(
        [*lockstep, *run_command[1:]], env=operator_env, stdout=log, stderr=log, text=True, cwd=REPO
    )
    try:
        wait_until_healthy(operator, health_port)
        yield env
    finally:
        stop(operator)
        log.close()
        stop(sim)


def kubectl_json(env: dict[str, str], *args: str) -> Any:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, *args, "-o", "json"], env=env, capture_output=True, text=True, timeout=30, check=True
    )
    return json.loads(done.stdout)


def test_the_example_recovers_a_keep_min_count_gang_from_a_lost_node(cluster: dict[str, str]) -> None:
    nodes_before = {n["metadata"]["name"] for n in kubectl_json(cluster, "get", "nodes")["items"]}
    steps = shell_blocks(README.read_text())[1]
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", steps],
        env=cluster,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=STEPS_TIMEOUT,
        check=False,
    )
    assert done.returncode == 0, f"the README's steps failed:\n{done.stdout}\n{done.stderr}"
    # the message the README quotes, printed while the gang was short
    assert "\n2 of minCount 4 members running or succeeded (2 running," in done.stdout, done.stdout

    nodes = {n["metadata"]["name"]: n for n in kubectl_json(cluster, "get", "nodes")["items"]}
    [lost] = nodes_before - set(nodes)  # the step deleting the lost node ran
    pods = kubectl_json(cluster, "get", "pods", "-n", "demo", "-l", "job-name=train")["items"]
    assert all(not p["metadata"].get("deletionTimestamp") for p in pods)  # the pod GC removed the rest
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == [
        "0",
        "1",
        "2",
        "3",
    ]
    assert lost not in {p["spec"]["nodeName"] for p in pods}
    # the README: node-000 to node-007 are zone-a, the rest zone-b; the replacements joined the
    # survivors in the lost node's zone
    lost_zone = "zone-a" if int(lost.removeprefix("node-")) < 8 else "zone-b"
    assert {nodes[p["spec"]["nodeName"]]["metadata"]["labels"][ZONE] for p in pods} == {lost_zone}
    group = kubectl_json(cluster, "get", "lpg", "train", "-n", "demo")
    satisfied = next(c for c in group["status"]["conditions"] if c["type"] == "PodGroupSatisfied")
    assert (satisfied["status"], satisfied["reason"]) == ("True", "MinCountSatisfied")
    assert group["status"]["running"] == 4


def test_the_user_guide_quotes_the_example_as_its_readme_has_it() -> None:
    """docs/user-guide.md ("Try it on lockstep sim") repeats the README's commands: none may drift."""
    guide = GUIDE.read_text()
    section = guide[guide.index("**Try it on `lockstep sim`.**") :]
    quoted = [shlex.split(line, comments=True) for line in shell_blocks(section)[0].splitlines() if line]
    readme = [
        shlex.split(line, comments=True) for b in shell_blocks(README.read_text()) for line in b.splitlines()
    ]
    missing = [" ".join(command) for command in quoted if command not in readme]
    assert not missing, (
        f"commands of the user guide that examples/gang-health/README.md does not run: {missing}"
    )
