"""leaderworkerset.x-k8s.io: LeaderWorkerSet (v1), as kubernetes-sigs/lws publishes it
(``api/leaderworkerset/v1/leaderworkerset_types.go``): replicas, leaderWorkerTemplate (leaderTemplate,
workerTemplate, size, restartPolicy), startupPolicy; the scale subresource on replicas."""

from __future__ import annotations

from lockstep.sim.registry.crd_documents import KEPT, JsonObject, definition, int32, obj, string

GROUP = "leaderworkerset.x-k8s.io"
VERSION = "v1"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_KEY_LABEL = "leaderworkerset.sigs.k8s.io/group-key"
SIZE_ANNOTATION = "leaderworkerset.sigs.k8s.io/size"
LEADER_NAME_ANNOTATION = "leaderworkerset.sigs.k8s.io/leader-name"


def leaderworkerset_crd() -> JsonObject:
    template = obj(
        {
            "leaderTemplate": KEPT,
            "workerTemplate": KEPT,
            "size": int32(default=1),
            "restartPolicy": string(
                default="RecreateGroupOnPodRestart",
                enum=["Default", "RecreateGroupOnPodRestart", "RecreateGroupAfterStart", "None"],
            ),
        },
        ["workerTemplate"],
        keep=True,
    )
    spec = obj(
        {
            "replicas": int32(default=1),
            "leaderWorkerTemplate": template,
            "startupPolicy": string(default="LeaderCreated", enum=["LeaderCreated", "LeaderReady"]),
        },
        ["leaderWorkerTemplate"],
        keep=True,
    )
    scale = {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}
    return definition(
        GROUP, VERSION, "LeaderWorkerSet", "leaderworkersets", spec, short_names=["lws"], scale=scale
    )
