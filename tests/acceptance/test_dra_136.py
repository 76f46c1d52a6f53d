"""The DRA features Kubernetes 1.36 turns on, end to end on the emulator with the operator running:
device taints, partitionable devices, binding conditions, consumable capacity, DRA extended resources.

Each test publishes a pool of the simulated driver with the devices it needs and a DeviceClass that
selects only them (by the ``kind`` attribute), so the driver's plain GPUs stay out of the way."""

from __future__ import annotations

from typing import Any

from acceptance_harness import NAMESPACE, Env, eventually, pod, podgroup, simulated_cluster

from lockstep.api.podgroup import CONDITION_SCHEDULED
from lockstep.kube.client import DEVICE_CLASSES, PODS, RESOURCE_CLAIMS, RESOURCE_SLICES
from lockstep.sim.controllers.dra_driver import DRIVER_NAME


async def publish(
    env: Env, kind: str, devices: list[dict[str, Any]], counters: dict[str, str] | None = None
) -> None:
    """A pool ``kind`` of the simulated driver on the first node (with a counters slice when given) and
    the DeviceClass ``kind`` selecting its devices."""
    node = env.cluster.node_names[0]
    for device in devices:
        device.setdefault("attributes", {})["kind"] = {"string": kind}
    slices = [("devices", {"devices": devices})]
    if counters is not None:
        shared = [{"name": "gpu0", "counters": {k: {"value": v} for k, v in counters.items()}}]
        slices.append(("counters", {"sharedCounters": shared}))
    for suffix, content in slices:
        spec = {
            "driver": DRIVER_NAME,
            "nodeName": node,
            "pool": {"name": kind, "generation": 1, "resourceSliceCount": len(slices)},
            **content,
        }
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{kind}-{suffix}"},
            "spec": spec,
        }
        await env.client.create(RESOURCE_SLICES, None, body)
    attributes = f'device.attributes["{DRIVER_NAME}"]'
    selector = f'device.driver == "{DRIVER_NAME}" && "kind" in {attributes} && {attributes}.kind == "{kind}"'
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": kind},
        "spec": {"selectors": [{"cel": {"expression": selector}}]},
    }
    await env.client.create(DEVICE_CLASSES, None, device_class)


def device_claim(name: str, device_class: str, **request: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [{"name": "dev", "exactly": {"deviceClassName": device_class, **request}}]
            }
        },
    }


async def member(env: Env, name: str, group: str, device_class: str, **request: Any) -> None:
    await env.create(device_claim(name, device_class, **request))
    await env.create(pod(name, group, claims=[{"name": "dev", "resourceClaimName": name}]))


async def allocated_device(env: Env, claim_name: str) -> str | None:
    allocation = ((await env.claim(claim_name)).get("status") or {}).get("allocation")
    return allocation["devices"]["results"][0]["device"] if allocation else None


async def scheduling_message(env: Env, name: str) -> str:
    [found] = [p for p in await env.pods() if p["metadata"]["name"] == name]
    conditions = (found.get("status") or {}).get("conditions") or []
    return next((c.get("message", "") for c in conditions if c["type"] == "PodScheduled"), "")


async def reason_saying(env: Env, name: str, text: str, within: float = 20.0) -> str:
    """The pod's PodScheduled message once it says ``text``. An earlier verdict may say something else
    (a claim not yet in the informer is "not found", as kube-scheduler would say); its arrival retries."""
    last = [""]

    async def says() -> bool:
        last[0] = await scheduling_message(env, name)
        return text in last[0]

    try:
        await eventually(says, within=within, what=f"pod {name}'s reason to say {text!r}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}; its last reason: {last[0]!r}") from None
    return last[0]


