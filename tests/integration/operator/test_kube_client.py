"""kube/: the shared session, strict patches, bindings and the pod port against the API emulator."""

from __future__ import annotations

import kopf
import pytest
from aiohttp import web
from kube_harness import NAMESPACE, pod_manifest

from lockstep.kube.client import PODS, ApiError, KubeClient
from lockstep.kube.patching import loose_merge_patch, strict_merge_patch
from lockstep.kube.ports import KubePodAPI
from lockstep.scheduler.ports import BindResult, PatchResult


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

    async def reload() -> kopf.ConnectionInfo:
        nonlocal reloads
        reloads += 1
        return kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="rotated")

    client = KubeClient(
        kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="expired"), refresh_credentials=reload
    )
    try:
        assert (await client.get(PODS, "ns", "p"))["metadata"]["name"] == "p"
        assert seen == ["Bearer expired", "Bearer rotated"] and reloads == 1
        # Without a way to reload, the 401 is reported as it is.
        static = KubeClient(kopf.ConnectionInfo(server=f"http://127.0.0.1:{port}", token="expired"))
        with pytest.raises(ApiError) as caught:
            await static.get(PODS, "ns", "p")
        assert caught.value.status == 401 and "bad token" in str(caught.value)
        await static.close()
    finally:
        await client.close()
        await runner.cleanup()
