"""DRA-backed extended resources (gate DRAExtendedResource) in the emulator, as kube-apiserver,
kube-controller-manager and the kubelet 1.36 handle them: the pod's ``status.extendedResourceClaimStatus``,
the claim kube-scheduler generates for it, the kubelet that waits for that claim and the claim
controller that releases and deletes it."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sim_helpers import NS, Client, gated_client, pod, wait_for

from lockstep.sim.cluster import SimCluster
from lockstep.sim.controllers.dra_driver import DEVICE_CLASS_NAME, DRIVER_NAME
from lockstep.sim.controllers.resourceclaim import DELETE_PROTECTION_FINALIZER
from lockstep.sim.features import FeatureGates
from lockstep.sim.registry.core import PodStrategy, core_types
from lockstep.sim.watching import STRATEGIC_MERGE_PATCH, ApiError, KubeHttp

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
GPU = "example.com/gpu"
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
EXTENDED_CLAIM_ANNOTATION = "resource.kubernetes.io/extended-resource-claim"
REGISTRY_POD_TYPE = next(rt for rt in core_types(FeatureGates()) if rt.kind == "Pod")


def gpu_pod(name: str = "trainer", restart_policy: str | None = None) -> dict[str, Any]:
    body = pod(name)
    if restart_policy:
        body["spec"]["restartPolicy"] = restart_policy
    body["spec"]["containers"] = [
        {"name": "main", "image": "pause:3.10", "resources": {"limits": {GPU: "1"}}}
    ]
    return body


def claim_status(claim: str = "trainer-extended-resources-x7k2p", **mapping: str) -> dict[str, Any]:
    return {
        "requestMappings": [
            {"containerName": "main", "resourceName": GPU, "requestName": "container-0-request-0", **mapping}
        ],
        "resourceClaimName": claim,
    }


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(c["field"], c["message"]) for c in body["details"]["causes"]]


async def patch_status(client: Client, name: str, status: dict[str, Any]) -> tuple[int, Any]:
    code, body, _ = await client.call(
        "PATCH", f"{NS}/pods/{name}/status", {"status": {"extendedResourceClaimStatus": status}}, SMP
    )
    return code, body


@pytest.fixture
async def trainer(client: Client) -> dict[str, Any]:
    status, body, _ = await client.call("POST", f"{NS}/pods", gpu_pod())
    assert status == 201, body
    return body


async def test_the_scheduler_s_claim_status_is_stored_and_may_be_replaced(
    client: Client, trainer: dict[str, Any]
) -> None:
    first = claim_status()
    first["requestMappings"].append({**first["requestMappings"][0], "requestName": "container-0-request-2"})
    code, body = await patch_status(client, "trainer", first)
    assert code == 200, body
    assert body["status"]["extendedResourceClaimStatus"] == first
    # Not immutable: a later scheduling attempt records its new claim; the mappings list is atomic
    # (a strategic merge patch replaces it whole).
    replacement = claim_status("trainer-extended-resources-b4n9q", requestName="container-0-request-1")
    code, body = await patch_status(client, "trainer", replacement)
    assert code == 200, body
    assert body["status"]["extendedResourceClaimStatus"] == replacement


async def test_a_pod_is_created_without_a_client_s_claim_status(client: Client) -> None:
    body = gpu_pod("smuggler")
    body["status"] = {"extendedResourceClaimStatus": claim_status()}
    status, created, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 201, created
    assert "extendedResourceClaimStatus" not in created["status"]


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (
            {"requestMappings": [], "resourceClaimName": "c"},
            [
                (
                    "status.extendedResourceClaimStatus.requestMappings",
                    "Required value: at least one request mapping is required",
                )
            ],
        ),
        (
            claim_status(containerName="sidecar"),
            [
                (
                    "status.extendedResourceClaimStatus.requestMappings[0].containerName",
                    'Invalid value: "sidecar": must match the name of an entry in spec.initContainers.name '
                    "or spec.containers.name",
                )
            ],
        ),
        (
            claim_status(resourceName="example.com/fpga"),
            [
                (
                    "status.extendedResourceClaimStatus.requestMappings[0].resourceName",
                    'Invalid value: "example.com/fpga": must match the extended resource name of an entry '
                    "in spec.initContainers.resources.requests or spec.containers.resources.requests",
                )
            ],
        ),
        (
            claim_status(requestName="Container_0"),
            [
                (
                    # upstream's path for the request name has no index
                    "status.extendedResourceClaimStatus.requestName",
                    'Invalid value: "Container_0": a lowercase RFC 1123 label must consist of lower case '
                    "alphanumeric characters or '-', and must start and end with an alphanumeric character "
                    "(e.g. 'my-name',  or '123-abc', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')",
                )
            ],
        ),
        (
            claim_status(""),
            [("status.extendedResourceClaimStatus.resourceClaimName", "Required value")],
        ),
        (
            claim_status("Trainer_Claim"),
            [
                (
                    "status.extendedResourceClaimStatus.resourceClaimName",
                    'Invalid value: "Trainer_Claim": a lowercase RFC 1123 subdomain must consist of lower '
                    "case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric "
                    "character (e.g. 'example.com', regex used for validation is "
                    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')",
                )
            ],
        ),
    ],
)
async def test_claim_status_is_validated_like_kube_apiserver(
    client: Client, trainer: dict[str, Any], status: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    code, body = await patch_status(client, "trainer", status)
    assert code == 422, body
    assert causes(body) == [(field, message) for field, message in expected]
    assert body["message"].startswith('Pod "trainer" is invalid: ')


async def test_a_repeated_mapping_is_a_duplicate_of_all_three_names(
    client: Client, trainer: dict[str, Any]
) -> None:
    status = claim_status()
    status["requestMappings"] *= 2
    code, body = await patch_status(client, "trainer", status)
    assert code == 422, body
    path = "status.extendedResourceClaimStatus.requestMappings[1]"
    assert causes(body) == [
        (f"{path}.containerName", 'Duplicate value: "main"'),
        (f"{path}.resourceName", f'Duplicate value: "{GPU}"'),
        (f"{path}.requestName", 'Duplicate value: "container-0-request-0"'),
    ]


async def test_an_init_container_s_request_may_be_mapped(client: Client) -> None:
    body = pod("with-init")
    body["spec"]["initContainers"] = [
        {"name": "setup", "image": "pause:3.10", "resources": {"limits": {GPU: "2"}}}
    ]
    status, created, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 201, created
    code, patched = await patch_status(client, "with-init", claim_status(containerName="setup"))
    assert code == 200, patched


async def test_a_mistyped_claim_status_is_refused_by_the_decoder(
    client: Client, trainer: dict[str, Any]
) -> None:
    code, body = await patch_status(client, "trainer", {"requestMappings": {"containerName": "main"}})
    assert code == 422, body
    assert "cannot unmarshal object into Go struct field" in body["message"]
    assert "extendedResourceClaimStatus.requestMappings" in body["message"]


async def test_gate_off_drops_the_claim_status_unless_the_pod_has_one() -> None:
    async with gated_client("DRAExtendedResource=false") as client:
        status, body, _ = await client.call("POST", f"{NS}/pods", gpu_pod())
        assert status == 201, body
        code, body = await patch_status(client, "trainer", claim_status())
        assert code == 200, body
        assert "extendedResourceClaimStatus" not in body["status"]
        # A bad one is dropped before validation, as the strategy does.
        code, body = await patch_status(client, "trainer", {"requestMappings": []})
        assert code == 200, body


def test_gate_off_keeps_a_claim_status_the_pod_already_has() -> None:
    strategy = PodStrategy(FeatureGates("DRAExtendedResource=false"))
    stored = {"spec": {"containers": []}, "status": {"extendedResourceClaimStatus": claim_status()}}
    update = {"spec": {"containers": []}, "status": {"extendedResourceClaimStatus": claim_status("other")}}
    strategy.default(REGISTRY_POD_TYPE, update, stored)
    assert update["status"]["extendedResourceClaimStatus"] == claim_status("other")
    fresh = {"spec": {"containers": []}, "status": {"extendedResourceClaimStatus": claim_status("other")}}
    strategy.default(REGISTRY_POD_TYPE, fresh, {"spec": {"containers": []}, "status": {}})
    assert "extendedResourceClaimStatus" not in fresh["status"]


async def test_a_generated_name_fits_63_characters_whatever_the_kind(client: Client) -> None:
    base = "p" * 50 + "-extended-resources-"
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"generateName": base},
        "spec": {},
    }
    status, body, _ = await client.call("POST", CLAIMS, claim)
    assert status == 201, body
    name = body["metadata"]["name"]
    assert len(name) == 63 and name[:58] == base[:58] == "p" * 50 + "-extende" and name[58:].isalnum()
    status, body, _ = await client.call(
        "POST", f"{NS}/pods", {**pod(""), "metadata": {"generateName": "x" * 70}}
    )
    assert status == 201, body
    assert len(body["metadata"]["name"]) == 63


# ---------------------------------------------------------------- kubelet and claim controller


def extended_claim(owner: dict[str, Any]) -> dict[str, Any]:
    """The claim kube-scheduler posts for ``owner``'s DRA-backed extended resources."""
    meta = owner["metadata"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "generateName": f"{meta['name']}-extended-resources-",
            "annotations": {EXTENDED_CLAIM_ANNOTATION: "true"},
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                }
            ],
        },
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "container-0-request-0",
                        "exactly": {
                            "deviceClassName": DEVICE_CLASS_NAME,
                            "allocationMode": "ExactCount",
                            "count": 1,
                        },
                    }
                ]
            }
        },
    }


