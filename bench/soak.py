"""Chaos soak: lockstep under API faults and SIGKILLs, with the invariants checked all the way through.

    python bench/soak.py                      # full soak: ~2,000 pods, 10 kills, then 2 replicas
    python bench/soak.py --pods 200 --kills 2 --max-seconds 60 --replicas 1   # the CI form

The emulator (``lockstep sim``) and every operator incarnation (``lockstep run``) are separate
processes. The soak creates a mixed workload (gangs and basic groups, with and without ResourceClaims,
gangs whose members avoid each other's nodes by pod anti-affinity, a few groups that can never
fit, a quarter of the groups of a higher PriorityClass), makes the emulator fail 5% of writes with
500 and 5% with 409, delay
every request 50-200 ms, drop watch streams every 10 s and answer resumed watches with 410, and kills
the operator with SIGKILL at random moments, restarting it each time. Gang health faults too: in
about 1 group in 16 a member fails (exit code 1 after 2 s) and the group, with
``staleGracePeriodSeconds: 2``, has its other members evicted; ``--node-losses`` nodes are lost
(a NoExecute taint nobody tolerates, then the Node deleted; the emulator's pod GC, every 5 s, removes
what is left on it), the first one a node of one of two KeepMinCount gangs with a zone constraint
(one member a node), whose lost members the soak recreates as their controller would; once the
workload settled, a gang of
node-sized members of a higher PriorityClass fits only by preempting. Meanwhile the invariants of
:mod:`lockstep.sim.invariants` are checked every couple of seconds; a pod watch records bindings so a
pod bound twice is caught. At the end:

- every group that can fit is bound (at least minCount members on nodes; a group that lost members
  to a lost node, a preemption or an eviction is excused, as nothing recreates them, except the zoned
  gangs, whose replacements must bind) and every group that cannot has 0 members bound and a
  PodGroupScheduled=False condition with a reason;
- no two members of a one-per-node (anti-affinity) gang share a node;
- no invariant is violated (transient ones such as a gang mid-binding count only if they persist),
  preemption's included: no victim of equal or higher priority than its preemptor, no gang left
  running below minCount by a preemption (a group that lost pods to a preemption is not expected
  to be bound at the end);
- no in-flight allocation survives its pods (no claim allocated without a consumer, the operator's
  ``lockstep_inflight_claim_allocations`` gauge at 0);
- every ERROR line in the operator logs is explained by an injected fault;
- no member that had finished is marked for a stale gang, no PodGroup says PodGroupSatisfied=True
  with fewer than minCount members running or succeeded;
- no group with a required topology has live bound members in two domains (checked at every round:
  the zoned gangs' replacements join their survivors' zone);
- each fault class happened at least as often as claimed: the kills asked for, at least one
  preemption victim, member failure and stale-gang eviction, the node losses asked for and a bound
  replacement of a zoned gang (a run whose faults did not happen checked nothing, and fails).

With ``--replicas 2`` a second phase runs two operators with leader election under the same faults,
kills the leader, and checks that the other takes over within the lease duration (plus its polling
period) and that no pod is ever bound twice.

The report is printed and written as JSON (``--report``); the exit code is 0 only if every check
passed, 1 if one failed, 3 if lockstep cannot be started at all.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import random
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from harness.api import load_kubeconfig
from harness.procs import Child, ProcessFailed, free_port, start_sim
from lockstep.logging import configure_logging
from lockstep.sim.controllers.provisioner import PROVISIONER_NAME
from lockstep.sim.invariants import (
    BindingHistory,
    ClusterState,
    PreemptionHistory,
    Violation,
    ViolationTracker,
    check_state,
    fetch_cluster_state,
    gang_min_counts,
)
from lockstep.sim.watching import ApiError, Informer, KubeHttp, new_session
from lockstep.sim.workload import EXIT_CODE, RUN_SECONDS

NAMESPACE = "soak"
LEASE_NAMESPACE = "lockstep-system"
SCHEDULER_NAME = "lockstep"
POD_GROUP_LABEL = "scheduling.lockstep.dev/pod-group"
HOSTNAME_LABEL = "kubernetes.io/hostname"
ZONE_LABEL = "topology.kubernetes.io/zone"
# KeepMinCount gangs with a zone constraint, one member a node: the first node lost is one of theirs,
# and the soak (as their controller) recreates the members lost with it
ZONED_GANGS = 2
ZONED_SIZE = 4
PODGROUPS = f"/apis/scheduling.lockstep.dev/v1alpha1/namespaces/{NAMESPACE}/podgroups"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
VOLUME_CLAIMS = f"/api/v1/namespaces/{NAMESPACE}/persistentvolumeclaims"
# A WaitForFirstConsumer class of the simulated provisioner: a volume is made on the chosen node.
STORAGE_CLASS = {
    "apiVersion": "storage.k8s.io/v1",
    "kind": "StorageClass",
    "metadata": {"name": "soak-local"},
    "provisioner": PROVISIONER_NAME,
    "volumeBindingMode": "WaitForFirstConsumer",
}
DEVICE_CLASS = "gpu.sim.lockstep.dev"
# The simulated driver's devices as the extended resource example.com/gpu (DRAExtendedResource): pods of
# "extended" groups ask for it and lockstep makes each pod's claim.
EXTENDED_RESOURCE = "example.com/gpu"
EXTENDED_RESOURCE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "soak-extended-gpu"},
    "spec": {
        "extendedResourceName": EXTENDED_RESOURCE,
        "selectors": [{"cel": {"expression": f'device.driver == "{DEVICE_CLASS}"'}}],
    },
}
PRIORITY_CLASSES_PATH = "/apis/scheduling.k8s.io/v1/priorityclasses"
PRIORITY_CLASSES = {"soak-low": 100, "soak-high": 1000, "soak-top": 10000}
# The preemptor gang made once the workload settled: members as large as a node, so that they fit
# only by preempting (the soak must prove preemption happened, not just that nothing broke).
PREEMPTOR = "preemptor"
PREEMPTOR_CPU_MILLIS = 31_000
LOST_NODE_TAINT = "soak.lockstep.dev/lost"
FAIL_AFTER_SECONDS = 2.0
STALE_GRACE_SECONDS = 2
# A pod asking for more than any node has: its group can never fit.
OVERSIZED_CPU_MILLIS = 64_000
EXIT_FAILED = 1
EXIT_NOT_AVAILABLE = 3

# How long a transient violation (gang mid-binding, claim reserved just before its Bind) may last.
TRANSIENT_GRACE_SECONDS = 30.0
POD_GC_PERIOD_SECONDS = 5.0
CHECK_INTERVAL_SECONDS = 2.0
CHECK_TIMEOUT_SECONDS = 20.0
WATCH_DROP_SECONDS = 10.0
# Substrings that explain an operator ERROR line: the emulator's injected failures and their effects.
EXPLAINED_ERRORS = (
    "injected",  # the emulator's 500, 409 and 429 answers say so in their message
    "too old resource version",  # the forced 410 on a resumed watch
    "Expired",
    "ServerDisconnectedError",  # a dropped watch stream or a killed peer
    "ClientPayloadError",
    "ClientOSError",
    "Connection reset",
)


@dataclass(frozen=True)
class GroupPlan:
    name: str
    policy: str  # "gang" | "basic"
    pods: int
    min_count: int
    cpu_millis: int
    memory_mib: int
    # "none" | "per-pod" | "shared" | "volumes" (a PersistentVolumeClaim per pod) | "extended" (each pod
    # asks for EXTENDED_RESOURCE)
    claims: str
    fits: bool
    one_per_node: bool = False  # members carry required pod anti-affinity on the hostname against each other
    priority_class: str = "soak-low"
    # member 0 fails (exit code 1) this long after it starts; the group recovers through
    # staleGracePeriodSeconds (its other members are evicted)
    fail_after: float | None = None
    zoned: bool = False  # satisfactionPolicy KeepMinCount and a required zone topology

    def pod_name(self, index: int) -> str:
        return f"{self.name}-{index}"


def plan_workload(total_pods: int, rng: random.Random) -> list[GroupPlan]:
    """Mixed groups adding up to about ``total_pods``; about 1 in 20 groups can never fit."""
    groups: list[GroupPlan] = []
    created = 0
    while created < total_pods:
        index = len(groups)
        roll = rng.random()
        size = rng.randint(2, 12)
        cpu = rng.choice((100, 200, 250, 500))
        memory = rng.choice((64, 128, 256))
        if roll < 0.05:
            too_few = rng.random() < 0.5
            # Either a member larger than any node, or fewer pods than minCount.
            plan = GroupPlan(
                f"never-{index}",
                "gang",
                size,
                size + 2 if too_few else size,
                cpu if too_few else OVERSIZED_CPU_MILLIS,
                memory,
                "none",
                False,
            )
        elif roll < 0.25:
            plan = GroupPlan(f"basic-{index}", "basic", size, 1, cpu, memory, "none", True)
        elif roll < 0.37:
            plan = GroupPlan(
                f"claims-{index}", "gang", min(size, 4), min(size, 4), cpu, memory, "per-pod", True
            )
        elif roll < 0.45:
            plan = GroupPlan(
                f"shared-{index}", "gang", min(size, 6), min(size, 6), cpu, memory, "shared", True
            )
        elif roll < 0.53:
            spread = min(size, 8)
            plan = GroupPlan(f"spread-{index}", "gang", spread, spread, cpu, memory, "none", True, True)
        elif roll < 0.60:
            plan = GroupPlan(
                f"volumes-{index}", "gang", min(size, 4), min(size, 4), cpu, memory, "volumes", True
            )
        elif roll < 0.66:
            plan = GroupPlan(
                f"extended-{index}", "gang", min(size, 4), min(size, 4), cpu, memory, "extended", True
            )
        elif roll < 0.72:
            failing = min(size, 4)
            plan = GroupPlan(
                f"failing-{index}",
                "gang",
                failing,
                failing,
                cpu,
                memory,
                "none",
                True,
                fail_after=FAIL_AFTER_SECONDS,
            )
        else:
            min_count = size if rng.random() < 0.7 else max(2, size - rng.randint(1, 2))
            plan = GroupPlan(f"gang-{index}", "gang", size, min_count, cpu, memory, "none", True)
        if rng.random() < 0.25:
            plan = dataclasses.replace(plan, priority_class="soak-high")
        groups.append(plan)
        created += plan.pods
    for _ in range(ZONED_GANGS):
        name = f"zoned-{len(groups)}"
        groups.append(
            GroupPlan(name, "gang", ZONED_SIZE, ZONED_SIZE, 500, 128, "none", True, True, zoned=True)
        )
    return groups


def podgroup_manifest(plan: GroupPlan) -> dict[str, Any]:
    policy: dict[str, Any] = (
        {"gang": {"minCount": plan.min_count}} if plan.policy == "gang" else {"basic": {}}
    )
    return {
        "apiVersion": "scheduling.lockstep.dev/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": plan.name, "namespace": NAMESPACE},
        "spec": {
            "schedulingPolicy": policy,
            "scheduleTimeoutSeconds": 60,
            **({"staleGracePeriodSeconds": STALE_GRACE_SECONDS} if plan.fail_after is not None else {}),
            **(
                {
                    "satisfactionPolicy": "KeepMinCount",
                    "schedulingConstraints": {"topology": [{"key": ZONE_LABEL}]},
                }
                if plan.zoned
                else {}
            ),
        },
    }


def claim_name(plan: GroupPlan, index: int) -> str:
    return f"{plan.name}-shared" if plan.claims == "shared" else f"{plan.pod_name(index)}-gpu"


def claim_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}},
    }


def volume_claim_name(plan: GroupPlan, index: int) -> str:
    return f"{plan.pod_name(index)}-data"


def volume_claim_manifest(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": STORAGE_CLASS["metadata"]["name"],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def pod_manifest(plan: GroupPlan, index: int) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "main",
        "image": "registry.k8s.io/pause:3.10",
        "resources": {"requests": {"cpu": f"{plan.cpu_millis}m", "memory": f"{plan.memory_mib}Mi"}},
    }
    spec: dict[str, Any] = {
        "schedulerName": SCHEDULER_NAME,
        "priorityClassName": plan.priority_class,
        "containers": [container],
    }
    if plan.one_per_node:
        term = {"labelSelector": {"matchLabels": {POD_GROUP_LABEL: plan.name}}, "topologyKey": HOSTNAME_LABEL}
        spec["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [term]}}
    if plan.claims == "volumes":
        spec["volumes"] = [
            {"name": "data", "persistentVolumeClaim": {"claimName": volume_claim_name(plan, index)}}
        ]
        container["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    elif plan.claims == "extended":
        container["resources"]["requests"][EXTENDED_RESOURCE] = "1"
        container["resources"]["limits"] = {EXTENDED_RESOURCE: "1"}
    elif plan.claims != "none":
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim_name(plan, index)}]
        container["resources"]["claims"] = [{"name": "gpu"}]
    metadata: dict[str, Any] = {
        "name": plan.pod_name(index),
        "namespace": NAMESPACE,
        "labels": {POD_GROUP_LABEL: plan.name},
    }
    if plan.fail_after is not None and index == 0:
        metadata["annotations"] = {RUN_SECONDS: str(plan.fail_after), EXIT_CODE: "1"}
        spec["restartPolicy"] = "Never"
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def claim_names(plan: GroupPlan) -> list[str]:
    if plan.claims in ("none", "volumes", "extended"):
        return []
    return sorted({claim_name(plan, i) for i in range(plan.pods)})


# --- talking to the emulator through its own faults ---------------------------------------------------


async def persist(action: Callable[[], Awaitable[Any]], what: str, attempts: int = 40) -> Any:
    """Retry a driver-side request through injected faults; 409 AlreadyExists / 404 count as done."""
    for attempt in range(attempts):
        try:
            return await action()
        except ApiError as exc:
            if exc.status in (404, 409) and exc.reason in ("AlreadyExists", "NotFound"):
                return None
            if exc.status < 500 and exc.status not in (409, 429):
                raise
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(min(0.05 * 2**attempt, 1.0))
    raise RuntimeError(f"soak driver could not {what} through the injected faults")


WRITE_VERBS = ("create", "update", "patch", "delete")


async def admin(http: KubeHttp, body: dict[str, Any] | None = None) -> Any:
    """The emulator's fault admin API: POST a rule or action, or DELETE (body None) to clear all."""
    if body is None:
        return await http.request("DELETE", "/__sim/faults")
    return await http.request("POST", "/__sim/faults", body=body)


