"""DRA diagnostics: a failed allocation names the claim, the request or constraint, and the cause;
a claim still being created makes the group wait instead of failing."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable

import pytest
from dra_builders import (
    DRIVER,
    claim,
    device,
    device_class,
    exactly,
    first_available,
    match,
    resource_slice,
)
from dra_memory_api import MemoryClaimAPI

from lockstep import SCHEDULER_NAME
from lockstep.api.podgroup import PodGroup
from lockstep.api.resource import DeviceClass, ResourceClaim, ResourceClaimTemplate, parse_resource
from lockstep.config import Settings
from lockstep.dra.allocator import AllocationError, Allocator
from lockstep.dra.features import Features, allocator_features
from lockstep.dra.inventory import DeviceID, DeviceInventory
from lockstep.dra.store import ResourceStore
from lockstep.scheduler.framework import Code, GroupKey, NodeInfo, PodClaimRef, PodGroupInfo, PodInfo
from lockstep.scheduler.plugins.dynamic_resources import CLAIM_API_SERVICE, STORE_SERVICE
from lockstep.scheduler.ports import BindOutcome, BindResult, PatchOutcome, PatchResult
from lockstep.scheduler.records import REASON_WAITING
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

GATE_OFF = Features(prioritized_list=True)
GATE_ON = Features(prioritized_list=True, list_type_attributes=True)
GATE = "the DRAListTypeAttributes feature gate (lockstep run --feature-gates DRAListTypeAttributes=true)"
GATE_ADVICE = f"needs {GATE}"
NUMA = f"{DRIVER}/numa"


def allocator(
    devices: list[dict[str, object]],
    features: Features = GATE_ON,
    in_use: Iterable[str] = (),
    classes: Iterable[DeviceClass] = (),
) -> Allocator:
    inventory = DeviceInventory()
    inventory.update_slice(resource_slice("s-a", devices, "node-a"))
    busy: set[DeviceID] = {(DRIVER, "node-a", name) for name in in_use}
    class_map = {c.metadata.name: c for c in (list(classes) or [device_class()])}
    return Allocator(features, inventory, class_map, busy.__contains__)


def why(allocator: Allocator, *claims: ResourceClaim) -> str:
    """The explanation for a failed allocation on node-a (the allocation must fail)."""
    compiled = [allocator.compile(c) for c in claims]
    assert allocator.find(compiled, "node-a", {}) is None
    return allocator.explain(compiled, "node-a", {})


def test_too_few_free_devices_names_claim_request_class_and_counts() -> None:
    devices = [device(f"gpu-{i}") for i in range(8)]
    alloc = allocator(devices, in_use=[f"gpu-{i}" for i in range(6)])
    assert why(alloc, claim("gpu", exactly("gpus", 4))) == (
        'claim ns/gpu: request "gpus": needs 4 devices of class "gpu", 2 match its selectors on this '
        "node and are free (8 match, 6 allocated)"
    )


def test_a_selector_that_matches_nothing_is_quoted() -> None:
    alloc = allocator([device(f"gpu-{i}", model="h100") for i in range(2)])
    selector = f'device.attributes["{DRIVER}"].model == "h200"'
    assert why(alloc, claim("gpu", exactly("gpus", 1, selector))) == (
        f'claim ns/gpu: request "gpus": selector {selector} matches no device on this node'
    )


def test_a_device_class_selector_that_matches_nothing_names_the_class() -> None:
    other = device_class("other", 'device.driver == "other.example.com"')
    alloc = allocator([device("gpu-0")], classes=[other])
    message = why(alloc, claim("gpu", exactly("gpus", 1, device_class_name="other")))
    assert message.startswith('claim ns/gpu: request "gpus": DeviceClass "other" selector')
    assert 'device.driver == "other.example.com" matches no device' in message


def test_unsatisfiable_match_attribute_names_the_constraint() -> None:
    alloc = allocator([device(f"gpu-{i}", numa=i // 2) for i in range(4)])
    message = why(alloc, claim("gpu", exactly("gpus", 4), constraints=[match(NUMA, "gpus")]))
    assert message == (
        f'claim ns/gpu: constraint matchAttribute "{NUMA}" over requests [gpus]: '
        "no set of 4 devices shares a value"
    )


def test_list_attribute_constraint_without_the_gate_names_the_gate() -> None:
    """Behaviour 5's reason: the same claim fits once the gate is on."""
    devices = [device(f"gpu-{i}", numa=[0, 1]) for i in range(2)]
    pair = claim("pair", exactly("gpus", 2), constraints=[match(NUMA, "gpus")])
    message = why(allocator(devices, GATE_OFF), pair)
    assert message == (
        f'claim ns/pair: constraint matchAttribute "{NUMA}" over requests [gpus]: "{NUMA}" is a list-type '
        f"attribute on these devices; matching list attributes {GATE_ADVICE}"
    )
    with_gate = allocator(devices, GATE_ON)
    assert with_gate.find([with_gate.compile(pair)], "node-a", {}) is not None


