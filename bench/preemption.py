"""Preemption benchmark: a cluster full of low-priority gangs of 8, then high-priority gangs of 8 arrive.

    python bench/preemption.py                    # 100 nodes, 100 low gangs, 50 high gangs
    python bench/preemption.py --nodes 20 --high-gangs 10 --json

Each simulated node (31.5 allocatable cpus) holds 8 pods of 3.9 cpus, so ``--nodes`` N is filled
by N low-priority gangs of 8 (minCount 8). Then ``--high-gangs`` gangs of 8 (minCount 8) of a higher
PriorityClass are created at once; every one of them has to preempt. Measured from their first
create until every high-priority pod is bound:

- the time, and the victims taken against the minimum possible (8 per high gang: each needs one
  gang's worth of room, and a low gang can only go whole);
- the API writes in that window per victim: the operator's own (DisruptionTarget, nominations,
  deletions, bindings, PodGroup status, events) and every client's (kubelets and load generator too);
- that no low gang was left running below its minCount.

The emulator, its simulated kubelets and the operator run in this one process (the operator on its
own thread and event loop), so the figures are for one 2-core machine shared by all of them. The
exit code is 1 if a high gang was not bound in ``--timeout`` seconds or a low gang was left partial.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Sequence
from typing import Any

from lockstep import POD_GROUP_LABEL
from lockstep.config import load_settings
from lockstep.controller.runtime import OperatorThread, RuntimeOptions
from lockstep.kube.client import ConnectionInfo
from lockstep.logging import configure_logging
from lockstep.sim.cluster import SimCluster
from lockstep.sim.watching import KubeHttp

NAMESPACE = "preempt"
GANG = 8
POD_CPU = "3900m"


def podgroup(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": GANG}}},
    }


def member(name: str, group: str, priority_class: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {POD_GROUP_LABEL: group}},
        "spec": {
            "schedulerName": "lockstep",
            "priorityClassName": priority_class,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": POD_CPU}}}],
        },
    }


async def create_gangs(http: KubeHttp, prefix: str, count: int, priority_class: str) -> None:
    semaphore = asyncio.Semaphore(16)

    async def one(index: int) -> None:
        name = f"{prefix}-{index:03d}"
        async with semaphore:
            await http.create(
                f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/podgroups", podgroup(name)
            )
            for i in range(GANG):
                await http.create(
                    f"/api/v1/namespaces/{NAMESPACE}/pods", member(f"{name}-{i}", name, priority_class)
                )

    await asyncio.gather(*(one(i) for i in range(count)))


async def bound_by_group(http: KubeHttp) -> tuple[Counter[str], Counter[str]]:
    """(pods per group, bound pods per group) in the namespace."""
    items = (await http.get(f"/api/v1/namespaces/{NAMESPACE}/pods")).get("items") or []
    present: Counter[str] = Counter()
    bound: Counter[str] = Counter()
    for pod in items:
        group = pod["metadata"].get("labels", {}).get(POD_GROUP_LABEL, "")
        if pod["metadata"].get("deletionTimestamp"):
            continue
        present[group] += 1
        if pod["spec"].get("nodeName"):
            bound[group] += 1
    return present, bound


async def wait_bound(http: KubeHttp, prefix: str, gangs: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        _, bound = await bound_by_group(http)
        if sum(count for group, count in bound.items() if group.startswith(prefix)) >= gangs * GANG:
            return True
        await asyncio.sleep(0.1)
    return False


async def run(args: argparse.Namespace) -> dict[str, Any]:
    cluster = SimCluster(
        nodes=args.nodes, devices_per_node=0, kubelet_start_delay=0.02, kubelet_delete_delay=0.1
    )
    url = await cluster.start()
    operator: OperatorThread | None = None
    try:
        http = cluster.http
        await http.create("/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
        for name, value in (("bench-low", 10), ("bench-high", 1000)):
            await http.create(
                "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": name}, "value": value}
            )
        settings = load_settings(
            leader_elect=False,
            metrics_bind_address="127.0.0.1:0",
            health_bind_address="127.0.0.1:0",
            log_format="json",
            log_level="warning",
        )
        operator = OperatorThread(
            settings,
            connection=ConnectionInfo(server=url, insecure=True),
            options=RuntimeOptions(shutdown_grace_seconds=5.0),
        )
        await asyncio.to_thread(operator.start)
        low_gangs = args.nodes  # 8 pods of 3.9 cpus fill a node
        await create_gangs(http, "low", low_gangs, "bench-low")
        if not await wait_bound(http, "low", low_gangs, args.timeout):
            raise RuntimeError("the low-priority gangs did not all bind")

        cluster.server.request_stats.reset()
        operator_writes_before = operator_writes(operator)
        started = time.monotonic()
        await create_gangs(http, "high", args.high_gangs, "bench-high")
        done = await wait_bound(http, "high", args.high_gangs, args.timeout)
        seconds = time.monotonic() - started
        writes = cluster.server.request_stats.writes()
        by_operator = operator_writes(operator) - operator_writes_before
        await asyncio.sleep(2.0)  # victims finish terminating
        present, _ = await bound_by_group(http)
        low_left = {group: count for group, count in present.items() if group.startswith("low")}
        victims = low_gangs * GANG - sum(low_left.values())
        partial = sorted(group for group, count in low_left.items() if 0 < count < GANG)
        minimum = args.high_gangs * GANG
        return {
            "nodes": args.nodes,
            "low_gangs": low_gangs,
            "high_gangs": args.high_gangs,
            "all_bound": done,
            "seconds_to_all_bound": round(seconds, 2),
            "victims": victims,
            "minimum_victims": minimum,
            "low_gangs_left_partial": partial,
            "api_writes": writes,
            "api_writes_per_victim": round(writes / victims, 2) if victims else None,
            "operator_writes": by_operator,
            "operator_writes_per_victim": round(by_operator / victims, 2) if victims else None,
        }
    finally:
        if operator is not None:
            await asyncio.to_thread(operator.stop, 15)
        await cluster.stop()


def operator_writes(operator: OperatorThread) -> int:
    """The operator's own writes so far (``lockstep_api_requests_total``, every method but GET)."""
    runtime = operator.operator
    assert runtime is not None
    total = 0.0
    for metric in runtime.metrics.registry.collect():
        if metric.name == "lockstep_api_requests":
            total += sum(
                sample.value
                for sample in metric.samples
                if sample.name.endswith("_total") and sample.labels.get("method") != "GET"
            )
    return int(total)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, default=100, help="nodes, each filled by one low gang of 8")
    parser.add_argument("--high-gangs", type=int, default=50, help="high-priority gangs of 8 that arrive")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for the gangs to bind")
    parser.add_argument("--json", action="store_true", help="print one line of JSON only")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.high_gangs > args.nodes:
        print("--high-gangs must not exceed --nodes (each needs one node's worth of room)", file=sys.stderr)
        return 2
    configure_logging("json", "warning")
    result = asyncio.run(run(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:28} {value}")
    return 0 if result["all_bound"] and not result["low_gangs_left_partial"] else 1


if __name__ == "__main__":
    sys.exit(main())