async def inject_chaos(http: KubeHttp) -> None:
    """5% 500s and 5% 409s on every write, 50-200 ms on every request."""
    for verb in WRITE_VERBS:
        for status in (500, 409):
            await admin(http, {"verb": verb, "status": status, "probability": 0.05})
    await admin(http, {"latency": 0.05, "latency_max": 0.2})


async def drop_and_expire_watches(http: KubeHttp, every_seconds: float) -> None:
    """Every ``every_seconds``: forget the watch history (a resume gets 410), then cut every stream."""
    while True:
        await asyncio.sleep(every_seconds)
        with contextlib.suppress(ApiError, aiohttp.ClientError):
            await admin(http, {"action": "compact"})
            await admin(http, {"action": "drop_watches"})


class Chaos:
    """The soak's faults: on from ``start`` until ``stop``."""

    def __init__(self, http: KubeHttp) -> None:
        self.http = http
        self._dropper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await inject_chaos(self.http)
        self._dropper = asyncio.create_task(drop_and_expire_watches(self.http, WATCH_DROP_SECONDS))

    async def stop(self) -> None:
        if self._dropper is not None:
            self._dropper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._dropper
            self._dropper = None
        await persist(lambda: admin(self.http), "clear the faults")


async def create_workload(http: KubeHttp, plans: list[GroupPlan], spread_seconds: float = 0.0) -> None:
    """Create every group (PodGroup, claims, pods); group i starts at i * spread_seconds / len(plans), with
    at most 16 groups in flight, so the operator is busy for the whole spread."""
    requests = asyncio.Semaphore(64)
    groups = asyncio.Semaphore(16)
    start = time.monotonic()
    pause = spread_seconds / max(1, len(plans))

    async def create(path: str, body: dict[str, Any]) -> None:
        async with requests:
            await persist(lambda: http.create(path, body), f"create {path}/{body['metadata']['name']}")

    for name, value in PRIORITY_CLASSES.items():
        await create(PRIORITY_CLASSES_PATH, {"metadata": {"name": name}, "value": value})

    async def create_group(index: int, plan: GroupPlan) -> None:
        await asyncio.sleep(max(0.0, start + index * pause - time.monotonic()))
        async with groups:
            await create(PODGROUPS, podgroup_manifest(plan))
            await asyncio.gather(*(create(CLAIMS, claim_manifest(name)) for name in claim_names(plan)))
            if plan.claims == "volumes":
                await asyncio.gather(
                    *(
                        create(VOLUME_CLAIMS, volume_claim_manifest(volume_claim_name(plan, i)))
                        for i in range(plan.pods)
                    )
                )
            await asyncio.gather(*(create(PODS, pod_manifest(plan, i)) for i in range(plan.pods)))

    await asyncio.gather(*(create_group(index, plan) for index, plan in enumerate(plans)))