async def schedule_with_extended_claim(
    http: KubeHttp, node: str, name: str, restart_policy: str | None = None
) -> tuple[dict[str, Any], str]:
    """What kube-scheduler's PreBind does for a pod whose GPU a DeviceClass provides, up to the binding,
    except the allocation: create the claim with its finalizer, record it in the pod's status, bind."""
    created_pod = await http.create(f"{NS}/pods", gpu_pod(name, restart_policy))
    claim = await http.create(CLAIMS, extended_claim(created_pod))
    claim_name = claim["metadata"]["name"]
    await http.patch(f"{CLAIMS}/{claim_name}", {"metadata": {"finalizers": [DELETE_PROTECTION_FINALIZER]}})
    await http.patch(
        f"{NS}/pods/{name}/status",
        {"status": {"extendedResourceClaimStatus": claim_status(claim_name)}},
        STRATEGIC_MERGE_PATCH,
    )
    await http.create(
        f"{NS}/pods/{name}/binding",
        {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name}, "target": {"name": node}},
    )
    return created_pod, claim_name


async def allocate_and_reserve(http: KubeHttp, claim_name: str, owner: dict[str, Any], node: str) -> None:
    await http.patch(
        f"{CLAIMS}/{claim_name}/status",
        {
            "status": {
                "allocation": {
                    "devices": {
                        "results": [
                            {
                                "request": "container-0-request-0",
                                "driver": DRIVER_NAME,
                                "pool": node,
                                "device": "gpu-0",
                            }
                        ]
                    }
                },
                "reservedFor": [
                    {"resource": "pods", "name": owner["metadata"]["name"], "uid": owner["metadata"]["uid"]}
                ],
            }
        },
    )


