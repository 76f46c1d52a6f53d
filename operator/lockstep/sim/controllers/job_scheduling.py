"""The Job controller's Workload and PodGroup half (KEP-5547, gate ``WorkloadWithJob``), as
kube-controller-manager's pkg/controller/job/job_scheduling_manager.go, pkg/api/job/util.go
(``WorkloadItemForJob``, ``defaultMinCountForJob``) and the workloadbuilder library
(staging/src/k8s.io/component-helpers/scheduling/schedulingv1/workloadbuilder: builder.go, podgroup.go)
compile a Job into them. ``controllers/job.py`` calls it; these are its pure parts.

- Which Jobs: every Job without a controller owner whose pod template sets no ``schedulingGroup``,
  with or without ``spec.scheduling`` (absent, the policy is Basic). A Job with a controller owner
  (a JobSet's) is left to its parent; the delegated case (the parent's
  ``scheduling.k8s.io/group-template-name`` annotation) is not emulated.
- When: the objects are created only for a Job that never started (no pods, no ``startTime``, none
  succeeded or failed, no Suspended condition); later they are only looked up, so a Job created
  before the gate was on keeps running pod by pod.
- The Workload ``<job>-<hash of the Job's uid>``: owned by the Job (controller), ``spec.controllerRef``
  ``{apiGroup: batch, kind: Job, name}``, one template ``<job>-pgt-0`` with the compiled policy
  (gang ``minCount`` defaults to ``spec.parallelism``, at least 1), the Job's topology constraints,
  disruption mode and resource claims, and the pod template's ``priorityClassName``. No labels or
  annotations.
- The PodGroup ``<workload>-<template>-<hash of both>``: owned by the Job (controller) and the
  Workload (no ``controller``, no ``blockOwnerDeletion``), ``spec.workloadRef`` to the template and the
  template's fields copied.
- The Job's pods get ``spec.schedulingGroup.podGroupName``; a changed gang size (``minCount``, or
  ``parallelism`` when ``minCount`` is unset) is patched onto the Workload's template and the PodGroup.

Differences from upstream: the objects are written as scheduling.k8s.io/v1beta1 (the version 1.37
serves by default; upstream's 1.37 controller uses the v1alpha3 client, the same objects in one
storage), so the PodGroup's Workload owner reference says ``scheduling.k8s.io/v1beta1``.
"""

from __future__ import annotations

from typing import Any

from lockstep.sim.watching import JsonObject

DNS1123_SUBDOMAIN_MAX = 253
GROUP_TEMPLATE_ANNOTATION = "scheduling.k8s.io/group-template-name"
# k8s.io/apimachinery/pkg/util/rand: the alphabet SafeEncodeString maps characters into
SAFE_ALPHANUMS = "bcdfghjklmnpqrstvwxz2456789"
FNV32_OFFSET = 0x811C9DC5
FNV32_PRIME = 0x01000193


def _fnv32a(data: bytes) -> int:
    value = FNV32_OFFSET
    for byte in data:
        value = ((value ^ byte) * FNV32_PRIME) & 0xFFFFFFFF
    return value


def _safe_encode(text: str) -> str:
    return "".join(SAFE_ALPHANUMS[ord(char) % len(SAFE_ALPHANUMS)] for char in text)


def workload_name(job: JsonObject) -> str:
    """``computeWorkloadName``: the Job's name, cut to fit, and a hash of its uid. The uid is hashed as
    ``hashutil.DeepHashObject`` prints a ``types.UID`` (spew's ``%#v``)."""
    meta = job["metadata"]
    printed = f'(types.UID)"{meta["uid"]}"'
    digest = _safe_encode(str(_fnv32a(printed.encode())))
    return f"{meta['name'][: DNS1123_SUBDOMAIN_MAX - len(digest) - 1]}-{digest}"


def pod_group_name(workload: str, template: str) -> str:
    """``computePodGroupName``: both names, each cut to its fair share when too long, and their hash."""
    digest = _safe_encode(str(_fnv32a(workload.encode() + template.encode())))
    available = DNS1123_SUBDOMAIN_MAX - len(digest) - 2
    if len(workload) + len(template) > available:
        half = available // 2
        if len(workload) <= half:
            template = template[: available - len(workload)]
        elif len(template) <= half:
            workload = workload[: available - len(template)]
        else:
            workload, template = workload[: available - half], template[:half]
    return f"{workload}-{template}-{digest}"


def template_name(job: JsonObject) -> str:
    """``podGroupTemplateName``: the one template a Job compiles to."""
    return f"{job['metadata']['name']}-pgt-0"


