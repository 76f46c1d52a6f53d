"""Object store basics: server-set metadata, one global resourceVersion, and Status errors."""

from __future__ import annotations

import re

import pytest
from sim_helpers import NS, Client, pod

from lockstep.sim.apiserver import ApiServer

UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$")


async def test_create_sets_server_metadata_and_takes_namespace_from_url(client: Client) -> None:
    status, body, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    assert status == 201
    meta = body["metadata"]
    assert UUID.match(meta["uid"])
    assert meta["namespace"] == "default"
    assert meta["generation"] == 1
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$", meta["creationTimestamp"])


async def test_resource_version_is_global_and_increasing(client: Client) -> None:
    _, first, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    _, lease, _ = await client.call(
        "POST",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases",
        {"metadata": {"name": "l"}, "spec": {}},
    )
    _, second, _ = await client.call("POST", f"{NS}/pods", pod("b"))
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (first, lease, second)]
    assert rvs == sorted(rvs) and len(set(rvs)) == 3


async def test_generation_tracks_spec_only_and_claims_have_none(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    _, labelled, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, "application/merge-patch+json"
    )
    assert labelled["metadata"]["generation"] == 1
    _, reimaged, _ = await client.call(
        "PATCH",
        f"{NS}/pods/a",
        {"spec": {"containers": [{"name": "main", "image": "pause:3.9"}]}},
        "application/strategic-merge-patch+json",
    )
    assert reimaged["metadata"]["generation"] == 2
    claim = {
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "d"}}]}},
    }
    _, created, _ = await client.call(
        "POST", "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims", claim
    )
    assert "generation" not in created["metadata"]


async def test_generate_name_appends_five_characters(client: Client) -> None:
    body = pod("")
    body["metadata"] = {"generateName": "web-"}
    status, created, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 201
    assert re.match(r"^web-[a-z0-9]{5}$", created["metadata"]["name"])
    assert created["metadata"]["generateName"] == "web-"


async def test_status_errors_carry_code_reason_and_details(client: Client) -> None:
    status, body, _ = await client.call("GET", f"{NS}/pods/nope")
    assert (status, body["reason"], body["details"]) == (404, "NotFound", {"name": "nope", "kind": "pods"})
    await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    assert (status, body["reason"]) == (409, "AlreadyExists")
    status, body, _ = await client.call(
        "POST", f"{NS}/pods", {"metadata": {"name": "bad"}, "spec": {"containers": []}}
    )
    assert (status, body["reason"]) == (422, "Invalid")
    assert body["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]
    status, body, _ = await client.call("PATCH", f"{NS}/pods/a", {"x": 1}, "application/xml")
    assert (status, body["reason"]) == (415, "UnsupportedMediaType")
    status, body, _ = await client.call("POST", f"{NS}/pods", b"{not json")
    assert (status, body["reason"]) == (400, "BadRequest")


async def test_noop_write_keeps_resource_version(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a", labels={"k": "v"}))
    _, same, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"k": "v"}}}, "application/merge-patch+json"
    )
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_objects_need_an_existing_namespace(client: Client) -> None:
    status, body, _ = await client.call("POST", "/api/v1/namespaces/missing/pods", pod("a"))
    assert (status, body["details"]) == (404, {"name": "missing", "kind": "namespaces"})


async def test_labels_and_annotations_are_validated(client: Client) -> None:
    status, body, _ = await client.call("POST", f"{NS}/pods", pod("a", labels={"app": "a b"}))
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "metadata.labels"
    assert body["details"]["causes"][0]["message"].startswith('Invalid value: "a b": a valid label must be')
    bad_key = pod("b")
    bad_key["metadata"]["annotations"] = {"no spaces/x y": "1"}
    status, body, _ = await client.call("POST", f"{NS}/pods", bad_key)
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.annotations"
    ok = pod("c", labels={"scheduling.lockstep.dev/pod-group": "g-1", "empty": ""})
    assert (await client.call("POST", f"{NS}/pods", ok))[0] == 201
    status, _, _ = await client.call(
        "PATCH", f"{NS}/pods/c", {"metadata": {"labels": {"x": "-bad"}}}, "application/merge-patch+json"
    )
    assert status == 422


async def test_an_emulator_bug_is_answered_as_an_internal_error_status(
    client: Client, server: ApiServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: object) -> list[object]:
        raise RuntimeError("boom")

    monkeypatch.setattr(server.types[("", "v1", "pods")].strategy, "validate", broken)
    status, body, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    assert (status, body["kind"], body["reason"]) == (500, "Status", "InternalError")
    assert "RuntimeError: boom" in body["message"]


async def test_create_refuses_a_resource_version(client: Client) -> None:
    body = pod("a")
    body["metadata"]["resourceVersion"] = "5"
    status, error, _ = await client.call("POST", f"{NS}/pods", body)
    assert (status, error["message"]) == (400, "resourceVersion should not be set on objects to be created")