def test_selector_on_a_hidden_list_attribute_without_the_gate_says_so() -> None:
    alloc = allocator([device("gpu-0", numa=[0, 1])], GATE_OFF)
    selector = f'has(device.attributes["{DRIVER}"].numa)'
    message = why(alloc, claim("gpu", exactly("gpus", 1, selector)))
    assert f"selector {selector} matches no device on this node" in message
    assert message.endswith(
        f'"{NUMA}" is a list-type attribute on these devices, visible to CEL only with {GATE}'
    )


def test_reading_a_hidden_list_attribute_without_the_gate_fails_naming_the_gate() -> None:
    alloc = allocator([device("gpu-0", numa=[0, 1], numaNode=0)], GATE_OFF)
    selector = f'device.attributes["{DRIVER}"].numa.exists(n, n == 1)'
    compiled = alloc.compile(claim("gpu", exactly("gpus", 1, selector)))
    with pytest.raises(AllocationError) as raised:
        alloc.find([compiled], "node-a", {})
    assert repr(selector) in str(raised.value)
    assert str(raised.value).endswith(
        f'"{NUMA}" is a list-type attribute on these devices, visible to CEL only with {GATE}'
    )
    scalar = f'device.attributes["{DRIVER}"].numaNode == 1'  # a scalar whose name starts like the list's
    assert "list-type" not in why(alloc, claim("scalar", exactly("gpus", 1, scalar)))


def test_cel_runtime_error_keeps_the_expression_and_names_the_gate_for_includes() -> None:
    alloc = allocator([device("gpu-0", numa=[0, 1])], GATE_OFF)
    selector = f'device.attributes["{DRIVER}"].numa.includes(1)'
    compiled = alloc.compile(claim("gpu", exactly("gpus", 1, selector)))
    with pytest.raises(AllocationError) as raised:
        alloc.find([compiled], "node-a", {})
    message = str(raised.value)
    assert message.startswith("ResourceClaim ns/gpu: request 'gpus': CEL expression")
    assert repr(selector) in message and f"includes() {GATE_ADVICE}" in message
    assert "activation" not in message  # the CEL library's dump of its whole environment is cut


def test_each_alternative_of_a_first_available_request_is_explained() -> None:
    alloc = allocator([device("gpu-0", model="h100")])
    request = first_available(
        "gpus", ("big", 2, ""), ("h200", 1, f'device.attributes["{DRIVER}"].model == "h200"')
    )
    message = why(alloc, claim("gpu", request))
    assert message.startswith('claim ns/gpu: request "gpus/big": needs 2 devices of class "gpu", 1 match')
    assert '; request "gpus/h200": selector' in message


def test_claims_that_fit_alone_but_not_together_are_named_together() -> None:
    alloc = allocator([device("gpu-0")])
    assert why(alloc, claim("a", exactly("gpu")), claim("b", exactly("gpu"))) == (
        "claims ns/a, ns/b: each could be allocated on this node, but not all of them together"
    )


# --- inside the scheduler: the group's record --------------------------------------------------------


class BindingPodAPI:
    """Binds at once and remembers PodScheduled=False patches."""

    def __init__(self) -> None:
        self.pods: dict[str, PodInfo] = {}
        self.patches: list[tuple[str, str]] = []  # (pod, reason)

    async def bind(self, pod: PodInfo, node_name: str) -> BindOutcome:
        self.pods[pod.key] = dataclasses.replace(pod, node_name=node_name)
        return BindOutcome(BindResult.BOUND)

    async def get_pod(self, namespace: str, name: str) -> PodInfo | None:
        return self.pods.get(f"{namespace}/{name}")

    async def patch_pod_unschedulable(
        self, pod: PodInfo, resource_version: str, reason: str, message: str
    ) -> PatchOutcome:
        self.patches.append((pod.key, reason))
        return PatchOutcome(PatchResult.OK)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def scheduler_with_devices(
    nodes: int, devices_per_node: int, clock: Clock | None = None
) -> tuple[Scheduler, ResourceStore, MemoryClaimAPI, BindingPodAPI]:
    settings = Settings(leader_elect=False)
    clock = clock or Clock()
    cache = ClusterCache(SCHEDULER_NAME)
    store = ResourceStore(allocator_features(settings.feature_gates), cache.on_claims_changed)
    store.upsert_class(device_class())
    for n in range(nodes):
        name = f"node-{n}"
        cache.upsert_node(NodeInfo(name=name, allocatable={"cpu": 10**6, "memory": 2**40, "pods": 100}))
        devices = [device(f"gpu-{i}", numa=[0, 1]) for i in range(devices_per_node)]
        store.upsert_slice(resource_slice(f"slice-{name}", devices, name))
    claim_api = MemoryClaimAPI(store, echo=True)
    pod_api = BindingPodAPI()
    scheduler = Scheduler(
        settings,
        pod_api,
        cache=cache,
        services={STORE_SERVICE: store, CLAIM_API_SERVICE: claim_api},
        clock=clock,
    )
    return scheduler, store, claim_api, pod_api


