"""``lockstep explain NAMESPACE/PODGROUP``: why a group is or is not scheduled.

Two sources, both printed: what the operator recorded in the API (the PodGroup's status, its
members' PodScheduled conditions, its claims), and a dry run of one group cycle against the
cluster as it is now, with the same plugins and feature gates as the operator. The dry run names,
per pod, the plugin that rejected nodes (with counts and a few node names) and, for claims, the
request or constraint that could not be satisfied; when the group does not fit it also runs the
preemption planner and says whom it would preempt. A preemption in progress (nominated members,
victims still terminating) and a capacity reservation (held nodes, pods waited for, expected
completion) are shown from the API; the dry run respects the capacity other gangs hold. It writes
nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import aiohttp

from lockstep import POD_GROUP_LABEL
from lockstep.api.pod import InvalidObjectError, parse_pod
from lockstep.api.podgroup import CONDITION_SCHEDULED
from lockstep.api.upstream_podgroup import CONDITION_TYPES
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.api.upstream_podgroup import PLURAL as UPSTREAM_PLURAL
from lockstep.config import ConfigError, Settings, load_settings
from lockstep.kube.client import POD_GROUPS, PODS, UPSTREAM_POD_GROUP_KINDS, ApiError, KubeClient
from lockstep.kube.credentials import CredentialsError, load_connection_info
from lockstep.logging import configure_logging
from lockstep.scheduler.cycle import CycleOutcome
from lockstep.scheduler.framework import GroupKey
from lockstep.scheduler.reservation import RESERVATION_ANNOTATION
from lockstep.snapshot import ClusterState, DryRun, build_core, dry_run, group_key, list_cluster

INDENT = "  "


class ExplainError(RuntimeError):
    """The group cannot be explained (bad reference, not found, API unreachable)."""


UPSTREAM_PREFIX = f"{UPSTREAM_PLURAL}.{UPSTREAM_GROUP}/"


def parse_reference(text: str, namespace: str = "default") -> tuple[str, str, bool]:
    """(namespace, name, upstream) of ``NAMESPACE/PODGROUP`` (lockstep's PodGroup) or of
    ``podgroups.scheduling.k8s.io/NAME`` (upstream's, in ``namespace``)."""
    if text.startswith(UPSTREAM_PREFIX):
        name = text.removeprefix(UPSTREAM_PREFIX)
        if not name or "/" in name:
            raise ExplainError(f"expected {UPSTREAM_PREFIX}NAME, got {text!r}")
        return namespace, name, True
    namespace, sep, name = text.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ExplainError(f"expected NAMESPACE/PODGROUP or {UPSTREAM_PREFIX}NAME, got {text!r}")
    return namespace, name, False


async def fetch(
    client: KubeClient, namespace: str, name: str, upstream: bool = False
) -> tuple[dict[str, Any], ClusterState]:
    """The PodGroup and the cluster, listed once."""
    upstream_kind = await client.first_served(UPSTREAM_POD_GROUP_KINDS)
    if upstream and upstream_kind is None:
        versions = ", ".join(kind.api_version for kind in UPSTREAM_POD_GROUP_KINDS)
        raise ExplainError(f"the cluster serves no upstream PodGroups (none of {versions})")
    try:
        kind = upstream_kind if upstream_kind is not None and upstream else POD_GROUPS
        podgroup = await client.get(kind, namespace, name)
    except ApiError as exc:
        if exc.not_found:
            shape = UPSTREAM_PREFIX if upstream else "PodGroup "
            naming = await pods_naming(client, namespace, name, upstream)
            raise ExplainError(f"{shape}{namespace}/{name} not found{naming}") from None
        raise
    return podgroup, await list_cluster(client)


async def pods_naming(client: KubeClient, namespace: str, name: str, upstream: bool) -> str:
    """The pods that name a missing group, and their PodScheduled conditions, for its not-found
    message ("" when none does)."""
    pods = (await client.list(PODS, namespace)).get("items", [])
    field = "spec.schedulingGroup.podGroupName" if upstream else f"the label {POD_GROUP_LABEL}"
    naming = ClusterState(pods=pods).members(namespace, name, upstream)
    if not naming:
        return f"; no pod in {namespace} names it through {field}"
    lines = [f"; {len(naming)} pods name it through {field}:"]
    for pod in naming:
        scheduled = _condition(pod.get("status") or {}, "PodScheduled")
        said = ""
        if scheduled is not None and scheduled.get("status") == "False":
            said = f"  PodScheduled=False {scheduled.get('reason')}: {scheduled.get('message', '')}"
        lines.append(f"{INDENT}{pod['metadata']['name']}{said}")
    return "\n".join(lines)


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    return next((c for c in status.get("conditions", []) if c.get("type") == kind), None)


def describe_status(podgroup: Mapping[str, Any], members: Sequence[Mapping[str, Any]]) -> list[str]:
    meta, spec, status = podgroup["metadata"], podgroup.get("spec", {}), podgroup.get("status", {})
    gang = spec.get("schedulingPolicy", {}).get("gang")
    policy = f"gang, minCount {gang['minCount']}" if gang else "basic"
    api_version = str(podgroup.get("apiVersion", ""))
    upstream = api_version.startswith(f"{UPSTREAM_GROUP}/")
    shape = f"{api_version}, " if upstream else ""
    lines = [f"PodGroup {meta['namespace']}/{meta['name']} ({shape}{policy})"]
    bound = sum(1 for p in members if p.get("spec", {}).get("nodeName"))
    if upstream:  # upstream's status has conditions only
        lines.append(f"{INDENT}{bound} of {len(members)} member pods bound")
    else:
        lines.append(
            f"{INDENT}phase {status.get('phase') or '(none yet)'}; {bound} of {len(members)} member pods"
            f" bound (status says scheduled {status.get('scheduled', 0)}, running {status.get('running', 0)})"
        )
    condition_type = CONDITION_TYPES.get(api_version.rpartition("/")[2], CONDITION_SCHEDULED)
    condition = _condition(status, condition_type)
    if condition is not None:
        lines.append(
            f"{INDENT}{condition_type}={condition.get('status')} ({condition.get('reason')}) since "
            f"{condition.get('lastTransitionTime')}: {condition.get('message', '')}"
        )
    if status.get("lastAttemptTime"):
        retry = f", next retry {status['nextRetryTime']}" if status.get("nextRetryTime") else ""
        lines.append(f"{INDENT}last attempt {status['lastAttemptTime']}{retry}")
    if status.get("queuePosition"):
        lines.append(
            f"{INDENT}queue position {status['queuePosition']} of {status.get('waitingGroups', '?')} waiting "
            f"groups; expected start {status.get('expectedStart') or 'unknown'}"
        )
    reasons = status.get("unschedulableReasons", [])
    if reasons:
        lines.append(f"{INDENT}why not scheduled at the last attempt:")
        for reason in reasons:
            lines.append(f"{INDENT * 2}{reason['reason']}: {reason['count']}  {reason.get('message', '')}")
    lines.append("members:")
    if not members:
        joining = (
            f"spec.schedulingGroup.podGroupName={meta['name']}"
            if upstream
            else f"the label {POD_GROUP_LABEL}={meta['name']}"
        )
        lines.append(f"{INDENT}(no pods carry {joining})")
    for pod in members:
        pod_meta, pod_status = pod["metadata"], pod.get("status", {})
        node = pod.get("spec", {}).get("nodeName")
        where = f"on {node}" if node else "not bound"
        scheduled = _condition(pod_status, "PodScheduled")
        note = ""
        if scheduled is not None and scheduled.get("status") == "False":
            note = f"  PodScheduled=False {scheduled.get('reason')}: {scheduled.get('message', '')}"
        lines.append(f"{INDENT}{pod_meta['name']}  {pod_status.get('phase', 'Pending')}, {where}{note}")
    return lines


def describe_claims(podgroup: Mapping[str, Any], state: ClusterState) -> list[str]:
    namespace = podgroup["metadata"]["namespace"]
    names: dict[str, str] = {}  # claim name -> where it comes from
    for entry in podgroup.get("spec", {}).get("resourceClaims", []):
        if entry.get("resourceClaimName"):
            names[entry["resourceClaimName"]] = f"PodGroup entry {entry['name']}"
    for entry in podgroup.get("status", {}).get("resourceClaimStatuses", []):
        if entry.get("resourceClaimName"):
            names[entry["resourceClaimName"]] = f"PodGroup entry {entry['name']} (from a template)"
    for pod in state.members(namespace, podgroup["metadata"]["name"]):
        generated = {
            s["name"]: s.get("resourceClaimName")
            for s in pod.get("status", {}).get("resourceClaimStatuses", [])
        }
        for ref in pod.get("spec", {}).get("resourceClaims", []):
            claim = ref.get("resourceClaimName") or generated.get(ref["name"])
            if claim:
                names.setdefault(claim, f"pod {pod['metadata']['name']} ({ref['name']})")
            else:
                names.setdefault(
                    f"<{ref['name']} of {pod['metadata']['name']}>", "template claim not created yet"
                )
        extended = (pod.get("status", {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")
        if extended:
            names.setdefault(extended, f"pod {pod['metadata']['name']} (extended resources)")
    if not names:
        return []
    claims = {c["metadata"]["name"]: c for c in state.claims if c["metadata"].get("namespace") == namespace}
    lines = ["claims:"]
    for name, origin in sorted(names.items()):
        claim = claims.get(name)
        if claim is None:
            lines.append(f"{INDENT}{name} [{origin}]: does not exist")
            continue
        allocation = claim.get("status", {}).get("allocation")
        reserved = _consumers(claim.get("status", {}).get("reservedFor") or [])
        if allocation:
            devices = ", ".join(
                f"{r['driver']}/{r['pool']}/{r['device']}"
                for r in allocation.get("devices", {}).get("results", [])
            )
            lines.append(
                f"{INDENT}{name} [{origin}]: allocated ({devices}), reserved for {reserved}"
                f"{binding_state(claim)}"
            )
        else:
            lines.append(f"{INDENT}{name} [{origin}]: not allocated")
    return lines


def binding_state(claim: Mapping[str, Any]) -> str:
    """Where the binding conditions of an allocated claim's devices stand ("" when it has none): the
    binding cycle waits for them (DRADeviceBindingConditions)."""
    status = claim.get("status") or {}
    reported = {
        (d.get("pool"), d.get("device")): {c.get("type"): c.get("status") for c in d.get("conditions") or []}
        for d in status.get("devices") or []
    }
    waiting, failed = [], []
    for result in ((status.get("allocation") or {}).get("devices") or {}).get("results") or []:
        conditions = reported.get((result.get("pool"), result.get("device")), {})
        failed += [
            f"{c} on {result['device']}"
            for c in result.get("bindingFailureConditions") or []
            if conditions.get(c) == "True"
        ]
        waiting += [
            f"{c} on {result['device']}"
            for c in result.get("bindingConditions") or []
            if conditions.get(c) != "True"
        ]
    if failed:
        return f"; binding failed: {', '.join(failed)}"
    if waiting:
        return f"; binding waits for {', '.join(waiting)}"
    return ""


def _consumers(reserved_for: list[dict[str, Any]]) -> str:
    """``3 pods`` or ``PodGroup team`` (a PodGroup claim is reserved once, for the group)."""
    groups = [ref.get("name", "") for ref in reserved_for if ref.get("resource") == "podgroups"]
    pods = len(reserved_for) - len(groups)
    parts = [f"PodGroup {name}" for name in groups]
    if pods or not parts:
        parts.append(f"{pods} pod{'' if pods == 1 else 's'}")
    return ", ".join(parts)


def describe_preemption(podgroup: Mapping[str, Any], state: ClusterState) -> list[str]:
    """A preemption in progress, from the API: nominated members and victims still terminating."""
    meta = podgroup["metadata"]
    key = GroupKey(meta["namespace"], meta["name"])
    nominated = [
        f"{p['metadata']['name']} on {p['status']['nominatedNodeName']}"
        for p in state.members(key.namespace, key.name)
        if (p.get("status") or {}).get("nominatedNodeName") and not (p.get("spec") or {}).get("nodeName")
    ]
    victims: list[str] = []
    for raw in state.pods:
        try:
            pod = parse_pod(raw)
        except InvalidObjectError:
            continue
        if pod.preempted_by == key:
            group = f" of {pod.group_name}" if pod.group_name else ""
            where = f" on {pod.node_name}" if pod.node_name else ""
            victims.append(f"{pod.key}{group}{where} ({'terminating' if pod.deleting else 'marked'})")
    if not nominated and not victims:
        return []
    lines = ["preemption in progress:"]
    if nominated:
        lines.append(f"{INDENT}nominated: {', '.join(nominated)}")
    if victims:
        lines.append(f"{INDENT}victims not gone yet: {', '.join(sorted(victims))}")
    return lines


def describe_reservation(podgroup: Mapping[str, Any]) -> list[str]:
    """The capacity held for the gang, as the PodGroup records it (status, or the annotation of an
    upstream PodGroup)."""
    recorded: Any = (podgroup.get("status") or {}).get("reservation")
    annotation = ((podgroup.get("metadata") or {}).get("annotations") or {}).get(RESERVATION_ANNOTATION)
    if recorded is None and annotation:
        try:
            recorded = json.loads(annotation)
        except ValueError:
            return [
                "reservation:",
                f"{INDENT}annotation {RESERVATION_ANNOTATION} is not JSON: {annotation!r}",
            ]
    if not isinstance(recorded, Mapping):
        return []
    lines = [
        "reservation (capacity held for this gang):",
        f"{INDENT}since {recorded.get('since')}, released after {recorded.get('timeoutSeconds')}s"
        " unless the gang fits first",
    ]
    waiting = f"{INDENT}waiting for {recorded.get('waitingFor', 0)} pods to finish"
    if recorded.get("podsWithoutDeadline"):
        waiting += f" ({recorded['podsWithoutDeadline']} without activeDeadlineSeconds: no backfill there)"
    if recorded.get("expectedCompletion"):
        waiting += f"; expected completion {recorded['expectedCompletion']}"
    lines.append(waiting)
    if recorded.get("backfilled"):
        lines.append(f"{INDENT}{recorded['backfilled']} pods backfilled (they end before it)")
    for node in recorded.get("nodes") or []:
        held = ", ".join(f"{name} {amount}" for name, amount in (node.get("resources") or {}).items())
        devices = ", its devices" if node.get("devices") else ""
        lines.append(
            f"{INDENT}{node.get('name')}: holds {held}{devices}; {node.get('waitingFor', 0)} pods to finish"
        )
    return lines


def describe_dry_run(result: DryRun | str) -> list[str]:
    lines = ["dry run of one group cycle against the cluster now (writes nothing):"]
    if isinstance(result, str):
        return [*lines, f"{INDENT}{result}"]
    lines += describe_composites(result)
    lines += _describe_outcome(result.outcome)
    verdict = result.preemption
    if verdict is not None:
        lines.append(f"{INDENT}preemption: {verdict.result.value}: {verdict.message}")
        if verdict.plan is not None:
            for victim in verdict.plan.victims:
                where = f"on {victim.node_name} (priority {victim.priority})"
                lines.append(f"{INDENT * 2}would preempt {victim.key} {where}")
            for pod, node in verdict.plan.nominations:
                lines.append(f"{INDENT * 2}would nominate {pod.key} for {node}")
    return lines


def describe_composites(result: DryRun) -> list[str]:
    """The CompositePodGroups of the hierarchy the PodGroup belongs to, root first: each one's policy,
    verdict and the domains of its level it tried."""
    lines: list[str] = []
    for verdict in result.composites:
        composite = verdict.composite
        policy = f"gang, minGroupCount {composite.min_group_count}" if composite.is_gang else "basic"
        state = (
            verdict.status.message
            or f"{verdict.placed_whole} of {verdict.children} child groups placed whole"
        )
        lines.append(f"{INDENT}{composite} ({policy}): {state}")
        for tried in verdict.topology:
            mark = "chose" if tried.chosen else "tried"
            lines.append(f"{INDENT * 2}{mark} {tried.domain}: {tried.verdict}")
    return lines


def _describe_outcome(result: CycleOutcome) -> list[str]:
    lines: list[str] = []
    verdict = result.status.code.name.replace("_", " ").title().replace(" ", "")
    lines.append(f"{INDENT}verdict: {verdict}: {result.status.message or 'minCount can be met'}")
    lines += describe_topology(result)
    for placement in result.placements:
        lines.append(f"{INDENT}would place {placement.pod.key} on {placement.node_name}")
    for diagnosis in result.diagnoses:
        if not diagnosis.nodes_evaluated:  # refused at PreFilter: no node was looked at
            lines.append(f"{INDENT}{diagnosis.pod}: refused before any node was evaluated")
            lines.append(f"{INDENT * 2}{diagnosis.message}")
            continue
        lines.append(f"{INDENT}{diagnosis.pod}: no node among {diagnosis.nodes_evaluated} evaluated")
        for rejection in diagnosis.plugins:
            sample = ", ".join(rejection.sample_nodes)
            more = ", ..." if rejection.count > len(rejection.sample_nodes) else ""
            lines.append(f"{INDENT * 2}{rejection.plugin} rejected {rejection.count} nodes ({sample}{more})")
        if diagnosis.message:
            lines.append(f"{INDENT * 2}{diagnosis.message}")
    return lines


def describe_topology(result: CycleOutcome) -> list[str]:
    """The topology domains the cycle considered, per level innermost first, and the one chosen."""
    lines: list[str] = []
    level: tuple[str, bool] | None = None
    for tried in result.topology:
        if (tried.level, tried.preferred) != level:
            level = (tried.level, tried.preferred)
            kind = "preferred" if tried.preferred else "required"
            name = tried.level or "the whole cluster (no required level)"
            lines.append(f"{INDENT}topology level {name} ({kind}):")
        mark = "chose" if tried.chosen else "tried"
        lines.append(f"{INDENT * 2}{mark} {tried.domain}: {tried.verdict}")
    return lines


async def explain(reference: str, settings: Settings, namespace: str = "default") -> str:
    namespace, name, upstream = parse_reference(reference, namespace)
    async with KubeClient(await load_connection_info(settings.kubeconfig)) as client:
        podgroup, state = await fetch(client, namespace, name, upstream)
        core = build_core(settings, client, state)
        result = dry_run(core, group_key(podgroup))
    members = state.members(namespace, name, upstream)
    lines = describe_status(podgroup, members)
    lines += describe_claims(podgroup, state)
    lines += describe_preemption(podgroup, state)
    lines += describe_reservation(podgroup)
    lines += describe_dry_run(result)
    return "\n".join(lines)


def explain_command(args: argparse.Namespace) -> int:
    configure_logging("console", "warning")
    try:
        settings = load_settings(kubeconfig=args.kubeconfig, feature_gates=args.feature_gates)
        print(asyncio.run(explain(args.podgroup, settings, args.namespace)))
    except (ConfigError, ExplainError, CredentialsError) as exc:
        print(f"lockstep explain: {exc}", file=sys.stderr)
        return 1
    except (ApiError, aiohttp.ClientError, OSError) as exc:
        print(f"lockstep explain: cannot read the cluster: {exc}", file=sys.stderr)
        return 1
    return 0
