"""kube/: the shared session, strict patches, bindings and the pod port against the API emulator."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from kube_harness import NAMESPACE, pod_manifest

from lockstep.kube.client import PODS, ApiError, ConnectionInfo, KubeClient
from lockstep.kube.patching import loose_merge_patch, post_binding, strict_merge_patch
from lockstep.kube.ports import KubePodAPI
from lockstep.scheduler.ports import BINDING_CYCLE, BindResult, PatchResult
from lockstep.sim.apiserver import ApiServer
from lockstep.sim.faults import FaultRule


async def test_errors_name_the_verb_the_object_and_the_api_message(kube: KubeClient) -> None:
    with pytest.raises(ApiError) as caught:
        await kube.get(PODS, NAMESPACE, "missing")
    assert caught.value.not_found
    assert str(caught.value).startswith(f"GET pods {NAMESPACE}/missing: 404 NotFound:")
    assert "missing" in caught.value.api_message


async def test_strict_patch_fails_on_a_stale_resource_version_and_loose_patch_does_not(
    kube: KubeClient,
) -> None:
    created = await kube.create(PODS, NAMESPACE, pod_manifest("p"))
    stale = created["metadata"]["resourceVersion"]
    await loose_merge_patch(kube, PODS, NAMESPACE, "p", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(ApiError) as caught:
        await strict_merge_patch(kube, PODS, NAMESPACE, "p", stale, {"metadata": {"labels": {"b": "2"}}})
    assert caught.value.conflict
    fresh = (await kube.get(PODS, NAMESPACE, "p"))["metadata"]["resourceVersion"]
    patched = await strict_merge_patch(
        kube, PODS, NAMESPACE, "p", fresh, {"metadata": {"labels": {"b": "2"}}}
    )
    assert patched["metadata"]["labels"] == {"a": "1", "b": "2"}
    with pytest.raises(ValueError, match="needs a resourceVersion"):
        await strict_merge_patch(kube, PODS, NAMESPACE, "p", "", {})


async def test_binding_outcomes(kube: KubeClient) -> None:
    api = KubePodAPI(kube)
    await kube.create(PODS, NAMESPACE, pod_manifest("b"))
    pod = await api.get_pod(NAMESPACE, "b")
    assert pod is not None and pod.node_name == ""

    assert (await api.bind(pod, "node-1")).result is BindResult.BOUND
    bound = await api.get_pod(NAMESPACE, "b")
    assert bound is not None and bound.node_name == "node-1"
    # The same binding again (an earlier answer lost): recognised as already done.
    assert (await api.bind(pod, "node-1")).result is BindResult.ALREADY_BOUND
    # Another node: a lost race.
    assert (await api.bind(pod, "node-2")).result is BindResult.CONFLICT
    gone = pod.__class__(uid="nope", namespace=NAMESPACE, name="gone")
    assert (await api.bind(gone, "node-1")).result is BindResult.NOT_FOUND
    assert await api.get_pod(NAMESPACE, "gone") is None


async def test_pod_failure_patch_is_strict(kube: KubeClient) -> None:
    """Behaviour 3 at the port: a PodScheduled=False patch at an old resourceVersion is refused."""
    api = KubePodAPI(kube)
    await kube.create(PODS, NAMESPACE, pod_manifest("c"))
    pod = await api.get_pod(NAMESPACE, "c")
    assert pod is not None
    before_binding = pod.resource_version
    assert (await api.bind(pod, "node-1")).result is BindResult.BOUND

    outcome = await api.patch_pod_unschedulable(pod, before_binding, "Unschedulable", "no fit")
    assert outcome.result is PatchResult.CONFLICT
    raw = await kube.get(PODS, NAMESPACE, "c")
    scheduled = [c for c in raw["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    assert [c["status"] for c in scheduled] == ["True"]

    await kube.create(PODS, NAMESPACE, pod_manifest("d"))
    pending = await api.get_pod(NAMESPACE, "d")
    assert pending is not None
    outcome = await api.patch_pod_unschedulable(
        pending, pending.resource_version, "Unschedulable", "0/3 nodes"
    )
    assert outcome.result is PatchResult.OK
    raw = await kube.get(PODS, NAMESPACE, "d")
    condition = next(c for c in raw["status"]["conditions"] if c["type"] == "PodScheduled")
    assert (condition["status"], condition["reason"], condition["message"]) == (
        "False",
        "Unschedulable",
        "0/3 nodes",
    )


async def test_a_401_reloads_rotated_credentials_and_retries_once() -> None:
    """A token server that only accepts the rotated token: the client reloads and succeeds."""
    seen: list[str] = []

    async def handle(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != "Bearer rotated":
            return web.json_response(
                {"kind": "Status", "reason": "Unauthorized", "message": "bad token"}, status=401
            )
        return web.json_response({"kind": "Pod", "metadata": {"name": "p"}})

    app = web.Application()
    app.router.add_get("/api/v1/namespaces/ns/pods/p", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    reloads = 0

    async def reload() -> ConnectionInfo:
        nonlocal reloads
        reloads += 1
        return ConnectionInfo(server=f"http://127.0.0.1:{port}", token="rotated")

    client = KubeClient(
        ConnectionInfo(server=f"http://127.0.0.1:{port}", token="expired"), refresh_credentials=reload
    )
    try:
        assert (await client.get(PODS, "ns", "p"))["metadata"]["name"] == "p"
        assert seen == ["Bearer expired", "Bearer rotated"] and reloads == 1
        # Without a way to reload, the 401 is reported as it is.
        static = KubeClient(ConnectionInfo(server=f"http://127.0.0.1:{port}", token="expired"))
        with pytest.raises(ApiError) as caught:
            await static.get(PODS, "ns", "p")
        assert caught.value.status == 401 and "bad token" in str(caught.value)
        await static.close()
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_request_waiting_for_a_connection_is_not_overtaken_by_later_ones(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    """Requests get connections in the order they asked: with every connection busy, a request that
    waits goes before requests made after it. (aiohttp's own pool hands a freed connection to whoever
    asks next: a binding of a gang member was re-queued dozens of times, up to 2.7 s, while its
    siblings, sent at the same moment, found connections at once.)"""
    apiserver.faults.add(FaultRule(verb="get", resource="pods", latency=0.005))
    async with KubeClient(ConnectionInfo(server=apiserver.url, insecure=True), connection_limit=2) as client:
        await kube.create(PODS, NAMESPACE, pod_manifest("busy"))
        answered: list[str] = []

        async def keep_busy(lane: int) -> None:
            for i in range(40):
                await client.get(PODS, NAMESPACE, "busy")
                answered.append(f"lane {lane} request {i}")

        lanes = [asyncio.create_task(keep_busy(lane)) for lane in range(2)]
        await asyncio.sleep(0.05)  # both connections taken, and taken again as soon as they free up
        asked_after = len(answered)
        await client.get(PODS, NAMESPACE, "busy")
        overtaken_by = len(answered) - asked_after
        await asyncio.gather(*lanes)
    # at most the two requests on the wire when it asked, and one more each whose turn came first
    assert overtaken_by <= 4, f"{overtaken_by} later requests were answered before the waiting one"


async def test_bindings_go_before_waiting_prebind_writes_and_those_go_in_placement_order(
    apiserver: ApiServer, kube: KubeClient
) -> None:
    """With every connection busy, a binding takes the next free one before any waiting request of a
    binding cycle, and those go earliest placement first, whatever order they asked in. (First come,
    first served, 5,000 claim writes went out before all but 216 of 5,000 bindings.)"""
    apiserver.faults.add(FaultRule(verb="get", resource="pods", latency=0.01))
    async with KubeClient(ConnectionInfo(server=apiserver.url, insecure=True), connection_limit=2) as client:
        await kube.create(PODS, NAMESPACE, pod_manifest("busy"))
        await kube.create(PODS, NAMESPACE, pod_manifest("bind-me"))
        answered: list[str] = []

        async def prebind_write(placement: int) -> None:
            BINDING_CYCLE.set((placement, 0))
            await client.get(PODS, NAMESPACE, "busy")
            answered.append(f"placement {placement}")

        async def binding() -> None:
            await post_binding(client, NAMESPACE, "bind-me", "", "node-1")
            answered.append("binding")

        # later placements ask first; the binding asks last of all
        writes = [asyncio.create_task(prebind_write(placement)) for placement in range(10, 0, -1)]
        await asyncio.sleep(0.002)
        await asyncio.gather(binding(), *writes)
    # the two that found free connections went first; then the binding, then placements 1, 2, ...
    assert answered.index("binding") <= 2, answered
    waited = [entry for entry in answered[2:] if entry != "binding"]
    assert waited == sorted(waited, key=lambda entry: int(entry.split()[1])), answered
