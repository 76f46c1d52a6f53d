"""``lockstep sim`` for big shapes: ``python bench/harness/bigsim.py [--max-pods N] [--start-timeout S] ...``.

The shared-claim workload puts a whole 1,000-pod gang on the one node whose device its claim gets,
which the emulator's default node (110 pods, like a kubelet's default) cannot hold. Clusters of
15,000 and 20,000 nodes take longer to create than ``lockstep sim``'s 60 s start-up limit on a busy
machine. Everything else is ``lockstep sim`` itself: the same SimCluster, the same kubeconfig and
shutdown.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

from lockstep.logging import configure_logging
from lockstep.sim.cli import run_until_stopped
from lockstep.sim.cluster import NodeShape, SimCluster


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="bigsim.py", description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--devices-per-node", type=int, required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument(
        "--max-pods", type=int, default=NodeShape().pods, help="allocatable pods of every node"
    )
    parser.add_argument(
        "--start-timeout", type=float, default=60.0, help="seconds to create the nodes and start up"
    )
    parser.add_argument(
        "--write-latency-ms", type=float, default=0.0, help="as lockstep sim's: each write waits this long"
    )
    args = parser.parse_args(argv)
    if args.write_latency_ms < 0:
        parser.error(f"--write-latency-ms must not be negative, got {args.write_latency_ms}")
    if args.max_pods < 1:
        parser.error(f"--max-pods must be at least 1, got {args.max_pods}")
    if args.start_timeout <= 0:
        parser.error(f"--start-timeout must be positive, got {args.start_timeout}")
    configure_logging(fmt="console", level="warning", stream=sys.stderr)
    cluster = SimCluster(
        nodes=args.nodes,
        devices_per_node=args.devices_per_node,
        port=args.port,
        shape=NodeShape(pods=args.max_pods),
        start_timeout=args.start_timeout,
        write_latency=args.write_latency_ms / 1000,
    )
    return asyncio.run(run_until_stopped(cluster, args.kubeconfig))


if __name__ == "__main__":
    sys.exit(main())
