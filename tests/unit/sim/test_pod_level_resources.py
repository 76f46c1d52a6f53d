"""Pod-level ``spec.resources`` (gate PodLevelResources) in the emulator, as kube-apiserver 1.36 defaults
and validates them (``SetDefaults_Pod``, ``validatePodResources``), over HTTP."""

from __future__ import annotations

from typing import Any

import pytest
from sim_helpers import NS, Client, gated_client, pod

from lockstep.api.pod import parse_pod
from lockstep.sim.features import FeatureGates
from lockstep.sim.registry.core import PodStrategy, core_types

REGISTRY_POD_TYPE = next(rt for rt in core_types(FeatureGates()) if rt.kind == "Pod")


def pod_level(resources: Any, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    """A pod with pod-level ``resources`` and the given containers' ``resources`` (one bare one if none)."""
    body = pod("p", resources=resources, **spec)
    if containers:
        body["spec"]["containers"] = [
            {"name": f"c{i}", "image": "pause:3.10", **container} for i, container in enumerate(containers)
        ]
    return body


def causes(body: dict[str, Any]) -> list[tuple[str, str]]:
    return [(cause["field"], cause["message"]) for cause in body["details"]["causes"]]


async def create(client: Client, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    status, answer, _ = await client.call("POST", f"{NS}/pods", body)
    return status, answer


async def test_pod_level_requests_default_to_the_containers_then_to_the_limits(client: Client) -> None:
    status, body = await create(
        client,
        pod_level(
            {"limits": {"cpu": "2", "memory": "1024Mi", "hugepages-2Mi": "4Mi"}},
            {"resources": {"requests": {"cpu": 0.5}}},
            {"resources": {"limits": {"cpu": "1000m"}}},
        ),
    )
    assert status == 201, body
    # cpu: the containers' aggregate (their sum keeps the first one's format), memory and huge pages:
    # the pod-level limit, as kube-apiserver writes them.
    assert body["spec"]["resources"] == {
        "limits": {"cpu": "2", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
        "requests": {"cpu": "1500m", "memory": "1Gi", "hugepages-2Mi": "4Mi"},
    }
    assert body["status"]["qosClass"] == "Burstable"


async def test_huge_pages_the_containers_limit_are_the_pod_level_limit(client: Client) -> None:
    container = {"resources": {"limits": {"hugepages-2Mi": "4Mi", "memory": "1Gi"}}}
    status, body = await create(client, pod_level({"requests": {"cpu": "1"}}, container, container))
    assert status == 201, body
    # The containers' huge pages limit is the pod's; with a pod-level limit, the requests follow.
    assert body["spec"]["resources"] == {
        "requests": {"cpu": "1", "memory": "2Gi", "hugepages-2Mi": "8Mi"},
        "limits": {"hugepages-2Mi": "8Mi"},
    }


async def test_a_pod_level_request_alone_is_kept_and_sets_the_qos_class(client: Client) -> None:
    status, body = await create(client, pod_level({"requests": {"cpu": "250m", "memory": "64Mi"}}))
    assert status == 201, body
    assert body["spec"]["resources"] == {"requests": {"cpu": "250m", "memory": "64Mi"}}
    assert body["status"]["qosClass"] == "Burstable"  # BestEffort by its containers
    resources = {"limits": {"cpu": "1", "memory": "1Gi"}}
    status, body = await create(client, pod_level(resources) | {"metadata": {"name": "q"}})
    assert status == 201, body
    assert body["status"]["qosClass"] == "Guaranteed"


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param(
            {"requests": {"ephemeral-storage": "1Gi", "example.com/gpu": "1", "foo": "1"}},
            [
                (
                    "spec.resources.requests[ephemeral-storage]",
                    'Unsupported value: "ephemeral-storage": supported values: "cpu", "hugepages-", "memory"',
                ),
                (
                    "spec.resources.requests[example.com/gpu]",
                    'Unsupported value: "example.com/gpu": supported values: "cpu", "hugepages-", "memory"',
                ),
                (
                    "spec.resources.limits",
                    "Required value: Limit must be set for non overcommitable resources",
                ),
                (
                    "spec.resources.requests[foo]",
                    'Invalid value: "foo": must be a standard resource type or fully qualified',
                ),
            ],
            id="names",
        ),
        pytest.param(
            {"requests": {"cpu": "2"}, "limits": {"cpu": "1", "memory": "-1"}},
            [
                ("spec.resources.limits[memory]", 'Invalid value: "-1": must be greater than or equal to 0'),
                (
                    "spec.resources.requests",
                    'Invalid value: "2": must be less than or equal to cpu limit of 1',
                ),
                # the memory request was defaulted from the limit
                (
                    "spec.resources.requests[memory]",
                    'Invalid value: "-1": must be greater than or equal to 0',
                ),
            ],
            id="quantities",
        ),
        pytest.param(
            {"requests": {"hugepages-2Mi": "2Mi"}, "limits": {"hugepages-2Mi": "3Mi"}},
            [
                (
                    "spec.resources.limits[hugepages-2Mi]",
                    'Invalid value: "3Mi": 3Mi is not positive integer multiple of hugepages-2Mi',
                ),
                (
                    "spec.resources.requests",
                    'Invalid value: "2Mi": must be equal to hugepages-2Mi limit of 3Mi',
                ),
                ("spec.resources", "Forbidden: HugePages require cpu or memory"),
            ],
            id="huge-pages",
        ),
        pytest.param(
            {"requests": {"cpu": "1"}, "claims": [{"name": "gpu"}]},
            [
                ("spec.resources.claims", "Forbidden: claims may not be set for Resources at pod-level"),
                (
                    "spec.resources.claims[0]",
                    'Not found: "gpu": must be one of the names in pod.spec.resourceClaims which is empty',
                ),
            ],
            id="claims",
        ),
    ],
)
async def test_pod_level_resources_are_validated_like_kube_apiserver(
    client: Client, resources: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    status, body = await create(client, pod_level(resources))
    assert status == 422, body
    assert causes(body) == expected


async def test_pod_level_requests_cover_the_containers_aggregate(client: Client) -> None:
    sidecar = {"restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}}
    init = {"resources": {"requests": {"cpu": "2500m", "memory": "1Gi"}}}
    body = pod_level(
        {"requests": {"cpu": "3", "memory": "512Mi"}},
        {"resources": {"requests": {"cpu": "1", "ephemeral-storage": "1Gi"}}},
        {"resources": {"requests": {"cpu": "1"}}},
    )
    body["spec"]["initContainers"] = [
        {"name": "sidecar", "image": "pause:3.10", **sidecar},
        {"name": "init", "image": "pause:3.10", **init},
    ]
    status, answer = await create(client, body)
    assert status == 422, answer
    # cpu: the app containers and the sidecar (3) against the init container after the sidecar (3.5);
    # ephemeral-storage is not set at pod level, so not compared.
    assert causes(answer) == [
        (
            "spec.resources.requests[cpu]",
            'Invalid value: "3": must be greater than or equal to aggregate container requests of 3500m',
        ),
        (
            "spec.resources.requests[memory]",
            'Invalid value: "512Mi": must be greater than or equal to aggregate container requests of 1Gi',
        ),
    ]


async def test_no_container_limit_is_above_the_pod_level_limit(client: Client) -> None:
    huge = {"resources": {"limits": {"memory": "2Gi", "hugepages-2Mi": "4Mi"}}}
    status, body = await create(
        client,
        pod_level({"limits": {"cpu": "4", "memory": "1Gi", "hugepages-2Mi": "6Mi"}}, huge, huge),
    )
    assert status == 422, body
    assert causes(body) == [
        # the limits defaulted the containers' requests, those the pod's memory request (4Gi), and
        # the pod-level limits its huge pages request
        (
            "spec.resources.requests",
            'Invalid value: "4Gi": must be less than or equal to memory limit of 1Gi',
        ),
        (
            "spec.resources.requests[hugepages-2Mi]",
            'Invalid value: "6Mi": must be greater than or equal to aggregate container requests of 8Mi',
        ),
        (
            "spec.resources.limits[hugepages-2Mi]",
            'Invalid value: "6Mi": must be greater than or equal to aggregate container limits of 8Mi',
        ),
        (
            "spec.resources.containers[0][memory].limits",
            'Invalid value: "2Gi": must be less than or equal to pod limits of 1Gi',
        ),
        (
            "spec.resources.containers[1][memory].limits",
            'Invalid value: "2Gi": must be less than or equal to pod limits of 1Gi',
        ),
    ]


async def test_a_malformed_pod_level_quantity_is_a_decoding_error(client: Client) -> None:
    status, body = await create(client, pod_level({"limits": {"cpu": "two"}}))
    assert status == 400, body
    assert "quantities must match the regular expression" in body["message"]


async def test_a_windows_pod_may_not_set_pod_level_resources(client: Client) -> None:
    status, body = await create(client, pod_level({"limits": {"cpu": "1"}}, os={"name": "windows"}))
    assert status == 422, body
    assert causes(body) == [("spec.resources", "Forbidden: may not be set for a windows pod")]


async def test_pod_level_resources_are_immutable(client: Client) -> None:
    status, body = await create(client, pod_level({"limits": {"cpu": "1"}}))
    assert status == 201, body
    status, same, _ = await client.call("PUT", f"{NS}/pods/p", body)
    assert status == 200, same  # the defaulted requests round-trip
    body["spec"]["resources"]["limits"]["cpu"] = "2"
    status, answer, _ = await client.call("PUT", f"{NS}/pods/p", body)
    assert status == 422, answer
    [(field, message)] = causes(answer)
    assert field == "spec"
    assert message.startswith("Forbidden: pod updates may not change fields other than")
    assert '"cpu": "2"' in message


async def test_gate_off_drops_pod_level_resources_unvalidated() -> None:
    async with gated_client("PodLevelResources=false") as client:
        resources = {"requests": {"ephemeral-storage": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
        status, body = await create(client, pod_level(resources))
        assert status == 201, body
        assert "resources" not in body["spec"]
        assert body["status"]["qosClass"] == "BestEffort"


def test_gate_off_keeps_the_pod_level_resources_a_stored_pod_has() -> None:
    strategy = PodStrategy(FeatureGates("PodLevelResources=false"))
    stored = {"spec": {"containers": [], "resources": {"limits": {"cpu": "1"}}}}
    update = {"spec": {"containers": [], "resources": {"limits": {"cpu": "1"}}}}
    strategy.default(REGISTRY_POD_TYPE, update, stored)
    assert update["spec"]["resources"] == {"limits": {"cpu": "1"}}  # kept, and not defaulted
    strategy.default(REGISTRY_POD_TYPE, update, {"spec": {"containers": [], "resources": {}}})
    assert "resources" not in update["spec"]


async def test_the_scheduler_reads_the_stored_pod_as_kube_scheduler_would(client: Client) -> None:
    status, body = await create(
        client,
        pod_level(
            {"limits": {"cpu": "2", "memory": "2Gi"}},
            {"resources": {"requests": {"memory": "1Gi"}}},
            {"resources": {"requests": {"memory": "512Mi"}, "limits": {"example.com/gpu": "1"}}},
        ),
    )
    assert status == 201, body
    # PodRequests: pod-level requests (memory from the containers, cpu from the limit) replace theirs.
    assert dict(parse_pod(body).requests) == {"cpu": 2000, "memory": 3 * 2**29, "example.com/gpu": 1}
