"""Start-up: from the exec of ``lockstep run`` to its first and its last binding, everything pre-created.

``python bench/startup.py [--nodes 1000] [--pods 5000] [--gang-size 8] [--runs 3] [--json]
[--tree NAME=DIR ...] [--until-first-bind] [--shutdown | --takeover term|kill]``

As the kube-scheduler comparison was measured: ``lockstep sim`` runs with the nodes, then every
PodGroup and pod is created (nothing is scheduled, no operator runs), a watch on the pods is opened,
and only then is ``lockstep run --no-leader-elect`` exec'd. The clock runs from just before the exec
to the first and the last ``spec.nodeName`` the watch sees, and the CPU time the operator (and the
emulator) spent until the watch saw the first one (sampled every 10 ms from /proc: on a loaded
machine it varies less than the wall clock). Also reported: the operator's import time
(what ``lockstep run`` imports before it connects: ``lockstep.controller.main``, ``.runtime`` and
``lockstep.kube.credentials``; best of 5 fresh interpreters) and, per gang, the time from its first to
its last member bound. Each tree's ``lockstep`` package is byte-compiled first, as installed in the
image.

``--shutdown``: SIGTERM once half the pods are bound (binding cycles in flight), then the time to the
operator's exit, to its 'stopped' line (the signal's wait for the shutdown to start, drain, last
PodGroup statuses and Events, lease release: its log runs at info for it), from that line to the
exit, and what its 'closed' line says ending its tasks, Kopf and the sessions took; every gang must
be bound whole or not at all.

``--takeover term|kill``: two replicas with leader election (the defaults: 15 s lease, 2 s retry
period). The second starts once the first holds the Lease, and is a warm standby 3 s after its
/metrics answer (its informers are primed by then, Kopf started). The leader is then SIGTERMed (it
drains and releases the Lease) or SIGKILLed (the Lease expires) while pods are still pending.
Measured: from the leader's loss (the released Lease seen, or the SIGKILL plus the lease duration)
to the standby's acquireTime, and from that acquireTime (the standby's clock, the same machine's) to
the first binding the watch sees after it; for ``term``, the leader's 'stopped' line (both replicas
log at info).

``--tree before=/tmp/old/operator --tree after=operator`` compares source trees (each a directory
holding the ``lockstep`` package; the emulator and the operator both run from it): their runs
alternate, so that they share the machine's load, and each tree gets its own rows.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from harness.api import ApiClient, ApiError, load_kubeconfig
from harness.loadgen import CompletionWatcher, LoadGenerator, create_setup
from harness.procs import LOCKSTEP, Child, ProcessFailed, free_port, start_operator, start_sim
from harness.results import gang_bind_spreads, spread_summary
from harness.runner import node_shape
from harness.tracker import Tracker
from harness.trees import add_shape_and_tree_arguments, parse_trees
from harness.workloads import startup_workload

IMPORT_PROBE = (
    "import time; t = time.perf_counter(); import lockstep.controller.main as m; "
    "m.skip_manifest_validation_import(); import lockstep.controller.runtime, lockstep.kube.credentials; "
    "print(time.perf_counter() - t)"
)


def import_seconds(envs: dict[str, dict[str, str] | None], tries: int = 5) -> dict[str, float]:
    """Per tree, the best of ``tries`` fresh interpreters importing the operator's entry module; the
    trees take turns."""
    best = dict.fromkeys(envs, float("inf"))
    for _ in range(tries):
        for name, env in envs.items():
            out = subprocess.run(
                [sys.executable, "-c", IMPORT_PROBE], check=True, capture_output=True, text=True, env=env
            )
            best[name] = min(best[name], float(out.stdout.strip()))
    return best


def compile_bytecode(env: dict[str, str] | None = None) -> None:
    """Byte-compile the ``lockstep`` package that ``env`` imports, as ``pip install`` does in the
    image. Without it every exec compiled the operator's source again wherever PYTHONDONTWRITEBYTECODE
    is set (this machine): 0.2 s more CPU per start than a deployed operator spends."""
    compile_package = (
        "import compileall, pathlib, lockstep; "
        "compileall.compile_dir(pathlib.Path(lockstep.__file__).parent, quiet=1)"
    )
    subprocess.run([sys.executable, "-c", compile_package], check=True, env=env)


def tree_env(directory: str | None) -> dict[str, str] | None:
    """The environment for processes running the ``lockstep`` package of ``directory``."""
    if directory is None:
        return None
    return {**os.environ, "PYTHONPATH": str(Path(directory).resolve())}


LEASE = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/lockstep"
# lockstep run's defaults, passed explicitly: the SIGKILLed leader's Lease is acquirable this long after
LEASE_SECONDS = 15.0
RETRY_PERIOD_SECONDS = 2.0
# How long the standby runs after its /metrics answer before the leader is lost: Kopf starts with
# /metrics, on a thread; a standby of a real deployment has been up for much longer.
STANDBY_SETTLE_SECONDS = 3.0


def start_replica(kubeconfig: Path, workdir: Path, name: str, env: dict[str, str] | None) -> Child:
    """``lockstep run`` with leader election on (the default Lease kube-system/lockstep)."""
    child = Child(
        f"lockstep run ({name})",
        [
            *LOCKSTEP, "run", "--kubeconfig", str(kubeconfig),
            "--metrics-bind-address", f"127.0.0.1:{free_port()}",
            "--health-bind-address", f"127.0.0.1:{free_port()}",
            "--log-format", "json", "--log-level", os.environ.get("LOCKSTEP_BENCH_LOG_LEVEL", "warning"),
            "--lease-duration-seconds", str(LEASE_SECONDS),
            "--retry-period-seconds", str(RETRY_PERIOD_SECONDS),
        ],
        workdir / f"operator-{name}.log",
        env,
    )  # fmt: skip
    child.metrics_url = child.argv[child.argv.index("--metrics-bind-address") + 1]
    return child


async def lease_spec(client: ApiClient) -> dict[str, Any]:
    try:
        lease = await client.get(LEASE)
    except ApiError as exc:
        if exc.status == 404:
            return {}
        raise
    spec: dict[str, Any] = lease.get("spec") or {}
    return spec


def monotonic_of(timestamp: str) -> float:
    """A Lease's MicroTime on this process's monotonic clock."""
    wall = datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC).timestamp()
    return wall - time.time() + time.monotonic()


async def metrics_served(address: str) -> bool:
    """Whether ``lockstep run`` serves /metrics at ``address``: it does once its informers are
    primed (and at least ``DEFERRED_START_SECONDS`` later); its port accepts connections before."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(*address.rsplit(":", 1)), 1.0)
    except (OSError, TimeoutError):
        return False
    try:
        writer.write(b"GET /metrics HTTP/1.0\r\n\r\n")
        status_line = await asyncio.wait_for(reader.readline(), 1.0)
    except (OSError, TimeoutError):
        return False
    finally:
        writer.close()
    return status_line.split()[1:2] == [b"200"]


