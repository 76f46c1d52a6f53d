"""``lockstep sim`` with room for more pods per node: ``python bench/harness/bigsim.py --max-pods N ...``.

The shared-claim workload puts a whole 1,000-pod gang on the one node whose device its claim gets,
which the emulator's default node (110 pods, like a kubelet's default) cannot hold. Everything
else is ``lockstep sim`` itself: the same SimCluster, the same kubeconfig and shutdown.
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
    parser.add_argument("--max-pods", type=int, required=True, help="allocatable pods of every node")
    args = parser.parse_args(argv)
    if args.max_pods < 1:
        parser.error(f"--max-pods must be at least 1, got {args.max_pods}")
    configure_logging(fmt="console", level="warning", stream=sys.stderr)
    cluster = SimCluster(
        nodes=args.nodes,
        devices_per_node=args.devices_per_node,
        port=args.port,
        shape=NodeShape(pods=args.max_pods),
    )
    return asyncio.run(run_until_stopped(cluster, args.kubeconfig))


if __name__ == "__main__":
    sys.exit(main())
