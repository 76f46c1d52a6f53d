"""Claim delete-protection: lockstep puts ``resource.kubernetes.io/delete-protection`` on a claim before
it writes the allocation (as kube-scheduler's PreBind does), so a claim whose devices are in use
survives its deletion until its pods are gone; the simulated resourceclaim controller then
deallocates it and drops the finalizer, and only then can the device go to another claim."""

from __future__ import annotations

import asyncio

from acceptance_harness import GPU_TEMPLATE, NAMESPACE, claim, eventually, pod, podgroup, simulated_cluster

from lockstep.api.resource import DELETE_PROTECTION_FINALIZER
from lockstep.kube.client import PODS, RESOURCE_CLAIMS, ApiError
from lockstep.sim.invariants import check_devices_allocated_once, fetch_cluster_state


async def test_a_deleted_claim_shared_by_a_running_gang_stays_until_its_pods_are_gone() -> None:
    # One node with one device: a second claim can only get it once the first is deallocated.
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        shared = [{"name": "gpu", "resourceClaimName": "shared"}]
        await env.create(claim("shared"))
        await env.create(podgroup("first", 3))
        for i in range(3):
            await env.create(pod(f"first-{i}", "first", cpu="100m", claims=shared))

        async def running() -> bool:
            pods = await env.pods("first")
            return len(pods) == 3 and all(p.get("status", {}).get("phase") == "Running" for p in pods)

        await eventually(running, what="the first gang running")
        written = await env.claim("shared")
        assert written["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert len(written["status"]["reservedFor"]) == 3

        await env.client.delete(RESOURCE_CLAIMS, NAMESPACE, "shared")
        # Another gang wants the device meanwhile.
        await env.create(claim("next"))
        await env.create(podgroup("second", 1))
        next_claim = [{"name": "gpu", "resourceClaimName": "next"}]
        await env.create(pod("second-0", "second", cpu="100m", claims=next_claim))

        async def devices_allocated_once() -> None:
            async with env.cluster_session() as (session, url):
                state = await fetch_cluster_state(session, url)
            assert check_devices_allocated_once(state.claims) == []

        for _ in range(10):
            deleting = await env.claim("shared")
            assert deleting["metadata"].get("deletionTimestamp")
            assert deleting["status"]["allocation"] and len(deleting["status"]["reservedFor"]) == 3
            assert not (await env.claim("next")).get("status", {}).get("allocation")
            await devices_allocated_once()
            await asyncio.sleep(0.1)

        for i in range(3):
            await env.client.delete(PODS, NAMESPACE, f"first-{i}")

        async def shared_gone() -> bool:
            try:
                await env.claim("shared")
            except ApiError as exc:
                return exc.not_found
            return False

        await eventually(shared_gone, what="the deleted claim to go once its pods are gone")
        assert await env.pods("first") == []  # it went only after every pod of the gang

        async def second_bound() -> bool:
            return await env.bound("second") == 1

        await eventually(second_bound, what="the second gang to get the freed device")
        await devices_allocated_once()
        assert (await env.claim("next"))["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        assert await env.invariant_violations() == []


async def test_a_generated_claim_goes_with_its_pod_despite_the_finalizer() -> None:
    async with simulated_cluster(nodes=1, devices_per_node=1) as env:
        await env.create(GPU_TEMPLATE)
        await env.create(pod("solo", claims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]))

        async def generated() -> str:
            solo = await env.client.get(PODS, NAMESPACE, "solo")
            statuses = solo.get("status", {}).get("resourceClaimStatuses") or []
            return (
                str(statuses[0].get("resourceClaimName") or "")
                if statuses and solo["spec"].get("nodeName")
                else ""
            )

        name = await eventually(generated, what="the pod bound with its generated claim")
        assert (await env.claim(name))["metadata"]["finalizers"] == [DELETE_PROTECTION_FINALIZER]
        await env.client.delete(PODS, NAMESPACE, "solo")

        async def claim_gone() -> bool:
            try:
                await env.claim(name)
            except ApiError as exc:
                return exc.not_found
            return False

        # Reservation dropped, allocation cleared, finalizer removed, claim deleted (the controller).
        await eventually(claim_gone, what="the generated claim to go with its pod")