async def take_over(
    client: ApiClient, tracker: Tracker, watcher: CompletionWatcher, kubeconfig: Path, workdir: Path,
    env: dict[str, str] | None, how: str,
) -> dict[str, Any]:  # fmt: skip
    """Leader, warm standby, leader lost; see the module's doc."""
    leader = start_replica(kubeconfig, workdir, "leader", env)
    standby: Child | None = None
    try:
        deadline = time.monotonic() + 120.0
        while not (leader_identity := (await lease_spec(client)).get("holderIdentity")):
            leader.check_alive()
            if time.monotonic() > deadline:
                raise ProcessFailed("the first replica never took the Lease")
            await asyncio.sleep(0.01)
        standby = start_replica(kubeconfig, workdir, "standby", env)
        assert standby.metrics_url is not None
        while not await metrics_served(standby.metrics_url):
            standby.check_alive()
            watcher.check()
            if time.monotonic() > deadline:
                raise ProcessFailed("the standby's /metrics never answered")
            await asyncio.sleep(0.05)
        await asyncio.sleep(STANDBY_SETTLE_SECONDS)
        if tracker.complete.is_set():
            raise ProcessFailed("the leader bound every pod before the standby was warm: use more --pods")
        bound_before = tracker.bound_count
        leader_lost = time.monotonic()
        released: float | None = None
        if how == "kill":
            leader.process.kill()
            released = leader_lost + LEASE_SECONDS
        else:
            leader.process.send_signal(signal.SIGTERM)
        while True:
            spec = await lease_spec(client)
            if released is None and not spec.get("holderIdentity"):
                released = time.monotonic()
            if spec.get("holderIdentity") not in (None, "", leader_identity):
                break
            standby.check_alive()
            if time.monotonic() > leader_lost + 60.0:
                raise ProcessFailed("the standby did not take the Lease within 60 s")
            await asyncio.sleep(0.01)
        acquired = monotonic_of(spec["acquireTime"])
        if released is None:  # released and taken between two polls
            released = acquired
        while not any(t.bound_at and t.bound_at > acquired for t in tracker.pods.values()):
            standby.check_alive()
            watcher.check()
            if time.monotonic() > acquired + 60.0:
                raise ProcessFailed("the new leader bound nothing within 60 s")
            await asyncio.sleep(0.005)
        first = min(t.bound_at for t in tracker.pods.values() if t.bound_at and t.bound_at > acquired)
        with contextlib.suppress(subprocess.TimeoutExpired):
            leader.process.wait(10.0)
        stopped = log_line(leader.log, "stopped")
        return {
            "how": how,
            "bound_by_the_first_leader": bound_before,
            "loss_to_released_s": round(released - leader_lost, 3),
            "released_to_acquired_s": round(acquired - released, 3),
            "acquired_to_first_bind_s": round(first - acquired, 3),
            "leader_signal_drain_status_events_release_s": "/".join(
                str(stopped.get(f"{step}_seconds"))
                for step in ("signal", "drain", "status_flush", "event_flush", "release")
            ),
        }
    finally:
        leader.stop()
        if standby is not None:
            standby.stop()


