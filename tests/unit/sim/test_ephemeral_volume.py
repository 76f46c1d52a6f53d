"""Generic ephemeral volumes in the emulator: the pod's ``volumeClaimTemplate`` is validated and
defaulted as kube-apiserver does, and the simulated ephemeral volume controller (kube-controller-manager's
``pkg/controller/volume/ephemeral``) creates each volume's claim ``<pod>-<volume>`` owned by the pod,
leaves a claim it did not create alone (with a FailedBinding event), and the claim goes with the pod."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from sim_helpers import NS, Client, pod, wait_for

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.controllers.ephemeral_volume import EphemeralVolumeController
from lockstep.sim.controllers.persistentvolume import PersistentVolumeController
from lockstep.sim.watching import Informer, KubeHttp

PVCS = f"{NS}/persistentvolumeclaims"
MERGE = "application/merge-patch+json"


def scratch_pod(name: str, **template: Any) -> dict[str, Any]:
    claim_template = {
        "metadata": {"labels": {"app": "train"}, "annotations": {"note": "scratch"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "local",
            "resources": {"requests": {"storage": "1Gi"}},
        },
        **template,
    }
    return pod(name, volumes=[{"name": "scratch", "ephemeral": {"volumeClaimTemplate": claim_template}}])


@pytest.fixture
async def controllers(server: ApiServer) -> AsyncIterator[None]:
    async with aiohttp.ClientSession() as session:
        http = KubeHttp(server.url, session)
        pods = Informer(http, "/api/v1/pods")
        pvcs = Informer(http, "/api/v1/persistentvolumeclaims")
        pvs = Informer(http, "/api/v1/persistentvolumes")
        parts = [
            EphemeralVolumeController(http, pods, pvcs),
            PersistentVolumeController(http, pvs, pvcs, pods),
        ]
        for part in parts:
            part.start()
        tasks = [asyncio.create_task(informer.run()) for informer in (pods, pvcs, pvs)]
        yield
        for part in parts:
            await part.stop()
        for task in tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task


async def test_a_claim_template_is_validated_and_defaulted(client: Client) -> None:
    status, answer, _ = await client.call(
        "POST", f"{NS}/pods", pod("p", volumes=[{"name": "scratch", "ephemeral": {}}])
    )
    assert status == 422, answer
    assert answer["details"]["causes"] == [
        {
            "reason": "FieldValueRequired",
            "message": "Required value",
            "field": "spec.volumes[0].ephemeral.volumeClaimTemplate",
        }
    ]
    bad = scratch_pod("p", metadata={"name": "mine", "labels": {"bad key": "x"}})
    bad["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]["spec"]["accessModes"] = []
    status, answer, _ = await client.call("POST", f"{NS}/pods", bad)
    assert status == 422, answer
    where = "spec.volumes[0].ephemeral.volumeClaimTemplate"
    assert [(c["field"], c["reason"]) for c in answer["details"]["causes"]] == [
        (f"{where}.metadata.labels", "FieldValueInvalid"),
        (f"{where}.metadata.name", "FieldValueForbidden"),
        (f"{where}.spec.accessModes", "FieldValueRequired"),
    ]
    assert f"{where}.metadata.name: Forbidden: cannot be set" in answer["message"]
    status, created, _ = await client.call("POST", f"{NS}/pods", scratch_pod("p"))
    assert status == 201, created
    template = created["spec"]["volumes"][0]["ephemeral"]["volumeClaimTemplate"]
    assert template["spec"]["volumeMode"] == "Filesystem"


@pytest.mark.usefixtures("controllers")
async def test_the_controller_creates_the_claim_owned_by_the_pod_and_it_goes_with_the_pod(
    client: Client,
) -> None:
    status, created, _ = await client.call("POST", f"{NS}/pods", scratch_pod("trainer-0"))
    assert status == 201, created

    async def claim_made() -> bool:
        return (await client.call("GET", f"{PVCS}/trainer-0-scratch"))[0] == 200

    await wait_for(claim_made, "the claim to be created")
    _, claim, _ = await client.call("GET", f"{PVCS}/trainer-0-scratch")
    assert claim["metadata"]["labels"] == {"app": "train"}
    assert claim["metadata"]["annotations"] == {"note": "scratch"}
    assert claim["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "trainer-0",
            "uid": created["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert claim["spec"]["storageClassName"] == "local"
    assert claim["spec"]["resources"] == {"requests": {"storage": "1Gi"}}
    assert claim["metadata"]["finalizers"] == ["kubernetes.io/pvc-protection"]

    # deleted by mistake (its protection finalizer taken off first): made again for the pod
    status, _, _ = await client.call(
        "PATCH", f"{PVCS}/trainer-0-scratch", {"metadata": {"finalizers": None}}, MERGE
    )
    assert status == 200
    status, _, _ = await client.call("DELETE", f"{PVCS}/trainer-0-scratch")
    assert status == 200

    async def remade() -> bool:
        status, again, _ = await client.call("GET", f"{PVCS}/trainer-0-scratch")
        return status == 200 and again["metadata"]["uid"] != claim["metadata"]["uid"]

    await wait_for(remade, "the claim to be created again")

    status, _, _ = await client.call("DELETE", f"{NS}/pods/trainer-0")  # unbound: goes at once
    assert status == 200

    async def claim_gone() -> bool:
        return (await client.call("GET", f"{PVCS}/trainer-0-scratch"))[0] == 404

    await wait_for(claim_gone, "the claim to go with the pod")


@pytest.mark.usefixtures("controllers")
async def test_a_claim_the_pod_does_not_own_is_left_alone_with_an_event(client: Client) -> None:
    existing = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "trainer-1-scratch"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "5Gi"}}},
    }
    status, before, _ = await client.call("POST", PVCS, existing)
    assert status == 201, before
    status, _, _ = await client.call("POST", f"{NS}/pods", scratch_pod("trainer-1"))
    assert status == 201

    async def warned() -> bool:
        _, events, _ = await client.call(
            "GET", f"{NS}/events", params={"fieldSelector": "involvedObject.name=trainer-1"}
        )
        return any(e["reason"] == "FailedBinding" for e in events["items"])

    await wait_for(warned, "the FailedBinding event")
    _, events, _ = await client.call(
        "GET", f"{NS}/events", params={"fieldSelector": "involvedObject.name=trainer-1"}
    )
    [event] = events["items"]
    assert event["type"] == "Warning" and event["source"] == {"component": "ephemeral_volume"}
    assert event["message"] == (
        "ephemeral volume scratch: PVC default/trainer-1-scratch was not created for pod "
        "default/trainer-1 (pod is not owner)"
    )
    _, after, _ = await client.call("GET", f"{PVCS}/trainer-1-scratch")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "ownerReferences" not in after["metadata"]

    # The pod does not use a claim it does not own (pvc-protection lets it go); once it is gone the
    # pod's own claim is made.
    status, _, _ = await client.call("DELETE", f"{PVCS}/trainer-1-scratch")
    assert status == 200

    async def own_claim() -> bool:
        status, claim, _ = await client.call("GET", f"{PVCS}/trainer-1-scratch")
        return status == 200 and bool(claim["metadata"].get("ownerReferences"))

    await wait_for(own_claim, "the pod's own claim once the other is gone")
