from __future__ import annotations

import sys
from pathlib import Path

# The acceptance harness (simulated cluster + in-process operator) is shared with tests/acceptance/.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "acceptance"))

from collections.abc import AsyncIterator

import pytest
from kube_harness import NAMESPACE, ensure_namespace

from lockstep.kube.client import ConnectionInfo, KubeClient
from lockstep.sim.apiserver import ApiServer


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer(host="127.0.0.1", port=0)
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kube(apiserver: ApiServer) -> AsyncIterator[KubeClient]:
    client = KubeClient(ConnectionInfo(server=apiserver.url, insecure=True))
    await ensure_namespace(client, NAMESPACE)
    try:
        yield client
    finally:
        await client.close()
