"""DRA bindings with every object created before the operator starts, through the API:
``python bench/precreated.py [--scale 0.2]``.

As issue 29 measured on a real API server: ``lockstep sim`` with claim-template's cluster (500 nodes x
8 devices at scale 1.0), the claim template and every gang (PodGroup and pods, gangs of 4, one
template claim per pod) created, and the emulator's resourceclaim controller done making the claims;
only then ``lockstep run`` starts. Every second from its start it prints the server's cumulative
counts of bindings, claim finalizer writes (``patch resourceclaims``) and claim status writes, so a
backlog of PreBind writes that holds the bindings back shows as bindings lagging the claim writes.
"""

from __future__ import annotations

import argparse
import asyncio
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
from harness.workloads import build, cluster_size

WORKLOAD = "claim-template"
CLAIMS_TIMEOUT_SECONDS = 900.0
BIND_TIMEOUT_SECONDS = 600.0
COUNTED = {
    "bindings": "create pods/binding",
    "claim finalizers": "patch resourceclaims",
    "claim statuses": "patch resourceclaims/status",
}


async def measure(scale: float, workdir: Path) -> list[tuple[int, dict[str, int]]]:
    """(second since ``lockstep run`` started, cumulative server counts) until every pod that fits is
    bound."""
    nodes, devices = cluster_size(WORKLOAD, scale)
    sim = await start_sim(nodes, devices, workdir)
    operator = None
    try:
        async with ApiClient(load_kubeconfig(workdir / "kubeconfig")) as client:
            shape = node_shape((await client.get("/api/v1/nodes"))["items"][0])
            workload = build(WORKLOAD, scale, shape, DRIVER)
            await create_setup(client, workload)
            tracker = Tracker(workload.pods_expected)
            watcher = CompletionWatcher(client, tracker)
            await watcher.start()
            await LoadGenerator(client, tracker, shape).run(workload.gangs)
            tracker.creation_finished()
            print(f"[precreated] {workload.pods_total:,} pods created; waiting for their claims", flush=True)
            deadline = time.monotonic() + CLAIMS_TIMEOUT_SECONDS
            while tracker.awaiting_claims:
                watcher.check()
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{len(tracker.awaiting_claims)} pods still without their claim")
                await asyncio.sleep(1.0)
            before = server_counts(await client.admin("/__sim/stats"))
            operator = start_operator(workdir / "kubeconfig", workdir)
            started = time.monotonic()
            samples: list[tuple[int, dict[str, int]]] = []
            second = 0
            while tracker.counted_bound < workload.pods_expected:
                watcher.check()
                operator.check_alive()
                if time.monotonic() - started > BIND_TIMEOUT_SECONDS:
                    print(f"[precreated] timed out: {tracker.counted_bound} bound", file=sys.stderr)
                    break
                second += 1
                await asyncio.sleep(max(0.0, started + second - time.monotonic()))
                now = server_counts(await client.admin("/__sim/stats"))
                samples.append(
                    (second, {name: now.get(key, 0) - before.get(key, 0) for name, key in COUNTED.items()})
                )
            await watcher.stop()
            return samples
    finally:
        if operator is not None:
            operator.stop()
        sim.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="bench/precreated.py", description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1.0, help="nodes and pods x this (default 1.0)")
    args = parser.parse_args(argv)
    if args.scale <= 0:
        parser.error(f"--scale must be positive, got {args.scale}")
    with tempfile.TemporaryDirectory(prefix="lockstep-precreated-") as tmp:
        samples = asyncio.run(measure(args.scale, Path(tmp)))
    for name in COUNTED:
        print(f"{name} by second: {', '.join(str(counts[name]) for _, counts in samples)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