def log_line(log: Path, event: str) -> dict[str, Any]:
    """The last line of ``event`` the operator logged. 'stopped': its seconds (from the stop flag
    through drain, flush and lease release) and, where the operator logs them, those of its drain,
    its status and Event flushes and the signal's wait for the shutdown to start; 'closed': what its
    tasks, Kopf and the sessions took to end after that."""
    for line in reversed(log.read_text(errors="replace").splitlines()):
        if f'"{event}"' in line:
            with contextlib.suppress(ValueError):
                fields: dict[str, Any] = json.loads(line)
                if fields.get("event") == event:
                    return fields
    return {}


async def shut_down(tracker: Tracker, watcher: CompletionWatcher, operator: Child) -> dict[str, Any]:
    """SIGTERM with half the pods bound; see the module's doc."""
    while tracker.bound_count < tracker.target // 2:
        operator.check_alive()
        watcher.check()
        await asyncio.sleep(0.005)
    bound_at_sigterm = tracker.bound_count
    sigterm = time.monotonic()
    operator.process.send_signal(signal.SIGTERM)
    while operator.process.poll() is None:
        if time.monotonic() > sigterm + 60.0:
            raise ProcessFailed("lockstep run did not exit within 60 s of SIGTERM")
        await asyncio.sleep(0.002)
    exited = time.monotonic() - sigterm
    await asyncio.sleep(1.0)  # the watch catches up with the last bindings
    bound: dict[str, int] = {}
    for times in tracker.pods.values():
        bound[times.gang] = bound.get(times.gang, 0) + (times.bound_at is not None)
    partial = sorted(gang for gang, count in bound.items() if 0 < count < tracker.gang_sizes[gang])
    line = log_line(operator.log, "stopped")
    closed = log_line(operator.log, "closed")
    stopped = line.get("seconds")
    if stopped is not None:
        stopped += line.get("signal_seconds") or 0.0
    return {
        "bound_at_sigterm": bound_at_sigterm,
        "bound_at_exit": tracker.bound_count,
        "exit_code": operator.process.returncode,
        "sigterm_to_exit_s": round(exited, 3),
        "sigterm_to_stopped_s": None if stopped is None else round(stopped, 3),
        "signal_s": line.get("signal_seconds"),
        "drain_s": line.get("drain_seconds"),
        "status_flush_s": line.get("status_flush_seconds"),
        "event_flush_s": line.get("event_flush_seconds"),
        "release_s": line.get("release_seconds"),
        "stopped_to_exit_s": round(exited - stopped, 3) if stopped is not None else None,
        "close_tasks_kopf_sessions_s": "/".join(
            str(closed.get(f"{step}_seconds")) for step in ("tasks", "kopf", "sessions")
        ),
        "gangs_partly_bound": partial,
    }


