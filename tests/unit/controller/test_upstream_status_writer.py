"""The PodGroupScheduled condition of upstream PodGroups: the newest attempt wins, True stays True."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.controller.upstream_status import UpstreamStatusWriter
from lockstep.kube.client import ApiError
from lockstep.scheduler.framework import Code, GroupKey
from lockstep.scheduler.records import GroupAttempt

KEY = GroupKey("ns", "g", upstream=True)


class FakeClient:
    """Stores one PodGroup; a merge patch with a stale resourceVersion is a 409."""

    def __init__(self, api_version: str = "scheduling.k8s.io/v1alpha2") -> None:
        self.object: dict[str, Any] = {
            "apiVersion": api_version,
            "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ns", "uid": "u", "resourceVersion": "1"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {},
        }
        self.writes: list[str] = []
        self.paths: list[str] = []

    async def patch(self, kind: Any, namespace: str, name: str, body: Any, patch_type: Any, **_: Any) -> Any:
        await asyncio.sleep(0)
        self.paths.append(kind.path(namespace, name, "status"))
        if body["metadata"]["resourceVersion"] != self.object["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "stale", "PATCH podgroups")
        self.object["status"] = body["status"]
        version = int(self.object["metadata"]["resourceVersion"]) + 1
        self.object["metadata"]["resourceVersion"] = str(version)
        self.writes.append(body["status"]["conditions"][-1]["status"])
        return self.object

    async def get(self, kind: Any, namespace: str, name: str) -> Any:
        return self.object


def attempt(code: Code, message: str) -> GroupAttempt:
    return GroupAttempt(KEY, 1, code, "", message, 0.0, 2, 2, 0)


async def settle(writer: UpstreamStatusWriter) -> None:
    while writer._tasks:
        await asyncio.gather(*list(writer._tasks))


@pytest.mark.parametrize(
    ("api_version", "condition_type"),
    [
        ("scheduling.k8s.io/v1beta1", "PodGroupInitiallyScheduled"),
        ("scheduling.k8s.io/v1alpha2", "PodGroupScheduled"),
    ],
)
async def test_each_version_gets_its_own_condition_written_in_its_own_version(
    api_version: str, condition_type: str
) -> None:
    client = FakeClient(api_version)
    client.object["status"] = {
        "conditions": [
            {
                "type": "DisruptionTarget",
                "status": "False",
                "reason": "Other",
                "message": "",
                "lastTransitionTime": "2026-12-01T00:00:00Z",
            }
        ]
    }
    writer = UpstreamStatusWriter(client)  # type: ignore[arg-type]
    writer.observe(KEY, UpstreamPodGroup.model_validate(client.object))
    writer.on_attempt(attempt(Code.UNSCHEDULABLE, "0/2 nodes are available"))
    await settle(writer)
    other, written = client.object["status"]["conditions"]
    assert other["type"] == "DisruptionTarget"  # kept as it was
    assert (written["type"], written["status"]) == (condition_type, "False")
    assert written["reason"] == "Unschedulable"
    assert client.paths == [f"/apis/{api_version}/namespaces/ns/podgroups/g/status"]


async def test_a_success_right_after_a_wait_ends_true_and_is_never_taken_back() -> None:
    client = FakeClient()
    writer = UpstreamStatusWriter(client)  # type: ignore[arg-type]
    writer.observe(KEY, UpstreamPodGroup.model_validate(client.object))
    writer.on_attempt(attempt(Code.WAIT, "waiting for pods: 1 of minCount 2 present, 1 missing"))
    writer.on_attempt(attempt(Code.SUCCESS, "2 pods placed"))
    await settle(writer)
    (condition,) = client.object["status"]["conditions"]
    assert (condition["status"], condition["reason"]) == ("True", "Scheduled")
    writer.on_attempt(attempt(Code.UNSCHEDULABLE, "a later extra pod did not fit"))
    await settle(writer)
    assert client.object["status"]["conditions"][0]["status"] == "True"
    assert client.writes[-1] == "True"