async def test_a_tainted_device_is_skipped_and_a_tolerating_request_gets_it() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        sick = {
            "name": "sick",
            "taints": [{"key": "example.com/unhealthy", "value": "true", "effect": "NoSchedule"}],
        }
        await publish(env, "taint", [{"name": "healthy"}, sick])
        for name in ("a", "b"):
            await env.create(podgroup(name, 1))
            await member(env, name, name, "taint")
        await eventually(lambda: env.bound("a"), what="pod a bound")
        assert await allocated_device(env, "a") == "healthy"
        await reason_saying(env, "b", "device sick tainted example.com/unhealthy:NoSchedule")
        assert await env.bound("b") == 0
        await env.create(podgroup("c", 1))
        await member(
            env, "c", "c", "taint", tolerations=[{"key": "example.com/unhealthy", "operator": "Exists"}]
        )
        await eventually(lambda: env.bound("c"), what="the tolerating pod bound")
        assert await allocated_device(env, "c") == "sick"


async def test_two_partitions_of_one_counter_are_never_allocated_together() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        partitions = [
            {
                "name": f"half-{i}",
                "consumesCounters": [{"counterSet": "gpu0", "counters": {"memory": {"value": "40Gi"}}}],
            }
            for i in range(2)
        ]
        await publish(env, "part", partitions, counters={"memory": "40Gi"})
        await env.create(podgroup("gang", 2))
        for name in ("g0", "g1"):
            await member(env, name, "gang", "part")
        await reason_saying(env, "g1", 'counter "memory" in counter set "gpu0"')
        assert await env.bound("gang") == 0
        await env.create(podgroup("one", 1))
        await member(env, "single", "one", "part")
        await eventually(lambda: env.bound("one"), what="a single partition bound")
        await env.create(podgroup("two", 1))
        await member(env, "second", "two", "part")
        await reason_saying(env, "second", "0 left")
        assert await env.bound("two") == 0


def fabric(name: str, fails: bool = False) -> dict[str, Any]:
    return {
        "name": name,
        "bindsToNode": True,
        "bindingConditions": ["example.com/attached"],
        "bindingFailureConditions": ["example.com/attach-failed"],
        "attributes": {"attachFails": {"bool": fails}},
    }


async def test_a_binding_condition_delays_the_gang_then_allows_it() -> None:
    # The driver attaches after the status writer's settle window (2 s), so the wait shows in the status.
    async with simulated_cluster(nodes=1, devices_per_node=1, attach_seconds=4.0) as env:
        await publish(env, "fabric", [fabric("f0"), fabric("f1")])
        await env.create(podgroup("gang", 2))
        for name in ("m0", "m1"):
            await member(env, name, "gang", "fabric")
        await eventually(lambda: allocated_device(env, "m0"), what="m0 allocated")
        assert await env.bound("gang") == 0  # allocated, waiting for the driver to attach
        message = await eventually(lambda: scheduled_message(env, "gang"), what="the wait in the status")
        assert "waiting for binding conditions" in message and "example.com/attached" in message
        await eventually(lambda: all_bound(env, "gang", 2), what="the gang bound after attaching")
        status = (await env.claim("m0"))["status"]
        [device] = status["devices"]
        assert device["conditions"][0]["type"] == "example.com/attached"


async def scheduled_message(env: Env, group: str) -> str:
    """The PodGroup's Scheduled condition message while it says what binding waits for."""
    conditions = (await env.podgroup_status(group)).get("conditions") or []
    message = next((c.get("message", "") for c in conditions if c.get("type") == CONDITION_SCHEDULED), "")
    return message if "binding" in message else ""


async def all_bound(env: Env, group: str, count: int) -> bool:
    return await env.bound(group) == count


async def test_a_failing_binding_condition_retries_the_whole_gang() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        await publish(env, "fabric", [fabric("bad", fails=True)])
        await env.create(podgroup("gang", 2))
        await member(env, "m0", "gang", "fabric")
        await env.create(pod("m1", "gang"))  # no claim: it must not bind without m0
        await reason_saying(
            env, "m1", "binding failure condition example.com/attach-failed is True", within=30
        )
        assert await env.bound("gang") == 0
        # The allocation was cleared for the retry, which fails the same way: nothing ever binds.
        await eventually(lambda: allocated_device(env, "m0"), within=30, what="m0 allocated again")
        assert await env.bound("gang") == 0


