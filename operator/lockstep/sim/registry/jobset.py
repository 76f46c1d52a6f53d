"""jobset.x-k8s.io: JobSet (v1alpha2), as kubernetes-sigs/jobset publishes it
(``api/jobset/v1alpha2/jobset_types.go``): replicatedJobs (name, groupName, replicas, template,
dependsOn), startupPolicy, suspend."""

from __future__ import annotations

from lockstep.sim.registry.crd_documents import KEPT, JsonObject, definition, int32, obj, string

GROUP = "jobset.x-k8s.io"
VERSION = "v1alpha2"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
JOBSET_UID_LABEL = "jobset.sigs.k8s.io/jobset-uid"
REPLICATED_JOB_NAME_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
REPLICATED_JOB_REPLICAS_LABEL = "jobset.sigs.k8s.io/replicatedjob-replicas"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
JOB_GLOBAL_INDEX_LABEL = "jobset.sigs.k8s.io/job-global-index"
GLOBAL_REPLICAS_LABEL = "jobset.sigs.k8s.io/global-replicas"


def jobset_crd() -> JsonObject:
    replicated_job = obj(
        {
            "name": string(),
            "groupName": string(default="default"),
            "replicas": int32(default=1),
            "template": obj({"metadata": KEPT, "spec": KEPT}),
            "dependsOn": {
                "type": "array",
                "maxItems": 5,
                "items": obj(
                    {"name": string(), "status": string(enum=["Ready", "Complete"])}, ["name", "status"]
                ),
            },
        },
        ["name", "template"],
    )
    spec = obj(
        {
            "replicatedJobs": {
                "type": "array",
                "items": replicated_job,
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
            },
            "startupPolicy": obj(
                {"startupPolicyOrder": string(enum=["AnyOrder", "InOrder"])}, ["startupPolicyOrder"]
            ),
            "suspend": {"type": "boolean"},
        },
        keep=True,
    )
    return definition(GROUP, VERSION, "JobSet", "jobsets", spec)
