"""A minimal KubeRay RayCluster controller: the head pod ``<cluster>-head`` and, per worker group not
suspended, ``replicas`` times ``numOfHosts`` worker pods ``<cluster>-<group>-worker-<k>``, labelled as
KubeRay labels them (``ray.io/cluster``, ``ray.io/node-type``, ``ray.io/group``,
``ray.io/is-ray-node``) and controlled by the RayCluster. No Services, autoscaler or status."""

from __future__ import annotations

from lockstep.sim.controllers.owned_pods import PodOwnerController, pod_from
from lockstep.sim.registry import ray as api
from lockstep.sim.watching import JsonObject, KubeHttp

PATH = f"/apis/{api.GROUP}/{api.VERSION}/rayclusters"


async def desired_pods(http: KubeHttp, cluster: JsonObject) -> tuple[list[JsonObject], bool]:
    meta, spec = cluster["metadata"], cluster.get("spec") or {}
    if spec.get("suspend"):
        return [], False
    name = meta["name"]

    def labels(node_type: str, group: str) -> dict[str, str]:
        return {
            api.CLUSTER_LABEL: name,
            api.NODE_TYPE_LABEL: node_type,
            api.GROUP_LABEL: group,
            api.IS_RAY_NODE_LABEL: "yes",
        }

    head = (spec.get("headGroupSpec") or {}).get("template") or {}
    pods = [pod_from(cluster, head, f"{name}-head", labels("head", api.HEAD_GROUP), {})]
    for group in spec.get("workerGroupSpecs") or []:
        if group.get("suspend"):
            continue
        count = int(group.get("replicas") or 0) * int(group.get("numOfHosts") or 1)
        group_name = group["groupName"]
        pods += [
            pod_from(
                cluster,
                group.get("template") or {},
                f"{name}-{group_name}-worker-{k}",
                labels("worker", group_name),
                {},
            )
            for k in range(count)
        ]
    return pods, False


class RayClusterController(PodOwnerController):
    def __init__(self, http: KubeHttp) -> None:
        super().__init__(http, PATH, desired_pods, "raycluster-controller")