async def test_multi_allocation_fills_a_device_up_to_its_capacity_and_no_further() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        nic = {"name": "nic", "allowMultipleAllocations": True, "capacity": {"bandwidth": {"value": "100G"}}}
        await publish(env, "nic", [nic])
        for i in range(5):
            await env.create(podgroup(f"n{i}", 1))
            await member(env, f"n{i}", f"n{i}", "nic", capacity={"requests": {"bandwidth": "25G"}})
        bound = await eventually(
            lambda: _count_bound(env, [f"n{i}" for i in range(5)], 4), what="four shares bound"
        )
        assert bound == 4
        claims = [(await env.claim(f"n{i}"))["status"].get("allocation") for i in range(5)]
        shares = [a["devices"]["results"][0] for a in claims if a]
        assert len(shares) == 4 and all(s["consumedCapacity"] == {"bandwidth": "25G"} for s in shares)
        assert len({s["shareID"] for s in shares}) == 4


async def _count_bound(env: Env, groups: list[str], at_least: int) -> int:
    count = sum([await env.bound(group) for group in groups])
    return count if count >= at_least else 0


def extended_resource_pod(name: str, group: str, gpus: int) -> dict[str, Any]:
    body = pod(name, group)
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"]["example.com/gpu"] = str(gpus)
    resources["limits"] = {"example.com/gpu": str(gpus)}
    return body


async def test_an_extended_resource_pod_gets_a_device_through_a_claim_of_its_own() -> None:
    """A gang of two asking for ``example.com/gpu: 1`` each, on a node that does not advertise it: each
    member gets its own claim of the class's devices, as kube-scheduler makes them; a third pod finds
    none left and says why; the claims go away with their pods."""
    async with simulated_cluster(nodes=1, devices_per_node=2) as env:
        device_class = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "ext"},
            "spec": {
                "selectors": [{"cel": {"expression": f'device.driver == "{DRIVER_NAME}"'}}],
                "extendedResourceName": "example.com/gpu",
            },
        }
        await env.client.create(DEVICE_CLASSES, None, device_class)
        await env.create(podgroup("gang", 2))
        for name in ("m0", "m1"):
            await env.create(extended_resource_pod(name, "gang", 1))
        await eventually(lambda: _count_bound(env, ["gang"], 2), what="the gang bound")
        devices = set()
        for member in await env.pods("gang"):
            claim_status = member["status"]["extendedResourceClaimStatus"]
            assert claim_status["requestMappings"] == [
                {
                    "containerName": "main",
                    "resourceName": "example.com/gpu",
                    "requestName": "container-0-request-1",
                }
            ]
            claim = await env.claim(claim_status["resourceClaimName"])
            meta = claim["metadata"]
            assert meta["annotations"] == {"resource.kubernetes.io/extended-resource-claim": "true"}
            assert [(o["kind"], o["name"], o.get("controller")) for o in meta["ownerReferences"]] == [
                ("Pod", member["metadata"]["name"], True)
            ]
            assert [r["uid"] for r in claim["status"]["reservedFor"]] == [member["metadata"]["uid"]]
            [result] = claim["status"]["allocation"]["devices"]["results"]
            devices.add(result["device"])
        assert devices == {"gpu-0", "gpu-1"}
        await eventually(
            lambda: _all_running(env, "gang"), what="the kubelet started the members with their devices"
        )
        await env.create(podgroup("late", 1))
        await env.create(extended_resource_pod("late", "late", 1))
        await reason_saying(env, "late", "late-extended-resources")
        assert await env.bound("late") == 0
        for name in ("m0", "m1"):
            await env.client.delete(PODS, NAMESPACE, name)
        await eventually(lambda: env.bound("late"), what="the late pod bound to a freed device")
        claims = (await env.client.list(RESOURCE_CLAIMS, NAMESPACE)).get("items") or []
        owners = {o["name"] for c in claims for o in c["metadata"].get("ownerReferences") or []}
        assert owners == {"late"}, "the deleted members' claims went away with them"


async def _all_running(env: Env, group: str) -> bool:
    return all((p.get("status") or {}).get("phase") == "Running" for p in await env.pods(group))
