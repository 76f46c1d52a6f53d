"""PATCH by content type, resourceVersion preconditions, and the patch algorithms themselves."""

from __future__ import annotations

import orjson
import pytest
from sim_helpers import GROUP_PATH, NS, Client, pod, podgroup

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.patch import JsonPatchError, json_patch, merge_patch, strategic_merge

MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
CONDITIONS = {("status", "conditions"): "type", ("metadata", "finalizers"): "$set"}


async def test_stale_resource_version_in_merge_patch_is_409(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    stale = created["metadata"]["resourceVersion"]
    await client.call("PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    status, body, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"resourceVersion": stale, "labels": {"x": "2"}}}, MERGE
    )
    assert status == 409
    assert body["reason"] == "Conflict"
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "a": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )


async def test_stale_put_is_409_and_current_put_succeeds(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call("PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    status, _, _ = await client.call("PUT", f"{NS}/pods/a", created)
    assert status == 409
    _, current, _ = await client.call("GET", f"{NS}/pods/a")
    current["metadata"]["labels"] = {"x": "2"}
    status, updated, _ = await client.call("PUT", f"{NS}/pods/a", current)
    assert status == 200 and updated["metadata"]["labels"] == {"x": "2"}


async def test_smp_merges_one_condition_without_dropping_the_others(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    ready = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    await client.call("PATCH", f"{NS}/pods/a/status", ready, SMP)
    scheduled = {
        "status": {"conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    }
    status, body, _ = await client.call("PATCH", f"{NS}/pods/a/status", scheduled, SMP)
    assert status == 200
    conditions = body["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["PodScheduled", "Ready"]
    assert conditions[1] == {
        "type": "Ready",
        "status": "False",
        "lastProbeTime": None,
        "lastTransitionTime": None,
    }
    _, body, _ = await client.call(
        "PATCH",
        f"{NS}/pods/a/status",
        {"status": {"conditions": [{"type": "Ready", "$patch": "delete"}]}},
        SMP,
    )
    assert [c["type"] for c in body["status"]["conditions"]] == ["PodScheduled"]


async def test_condition_without_merge_key_is_a_500_without_reason(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call(
        "PATCH", f"{NS}/pods/a/status", {"status": {"conditions": [{"status": "True"}]}}, SMP
    )
    assert status == 500
    assert "reason" not in body
    assert body["message"] == "map: map[status:True] does not contain declared merge key: type"


async def test_json_patch_failing_test_is_422_and_malformed_is_400(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a", labels={"tier": "a"}))
    ops = [
        {"op": "test", "path": "/metadata/labels/tier", "value": "z"},
        {"op": "replace", "path": "/metadata/labels/tier", "value": "b"},
    ]
    status, body, _ = await client.call("PATCH", f"{NS}/pods/a", ops, JSON_PATCH)
    assert (status, body["reason"], body["details"]) == (422, "Invalid", {})
    status, body, _ = await client.call("PATCH", f"{NS}/pods/a", b"not json", JSON_PATCH)
    assert status == 400
    assert body["message"] == "error decoding patch: invalid character 'o' in literal null (expecting 'u')"
    ops[0]["value"] = "a"
    status, body, _ = await client.call("PATCH", f"{NS}/pods/a", ops, JSON_PATCH)
    assert status == 200 and body["metadata"]["labels"] == {"tier": "b"}


def test_merge_patch_follows_rfc7386() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]}) == {
        "a": {"c": 2, "d": 3},
        "l": [3],
    }


def test_json_patch_operations() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    ops = [
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "move", "from": "/b/c", "path": "/d"},
        {"op": "copy", "from": "/d", "path": "/e"},
        {"op": "remove", "path": "/a/0"},
    ]
    assert json_patch(doc, ops) == {"a": [2, 3], "b": {}, "d": 1, "e": 1}
    assert doc == {"a": [1, 2], "b": {"c": 1}}
    with pytest.raises(JsonPatchError):
        json_patch(doc, [{"op": "replace", "path": "/missing/x", "value": 1}])


def test_strategic_merge_directives() -> None:
    original = {
        "metadata": {"finalizers": ["a"]},
        "status": {"conditions": [{"type": "A", "status": "1"}, {"type": "B", "status": "2"}]},
    }
    replaced = strategic_merge(
        original,
        {"status": {"conditions": [{"$patch": "replace"}, {"type": "C", "status": "3"}]}},
        (),
        CONDITIONS,
    )
    assert replaced["status"]["conditions"] == [{"type": "C", "status": "3"}]
    merged = strategic_merge(
        original, {"status": {"conditions": [{"type": "B", "status": "x"}]}}, (), CONDITIONS
    )
    assert merged["status"]["conditions"] == [{"type": "A", "status": "1"}, {"type": "B", "status": "x"}]
    finalizers = strategic_merge(original, {"metadata": {"finalizers": ["b"]}}, (), CONDITIONS)
    assert sorted(finalizers["metadata"]["finalizers"]) == ["a", "b"]
    ordered = strategic_merge(
        original["status"],
        {"$setElementOrder/conditions": [{"type": "B"}, {"type": "A"}]},
        ("status",),
        CONDITIONS,
    )
    assert [c["type"] for c in ordered["conditions"]] == ["B", "A"]
    deleted = strategic_merge(
        original, {"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}, (), CONDITIONS
    )
    assert deleted["metadata"]["finalizers"] == []


async def test_smp_on_a_custom_resource_is_415(client: Client, podgroup_crd: None) -> None:
    await client.call("POST", GROUP_PATH, podgroup("g", {"schedulingPolicy": {"basic": {}}}))
    status, body, _ = await client.call(
        "PATCH", f"{GROUP_PATH}/g", {"spec": {"scheduleTimeoutSeconds": 1}}, SMP
    )
    assert status == 415
    assert body["reason"] == "UnsupportedMediaType"
    assert "application/merge-patch+json" in body["message"]


async def test_a_patch_never_alters_the_previous_stored_version(client: Client, server: ApiServer) -> None:
    await client.call("POST", f"{NS}/pods", pod("a", labels={"k": "v"}))
    store = server.stores["/pods"]
    before = store.objects[("default", "a")]
    snapshot = orjson.loads(before.body)
    await client.call(
        "PATCH", f"{NS}/pods/a", {"spec": {"containers": [{"name": "main", "image": "pause:3.9"}]}}, SMP
    )
    await client.call("PATCH", f"{NS}/pods/a/status", {"status": {"phase": "Running"}}, MERGE)
    assert before.obj == snapshot