def _controller_ref(obj: JsonObject) -> JsonObject | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def manages_scheduling(job: JsonObject) -> bool:
    """``getManagementMode`` is ``manageBoth``: a root Job that brings no PodGroup of its own."""
    template_spec = ((job.get("spec") or {}).get("template") or {}).get("spec") or {}
    return template_spec.get("schedulingGroup") is None and _controller_ref(job) is None


def is_new_job(job: JsonObject, pods: list[JsonObject]) -> bool:
    """``isNewJob``: the Job never started, so its Workload and PodGroup may be created."""
    status = job.get("status") or {}
    if pods or status.get("startTime") or status.get("succeeded") or status.get("failed"):
        return False
    return not any(c.get("type") == "Suspended" for c in status.get("conditions") or [])


def job_owner_reference(job: JsonObject) -> JsonObject:
    """``metav1.NewControllerRef(job, controllerKind)``."""
    meta = job["metadata"]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def desired_min_count(job: JsonObject) -> int | None:
    """The gang size the Job compiles to (None for the Basic policy): ``gang.minCount``, or
    ``spec.parallelism`` at least 1 when it is unset (``defaultMinCountForJob``)."""
    spec = job.get("spec") or {}
    policy = (spec.get("scheduling") or {}).get("schedulingPolicy") or {}
    gang = policy.get("gang")
    if gang is None:
        return None
    count = gang.get("minCount")
    return int(count) if count is not None else max(1, int(spec.get("parallelism") or 1))


def _compiled_template(job: JsonObject) -> JsonObject:
    """``buildLeafTemplate`` over the resolved config: Basic by default, the Job's blocks over it."""
    spec = job.get("spec") or {}
    scheduling = spec.get("scheduling") or {}
    count = desired_min_count(job)
    template: JsonObject = {
        "name": template_name(job),
        "schedulingPolicy": {"basic": {}} if count is None else {"gang": {"minCount": count}},
    }
    priority_class = ((spec.get("template") or {}).get("spec") or {}).get("priorityClassName")
    if priority_class:
        template["priorityClassName"] = priority_class
    topology = (scheduling.get("schedulingConstraints") or {}).get("topology") or []
    if topology:
        template["schedulingConstraints"] = {"topology": [{"key": t.get("key")} for t in topology]}
    mode = scheduling.get("disruptionMode") or {}
    if mode.get("all") is not None:
        template["disruptionMode"] = {"all": {}}
    elif mode.get("single") is not None:
        template["disruptionMode"] = {"single": {}}
    claims = scheduling.get("resourceClaims") or []
    if claims:
        keys = ("name", "resourceClaimName", "resourceClaimTemplateName")
        template["resourceClaims"] = [{k: c[k] for k in keys if c.get(k) is not None} for c in claims]
    return template


def workload_for(job: JsonObject, api_version: str) -> JsonObject:
    """The Workload ``BuildWorkload`` compiles for the Job."""
    meta = job["metadata"]
    return {
        "apiVersion": api_version,
        "kind": "Workload",
        "metadata": {
            "name": workload_name(job),
            "namespace": meta["namespace"],
            "ownerReferences": [job_owner_reference(job)],
        },
        "spec": {
            "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": meta["name"]},
            "podGroupTemplates": [_compiled_template(job)],
        },
    }


def pod_group_for(job: JsonObject, workload: JsonObject, api_version: str) -> JsonObject:
    """``createPodGroup`` of a root Job: ``NewPodGroup`` from the Workload's single template, owned by
    the Job and, not as controller, by the Workload."""
    template: dict[str, Any] = (workload.get("spec") or {}).get("podGroupTemplates", [{}])[0]
    wmeta = workload["metadata"]
    spec: JsonObject = {
        "workloadRef": {"workloadName": wmeta["name"], "templateName": template.get("name")},
        "schedulingPolicy": template.get("schedulingPolicy"),
    }
    for key in ("schedulingConstraints", "disruptionMode", "priorityClassName", "priority", "resourceClaims"):
        if template.get(key) not in (None, "", []):
            spec[key] = template[key]
    return {
        "apiVersion": api_version,
        "kind": "PodGroup",
        "metadata": {
            "name": pod_group_name(wmeta["name"], str(template.get("name"))),
            "namespace": wmeta["namespace"],
            "ownerReferences": [
                job_owner_reference(job),
                {
                    "apiVersion": api_version,
                    "kind": "Workload",
                    "name": wmeta["name"],
                    "uid": wmeta["uid"],
                },
            ],
        },
        "spec": spec,
    }
