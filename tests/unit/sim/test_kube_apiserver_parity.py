"""Where the emulator used to be more lenient than kube-apiserver v1.36.2: Binding preconditions, the
legacy bindings endpoint, Binding annotations, malformed list entries and wrong field types, and what
DELETE answers for each built-in kind (upstream's ``ReturnDeletedObject``)."""

from __future__ import annotations

from typing import Any

import pytest
from sim_helpers import NS, Client, pod

MERGE = "application/merge-patch+json"
SMP = "application/strategic-merge-patch+json"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


def binding(name: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, **meta},
        "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"},
    }


async def test_binding_uid_and_resource_version_are_preconditions(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    uid, rv = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a", uid="0000-old"))
    assert status == 409, body
    assert body["reason"] == "Conflict"
    assert body["details"] == {"name": "a", "kind": "pods"}
    assert body["message"] == (
        f'Operation cannot be fulfilled on pods "a": Precondition failed: UID in precondition: 0000-old, '
        f"UID in object meta: {uid}"
    )
    status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a", resourceVersion="1"))
    assert status == 409, body
    assert body["details"] == {"name": "a", "kind": "pods"}
    assert body["message"] == (
        'Operation cannot be fulfilled on pods "a": Precondition failed: ResourceVersion in precondition: 1, '
        f"ResourceVersion in object meta: {rv}"
    )
    _, still, _ = await client.call("GET", f"{NS}/pods/a")
    assert "nodeName" not in still["spec"]
    status, _, _ = await client.call(
        "POST", f"{NS}/pods/a/binding", binding("a", uid=uid, resourceVersion=rv)
    )
    assert status == 201


async def test_legacy_bindings_endpoint_binds_the_pod_named_in_the_binding(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call("POST", f"{NS}/bindings", binding("a"))
    assert (status, body["status"]) == (201, "Success")
    _, bound, _ = await client.call("GET", f"{NS}/pods/a")
    assert bound["spec"]["nodeName"] == "n1"
    status, body, _ = await client.call("POST", f"{NS}/bindings", binding("a"))
    assert status == 409 and body["message"].endswith('pod a is already assigned to node "n1"')
    status, body, _ = await client.call("POST", f"{NS}/bindings", binding("ghost"))
    assert (status, body["message"]) == (404, 'pods "ghost" not found')
    status, _, _ = await client.call("GET", f"{NS}/bindings")
    assert status == 405
    _, discovery, _ = await client.call("GET", "/api/v1")
    [entry] = [r for r in discovery["resources"] if r["name"] == "bindings"]
    assert (entry["kind"], entry["verbs"], entry["namespaced"]) == ("Binding", ["create"], True)


async def test_binding_annotations_land_on_the_pod_in_the_binding_write(client: Client) -> None:
    created = pod("a")
    created["metadata"]["annotations"] = {"kept": "yes", "replaced": "old"}
    _, before, _ = await client.call("POST", f"{NS}/pods", created)
    note = binding("a", annotations={"replaced": "new", "scheduler.example/decision": "n1"})
    assert (await client.call("POST", f"{NS}/pods/a/binding", note))[0] == 201
    events = await client.watch(
        f"{NS}/pods", {"resourceVersion": before["metadata"]["resourceVersion"], "timeoutSeconds": "1"}
    )
    [modified] = [e for e in events if e["type"] == "MODIFIED"]
    assert modified["object"]["spec"]["nodeName"] == "n1"
    assert modified["object"]["metadata"]["annotations"] == {
        "kept": "yes",
        "replaced": "new",
        "scheduler.example/decision": "n1",
    }


def claim() -> dict[str, Any]:
    return {
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu"}}]}},
    }


ALLOCATION = {"devices": {"results": [{"request": "r", "driver": "d", "pool": "p", "device": "x"}]}}


@pytest.mark.parametrize("content_type", [SMP, MERGE])
async def test_reserved_for_entry_without_uid_is_invalid_naming_the_field(
    client: Client, content_type: str
) -> None:
    await client.call("POST", CLAIMS, claim())
    patch = {"status": {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods", "name": "p"}]}}
    status, body, _ = await client.call("PATCH", f"{CLAIMS}/c/status", patch, content_type)
    assert status == 422, body
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("status.reservedFor[0].uid", "FieldValueRequired")
    ]


async def test_wrong_field_types_are_refused_naming_the_field(client: Client) -> None:
    bad = pod("a")
    bad["spec"]["containers"][0]["name"] = 7
    status, body, _ = await client.call("POST", f"{NS}/pods", bad)
    assert (status, body["reason"]) == (400, "BadRequest")
    assert body["message"] == (
        'Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal number into Go struct '
        "field Container.spec.containers.name of type string"
    )
    await client.call("POST", CLAIMS, claim())
    patch = {
        "status": {"allocation": ALLOCATION, "reservedFor": [{"resource": "pods", "name": "p", "uid": {}}]}
    }
    status, body, _ = await client.call("PATCH", f"{CLAIMS}/c/status", patch, MERGE)
    assert status == 422, body
    assert body["details"]["causes"][0]["field"] == "patch"
    assert body["message"].endswith(
        "json: cannot unmarshal object into Go struct field ResourceClaimConsumerReference"
        ".status.reservedFor.uid of type string"
    )
    await client.call("POST", f"{NS}/pods", pod("b"))
    status, body, _ = await client.call("PATCH", f"{NS}/pods/b", {"spec": {"priority": 2**40}}, MERGE)
    assert status == 422, body
    assert body["message"].endswith(
        "json: cannot unmarshal number 1099511627776 into Go struct field PodSpec.spec.priority of type int32"
    )


NODE = {"metadata": {"name": "n"}}
SLICE = {
    "metadata": {"name": "s"},
    "spec": {"driver": "d.example.com", "nodeName": "n", "pool": {"name": "p", "resourceSliceCount": 1}},
}
TEMPLATE = {"metadata": {"name": "t"}, "spec": {"spec": claim()["spec"]}}
LEASE = {"metadata": {"name": "l"}, "spec": {"holderIdentity": "me"}}
EVENT = {"metadata": {"name": "e"}, "involvedObject": {"namespace": "default"}}

# (collection, body, DELETE answers the object): kube-apiserver's stores with ReturnDeletedObject.
DELETES = [
    (f"{NS}/pods", pod("p"), True),
    ("/api/v1/namespaces", {"metadata": {"name": "gone"}}, True),
    (CLAIMS, claim(), True),
    ("/apis/resource.k8s.io/v1/namespaces/default/resourceclaimtemplates", TEMPLATE, True),
    ("/apis/resource.k8s.io/v1/resourceslices", SLICE, True),
    ("/apis/resource.k8s.io/v1/deviceclasses", {"metadata": {"name": "dc"}, "spec": {}}, True),
    (
        "/apis/storage.k8s.io/v1/storageclasses",
        {"metadata": {"name": "sc"}, "provisioner": "x.example"},
        True,
    ),
    ("/api/v1/nodes", NODE, False),
    (f"{NS}/events", EVENT, False),
    ("/apis/coordination.k8s.io/v1/namespaces/default/leases", LEASE, False),
    ("/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "pc"}, "value": 10}, False),
]


@pytest.mark.parametrize(("collection", "body", "returns_object"), DELETES, ids=[d[0] for d in DELETES])
async def test_delete_answers_like_kube_apiserver(
    client: Client, collection: str, body: dict[str, Any], returns_object: bool
) -> None:
    status, created, _ = await client.call("POST", collection, body)
    assert status == 201, created
    name = created["metadata"]["name"]
    status, answer, _ = await client.call("DELETE", f"{collection}/{name}")
    assert status == 200, answer
    if returns_object:
        assert answer["kind"] == created["kind"] and answer["metadata"]["uid"] == created["metadata"]["uid"]
    else:
        assert answer["kind"] == "Status" and answer["details"]["uid"] == created["metadata"]["uid"]


async def test_malformed_delete_options_and_list_limit_are_400s(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a", {"gracePeriodSeconds": "soon"})
    assert (status, body["message"]) == (
        400,
        "json: cannot unmarshal string into Go struct field DeleteOptions.gracePeriodSeconds of type int64",
    )
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a", {"propagationPolicy": "Sideways"})
    assert (status, body["details"]["causes"][0]["field"]) == (422, "propagationPolicy")
    status, body, _ = await client.call("GET", f"{NS}/pods", params={"limit": "many"})
    assert (status, body["reason"]) == (400, "BadRequest")
    assert (await client.call("GET", f"{NS}/pods/a"))[0] == 200
