"""Gangs from owners: how many pods of a workload must be placed together, read from the spec of the
object that creates them, as KAI-Scheduler's podgrouper reads it (``pkg/podgrouper/podgrouper/
plugins``), field names and defaults as each project publishes them.

One ``parse_<kind>`` per kind turns the raw object into an :class:`Owner`: its pod sets (one per pod
template: a replicatedJob, a replica type, a worker group) with the pods each needs placed together,
or the problem that keeps lockstep from inferring a gang, naming the object and the field.
:func:`gang_for` then answers which PodGroup a pod belongs to and its minCount.

- Indexed Job: parallelism (at most completions); a NonIndexed Job's pods are not a gang.
- JobSet: the sum over replicatedJobs of replicas times the Job's pods (parallelism, at most
  completions); one gang per replicatedJob when they start one after the other
  (``startupPolicy.startupPolicyOrder: InOrder`` or ``dependsOn``), as KAI does for InOrder.
- LeaderWorkerSet: each replica group (label ``leaderworkerset.sigs.k8s.io/group-index``) of
  ``leaderWorkerTemplate.size`` pods is its own gang, ``<name>-<index>``; with ``startupPolicy:
  LeaderReady`` the workers are created once the leader runs, so the leader alone is placed first.
- PyTorchJob: every replica of every replica type; ``runPolicy.schedulingPolicy.minAvailable``, else
  ``elasticPolicy.minReplicas``, replaces the total (KAI's order).
- TrainJob: the JobSet its runtime made (owned by the TrainJob): that JobSet's rule, the PodGroup
  named after and owned by the TrainJob.
- RayCluster: the head plus, per worker group not suspended, ``minReplicas`` (``replicas`` when
  minReplicas is 0) times ``numOfHosts``; minReplicas above replicas is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lockstep import POD_GROUP_LABEL

MAX_MIN_COUNT = 10000

JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
REPLICATED_JOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True, slots=True)
class OwnerKind:
    group: str
    version: str
    plural: str
    kind: str

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


JOB = OwnerKind("batch", "v1", "jobs", "Job")
JOBSET = OwnerKind("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
LEADER_WORKER_SET = OwnerKind("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", "LeaderWorkerSet")
PYTORCH_JOB = OwnerKind("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob")
TRAIN_JOB = OwnerKind("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob")
RAY_CLUSTER = OwnerKind("ray.io", "v1", "rayclusters", "RayCluster")
# the kinds ``--infer-gangs`` may name; TrainJobs are read through the JobSet they own
INFERABLE_KINDS = (JOB, JOBSET, LEADER_WORKER_SET, PYTORCH_JOB, TRAIN_JOB, RAY_CLUSTER)
KIND_BY_NAME = {kind.kind: kind for kind in INFERABLE_KINDS}
# the kinds lockstep watches to read their specs
WATCHED_KINDS = (JOB, JOBSET, LEADER_WORKER_SET, PYTORCH_JOB, RAY_CLUSTER)


@dataclass(frozen=True, slots=True)
class OwnerRef:
    api_version: str
    kind: str
    name: str
    uid: str

    def as_owner_reference(self) -> dict[str, str]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid}


@dataclass(frozen=True, slots=True)
class PodSet:
    """The pods an owner makes from one template."""

    name: str
    min_count: int  # of these pods, how many the gang needs
    group_label: str | None = None  # the template's scheduling.lockstep.dev/pod-group, if any


@dataclass(frozen=True, slots=True)
class Owner:
    kind: OwnerKind
    namespace: str
    name: str
    uid: str
    controller: OwnerRef | None = None  # the owner's own controller (a TrainJob for its JobSet)
    pod_sets: tuple[PodSet, ...] = ()
    per_set: bool = False  # each pod set is its own gang, ``<name>-<set>``
    group_size: int = 0  # LeaderWorkerSet: each replica group of this many pods is a gang
    leader_first: bool = False  # LeaderWorkerSet LeaderReady: the leader is placed on its own first
    min_override: int | None = None  # replaces the sum of the pod sets (PyTorchJob minAvailable)
    problem: str | None = None  # why no gang can be inferred, naming the field
    not_a_gang: str | None = None  # why its pods are scheduled one by one (a NonIndexed Job)

    @property
    def ref(self) -> OwnerRef:
        return OwnerRef(self.kind.api_version, self.kind.kind, self.name, self.uid)

    @property
    def what(self) -> str:
        return f"{self.kind.kind} {self.namespace}/{self.name}"

    @property
    def total(self) -> int:
        if self.min_override is not None:
            return self.min_override
        return sum(s.min_count for s in self.pod_sets)


@dataclass(frozen=True, slots=True)
class Gang:
    """The PodGroup a pod belongs to, as inferred from its owner."""

    name: str
    min_count: int
    owner: OwnerRef
    source: str = field(default="", compare=False)  # e.g. "JobSet demo/train", for messages


class _Invalid(ValueError):
    """A field of the owner lockstep cannot read; the message names it."""


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


def _spec(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    spec = raw.get("spec")
    return spec if isinstance(spec, Mapping) else {}


def _int(obj: Mapping[str, Any], key: str, path: str, default: int | None) -> int | None:
    value = obj.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Invalid(f"{path}.{key}: {value!r} is not an integer")
    if value < 0:
        raise _Invalid(f"{path}.{key}: {value} is negative")
    return value


def _map(obj: Mapping[str, Any], key: str, path: str) -> Mapping[str, Any]:
    value = obj.get(key)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Invalid(f"{path}.{key}: not an object")
    return value


def _template_label(template: Mapping[str, Any]) -> str | None:
    labels = _map(template, "metadata", "template").get("labels")
    value = labels.get(POD_GROUP_LABEL) if isinstance(labels, Mapping) else None
    return str(value) if value else None


def controller_of(raw: Mapping[str, Any]) -> OwnerRef | None:
    for ref in _meta(raw).get("ownerReferences") or []:
        if isinstance(ref, Mapping) and ref.get("controller"):
            return OwnerRef(
                str(ref.get("apiVersion", "")),
                str(ref.get("kind", "")),
                str(ref.get("name", "")),
                str(ref.get("uid", "")),
            )
    return None


def _owner(kind: OwnerKind, raw: Mapping[str, Any], **fields: Any) -> Owner:
    meta = _meta(raw)
    return Owner(
        kind,
        str(meta.get("namespace") or "default"),
        str(meta.get("name") or ""),
        str(meta.get("uid") or ""),
        controller_of(raw),
        **fields,
    )


def _checked(owner: Owner) -> Owner:
    """An owner whose counts are out of range carries the problem instead."""
    if owner.problem or owner.not_a_gang:
        return owner
    total = owner.group_size if owner.group_size else owner.total
    if total > MAX_MIN_COUNT:
        return _with_problem(owner, f"{total} pods in one gang is more than lockstep's {MAX_MIN_COUNT}")
    return owner


def _with_problem(owner: Owner, problem: str) -> Owner:
    what = f"{owner.what}: {problem}"
    return Owner(owner.kind, owner.namespace, owner.name, owner.uid, owner.controller, problem=what)


def _job_pods(job_spec: Mapping[str, Any], path: str) -> int:
    """Pods a Job runs at once: parallelism (default 1), at most completions."""
    parallelism = _int(job_spec, "parallelism", path, 1)
    completions = _int(job_spec, "completions", path, None)
    assert parallelism is not None
    return parallelism if completions is None else min(parallelism, completions)


def parse_job(raw: Mapping[str, Any]) -> Owner:
    owner = _owner(JOB, raw)
    spec = _spec(raw)
    try:
        mode = spec.get("completionMode") or "NonIndexed"
        if mode != "Indexed":
            return _owner(JOB, raw, not_a_gang=f"{owner.what}: spec.completionMode is {mode}, not Indexed")
        count = _job_pods(spec, "spec")
        if count < 1:
            raise _Invalid("spec.parallelism is 0: the Job runs no pods")
        label = _template_label(_map(spec, "template", "spec"))
        return _checked(_owner(JOB, raw, pod_sets=(PodSet("", count, label),)))
    except _Invalid as exc:
        return _with_problem(owner, str(exc))


def parse_jobset(raw: Mapping[str, Any]) -> Owner:
    owner = _owner(JOBSET, raw)
    spec = _spec(raw)
    try:
        replicated = spec.get("replicatedJobs")
        if not isinstance(replicated, list) or not replicated:
            raise _Invalid("spec.replicatedJobs: no replicated jobs")
        sets = []
        in_order = (_map(spec, "startupPolicy", "spec").get("startupPolicyOrder") or "AnyOrder") == "InOrder"
        for index, item in enumerate(replicated):
            path = f"spec.replicatedJobs[{index}]"
            if not isinstance(item, Mapping):
                raise _Invalid(f"{path}: not an object")
            replicas = _int(item, "replicas", path, 1)
            job_spec = _map(_map(item, "template", path), "spec", f"{path}.template")
            per_job = _job_pods(job_spec, f"{path}.template.spec")
            if replicas == 0:
                raise _Invalid(f"{path}.replicas is 0: the gang would wait for pods that are never made")
            if per_job == 0:
                raise _Invalid(f"{path}.template.spec.parallelism is 0: its Jobs run no pods")
            assert replicas is not None
            in_order = in_order or bool(item.get("dependsOn"))
            label = _template_label(_map(job_spec, "template", f"{path}.template.spec"))
            sets.append(PodSet(str(item.get("name") or index), replicas * per_job, label))
        return _checked(_owner(JOBSET, raw, pod_sets=tuple(sets), per_set=in_order))
    except _Invalid as exc:
        return _with_problem(owner, str(exc))


def parse_leaderworkerset(raw: Mapping[str, Any]) -> Owner:
    owner = _owner(LEADER_WORKER_SET, raw)
    spec = _spec(raw)
    try:
        template = _map(spec, "leaderWorkerTemplate", "spec")
        size = _int(template, "size", "spec.leaderWorkerTemplate", 1)
        replicas = _int(spec, "replicas", "spec", 1)
        if size == 0:
            raise _Invalid("spec.leaderWorkerTemplate.size is 0: a group has at least its leader")
        assert size is not None and replicas is not None
        policy = spec.get("startupPolicy") or "LeaderCreated"
        if policy not in ("LeaderCreated", "LeaderReady"):
            raise _Invalid(f"spec.startupPolicy: {policy!r} is neither LeaderCreated nor LeaderReady")
        leader = _map(template, "leaderTemplate", "spec.leaderWorkerTemplate")
        worker = _map(template, "workerTemplate", "spec.leaderWorkerTemplate")
        label = _template_label(leader) or _template_label(worker)
        return _checked(
            _owner(
                LEADER_WORKER_SET,
                raw,
                pod_sets=(PodSet("leaderWorkerTemplate", size * replicas, label),),
                group_size=size,
                leader_first=policy == "LeaderReady",
            )
        )
    except _Invalid as exc:
        return _with_problem(owner, str(exc))


def parse_pytorchjob(raw: Mapping[str, Any]) -> Owner:
    owner = _owner(PYTORCH_JOB, raw)
    spec = _spec(raw)
    try:
        specs = _map(spec, "pytorchReplicaSpecs", "spec")
        if not specs:
            raise _Invalid("spec.pytorchReplicaSpecs: no replica specs")
        sets = []
        for replica_type, replica_spec in specs.items():
            path = f"spec.pytorchReplicaSpecs.{replica_type}"
            if not isinstance(replica_spec, Mapping):
                raise _Invalid(f"{path}: not an object")
            # the training operator defaults a missing replicas to 1
            replicas = _int(replica_spec, "replicas", path, 1)
            if replicas == 0:
                raise _Invalid(f"{path}.replicas is 0: every replica type needs a pod")
            assert replicas is not None
            label = _template_label(_map(replica_spec, "template", path))
            sets.append(PodSet(str(replica_type), replicas, label))
        scheduling = _map(_map(spec, "runPolicy", "spec"), "schedulingPolicy", "spec.runPolicy")
        override = _int(scheduling, "minAvailable", "spec.runPolicy.schedulingPolicy", None)
        override_path = "spec.runPolicy.schedulingPolicy.minAvailable"
        if override is None:
            override = _int(_map(spec, "elasticPolicy", "spec"), "minReplicas", "spec.elasticPolicy", None)
            override_path = "spec.elasticPolicy.minReplicas"
        total = sum(s.min_count for s in sets)
        if override is not None and not 1 <= override <= total:
            raise _Invalid(f"{override_path} is {override}: not between 1 and the {total} replicas")
        return _checked(_owner(PYTORCH_JOB, raw, pod_sets=tuple(sets), min_override=override))
    except _Invalid as exc:
        return _with_problem(owner, str(exc))


def parse_raycluster(raw: Mapping[str, Any]) -> Owner:
    owner = _owner(RAY_CLUSTER, raw)
    spec = _spec(raw)
    try:
        head = _map(spec, "headGroupSpec", "spec")
        sets = [PodSet("head", 1, _template_label(_map(head, "template", "spec.headGroupSpec")))]
        groups = spec.get("workerGroupSpecs") or []
        if not isinstance(groups, list):
            raise _Invalid("spec.workerGroupSpecs: not a list")
        for index, group in enumerate(groups):
            path = f"spec.workerGroupSpecs[{index}]"
            if not isinstance(group, Mapping):
                raise _Invalid(f"{path}: not an object")
            if group.get("suspend") is True:
                continue
            replicas = _int(group, "replicas", path, 0) or 0
            minimum = _int(group, "minReplicas", path, 0) or 0
            hosts = _int(group, "numOfHosts", path, 1)
            if minimum > replicas:
                raise _Invalid(f"{path}.minReplicas ({minimum}) is more than its replicas ({replicas})")
            if hosts == 0:
                raise _Invalid(f"{path}.numOfHosts is 0")
            assert hosts is not None
            label = _template_label(_map(group, "template", path))
            sets.append(PodSet(str(group.get("groupName") or index), (minimum or replicas) * hosts, label))
        return _checked(_owner(RAY_CLUSTER, raw, pod_sets=tuple(sets)))
    except _Invalid as exc:
        return _with_problem(owner, str(exc))


PARSERS = {
    JOB: parse_job,
    JOBSET: parse_jobset,
    LEADER_WORKER_SET: parse_leaderworkerset,
    PYTORCH_JOB: parse_pytorchjob,
    RAY_CLUSTER: parse_raycluster,
}


def _same_kind(ref: OwnerRef, kind: OwnerKind) -> bool:
    return ref.kind == kind.kind and ref.api_version.partition("/")[0] == kind.group


def owner_of_pod(pod: Mapping[str, Any]) -> tuple[OwnerKind, str] | None:
    """The watched kind and name of the object whose spec says how many of the pod's peers form its
    gang, from the labels its controller writes or its controller ownerReference."""
    labels = _meta(pod).get("labels") or {}
    if labels.get(LWS_NAME_LABEL):
        return LEADER_WORKER_SET, str(labels[LWS_NAME_LABEL])
    if labels.get(JOBSET_NAME_LABEL):
        return JOBSET, str(labels[JOBSET_NAME_LABEL])
    controller = controller_of(pod)
    if controller is None:
        return None
    for kind in (JOB, PYTORCH_JOB, RAY_CLUSTER):
        if _same_kind(controller, kind):
            return kind, controller.name
    return None


def top_kind(owner: Owner) -> OwnerKind:
    """The kind a user wrote: a TrainJob for the JobSet its runtime made."""
    if owner.kind is JOBSET and owner.controller is not None and _same_kind(owner.controller, TRAIN_JOB):
        return TRAIN_JOB
    return owner.kind


def guessed_gang_name(kind: OwnerKind, name: str, pod: Mapping[str, Any]) -> str | None:
    """The name of the gang a pod of ``kind`` ``name`` joins without a label, before its owner is
    read (corrected once it is, for a JobSet started in order); None when it joins none."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    if kind is LEADER_WORKER_SET:
        return f"{name}-{labels.get(LWS_GROUP_INDEX_LABEL) or 0}"
    if kind is JOB and JOB_COMPLETION_INDEX not in (meta.get("annotations") or {}):
        return None
    return name


