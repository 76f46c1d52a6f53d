"""``lockstep demo``: a simulated cluster, the operator, and every manifest in ``examples/``.

The first line of each example says what the demo should see: ``# lockstep-demo: expect=<Phase>
[gates=<Gate>,...] [infer=<Kind>,...]``. The demo turns on the gates and the owner kinds whose gangs
are inferred (``--infer-gangs``) the examples need, applies them in file order,
shows the PodGroups as they progress and exits 0 once every group is in its expected phase (1 when
the time runs out first).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from lockstep import POD_GROUP_LABEL
from lockstep.api.kueue import POD_GROUP_NAME_LABEL as KUEUE_GROUP_LABEL
from lockstep.api.kueue import TOTAL_COUNT_ANNOTATION as KUEUE_TOTAL_COUNT
from lockstep.api.owners import KIND_BY_NAME
from lockstep.api.pod import COSCHEDULING_POD_GROUP_LABEL, VOLCANO_GROUP_NAME_ANNOTATION
from lockstep.api.upstream_podgroup import CONDITION_TYPES as UPSTREAM_CONDITION_TYPES
from lockstep.config import load_settings
from lockstep.controller.runtime import OperatorThread
from lockstep.kube.client import (
    COMPOSITE_POD_GROUPS,
    COSCHEDULING_POD_GROUPS,
    DEVICE_CLASSES,
    JOBS,
    JOBSETS,
    LEADER_WORKER_SETS,
    NAMESPACES,
    POD_GROUPS,
    PODS,
    RESOURCE_CLAIM_TEMPLATES,
    RESOURCE_CLAIMS,
    UPSTREAM_POD_GROUP_KINDS,
    VOLCANO_POD_GROUPS,
    ApiError,
    KubeClient,
    ResourceKind,
)
from lockstep.kube.credentials import load_connection_info
from lockstep.logging import configure_logging
from lockstep.sim.cluster import SimCluster
from lockstep.sim.kubeconfig import write_kubeconfig
from lockstep.sim.registry import OPTIONAL_CRDS

HEADER = re.compile(
    r"^# lockstep-demo: expect=(?P<phase>[A-Za-z]+)(?: gates=(?P<gates>[A-Za-z,]+))?"
    r"(?: infer=(?P<infer>[A-Za-z,]+))?\s*$"
)
APPLICABLE: dict[tuple[str, str], ResourceKind] = {
    (k.api_version, k.kind): k
    for k in (
        NAMESPACES,
        PODS,
        POD_GROUPS,
        *UPSTREAM_POD_GROUP_KINDS,
        COMPOSITE_POD_GROUPS,
        COSCHEDULING_POD_GROUPS,
        VOLCANO_POD_GROUPS,
        JOBS,
        JOBSETS,
        LEADER_WORKER_SETS,
        RESOURCE_CLAIMS,
        RESOURCE_CLAIM_TEMPLATES,
        DEVICE_CLASSES,
    )
}
# the workload operators the demo cluster serves (their CRDs and simulated controllers)
DEMO_OWNER_CRDS = ("JobSet", "LeaderWorkerSet", "PyTorchJob", "RayCluster")
DEMO_NODES = 10
DEMO_DEVICES_PER_NODE = 8


class ExampleError(ValueError):
    """An example manifest the demo cannot apply; the message names the file and the object."""


@dataclass(slots=True)
class Example:
    path: Path
    documents: list[dict[str, Any]]
    expect: str | None = None  # the phase of its PodGroups; None for set-up files
    gates: tuple[str, ...] = ()
    infer: tuple[str, ...] = ()  # owner kinds whose gangs it needs inferred (--infer-gangs)

    @property
    def podgroups(self) -> list[tuple[str, str]]:
        """namespace/name of its groups: its PodGroups (any API), those its Jobs' and JobSets' pod
        template lines make (named by the template's pod-group label), a LeaderWorkerSet's, one per
        replica group (``<name>-<index>``), and Kueue pod groups (named by their pods'
        kueue.x-k8s.io/pod-group-name label)."""
        groups = []
        for doc in self.documents:
            namespace = doc["metadata"].get("namespace", "default")
            spec = doc.get("spec") or {}
            if doc.get("kind") == "PodGroup":
                groups.append((namespace, doc["metadata"]["name"]))
            elif doc.get("kind") == "Pod" and (doc["metadata"].get("labels") or {}).get(KUEUE_GROUP_LABEL):
                group = (namespace, doc["metadata"]["labels"][KUEUE_GROUP_LABEL])
                if group not in groups:
                    groups.append(group)
            elif doc.get("kind") == "Job":
                groups += [(namespace, name) for name in _template_groups([spec.get("template")])]
            elif doc.get("kind") == "JobSet":
                templates = [
                    ((rj.get("template") or {}).get("spec") or {}).get("template")
                    for rj in spec.get("replicatedJobs") or []
                ]
                groups += [(namespace, name) for name in _template_groups(templates)]
            elif doc.get("kind") == "LeaderWorkerSet":
                name = doc["metadata"]["name"]
                groups += [(namespace, f"{name}-{index}") for index in range(int(spec.get("replicas", 1)))]
        return groups


def _template_groups(templates: list[Any]) -> list[str]:
    """The pod-group labels of pod templates, each once."""
    names: list[str] = []
    for template in templates:
        label = (((template or {}).get("metadata") or {}).get("labels") or {}).get(POD_GROUP_LABEL)
        if label and label not in names:
            names.append(label)
    return names


def load_examples(directory: Path) -> list[Example]:
    examples = []
    for path in sorted(directory.glob("*.yaml")):
        text = path.read_text()
        match = HEADER.match(text.splitlines()[0] if text else "")
        try:
            documents = [doc for doc in yaml.safe_load_all(text) if doc]
        except yaml.YAMLError as exc:
            raise ExampleError(f"{path}: not valid YAML: {exc}") from None
        for doc in documents:
            key = (str(doc.get("apiVersion")), str(doc.get("kind")))
            if key not in APPLICABLE:
                raise ExampleError(f"{path}: the demo cannot apply {key[1]} {key[0]!r}")
            if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
                raise ExampleError(f"{path}: a {key[1]} without metadata.name")
        gates = tuple(match["gates"].split(",")) if match and match["gates"] else ()
        infer = tuple(match["infer"].split(",")) if match and match["infer"] else ()
        unknown = sorted(set(infer) - set(KIND_BY_NAME))
        if unknown:
            raise ExampleError(f"{path}: infer= names unknown kinds {unknown}")
        examples.append(Example(path, documents, match["phase"] if match else None, gates, infer))
    if not examples:
        raise ExampleError(f"{directory}: no *.yaml examples")
    return examples


def find_examples_dir() -> Path:
    """``examples/`` of the source tree this package runs from."""
    for parent in Path(__file__).resolve().parents:
        candidate = parent / "examples"
        if candidate.is_dir() and (parent / "crds").is_dir():
            return candidate
    raise ExampleError("cannot find the examples/ directory; pass --examples DIR")


@dataclass(slots=True)
class GroupView:
    name: str
    expect: str
    phase: str = ""
    scheduled: int = 0
    min_count: int = 0
    total: int = 0
    why: str = ""

    @property
    def done(self) -> bool:
        return self.phase == self.expect

    def row(self) -> tuple[str, ...]:
        return (
            self.name,
            self.expect,
            self.phase or "-",
            f"{self.scheduled}/{self.min_count or '-'}",
            str(self.total),
            self.why,
        )


def view_from(item: Mapping[str, Any], expect: str) -> GroupView:
    meta, spec, status = item["metadata"], item.get("spec", {}), item.get("status", {})
    gang = spec.get("schedulingPolicy", {}).get("gang")
    why = ""
    for condition in status.get("conditions", []):
        if condition.get("type") == "PodGroupScheduled" and condition.get("status") != "True":
            why = f"{condition.get('reason')}: {condition.get('message', '')}"
    return GroupView(
        name=f"{meta['namespace']}/{meta['name']}",
        expect=expect,
        phase=status.get("phase", ""),
        scheduled=int(status.get("scheduled", 0)),
        min_count=int(gang["minCount"]) if gang else 1,
        total=int(status.get("total", 0)),
        why=why,
    )


HEADINGS = ("PODGROUP", "EXPECT", "PHASE", "SCHEDULED/MIN", "PODS", "WHY NOT SCHEDULED")


def render(views: Iterable[GroupView], width: int = 140) -> str:
    rows = [HEADINGS, *(v.row() for v in views)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADINGS) - 1)]
    lines = []
    for row in rows:
        text = "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=False)) + "  " + row[-1]
        lines.append(text[:width])
    return "\n".join(lines)


@dataclass(slots=True)
class Progress:
    """Redraws a table on a terminal; prints one line per change otherwise."""

    out: TextIO
    tty: bool
    started: float = field(default_factory=time.monotonic)
    last: dict[str, tuple[str, int]] = field(default_factory=dict)

    def show(self, views: list[GroupView]) -> None:
        elapsed = time.monotonic() - self.started
        if self.tty:
            self.out.write("\x1b[H\x1b[2J")
            self.out.write(f"lockstep demo: {elapsed:5.1f}s\n\n{render(views)}\n")
            self.out.flush()
            return
        for view in views:
            state = (view.phase, view.scheduled)
            if self.last.get(view.name) != state:
                self.last[view.name] = state
                self.out.write(
                    f"[{elapsed:5.1f}s] {view.name}: {view.phase or 'no status yet'}, "
                    f"{view.scheduled}/{view.min_count} scheduled\n"
                )
        self.out.flush()


async def apply(client: KubeClient, example: Example, out: TextIO) -> None:
    for doc in example.documents:
        kind = APPLICABLE[(doc["apiVersion"], doc["kind"])]
        namespace = doc["metadata"].get("namespace", "default") if kind.namespaced else None
        try:
            await client.create(kind, namespace, doc)
        except ApiError as exc:
            if exc.status != 409:
                raise ExampleError(f"{example.path.name}: {exc}") from None
    out.write(f"applied {example.path.name}\n")


def upstream_view_from(item: Mapping[str, Any], expect: str, pods: list[dict[str, Any]]) -> GroupView:
    """An upstream PodGroup has no phase: its scheduler's condition (PodGroupInitiallyScheduled in
    v1beta1, PodGroupScheduled in v1alpha2) stands for one (Scheduled,
    or the condition's reason); nor counts: its members (``pods`` of the namespace naming it) give
    them."""
    meta, spec = item["metadata"], item.get("spec", {})
    gang = spec.get("schedulingPolicy", {}).get("gang")
    conditions = (item.get("status") or {}).get("conditions") or []
    condition_types = set(UPSTREAM_CONDITION_TYPES.values())
    condition = next((c for c in conditions if c.get("type") in condition_types), None)
    phase, why = "", ""
    if condition is not None:
        phase = "Scheduled" if condition.get("status") == "True" else str(condition.get("reason"))
        why = "" if condition.get("status") == "True" else str(condition.get("message", ""))
    members = [
        p for p in pods if (p["spec"].get("schedulingGroup") or {}).get("podGroupName") == meta["name"]
    ]
    return GroupView(
        name=f"{meta['namespace']}/{meta['name']}",
        expect=expect,
        phase=phase,
        scheduled=sum(1 for p in members if p["spec"].get("nodeName")),
        min_count=int(gang["minCount"]) if gang else 1,
        total=len(members),
        why=why,
    )


def dialect_view_from(item: Mapping[str, Any], expect: str, pods: list[dict[str, Any]]) -> GroupView:
    """A coscheduling or Volcano PodGroup: its own phase (the shape's names: Running means minMember
    members run); counts from its members (pods labelled, or annotated, with its name)."""
    meta, spec, status = item["metadata"], item.get("spec") or {}, item.get("status") or {}
    volcano = item.get("apiVersion", "").startswith("scheduling.volcano.sh/")
    members = [p for p in pods if _named_group(p, volcano) == meta["name"]]
    why = next(
        (
            f"{c.get('reason')}: {c.get('message', '')}"
            for c in status.get("conditions") or []
            if c.get("type") == "Unschedulable" and status.get("phase") != "Running"
        ),
        "",
    )
    return GroupView(
        name=f"{meta['namespace']}/{meta['name']}",
        expect=expect,
        phase=str(status.get("phase") or ""),
        scheduled=sum(1 for p in members if p["spec"].get("nodeName")),
        min_count=int(spec.get("minMember") or 1),
        total=len(members),
        why=why,
    )


def _named_group(pod: Mapping[str, Any], volcano: bool) -> str | None:
    meta = pod["metadata"]
    if volcano:
        return (meta.get("annotations") or {}).get(VOLCANO_GROUP_NAME_ANNOTATION)
    return (meta.get("labels") or {}).get(COSCHEDULING_POD_GROUP_LABEL)


def kueue_views(pods: list[dict[str, Any]], expected: Mapping[str, str]) -> dict[str, GroupView]:
    """Kueue pod groups have no object: Running once pod-group-total-count members run."""
    views: dict[str, GroupView] = {}
    running: dict[str, int] = {}
    for pod in pods:
        meta = pod["metadata"]
        group = (meta.get("labels") or {}).get(KUEUE_GROUP_LABEL)
        name = f"{meta['namespace']}/{group}"
        if not group or name not in expected:
            continue
        count = str((meta.get("annotations") or {}).get(KUEUE_TOTAL_COUNT, ""))
        view = views.setdefault(
            name, GroupView(name, expected[name], min_count=int(count) if count.isdigit() else 0)
        )
        view.total += 1
        view.scheduled += bool(pod["spec"].get("nodeName"))
        running[name] = running.get(name, 0) + ((pod.get("status") or {}).get("phase") == "Running")
    for name, view in views.items():
        view.phase = "Running" if view.min_count and running[name] >= view.min_count else "Pending"
    return views


async def collect(client: KubeClient, expected: Mapping[str, str]) -> list[GroupView]:
    namespaces = sorted({name.split("/", 1)[0] for name in expected})
    views = {}
    for namespace in namespaces:
        for item in (await client.list(POD_GROUPS, namespace)).get("items", []):
            name = f"{namespace}/{item['metadata']['name']}"
            if name in expected:
                views[name] = view_from(item, expected[name])
        upstream_kind = await client.first_served(UPSTREAM_POD_GROUP_KINDS)
        upstream = (await client.list(upstream_kind, namespace)).get("items", []) if upstream_kind else []
        pods = (await client.list(PODS, namespace)).get("items", []) if upstream else []
        for item in upstream:
            name = f"{namespace}/{item['metadata']['name']}"
            if name in expected:
                views[name] = upstream_view_from(item, expected[name], pods)
        dialect_items = []
        for kind in (COSCHEDULING_POD_GROUPS, VOLCANO_POD_GROUPS):
            if await client.serves(kind):
                dialect_items += (await client.list(kind, namespace)).get("items", [])
        all_pods = (await client.list(PODS, namespace)).get("items", [])
        for item in dialect_items:
            name = f"{namespace}/{item['metadata']['name']}"
            if name in expected:
                views[name] = dialect_view_from(item, expected[name], all_pods)
        views.update(kueue_views(all_pods, expected))
    # A group not created yet counts as Pending (a gated Job's, whose pods are not counted yet).
    return [
        views.get(name) or GroupView(name, expect, phase="Pending", why="no PodGroup yet")
        for name, expect in sorted(expected.items())
    ]


async def run_demo(
    examples_dir: Path, workdir: Path, wait_seconds: float, keep: bool, out: TextIO = sys.stdout
) -> int:
    examples = load_examples(examples_dir)
    expected = {f"{ns}/{name}": ex.expect for ex in examples if ex.expect for ns, name in ex.podgroups}
    gates = sorted({gate for ex in examples for gate in ex.gates})
    infer = sorted({kind for ex in examples for kind in ex.infer})
    log_path = workdir / "operator.log"
    log_file = log_path.open("w")
    configure_logging("json", "info", stream=log_file)
    turned_on = ",".join(f"{gate}=true" for gate in gates)
    cluster = SimCluster(
        nodes=DEMO_NODES,
        devices_per_node=DEMO_DEVICES_PER_NODE,
        feature_gates=turned_on or None,
        install_crds=tuple(OPTIONAL_CRDS),
        owner_crds=DEMO_OWNER_CRDS,
    )
    url = await cluster.start()
    kubeconfig = write_kubeconfig(url, workdir / "kubeconfig")
    needing = {gate: [ex.path.name for ex in examples if gate in ex.gates] for gate in gates}
    out.write(
        f"simulated cluster: {DEMO_NODES} nodes, {DEMO_DEVICES_PER_NODE} devices each, at {url}\n"
        f"operator log: {log_path}\n"
        + "".join(
            f"feature gate {gate}=true turned on (off by default in lockstep sim and lockstep run) for "
            f"{', '.join(names)}, on the API server and the operator\n"
            for gate, names in needing.items()
        )
        + ("" if gates else "feature gates: defaults\n")
        + f"gangs inferred for: {', '.join(infer) or 'labelled pods only'}\n"
    )
    settings = load_settings(
        kubeconfig=str(kubeconfig),
        leader_elect=False,
        feature_gates=turned_on,
        health_bind_address="127.0.0.1:0",
        metrics_bind_address="127.0.0.1:0",
        backoff_max_seconds=5.0,
        infer_gangs=",".join(infer),
    )
    operator = OperatorThread(settings)
    try:
        await asyncio.to_thread(operator.start)
        async with KubeClient(await load_connection_info(str(kubeconfig))) as client:
            for example in examples:
                await apply(client, example, out)
            progress = Progress(out, out.isatty())
            deadline = time.monotonic() + wait_seconds
            while True:
                views = await collect(client, expected)
                progress.show(views)
                if all(v.done for v in views) or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.5)
        ok = all(v.done for v in views)
        out.write(f"\nsummary:\n{render(views)}\n\n")
        for view in views:
            if view.expect == "Unschedulable" and view.done:
                out.write(f"{view.name} stays Unschedulable by design: {view.why}\n")
        missed = ", ".join(v.name for v in views if not v.done)
        out.write(
            "every example reached its expected phase\n"
            if ok
            else f"not in the expected phase after {wait_seconds:.0f}s: {missed} (see {log_path})\n"
        )
        if keep:
            out.write(
                f"\nthe cluster keeps running; in another shell:\n  export KUBECONFIG={kubeconfig}\n"
                "  kubectl get lpg -A\nCtrl-C stops it.\n"
            )
            out.flush()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.Event().wait()
        return 0 if ok else 1
    finally:
        await asyncio.to_thread(operator.stop)
        await cluster.stop()
        log_file.close()


def demo_command(args: argparse.Namespace) -> int:
    try:
        examples_dir = Path(args.examples) if args.examples else find_examples_dir()
        workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="lockstep-demo-"))
        workdir.mkdir(parents=True, exist_ok=True)
        return asyncio.run(run_demo(examples_dir, workdir, args.timeout, args.keep))
    except ExampleError as exc:
        print(f"lockstep demo: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
