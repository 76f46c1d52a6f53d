"""Helpers shared by the operator integration tests."""

from __future__ import annotations

from typing import Any

from lockstep.kube.client import NAMESPACES, ApiError, KubeClient

NAMESPACE = "team-a"


def pod_manifest(
    name: str, *, scheduler: str = "lockstep", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels or {}},
        "spec": {
            "schedulerName": scheduler,
            "containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}],
        },
    }


async def ensure_namespace(client: KubeClient, name: str) -> None:
    try:
        await client.create(
            NAMESPACES, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
    except ApiError as exc:
        if not exc.conflict:
            raise
