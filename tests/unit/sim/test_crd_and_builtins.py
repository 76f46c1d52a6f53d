"""CRD serving (schema, defaults, pruning, CEL, tables, discovery) and built-in kind rules."""

from __future__ import annotations

import orjson
from sim_helpers import GROUP_PATH, NS, PODGROUP_CRD, Client, pod, podgroup

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.crd import SchemaValidator
from lockstep.sim.versions import DEFAULT_KUBE_VERSION, kube_version

MERGE = "application/merge-patch+json"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


async def test_crd_is_established_and_discoverable(client: Client, podgroup_crd: None) -> None:
    _, crd, _ = await client.call(
        "GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/podgroups.scheduling.lockstep.dev"
    )
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    _, resources, _ = await client.call("GET", "/apis/scheduling.lockstep.dev/v1alpha1")
    main = next(r for r in resources["resources"] if r["name"] == "podgroups")
    assert main["shortNames"] == ["lpg"] and main["namespaced"] is True
    assert any(r["name"] == "podgroups/status" for r in resources["resources"])


async def test_defaults_are_applied_and_cel_rules_enforced(client: Client, podgroup_crd: None) -> None:
    status, created, _ = await client.call(
        "POST", GROUP_PATH, podgroup("g", {"schedulingPolicy": {"gang": {"minCount": 2}}})
    )
    assert status == 201 and created["spec"]["scheduleTimeoutSeconds"] == 300
    status, body, _ = await client.call(
        "POST", GROUP_PATH, podgroup("both", {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 2}}})
    )
    assert status == 422
    assert body["details"]["causes"] == [
        {
            "reason": "FieldValueInvalid",
            "message": "Invalid value: exactly one of basic or gang",
            "field": "spec.schedulingPolicy",
        }
    ]
    status, body, _ = await client.call(
        "POST", GROUP_PATH, podgroup("zero", {"schedulingPolicy": {"gang": {"minCount": 0}}})
    )
    assert status == 422
    assert body["details"]["causes"][0]["message"] == (
        "Invalid value: 0: spec.schedulingPolicy.gang.minCount in body should be greater than or equal to 1"
    )
    status, body, _ = await client.call(
        "POST", GROUP_PATH, podgroup("typo", {"schedulingPolicy": {"gang": {"minCount": "x"}}})
    )
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == ["spec.schedulingPolicy.gang.minCount", "<nil>"]


async def test_list_map_keys_must_be_unique(client: Client, podgroup_crd: None) -> None:
    spec = {"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "a"}, {"name": "a"}]}
    status, body, _ = await client.call("POST", GROUP_PATH, podgroup("dup", spec))
    assert status == 422
    assert body["details"]["causes"][0]["reason"] == "FieldValueDuplicate"
    assert body["details"]["causes"][0]["field"] == "spec.resourceClaims[1]"


async def test_unknown_fields_strict_warn_and_ignore(client: Client, podgroup_crd: None) -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2, "maxCount": 9}}, "priority": 7}
    status, body, _ = await client.call(
        "POST", GROUP_PATH, podgroup("s", spec), params={"fieldValidation": "Strict"}
    )
    assert status == 400
    assert body["message"].endswith(
        'strict decoding error: unknown field "spec.priority", '
        'unknown field "spec.schedulingPolicy.gang.maxCount"'
    )
    status, body, headers = await client.call("POST", GROUP_PATH, podgroup("w", spec))
    assert status == 201 and "priority" not in body["spec"]
    assert headers.getall("Warning") == [
        '299 - "unknown field \\"spec.priority\\""',
        '299 - "unknown field \\"spec.schedulingPolicy.gang.maxCount\\""',
    ]
    status, body, headers = await client.call(
        "POST", GROUP_PATH, podgroup("i", spec), params={"fieldValidation": "Ignore"}
    )
    assert status == 201 and "Warning" not in headers


async def test_printer_columns_render_as_a_table(client: Client, podgroup_crd: None) -> None:
    await client.call("POST", GROUP_PATH, podgroup("g", {"schedulingPolicy": {"gang": {"minCount": 3}}}))
    status, table, _ = await client.call("GET", GROUP_PATH, accept=TABLE)
    assert status == 200 and table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "MinCount", "Phase", "Age"]
    assert table["rows"][0]["cells"][:3] == ["g", 3, None]
    assert table["rows"][0]["object"]["kind"] == "PartialObjectMetadata"


