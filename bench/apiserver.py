"""The API server emulator's raw ceiling, measured from a separate client process.

    python bench/apiserver.py [--pods 5000] [--replay-pods 20000] [--concurrency 16] [--nodes 100]

Starts the emulator alone (``python bench/apiserver.py serve``) in a child process, then from this
process (aiohttp keep-alive connections, orjson):

1. creates ``--nodes`` nodes and ``--pods`` unbound pods (creates/s is reported too);
2. binds every pod through ``pods/binding`` from ``--concurrency`` concurrent connections, the first
   half with nobody watching, the second half while one watcher follows the pods live: bindings/s
   for both and the live watch events/s the watcher saw;
3. creates pods up to ``--replay-pods`` and opens one watch without a resourceVersion, which
   starts with a synthetic ADDED event per existing pod: watch events/s delivered to one watcher.

The server's CPU time (from /proc) is reported per phase. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import orjson

NAMESPACE = "bench"
READY_PREFIX = "serving "


async def serve(port: int) -> None:
    from lockstep.sim.apiserver import ApiServer

    server = ApiServer(host="127.0.0.1", port=port)
    url = await server.start()
    print(READY_PREFIX + url, flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    await stop.wait()
    await server.stop()


def start_server(port: int) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith(READY_PREFIX):
        process.kill()
        raise SystemExit(f"bench/apiserver.py: the emulator did not start: {line!r}")
    return process, line[len(READY_PREFIX) :].strip()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


async def check(response: aiohttp.ClientResponse, what: str) -> None:
    if response.status >= 300:
        raise SystemExit(f"bench/apiserver.py: {what}: HTTP {response.status}: {await response.text()}")
    await response.read()


async def post_json(session: aiohttp.ClientSession, url: str, body: dict[str, Any], what: str) -> None:
    async with session.post(url, data=orjson.dumps(body), headers={"Content-Type": "application/json"}) as r:
        await check(r, what)


async def run_concurrently(count: int, concurrency: int, job: Callable[[int], Awaitable[None]]) -> float:
    """Run job(0..count-1) on ``concurrency`` workers; returns the wall time in seconds."""
    counter = iter(range(count))

    async def worker() -> None:
        for index in counter:
            await job(index)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - started


def pod(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "bench"}},
        "spec": {
            "schedulerName": "lockstep",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
                }
            ],
        },
    }


async def count_watch_events(
    session: aiohttp.ClientSession, url: str, params: dict[str, str], expected: int
) -> tuple[int, float]:
    """Read a watch until ``expected`` non-bookmark events arrived; returns (events, seconds)."""
    events = 0
    started = time.perf_counter()
    async with session.get(url, params=params) as response:
        if response.status >= 300:
            await check(response, "watch")
        async for line in response.content:
            if not line.strip():
                continue
            if orjson.loads(line).get("type") != "BOOKMARK":
                events += 1
                if events >= expected:
                    break
    return events, time.perf_counter() - started


async def measure(args: argparse.Namespace, base: str, server_pid: int) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(limit=args.concurrency + 2)
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout, read_bufsize=1 << 20) as session:
        await post_json(
            session,
            f"{base}/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            "namespace",
        )
        node_names = [f"node-{i:04d}" for i in range(args.nodes)]
        await run_concurrently(
            args.nodes,
            args.concurrency,
            lambda i: post_json(
                session,
                f"{base}/api/v1/nodes",
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_names[i]}},
                "node",
            ),
        )
        pods_url = f"{base}/api/v1/namespaces/{NAMESPACE}/pods"
        cpu_before = cpu_seconds(server_pid)
        create_seconds = await run_concurrently(
            args.pods,
            args.concurrency,
            lambda i: post_json(session, pods_url, pod(f"p-{i:06d}"), "create pod"),
        )
        create_cpu = cpu_seconds(server_pid) - cpu_before

        async def bind(index: int) -> None:
            name = f"p-{index:06d}"
            body = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": {"name": name},
                "target": {"apiVersion": "v1", "kind": "Node", "name": node_names[index % args.nodes]},
            }
            await post_json(session, f"{pods_url}/{name}/binding", body, f"bind {name}")

        async def bind_range(first: int, count: int) -> tuple[float, float, float]:
            """Bind pods first..first+count-1; returns seconds and server/client CPU ms per binding."""
            server_before, client_before = cpu_seconds(server_pid), time.process_time()
            seconds = await run_concurrently(count, args.concurrency, lambda i: bind(first + i))
            server_ms = 1000 * (cpu_seconds(server_pid) - server_before) / count
            return seconds, server_ms, 1000 * (time.process_time() - client_before) / count

        # First half with nobody watching, second half with one watcher following every binding.
        unwatched = args.pods // 2
        watched = args.pods - unwatched
        bare_seconds, bare_server_ms, bare_client_ms = await bind_range(0, unwatched)
        async with session.get(pods_url, params={"limit": "1"}) as response:
            list_rv = orjson.loads(await response.read())["metadata"]["resourceVersion"]
        live_watch = asyncio.create_task(
            count_watch_events(
                session,
                pods_url,
                {"watch": "true", "resourceVersion": list_rv, "allowWatchBookmarks": "true"},
                watched,
            )
        )
        watched_seconds, watched_server_ms, watched_client_ms = await bind_range(unwatched, watched)
        live_events, live_seconds = await asyncio.wait_for(live_watch, 120)

        extra = max(0, args.replay_pods - args.pods)
        await run_concurrently(
            extra, args.concurrency, lambda i: post_json(session, pods_url, pod(f"r-{i:06d}"), "create pod")
        )
        total = args.pods + extra
        cpu_before = cpu_seconds(server_pid)
        replay_events, replay_seconds = await count_watch_events(session, pods_url, {"watch": "true"}, total)
        replay_cpu = cpu_seconds(server_pid) - cpu_before

    return {
        "pods": args.pods,
        "nodes": args.nodes,
        "concurrency": args.concurrency,
        "creates_per_second": round(args.pods / create_seconds),
        "server_cpu_ms_per_create": round(1000 * create_cpu / args.pods, 3),
        "bindings_per_second": round(unwatched / bare_seconds),
        "server_cpu_ms_per_binding": round(bare_server_ms, 3),
        "client_cpu_ms_per_binding": round(bare_client_ms, 3),
        "bindings_per_second_with_watcher": round(watched / watched_seconds),
        "server_cpu_ms_per_binding_with_watcher": round(watched_server_ms, 3),
        "client_cpu_ms_per_binding_with_watcher": round(watched_client_ms, 3),
        "live_watch_events": live_events,
        "live_watch_events_per_second": round(live_events / live_seconds),
        "replay_watch_events": replay_events,
        "replay_watch_events_per_second": round(replay_events / replay_seconds),
        "server_cpu_us_per_replayed_event": round(1e6 * replay_cpu / max(replay_events, 1), 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="mode")
    serve_parser = sub.add_parser("serve", help="run the emulator alone (used by the measuring process)")
    serve_parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--pods", type=int, default=5000, help="pods to create and bind (default 5000)")
    parser.add_argument(
        "--replay-pods", type=int, default=20000, help="pods in the replayed watch (default 20000)"
    )
    parser.add_argument(
        "--concurrency", type=int, default=16, help="concurrent client connections (default 16)"
    )
    parser.add_argument("--nodes", type=int, default=100, help="nodes to bind to (default 100)")
    parser.add_argument(
        "--attach",
        metavar="PID:URL",
        help="measure an emulator started with 'serve' (e.g. under a profiler) instead of starting one",
    )
    args = parser.parse_args()
    if args.mode == "serve":
        asyncio.run(serve(args.port))
        return 0
    for flag in ("pods", "concurrency", "nodes"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be at least 1")
    if args.attach:
        pid, _, base = args.attach.partition(":")
        result = asyncio.run(measure(args, base, int(pid)))
    else:
        process, base = start_server(0)
        try:
            result = asyncio.run(measure(args, base, process.pid))
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
    print(orjson.dumps(result, option=orjson.OPT_INDENT_2).decode())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