def gang_for(owner: Owner, pod: Mapping[str, Any], label_group: str | None) -> Gang | str | None:
    """The gang of ``pod`` made by ``owner``: a :class:`Gang`, the problem (naming the field) that keeps
    one from being inferred, or None when its pods are not a gang (a NonIndexed Job without a label).

    ``label_group`` is the pod's scheduling.lockstep.dev/pod-group label: that names the PodGroup, whose
    minCount is the pods of the owner's templates carrying the same label (all of them when none
    does). Without it, the gang is named after the owner."""
    if owner.problem:
        return owner.problem
    top = owner.ref
    name = owner.name
    if top_kind(owner) is TRAIN_JOB and owner.controller is not None:
        top, name = owner.controller, owner.controller.name
    source = f"{top.kind} {owner.namespace}/{top.name}"
    if owner.not_a_gang:
        if label_group is None:
            return None
        return f"{owner.not_a_gang}: its pods are not a gang; set scheduling.lockstep.dev/min-count"
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    if label_group is not None:
        matching = [s for s in owner.pod_sets if s.group_label == label_group] or list(owner.pod_sets)
        if owner.leader_first:
            return (
                f"{source}: spec.startupPolicy is LeaderReady: the workers are created once the leader "
                "runs, so its pods cannot be one gang named by a label; remove the label and name "
                "LeaderWorkerSet in --infer-gangs (a gang per replica group)"
            )
        if owner.per_set and len(matching) > 1:
            return (
                f"{source}: its replicatedJobs start one after the other (startupPolicyOrder InOrder or "
                f"dependsOn), so {', '.join(s.name for s in matching)} cannot be one gang named by a "
                "label; label each replicatedJob's pods with a group of its own"
            )
        if len(matching) < len(owner.pod_sets):
            return Gang(label_group, sum(s.min_count for s in matching), top, source)
        return Gang(label_group, owner.total, top, source)
    if owner.group_size:
        index = str(labels.get(LWS_GROUP_INDEX_LABEL) or "")
        if not index.isdigit():
            who = f"pod {meta.get('namespace')}/{meta.get('name')} of {source}"
            return f"{who} has no {LWS_GROUP_INDEX_LABEL} label"
        leader = str(labels.get(LWS_WORKER_INDEX_LABEL) or "0") == "0"
        unbound = not (_map(pod, "spec", "pod").get("nodeName"))
        count = 1 if owner.leader_first and leader and unbound else owner.group_size
        return Gang(f"{name}-{index}", count, top, source)
    if owner.per_set:
        set_name = str(labels.get(REPLICATED_JOB_NAME_LABEL) or "")
        pod_set = next((s for s in owner.pod_sets if s.name == set_name), None)
        if pod_set is None:
            return f"pod {meta.get('namespace')}/{meta.get('name')} of {source} is of no replicatedJob of it"
        return Gang(f"{name}-{set_name}", pod_set.min_count, top, source)
    return Gang(name, owner.total, top, source)
