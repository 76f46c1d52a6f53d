"""The Eviction API port of stale-gang recovery against the emulator: the DisruptionTarget mark is
guarded by the resourceVersion the decision saw, so a member that finished since is never marked."""

from __future__ import annotations

from kube_harness import NAMESPACE, pod_manifest

from lockstep.api.pod import parse_pod
from lockstep.kube.client import PODS, ApiError, KubeClient, PatchType
from lockstep.kube.ports import KubeEvictionAPI
from lockstep.scheduler.ports import PatchResult


async def test_a_member_that_finished_since_the_decision_is_neither_marked_nor_evicted(
    kube: KubeClient,
) -> None:
    created = await kube.create(PODS, NAMESPACE, pod_manifest("m0"))
    seen = parse_pod(created)  # what the recovery decided on
    finished = {"status": {"phase": "Failed"}}
    await kube.patch(PODS, NAMESPACE, "m0", finished, PatchType.MERGE, subresource="status")
    api = KubeEvictionAPI(kube)

    outcome = await api.evict(seen, "StaleGang", "stale")

    assert outcome.result is PatchResult.CONFLICT
    current = await kube.get(PODS, NAMESPACE, "m0")
    assert not any(c["type"] == "DisruptionTarget" for c in current["status"].get("conditions") or [])
    assert not current["metadata"].get("deletionTimestamp")

    assert (await api.evict(parse_pod(current), "StaleGang", "stale")).result is PatchResult.OK
    try:
        gone = await kube.get(PODS, NAMESPACE, "m0")
    except ApiError as exc:
        assert exc.not_found
    else:
        raise AssertionError(f"m0 was not evicted: {gone['metadata']}")
