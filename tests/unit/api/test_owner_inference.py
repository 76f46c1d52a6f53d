"""The owner-inference rules (lockstep.api.owners) as tables: each kind's minCount from its spec, the
gang a pod joins, and the problems that keep a gang from being inferred, naming the field."""

from __future__ import annotations

from typing import Any

import pytest

from lockstep import POD_GROUP_LABEL
from lockstep.api import owners
from lockstep.api.owners import Gang, OwnerRef

NS = "team"


def meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "namespace": NS, "uid": f"uid-{name}", **extra}


def template(label: str | None = None) -> dict[str, Any]:
    return {"metadata": {"labels": {POD_GROUP_LABEL: label} if label else {}}, "spec": {}}


def job(**spec: Any) -> dict[str, Any]:
    return {"metadata": meta("j"), "spec": {"template": template(), **spec}}


def jobset(*rjs: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {"metadata": meta("js"), "spec": {"replicatedJobs": list(rjs), **spec}}


def rj(name: str, replicas: int | None = 1, parallelism: int | None = 1, **job_spec: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"template": template(job_spec.pop("label", None)), **job_spec}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    item: dict[str, Any] = {"name": name, "template": {"spec": spec}}
    if replicas is not None:
        item["replicas"] = replicas
    return item


def lws(**spec: Any) -> dict[str, Any]:
    template_spec = {"workerTemplate": template(), **spec.pop("template", {})}
    return {"metadata": meta("lws"), "spec": {"leaderWorkerTemplate": template_spec, **spec}}


def pytorch(replicas: dict[str, int | None], **spec: Any) -> dict[str, Any]:
    specs = {
        name: ({"replicas": count} if count is not None else {}) | {"template": template()}
        for name, count in replicas.items()
    }
    return {"metadata": meta("pt"), "spec": {"pytorchReplicaSpecs": specs, **spec}}


def ray(*groups: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "metadata": meta("rc"),
        "spec": {"headGroupSpec": {"template": template()}, "workerGroupSpecs": list(groups), **spec},
    }


# (kind's parser, object, the whole gang's minCount or the problem's text)
MIN_COUNTS = [
    ("indexed job", owners.parse_job, job(completionMode="Indexed", parallelism=4, completions=8), 4),
    (
        "indexed job, completions below parallelism",
        owners.parse_job,
        job(completionMode="Indexed", parallelism=4, completions=2),
        2,
    ),
    (
        "indexed job, parallelism defaults to 1",
        owners.parse_job,
        job(completionMode="Indexed", completions=3),
        1,
    ),
    (
        "indexed job, parallelism 0",
        owners.parse_job,
        job(completionMode="Indexed", parallelism=0, completions=1),
        "Job team/j: spec.parallelism is 0",
    ),
    ("jobset: sum of replicas x parallelism", owners.parse_jobset, jobset(rj("a", 1, 1), rj("b", 2, 4)), 9),
    ("jobset: replicas default 1", owners.parse_jobset, jobset(rj("a", None, 3)), 3),
    (
        "jobset: parallelism capped by completions",
        owners.parse_jobset,
        jobset(rj("a", 2, 4, completions=1)),
        2,
    ),
    (
        "jobset: zero replicas",
        owners.parse_jobset,
        jobset(rj("a", 0, 1), rj("b", 1, 1)),
        "JobSet team/js: spec.replicatedJobs[0].replicas is 0",
    ),
    (
        "jobset: zero parallelism",
        owners.parse_jobset,
        jobset(rj("a", 1, 1), rj("b", 1, 0)),
        "JobSet team/js: spec.replicatedJobs[1].template.spec.parallelism is 0",
    ),
    ("jobset: no replicated jobs", owners.parse_jobset, jobset(), "spec.replicatedJobs: no replicated jobs"),
    (
        "jobset: replicas not an integer",
        owners.parse_jobset,
        jobset(rj("a", "2", 1)),  # type: ignore[arg-type]
        "spec.replicatedJobs[0].replicas: '2' is not an integer",
    ),
    (
        "jobset: more pods than lockstep's limit",
        owners.parse_jobset,
        jobset(rj("a", 200, 100)),
        "20000 pods in one gang is more than lockstep's 10000",
    ),
    ("lws: size, defaults", owners.parse_leaderworkerset, lws(template={"size": 4}, replicas=3), 12),
    (
        "lws: size 0",
        owners.parse_leaderworkerset,
        lws(template={"size": 0}),
        "LeaderWorkerSet team/lws: spec.leaderWorkerTemplate.size is 0",
    ),
    (
        "lws: unknown startup policy",
        owners.parse_leaderworkerset,
        lws(startupPolicy="Whenever"),
        "spec.startupPolicy: 'Whenever' is neither LeaderCreated nor LeaderReady",
    ),
    ("pytorchjob: all replicas", owners.parse_pytorchjob, pytorch({"Master": 1, "Worker": 3}), 4),
    ("pytorchjob: replicas default to 1", owners.parse_pytorchjob, pytorch({"Master": None, "Worker": 2}), 3),
    (
        "pytorchjob: minAvailable wins",
        owners.parse_pytorchjob,
        pytorch(
            {"Master": 1, "Worker": 3},
            runPolicy={"schedulingPolicy": {"minAvailable": 2}},
            elasticPolicy={"minReplicas": 3},
        ),
        2,
    ),
    (
        "pytorchjob: elastic minReplicas",
        owners.parse_pytorchjob,
        pytorch({"Worker": 4}, elasticPolicy={"minReplicas": 2}),
        2,
    ),
    (
        "pytorchjob: zero replicas",
        owners.parse_pytorchjob,
        pytorch({"Master": 1, "Worker": 0}),
        "PyTorchJob team/pt: spec.pytorchReplicaSpecs.Worker.replicas is 0",
    ),
    (
        "pytorchjob: minAvailable above the replicas",
        owners.parse_pytorchjob,
        pytorch({"Worker": 2}, runPolicy={"schedulingPolicy": {"minAvailable": 3}}),
        "spec.runPolicy.schedulingPolicy.minAvailable is 3: not between 1 and the 2 replicas",
    ),
    ("raycluster: head alone", owners.parse_raycluster, ray(), 1),
    (
        "raycluster: head plus minReplicas",
        owners.parse_raycluster,
        ray(
            {"groupName": "gpu", "replicas": 4, "minReplicas": 2},
            {"groupName": "cpu", "replicas": 1, "minReplicas": 1},
        ),
        4,
    ),
    (
        "raycluster: replicas when minReplicas is 0",
        owners.parse_raycluster,
        ray({"groupName": "w", "replicas": 3}),
        4,
    ),
    (
        "raycluster: numOfHosts multiplies",
        owners.parse_raycluster,
        ray({"groupName": "tpu", "replicas": 2, "minReplicas": 2, "numOfHosts": 4}),
        9,
    ),
    (
        "raycluster: suspended group",
        owners.parse_raycluster,
        ray({"groupName": "w", "replicas": 3, "minReplicas": 3, "suspend": True}),
        1,
    ),
    (
        "raycluster: minReplicas above replicas",
        owners.parse_raycluster,
        ray({"groupName": "w", "replicas": 1, "minReplicas": 2}),
        "RayCluster team/rc: spec.workerGroupSpecs[0].minReplicas (2) is more than its replicas (1)",
    ),
]


@pytest.mark.parametrize(
    ("parse", "raw", "expected"), [row[1:] for row in MIN_COUNTS], ids=[r[0] for r in MIN_COUNTS]
)
def test_min_count_of_each_kind(parse: Any, raw: dict[str, Any], expected: int | str) -> None:
    owner = parse(raw)
    if isinstance(expected, str):
        assert owner.problem is not None and expected in owner.problem
    else:
        assert owner.problem is None
        assert owner.total == expected


def pod(name: str, labels: dict[str, str] | None = None, node: str = "") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": NS, "labels": labels or {}}, "spec": {"nodeName": node}}


def ref(kind: owners.OwnerKind, name: str) -> OwnerRef:
    return OwnerRef(kind.api_version, kind.kind, name, f"uid-{name}")


JS = owners.JOBSET
LWS = owners.LEADER_WORKER_SET
RJ = owners.REPLICATED_JOB_NAME_LABEL
INDEX = owners.LWS_GROUP_INDEX_LABEL
WORKER = owners.LWS_WORKER_INDEX_LABEL
TRAINJOB_REF = {
    "apiVersion": "trainer.kubeflow.org/v1alpha1",
    "kind": "TrainJob",
    "name": "tj",
    "uid": "u-tj",
    "controller": True,
}

# (case, owner object's parser and object, the pod's labels, its pod-group label, expected gang or problem)
GANGS = [
    (
        "jobset: one gang named after it",
        owners.parse_jobset,
        jobset(rj("a", 1, 1), rj("b", 2, 2)),
        {RJ: "b"},
        None,
        Gang("js", 5, ref(JS, "js")),
    ),
    (
        "jobset in order: a gang per replicatedJob",
        owners.parse_jobset,
        jobset(rj("a", 1, 1), rj("b", 2, 2), startupPolicy={"startupPolicyOrder": "InOrder"}),
        {RJ: "b"},
        None,
        Gang("js-b", 4, ref(JS, "js")),
    ),
    (
        "jobset with dependsOn: a gang per replicatedJob",
        owners.parse_jobset,
        jobset(rj("init", 1, 1), {**rj("node", 1, 3), "dependsOn": [{"name": "init", "status": "Complete"}]}),
        {RJ: "node"},
        None,
        Gang("js-node", 3, ref(JS, "js")),
    ),
    (
        "labelled jobset: only the templates carrying the label count",
        owners.parse_jobset,
        jobset(rj("a", 1, 1, label="g"), rj("b", 2, 2)),
        {RJ: "a"},
        "g",
        Gang("g", 1, ref(JS, "js")),
    ),
    (
        "labelled jobset: a label no template carries counts everything",
        owners.parse_jobset,
        jobset(rj("a", 1, 1), rj("b", 2, 2)),
        {RJ: "a"},
        "other",
        Gang("other", 5, ref(JS, "js")),
    ),
    (
        "labelled jobset in order across replicatedJobs",
        owners.parse_jobset,
        jobset(
            rj("a", 1, 1, label="g"),
            rj("b", 1, 1, label="g"),
            startupPolicy={"startupPolicyOrder": "InOrder"},
        ),
        {RJ: "a"},
        "g",
        "cannot be one gang named by a label",
    ),
    (
        "trainjob: its JobSet's rule, named after and owned by the TrainJob",
        owners.parse_jobset,
        {**jobset(rj("node", 1, 4)), "metadata": meta("tj", ownerReferences=[TRAINJOB_REF])},
        {RJ: "node"},
        None,
        Gang("tj", 4, OwnerRef("trainer.kubeflow.org/v1alpha1", "TrainJob", "tj", "u-tj")),
    ),
    (
        "lws: a gang per replica group",
        owners.parse_leaderworkerset,
        lws(template={"size": 3}, replicas=2),
        {INDEX: "1", WORKER: "2"},
        None,
        Gang("lws-1", 3, ref(LWS, "lws")),
    ),
    (
        "lws LeaderReady: the unbound leader alone first",
        owners.parse_leaderworkerset,
        lws(template={"size": 3}, startupPolicy="LeaderReady"),
        {INDEX: "0", WORKER: "0"},
        None,
        Gang("lws-0", 1, ref(LWS, "lws")),
    ),
    (
        "lws without a group index",
        owners.parse_leaderworkerset,
        lws(template={"size": 3}),
        {},
        None,
        "has no leaderworkerset.sigs.k8s.io/group-index label",
    ),
    (
        "lws labelled: every group in one",
        owners.parse_leaderworkerset,
        lws(template={"size": 3}, replicas=2),
        {INDEX: "0"},
        "all",
        Gang("all", 6, ref(LWS, "lws")),
    ),
    ("non-indexed job: not a gang", owners.parse_job, job(parallelism=3), {}, None, None),
    (
        "non-indexed job with a label",
        owners.parse_job,
        job(parallelism=3),
        {},
        "g",
        "spec.completionMode is NonIndexed, not Indexed: its pods are not a gang",
    ),
    (
        "a problem is the answer",
        owners.parse_leaderworkerset,
        lws(template={"size": 0}),
        {INDEX: "0"},
        None,
        "spec.leaderWorkerTemplate.size is 0",
    ),
]


@pytest.mark.parametrize(
    ("parse", "raw", "labels", "group", "expected"), [row[1:] for row in GANGS], ids=[r[0] for r in GANGS]
)
def test_gang_of_a_pod(
    parse: Any, raw: dict[str, Any], labels: dict[str, str], group: str | None, expected: Gang | str | None
) -> None:
    found = owners.gang_for(parse(raw), pod("p", labels), group)
    if isinstance(expected, str):
        assert isinstance(found, str) and expected in found
    else:
        assert found == expected


def test_a_bound_leaderready_leader_asks_for_the_whole_group() -> None:
    owner = owners.parse_leaderworkerset(lws(template={"size": 3}, startupPolicy="LeaderReady"))
    gang = owners.gang_for(owner, pod("lws-0", {INDEX: "0", WORKER: "0"}, node="n1"), None)
    assert isinstance(gang, Gang) and gang.min_count == 3


def controlled(kind: str, api_version: str, name: str) -> list[dict[str, Any]]:
    return [{"apiVersion": api_version, "kind": kind, "name": name, "uid": "u", "controller": True}]


OWNER_OF_POD = [
    ("lws label", {"labels": {owners.LWS_NAME_LABEL: "l"}}, (LWS, "l")),
    (
        "jobset label wins over the Job controller",
        {
            "labels": {owners.JOBSET_NAME_LABEL: "s"},
            "ownerReferences": controlled("Job", "batch/v1", "s-a-0"),
        },
        (JS, "s"),
    ),
    ("job", {"ownerReferences": controlled("Job", "batch/v1", "j")}, (owners.JOB, "j")),
    (
        "pytorchjob",
        {"ownerReferences": controlled("PyTorchJob", "kubeflow.org/v1", "p")},
        (owners.PYTORCH_JOB, "p"),
    ),
    (
        "raycluster",
        {"ownerReferences": controlled("RayCluster", "ray.io/v1", "r")},
        (owners.RAY_CLUSTER, "r"),
    ),
    ("a kind of another group", {"ownerReferences": controlled("Job", "example.com/v1", "x")}, None),
    ("a ReplicaSet", {"ownerReferences": controlled("ReplicaSet", "apps/v1", "rs")}, None),
    ("no owner", {}, None),
]


@pytest.mark.parametrize(
    ("metadata", "expected"), [r[1:] for r in OWNER_OF_POD], ids=[r[0] for r in OWNER_OF_POD]
)
def test_owner_of_a_pod(metadata: dict[str, Any], expected: tuple[owners.OwnerKind, str] | None) -> None:
    assert owners.owner_of_pod({"metadata": {"namespace": NS, "name": "p", **metadata}}) == expected
