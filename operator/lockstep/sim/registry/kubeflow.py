"""kubeflow.org: PyTorchJob (v1), as the Kubeflow training operator publishes it
(``pkg/apis/kubeflow.org/v1/pytorch_types.go``): pytorchReplicaSpecs (Master, Worker: replicas,
restartPolicy, template), runPolicy.schedulingPolicy.minAvailable, elasticPolicy.minReplicas."""

from __future__ import annotations

from lockstep.sim.registry.crd_documents import KEPT, JsonObject, definition, int32, obj, string

GROUP = "kubeflow.org"
VERSION = "v1"
JOB_NAME_LABEL = "training.kubeflow.org/job-name"
OPERATOR_NAME_LABEL = "training.kubeflow.org/operator-name"
REPLICA_TYPE_LABEL = "training.kubeflow.org/replica-type"
REPLICA_INDEX_LABEL = "training.kubeflow.org/replica-index"
JOB_ROLE_LABEL = "training.kubeflow.org/job-role"


def pytorchjob_crd() -> JsonObject:
    replica_spec = obj(
        {
            "replicas": int32(),
            "restartPolicy": string(enum=["Always", "OnFailure", "Never", "ExitCode"]),
            "template": KEPT,
        },
        keep=True,
    )
    spec = obj(
        {
            "pytorchReplicaSpecs": {"type": "object", "additionalProperties": replica_spec},
            "runPolicy": obj(
                {"schedulingPolicy": obj({"minAvailable": int32(), "queue": string()}, keep=True)}, keep=True
            ),
            "elasticPolicy": obj({"minReplicas": int32(), "maxReplicas": int32()}, keep=True),
        },
        ["pytorchReplicaSpecs"],
        keep=True,
    )
    return definition(GROUP, VERSION, "PyTorchJob", "pytorchjobs", spec)
