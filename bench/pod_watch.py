"""Compare the operator's two pod watch implementations: the raw aiohttp+orjson watch and Kopf's
``on.event``. Same operator, same simulated cluster, same pods; only the pod feed differs.

The operator runs on its own thread (as ``OperatorThread`` does for tests and the demo), so its CPU
time is read per thread from /proc and does not include the emulator's. Run::

    .venv/bin/python bench/pod_watch.py --pods 2000 --nodes 50
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass

import kopf

from lockstep.config import load_settings
from lockstep.controller.runtime import OperatorThread, RuntimeOptions, WatchMode
from lockstep.kube.client import NAMESPACES, PODS, KubeClient
from lockstep.sim.cluster import SimCluster

NAMESPACE = "bench-watch"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def thread_cpu_seconds(native_id: int) -> float:
    with open(f"/proc/self/task/{native_id}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


@dataclass
class Result:
    mode: WatchMode
    pods: int
    seconds: float
    cpu_seconds: float

    def line(self) -> str:
        return (
            f"{self.mode.value:>4}: {self.pods} pods bound in {self.seconds:.2f} s "
            f"({self.pods / self.seconds:.0f} pods/s), operator CPU {self.cpu_seconds:.2f} s "
            f"({1000 * self.cpu_seconds / self.pods:.2f} ms/pod)"
        )


async def run_once(mode: WatchMode, pods: int, nodes: int) -> Result:
    async with SimCluster(nodes, 0, kubelet_start_delay=3600) as cluster:
        client = KubeClient(kopf.ConnectionInfo(server=cluster.url, insecure=True))
        try:
            await client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
            settings = load_settings(
                leader_elect=False,
                metrics_bind_address="",
                health_bind_address="127.0.0.1:0",
                log_level="warning",
            )
            operator = OperatorThread(
                settings,
                connection=kopf.ConnectionInfo(server=cluster.url, insecure=True),
                options=RuntimeOptions(pod_watch=mode),
            )
            await asyncio.to_thread(operator.start)
            native_id = operator.native_thread_id
            assert native_id is not None
            cpu_before = thread_cpu_seconds(native_id)
            started = time.monotonic()
            semaphore = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                body = {
                    "metadata": {"name": f"p-{i}", "namespace": NAMESPACE},
                    "spec": {
                        "schedulerName": "lockstep",
                        "containers": [
                            {"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m"}}}
                        ],
                    },
                }
                async with semaphore:
                    await client.create(PODS, NAMESPACE, body)

            await asyncio.gather(*(create(i) for i in range(pods)))
            while True:
                items = (await client.list(PODS, NAMESPACE)).get("items") or []
                if sum(1 for p in items if p["spec"].get("nodeName")) == pods:
                    break
                await asyncio.sleep(0.1)
            seconds = time.monotonic() - started
            cpu = thread_cpu_seconds(native_id) - cpu_before
            await asyncio.to_thread(operator.stop)
            return Result(mode, pods, seconds, cpu)
        finally:
            await client.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    for _ in range(args.rounds):
        for mode in (WatchMode.RAW, WatchMode.KOPF):
            print((await run_once(mode, args.pods, args.nodes)).line(), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
