"""parse_pod's fast path (``parse_plain_pod``) against its full parser (``parse_pod_fully``): where the
fast path answers it must give exactly the full parser's PodInfo, and it must leave every pod it
cannot read as the full parser would, bad ones included, to the full parser."""

from __future__ import annotations

import copy
import itertools
import random
from collections.abc import Callable
from typing import Any

import pytest

from lockstep.api.pod import (
    InvalidObjectError,
    parse_plain_pod,
    parse_pod,
    parse_pod_fully,
    preemption_message,
)
from lockstep.scheduler.framework import GroupKey


def _pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "p-0",
            "namespace": "team",
            "uid": "uid-0",
            "resourceVersion": "41",
            "labels": {"scheduling.lockstep.dev/pod-group": "train", "app": "x"},
        },
        "spec": {
            "schedulerName": "lockstep",
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
            "tolerations": [
                {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
            ],
            **spec,
        },
        "status": {"phase": "Pending", "qosClass": "Burstable"},
    }


Mutation = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target = pod
        for part in parents:
            target = target.setdefault(part, {})
        target[last] = copy.deepcopy(value)

    return mutate


def _container(**fields: Any) -> Mutation:
    def mutate(pod: dict[str, Any]) -> None:
        pod["spec"]["containers"].append(
            {"name": f"c{len(pod['spec']['containers'])}", **copy.deepcopy(fields)}
        )

    return mutate


# What the fast path reads itself: each alone, and combined, it must answer (and agree).
PLAIN: dict[str, Mutation] = {
    "bound": _set("spec.nodeName", "node-7"),
    "running": _set("status.phase", "Running"),
    "started": _set("status.startTime", "2026-12-01T10:00:00Z"),
    "deadline": _set("spec.activeDeadlineSeconds", 600),
    "priority": _set("spec.priority", 1000),
    "never preempts": _set("spec.preemptionPolicy", "Never"),
    "nominated": _set("status.nominatedNodeName", "node-3"),
    "deleting": _set("metadata.deletionTimestamp", "2026-12-01T11:00:00Z"),
    "scheduled condition": _set(
        "status.conditions",
        [
            {"type": "Ready", "status": "False"},
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes"},
        ],
    ),
    "gated": _set("spec.schedulingGates", [{"name": "example.com/wait"}]),
    "open gates": _set("spec.schedulingGates", []),
    "node selector": _set("spec.nodeSelector", {"disk": "ssd"}),
    "node affinity": _set(
        "spec.affinity",
        {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}}
                ],
            }
        },
    ),
    "pod affinity": _set(
        "spec.affinity",
        {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchLabels": {"app": "x"}},
                        "topologyKey": "topology.kubernetes.io/zone",
                    }
                ]
            },
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 10,
                        "podAffinityTerm": {
                            "labelSelector": {
                                "matchExpressions": [{"key": "app", "operator": "In", "values": ["y"]}]
                            },
                            "topologyKey": "kubernetes.io/hostname",
                        },
                    }
                ]
            },
        },
    ),
    "spread": _set(
        "spec.topologySpreadConstraints",
        [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "x"}},
            }
        ],
    ),
    "tolerations": _set(
        "spec.tolerations",
        [
            {"key": "gpu", "operator": "Equal", "value": "a100", "effect": "NoSchedule"},
            {"operator": "Exists"},
        ],
    ),
    "no tolerations": _set("spec.tolerations", []),
    "limits only": _container(resources={"limits": {"cpu": "2", "memory": "1Gi"}}),
    "limits and requests": _container(
        resources={"limits": {"cpu": "2", "nvidia.com/gpu": "1"}, "requests": {"cpu": "500m"}}
    ),
    "extended resource": _container(resources={"requests": {"example.com/gpu": "1"}}),
    "zero request": _container(resources={"requests": {"cpu": "0"}}),
    "no resources": _container(image="busybox"),
    "host port": _container(ports=[{"containerPort": 80, "hostPort": 8080}]),
    "owner": _set(
        "metadata.ownerReferences",
        [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u", "controller": True}],
    ),
    "scheduling group": _set("spec.schedulingGroup", {"podGroupName": "upstream-group"}),
    "coscheduling": _set("metadata.labels", {"scheduling.x-k8s.io/pod-group": "cosched"}),
    "volcano": _set(
        "metadata.annotations",
        {"scheduling.k8s.io/group-name": "vc", "volcano.sh/task-spec": "worker"},
    ),
    "kueue": _set("metadata.labels", {"kueue.x-k8s.io/pod-group-name": "kq"}),
    "no labels": _set("metadata.labels", None),
    "config volume": _set("spec.volumes", [{"name": "cfg", "configMap": {"name": "cfg"}}]),
    "no namespace": _set("metadata.namespace", None),
    "no uid": _set("metadata.uid", None),
    "other scheduler": _set("spec.schedulerName", "default-scheduler"),
    "template claim": _set("spec.resourceClaims", [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]),
    "claim statuses": _set("status.resourceClaimStatuses", [{"name": "gpu", "resourceClaimName": "p-0-gpu"}]),
    "named claims": _set(
        "spec.resourceClaims", [{"name": "a", "resourceClaimName": "shared"}, {"name": "b"}]
    ),
    "no claim statuses": _set("status.resourceClaimStatuses", []),
}