async def test_builtin_tables_for_pods_and_nodes(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call(
        "POST",
        "/api/v1/nodes",
        {"metadata": {"name": "n1", "labels": {"node-role.kubernetes.io/worker": ""}}},
    )
    _, pods, _ = await client.call("GET", f"{NS}/pods", accept=TABLE)
    assert [c["name"] for c in pods["columnDefinitions"]][:5] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert pods["rows"][0]["cells"][:4] == ["a", "0/1", "Pending", "0"]
    _, nodes, _ = await client.call("GET", "/api/v1/nodes", accept=TABLE)
    assert [c["name"] for c in nodes["columnDefinitions"]][:5] == [
        "Name",
        "Status",
        "Roles",
        "Age",
        "Version",
    ]
    assert nodes["rows"][0]["cells"][:3] == ["n1", "Unknown", "worker"]


async def test_pod_defaulting(client: Client) -> None:
    body = pod("a")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    body["spec"]["containers"][0]["image"] = "busybox"
    _, created, _ = await client.call("POST", f"{NS}/pods", body)
    container = created["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Always"
    assert container["resources"]["requests"] == {"cpu": "1", "memory": "1Gi"}
    assert created["status"] == {"phase": "Pending", "qosClass": "Guaranteed"}
    spec = created["spec"]
    assert (spec["restartPolicy"], spec["dnsPolicy"], spec["priority"], spec["serviceAccountName"]) == (
        "Always",
        "ClusterFirst",
        0,
        "default",
    )
    assert [t["key"] for t in spec["tolerations"]] == [
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/unreachable",
    ]
    assert spec["volumes"][0]["name"].startswith("kube-api-access-")


async def test_event_fields_map_between_versions(client: Client) -> None:
    event = {
        "metadata": {"name": "e"},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "lockstep.dev/scheduler",
        "reportingInstance": "i",
        "action": "Binding",
        "reason": "Scheduled",
        "type": "Normal",
        "regarding": {"kind": "Pod", "namespace": "default", "name": "a"},
        "note": "bound",
    }
    status, created, _ = await client.call("POST", "/apis/events.k8s.io/v1/namespaces/default/events", event)
    assert status == 201 and created["deprecatedSource"] == {}
    _, core, _ = await client.call("GET", f"{NS}/events/e")
    assert (core["message"], core["reportingComponent"], core["involvedObject"]["name"]) == (
        "bound",
        "lockstep.dev/scheduler",
        "a",
    )
    status, body, _ = await client.call(
        "POST",
        "/apis/events.k8s.io/v1/namespaces/default/events",
        {**event, "metadata": {"name": "f"}, "eventTime": "2026-01-01T00:00:00Z"},
    )
    assert status == 400 and 'cannot parse "Z" as ".000000"' in body["message"]
    status, body, _ = await client.call(
        "POST", "/apis/events.k8s.io/v1/namespaces/kube-public/events", {"metadata": {"name": "g"}}
    )
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == [
        "involvedObject.namespace",
        "eventTime",
        "type",
    ]


async def test_lease_rules(client: Client) -> None:
    path = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    _, lease, _ = await client.call(
        "POST", path, {"metadata": {"name": "l"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    )
    unconditional = {
        **lease,
        "metadata": {k: v for k, v in lease["metadata"].items() if k != "resourceVersion"},
    }
    status, body, _ = await client.call("PUT", f"{path}/l", unconditional)
    assert status == 422 and body["details"]["causes"][0]["field"] == "metadata.resourceVersion"
    lease["spec"]["leaseDurationSeconds"] = 0
    status, body, _ = await client.call("PUT", f"{path}/l", lease)
    assert (
        status == 422
        and body["details"]["causes"][0]["message"] == "Invalid value: 0: must be greater than 0"
    )


async def test_resource_claim_status_rules(client: Client) -> None:
    claim = {
        "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}]}},
    }
    _, created, _ = await client.call("POST", CLAIMS, claim)
    assert created["spec"]["devices"]["requests"][0]["exactly"] == {
        "deviceClassName": "gpu",
        "allocationMode": "ExactCount",
        "count": 1,
    }
    ref = {"resource": "pods", "name": "p0", "uid": "u0"}
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"reservedFor": [ref]}}, MERGE
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.reservedFor"
    allocation = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "g0"}]}}
    status, _, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"allocation": allocation, "reservedFor": [ref]}}, MERGE
    )
    assert status == 200
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"reservedFor": [{"uid": "x"}]}}, MERGE
    )
    assert status == 422
    assert [c["field"] for c in body["details"]["causes"]] == [
        "status.reservedFor[0].resource",
        "status.reservedFor[0].name",
    ]
    too_many = [{"resource": "pods", "name": f"p{i}", "uid": f"u{i}"} for i in range(257)]
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"reservedFor": too_many}}, MERGE
    )
    assert (
        status == 422
        and body["details"]["causes"][0]["message"] == "Too many: 257: must have at most 256 items"
    )
    status, _, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"reservedFor": too_many[:256]}}, MERGE
    )
    assert status == 200
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"reservedFor": [ref, {**ref, "name": "again"}]}}, MERGE
    )
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueDuplicate"
    moved = {"devices": {"results": [{"request": "gpu", "driver": "d", "pool": "p", "device": "g1"}]}}
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", {"status": {"allocation": moved}}, MERGE
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "status.allocation"
    status, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c", {"spec": {"devices": {"requests": []}}}, MERGE
    )
    assert status == 422 and body["details"]["causes"][0]["field"] == "spec"
    removal = {"status": {"reservedFor": [{"uid": "u1", "$patch": "delete"}]}}
    _, body, _ = await client.call(
        "PATCH", f"{CLAIMS}/c/status", removal, "application/strategic-merge-patch+json"
    )
    assert [r["uid"] for r in body["status"]["reservedFor"]][:2] == ["u0", "u2"]