async def delete_group(http: KubeHttp, plan: GroupPlan) -> None:
    async def delete_pod(name: str) -> None:
        await persist(lambda: http.delete(f"{PODS}/{name}", {"gracePeriodSeconds": 0}), f"delete pod {name}")

    await asyncio.gather(*(delete_pod(plan.pod_name(i)) for i in range(plan.pods)))
    await persist(lambda: http.delete(f"{PODGROUPS}/{plan.name}"), f"delete podgroup {plan.name}")


# --- operator incarnations ---------------------------------------------------------------------------


class Operator:
    """One replica of ``lockstep run``; every (re)start is a fresh process with its own log file."""

    def __init__(
        self,
        name: str,
        kubeconfig: Path,
        workdir: Path,
        leader_elect: bool,
        lease: tuple[float, float, float],
    ):
        self.name = name
        self.kubeconfig = kubeconfig
        self.workdir = workdir
        self.leader_elect = leader_elect
        self.lease = lease
        self.child: Child | None = None
        self.logs: list[Path] = []
        self._stopped_at: dict[Path, int] = {}
        self.metrics_port = 0
        self.health_port = 0

    def start(self) -> None:
        self.metrics_port = free_port()
        self.health_port = free_port()
        log = self.workdir / f"{self.name}-{len(self.logs) + 1}.log"
        duration, deadline, retry = self.lease
        argv = [
            sys.executable,
            "-m",
            "lockstep",
            "run",
            "--kubeconfig",
            str(self.kubeconfig),
            "--leader-elect" if self.leader_elect else "--no-leader-elect",
            "--lease-namespace",
            LEASE_NAMESPACE,
            "--lease-duration-seconds",
            str(duration),
            "--renew-deadline-seconds",
            str(deadline),
            "--retry-period-seconds",
            str(retry),
            "--metrics-bind-address",
            f"127.0.0.1:{self.metrics_port}",
            "--health-bind-address",
            f"127.0.0.1:{self.health_port}",
            "--log-format",
            "json",
            "--log-level",
            "info",
        ]
        self.child = Child(f"lockstep run ({self.name})", argv, log)
        self.logs.append(log)

    def kill(self) -> float:
        """SIGKILL, as a node failure would; returns when it happened (monotonic)."""
        assert self.child is not None
        self.child.process.kill()
        killed_at = time.monotonic()
        self.child.process.wait()
        self.child.stop()
        return killed_at

    async def wait_healthy(self, within_seconds: float) -> bool:
        """Wait until this incarnation's /healthz answers 200 (False if it exits or time runs out)."""
        deadline = time.monotonic() + within_seconds
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
            while self.running() and time.monotonic() < deadline:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(f"http://127.0.0.1:{self.health_port}/healthz") as response:
                        if response.status == 200:
                            return True
                await asyncio.sleep(0.2)
        return False

    def running(self) -> bool:
        return self.child is not None and self.child.process.poll() is None

    def stop(self) -> None:
        """SIGTERM; what the incarnation logs from here on is its shutdown (see ``shutdown_lines``)."""
        if self.child is not None:
            if self.running():
                self._stopped_at[self.logs[-1]] = self.logs[-1].stat().st_size
            self.child.stop()

    def became_leader(self) -> bool:
        return any("became leader" in line for line in self.log_lines(only_current=True))

    def log_lines(self, only_current: bool = False) -> list[str]:
        """Everything logged while running, shutdown after our SIGTERM excluded."""
        paths = self.logs[-1:] if only_current else self.logs
        return [line for path in paths if path.exists() for line in self._read(path)[0].splitlines()]

    def shutdown_lines(self) -> list[str]:
        """What incarnations stopped with SIGTERM logged after it."""
        return [line for path in self._stopped_at for line in self._read(path)[1].splitlines()]

    def _read(self, path: Path) -> tuple[str, str]:
        data = path.read_bytes()
        cut = self._stopped_at.get(path, len(data))
        return data[:cut].decode(errors="replace"), data[cut:].decode(errors="replace")

    async def inflight_allocations(self, session: aiohttp.ClientSession) -> float | None:
        """The ``lockstep_inflight_claim_allocations`` gauge, or None if /metrics does not answer."""
        try:
            async with session.get(f"http://127.0.0.1:{self.metrics_port}/metrics") as response:
                text = await response.text()
        except aiohttp.ClientError:
            return None
        for line in text.splitlines():
            if line.startswith("lockstep_inflight_claim_allocations"):
                return float(line.split()[-1])
        return None


