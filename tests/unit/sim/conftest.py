"""An in-process API server emulator per test, and a client for it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from sim_helpers import PODGROUP_CRD, Client

from lockstep.sim.apiserver import ApiServer


@pytest.fixture
async def server() -> AsyncIterator[ApiServer]:
    api = ApiServer(bookmark_interval=0.2)
    await api.start()
    yield api
    await api.stop()


@pytest.fixture
async def client(server: ApiServer) -> AsyncIterator[Client]:
    async with aiohttp.ClientSession() as session:
        yield Client(session, server.url)


@pytest.fixture
async def podgroup_crd(client: Client) -> None:
    status, body, _ = await client.call(
        "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", PODGROUP_CRD
    )
    assert status == 201, body
