"""Kueue plain pod groups: pods labelled ``kueue.x-k8s.io/pod-group-name: NAME`` and annotated
``kueue.x-k8s.io/pod-group-total-count: "N"`` are one gang of N, with no group object (Kueue makes a
Workload of them; lockstep reads only the pods).

The spec is kubernetes-sigs/kueue ``site/content/en/docs/tasks/run/plain_pods.md`` and
``pkg/controller/jobs/pod/`` (the label and annotation; its webhook requires the count to be a whole
number of at least 1, and every member to carry it; the gates it adds and removes:
``kueue.x-k8s.io/admission``, and ``kueue.x-k8s.io/topology`` with Topology Aware Scheduling).
Members held by those gates do not count until Kueue removes them, writing the ResourceFlavor's
node labels (and TAS's domain) into ``spec.nodeSelector`` first, which lockstep then honours like any
node selector. Members disagreeing on N, or an N that is not a whole number of at least 1, refuse
the group, naming the annotation and the pods.
"""

from __future__ import annotations

from collections.abc import Mapping

from lockstep.api.pod import KUEUE_POD_GROUP_NAME_LABEL as POD_GROUP_NAME_LABEL
from lockstep.scheduler.framework import DIALECT_KUEUE, PodGroupInfo

GROUP = "kueue.x-k8s.io"
TOTAL_COUNT_ANNOTATION = f"{GROUP}/pod-group-total-count"
ADMISSION_GATE = f"{GROUP}/admission"
TOPOLOGY_GATE = f"{GROUP}/topology"
# Kueue names the group's Workload after the pod group: lockstep's events about the group name it
WORKLOAD_API_VERSION = f"{GROUP}/v1beta1"
MAX_TOTAL_COUNT = 10000


def total_count(annotations: Mapping[str, object]) -> int | str:
    """The pod's group size, or why its annotation is unusable."""
    value = annotations.get(TOTAL_COUNT_ANNOTATION)
    text = str(value).strip() if value is not None else ""
    if value is None:
        return f"annotation {TOTAL_COUNT_ANNOTATION} is required with the label {POD_GROUP_NAME_LABEL}"
    if not text.isdigit() or not 1 <= int(text) <= MAX_TOTAL_COUNT:
        return (
            f"annotation {TOTAL_COUNT_ANNOTATION}: {value!r} is not a whole number "
            f"between 1 and {MAX_TOTAL_COUNT}"
        )
    return int(text)


def group_info(namespace: str, name: str, asks: Mapping[str, int | str]) -> PodGroupInfo:
    """The gang its pods make (pod name -> its total-count, or why that is unusable)."""
    problems = sorted((pod, ask) for pod, ask in asks.items() if isinstance(ask, str))
    counts = {pod: ask for pod, ask in asks.items() if isinstance(ask, int)}
    if problems:
        pod, problem = problems[0]
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            dialect=DIALECT_KUEUE,
            refusal=f"Kueue pod group {namespace}/{name}: pod {pod}: {problem}",
        )
    sizes = sorted(set(counts.values()))
    if len(sizes) > 1:
        examples = ", ".join(
            f"{size} (pod {min(p for p, c in counts.items() if c == size)})" for size in sizes
        )
        return PodGroupInfo(
            namespace=namespace,
            name=name,
            dialect=DIALECT_KUEUE,
            refusal=(
                f"Kueue pod group {namespace}/{name}: members disagree on "
                f"{TOTAL_COUNT_ANNOTATION}: {examples}"
            ),
        )
    return PodGroupInfo(
        namespace=namespace,
        name=name,
        dialect=DIALECT_KUEUE,
        is_gang=True,
        min_count=sizes[0] if sizes else 1,
    )
