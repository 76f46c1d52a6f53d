"""A minimal PyTorchJob controller (the Kubeflow training operator): ``replicas`` pods per replica
type, ``<job>-<type>-<index>`` (replicas default to 1, as the operator defaults them), labelled as the
operator labels them (``training.kubeflow.org/job-name``, ``replica-type``, ``replica-index``,
``operator-name``, ``job-role: master``) and controlled by the PyTorchJob. No Services, environment,
restarts or status."""

from __future__ import annotations

from lockstep.sim.controllers.owned_pods import PodOwnerController, pod_from
from lockstep.sim.registry import kubeflow as api
from lockstep.sim.watching import JsonObject, KubeHttp

PATH = f"/apis/{api.GROUP}/{api.VERSION}/pytorchjobs"


async def desired_pods(http: KubeHttp, job: JsonObject) -> tuple[list[JsonObject], bool]:
    name = job["metadata"]["name"]
    pods = []
    for replica_type, replica_spec in ((job.get("spec") or {}).get("pytorchReplicaSpecs") or {}).items():
        kind = str(replica_type).lower()
        for index in range(int(replica_spec.get("replicas", 1))):
            labels = {
                api.JOB_NAME_LABEL: name,
                api.OPERATOR_NAME_LABEL: "pytorchjob-controller",
                api.REPLICA_TYPE_LABEL: kind,
                api.REPLICA_INDEX_LABEL: str(index),
            }
            if kind == "master":
                labels[api.JOB_ROLE_LABEL] = "master"
            pods.append(
                pod_from(job, replica_spec.get("template") or {}, f"{name}-{kind}-{index}", labels, {})
            )
    return pods, False


class PyTorchJobController(PodOwnerController):
    def __init__(self, http: KubeHttp) -> None:
        super().__init__(http, PATH, desired_pods, "pytorchjob-controller")
