"""The emulator through kubernetes_asyncio, the client library lockstep's kube/ layer uses."""

from __future__ import annotations

from pathlib import Path

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config
from kubernetes_asyncio.client.rest import ApiException
from sim_helpers import NS, Client, pod

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.kubeconfig import write_kubeconfig


async def test_stale_resource_version_patch_raises_409(client: Client, server: ApiServer) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    stale = created["metadata"]["resourceVersion"]
    await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, "application/merge-patch+json"
    )
    configuration = k8s.Configuration(host=server.url)
    async with k8s.ApiClient(configuration) as api_client:
        core = k8s.CoreV1Api(api_client)
        with pytest.raises(ApiException) as raised:
            await core.patch_namespaced_pod(
                "a",
                "default",
                {"metadata": {"resourceVersion": stale, "labels": {"x": "2"}}},
                _content_type="application/merge-patch+json",
            )
        assert raised.value.status == 409
        current = await core.read_namespaced_pod("a", "default")
        assert current.metadata.labels == {"x": "1"}
        patched = await core.patch_namespaced_pod(
            "a",
            "default",
            {"metadata": {"resourceVersion": current.metadata.resource_version, "labels": {"x": "2"}}},
            _content_type="application/merge-patch+json",
        )
        assert patched.metadata.labels == {"x": "2"}


async def test_written_kubeconfig_reaches_the_server(server: ApiServer, tmp_path: Path) -> None:
    path = write_kubeconfig(server.url, tmp_path / "config")
    configuration = k8s.Configuration()
    await config.load_kube_config(config_file=str(path), client_configuration=configuration)
    async with k8s.ApiClient(configuration) as api_client:
        namespaces = await k8s.CoreV1Api(api_client).list_namespace()
    assert "default" in [n.metadata.name for n in namespaces.items]
