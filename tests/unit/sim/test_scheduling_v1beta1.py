"""1.37's Workload API in the emulator (``kube_version="1.37"``): scheduling.k8s.io/v1beta1 PodGroups
and Workloads, v1alpha3 CompositePodGroups, over HTTP.

The cases follow the declarative rules upstream generates from the ``+k8s:`` tags of
staging/src/k8s.io/api/scheduling/v1beta1/types.go (pkg/apis/scheduling/v1beta1/
zz_generated.validations.go) and the hand-written ones of pkg/apis/scheduling/validation/validation.go,
with the messages of staging/src/k8s.io/apimachinery/pkg/api/validate.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sim_helpers import Client, gated_client

from lockstep.sim.features import FeatureGates

V1BETA1 = "/apis/scheduling.k8s.io/v1beta1/namespaces/default"
PODGROUPS = f"{V1BETA1}/podgroups"
WORKLOADS = f"{V1BETA1}/workloads"
COMPOSITES = "/apis/scheduling.k8s.io/v1alpha3/namespaces/default/compositepodgroups"
MERGE = "application/merge-patch+json"
JsonObject = dict[str, Any]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with gated_client("", kube_version="1.37") as api:
        yield api


def pod_group(name: str = "pg", **spec: Any) -> JsonObject:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, **spec},
    }


def workload(name: str = "w", **spec: Any) -> JsonObject:
    templates = [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 2}}}]
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name},
        "spec": {"podGroupTemplates": templates, **spec},
    }


def composite(name: str = "cpg", **spec: Any) -> JsonObject:
    return {
        "apiVersion": "scheduling.k8s.io/v1alpha3",
        "kind": "CompositePodGroup",
        "metadata": {"name": name},
        "spec": {
            "workloadRef": {"workloadName": "w", "templateName": "leaders"},
            "schedulingPolicy": {"gang": {"minGroupCount": 2}},
            **spec,
        },
    }


def causes(body: JsonObject) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


async def created(client: Client, path: str, body: JsonObject) -> JsonObject:
    status, answer, _ = await client.call("POST", path, body)
    assert status == 201, answer
    return answer


# ------------------------------------------------------------------ PodGroup create


async def test_pod_group_defaults_and_finalizer(client: Client) -> None:
    answer = await created(client, PODGROUPS, pod_group())
    assert answer["spec"]["disruptionMode"] == {"single": {}}
    assert answer["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    assert answer["status"] == {}
    # a client-set status is not kept on create
    status_body = pod_group("with-status")
    status_body["status"] = {"resourceClaimStatuses": [{"name": "x"}]}
    answer = await created(client, PODGROUPS, status_body)
    assert answer["status"] == {}


INVALID_POD_GROUPS: list[tuple[str, JsonObject, list[tuple[str, str]]]] = [
    (
        "no policy",
        {"schedulingPolicy": {}},
        [("spec.schedulingPolicy", 'Invalid value: "": must specify one of: `basic`, `gang`')],
    ),
    (
        "both policies",
        {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}},
        [
            (
                "spec.schedulingPolicy",
                'Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`',
            )
        ],
    ),
    (
        "minCount zero",
        {"schedulingPolicy": {"gang": {"minCount": 0}}},
        [("spec.schedulingPolicy.gang.minCount", "Required value")],
    ),
    (
        "minCount negative",
        {"schedulingPolicy": {"gang": {"minCount": -1}}},
        [("spec.schedulingPolicy.gang.minCount", "Invalid value: -1: must be greater than or equal to 1")],
    ),
    (
        "priority too high",
        {"priority": 1_000_000_001},
        [("spec.priority", "Invalid value: 1000000001: must be less than or equal to 1000000000")],
    ),
    (
        "preemptionPolicy without its gate",
        {"preemptionPolicy": "Never"},
        [("spec.preemptionPolicy", "Forbidden")],
    ),
    (
        "two topology constraints",
        {"schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]}},
        [("spec.schedulingConstraints.topology", "Too many: 2: must have at most 1 items")],
    ),
    (
        "topology key missing",
        {"schedulingConstraints": {"topology": [{}]}},
        [("spec.schedulingConstraints.topology[0].key", "Required value")],
    ),
    (
        "five claims",
        {"resourceClaims": [{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5)]},
        [("spec.resourceClaims", "Too many: 5: must have at most 4 items")],
    ),
    (
        "claim with both sources",
        {"resourceClaims": [{"name": "c", "resourceClaimName": "a", "resourceClaimTemplateName": "b"}]},
        [
            (
                "spec.resourceClaims[0]",
                'Invalid value: "{resourceClaimName, resourceClaimTemplateName}": must specify exactly one '
                "of: `resourceClaimName`, `resourceClaimTemplateName`",
            )
        ],
    ),
    (
        "workloadRef without names",
        {"workloadRef": {}},
        [
            ("spec.workloadRef.workloadName", "Required value"),
            ("spec.workloadRef.templateName", "Required value"),
        ],
    ),
    (
        "parent without workloadRef",
        {"parentCompositePodGroupName": "cpg"},
        [("spec.workloadRef", "Required value: must be set when parentCompositePodGroupName is set")],
    ),
    (
        "both disruption modes",
        {"disruptionMode": {"single": {}, "all": {}}},
        [
            (
                "spec.disruptionMode",
                'Invalid value: "{single, all}": must specify exactly one of: `single`, `all`',
            )
        ],
    ),
]


@pytest.mark.parametrize(
    ("spec", "expected"), [c[1:] for c in INVALID_POD_GROUPS], ids=[c[0] for c in INVALID_POD_GROUPS]
)
async def test_invalid_pod_groups(client: Client, spec: JsonObject, expected: list[tuple[str, str]]) -> None:
    status, body, _ = await client.call("POST", PODGROUPS, pod_group(**spec))
    assert status == 422, body
    assert causes(body) == expected


async def test_preemption_policy_with_its_gate(client: Client) -> None:
    async with gated_client("PodGroupPreemptionPolicy=true", kube_version="1.37") as gated:
        assert (await created(gated, PODGROUPS, pod_group(preemptionPolicy="Never")))["spec"][
            "preemptionPolicy"
        ] == "Never"
        status, body, _ = await gated.call("POST", PODGROUPS, pod_group("bad", preemptionPolicy="Sometimes"))
        assert status == 422
        assert causes(body) == [
            (
                "spec.preemptionPolicy",
                'Unsupported value: "Sometimes": supported values: "Never", "PreemptLowerPriority"',
            )
        ]


async def test_gated_fields_are_dropped_or_forbidden_without_their_gates() -> None:
    gates = "TopologyAwareWorkloadScheduling=false,DRAWorkloadResourceClaims=false,CompositePodGroup=false"
    async with gated_client(gates, kube_version="1.37") as gated:
        answer = await created(
            gated,
            PODGROUPS,
            pod_group(
                schedulingConstraints={"topology": [{"key": "zone"}]},
                resourceClaims=[{"name": "c", "resourceClaimName": "c"}],
            ),
        )
        assert "schedulingConstraints" not in answer["spec"] and "resourceClaims" not in answer["spec"]
        ref = {"workloadName": "w", "templateName": "t"}
        status, body, _ = await gated.call(
            "POST", PODGROUPS, pod_group("child", workloadRef=ref, parentCompositePodGroupName="cpg")
        )
        assert status == 422
        assert causes(body) == [("spec.parentCompositePodGroupName", "Forbidden")]
        status, _, _ = await gated.call("GET", COMPOSITES)
        assert status == 404


# ------------------------------------------------------------------ PodGroup update


async def test_only_min_count_is_mutable(client: Client) -> None:
    await created(
        client,
        PODGROUPS,
        pod_group(priorityClassName="high", workloadRef={"workloadName": "w", "templateName": "t"}),
    )
    status, body, _ = await client.call(
        "PATCH", f"{PODGROUPS}/pg", {"spec": {"schedulingPolicy": {"gang": {"minCount": 5}}}}, MERGE
    )
    assert status == 200, body
    assert body["spec"]["schedulingPolicy"] == {"gang": {"minCount": 5}}
    changes: list[tuple[JsonObject, list[tuple[str, str]]]] = [
        (
            {"priorityClassName": "low"},
            [("spec.priorityClassName", "Invalid value: null: field is immutable")],
        ),
        (
            {"workloadRef": {"templateName": "u"}},
            [("spec.workloadRef", "Invalid value: null: field is immutable")],
        ),
        (
            {"disruptionMode": {"single": None, "all": {}}},
            [("spec.disruptionMode", "Invalid value: null: field is immutable")],
        ),
        ({"priority": 3}, [("spec.priority", "Invalid value: null: field is immutable")]),
        (
            {"schedulingPolicy": {"gang": None, "basic": {}}},
            [
                ("spec.schedulingPolicy.basic", "Invalid value: null: field is immutable"),
                ("spec.schedulingPolicy.gang", "Invalid value: null: field cannot be cleared once set"),
            ],
        ),
        (
            {"schedulingPolicy": {"gang": {"minCount": 0}}},
            [("spec.schedulingPolicy.gang.minCount", "Required value")],
        ),
    ]
    for patch, expected in changes:
        status, body, _ = await client.call("PATCH", f"{PODGROUPS}/pg", {"spec": patch}, MERGE)
        assert status == 422, (patch, body)
        assert causes(body) == expected, patch


async def test_basic_cannot_become_gang(client: Client) -> None:
    await created(client, PODGROUPS, pod_group("basic", schedulingPolicy={"basic": {}}))
    status, body, _ = await client.call(
        "PATCH",
        f"{PODGROUPS}/basic",
        {"spec": {"schedulingPolicy": {"basic": None, "gang": {"minCount": 2}}}},
        MERGE,
    )
    assert status == 422
    assert causes(body) == [
        ("spec.schedulingPolicy.basic", "Invalid value: null: field is immutable"),
        ("spec.schedulingPolicy.gang", "Invalid value: null: field cannot be set once created"),
    ]


async def test_status_writes_keep_the_spec_and_name_declared_claims(client: Client) -> None:
    await created(
        client, PODGROUPS, pod_group(resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "t"}])
    )
    condition = {
        "type": "PodGroupInitiallyScheduled",
        "status": "True",
        "reason": "Scheduled",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    status, body, _ = await client.call(
        "PATCH",
        f"{PODGROUPS}/pg/status",
        {
            "spec": {"schedulingPolicy": {"gang": {"minCount": 9}}},
            "status": {
                "conditions": [condition],
                "resourceClaimStatuses": [{"name": "gpus", "resourceClaimName": "pg-gpus-x"}],
            },
        },
        MERGE,
    )
    assert status == 200, body
    assert body["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}}
    assert body["status"]["conditions"][0]["type"] == "PodGroupInitiallyScheduled"
    status, body, _ = await client.call(
        "PATCH", f"{PODGROUPS}/pg/status", {"status": {"resourceClaimStatuses": [{"name": "other"}]}}, MERGE
    )
    assert status == 422
    assert causes(body) == [
        (
            "status.resourceClaimStatuses[0].name",
            'Invalid value: "other": must match the name of an entry in `spec.resourceClaims`',
        )
    ]
    # a spec write leaves the status alone
    status, body, _ = await client.call(
        "PATCH",
        f"{PODGROUPS}/pg",
        {"spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}, "status": {}},
        MERGE,
    )
    assert status == 200 and body["status"]["resourceClaimStatuses"] == [
        {"name": "gpus", "resourceClaimName": "pg-gpus-x"}
    ]


async def test_delete_leaves_the_pod_group_terminating(client: Client) -> None:
    await created(client, PODGROUPS, pod_group())
    status, body, _ = await client.call("DELETE", f"{PODGROUPS}/pg")
    assert status == 200 and body["metadata"]["deletionTimestamp"]
    status, body, _ = await client.call("GET", f"{PODGROUPS}/pg")
    assert status == 200 and body["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]


# ------------------------------------------------------------------ Workload


async def test_workload_needs_exactly_one_kind_of_template(client: Client) -> None:
    status, body, _ = await client.call("POST", WORKLOADS, workload(podGroupTemplates=[]))
    assert status == 422
    assert causes(body) == [
        ("spec", 'Invalid value: "": must specify one of: `podGroupTemplates`, `compositePodGroupTemplates`')
    ]
    leaders = [
        {
            "name": "leaders",
            "schedulingPolicy": {"basic": {}},
            "podGroupTemplates": [{"name": "l", "schedulingPolicy": {"basic": {}}}],
        }
    ]
    status, body, _ = await client.call("POST", WORKLOADS, workload(compositePodGroupTemplates=leaders))
    assert status == 422
    assert causes(body)[0] == (
        "spec",
        'Invalid value: "{podGroupTemplates, compositePodGroupTemplates}": must specify exactly one of: '
        "`podGroupTemplates`, `compositePodGroupTemplates`",
    )


async def test_workload_template_rules(client: Client) -> None:
    nine = [{"name": f"t{i}", "schedulingPolicy": {"basic": {}}} for i in range(9)]
    status, body, _ = await client.call("POST", WORKLOADS, workload(podGroupTemplates=nine))
    assert status == 422 and causes(body) == [
        ("spec.podGroupTemplates", "Too many: 9: must have at most 8 items")
    ]
    twice = [
        {"name": "t", "schedulingPolicy": {"basic": {}}},
        {"name": "t", "schedulingPolicy": {"basic": {}}},
    ]
    status, body, _ = await client.call("POST", WORKLOADS, workload(podGroupTemplates=twice))
    assert status == 422 and [c[0] for c in causes(body)] == ["spec.podGroupTemplates[1]"]
    assert causes(body)[0][1].startswith("Duplicate value: ")
    status, body, _ = await client.call(
        "POST",
        WORKLOADS,
        workload(
            controllerRef={"kind": "", "name": "a/b"},
            podGroupTemplates=[{"name": "Bad", "schedulingPolicy": {"basic": {}}}],
        ),
    )
    assert status == 422
    assert ("spec.controllerRef.kind", "Required value") in causes(body)
    assert ("spec.controllerRef.name", "Invalid value: \"a/b\": may not contain '/'") in causes(body)
    assert [c[0] for c in causes(body)][-1] == "spec.podGroupTemplates[0].name"
    mixed = [
        {"name": "a", "schedulingPolicy": {"basic": {}}, "priorityClassName": "high"},
        {"name": "b", "schedulingPolicy": {"basic": {}}},
    ]
    status, body, _ = await client.call("POST", WORKLOADS, workload(podGroupTemplates=mixed))
    assert status == 422 and causes(body) == [
        ("spec", "Invalid value: null: detected multiple priority configurations")
    ]


async def test_workload_templates_cannot_be_added_or_removed(client: Client) -> None:
    await created(
        client, WORKLOADS, workload(controllerRef={"apiGroup": "batch", "kind": "Job", "name": "j"})
    )
    grown = [{"name": "workers", "schedulingPolicy": {"gang": {"minCount": 4}}}]
    status, body, _ = await client.call(
        "PATCH", f"{WORKLOADS}/w", {"spec": {"podGroupTemplates": grown}}, MERGE
    )
    assert status == 200, body
    added = [*grown, {"name": "more", "schedulingPolicy": {"basic": {}}}]
    status, body, _ = await client.call(
        "PATCH", f"{WORKLOADS}/w", {"spec": {"podGroupTemplates": added}}, MERGE
    )
    assert status == 422 and causes(body) == [
        ("spec.podGroupTemplates[1]", "Forbidden: item may not be added")
    ]
    renamed = [{"name": "other", "schedulingPolicy": {"gang": {"minCount": 4}}}]
    status, body, _ = await client.call(
        "PATCH", f"{WORKLOADS}/w", {"spec": {"podGroupTemplates": renamed}}, MERGE
    )
    assert status == 422
    assert causes(body) == [
        ("spec.podGroupTemplates[0]", "Forbidden: item may not be added"),
        ("spec.podGroupTemplates", "Forbidden: item may not be removed"),
    ]
    status, body, _ = await client.call(
        "PATCH", f"{WORKLOADS}/w", {"spec": {"controllerRef": {"name": "k"}}}, MERGE
    )
    assert status == 422 and causes(body) == [
        ("spec.controllerRef", "Invalid value: null: field is immutable")
    ]


async def test_composite_workload_hierarchy(client: Client) -> None:
    def level(name: str, children: list[JsonObject]) -> JsonObject:
        return {"name": name, "schedulingPolicy": {"basic": {}}, "compositePodGroupTemplates": children}

    leaf = {"name": "leaf", "schedulingPolicy": {"basic": {}}}
    five = level(
        "l1", [level("l2", [level("l3", [level("l4", [{**level("l5", []), "podGroupTemplates": [leaf]}])])])]
    )
    status, body, _ = await client.call(
        "POST", WORKLOADS, workload(podGroupTemplates=[], compositePodGroupTemplates=[five])
    )
    assert status == 422
    assert ("spec.compositePodGroupTemplates[0]", "maximum template hierarchy depth is 4") in [
        (field, message.rsplit(": ", 1)[-1]) for field, message in causes(body)
    ]
    childless = [level("empty", [])]
    status, body, _ = await client.call(
        "POST", WORKLOADS, workload(podGroupTemplates=[], compositePodGroupTemplates=childless)
    )
    assert status == 422 and causes(body) == [
        (
            "spec.compositePodGroupTemplates[0]",
            'Invalid value: "empty": must have at least one child PodGroupTemplate or '
            "CompositePodGroupTemplate",
        )
    ]
    ok = [{**level("leaders", []), "podGroupTemplates": [leaf]}]
    await created(
        client, WORKLOADS, workload("composite", podGroupTemplates=[], compositePodGroupTemplates=ok)
    )


# ------------------------------------------------------------------ CompositePodGroup


async def test_composite_pod_group(client: Client) -> None:
    answer = await created(client, COMPOSITES, composite())
    assert answer["metadata"]["finalizers"] == ["scheduling.k8s.io/compositepodgroup-protection"]
    status, body, _ = await client.call(
        "PATCH", f"{COMPOSITES}/cpg", {"spec": {"schedulingPolicy": {"gang": {"minGroupCount": 3}}}}, MERGE
    )
    # the whole policy is immutable (compositepodgroup/strategy_test.go, TestStrategyUpdate)
    assert status == 422
    assert causes(body) == [("spec.schedulingPolicy", "Invalid value: null: field is immutable")]
    status, body, _ = await client.call(
        "PATCH", f"{COMPOSITES}/cpg", {"spec": {"disruptionMode": {"all": {}}}}, MERGE
    )
    assert status == 422
    assert causes(body) == [("spec.disruptionMode", "Invalid value: null: field is immutable")]
    bad = composite("bad", workloadRef=None, schedulingPolicy={"gang": {"minGroupCount": -2}})
    status, body, _ = await client.call("POST", COMPOSITES, bad)
    assert status == 422
    assert causes(body) == [
        ("spec.workloadRef", "Required value"),
        ("spec.schedulingPolicy.gang.minGroupCount", "Invalid value: -2: must be greater than or equal to 1"),
    ]


# ------------------------------------------------------------------ versions


async def test_136_serves_v1alpha2_and_not_v1beta1() -> None:
    async with gated_client("", kube_version="1.36") as old:
        status, body, _ = await old.call("GET", "/apis/scheduling.k8s.io")
        assert [v["version"] for v in body["versions"]] == ["v1", "v1alpha2"]
        status, _, _ = await old.call("GET", PODGROUPS)
        assert status == 404
        status, body, _ = await old.call("GET", "/version")
        assert body["gitVersion"] == "v1.36.2"


async def test_137_serves_v1beta1_and_v1alpha3_and_not_v1alpha2(client: Client) -> None:
    status, body, _ = await client.call("GET", "/apis/scheduling.k8s.io")
    assert [v["version"] for v in body["versions"]] == ["v1", "v1beta1", "v1alpha3"]
    status, body, _ = await client.call("GET", "/apis/scheduling.k8s.io/v1beta1")
    assert sorted(r["name"] for r in body["resources"]) == ["podgroups", "podgroups/status", "workloads"]
    status, body, _ = await client.call("GET", "/apis/scheduling.k8s.io/v1alpha3")
    assert sorted(r["name"] for r in body["resources"]) == ["compositepodgroups", "compositepodgroups/status"]
    status, _, _ = await client.call("GET", "/apis/scheduling.k8s.io/v1alpha2/namespaces/default/podgroups")
    assert status == 404
    status, body, _ = await client.call("GET", "/version")
    assert (body["gitVersion"], body["minor"]) == ("v1.37.0", "37")
    status, body, _ = await client.call("GET", "/openapi/v3/apis/scheduling.k8s.io/v1beta1")
    assert status == 200
    assert "io.k8s.api.scheduling.v1beta1.PodGroup" in body["components"]["schemas"]
    assert body["info"]["version"] == "v1.37.0"


def test_gates_are_per_version() -> None:
    with pytest.raises(ValueError, match=r"unknown feature gate 'PodGroupPreemptionPolicy'"):
        FeatureGates("PodGroupPreemptionPolicy=true", "1.36")
    gates = FeatureGates("PodGroupPreemptionPolicy=true", "1.37")
    assert gates["PodGroupPreemptionPolicy"] and gates.kube_version.name == "1.37"
    assert "WorkloadWithJob" in gates and "WorkloadWithJob" not in FeatureGates(None, "1.36")
    with pytest.raises(ValueError, match=r"unknown kube version '1\.35'"):
        FeatureGates(None, "1.35")


async def test_wrong_types_are_400s_naming_the_field(client: Client) -> None:
    body = copy.deepcopy(pod_group())
    body["spec"]["schedulingPolicy"]["gang"]["minCount"] = "two"
    status, answer, _ = await client.call("POST", PODGROUPS, body)
    assert status == 400
    assert answer["message"].endswith(
        "cannot unmarshal string into Go struct field "
        "GangSchedulingPolicy.spec.schedulingPolicy.gang.minCount of type int32"
    )


async def test_a_topology_mode_is_an_unknown_field_dropped_or_refused_by_name(client: Client) -> None:
    """Upstream's TopologyConstraint has ``key`` only: Go's decoder drops a ``mode`` (Preferred is
    lockstep's own field), warning of it, and fieldValidation=Strict (kubectl's) refuses it."""
    body = pod_group(schedulingConstraints={"topology": [{"key": "zone", "mode": "Preferred"}]})
    status, answer, _ = await client.call("POST", PODGROUPS, body, params={"fieldValidation": "Strict"})
    assert status == 400
    assert answer["message"] == (
        'PodGroup in version "v1beta1" cannot be handled as a PodGroup: strict decoding error: '
        'unknown field "spec.schedulingConstraints.topology[0].mode"'
    )
    status, answer, headers = await client.call("POST", PODGROUPS, body)
    assert status == 201 and answer["spec"]["schedulingConstraints"] == {"topology": [{"key": "zone"}]}
    assert headers.getall("Warning") == [
        '299 - "unknown field \\"spec.schedulingConstraints.topology[0].mode\\""'
    ]