async def phase(http: KubeHttp, name: str) -> str:
    return str((await http.get(f"{NS}/pods/{name}"))["status"]["phase"])


async def claim_gone(http: KubeHttp, name: str) -> bool:
    try:
        await http.get(f"{CLAIMS}/{name}")
    except ApiError as error:
        return error.status == 404
    return False


async def test_kubelet_holds_the_pod_until_its_extended_claim_is_allocated_then_the_claim_goes_with_it() -> (
    None
):
    async with SimCluster(nodes=1, devices_per_node=2) as cluster:
        http, node = cluster.http, cluster.node_names[0]
        owner, claim_name = await schedule_with_extended_claim(http, node, "trainer")
        await asyncio.sleep(0.5)  # five times the kubelet's start delay
        assert await phase(http, "trainer") == "Pending"
        await allocate_and_reserve(http, claim_name, owner, node)

        async def running() -> bool:
            return await phase(http, "trainer") == "Running"

        await wait_for(running, "the pod to run")
        await http.delete(f"{NS}/pods/trainer")
        # The garbage collector deletes the claim with its pod; the finalizer holds it until the claim
        # controller has dropped the reservation and the allocation.
        await wait_for(lambda: claim_gone(http, claim_name), "the claim to be deleted")


async def test_a_finished_pod_s_extended_claim_is_deallocated_and_deleted() -> None:
    async with SimCluster(nodes=1, devices_per_node=2, pod_run_seconds=0.3) as cluster:
        http, node = cluster.http, cluster.node_names[0]
        # restartPolicy Never: a container that exits is not started again
        owner, claim_name = await schedule_with_extended_claim(http, node, "trainer", "Never")
        await allocate_and_reserve(http, claim_name, owner, node)

        async def succeeded() -> bool:
            return await phase(http, "trainer") == "Succeeded"

        await wait_for(succeeded, "the pod to succeed")
        await wait_for(lambda: claim_gone(http, claim_name), "the claim to be deleted")
        assert await phase(http, "trainer") == "Succeeded"  # the pod stays; its claim does not


