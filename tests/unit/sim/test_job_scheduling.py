"""1.37's Job ``spec.scheduling`` (KEP-5547, gate ``WorkloadWithJob``) in the emulator, over HTTP: the
batch registry's rules (pkg/registry/batch/job/strategy.go, pkg/apis/batch/validation/validation.go, the
v1alpha3 building blocks' declarative rules and workloadbuilder's validate.go) and the Job controller's
Workload and PodGroup (pkg/controller/job/job_scheduling_manager.go)."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
from sim_helpers import Client, gated_client

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers import job_scheduling
from lockstep.sim.watching import ApiError, KubeHttp

JsonObject = dict[str, Any]
JOBS = "/apis/batch/v1/namespaces/default/jobs"
V1BETA1 = "/apis/scheduling.k8s.io/v1beta1/namespaces/default"
MERGE = "application/merge-patch+json"
CONTAINER = {"name": "main", "image": "registry.k8s.io/pause:3.10"}
ALL_WITH_BASIC = (
    'Invalid value: "": the disruptionMode `all` is not supported with the Basic scheduling policy'
)


def job(
    name: str = "train", scheduling: Any = None, parallelism: int = 3, **template_spec: Any
) -> JsonObject:
    spec: JsonObject = {
        "parallelism": parallelism,
        "completions": parallelism,
        "completionMode": "Indexed",
        "template": {"spec": {"restartPolicy": "Never", "containers": [CONTAINER], **template_spec}},
    }
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def gang(min_count: int | None = None, **more: Any) -> JsonObject:
    return {"schedulingPolicy": {"gang": {} if min_count is None else {"minCount": min_count}}, **more}


def causes(body: JsonObject) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


@pytest.fixture
async def client() -> AsyncIterator[Client]:
    async with gated_client("WorkloadWithJob=true", kube_version="1.37") as api:
        yield api


# ------------------------------------------------------------------ the gate and the versions


async def test_with_the_gate_the_field_is_stored(client: Client) -> None:
    status, body, _ = await client.call("POST", JOBS, job(scheduling=gang(2)))
    assert status == 201, body
    assert body["spec"]["scheduling"] == {"schedulingPolicy": {"gang": {"minCount": 2}}}


async def test_gate_off_by_default_the_field_is_dropped_not_refused() -> None:
    async with gated_client("", kube_version="1.37") as api:
        status, body, _ = await api.call("POST", JOBS, job(scheduling={"schedulingPolicy": {}}))
        assert status == 201, body
        assert "scheduling" not in body["spec"]
        status, body, _ = await api.call(
            "PATCH", f"{JOBS}/train", {"spec": {"scheduling": gang(2)}}, content_type=MERGE
        )
        assert status == 200, body
        assert "scheduling" not in body["spec"]


# ------------------------------------------------------------------ create

INVALID_ON_CREATE: list[tuple[str, Any, list[tuple[str, str]]]] = [
    (
        "policy with neither basic nor gang",
        {"schedulingPolicy": {}},
        [
            (
                "spec.scheduling.schedulingPolicy",
                'Invalid value: "": must specify one of: `basic`, `gang`',
            )
        ],
    ),
    (
        "policy with both",
        {"schedulingPolicy": {"basic": {}, "gang": {"minCount": 1}}},
        [
            (
                "spec.scheduling.schedulingPolicy",
                'Invalid value: "{basic, gang}": must specify exactly one of: `basic`, `gang`',
            )
        ],
    ),
    (
        "gang minCount zero",
        gang(0),
        [
            (
                "spec.scheduling.schedulingPolicy.gang.minCount",
                "Invalid value: 0: must be greater than or equal to 1",
            )
        ],
    ),
    (
        "two topology constraints",
        gang(2, schedulingConstraints={"topology": [{"key": "a"}, {"key": "b"}]}),
        [("spec.scheduling.schedulingConstraints.topology", "Too many: 2: must have at most 1 items")],
    ),
    (
        "topology constraint without a key",
        gang(2, schedulingConstraints={"topology": [{"key": ""}]}),
        [("spec.scheduling.schedulingConstraints.topology[0].key", "Required value")],
    ),
    (
        "disruption mode with neither single nor all",
        gang(2, disruptionMode={}),
        [("spec.scheduling.disruptionMode", 'Invalid value: "": must specify one of: `single`, `all`')],
    ),
    (
        "all with basic",
        {"schedulingPolicy": {"basic": {}}, "disruptionMode": {"all": {}}},
        [("spec.scheduling.disruptionMode", ALL_WITH_BASIC)],
    ),
    (
        "all without a policy (Basic)",
        {"disruptionMode": {"all": {}}},
        [("spec.scheduling.disruptionMode", ALL_WITH_BASIC)],
    ),
    (
        "a claim with neither a claim nor a template",
        gang(2, resourceClaims=[{"name": "gpus"}]),
        [
            (
                "spec.scheduling.resourceClaims[0]",
                'Invalid value: "": must specify one of: `resourceClaimName`, `resourceClaimTemplateName`',
            )
        ],
    ),
    (
        "five claims",
        gang(2, resourceClaims=[{"name": f"c{i}", "resourceClaimName": f"c{i}"} for i in range(5)]),
        [("spec.scheduling.resourceClaims", "Too many: 5: must have at most 4 items")],
    ),
]


@pytest.mark.parametrize(
    ("scheduling", "expected"),
    [(case[1], case[2]) for case in INVALID_ON_CREATE],
    ids=[case[0] for case in INVALID_ON_CREATE],
)
async def test_create_refuses(client: Client, scheduling: Any, expected: list[tuple[str, str]]) -> None:
    status, body, _ = await client.call("POST", JOBS, job(scheduling=scheduling))
    assert status == 422, body
    assert causes(body) == expected


@pytest.mark.parametrize(
    "scheduling",
    [
        {},
        {"schedulingPolicy": {"basic": {}}, "disruptionMode": {"single": {}}},
        gang(),
        gang(
            2, disruptionMode={"all": {}}, schedulingConstraints={"topology": [{"key": "lockstep.dev/rack"}]}
        ),
        gang(2, resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}]),
    ],
    ids=["empty", "basic single", "gang without minCount", "gang all topology", "claims"],
)
async def test_create_accepts(client: Client, scheduling: Any) -> None:
    status, body, _ = await client.call("POST", JOBS, job(scheduling=scheduling))
    assert status == 201, body
    assert body["spec"]["scheduling"] == scheduling


# ------------------------------------------------------------------ update

UPDATES: list[tuple[str, Any, Any, list[tuple[str, str]]]] = [
    ("gang minCount may change", gang(3), gang(5), []),
    (
        "gang minCount below 1",
        gang(3),
        gang(0),
        [
            (
                "spec.scheduling.schedulingPolicy.gang.minCount",
                "Invalid value: 0: must be greater than or equal to 1",
            )
        ],
    ),
    (
        "unset to set",
        None,
        gang(3),
        [("spec.scheduling", "Invalid value: null: field cannot be set once created")],
    ),
    (
        "set to unset",
        gang(3),
        None,
        [("spec.scheduling", "Invalid value: null: field cannot be cleared once set")],
    ),
    (
        "policy added",
        {},
        gang(3),
        [("spec.scheduling.schedulingPolicy", "Invalid value: null: field cannot be set once created")],
    ),
    (
        "basic to gang",
        {"schedulingPolicy": {"basic": {}}},
        gang(3),
        [("spec.scheduling.schedulingPolicy", "Forbidden: may not change between basic and gang")],
    ),
    (
        "constraints changed",
        gang(3, schedulingConstraints={"topology": [{"key": "a"}]}),
        gang(3, schedulingConstraints={"topology": [{"key": "b"}]}),
        [("spec.scheduling.schedulingConstraints", "Invalid value: null: field is immutable")],
    ),
    (
        "disruption mode changed",
        gang(3, disruptionMode={"single": {}}),
        gang(3, disruptionMode={"all": {}}),
        [("spec.scheduling.disruptionMode", "Invalid value: null: field is immutable")],
    ),
    (
        "claim added",
        gang(3),
        gang(3, resourceClaims=[{"name": "gpus", "resourceClaimName": "gpus"}]),
        [("spec.scheduling.resourceClaims", "Invalid value: null: field is immutable")],
    ),
]


@pytest.mark.parametrize(
    ("before", "after", "expected"),
    [(case[1], case[2], case[3]) for case in UPDATES],
    ids=[case[0] for case in UPDATES],
)
async def test_update(client: Client, before: Any, after: Any, expected: list[tuple[str, str]]) -> None:
    status, stored, _ = await client.call("POST", JOBS, job(scheduling=before))
    assert status == 201, stored
    changed = copy.deepcopy(stored)
    changed["spec"].pop("scheduling", None)
    if after is not None:
        changed["spec"]["scheduling"] = after
    status, body, _ = await client.call("PUT", f"{JOBS}/train", changed)
    if expected:
        assert status == 422, body
        assert causes(body) == expected
    else:
        assert status == 200, body
        assert body["spec"]["scheduling"] == after


async def test_parallelism_of_a_gang_job_may_still_change(client: Client) -> None:
    status, body, _ = await client.call("POST", JOBS, job(scheduling=gang(3)))
    assert status == 201, body
    patch = {"spec": {"parallelism": 5, "completions": 5}}
    status, body, _ = await client.call("PATCH", f"{JOBS}/train", patch, content_type=MERGE)
    assert status == 200, body


# ------------------------------------------------------------------ names


def test_fnv1a_and_safe_encoding_match_go() -> None:
    # FNV-1a 32-bit test vectors (hash/fnv), and rand.SafeEncodeString's alphabet
    assert job_scheduling._fnv32a(b"") == 0x811C9DC5
    assert job_scheduling._fnv32a(b"a") == 0xE40C292C
    assert job_scheduling._fnv32a(b"foobar") == 0xBF9CF968
    assert job_scheduling._safe_encode("0123456789") == "456789bcdf"


def test_pod_group_name_shares_the_room_between_long_names() -> None:
    name = job_scheduling.pod_group_name("w" * 200, "t" * 200)
    workload_part, template_part, digest = name.split("-")
    assert len(name) <= 253
    assert (len(workload_part), len(template_part)) == (121, 120)
    assert digest == job_scheduling.pod_group_name("w" * 200, "t" * 200).rsplit("-", 1)[1]
    assert job_scheduling.pod_group_name("wl", "tpl").startswith("wl-tpl-")


# ------------------------------------------------------------------ the Job controller


@pytest.fixture
async def cluster() -> AsyncIterator[SimCluster]:
    async with SimCluster(
        nodes=2,
        devices_per_node=0,
        kube_version="1.37",
        feature_gates="WorkloadWithJob=true",
        kubelet_start_delay=0.02,
        kubelet_delete_delay=0.02,
    ) as sim:
        yield sim


async def eventually(probe: Callable[[], Awaitable[Any]], what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + 10.0
    last: Any = None
    while asyncio.get_running_loop().time() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last!r}")


async def _when(coro: Awaitable[list[JsonObject]], ready: Callable[[list[JsonObject]], bool]) -> Any:
    value = await coro
    return value if ready(value) else None


async def items(http: KubeHttp, path: str) -> list[JsonObject]:
    return list((await http.get(path))["items"])


async def pods_of(http: KubeHttp, name: str) -> list[JsonObject]:
    listed = await http.get(
        "/api/v1/namespaces/default/pods", {"labelSelector": f"batch.kubernetes.io/job-name={name}"}
    )
    return list(listed["items"])


async def test_a_gang_job_gets_its_workload_pod_group_and_grouped_pods(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(
        "/apis/scheduling.k8s.io/v1/priorityclasses", {"metadata": {"name": "training"}, "value": 1000}
    )
    scheduling = gang(
        disruptionMode={"all": {}},
        schedulingConstraints={"topology": [{"key": "lockstep.dev/rack"}]},
        resourceClaims=[{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}],
    )
    created = await http.create(JOBS, job(scheduling=scheduling, priorityClassName="training"))
    uid = created["metadata"]["uid"]

    pods = await eventually(
        lambda: _when(pods_of(http, "train"), lambda p: len(p) == 3), "the job's three pods"
    )
    [workload] = await items(http, f"{V1BETA1}/workloads")
    [pod_group] = await items(http, f"{V1BETA1}/podgroups")

    job_owner = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": "train",
        "uid": uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }
    wname = workload["metadata"]["name"]
    prefix, digest = wname.rsplit("-", 1)
    assert prefix == "train"
    assert len(digest) >= 5 and set(digest) <= set(job_scheduling.SAFE_ALPHANUMS)
    assert workload["metadata"]["ownerReferences"] == [job_owner]
    assert "labels" not in workload["metadata"] and "annotations" not in workload["metadata"]
    template = {
        "name": "train-pgt-0",
        "schedulingPolicy": {"gang": {"minCount": 3}},  # minCount unset: the Job's parallelism
        "priorityClassName": "training",
        "schedulingConstraints": {"topology": [{"key": "lockstep.dev/rack"}]},
        "disruptionMode": {"all": {}},
        "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "gpu-template"}],
    }
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
        "podGroupTemplates": [template],
    }

    gname = pod_group["metadata"]["name"]
    assert gname.startswith(f"{wname}-train-pgt-0-")
    assert pod_group["metadata"]["ownerReferences"] == [
        job_owner,
        {
            "apiVersion": "scheduling.k8s.io/v1beta1",
            "kind": "Workload",
            "name": wname,
            "uid": workload["metadata"]["uid"],
        },
    ]
    assert pod_group["metadata"]["finalizers"] == ["scheduling.k8s.io/podgroup-protection"]
    expected_spec = {k: v for k, v in template.items() if k != "name"}
    assert pod_group["spec"] == {
        "workloadRef": {"workloadName": wname, "templateName": "train-pgt-0"},
        **expected_spec,
    }

    assert [p["spec"].get("schedulingGroup") for p in pods] == [{"podGroupName": gname}] * 3
    for pod in pods:
        # the pods are created after the group they name
        assert int(pod["metadata"]["resourceVersion"]) > int(pod_group["metadata"]["resourceVersion"])

    events = await items(http, "/api/v1/namespaces/default/events")
    recorded = {(e["reason"], e["message"]) for e in events if e["involvedObject"].get("kind") == "Job"}
    assert recorded >= {
        ("WorkloadCreated", f"Created Workload {wname} for Job train"),
        ("PodGroupCreated", f"Created PodGroup {gname} for Job train"),
    }


async def test_a_job_without_scheduling_gets_a_basic_pod_group(cluster: SimCluster) -> None:
    await cluster.http.create(JOBS, job(parallelism=2))
    pods = await eventually(lambda: _when(pods_of(cluster.http, "train"), lambda p: len(p) == 2), "two pods")
    [workload] = await items(cluster.http, f"{V1BETA1}/workloads")
    [pod_group] = await items(cluster.http, f"{V1BETA1}/podgroups")
    assert workload["spec"]["podGroupTemplates"] == [
        {"name": "train-pgt-0", "schedulingPolicy": {"basic": {}}}
    ]
    assert pod_group["spec"]["schedulingPolicy"] == {"basic": {}}
    assert {p["spec"]["schedulingGroup"]["podGroupName"] for p in pods} == {pod_group["metadata"]["name"]}


async def test_a_job_bringing_its_own_pod_group_gets_none(cluster: SimCluster) -> None:
    own = {"podGroupName": "mine"}
    await cluster.http.create(JOBS, job(scheduling=gang(2), parallelism=2, schedulingGroup=own))
    pods = await eventually(lambda: _when(pods_of(cluster.http, "train"), lambda p: len(p) == 2), "two pods")
    assert [p["spec"]["schedulingGroup"] for p in pods] == [own, own]
    assert await items(cluster.http, f"{V1BETA1}/workloads") == []
    assert await items(cluster.http, f"{V1BETA1}/podgroups") == []


async def test_a_job_owned_by_another_controller_gets_none(cluster: SimCluster) -> None:
    parent = await cluster.http.create(JOBS, job(name="parent", parallelism=1))
    child = job(name="child", scheduling=gang(2), parallelism=2)
    child["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "parent",
            "uid": parent["metadata"]["uid"],
            "controller": True,
        }
    ]
    await cluster.http.create(JOBS, child)
    pods = await eventually(lambda: _when(pods_of(cluster.http, "child"), lambda p: len(p) == 2), "two pods")
    assert [p["spec"].get("schedulingGroup") for p in pods] == [None, None]
    workloads = await items(cluster.http, f"{V1BETA1}/workloads")
    assert [w["spec"]["controllerRef"]["name"] for w in workloads] == ["parent"]


async def test_a_changed_gang_size_reaches_the_workload_and_the_pod_group(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(JOBS, job(scheduling=gang(3)))
    await eventually(lambda: items(http, f"{V1BETA1}/podgroups"), "the PodGroup")
    await http.patch(f"{JOBS}/train", {"spec": {"scheduling": gang(2)}})

    async def resized() -> bool:
        [workload] = await items(http, f"{V1BETA1}/workloads")
        [pod_group] = await items(http, f"{V1BETA1}/podgroups")
        policies = (
            workload["spec"]["podGroupTemplates"][0]["schedulingPolicy"],
            pod_group["spec"]["schedulingPolicy"],
        )
        return policies == ({"gang": {"minCount": 2}},) * 2

    await eventually(resized, "minCount 2 on the Workload and the PodGroup")


async def test_an_unset_min_count_follows_parallelism(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(JOBS, job(scheduling=gang(), parallelism=4))
    await eventually(lambda: items(http, f"{V1BETA1}/podgroups"), "the PodGroup")
    await http.patch(f"{JOBS}/train", {"spec": {"parallelism": 2, "completions": 2}})

    async def followed() -> bool:
        [pod_group] = await items(http, f"{V1BETA1}/podgroups")
        return bool(pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 2}})

    await eventually(followed, "the PodGroup's minCount following parallelism")


async def test_deleting_the_job_collects_its_workload_pod_group_and_pods(cluster: SimCluster) -> None:
    http = cluster.http
    await http.create(JOBS, job(scheduling=gang(2), parallelism=2))
    await eventually(lambda: _when(pods_of(http, "train"), lambda p: len(p) == 2), "two pods")
    await http.delete(f"{JOBS}/train", {"propagationPolicy": "Background"})

    async def gone() -> bool:
        left = [
            *await items(http, f"{V1BETA1}/workloads"),
            *await items(http, f"{V1BETA1}/podgroups"),
            *await pods_of(http, "train"),
        ]
        return not left

    await eventually(gone, "the Workload, the PodGroup and the pods gone")
    with pytest.raises(ApiError) as missing:
        await http.get(f"{JOBS}/train")
    assert missing.value.status == 404


async def test_gate_off_by_default_the_job_runs_pod_by_pod() -> None:
    async with SimCluster(
        nodes=1,
        devices_per_node=0,
        kube_version="1.37",
        kubelet_start_delay=0.02,
    ) as sim:
        await sim.http.create(JOBS, job(scheduling=gang(2), parallelism=2))
        pods = await eventually(lambda: _when(pods_of(sim.http, "train"), lambda p: len(p) == 2), "two pods")
        assert [p["spec"].get("schedulingGroup") for p in pods] == [None, None]
        assert await items(sim.http, f"{V1BETA1}/workloads") == []