# What the fast path leaves to the full parser (it must answer None).
NOT_PLAIN: dict[str, Mutation] = {
    "init container": _set(
        "spec.initContainers", [{"name": "init", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]
    ),
    "sidecar": _set(
        "spec.initContainers",
        [{"name": "log", "restartPolicy": "Always", "resources": {"requests": {"memory": "128Mi"}}}],
    ),
    "overhead": _set("spec.overhead", {"cpu": "250m", "memory": "120Mi"}),
    "pod-level resources": _set("spec.resources", {"requests": {"cpu": "4", "memory": "8Gi"}}),
    "pvc": _set("spec.volumes", [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]),
    "ephemeral": _set("spec.volumes", [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}}]),
    "preempted": _set(
        "status.conditions",
        [
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": preemption_message(GroupKey("team", "big"), 100),
            }
        ],
    ),
}

# Bad pods: the full parser's error, never a fast-path answer.
BAD: dict[str, Mutation] = {
    "quantity": _container(resources={"requests": {"cpu": "lots"}}),
    "negative": _container(resources={"limits": {"memory": "-1Gi"}}),
    "priority": _set("spec.priority", "high"),
    "bool priority": _set("spec.priority", True),
    "containers": _set("spec.containers", "main"),
    "container": _set("spec.containers", ["main"]),
    "resources": _container(resources=["cpu"]),
    "tolerations": _set("spec.tolerations", {"key": "a"}),
    "toleration": _set("spec.tolerations", ["a"]),
    "node selector": _set("spec.nodeSelector", ["disk"]),
    "affinity": _set("spec.affinity", "near"),
    "node affinity": _set("spec.affinity", {"nodeAffinity": "near"}),
    "deadline": _set("spec.activeDeadlineSeconds", 0),
    "start time": _set("status.startTime", "yesterday"),
    "conditions": _set("status.conditions", {"type": "PodScheduled"}),
    "gates": _set("spec.schedulingGates", "wait"),
    "scheduling group": _set("spec.schedulingGroup", "g"),
    "spread": _set("spec.topologySpreadConstraints", {"maxSkew": 1}),
    "resource claims": _set("spec.resourceClaims", {"name": "gpu"}),
    "resource claim": _set("spec.resourceClaims", ["gpu"]),
    "claim name": _set("spec.resourceClaims", [{"resourceClaimTemplateName": "gpu"}]),
    "claim statuses": _set("status.resourceClaimStatuses", {"name": "gpu"}),
    "claim status": _set("status.resourceClaimStatuses", ["gpu"]),
    "volumes": _set("spec.volumes", {"name": "v"}),
    "labels": _set("metadata.labels", ["a"]),
    "annotations": _set("metadata.annotations", "a"),
    "name": _set("metadata.name", ""),
    "spec": _set("spec", "none"),
}


def _built(*mutations: Mutation) -> dict[str, Any]:
    pod = _pod()
    for mutate in mutations:
        mutate(pod)
    return pod


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_the_fast_path_reads_each_plain_field_as_the_full_parser(name: str) -> None:
    pod = _built(PLAIN[name])
    fast = parse_plain_pod(pod)
    assert fast is not None
    assert fast == parse_pod_fully(pod)
    assert fast.group_key == parse_pod_fully(pod).group_key


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_the_fast_path_leaves_the_rest_to_the_full_parser(name: str) -> None:
    pod = _built(PLAIN["limits and requests"], NOT_PLAIN[name])
    assert parse_plain_pod(pod) is None
    assert parse_pod(pod) == parse_pod_fully(pod)


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_pod_gets_the_full_parsers_error(name: str) -> None:
    pod = _built(BAD[name])
    assert parse_plain_pod(pod) is None
    with pytest.raises(InvalidObjectError) as full:
        parse_pod_fully(pod)
    with pytest.raises(InvalidObjectError) as via_parse_pod:
        parse_pod(pod)
    assert str(via_parse_pod.value) == str(full.value)


def test_combined_fields_agree_wherever_the_fast_path_answers() -> None:
    names = sorted(PLAIN) + sorted(NOT_PLAIN)
    mutations = {**PLAIN, **NOT_PLAIN}
    chooser = random.Random(29)
    combinations = [chooser.sample(names, chooser.randint(2, 6)) for _ in range(300)] + [
        list(pair) for pair in itertools.combinations(sorted(PLAIN), 2)
    ]
    for chosen in combinations:
        chosen.sort(key=lambda name: name in NOT_PLAIN)  # last: no plain field may overwrite one
        pod = _built(*(mutations[name] for name in chosen))
        full = parse_pod_fully(pod)
        fast = parse_plain_pod(pod)
        if any(name in NOT_PLAIN for name in chosen):
            assert fast is None, chosen
        else:
            assert fast is not None, chosen
            assert fast == full, chosen
            assert fast.group_key == full.group_key, chosen
        assert parse_pod(pod) == full
