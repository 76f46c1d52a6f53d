"""ImageLocality, as kube-scheduler's plugin of that name: prefer nodes that already hold the pod's
container images (``status.images``), weighted by image size and by how many nodes hold it (an
image on every node does not steer). A cluster whose nodes report no images costs nothing."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from lockstep.scheduler.framework import SKIP, SUCCESS, CycleState, NodeInfo, PodInfo, Status
from lockstep.state.cluster import ClusterCache

MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


class ImageLocality:
    name: ClassVar[str] = "ImageLocality"

    def __init__(self, cache: ClusterCache) -> None:
        self.cache = cache

    def pre_score(self, state: CycleState, pod: PodInfo, nodes: Sequence[NodeInfo]) -> Status:
        return SUCCESS if pod.images and self.cache.any_node_images else SKIP

    def score(self, state: CycleState, pod: PodInfo, node: NodeInfo) -> int:
        total_nodes = len(self.cache.nodes)
        held = node.images
        total = 0
        for image in pod.images:
            size = held.get(image)
            if size is not None:
                total += int(size * (self.cache.image_node_count(image) / total_nodes))
        highest = MAX_CONTAINER_THRESHOLD * len(pod.images)
        total = min(max(total, MIN_THRESHOLD), highest)
        return 100 * (total - MIN_THRESHOLD) // (highest - MIN_THRESHOLD)
