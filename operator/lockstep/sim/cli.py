"""``lockstep sim``: run the simulated cluster until Ctrl-C or SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
from pathlib import Path

import yaml

from lockstep.logging import configure_logging
from lockstep.sim.cluster import OWNER_KINDS, SimCluster
from lockstep.sim.controllers.dra_driver import DRIVER_NAME
from lockstep.sim.features import FeatureGates
from lockstep.sim.registry import OPTIONAL_CRDS
from lockstep.sim.versions import kube_version

CONTEXT_NAME = "lockstep-sim"
USAGE_EXIT = 2


def kubeconfig(server_url: str, namespace: str = "default") -> dict[str, object]:
    """A kubeconfig for the plain-http emulator (it needs no credentials)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": CONTEXT_NAME, "cluster": {"server": server_url}}],
        "users": [{"name": CONTEXT_NAME, "user": {}}],
        "contexts": [
            {
                "name": CONTEXT_NAME,
                "context": {"cluster": CONTEXT_NAME, "user": CONTEXT_NAME, "namespace": namespace},
            }
        ],
        "current-context": CONTEXT_NAME,
        "preferences": {},
    }


def write_kubeconfig(server_url: str, path: str | None) -> tuple[Path, bool]:
    """Write the kubeconfig to ``path`` or a new temporary file; returns (path, created a temp file)."""
    text = yaml.safe_dump(kubeconfig(server_url), sort_keys=False)
    if path:
        target = Path(path).expanduser().resolve()
        target.parent.mkdir(parents=True, exist_ok=True)
        # Written beside it, then renamed over it: whoever waits for the file to appear (bench, the e2e
        # tests) reads it whole, never the empty file a plain write shows first.
        fd, partial = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(partial, target)
        return target, False
    fd, name = tempfile.mkstemp(prefix="lockstep-sim-", suffix=".kubeconfig")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
    return Path(name), True


async def run_until_stopped(cluster: SimCluster, kubeconfig_path: str | None) -> int:
    url = await cluster.start()
    written, temporary = write_kubeconfig(url, kubeconfig_path)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        print(f"export KUBECONFIG={written}", flush=True)
        print(
            f"# lockstep sim: API server {url}, {cluster.node_count} nodes, "
            f"{cluster.devices_per_node} {DRIVER_NAME} devices per node, PodGroup CRD installed, "
            f"and the CRDs of {', '.join(cluster.owner_crds)}, "
            f"Kubernetes {cluster.server.kube_version.git_version}, "
            f"feature gates {cluster.server.feature_gates}. Ctrl-C stops it.",
            flush=True,
        )
        await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)
        await cluster.stop()
        if temporary:
            written.unlink(missing_ok=True)
    return 0


def sim_command(args: argparse.Namespace) -> int:
    if args.nodes < 1:
        print(f"lockstep sim: --nodes must be at least 1, got {args.nodes}", file=sys.stderr)
        return USAGE_EXIT
    if args.devices_per_node < 0:
        print(
            f"lockstep sim: --devices-per-node must not be negative, got {args.devices_per_node}",
            file=sys.stderr,
        )
        return USAGE_EXIT
    if not 0 <= args.port <= 65535:
        print(f"lockstep sim: --port must be between 0 and 65535, got {args.port}", file=sys.stderr)
        return USAGE_EXIT
    try:
        kube = kube_version(getattr(args, "kube_version", None))
    except ValueError as exc:
        print(f"lockstep sim: --kube-version: {exc}", file=sys.stderr)
        return USAGE_EXIT
    try:
        gates = FeatureGates(args.feature_gates, kube)
    except ValueError as exc:
        print(f"lockstep sim: --feature-gates: {exc} (kube version {kube.name})", file=sys.stderr)
        return USAGE_EXIT
    crds = tuple(name for name in str(getattr(args, "install_crds", "") or "").split(",") if name)
    unknown = [name for name in crds if name not in OPTIONAL_CRDS]
    if unknown:
        print(
            f"lockstep sim: --install-crds: unknown {', '.join(unknown)} (known: {', '.join(OPTIONAL_CRDS)})",
            file=sys.stderr,
        )
        return USAGE_EXIT
    if not args.pod_start_seconds >= 0:
        print(
            f"lockstep sim: --pod-start-seconds must not be negative, got {args.pod_start_seconds}",
            file=sys.stderr,
        )
        return USAGE_EXIT
    for flag in ("node_monitor_grace_period", "node_monitor_period", "pod_gc_period"):
        if not getattr(args, flag) > 0:
            option = "--" + flag.replace("_", "-")
            print(
                f"lockstep sim: {option} must be a positive number of seconds, got {getattr(args, flag)}",
                file=sys.stderr,
            )
            return USAGE_EXIT
    write_latency_ms = getattr(args, "write_latency_ms", 0.0)
    if not write_latency_ms >= 0:
        print(
            f"lockstep sim: --write-latency-ms must not be negative, got {write_latency_ms}", file=sys.stderr
        )
        return USAGE_EXIT
    configure_logging(fmt="console", level="warning", stream=sys.stderr)
    cluster = SimCluster(
        install_crds=crds,
        nodes=args.nodes,
        devices_per_node=args.devices_per_node,
        port=args.port,
        feature_gates=gates,
        kube_version=kube,
        owner_crds=tuple(OWNER_KINDS),  # so that every example applies, as with lockstep demo
        kubelet_start_delay=args.pod_start_seconds,
        node_monitor_grace_period=args.node_monitor_grace_period,
        node_monitor_period=args.node_monitor_period,
        pod_gc_period=args.pod_gc_period,
        write_latency=write_latency_ms / 1000,
    )
    try:
        return asyncio.run(run_until_stopped(cluster, args.kubeconfig))
    except OSError as exc:
        print(f"lockstep sim: cannot start the API server on port {args.port}: {exc}", file=sys.stderr)
        return 1