def leadership_events(lines: Iterable[str]) -> list[tuple[str, str]]:
    """(timestamp, "became leader" | "lost leadership") from one incarnation's JSON log, in order."""
    events = []
    for line in lines:
        with contextlib.suppress(json.JSONDecodeError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") in ("became leader", "lost leadership"):
                events.append((str(record.get("timestamp", "")), str(record["event"])))
    return events


def leadership_overlap(first: Iterable[str], second: Iterable[str]) -> str | None:
    """Why two live replicas' logs show them leading at the same time, or None. A replica leads from
    "became leader" until its next "lost leadership" (or to the end of its log)."""

    def intervals(lines: Iterable[str]) -> list[tuple[str, str]]:
        spans, start = [], None
        for timestamp, event in leadership_events(lines):
            if event == "became leader":
                start = timestamp
            elif start is not None:
                spans.append((start, timestamp))
                start = None
        if start is not None:
            spans.append((start, "9999"))
        return spans

    for a_start, a_end in intervals(first):
        for b_start, b_end in intervals(second):
            if a_start < b_end and b_start < a_end:
                return f"two leaders at once: one led {a_start}..{a_end}, the other {b_start}..{b_end}"
    return None


def unexplained_errors(lines: Iterable[str]) -> list[str]:
    """ERROR (or worse) log lines that no injected fault explains; a Python traceback always counts."""
    unexplained = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if line.startswith("Traceback") or "Error" in line:
                unexplained.append(line)
            continue
        if not isinstance(record, dict) or str(record.get("level", "")).lower() not in ("error", "critical"):
            continue
        if not any(marker in line for marker in EXPLAINED_ERRORS):
            unexplained.append(line)
    return unexplained


# --- the soak -----------------------------------------------------------------------------------------


@dataclass
class Report:
    pods: int = 0
    groups: int = 0
    groups_that_fit: int = 0
    kills: int = 0
    seconds_to_settle: float | None = None
    checks: int = 0
    failed_checks: int = 0
    last_check_error: str | None = None
    violations: list[str] = field(default_factory=list)
    unbound_groups_that_fit: list[str] = field(default_factory=list)
    bound_groups_that_cannot_fit: list[str] = field(default_factory=list)
    groups_without_clear_condition: list[str] = field(default_factory=list)
    pods_bound_twice: list[str] = field(default_factory=list)
    anti_affinity_ignored: list[str] = field(default_factory=list)
    preemption_victims: int = 0
    member_failures: int = 0  # members seen Failed (the failing groups' member 0)
    node_losses: int = 0  # nodes tainted NoExecute (their pods evicted) and deleted
    stale_gang_evictions: int = 0  # members marked DisruptionTarget StaleGang
    finished_members_evicted: list[str] = field(default_factory=list)
    satisfied_below_min_count: list[str] = field(default_factory=list)
    replacements_made: int = 0  # members of zoned gangs recreated after their node was lost
    replacements_bound: int = 0
    topology_checks: int = 0  # bound members of zoned groups checked against their zone constraint
    topology_broken: list[str] = field(default_factory=list)
    fault_minimums_missed: list[str] = field(default_factory=list)
    leaked_inflight_allocations: float | None = None
    unexplained_error_lines: list[str] = field(default_factory=list)
    # ERROR lines of a graceful shutdown (after the soak's SIGTERM): reported, not failed on, since
    # the soak tests crashes; a graceful stop deserves its own test.
    shutdown_error_lines: list[str] = field(default_factory=list)
    takeover_seconds: float | None = None
    takeover_limit_seconds: float | None = None
    failures: list[str] = field(default_factory=list)

    def fail(self, message: str) -> None:
        self.failures.append(message)


class GangHealthHistory:
    """Follows pod events: members that failed, members marked for a stale gang, and a mark on a member
    that had finished before it (a finished member must never be evicted: KAI-Scheduler #1968)."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.marked: set[str] = set()
        self._finished_unmarked: set[str] = set()
        self.finished_then_marked: list[str] = []

    def observe(self, event_type: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        uid, name = str(meta.get("uid")), str(meta.get("name"))
        status = pod.get("status") or {}
        phase = status.get("phase")
        stale = any(
            c.get("type") == "DisruptionTarget" and c.get("reason") == "StaleGang"
            for c in status.get("conditions") or []
        )
        if stale and uid not in self.marked:
            self.marked.add(uid)
            if uid in self._finished_unmarked:
                self.finished_then_marked.append(f"{name}: {phase}, then marked StaleGang")
        if phase in ("Succeeded", "Failed") and not stale:
            self._finished_unmarked.add(uid)
            if phase == "Failed":
                self.failed.add(uid)


def satisfied_below_min_count(state: ClusterState) -> list[str]:
    """PodGroups whose PodGroupSatisfied is True with fewer than minCount members running or succeeded."""
    counts: dict[str, int] = {}
    for pod in state.pods:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        phase = (pod.get("status") or {}).get("phase")
        if group and (phase == "Succeeded" or (phase == "Running" and not meta.get("deletionTimestamp"))):
            counts[group] = counts.get(group, 0) + 1
    found = []
    for podgroup in state.podgroups:
        name = podgroup["metadata"]["name"]
        gang = ((podgroup.get("spec") or {}).get("schedulingPolicy") or {}).get("gang") or {}
        min_count = int(gang.get("minCount") or 1)
        for condition in (podgroup.get("status") or {}).get("conditions") or []:
            satisfied = condition.get("type") == "PodGroupSatisfied" and condition.get("status") == "True"
            if satisfied and counts.get(name, 0) < min_count:
                found.append(f"{name}: Satisfied with {counts.get(name, 0)} of minCount {min_count}")
    return found


def topology_broken(state: ClusterState) -> tuple[int, list[str]]:
    """The members checked, and the groups with a required topology whose live bound members are in
    more than one domain of a key (a replacement placed outside the survivors' domain)."""
    labels = {n["metadata"]["name"]: n["metadata"].get("labels") or {} for n in state.nodes}
    members: dict[str, list[str]] = {}
    for pod in state.pods:
        meta = pod.get("metadata") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        if group and node in labels and not meta.get("deletionTimestamp") and phase not in TERMINAL:
            members.setdefault(group, []).append(node)
    checked, found = 0, []
    for podgroup in state.podgroups:
        name = podgroup["metadata"]["name"]
        constraints = ((podgroup.get("spec") or {}).get("schedulingConstraints") or {}).get("topology") or []
        for key in (c.get("key") for c in constraints):
            nodes = members.get(name, [])
            checked += len(nodes)
            domains = {labels[node].get(key) for node in nodes}
            if len(domains) > 1:
                found.append(f"{name}: bound members in {key} {sorted(map(str, domains))}")
    return checked, found


TERMINAL = ("Succeeded", "Failed")


async def replace_lost_members(http: KubeHttp, plan: GroupPlan, lost: int, report: Report) -> list[str]:
    """What a zoned gang's controller does: new pods for the members lost with a node."""
    names = []
    for _ in range(lost):
        body = pod_manifest(plan, plan.pods + report.replacements_made)
        report.replacements_made += 1
        await persist(lambda body=body: http.create(PODS, body), f"create pod {body['metadata']['name']}")
        names.append(body["metadata"]["name"])
    return names


async def lose_node(http: KubeHttp, name: str) -> None:
    """A node lost for good: a NoExecute taint no pod tolerates (taint eviction takes its pods at once,
    as kube-controller-manager's after tolerationSeconds), then the Node object is deleted."""
    path = f"/api/v1/nodes/{name}"
    node = await persist(lambda: http.get(path), f"read node {name}")
    taints = [
        *((node.get("spec") or {}).get("taints") or []),
        {"key": LOST_NODE_TAINT, "effect": "NoExecute"},
    ]
    await persist(lambda: http.patch(path, {"spec": {"taints": taints}}), f"taint node {name}")
    await asyncio.sleep(1.0)
    await persist(lambda: http.delete(path), f"delete node {name}")


def preemptor_plan() -> GroupPlan:
    return GroupPlan(
        PREEMPTOR, "gang", 2, 2, PREEMPTOR_CPU_MILLIS, 64, "none", True, priority_class="soak-top"
    )


class InvariantWatch:
    """Continuous checking: a pod watch for bindings and periodic snapshots through a tracker."""

    def __init__(self, http: KubeHttp, report: Report) -> None:
        self.http = http
        self.report = report
        self.history = BindingHistory()
        self.preemptions = PreemptionHistory()
        self.health = GangHealthHistory()
        self.tracker = ViolationTracker(TRANSIENT_GRACE_SECONDS)
        self.pods = Informer(http, PODS)
        self.pods.add_handler(lambda _type, pod: self.history.observe(pod))
        self.pods.add_handler(self.preemptions.observe)
        self.pods.add_handler(self.health.observe)
        # Groups that lost a member to anything but the soak's churn: a lost node (a member may bind
        # there between the snapshot the soak picks the node from and the loss), a preemption, an
        # eviction. Nothing recreates those members, so such a group is not judged by being bound.
        self.disrupted_groups: set[str] = set()
        self.pods.add_handler(self._observe_disruption)
        self._tasks: list[asyncio.Task[None]] = []
        self.last_state = ClusterState()

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self.pods.run()), asyncio.create_task(self._check_forever())]
        await self.pods.synced.wait()

    async def check_once(self) -> list[Violation]:
        try:
            self.last_state = await asyncio.wait_for(
                fetch_cluster_state(self.http.session, self.http.base_url), CHECK_TIMEOUT_SECONDS
            )
        except (aiohttp.ClientError, TimeoutError) as exc:
            # A listing cut or stalled by a dropped connection; the next round looks again, but say so.
            self.report.failed_checks += 1
            self.report.last_check_error = repr(exc)
            return []
        violations = (
            check_state(self.last_state)
            + self.history.violations()
            + self.preemptions.violations(gang_min_counts(self.last_state.podgroups))
        )
        self.report.checks += 1
        checked, broken = topology_broken(self.last_state)
        self.report.topology_checks += checked
        self.report.topology_broken += [b for b in broken if b not in self.report.topology_broken]
        for confirmed in self.tracker.update(violations):
            self.report.violations.append(str(confirmed))
            print(f"  VIOLATION {confirmed}", flush=True)
        return violations

    def _observe_disruption(self, event_type: str, pod: dict[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
        if group and (event_type == "DELETED" or meta.get("deletionTimestamp")):
            self.disrupted_groups.add(group)

    def preempted(self, plans: Iterable[GroupPlan]) -> set[str]:
        """The groups that lost pods to a preemption (excused from being bound at the end)."""
        return {plan.name for plan in plans if (NAMESPACE, plan.name) in self.preemptions.preempted_groups}

    async def _check_forever(self) -> None:
        while True:
            await self.check_once()
            await asyncio.sleep(CHECK_INTERVAL_SECONDS)

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task


def bound_replacements(state: ClusterState, names: Iterable[str]) -> int:
    wanted = set(names)
    return sum(
        1 for p in state.pods if p["metadata"]["name"] in wanted and (p.get("spec") or {}).get("nodeName")
    )


def bound_members(state: ClusterState, plan: GroupPlan) -> int:
    return sum(
        1
        for pod in state.pods
        if (pod.get("metadata") or {}).get("labels", {}).get(POD_GROUP_LABEL) == plan.name
        and (pod.get("spec") or {}).get("nodeName")
    )


def shared_nodes(state: ClusterState, plans: Iterable[GroupPlan]) -> list[str]:
    """One-per-node groups with two members on one node (their anti-affinity was ignored)."""
    spread = {plan.name for plan in plans if plan.one_per_node}
    seen: dict[tuple[str, str], str] = {}
    found = []
    for pod in state.pods:
        group = (pod.get("metadata") or {}).get("labels", {}).get(POD_GROUP_LABEL)
        node = (pod.get("spec") or {}).get("nodeName")
        if group in spread and node:
            other = seen.setdefault((group, node), pod["metadata"]["name"])
            if other != pod["metadata"]["name"]:
                found.append(f"{group}: {other} and {pod['metadata']['name']} on {node}")
    return found


def settled(state: ClusterState, plans: Iterable[GroupPlan]) -> bool:
    """Every group that fits is bound and every one that does not says why (a waiting gang's status is
    held back for the status writer's settle window first, so it can come a moment later)."""
    return all(
        bound_members(state, plan) >= (plan.min_count if plan.policy == "gang" else plan.pods)
        if plan.fits
        else has_clear_unschedulable_condition(state, plan)
        for plan in plans
    )


def status_of(state: ClusterState, plan: GroupPlan) -> str:
    """The group's PodGroup status as the API showed it last, for the report."""
    for podgroup in state.podgroups:
        if podgroup.get("metadata", {}).get("name") == plan.name:
            return json.dumps(podgroup.get("status") or {}, sort_keys=True)[:600]
    return "(no PodGroup)"


def has_clear_unschedulable_condition(state: ClusterState, plan: GroupPlan) -> bool:
    for podgroup in state.podgroups:
        if podgroup.get("metadata", {}).get("name") != plan.name:
            continue
        for condition in (podgroup.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodGroupScheduled" and condition.get("status") == "False":
                return bool(condition.get("reason")) and bool(condition.get("message"))
    return False


async def run_chaos_phase(
    args: argparse.Namespace, http: KubeHttp, kubeconfig: Path, workdir: Path, report: Report
) -> None:
    rng = random.Random(args.seed)
    plans = plan_workload(args.pods, rng)
    report.pods = sum(plan.pods for plan in plans)
    report.groups = len(plans)
    report.groups_that_fit = sum(1 for plan in plans if plan.fits)
    print(
        f"soak: {report.pods} pods in {report.groups} groups ({report.groups_that_fit} can fit)", flush=True
    )

    watch = InvariantWatch(http, report)
    await watch.start()
    operator = Operator("operator", kubeconfig, workdir, leader_elect=False, lease=(15.0, 10.0, 2.0))
    operator.start()
    started = time.monotonic()
    deadline = started + args.max_seconds
    chaos = Chaos(http)
    await chaos.start()
    creation = asyncio.create_task(create_workload(http, plans, spread_seconds=args.max_seconds * 0.3))
    # Kills land at random moments, but each incarnation first gets to start and do some work.
    spacing = args.max_seconds * 0.6 / max(1, args.kills)
    churned: set[str] = set()
    try:
        for _ in range(args.kills):
            if not await operator.wait_healthy(within_seconds=60):
                report.fail(f"operator incarnation {len(operator.logs)} never answered /healthz")
            await asyncio.sleep(rng.uniform(0.5, spacing))
            if not operator.running():
                report.fail(f"the operator exited by itself before kill {report.kills + 1}")
                operator.start()
                continue
            operator.kill()
            report.kills += 1
            print(f"  t={time.monotonic() - started:5.1f}s SIGKILL #{report.kills}", flush=True)
            await asyncio.sleep(rng.uniform(0.2, 2.0))
            operator.start()
        await creation
        # Node losses under faults: groups with members there lose them (and are excused below).
        await watch.check_once()
        used = sorted(
            {p["spec"]["nodeName"] for p in watch.last_state.pods if (p.get("spec") or {}).get("nodeName")}
        )
        zoned = {plan.name: plan for plan in plans if plan.zoned}
        zoned_nodes = sorted(
            {
                p["spec"]["nodeName"]
                for p in watch.last_state.pods
                if (p.get("spec") or {}).get("nodeName")
                and (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL) in zoned
            }
        )
        losses = rng.sample(used, min(args.node_losses, len(used)))
        if zoned_nodes and losses and not set(losses) & set(zoned_nodes):
            losses[0] = rng.choice(zoned_nodes)
        replacements: list[str] = []
        for name in losses:
            on_node = [
                (p["metadata"].get("labels") or {}).get(POD_GROUP_LABEL, "")
                for p in watch.last_state.pods
                if (p.get("spec") or {}).get("nodeName") == name
            ]
            await lose_node(http, name)
            report.node_losses += 1
            print(f"  t={time.monotonic() - started:5.1f}s lost node {name}", flush=True)
            for group in sorted(set(on_node) & set(zoned)):
                replacements += await replace_lost_members(http, zoned[group], on_node.count(group), report)
        # Churn under faults: delete a few groups, with and without claims, while the operator works;
        # the reservations of their pods must be released and nothing may stay allocated for them.
        churn = max(1, len(plans) // 40)
        for claims in (False, True):
            churnable = [p for p in plans if p.fits and not p.zoned and (p.claims != "none") == claims]
            for plan in churnable[-churn:]:
                await delete_group(http, plan)
                churned.add(plan.name)
        # Groups whose members fail or were on a lost node are recovered or left below minCount on
        # purpose: judged by the gang-health invariants, not by being bound at the end.
        failing = {p.name for p in plans if p.fail_after is not None}

        def remaining_plans() -> list[GroupPlan]:
            excused = (watch.disrupted_groups - set(zoned)) | failing
            return [p for p in plans if p.name not in churned and p.name not in excused]

        # The replacements bind before the preemptor below may take their zone's room.
        while time.monotonic() < deadline:
            await watch.check_once()
            remaining = remaining_plans()
            preempted = watch.preempted(remaining)
            replaced = bound_replacements(watch.last_state, replacements)
            report.replacements_bound = max(report.replacements_bound, replaced)
            if replaced == len(replacements) and settled(
                watch.last_state, [p for p in remaining if p.name not in preempted]
            ):
                report.seconds_to_settle = round(time.monotonic() - started, 1)
                break
            if not operator.running():
                report.fail("the operator exited by itself")
                operator.start()
            await asyncio.sleep(1.0)
        # A gang that fits only by preempting: the soak's preemption invariants then check something.
        preemptor = preemptor_plan()
        await create_workload(http, [preemptor])
        preempt_by = time.monotonic() + 30.0
        while time.monotonic() < preempt_by:
            await watch.check_once()
            if (
                watch.preemptions.victims
                and bound_members(watch.last_state, preemptor) >= preemptor.min_count
            ):
                break
            await asyncio.sleep(1.0)
        # Final judgement without faults, so what we read is not an injected error.
        await chaos.stop()
        settle_by = time.monotonic() + (TRANSIENT_GRACE_SECONDS if report.seconds_to_settle is None else 10.0)
        while time.monotonic() < settle_by and check_state(watch.last_state):
            await asyncio.sleep(1.0)
            await watch.check_once()
        await watch.check_once()
        final = check_state(watch.last_state)
        for violation in final:
            text = f"at end: {violation}"
            if text not in report.violations and str(violation) not in report.violations:
                report.violations.append(text)
        report.preemption_victims = len(watch.preemptions.victims)
        report.member_failures = len(watch.health.failed)
        report.stale_gang_evictions = len(watch.health.marked)
        report.finished_members_evicted = watch.health.finished_then_marked
        report.replacements_bound = max(
            report.replacements_bound, bound_replacements(watch.last_state, replacements)
        )
        # The status follows the members within a write or two (held up to its settle time, retried
        # after the faults' errors): only a claim that outlasts that counts.
        status_by = time.monotonic() + 15.0
        while satisfied_below_min_count(watch.last_state) and time.monotonic() < status_by:
            await asyncio.sleep(1.0)
            await watch.check_once()
        report.satisfied_below_min_count = satisfied_below_min_count(watch.last_state)
        wanted = {
            "kills": (report.kills, args.kills),
            "preemption_victims": (report.preemption_victims, 1),
            "member_failures": (report.member_failures, 1 if any(p.fail_after for p in plans) else 0),
            "stale_gang_evictions": (
                report.stale_gang_evictions,
                1 if any(p.fail_after for p in plans) else 0,
            ),
            "node_losses": (report.node_losses, args.node_losses),
            # every replacement bound: the topology invariant judged them, not just first placements
            "replacements_bound": (
                report.replacements_bound,
                max(report.replacements_made, 1 if args.node_losses else 0),
            ),
        }
        report.fault_minimums_missed = [
            f"{k}: {got} < {least}" for k, (got, least) in wanted.items() if got < least
        ]
        remaining = remaining_plans()
        preempted = watch.preempted(remaining)
        for plan in remaining:
            if plan.name in preempted:
                continue
            bound = bound_members(watch.last_state, plan)
            if plan.fits and bound < (plan.min_count if plan.policy == "gang" else plan.pods):
                report.unbound_groups_that_fit.append(
                    f"{plan.name}: {bound}/{plan.pods} bound, minCount {plan.min_count}"
                )
            if not plan.fits:
                if bound:
                    report.bound_groups_that_cannot_fit.append(f"{plan.name}: {bound} bound")
                if not has_clear_unschedulable_condition(watch.last_state, plan):
                    report.groups_without_clear_condition.append(
                        f"{plan.name} ({plan.policy}, {plan.pods} pods, minCount {plan.min_count}, "
                        f"claims {plan.claims}): "
                        f"status {status_of(watch.last_state, plan)}"
                    )
        report.pods_bound_twice = [str(v) for v in watch.history.violations()]
        report.anti_affinity_ignored = shared_nodes(watch.last_state, remaining)
        if not await operator.wait_healthy(within_seconds=30):
            report.fail("the operator is not healthy at the end")
        async with aiohttp.ClientSession() as session:
            report.leaked_inflight_allocations = await operator.inflight_allocations(session)
        if report.leaked_inflight_allocations is None:
            report.fail("the operator's /metrics shows no lockstep_inflight_claim_allocations at the end")
    finally:
        await chaos.stop()
        operator.stop()
        await watch.stop()
        creation.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await creation
    report.unexplained_error_lines = unexplained_errors(operator.log_lines())[:20]
    report.shutdown_error_lines = unexplained_errors(operator.shutdown_lines())[:20]


async def run_replica_phase(
    args: argparse.Namespace, http: KubeHttp, kubeconfig: Path, workdir: Path, report: Report
) -> None:
    """Two replicas with leader election under the same faults; kill the leader, time the takeover."""
    duration, deadline, retry = args.lease_duration, args.lease_duration * 2 / 3, args.lease_duration / 5
    replicas = [
        Operator(f"replica-{i}", kubeconfig, workdir, True, (duration, deadline, retry)) for i in range(2)
    ]
    await persist(
        lambda: http.create(
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NAMESPACE}},
        ),
        "create the lease namespace",
    )
    rng = random.Random(args.seed + 1)
    plans = [p for p in plan_workload(max(20, args.pods // 10), rng) if p.fits]
    plans = [
        GroupPlan(f"ha-{p.name}", p.policy, p.pods, p.min_count, p.cpu_millis, p.memory_mib, "none", True)
        for p in plans
    ]
    watch = InvariantWatch(http, report)
    await watch.start()
    chaos = Chaos(http)
    await chaos.start()
    for replica in replicas:
        replica.start()
    try:
        leader = None
        wait_until = time.monotonic() + duration * 3 + 30
        while leader is None and time.monotonic() < wait_until:
            leader = next((r for r in replicas if r.became_leader()), None)
            await asyncio.sleep(0.2)
        if leader is None:
            report.fail("no replica became leader")
            return
        await create_workload(http, plans[: len(plans) // 2])
        await asyncio.sleep(2.0)
        follower = next(r for r in replicas if r is not leader)
        killed_at = leader.kill()
        report.kills += 1
        # The state lives in another process's log, so poll it.
        while not follower.became_leader() and time.monotonic() < killed_at + duration * 4:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        if follower.became_leader():
            report.takeover_seconds = round(time.monotonic() - killed_at, 2)
        report.takeover_limit_seconds = round(duration + 2 * retry + 1.0, 2)
        if report.takeover_seconds is None or report.takeover_seconds > report.takeover_limit_seconds:
            report.fail(f"takeover took {report.takeover_seconds}s, limit {report.takeover_limit_seconds}s")
        leader.start()  # the killed replica comes back as a follower
        await create_workload(http, plans[len(plans) // 2 :])
        end = time.monotonic() + args.max_seconds
        while time.monotonic() < end:
            await watch.check_once()
            if settled(watch.last_state, plans):
                break
            await asyncio.sleep(1.0)
        else:
            report.fail("two-replica phase: not every group was bound in time")
        overlap = leadership_overlap(
            follower.log_lines(only_current=True), leader.log_lines(only_current=True)
        )
        if overlap:
            report.fail(overlap)
        await chaos.stop()
        await asyncio.sleep(3.0)
        await watch.check_once()
        report.pods_bound_twice += [str(v) for v in watch.history.violations()]
    finally:
        await chaos.stop()
        for replica in replicas:
            replica.stop()
        await watch.stop()
    report.unexplained_error_lines += unexplained_errors(line for r in replicas for line in r.log_lines())[
        :20
    ]
    report.shutdown_error_lines += unexplained_errors(line for r in replicas for line in r.shutdown_lines())[
        :20
    ]


def judge(report: Report) -> None:
    for label, items in (
        ("invariant violations", report.violations),
        ("groups that fit but were not bound", report.unbound_groups_that_fit),
        ("groups that cannot fit but have members bound", report.bound_groups_that_cannot_fit),
        (
            "unschedulable groups without a clear PodGroupScheduled=False condition",
            report.groups_without_clear_condition,
        ),
        ("pods bound twice", report.pods_bound_twice),
        ("one-per-node groups sharing a node", report.anti_affinity_ignored),
        ("unexplained ERROR log lines", report.unexplained_error_lines),
        ("finished members evicted", report.finished_members_evicted),
        ("groups Satisfied below minCount", report.satisfied_below_min_count),
        ("groups whose bound members break their topology constraint", report.topology_broken),
        ("fault classes that did not happen as often as claimed", report.fault_minimums_missed),
    ):
        if items:
            report.fail(f"{len(items)} {label}")
    if report.failed_checks > report.checks:
        report.fail(
            f"the cluster could be read for only {report.checks} of {report.checks + report.failed_checks} "
            f"invariant checks (last error: {report.last_check_error})"
        )
    if report.leaked_inflight_allocations:
        report.fail(
            f"{report.leaked_inflight_allocations:g} in-flight claim allocations left in the operator"
        )


async def main_async(args: argparse.Namespace, workdir: Path, report: Report) -> int:
    try:
        # The pods of a deleted node are the pod GC's: every 5 s, after 10 s missing (upstream's 20 s
        # and 40 s would outlast the transient grace of the invariants).
        sim = await start_sim(
            args.nodes,
            args.devices_per_node,
            workdir,
            extra_args=("--pod-gc-period", str(POD_GC_PERIOD_SECONDS)),
        )
    except ProcessFailed as exc:
        print(f"soak: the emulator could not be started: {exc}", file=sys.stderr)
        return EXIT_NOT_AVAILABLE
    kubeconfig = workdir / "kubeconfig"
    session = new_session()
    http = KubeHttp(load_kubeconfig(kubeconfig).server, session)
    try:
        await persist(
            lambda: http.create(
                "/api/v1/namespaces",
                {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
            ),
            "create the soak namespace",
        )
        await persist(
            lambda: http.create("/apis/storage.k8s.io/v1/storageclasses", STORAGE_CLASS),
            "create the StorageClass",
        )
        await persist(
            lambda: http.create("/apis/resource.k8s.io/v1/deviceclasses", EXTENDED_RESOURCE_CLASS),
            "create the extended resource's DeviceClass",
        )
        await run_chaos_phase(args, http, kubeconfig, workdir, report)
        if args.replicas == 2:
            await run_replica_phase(args, http, kubeconfig, workdir, report)
    finally:
        await session.close()
        sim.stop()
    judge(report)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=2000, help="pods in the chaos phase (default 2000)")
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs of the operator (default 10)")
    parser.add_argument("--max-seconds", type=float, default=300.0, help="time limit per phase (default 300)")
    parser.add_argument(
        "--replicas", type=int, choices=(1, 2), default=2, help="2 adds the leader-election phase"
    )
    parser.add_argument(
        "--lease-duration", type=float, default=6.0, help="lease duration of the 2-replica phase"
    )
    parser.add_argument("--nodes", type=int, default=40, help="simulated nodes (default 40)")
    parser.add_argument("--devices-per-node", type=int, default=8, help="simulated GPUs per node (default 8)")
    parser.add_argument("--node-losses", type=int, default=1, help="nodes lost during the chaos phase")
    parser.add_argument("--seed", type=int, default=9, help="random seed of workload and kill times")
    parser.add_argument(
        "--workdir", default=None, help="logs and kubeconfig go here (default: a new temp dir)"
    )
    parser.add_argument("--report", default=None, help="also write the JSON report here")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging("console", "warning")
    for name in ("pods", "kills", "nodes"):
        if getattr(args, name) < (0 if name == "kills" else 1):
            print(f"soak: --{name} must be positive", file=sys.stderr)
            return 2
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="lockstep-soak-")).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"soak: logs in {workdir}", flush=True)
    report = Report()
    code = asyncio.run(main_async(args, workdir, report))
    if code:
        return code
    text = json.dumps(asdict(report), indent=2)
    print(text)
    if args.report:
        Path(args.report).write_text(text + "\n")
    print(
        "soak: PASSED" if not report.failures else f"soak: FAILED: {'; '.join(report.failures)}", flush=True
    )
    return 0 if not report.failures else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