async def one_run(
    nodes: int,
    pods: int,
    gang_size: int,
    workdir: Path,
    env: dict[str, str] | None = None,
    mode: str = "startup",
    until_first_bind: bool = False,
) -> dict[str, Any]:
    workload = startup_workload(nodes, pods, gang_size)
    sim = await start_sim(nodes, 0, workdir, env=env)
    operator = None
    try:
        kubeconfig = workdir / "kubeconfig"
        async with ApiClient(load_kubeconfig(kubeconfig), connections=16) as client:
            listing = await client.get("/api/v1/nodes", {"limit": "1"})
            shape = node_shape(listing["items"][0])
            await create_setup(client, workload)
            tracker = Tracker(workload.pods_expected)
            await LoadGenerator(client, tracker, shape).run(workload.gangs)
            tracker.creation_finished()
            watcher = CompletionWatcher(client, tracker)
            await watcher.start()
            if mode in ("term", "kill"):
                result = await take_over(client, tracker, watcher, kubeconfig, workdir, env, mode)
                await watcher.stop()
                return {**result, "nodes": nodes, "pods": workload.pods_expected}
            sim_cpu_at_exec = sim.usage().cpu_seconds
            exec_at = time.monotonic()
            operator = start_operator(kubeconfig, workdir, env)
            if mode == "shutdown":
                result = await shut_down(tracker, watcher, operator)
                await watcher.stop()
                return {**result, "nodes": nodes, "pods": workload.pods_expected}
            deadline = exec_at + 300.0
            cpu_at_first_bind: tuple[float, float] | None = None
            while not tracker.complete.is_set() and not (until_first_bind and cpu_at_first_bind):
                operator.check_alive()
                watcher.check()
                if time.monotonic() > deadline:
                    raise ProcessFailed(
                        f"lockstep run bound {tracker.bound_count} of {workload.pods_expected} pods in 300 s"
                    )
                if cpu_at_first_bind is None and tracker.bound_count:
                    cpu_at_first_bind = (operator.usage().cpu_seconds, sim.usage().cpu_seconds)
                await asyncio.sleep(0.05 if cpu_at_first_bind else 0.01)
            await watcher.stop()
            bound = [t.bound_at for t in tracker.pods.values() if t.bound_at is not None]
            first, last = min(bound) - exec_at, max(bound) - exec_at
            if until_first_bind:
                last = float("nan")
            return {
                "nodes": nodes,
                "pods": workload.pods_expected,
                "gang_size": gang_size,
                "exec_to_first_bind_s": round(first, 3),
                "exec_to_all_bound_s": round(last, 3),
                "operator_cpu_to_first_bind_s": round(cpu_at_first_bind[0], 2) if cpu_at_first_bind else None,
                "sim_cpu_to_first_bind_s": round(cpu_at_first_bind[1] - sim_cpu_at_exec, 2)
                if cpu_at_first_bind
                else None,
                "pods_per_s_from_exec": round(workload.pods_expected / last, 1),
                "gang_bind_spread": spread_summary(gang_bind_spreads(tracker.pods)),
            }
    finally:
        if operator is not None:
            operator.stop()
        sim.stop()


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/startup.py", description=__doc__.splitlines()[0])
    add_shape_and_tree_arguments(parser, "--runs", 3)
    parser.add_argument(
        "--until-first-bind",
        action="store_true",
        help="stop each run at its first binding (on a loaded machine binding everything takes minutes)",
    )
    modes = parser.add_mutually_exclusive_group()
    modes.add_argument(
        "--shutdown", action="store_true", help="SIGTERM with half the pods bound, time to exit"
    )
    modes.add_argument(
        "--takeover",
        choices=("term", "kill"),
        help="leader and warm standby; the leader SIGTERMed or SIGKILLed",
    )
    args = parser.parse_args(argv)
    args.mode = "shutdown" if args.shutdown else args.takeover or "startup"
    args.trees = parse_trees(parser, args)
    return args