async def test_discovery_and_version(client: Client) -> None:
    _, version, _ = await client.call("GET", "/version")
    assert version["gitVersion"] == kube_version(DEFAULT_KUBE_VERSION).git_version
    assert int(version["minor"]) == kube_version(DEFAULT_KUBE_VERSION).minor
    _, core, _ = await client.call("GET", "/api/v1")
    names = {r["name"]: r for r in core["resources"]}
    assert names["pods/binding"]["verbs"] == ["create"]
    assert names["pods"]["shortNames"] == ["po"]
    _, groups, _ = await client.call("GET", "/apis")
    assert {"resource.k8s.io", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"} <= {
        g["name"] for g in groups["groups"]
    }
    status, body, _ = await client.call("GET", "/apis/nope.example.com/v1")
    assert (status, body) == (404, b"404 page not found\n")


async def test_events_v1_field_selectors_on_list_and_watch(client: Client) -> None:
    core_event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "a"},
        "reason": "R",
    }
    await client.call("POST", f"{NS}/events", core_event)
    path = "/apis/events.k8s.io/v1/namespaces/default/events"
    _, listed, _ = await client.call("GET", path, params={"fieldSelector": "regarding.name=a"})
    assert [e["metadata"]["name"] for e in listed["items"]] == ["e"]
    assert listed["items"][0]["regarding"]["name"] == "a"
    events = await client.watch(path, {"fieldSelector": "regarding.name=a", "timeoutSeconds": "1"})
    assert [(e["type"], e["object"]["apiVersion"]) for e in events] == [("ADDED", "events.k8s.io/v1")]


async def test_aggregated_discovery_only_for_v2(client: Client) -> None:
    v2 = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;q=0.9"
    status, body, headers = await client.call("GET", "/apis", accept=v2)
    assert status == 200 and body["kind"] == "APIGroupDiscoveryList"
    assert headers["Content-Type"] == "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    v2beta1 = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
    _, body, _ = await client.call("GET", "/apis", accept=v2beta1)
    assert body["kind"] == "APIGroupList"


async def test_dry_run_writes_nothing(client: Client, server: ApiServer) -> None:
    before = server.rv
    status, body, _ = await client.call("POST", f"{NS}/pods", pod("a"), params={"dryRun": "All"})
    assert status == 201 and body["metadata"]["name"] == "a"
    assert (await client.call("GET", f"{NS}/pods/a"))[0] == 404
    await client.call("POST", f"{NS}/pods", pod("a"))
    after_create = server.rv
    status, body, _ = await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, MERGE, params={"dryRun": "All"}
    )
    assert status == 200 and body["metadata"]["labels"] == {"x": "1"}
    _, stored, _ = await client.call("GET", f"{NS}/pods/a")
    assert "labels" not in stored["metadata"] and server.rv == after_create > before
    status, _, _ = await client.call("DELETE", f"{NS}/pods/a", params={"dryRun": "All"})
    assert status == 200 and (await client.call("GET", f"{NS}/pods/a"))[0] == 200


