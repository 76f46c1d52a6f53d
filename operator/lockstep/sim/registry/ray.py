"""ray.io: RayCluster (v1), as KubeRay publishes it (``ray-operator/apis/ray/v1/raycluster_types.go``):
headGroupSpec, workerGroupSpecs (groupName, replicas, minReplicas, maxReplicas, numOfHosts, suspend,
template), suspend."""

from __future__ import annotations

from lockstep.sim.registry.crd_documents import KEPT, JsonObject, definition, int32, obj, string

GROUP = "ray.io"
VERSION = "v1"
CLUSTER_LABEL = "ray.io/cluster"
NODE_TYPE_LABEL = "ray.io/node-type"
GROUP_LABEL = "ray.io/group"
IS_RAY_NODE_LABEL = "ray.io/is-ray-node"
HEAD_GROUP = "headgroup"


def raycluster_crd() -> JsonObject:
    worker_group = obj(
        {
            "groupName": string(),
            "replicas": int32(default=0),
            "minReplicas": int32(default=0),
            "maxReplicas": int32(default=2147483647),
            "numOfHosts": int32(default=1),
            "suspend": {"type": "boolean"},
            "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
            "template": KEPT,
        },
        ["groupName", "template"],
        keep=True,
    )
    spec = obj(
        {
            "headGroupSpec": obj(
                {
                    "rayStartParams": {"type": "object", "additionalProperties": {"type": "string"}},
                    "template": KEPT,
                },
                ["template"],
                keep=True,
            ),
            "workerGroupSpecs": {"type": "array", "items": worker_group},
            "rayVersion": string(),
            "suspend": {"type": "boolean"},
        },
        ["headGroupSpec"],
        keep=True,
    )
    return definition(GROUP, VERSION, "RayCluster", "rayclusters", spec)
