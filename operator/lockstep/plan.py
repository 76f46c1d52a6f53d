"""``lockstep plan -f FILE...``: would these groups fit if submitted now, and where?

The files hold PodGroups (lockstep's, or upstream's ``scheduling.k8s.io`` v1beta1/v1alpha2) and
their pods, or Jobs whose pod template carries lockstep's two template lines (the pod-group label
and ``scheduling.lockstep.dev/min-count``). The cluster is listed once (read-only: ``list`` on the
kinds of ``lockstep.snapshot.LISTED_KINDS``), the objects read are added to that snapshot as if
created now, and the operator's own group cycle runs on it, group by group in the operator's queue
order (priority, then file order); a group that fits keeps its placements, so the next sees them
taken. A group that does not fit gets the preemption planner's verdict. Nothing is written.

Exit status: 0 every group fits now, 1 at least one does not, 2 the input or the cluster cannot be
read.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from lockstep import GROUP, POD_GROUP_LABEL, VERSION
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.api.upstream_podgroup import VERSIONS as UPSTREAM_VERSIONS
from lockstep.config import ConfigError, Settings, load_settings
from lockstep.controller.core import SchedulerCore
from lockstep.controller.template_gangs import podgroup_for, requested_min_count
from lockstep.kube.client import COMPOSITE_POD_GROUPS, ApiError, KubeClient
from lockstep.kube.credentials import CredentialsError, load_connection_info
from lockstep.logging import configure_logging
from lockstep.scheduler.framework import Code, GroupKey
from lockstep.scheduler.reservation import known_end, quantity, timestamp
from lockstep.snapshot import ClusterState, DryRun, build_core, dry_run, group_key, list_cluster

FITS, DOES_NOT_FIT, BAD_INPUT = 0, 1, 2
INDENT = "  "
LOCKSTEP_API = f"{GROUP}/{VERSION}"
UPSTREAM_APIS = frozenset(f"{UPSTREAM_GROUP}/{v}" for v in UPSTREAM_VERSIONS)


class PlanInputError(ValueError):
    """A file or object ``lockstep plan`` cannot use; the message names the file, object and field."""


@dataclass(slots=True)
class PlanInput:
    """The objects read, as they would be created (namespaced, with the identity the API would give)."""

    podgroups: list[dict[str, Any]] = field(default_factory=list)
    composites: list[dict[str, Any]] = field(default_factory=list)  # CompositePodGroups
    pods: list[dict[str, Any]] = field(default_factory=list)
    # groups in file order (their PodGroup, or named by pods / a Job)
    groups: list[GroupKey] = field(default_factory=list)

    def add_group(self, key: GroupKey) -> None:
        if key not in self.groups:
            self.groups.append(key)


def read_inputs(paths: Sequence[str], namespace: str, scheduler_name: str) -> PlanInput:
    documents: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        try:
            text = sys.stdin.read() if path == "-" else Path(path).read_text()
            loaded = list(yaml.safe_load_all(text))
        except OSError as exc:
            raise PlanInputError(f"{path}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise PlanInputError(f"{path}: not YAML: {exc}") from None
        for document in loaded:
            if document is None:
                continue
            if not isinstance(document, dict):
                raise PlanInputError(f"{path}: a document is not an object")
            items = document.get("items") if document.get("kind") == "List" else [document]
            documents += [(path, item) for item in items or []]
    planned = PlanInput()
    for number, (path, obj) in enumerate(documents):
        _add(planned, path, obj, namespace, scheduler_name, number)
    if not planned.groups:
        raise PlanInputError(f"{', '.join(paths)}: no PodGroup, Pod or Job to plan")
    return planned


def _where(path: str, obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{path}: {obj.get('kind')} {meta.get('namespace', '')}/{meta.get('name', '')}".replace(" /", " ")


def _identity(obj: dict[str, Any], namespace: str, number: int) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    meta = obj.setdefault("metadata", {})
    meta.setdefault("namespace", namespace)
    meta.setdefault("uid", f"lockstep-plan-{number}")
    meta.setdefault("resourceVersion", "1")
    meta.setdefault("generation", 1)
    meta.setdefault("creationTimestamp", "2000-01-01T00:00:00Z")
    return obj


def _add(
    planned: PlanInput, path: str, obj: dict[str, Any], namespace: str, scheduler_name: str, number: int
) -> None:
    kind, api_version = obj.get("kind"), obj.get("apiVersion")
    name = (obj.get("metadata") or {}).get("name")
    if not name:
        raise PlanInputError(f"{path}: a {kind or 'document'} without metadata.name")
    if kind == "PodGroup" and (api_version == LOCKSTEP_API or api_version in UPSTREAM_APIS):
        podgroup = _identity(obj, namespace, number)
        planned.podgroups.append(podgroup)
        planned.add_group(group_key(podgroup))
    elif kind == COMPOSITE_POD_GROUPS.kind and api_version == COMPOSITE_POD_GROUPS.api_version:
        planned.composites.append(_identity(obj, namespace, number))
    elif kind == "Pod" and api_version == "v1":
        _add_pod(planned, path, _identity(obj, namespace, number), scheduler_name)
    elif kind == "Job" and api_version == "batch/v1":
        job = _identity(obj, namespace, number)
        template = (job.get("spec") or {}).get("template") or {}
        spec = job.get("spec") or {}
        count = int(spec.get("parallelism", 1))
        if spec.get("completions") is not None:
            count = min(count, int(spec["completions"]))
        for index in range(count):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    **copy.deepcopy(template.get("metadata") or {}),
                    "name": f"{name}-{index}",
                    "namespace": job["metadata"]["namespace"],
                    "uid": f"lockstep-plan-{number}-{index}",
                    "resourceVersion": "1",
                    "creationTimestamp": "2000-01-01T00:00:00Z",
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
            }
            _add_pod(planned, path, pod, scheduler_name, f"Job {job['metadata']['namespace']}/{name}")
    else:
        raise PlanInputError(
            f"{_where(path, obj)}: {api_version} {kind} is not planned (PodGroups of {LOCKSTEP_API} or "
            f"{', '.join(sorted(UPSTREAM_APIS))}, {COMPOSITE_POD_GROUPS.api_version} CompositePodGroups, "
            "v1 Pods and batch/v1 Jobs are)"
        )


def _add_pod(
    planned: PlanInput, path: str, pod: dict[str, Any], scheduler_name: str, owner: str = ""
) -> None:
    where = owner or _where(path, pod)
    spec = pod.setdefault("spec", {})
    if spec.get("schedulerName") != scheduler_name:
        raise PlanInputError(
            f"{where}: spec.schedulerName is {spec.get('schedulerName')!r}, not {scheduler_name!r}: "
            "lockstep would not schedule it"
        )
    spec.pop("nodeName", None)
    pod.setdefault("status", {"phase": "Pending"})
    meta = pod["metadata"]
    group = (meta.get("labels") or {}).get(POD_GROUP_LABEL)
    upstream_group = (spec.get("schedulingGroup") or {}).get("podGroupName")
    asked = requested_min_count(pod)
    if isinstance(asked, str):
        raise PlanInputError(f"{where}: {asked}")
    planned.pods.append(pod)
    if upstream_group:
        planned.add_group(GroupKey(meta["namespace"], str(upstream_group), upstream=True))
    elif group:
        key = GroupKey(meta["namespace"], str(group))
        planned.add_group(key)
        if asked is not None and not any(group_key(g) == key for g in planned.podgroups):
            # the PodGroup lockstep would create from the template lines (if none exists)
            planned.podgroups.append(_identity(podgroup_for(key.namespace, key.name, asked, None), "", 0))
    else:
        planned.add_group(GroupKey(meta["namespace"], meta["name"], pod_group=False))


def merged(state: ClusterState, planned: PlanInput) -> ClusterState:
    """The snapshot with the objects read added (an object of the same name is replaced; a PodGroup
    made from template lines only where none exists)."""

    def ref(obj: dict[str, Any]) -> tuple[str, str, str]:
        meta = obj["metadata"]
        return str(obj.get("apiVersion", "")).split("/")[0], meta.get("namespace", ""), meta["name"]

    def replace(listed: list[dict[str, Any]], new: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        new = list(new)
        names = {ref(o)[1:] for o in new}
        return [o for o in listed if ref(o)[1:] not in names] + new

    existing = {ref(g) for g in state.podgroups}
    made = f"{GROUP}/created-from-pods"
    podgroups = [
        g
        for g in planned.podgroups
        if not ((g["metadata"].get("annotations") or {}).get(made) and ref(g) in existing)
    ]
    lockstep = [g for g in podgroups if g.get("apiVersion") == LOCKSTEP_API]
    upstream = [g for g in podgroups if g.get("apiVersion") != LOCKSTEP_API]
    result = copy.copy(state)
    result.podgroups = replace(state.podgroups, lockstep)
    result.upstream_podgroups = replace(state.upstream_podgroups, upstream)
    result.composites = replace(state.composites, planned.composites)
    result.pods = replace(state.pods, planned.pods)
    return result


# --- the answer ---------------------------------------------------------------------------------------


def reservation_hint(core: SchedulerCore, key: GroupKey) -> dict[str, Any] | None:
    """What a reservation holds (read back from the group's status) or would hold for a group that
    does not fit, and until when: the nodes with the capacity held there, the pods to wait for and
    their latest known end (None when one of them has no activeDeadlineSeconds: "unknown"). None
    when no reservation can help (reservations off, or the gang would not fit on an emptied cluster)."""
    scheduler = core.scheduler
    now = scheduler.clock()
    existing = scheduler.reservations.reservations.get(key)
    if existing is not None:
        holds, held = existing.holds, True
    else:
        if not scheduler.reservations.enabled:
            return None
        group = core.cache.podgroup(key)
        pods = core.cache.unscheduled_members(key)
        planned = scheduler.reservation_planner.plan(key, group, pods, now)
        if isinstance(planned, str):
            return {"held": False, "possible": False, "why": planned}
        holds, held = planned, False
    ends: list[float | None] = []
    waited = 0
    for node in holds:
        for pod in core.cache.pods_on_node(node):
            if pod.group_key != key and not pod.terminal:
                waited += 1
                ends.append(known_end(pod, now))
    known = bool(ends) and all(end is not None for end in ends)
    expected = max(end for end in ends if end is not None) if known else None
    return {
        "held": held,
        "possible": True,
        "nodes": [
            {"name": name, "resources": {r: quantity(r, a) for r, a in sorted(hold.requests.items())}}
            for name, hold in sorted(holds.items())
        ],
        "waitingFor": waited,
        "expectedStart": timestamp(expected) if expected is not None else ("now" if not ends else "unknown"),
    }


def group_answer(
    core: SchedulerCore, key: GroupKey, result: DryRun | str, claims_before: frozenset[str] = frozenset()
) -> dict[str, Any]:
    group = core.cache.podgroup(key)
    answer: dict[str, Any] = {
        "group": f"{key.namespace}/{key.name}" if key.pod_group else f"pod {key.namespace}/{key.name}",
        "kind": "PodGroup" if key.pod_group else "Pod",
        "upstream": key.upstream,
        "policy": ("gang" if group.is_gang else "basic") if group is not None else None,
        "minCount": group.min_count if group is not None and group.is_gang else None,
        "fits": False,
        "verdict": None,
        "message": None,
        "placements": [],
        "claims": [],
        "unplaced": [],
        "preemption": None,
        "reservation": None,
    }
    if isinstance(result, str):
        answer["verdict"], answer["message"] = "NotReady", result
        return answer
    outcome = result.outcome
    answer["verdict"] = outcome.status.code.name.replace("_", " ").title().replace(" ", "")
    answer["message"] = outcome.status.message or "minCount can be met"
    answer["fits"] = outcome.status.code is Code.SUCCESS and bool(outcome.placements)
    answer["placements"] = [{"pod": p.pod.key, "node": p.node_name} for p in outcome.placements]
    answer["unplaced"] = [
        {
            "pod": d.pod,
            "nodesEvaluated": d.nodes_evaluated,
            "message": d.message,
            "rejections": [
                {"plugin": r.plugin, "nodes": r.count, "sample": list(r.sample_nodes)} for r in d.plugins
            ],
        }
        for d in outcome.diagnoses
    ]
    if answer["fits"]:
        # the claims this cycle allocated: in flight now, not before it
        answer["claims"] = sorted(
            (
                {
                    "claim": claim.key,
                    "devices": [
                        f"{r.driver}/{r.pool}/{r.device}" for r in claim.status.allocation.devices.results
                    ],
                }
                for claim in core.resources.in_flight.claims()
                if claim.key not in claims_before and claim.status.allocation is not None
            ),
            key=lambda c: str(c["claim"]),
        )
    verdict = result.preemption
    if verdict is not None:
        answer["preemption"] = {
            "result": verdict.result.value,
            "message": verdict.message,
            "victims": [
                {"pod": v.key, "node": v.node_name, "priority": v.priority}
                for v in (verdict.plan.victims if verdict.plan is not None else ())
            ],
            "nominations": [
                {"pod": pod.key, "node": node}
                for pod, node in (verdict.plan.nominations if verdict.plan is not None else ())
            ],
        }
    if not answer["fits"]:
        answer["reservation"] = reservation_hint(core, key)
    return answer


def plan_groups(core: SchedulerCore, keys: Sequence[GroupKey]) -> list[dict[str, Any]]:
    """Each group's answer, in the operator's queue order: higher priority first, then file order."""
    order = sorted(range(len(keys)), key=lambda i: (-core.cache.group_priority(keys[i]), i))
    answers: dict[int, dict[str, Any]] = {}
    for index in order:
        key = keys[index]
        claims_before = frozenset(c.key for c in core.resources.in_flight.claims())
        answers[index] = group_answer(core, key, dry_run(core, key, keep=True), claims_before)
    return [answers[i] for i in range(len(keys))]


def render_text(answers: Sequence[dict[str, Any]]) -> str:
    lines: list[str] = []
    for answer in answers:
        shape = ""
        if answer["policy"] is not None:
            shape = f" ({answer['policy']}" + (
                f", minCount {answer['minCount']})" if answer["minCount"] else ")"
            )
        head = (
            f"{answer['kind']} {answer['group']}{shape}" if answer["kind"] == "PodGroup" else answer["group"]
        )
        lines.append(f"{head}: {'fits now' if answer['fits'] else 'does not fit now'}")
        if not answer["fits"]:
            lines.append(f"{INDENT}{answer['verdict']}: {answer['message']}")
        for placement in answer["placements"]:
            lines.append(f"{INDENT}{placement['pod']} -> {placement['node']}")
        for claim in answer["claims"]:
            lines.append(f"{INDENT}claim {claim['claim']}: {', '.join(claim['devices'])}")
        for unplaced in answer["unplaced"] if not answer["fits"] else ():
            if not unplaced["nodesEvaluated"]:
                lines.append(f"{INDENT}{unplaced['pod']}: refused before any node was evaluated")
            else:
                lines.append(
                    f"{INDENT}{unplaced['pod']}: no node among {unplaced['nodesEvaluated']} evaluated"
                )
            for rejection in unplaced["rejections"]:
                more = ", ..." if rejection["nodes"] > len(rejection["sample"]) else ""
                sample = ", ".join(rejection["sample"])
                lines.append(
                    f"{INDENT * 2}{rejection['plugin']} rejected {rejection['nodes']} nodes ({sample}{more})"
                )
            if unplaced["message"]:
                lines.append(f"{INDENT * 2}{unplaced['message']}")
        preemption = answer["preemption"]
        if preemption is not None:
            lines.append(f"{INDENT}preemption: {preemption['result']}: {preemption['message']}")
            for victim in preemption["victims"]:
                where = f"on {victim['node']} (priority {victim['priority']})"
                lines.append(f"{INDENT * 2}would preempt {victim['pod']} {where}")
            for nomination in preemption["nominations"]:
                lines.append(f"{INDENT * 2}would nominate {nomination['pod']} for {nomination['node']}")
        if not answer["fits"]:
            reservation = answer["reservation"]
            if reservation is None:
                lines.append(f"{INDENT}expected start: unknown (reservations are off)")
            elif not reservation["possible"]:
                lines.append(f"{INDENT}reservation: none can help: {reservation['why']}")
                lines.append(f"{INDENT}expected start: unknown")
            else:
                verb = "holds" if reservation["held"] else "would hold"
                nodes = ", ".join(
                    f"{n['name']} ({', '.join(f'{r} {a}' for r, a in n['resources'].items())})"
                    for n in reservation["nodes"]
                )
                lines.append(
                    f"{INDENT}reservation {verb} {nodes}, waiting for {reservation['waitingFor']} pods"
                )
                lines.append(f"{INDENT}expected start: {reservation['expectedStart']}")
    return "\n".join(lines)


async def plan(paths: Sequence[str], settings: Settings, namespace: str = "default") -> list[dict[str, Any]]:
    planned = read_inputs(paths, namespace, settings.scheduler_name)
    async with KubeClient(await load_connection_info(settings.kubeconfig)) as client:
        state = merged(await list_cluster(client), planned)
        core = build_core(settings, client, state)
        return plan_groups(core, planned.groups)


def plan_command(args: argparse.Namespace) -> int:
    configure_logging("console", "warning")
    try:
        settings = load_settings(kubeconfig=args.kubeconfig, feature_gates=args.feature_gates)
        answers = asyncio.run(plan(args.filename, settings, args.namespace))
    except (ConfigError, PlanInputError, CredentialsError) as exc:
        print(f"lockstep plan: {exc}", file=sys.stderr)
        return BAD_INPUT
    except (ApiError, aiohttp.ClientError, OSError) as exc:
        print(f"lockstep plan: cannot read the cluster: {exc}", file=sys.stderr)
        return BAD_INPUT
    fits = all(answer["fits"] for answer in answers)
    if args.output == "json":
        print(json.dumps({"fits": fits, "groups": answers}, indent=2))
    else:
        print(render_text(answers))
    return FITS if fits else DOES_NOT_FIT