async def test_events_table_matches_kubectl_columns(client: Client) -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "namespace": "default", "name": "a"},
        "reason": "Scheduled",
        "type": "Normal",
        "message": "bound",
    }
    await client.call("POST", f"{NS}/events", event)
    _, table, _ = await client.call("GET", f"{NS}/events", accept=TABLE)
    shown = [c["name"] for c in table["columnDefinitions"] if c["priority"] == 0]
    assert shown == ["Last Seen", "Type", "Reason", "Object", "Message"]
    cells = dict(zip([c["name"] for c in table["columnDefinitions"]], table["rows"][0]["cells"], strict=True))
    assert (cells["Object"], cells["Message"], cells["Name"]) == ("pod/a", "bound", "e")


async def test_claim_selectors_must_compile(client: Client) -> None:
    request = {
        "name": "gpu",
        "exactly": {"deviceClassName": "gpu", "selectors": [{"cel": {"expression": "device.driver +"}}]},
    }
    claim = {"metadata": {"name": "c"}, "spec": {"devices": {"requests": [request]}}}
    status, body, _ = await client.call("POST", CLAIMS, claim)
    assert status == 422
    assert (
        body["details"]["causes"][0]["field"]
        == "spec.devices.requests[0].exactly.selectors[0].cel.expression"
    )
    assert "Syntax error" in body["details"]["causes"][0]["message"]


async def test_device_class_selectors_compile_in_the_dra_environment(client: Client) -> None:
    """Optional syntax is in Kubernetes' CEL environment; an undeclared function is refused by name."""
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    optional = 'device.attributes["gpu.example.com"].?model.orValue("") == "h100"'
    status, body, _ = await client.call(
        "POST",
        classes,
        {"metadata": {"name": "opt"}, "spec": {"selectors": [{"cel": {"expression": optional}}]}},
    )
    assert status == 201, body
    undeclared = "math.greatest(1, 2) > 0"
    status, body, _ = await client.call(
        "POST",
        classes,
        {"metadata": {"name": "math"}, "spec": {"selectors": [{"cel": {"expression": undeclared}}]}},
    )
    assert status == 422
    assert body["details"]["causes"][0]["field"] == "spec.selectors[0].cel.expression"
    assert "undeclared reference to 'math.greatest'" in body["details"]["causes"][0]["message"]


async def test_device_class_selectors_within_upstreams_cost_and_length_limits(client: Client) -> None:
    """As kube-apiserver: estimates over CELSelectorExpressionMaxCost Forbidden, >10240 bytes TooLong."""
    classes = "/apis/resource.k8s.io/v1/deviceclasses"
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    nested = "true"
    for variable in ("a", "b", "c", "d", "e", "f", "g"):
        nested = f"{ten}.all({variable}, {nested})"
    for name, expression, expected in (
        ("costly", nested, "Forbidden: too complex, exceeds cost limit"),
        ("long", "true || " * 1300 + "true", "Too long: may not be more than 10240 bytes"),
    ):
        selector = {"cel": {"expression": expression}}
        status, body, _ = await client.call(
            "POST", classes, {"metadata": {"name": name}, "spec": {"selectors": [selector]}}
        )
        assert status == 422, body
        cause = body["details"]["causes"][0]
        assert cause["field"] == "spec.selectors[0].cel.expression"
        assert cause["message"] == expected


async def test_root_required_fields_of_a_crd_schema(client: Client) -> None:
    crd = orjson.loads(orjson.dumps(PODGROUP_CRD))
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["required"] = ["spec"]
    assert (await client.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[
        0
    ] == 201
    status, body, _ = await client.call("POST", GROUP_PATH, podgroup("nospec", None))
    assert status == 422
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("spec", "FieldValueRequired"),
        ("<nil>", "FieldValueInvalid"),
    ]