def summary(runs: list[dict[str, Any]], import_s: float) -> dict[str, Any]:
    return {
        "import_s": round(import_s, 3),
        "runs": runs,
        "median_exec_to_first_bind_s": statistics.median(r["exec_to_first_bind_s"] for r in runs),
        "median_exec_to_all_bound_s": statistics.median(r["exec_to_all_bound_s"] for r in runs),
        "median_operator_cpu_to_first_bind_s": statistics.median(
            r["operator_cpu_to_first_bind_s"] for r in runs
        ),
    }


def print_table(name: str, result: dict[str, Any]) -> None:
    print(f"{name + ': ' if name else ''}operator import time: {result['import_s']:.3f} s (best of 5)")
    print(
        "| run | exec -> first bind | CPU to first bind: operator / emulator | exec -> all bound | pods/s "
        "| gang spread p50 / p99 / max | > 1 s |"
    )
    print("|---|---|---|---|---|---|---|")
    for i, r in enumerate(result["runs"], 1):
        s = r["gang_bind_spread"]
        print(
            f"| {i} | {r['exec_to_first_bind_s']:.2f} s | {r['operator_cpu_to_first_bind_s']:.2f} / "
            f"{r['sim_cpu_to_first_bind_s']:.2f} s | {r['exec_to_all_bound_s']:.2f} s | "
            f"{r['pods_per_s_from_exec']:.0f} | {s['p50']:.3f} / {s['p99']:.3f} / {s['max']:.3f} s | "
            f"{s['over_1s']} |"
        )


def print_runs(name: str, runs: list[dict[str, Any]]) -> None:
    """One row per --shutdown or --takeover run, its fields as columns."""
    columns = [key for key in runs[0] if key not in ("nodes", "pods")]
    print(f"{name + ': ' if name else ''}{runs[0]['nodes']} nodes, {runs[0]['pods']} pods")
    print("| run | " + " | ".join(columns) + " |")
    print("|---" * (len(columns) + 1) + "|")
    for i, run in enumerate(runs, 1):
        print(f"| {i} | " + " | ".join(str(run[key]) for key in columns) + " |")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.mode in ("shutdown", "term"):
        os.environ["LOCKSTEP_BENCH_LOG_LEVEL"] = "info"  # the operator's 'stopped' line
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.trees}
    for directory in args.trees.values():
        compile_bytecode(tree_env(directory))
    for _ in range(args.runs):
        for name, directory in args.trees.items():
            env = tree_env(directory)
            with tempfile.TemporaryDirectory(prefix="lockstep-startup-") as tmp:
                run = one_run(
                    args.nodes, args.pods, args.gang_size, Path(tmp), env, args.mode, args.until_first_bind
                )
                runs[name].append(asyncio.run(run))
    if args.mode != "startup":
        if args.json:
            print(json.dumps(runs))
        for name, tree_runs in runs.items():
            print_runs(name, tree_runs)
        return 0
    imports = import_seconds({name: tree_env(directory) for name, directory in args.trees.items()})
    results = {name: summary(runs[name], imports[name]) for name in args.trees}
    if args.json:
        print(json.dumps(results.get("", {"trees": results})))
        return 0
    for name, result in results.items():
        print_table(name, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
