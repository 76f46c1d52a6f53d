"""DRA bindings with every object created before the operator starts, through the API:
``python bench/precreated.py [--workload claim-template] [--scale 0.2] [--write-latency-ms 10]``.

As issue 29 measured on a real API server: ``lockstep sim`` with the workload's cluster, every gang
(PodGroup and pods) created, and for ``claim-template`` (gangs of 4, one template claim per pod) the
emulator's resourceclaim controller done making the claims; only then ``lockstep run`` starts.
``shared-claim`` is one PodGroup of 1,000 pods sharing one PodGroup claim; ``group-claim`` is
claim-template's 1,250 gangs of 4 with one PodGroup claim per gang instead of a claim per pod
(lockstep makes those claims at PreBind). Every second from the operator's start it prints the
server's cumulative counts of bindings and of claim creates, finalizer writes (``patch
resourceclaims``) and status writes, so a backlog of PreBind writes that holds the bindings back shows
as bindings lagging the claim writes. ``--write-latency-ms`` makes every write wait that long before
it is applied (``lockstep sim --write-latency-ms``), as etcd's commit makes kube-apiserver's writes
wait; ``--operator-tree`` runs another tree's operator against this tree's emulator.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from harness.api import ApiClient, load_kubeconfig
from harness.loadgen import CompletionWatcher, LoadGenerator, create_setup
from harness.procs import start_operator, start_sim
from harness.runner import DRIVER, node_shape, server_counts
from harness.tracker import Tracker
from harness.workloads import (
    GangSpec,
    NodeShape,
    Workload,
    build,
    claim_template_manifest,
    cluster_size,
    max_pods_per_node,
)

WORKLOADS = ("claim-template", "shared-claim", "group-claim")
CLAIMS_TIMEOUT_SECONDS = 900.0
BIND_TIMEOUT_SECONDS = 600.0
COUNTED = {
    "bindings": "create pods/binding",
    "claim creates": "create resourceclaims",
    "claim finalizers": "patch resourceclaims",
    "claim statuses": "patch resourceclaims/status",
}


def group_claim(scale: float, shape: NodeShape) -> Workload:
    """claim-template's cluster and gangs, each gang sharing one PodGroup claim (one device)."""
    template = build("claim-template", scale, shape, DRIVER)
    gangs = tuple(
        GangSpec(f"group-{i}", pods=4, min_count=4, cpu_millis=100, claim="group")
        for i in range(len(template.gangs))
    )
    return Workload(
        name="group-claim",
        description=f"{template.nodes:,} nodes, {len(gangs):,} gangs of 4 each sharing a PodGroup claim",
        nodes=template.nodes,
        devices_per_node=template.devices_per_node,
        gangs=gangs,
        pods_expected=sum(g.pods for g in gangs),
        setup=(claim_template_manifest(DRIVER),),
    )


async def measure(
    name: str, scale: float, workdir: Path, write_latency_ms: float, operator_env: dict[str, str] | None
) -> list[dict[str, int]]:
    """Cumulative server counts at the end of every second since ``lockstep run`` started, until
    every pod that fits is bound."""
    nodes, devices = cluster_size("claim-template" if name == "group-claim" else name, scale)
    sim = await start_sim(
        nodes,
        devices,
        workdir,
        max_pods=max_pods_per_node(name, scale),
        write_latency_ms=write_latency_ms,
    )
    operator = None
    try:
        async with ApiClient(load_kubeconfig(workdir / "kubeconfig")) as client:
            shape = node_shape((await client.get("/api/v1/nodes"))["items"][0])
            workload = (
                group_claim(scale, shape) if name == "group-claim" else build(name, scale, shape, DRIVER)
            )
            await create_setup(client, workload)
            tracker = Tracker(workload.pods_expected)
            watcher = CompletionWatcher(client, tracker)
            await watcher.start()
            await LoadGenerator(client, tracker, shape).run(workload.gangs, workload.gangs_in_flight)
            tracker.creation_finished()
            print(f"[precreated] {workload.pods_total:,} pods created; waiting for their claims", flush=True)
            deadline = time.monotonic() + CLAIMS_TIMEOUT_SECONDS
            while tracker.awaiting_claims:
                watcher.check()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(tracker.awaiting_claims)} pods still without their claim")
                await asyncio.sleep(1.0)
            before = server_counts(await client.admin("/__sim/stats"))
            operator = start_operator(workdir / "kubeconfig", workdir, operator_env)
            started = time.monotonic()
            samples: list[dict[str, int]] = []
            while tracker.counted_bound < workload.pods_expected:
                watcher.check()
                operator.check_alive()
                if time.monotonic() - started > BIND_TIMEOUT_SECONDS:
                    print(f"[precreated] timed out: {tracker.counted_bound} bound", file=sys.stderr)
                    break
                await asyncio.sleep(max(0.0, started + len(samples) + 1 - time.monotonic()))
                now = server_counts(await client.admin("/__sim/stats"))
                samples.append(
                    {label: now.get(key, 0) - before.get(key, 0) for label, key in COUNTED.items()}
                )
            await watcher.stop()
            return samples
    finally:
        if operator is not None:
            operator.stop()
        sim.stop()


def summary(samples: Sequence[dict[str, int]]) -> str:
    """When the first write and the first binding came, and the seconds after the first binding that
    bound nothing while pods were left to bind."""
    writes = [sum(v for k, v in s.items() if k != "bindings") for s in samples]
    bound = [s["bindings"] for s in samples]
    first_write = next((i + 1 for i, w in enumerate(writes) if w), None)
    first_bound = next((i + 1 for i, b in enumerate(bound) if b), None)
    if first_bound is None:
        return f"first claim write at second {first_write}; nothing bound"
    flat = [
        i + 1 for i in range(first_bound, len(bound)) if bound[i] == bound[i - 1] and bound[i] < bound[-1]
    ]
    return (
        f"first claim write at second {first_write}, first binding at second {first_bound}, "
        f"all {bound[-1]:,} bound by second {len(bound)}; seconds after the first binding that bound "
        f"nothing: {len(flat)} {flat[:20]}"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/precreated.py", description=__doc__.splitlines()[0])
    parser.add_argument("--workload", choices=WORKLOADS, default="claim-template")
    parser.add_argument("--scale", type=float, default=1.0, help="nodes and pods x this (default 1.0)")
    parser.add_argument(
        "--write-latency-ms", type=float, default=0.0, help="the emulator's write latency (default 0)"
    )
    parser.add_argument(
        "--operator-tree",
        type=Path,
        default=None,
        help="the directory holding the lockstep package the operator runs (default: this tree's)",
    )
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale must be positive, got {args.scale}")
    if args.write_latency_ms < 0:
        parser.error(f"--write-latency-ms must not be negative, got {args.write_latency_ms}")
    operator_env = None
    if args.operator_tree is not None:
        if not (args.operator_tree / "lockstep").is_dir():
            parser.error(f"--operator-tree {args.operator_tree}: no lockstep package in it")
        operator_env = {**os.environ, "PYTHONPATH": str(args.operator_tree.resolve())}
    with tempfile.TemporaryDirectory(prefix="lockstep-precreated-") as tmp:
        samples = asyncio.run(
            measure(args.workload, args.scale, Path(tmp), args.write_latency_ms, operator_env)
        )
    for label in COUNTED:
        print(f"{label} by second: {', '.join(str(counts[label]) for counts in samples)}")
    print(summary(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