# ---------------------------------------------------------------- pod create: extended resource quantities


def pod_with_resources(resources: dict[str, Any], init: bool = False) -> dict[str, Any]:
    body = pod("asks")
    container = {"name": "main", "image": "pause:3.10", "resources": resources}
    if init:
        body["spec"]["initContainers"] = [{**container, "name": "setup"}]
    else:
        body["spec"]["containers"] = [container]
    return body


@pytest.mark.parametrize(
    ("resources", "init", "expected"),
    [
        (
            {"requests": {GPU: "1"}},
            False,
            [
                (
                    "spec.containers[0].resources.limits",
                    "Required value: Limit must be set for non overcommitable resources",
                )
            ],
        ),
        (
            {"requests": {GPU: "1"}, "limits": {GPU: "2"}},
            False,
            [
                (
                    "spec.containers[0].resources.requests",
                    f'Invalid value: "1": must be equal to {GPU} limit of 2',
                )
            ],
        ),
        (
            # the request defaulted from the limit is checked too; Go prints 0.5 as 500m
            {"limits": {GPU: "0.5"}},
            True,
            [
                (
                    f"spec.initContainers[0].resources.limits[{GPU}]",
                    'Invalid value: "500m": must be an integer',
                ),
                (
                    f"spec.initContainers[0].resources.requests[{GPU}]",
                    'Invalid value: "500m": must be an integer',
                ),
            ],
        ),
        (
            {"limits": {"cpu": "1"}, "requests": {"cpu": "1500m"}},
            False,
            [
                (
                    "spec.containers[0].resources.requests",
                    'Invalid value: "1500m": must be less than or equal to cpu limit of 1',
                )
            ],
        ),
        (
            {"limits": {"gpu": "1", "example.com/gpu_": "1"}},
            False,
            [
                (
                    "spec.containers[0].resources.limits[example.com/gpu_]",
                    'Invalid value: "example.com/gpu_": name part must consist of alphanumeric characters, '
                    "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  "
                    "or 'my.name',  or '123-abc', regex used for validation is "
                    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                ),
                (
                    "spec.containers[0].resources.limits[gpu]",
                    'Invalid value: "gpu": must be a standard resource type or fully qualified',
                ),
                (
                    "spec.containers[0].resources.limits[gpu]",
                    'Invalid value: "gpu": must be a standard resource for containers',
                ),
                (
                    "spec.containers[0].resources.requests[example.com/gpu_]",
                    'Invalid value: "example.com/gpu_": name part must consist of alphanumeric characters, '
                    "'-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  "
                    "or 'my.name',  or '123-abc', regex used for validation is "
                    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
                ),
                (
                    "spec.containers[0].resources.requests[gpu]",
                    'Invalid value: "gpu": must be a standard resource type or fully qualified',
                ),
                (
                    "spec.containers[0].resources.requests[gpu]",
                    'Invalid value: "gpu": must be a standard resource for containers',
                ),
            ],
        ),
    ],
)
async def test_extended_resources_are_whole_and_not_overcommitted(
    client: Client, resources: dict[str, Any], init: bool, expected: list[tuple[str, str]]
) -> None:
    status, body, _ = await client.call("POST", f"{NS}/pods", pod_with_resources(resources, init))
    assert status == 422, body
    assert causes(body) == expected


async def test_a_limit_alone_is_the_request_too(client: Client) -> None:
    status, body, _ = await client.call(
        "POST", f"{NS}/pods", pod_with_resources({"limits": {GPU: "2"}}, True)
    )
    assert status == 201, body
    assert body["spec"]["initContainers"][0]["resources"]["requests"] == {GPU: "2"}


async def test_implicit_device_class_names_are_native_to_validation(client: Client) -> None:
    """``deviceclass.resource.kubernetes.io/<class>`` is in the kubernetes.io domain: neither the integer
    nor the request-equals-limit rule applies to it."""
    implicit = "deviceclass.resource.kubernetes.io/gpu.sim.lockstep.dev"
    resources = {"requests": {implicit: "500m"}, "limits": {"cpu": "1", implicit: "2"}}
    status, body, _ = await client.call("POST", f"{NS}/pods", pod_with_resources(resources))
    assert status == 201, body


