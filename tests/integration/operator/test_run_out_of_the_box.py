"""``lockstep run`` on a fresh cluster needs no flags: ``lockstep sim`` in one process, ``lockstep run``
in another, and the examples are scheduled. A Lease namespace that does not exist stops it at once,
saying how to fix it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

from lockstep.demo import apply, collect, find_examples_dir, load_examples
from lockstep.kube.client import LEASES, KubeClient
from lockstep.kube.credentials import load_connection_info
from lockstep.sim.registry import OPTIONAL_CRDS

REPO = Path(__file__).resolve().parents[3]
# Only so that parallel test runs on one machine do not fight over ports 8080 and 9090.
FREE_PORTS = {"LOCKSTEP_METRICS_BIND_ADDRESS": "127.0.0.1:0", "LOCKSTEP_HEALTH_BIND_ADDRESS": "127.0.0.1:0"}


@contextlib.asynccontextmanager
async def lockstep(
    *args: str, env: dict[str, str] | None = None
) -> AsyncIterator[asyncio.subprocess.Process]:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "lockstep",
        *args,
        cwd=REPO,
        env={**os.environ, **(env or {})},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        yield process
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


async def started_sim(process: asyncio.subprocess.Process) -> str:
    """The KUBECONFIG ``lockstep sim`` prints once its cluster is up."""
    assert process.stdout is not None
    while True:
        line = (await asyncio.wait_for(process.stdout.readline(), 60)).decode()
        assert line, "lockstep sim ended before printing its KUBECONFIG"
        if line.startswith("export KUBECONFIG="):
            return line.strip().split("=", 1)[1]


async def test_sim_and_run_in_two_processes_schedule_the_examples() -> None:
    # lockstep run without flags: no feature gate, no gang inferred for unlabelled pods
    examples = [e for e in load_examples(find_examples_dir()) if not e.gates and not e.infer]
    expected = {f"{ns}/{name}": ex.expect for ex in examples if ex.expect for ns, name in ex.podgroups}
    assert len(expected) >= 4
    # other schedulers' CRDs are opt-in on lockstep sim (the workload operators' are served)
    async with lockstep("sim", "--install-crds", ",".join(OPTIONAL_CRDS)) as sim:
        kubeconfig = await started_sim(sim)
        async with (
            lockstep("run", env={"KUBECONFIG": kubeconfig, **FREE_PORTS}) as run,
            KubeClient(await load_connection_info(kubeconfig)) as client,
        ):
            for example in examples:
                await apply(client, example, open(os.devnull, "w"))  # noqa: SIM115, ASYNC230
            deadline = time.monotonic() + 90
            views = await collect(client, expected)
            while not all(v.done for v in views) and time.monotonic() < deadline and run.returncode is None:
                await asyncio.sleep(0.5)
                views = await collect(client, expected)
            assert all(v.done for v in views), [(v.name, v.expect, v.phase, v.why) for v in views]
            lease = await client.get(LEASES, "kube-system", "lockstep")
            assert lease["spec"]["holderIdentity"]
            run.send_signal(signal.SIGTERM)
            _, stderr = await asyncio.wait_for(run.communicate(), 30)
            assert run.returncode == 0
            # It exits without the interpreter's teardown, once its shutdown is done: the lease is
            # released and the last log lines are out.
            lines = stderr.splitlines()
            assert b'"stopped"' in lines[-2] and b'"closed"' in lines[-1]
            assert (await client.get(LEASES, "kube-system", "lockstep"))["spec"]["holderIdentity"] == ""


async def test_a_missing_lease_namespace_stops_run_with_the_fix() -> None:
    async with lockstep("sim", "--nodes", "1") as sim:
        kubeconfig = await started_sim(sim)
        env = {"KUBECONFIG": kubeconfig, "LOCKSTEP_LOG_FORMAT": "json", **FREE_PORTS}
        async with lockstep("run", "--lease-namespace", "lockstep-system", env=env) as run:
            _, stderr = await asyncio.wait_for(run.communicate(), 60)
    assert run.returncode == 1
    text = stderr.decode()
    assert "namespace 'lockstep-system' does not exist" in text
    assert "kubectl create namespace lockstep-system" in text
    assert text.count("cannot create the leader-election Lease") == 1  # stopped, not retried