async def test_generation_counts_status_changes_without_a_status_subresource(client: Client) -> None:
    crd = orjson.loads(orjson.dumps(PODGROUP_CRD))
    del crd["spec"]["versions"][0]["subresources"]
    assert (await client.call("POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd))[
        0
    ] == 201
    await client.call("POST", GROUP_PATH, podgroup("g", {"schedulingPolicy": {"basic": {}}}))
    _, body, _ = await client.call("PATCH", f"{GROUP_PATH}/g", {"status": {"phase": "Scheduled"}}, MERGE)
    assert body["status"] == {"phase": "Scheduled"} and body["metadata"]["generation"] == 2


async def test_partial_object_metadata_renderings(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a", labels={"k": "v"}))
    accept = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    _, listed, _ = await client.call("GET", f"{NS}/pods", accept=accept)
    assert listed["kind"] == "PartialObjectMetadataList"
    assert listed["items"][0]["metadata"]["labels"] == {"k": "v"} and "spec" not in listed["items"][0]
    accept = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
    _, single, _ = await client.call("GET", f"{NS}/pods/a", accept=accept)
    assert single["kind"] == "PartialObjectMetadata" and single["metadata"]["name"] == "a"
    _, plain, _ = await client.call(
        "GET", f"{NS}/pods/a", accept="application/json, application/json;as=Table;g=meta.k8s.io;v=v1"
    )
    assert plain["kind"] == "Pod"


def test_schema_formats_are_checked() -> None:
    schema = {
        "type": "object",
        "properties": {
            "at": {"type": "string", "format": "date-time"},
            "n": {"type": "integer", "format": "int32"},
        },
    }
    validator = SchemaValidator()
    validator.validate({"at": "2026-01-01T00:00:00Z", "n": 5}, schema, "status")
    assert validator.errors == []
    validator.validate({"at": "yesterday", "n": 2**31}, schema, "status")
    assert [(e.reason, e.field) for e in validator.errors] == [
        ("FieldValueTypeInvalid", "status.at"),
        ("FieldValueTypeInvalid", "status.n"),
    ]
    assert (
        validator.errors[0].detail
        == 'Invalid value: "yesterday": status.at in body must be of type date-time: "yesterday"'
    )


async def test_malformed_resource_quantity_is_a_400(client: Client) -> None:
    body = pod("a")
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100x"}}
    status, error, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 400
    assert error["message"].startswith(
        'Pod in version "v1" cannot be handled as a Pod: quantities must match'
    )
    body["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "1.5", "memory": "64Mi"}}
    assert (await client.call("POST", f"{NS}/pods", body))[0] == 201


async def test_integral_float_is_a_valid_integer(client: Client, podgroup_crd: None) -> None:
    spec = {"schedulingPolicy": {"gang": {"minCount": 2.0}}, "scheduleTimeoutSeconds": 1.0}
    status, created, _ = await client.call("POST", GROUP_PATH, podgroup("f", spec))
    assert status == 201
    assert created["spec"] == {"schedulingPolicy": {"gang": {"minCount": 2}}, "scheduleTimeoutSeconds": 1}
    spec["scheduleTimeoutSeconds"] = 1.5
    status, body, _ = await client.call("POST", GROUP_PATH, podgroup("g", spec))
    assert status == 422 and body["details"]["causes"][0]["reason"] == "FieldValueTypeInvalid"


async def test_a_float_beyond_2_to_the_53_is_not_an_integer(client: Client, podgroup_crd: None) -> None:
    """go-openapi takes a float for an integer only up to 2^53; beyond, it is a type error (the CEL
    rules are then skipped: the emulator answered 500 when they converted it)."""
    spec = {"schedulingPolicy": {"gang": {"minCount": 9.223372036854776e18}}}
    status, body, _ = await client.call("POST", GROUP_PATH, podgroup("h", spec))
    assert status == 422, body
    assert body["details"]["causes"][0] == {
        "reason": "FieldValueTypeInvalid",
        "message": 'Invalid value: "number": spec.schedulingPolicy.gang.minCount in body must be of type '
        'integer: "number"',
        "field": "spec.schedulingPolicy.gang.minCount",
    }


async def test_nulls_of_non_nullable_fields_are_dropped_then_defaulted(
    client: Client, podgroup_crd: None
) -> None:
    spec = {"schedulingPolicy": {"basic": {}, "gang": None}, "scheduleTimeoutSeconds": None}
    status, created, _ = await client.call("POST", GROUP_PATH, podgroup("n", spec))
    assert status == 201, created
    assert created["spec"] == {"schedulingPolicy": {"basic": {}}, "scheduleTimeoutSeconds": 300}
