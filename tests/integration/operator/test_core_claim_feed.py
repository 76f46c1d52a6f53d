"""How ResourceClaim watch events reach the scheduler: the echo of the operator's own claim write is
taken as the confirmation of what it assumed, and a claim generated for a pod wakes only that pod's
group (the others that wait for their own claims keep their backoff)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from lockstep import POD_GROUP_LABEL
from lockstep.api.resource import ResourceClaim, parse_resource
from lockstep.config import Settings
from lockstep.controller.core import SchedulerCore
from lockstep.kube.client import ConnectionInfo, KubeClient
from lockstep.kube.events import EventRecorder
from lockstep.metrics import Metrics
from lockstep.scheduler.framework import GroupKey
from lockstep.state.cluster import ClusterEvent

NS = "ns"


@pytest.fixture
async def core() -> AsyncIterator[SchedulerCore]:
    # Nothing here writes to the API: the client points nowhere.
    async with KubeClient(ConnectionInfo(server="http://127.0.0.1:9")) as unused:
        yield SchedulerCore(Settings(), unused, EventRecorder(unused, "lockstep"), Metrics())


def raw_pod(name: str, group: str, claim: str | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Pending"}
    if claim is not None:
        status["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": claim}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "labels": {POD_GROUP_LABEL: group},
        },
        "spec": {
            "schedulerName": "lockstep",
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
        "status": status,
    }


def raw_claim(
    name: str, owner: str | None, rv: str = "10", status: dict[str, Any] | None = None
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NS, "uid": f"uid-{name}", "resourceVersion": rv}
    if owner is not None:
        metadata["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Pod", "name": owner, "uid": f"uid-{owner}", "controller": True}
        ]
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": metadata,
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    if status is not None:
        claim["status"] = status
    return claim


def parked_groups(core: SchedulerCore, *groups: str) -> list[GroupKey]:
    """Each group's gang has one pod that failed twice: backed off for twice the initial backoff."""
    keys = []
    for group in groups:
        core.on_pod("ADDED", raw_pod(f"{group}-0", group))
        pod = core.cache.get_pod(f"uid-{group}-0")
        assert pod is not None
        keys.append(pod.group_key)
        hints = {ClusterEvent.MEMBER_CHANGED, ClusterEvent.CLAIMS_CHANGED}
        for _ in range(2):
            core.scheduler.queue.park(pod.group_key, core.scheduler.clock(), hints)
    return keys


def due(core: SchedulerCore, key: GroupKey) -> float:
    ready_at = core.scheduler.queue.ready_at(key)
    assert ready_at is not None, f"group {key} is not backed off"
    return ready_at


async def test_a_claim_generated_for_a_pod_wakes_only_that_pods_group(core: SchedulerCore) -> None:
    mine, other = parked_groups(core, "mine", "other")
    backed_off = {key: due(core, key) for key in (mine, other)}

    core.on_claim("ADDED", raw_claim("mine-0-gpu-abcde", owner="mine-0"))
    assert due(core, mine) == backed_off[mine], "the pod's status does not name it yet: it would wait"
    # The resourceclaim controller's status update may reach the operator first; the claim's event
    # then wakes the pod's group.
    [named] = parked_groups(core, "named")
    core.on_pod("MODIFIED", raw_pod("named-0", "named", claim="named-0-gpu-abcde"))
    for _ in range(2):
        core.scheduler.queue.park(named, core.scheduler.clock(), {ClusterEvent.CLAIMS_CHANGED})
    backed_off[named] = due(core, named)
    core.on_claim("ADDED", raw_claim("named-0-gpu-abcde", owner="named-0"))
    assert due(core, named) < backed_off[named]
    assert due(core, other) == backed_off[other], "a claim of another pod cannot help this group"

    core.on_claim("ADDED", raw_claim("named-by-pods", owner=None))
    assert due(core, other) < backed_off[other], (
        "a claim pods name directly may be the one any group waits for"
    )


async def test_the_echo_of_the_operators_own_claim_write_confirms_the_assumed_claim(
    core: SchedulerCore,
) -> None:
    key = f"{NS}/c"
    core.on_claim("ADDED", raw_claim("c", owner=None, rv="10"))
    allocated = {
        "allocation": {
            "devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "g"}]}
        },
        "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}],
    }
    written = parse_resource(ResourceClaim, raw_claim("c", owner=None, rv="11", status=allocated))
    core.resources.claims.assume(written)  # what the claim status write answered
    assert core.resources.claims.is_assumed(key)

    core.on_claim("MODIFIED", raw_claim("c", owner=None, rv="11", status=allocated))
    assert core.resources.claims.get(key) is written
    assert not core.resources.claims.is_assumed(key), "the watch delivered the written version"

    core.on_claim("MODIFIED", raw_claim("c", owner=None, rv="12"))
    latest = core.resources.claims.get(key)
    assert latest is not None and latest.metadata.resource_version == "12" and not latest.allocated
