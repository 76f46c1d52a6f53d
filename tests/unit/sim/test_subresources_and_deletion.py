"""Status subresource, pods/binding, graceful deletion, finalizers, namespaces and garbage collection."""

from __future__ import annotations

from sim_helpers import GROUP_PATH, NS, Client, pod, podgroup

MERGE = "application/merge-patch+json"


def binding(name: str, node: str = "n1") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": node},
    }


async def test_main_resource_ignores_status_and_status_ignores_spec(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    _, same, _ = await client.call("PATCH", f"{NS}/pods/a", {"status": {"phase": "Running"}}, MERGE)
    assert same["status"]["phase"] == "Pending"
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    patch = {
        "metadata": {"labels": {"l": "1"}},
        "spec": {"nodeName": "x"},
        "status": {"phase": "Running", "podIP": "10.0.0.1"},
    }
    _, updated, _ = await client.call("PATCH", f"{NS}/pods/a/status", patch, MERGE)
    assert updated["status"]["phase"] == "Running"
    assert updated["status"]["podIPs"] == [{"ip": "10.0.0.1"}]
    assert "nodeName" not in updated["spec"]
    assert updated["metadata"]["labels"] == {"l": "1"}, "pods/status applies label changes"


async def test_custom_resource_status_ignores_labels_and_spec(client: Client, podgroup_crd: None) -> None:
    await client.call("POST", GROUP_PATH, podgroup("g", {"schedulingPolicy": {"basic": {}}}))
    patch = {
        "metadata": {"labels": {"l": "1"}},
        "spec": {"scheduleTimeoutSeconds": 5},
        "status": {"phase": "Scheduled"},
    }
    status, body, _ = await client.call("PATCH", f"{GROUP_PATH}/g/status", patch, MERGE)
    assert status == 200
    assert body["status"] == {"phase": "Scheduled"}
    assert body["spec"]["scheduleTimeoutSeconds"] == 300
    assert "labels" not in body["metadata"]
    assert body["metadata"]["generation"] == 1


async def test_binding_sets_node_and_replaces_pod_scheduled_in_one_write(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    unschedulable = {
        "status": {
            "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "m"}
            ]
        }
    }
    _, before, _ = await client.call(
        "PATCH", f"{NS}/pods/a/status", unschedulable, "application/strategic-merge-patch+json"
    )
    status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
    assert (status, body) == (
        201,
        {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201},
    )
    _, bound, _ = await client.call("GET", f"{NS}/pods/a")
    assert bound["spec"]["nodeName"] == "n1"
    [condition] = bound["status"]["conditions"]
    assert condition["type"] == "PodScheduled" and condition["status"] == "True"
    assert "reason" not in condition and condition["lastTransitionTime"]
    assert int(bound["metadata"]["resourceVersion"]) == int(before["metadata"]["resourceVersion"]) + 1


async def test_binding_conflicts_and_errors(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
    for node in ("n2", "n1"):
        status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a", node))
        assert (status, body["details"]["kind"]) == (409, "pods/binding")
        assert body["message"].endswith('pod a is already assigned to node "n1"')
    status, body, _ = await client.call("POST", f"{NS}/pods/ghost/binding", binding("ghost"))
    assert (status, body["reason"]) == (404, "NotFound")
    status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("other"))
    assert (status, body["message"]) == (400, "name in URL does not match name in Binding object")
    await client.call("POST", f"{NS}/pods", pod("gated", schedulingGates=[{"name": "wait"}]))
    status, body, _ = await client.call("POST", f"{NS}/pods/gated/binding", binding("gated"))
    assert status == 409 and body["message"].endswith("pod gated has non-empty .spec.schedulingGates")
    finalized = pod("f")
    finalized["metadata"]["finalizers"] = ["x/hold"]
    await client.call("POST", f"{NS}/pods", finalized)
    await client.call("DELETE", f"{NS}/pods/f")
    status, body, _ = await client.call("POST", f"{NS}/pods/f/binding", binding("f"))
    assert status == 409 and body["message"].endswith("pod f is being deleted, cannot be assigned to a host")


async def test_bound_pod_deletion_is_graceful_until_forced(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a")
    assert status == 200
    assert body["metadata"]["deletionGracePeriodSeconds"] == 30
    assert body["metadata"]["generation"] == 2
    status, _, _ = await client.call("GET", f"{NS}/pods/a")
    assert status == 200
    _, shorter, _ = await client.call(
        "DELETE", f"{NS}/pods/a", {"kind": "DeleteOptions", "gracePeriodSeconds": 5}
    )
    assert shorter["metadata"]["deletionGracePeriodSeconds"] == 5
    _, gone, _ = await client.call("DELETE", f"{NS}/pods/a", params={"gracePeriodSeconds": "0"})
    assert gone["metadata"]["deletionGracePeriodSeconds"] == 0
    status, _, _ = await client.call("GET", f"{NS}/pods/a")
    assert status == 404


async def test_unbound_pod_is_removed_at_once(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a")
    assert status == 200 and body["metadata"]["deletionGracePeriodSeconds"] == 0
    status, _, _ = await client.call("GET", f"{NS}/pods/a")
    assert status == 404


async def test_finalizers_hold_the_object_until_removed(client: Client) -> None:
    finalized = pod("a")
    finalized["metadata"]["finalizers"] = ["x/hold"]
    await client.call("POST", f"{NS}/pods", finalized)
    _, deleting, _ = await client.call("DELETE", f"{NS}/pods/a")
    assert deleting["metadata"]["deletionTimestamp"]
    status, body, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"finalizers": ["x/hold", "x/new"]}}, MERGE
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.finalizers"
    status, released, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"finalizers": None}}, MERGE
    )
    assert (
        status == 200 and released["metadata"]["resourceVersion"] == deleting["metadata"]["resourceVersion"]
    )
    status, _, _ = await client.call("GET", f"{NS}/pods/a")
    assert status == 404