async def test_a_job_template_keeps_its_requests_as_written(client: Client) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "train"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {"name": "main", "image": "pause:3.10", "resources": {"limits": {GPU: "1"}}}
                    ],
                }
            }
        },
    }
    status, body, _ = await client.call("POST", "/apis/batch/v1/namespaces/default/jobs", job)
    assert status == 201, body
    assert body["spec"]["template"]["spec"]["containers"][0]["resources"] == {"limits": {GPU: "1"}}


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("example.com/gpu", True),
        ("gpu", False),
        ("kubernetes.io/gpu", False),
        ("deviceclass.resource.kubernetes.io/gpu", False),
        ("requests.example.com/gpu", False),
        ("example.com/" + "g" * 64, False),
        ("", False),
    ],
)
async def test_device_class_extended_resource_name(client: Client, name: str, valid: bool) -> None:
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "gpus"},
        "spec": {"extendedResourceName": name},
    }
    status, body, _ = await client.call("POST", "/apis/resource.k8s.io/v1/deviceclasses", device_class)
    if valid:
        assert status == 201, body
        return
    assert status == 422, body
    assert causes(body) == [
        ("spec.extendedResourceName", f'Invalid value: "{name}": must be a valid extended resource name')
    ]


async def test_a_claim_has_at_most_32_requests_and_32_results(client: Client) -> None:
    """kube-scheduler's claim for a pod's extended resources has a request per container and resource:
    the API caps it as any claim (DeviceRequestsMaxSize, AllocationResultsMaxSize)."""

    def requests(count: int) -> list[dict[str, Any]]:
        return [
            {"name": f"container-{i}-request-0", "exactly": {"deviceClassName": DEVICE_CLASS_NAME}}
            for i in range(count)
        ]

    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "many"},
        "spec": {"devices": {"requests": requests(33)}},
    }
    status, body, _ = await client.call("POST", CLAIMS, claim)
    assert status == 422, body
    assert causes(body) == [("spec.devices.requests", "Too many: 33: must have at most 32 items")]
    claim["spec"]["devices"]["requests"] = requests(32)
    status, body, _ = await client.call("POST", CLAIMS, claim)
    assert status == 201, body
    results = [
        {"request": f"container-{i}-request-0", "driver": DRIVER_NAME, "pool": "node-a", "device": f"gpu-{i}"}
        for i in range(33)
    ]
    allocation = {"status": {"allocation": {"devices": {"results": results}}}}
    status, body, _ = await client.call("PATCH", f"{CLAIMS}/many/status", allocation, MERGE)
    assert status == 422, body
    assert causes(body) == [("status.allocation.devices.results", "Too many: 33: must have at most 32 items")]
    allocation["status"]["allocation"]["devices"]["results"] = results[:32]
    status, body, _ = await client.call("PATCH", f"{CLAIMS}/many/status", allocation, MERGE)
    assert status == 200, body


async def test_container_claims_name_the_pod_s_resource_claims(client: Client) -> None:
    body = pod_with_resources(
        {"claims": [{"name": "gpu"}, {"name": "gpu"}, {"name": ""}, {"name": "x", "request": "r"}]}
    )
    body["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    status, answer, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 422, answer
    path = "spec.containers[0].resources.claims"
    assert causes(answer) == [
        (f"{path}[1]", 'Duplicate value: "gpu"'),
        (f"{path}[2]", "Required value"),
        (f"{path}[3]", 'Not found: "x": must be one of the names in pod.spec.resourceClaims: gpu'),
    ]
    del body["spec"]["resourceClaims"]
    body["spec"]["containers"][0]["resources"]["claims"] = [{"name": "gpu", "request": "Big"}]
    status, answer, _ = await client.call("POST", f"{NS}/pods", body)
    assert status == 422, answer
    assert [field for field, _ in causes(answer)] == [f"{path}[0].request", f"{path}[0]"]
    assert (
        causes(answer)[1][1]
        == 'Not found: "gpu": must be one of the names in pod.spec.resourceClaims which is empty'
    )


async def test_quantities_are_stored_as_kube_apiserver_writes_them(client: Client) -> None:
    resources = {"limits": {"cpu": "1000m", "memory": "1024Mi", GPU: 2}, "requests": {"cpu": 0.5}}
    status, body, _ = await client.call("POST", f"{NS}/pods", pod_with_resources(resources))
    assert status == 201, body
    assert body["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1", "memory": "1Gi", GPU: "2"},
        "requests": {"cpu": "500m", "memory": "1Gi", GPU: "2"},
    }
