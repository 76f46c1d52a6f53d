"""The scheduler's ports (``lockstep.scheduler.ports``) implemented over the shared HTTP session."""

from __future__ import annotations

import aiohttp

from lockstep.api.pod import parse_pod
from lockstep.kube.client import PODS, ApiError, KubeClient
from lockstep.kube.patching import patch_pod_scheduled_false, post_binding
from lockstep.logging import get_logger
from lockstep.scheduler.framework import PodInfo
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult

log = get_logger("lockstep.kube.ports")

TRANSPORT_ERRORS = (aiohttp.ClientError, OSError, TimeoutError)


class KubePodAPI:
    """``PodAPI``: bindings, fresh pod reads and strict failure-condition patches."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        try:
            await post_binding(self.client, pod.namespace, pod.name, pod.uid, node_name)
            return BindOutcome(BindResult.BOUND)
        except ApiError as exc:
            if exc.not_found:
                return BindOutcome(BindResult.NOT_FOUND, str(exc))
            if not exc.conflict:
                return BindOutcome(BindResult.ERROR, str(exc))
            conflict = exc
        except TRANSPORT_ERRORS as exc:
            return BindOutcome(BindResult.ERROR, f"POST pods/binding {pod.key}: {exc!r}")
        # 409: either a lost race or an earlier POST of ours that succeeded but whose answer was lost.
        current = await self.get_pod(pod.namespace, pod.name)
        if current is None:
            return BindOutcome(BindResult.NOT_FOUND, str(conflict))
        if current.uid == pod.uid and current.node_name == node_name:
            return BindOutcome(BindResult.ALREADY_BOUND, str(conflict))
        return BindOutcome(BindResult.CONFLICT, str(conflict))

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        try:
            raw = await self.client.get(PODS, namespace, name)
        except ApiError as exc:
            if exc.not_found:
                return None
            raise
        return parse_pod(raw)

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        try:
            await patch_pod_scheduled_false(
                self.client, pod.namespace, pod.name, resource_version, reason, message
            )
            return PatchOutcome(PatchResult.OK)
        except ApiError as exc:
            if exc.conflict:
                return PatchOutcome(PatchResult.CONFLICT, str(exc))
            if exc.not_found:
                return PatchOutcome(PatchResult.NOT_FOUND, str(exc))
            return PatchOutcome(PatchResult.ERROR, str(exc))
        except TRANSPORT_ERRORS as exc:
            return PatchOutcome(PatchResult.ERROR, f"PATCH pods/status {pod.key}: {exc!r}")