async def test_delete_preconditions(client: Client) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a", {"preconditions": {"uid": "nope"}})
    assert status == 409 and body["details"]["kind"] == "Pod"
    status, body, _ = await client.call("DELETE", f"{NS}/pods/a", {"preconditions": {"resourceVersion": "1"}})
    assert status == 409
    meta = created["metadata"]
    status, _, _ = await client.call(
        "DELETE",
        f"{NS}/pods/a",
        {"preconditions": {"uid": meta["uid"], "resourceVersion": meta["resourceVersion"]}},
    )
    assert status == 200


async def test_namespace_deletion_removes_its_objects(client: Client) -> None:
    await client.call("POST", "/api/v1/namespaces", {"metadata": {"name": "tmp"}})
    await client.call("POST", "/api/v1/namespaces/tmp/pods", pod("a"))
    status, body, _ = await client.call("DELETE", "/api/v1/namespaces/tmp")
    assert status == 200 and body["status"]["phase"] == "Terminating"
    assert (await client.call("GET", "/api/v1/namespaces/tmp/pods/a"))[0] == 404
    assert (await client.call("GET", "/api/v1/namespaces/tmp"))[0] == 404


async def test_dependents_are_collected_or_orphaned(client: Client) -> None:
    _, owner, _ = await client.call("POST", f"{NS}/pods", pod("owner"))
    ref = {"apiVersion": "v1", "kind": "Pod", "name": "owner", "uid": owner["metadata"]["uid"]}
    for name in ("d1", "d2"):
        dependent = pod(name)
        dependent["metadata"]["ownerReferences"] = [ref]
        await client.call("POST", f"{NS}/pods", dependent)
    await client.call("DELETE", f"{NS}/pods/owner")
    assert (await client.call("GET", f"{NS}/pods/d1"))[0] == 404
    _, owner2, _ = await client.call("POST", f"{NS}/pods", pod("owner2"))
    orphan = pod("o")
    orphan["metadata"]["ownerReferences"] = [{**ref, "name": "owner2", "uid": owner2["metadata"]["uid"]}]
    await client.call("POST", f"{NS}/pods", orphan)
    await client.call("DELETE", f"{NS}/pods/owner2", params={"propagationPolicy": "Orphan"})
    status, kept, _ = await client.call("GET", f"{NS}/pods/o")
    assert status == 200 and "ownerReferences" not in kept["metadata"]


async def test_custom_resource_delete_returns_a_status(client: Client, podgroup_crd: None) -> None:
    _, created, _ = await client.call("POST", GROUP_PATH, podgroup("g", None))
    status, body, _ = await client.call("DELETE", f"{GROUP_PATH}/g")
    assert status == 200
    assert body["details"] == {
        "name": "g",
        "group": "scheduling.lockstep.dev",
        "kind": "podgroups",
        "uid": created["metadata"]["uid"],
    }
