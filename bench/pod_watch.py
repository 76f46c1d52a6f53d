"""Compare the operator's two watch implementations: the raw aiohttp+orjson watch and Kopf's
``on.event``. Same operator, same simulated cluster, same pods; only the feed differs: of pods
(default), with ``--vary claim`` of ResourceClaims, with ``--vary other`` of everything else
(nodes, PodGroups, slices, ...); ``--claims`` gives every pod a ResourceClaim from a template.

The operator runs on its own thread (as ``OperatorThread`` does for tests and the demo), so its CPU
time is read per thread from /proc and does not include the emulator's. Run::

    .venv/bin/python bench/pod_watch.py --pods 2000 --nodes 50
    .venv/bin/python bench/pod_watch.py --pods 500 --nodes 100 --claims --vary claim
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
from dataclasses import dataclass
from typing import Any

from lockstep.config import load_settings
from lockstep.controller.runtime import OperatorThread, RuntimeOptions, WatchMode
from lockstep.kube.client import NAMESPACES, PODS, RESOURCE_CLAIM_TEMPLATES, ConnectionInfo, KubeClient
from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.dra_driver import DRIVER_NAME

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


TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "gpu", "namespace": NAMESPACE},
    "spec": {
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER_NAME}}]}}
    },
}


async def run_once(mode: WatchMode, pods: int, nodes: int, claims: bool, vary: str) -> Result:
    async with SimCluster(nodes, 8 if claims else 0, kubelet_start_delay=3600) as cluster:
        client = KubeClient(ConnectionInfo(server=cluster.url, insecure=True))
        try:
            await client.create(NAMESPACES, None, {"metadata": {"name": NAMESPACE}})
            if claims:
                await client.create(RESOURCE_CLAIM_TEMPLATES, NAMESPACE, TEMPLATE)
            settings = load_settings(
                leader_elect=False,
                metrics_bind_address="",
                health_bind_address="127.0.0.1:0",
                log_level="warning",
            )
            operator = OperatorThread(
                settings,
                connection=ConnectionInfo(server=cluster.url, insecure=True),
                options=RuntimeOptions(pod_watch=mode)
                if vary == "pods"
                else RuntimeOptions(other_watch=mode),
            )
            await asyncio.to_thread(operator.start)
            native_id = operator.native_thread_id
            assert native_id is not None
            cpu_before = thread_cpu_seconds(native_id)
            started = time.monotonic()
            semaphore = asyncio.Semaphore(32)

            async def create(i: int) -> None:
                container: dict[str, Any] = {
                    "name": "c",
                    "image": "x",
                    "resources": {"requests": {"cpu": "10m"}},
                }
                spec: dict[str, Any] = {"schedulerName": "lockstep", "containers": [container]}
                if claims:
                    container["resources"]["claims"] = [{"name": "gpu"}]
                    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]
                body = {"metadata": {"name": f"p-{i}", "namespace": NAMESPACE}, "spec": spec}
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
    parser.add_argument("--claims", action="store_true", help="one template ResourceClaim per pod")
    parser.add_argument(
        "--vary", choices=["pod", "claim", "other"], default="pod", help="which feed to switch"
    )
    args = parser.parse_args()
    for _ in range(args.rounds):
        for mode in (WatchMode.RAW, WatchMode.KOPF):
            result = await run_once(mode, args.pods, args.nodes, args.claims, args.vary)
            print(f"{args.vary} via {result.line()}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