def add_members(scheduler: Scheduler, group: PodGroupInfo, count: int, *claims: PodClaimRef) -> None:
    scheduler.cache.upsert_podgroup(group)
    for i in range(count):
        scheduler.cache.upsert_pod(
            PodInfo(
                uid=f"uid-{group.name}-{i}",
                namespace=group.namespace,
                name=f"{group.name}-{i}",
                scheduler_name=SCHEDULER_NAME,
                group_name=group.name,
                requests={"cpu": 100},
                claims=claims,
            )
        )


async def run_due(scheduler: Scheduler) -> None:
    while scheduler.schedule_one() is not None:
        pass
    await scheduler.wait_for_tasks()


async def test_behaviour_5_group_diagnosis_names_the_gate_once_for_all_nodes() -> None:
    scheduler, _, claim_api, _ = scheduler_with_devices(nodes=3, devices_per_node=2)
    claim_api.add(claim("pair", exactly("gpus", 2), constraints=[match(NUMA, "gpus")], uid="uid-pair"))
    group = PodGroupInfo("ns", "numa", "uid-numa", min_count=1, is_gang=True)
    add_members(scheduler, group, 1, PodClaimRef("gpu", resource_claim_name="pair"))
    await run_due(scheduler)
    attempt = scheduler.attempts[GroupKey("ns", "numa")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert dict(attempt.causes) == {"InsufficientDevices": 3}  # counting per cause is unchanged
    [diagnosis] = attempt.pods
    assert diagnosis.message == (
        "0/3 nodes are available: 3 cannot allocate all claims. DynamicResources: claim ns/pair: constraint "
        f'matchAttribute "{NUMA}" over requests [gpus]: "{NUMA}" is a list-type attribute on these '
        f"devices; matching list attributes {GATE_ADVICE}."
    )
    assert diagnosis.message in attempt.message  # what the PodGroupScheduled condition says


async def test_different_reasons_per_node_are_aggregated_most_frequent_first() -> None:
    scheduler, store, claim_api, _ = scheduler_with_devices(nodes=3, devices_per_node=2)
    store.upsert_slice(resource_slice("slice-node-0", [device("gpu-0")], "node-0", rv="2"))
    scheduler.cache.upsert_node(NodeInfo(name="node-3", allocatable={"cpu": 10**6, "memory": 2**40}))
    claim_api.add(claim("three", exactly("gpus", 3), uid="uid-three"))
    group = PodGroupInfo("ns", "big", "uid-big", min_count=1, is_gang=True)
    add_members(scheduler, group, 1, PodClaimRef("gpu", resource_claim_name="three"))
    await run_due(scheduler)
    [diagnosis] = scheduler.attempts[GroupKey("ns", "big")].pods
    needs = 'claim ns/three: request "gpus": needs 3 devices of class "gpu"'
    assert diagnosis.message == (
        "0/4 nodes are available: 4 cannot allocate all claims. DynamicResources: "
        f"{needs}, 2 match its selectors on this node and are free (2 match, 0 allocated) (2 nodes); "
        f"{needs}, 1 match its selectors on this node and are free (1 match, 0 allocated) (1 node); "
        "1 other reason on 1 node."  # node-3 publishes no devices
    )


async def test_group_waits_for_its_podgroup_claim_then_binds_when_it_appears() -> None:
    clock = Clock()
    scheduler, store, claim_api, pod_api = scheduler_with_devices(nodes=1, devices_per_node=1, clock=clock)
    store.upsert_template(
        parse_resource(
            ResourceClaimTemplate,
            {
                "metadata": {"name": "tmpl", "namespace": "ns"},
                "spec": {"spec": {"devices": {"requests": [exactly("gpu", 1)]}}},
            },
        )
    )
    group = PodGroupInfo(
        "ns", "g", "uid-g", min_count=2, is_gang=True, claims=(PodClaimRef("shared", None, "tmpl"),)
    )
    add_members(scheduler, group, 2)
    key = GroupKey("ns", "g")
    await run_due(scheduler)

    waiting = scheduler.attempts[key]
    assert (waiting.code, waiting.reason) == (Code.WAIT, REASON_WAITING)
    assert "PodGroup ns/g claim 'shared' (template 'tmpl')" in waiting.message
    assert dict(waiting.causes) == {"ClaimPending": 1}
    assert pod_api.pods == {}  # nothing bound
    clock.now += scheduler.settings.backoff_initial_seconds
    await run_due(scheduler)
    assert (scheduler.attempts[key].attempt, scheduler.attempts[key].code) == (2, Code.WAIT)

    podgroup = PodGroup.model_validate(
        {
            "metadata": {"name": "g", "namespace": "ns", "uid": "uid-g"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "shared", "resourceClaimTemplateName": "tmpl"}],
            },
        }
    )
    report = await store.ensure_group_claims(podgroup, claim_api)
    assert report.created and report.recorded
    # The second failure backs off twice the initial delay; the claim's creation cuts that short.
    clock.now += scheduler.settings.backoff_initial_seconds
    await run_due(scheduler)
    await asyncio.sleep(0)

    assert scheduler.attempts[key].code is Code.SUCCESS
    assert sorted(pod_api.pods) == ["ns/g-0", "ns/g-1"]
    # Waiting for a claim about to be created writes nothing to a PodGroup's members (kube-scheduler's
    # PreEnqueue does not either); the PodGroup status says it if it lasts.
    assert pod_api.patches == []


async def test_a_lone_pod_waits_for_the_claim_of_its_template_and_is_told_if_it_lasts() -> None:
    clock = Clock()
    scheduler, _, _, pod_api = scheduler_with_devices(nodes=1, devices_per_node=1, clock=clock)
    ref = PodClaimRef("gpu", resource_claim_template_name="tmpl")
    scheduler.cache.upsert_pod(
        PodInfo(uid="uid-solo", namespace="ns", name="solo", scheduler_name=SCHEDULER_NAME, claims=(ref,))
    )
    await run_due(scheduler)
    key = GroupKey("ns", "solo", pod_group=False)
    attempt = scheduler.attempts[key]
    assert (attempt.code, attempt.reason) == (Code.WAIT, REASON_WAITING)
    assert "ResourceClaim of pod claim 'gpu' (template 'tmpl')" in attempt.message
    # The first waits write nothing, as kube-scheduler's PreEnqueue: the claim is usually made at once.
    for attempt, backoff in ((2, 1), (3, 2)):
        assert pod_api.patches == []
        clock.now += scheduler.settings.backoff_initial_seconds * backoff
        await run_due(scheduler)
        assert (scheduler.attempts[key].attempt, scheduler.attempts[key].code) == (attempt, Code.WAIT)
    assert pod_api.patches == [("ns/solo", REASON_WAITING)]


async def test_a_generated_claim_named_but_not_yet_seen_is_waited_for() -> None:
    """kube-controller-manager names the claim in the pod's status; its watch event may come later."""
    clock = Clock()
    scheduler, _, claim_api, pod_api = scheduler_with_devices(nodes=1, devices_per_node=1, clock=clock)
    ref = PodClaimRef("gpu", resource_claim_template_name="tmpl")
    solo = PodInfo(
        uid="uid-solo",
        namespace="ns",
        name="solo",
        scheduler_name=SCHEDULER_NAME,
        claims=(ref,),
        claim_statuses={"gpu": "solo-gpu-x1"},
    )
    scheduler.cache.upsert_pod(solo)
    await run_due(scheduler)
    key = GroupKey("ns", "solo", pod_group=False)
    waiting = scheduler.attempts[key]
    assert waiting.code is Code.WAIT
    assert "waiting for ResourceClaim ns/solo-gpu-x1 (pod claim 'gpu') to appear" in waiting.message

    generated = claim("solo-gpu-x1", exactly("gpu"), uid="uid-solo-gpu").dump()
    generated["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "Pod", "name": "solo", "uid": "uid-solo", "controller": True}
    ]
    claim_api.add(parse_resource(ResourceClaim, generated))
    clock.now += scheduler.settings.backoff_initial_seconds
    await run_due(scheduler)
    assert scheduler.attempts[key].code is Code.SUCCESS and list(pod_api.pods) == ["ns/solo"]
