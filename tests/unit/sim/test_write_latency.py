"""``ApiServer(write_latency=...)`` (``lockstep sim --write-latency-ms``): each write waits before it is
applied, as kube-apiserver's waits for etcd's commit, without holding up anyone else's requests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from sim_helpers import NS, Client, pod

from lockstep.cli import main
from lockstep.sim.apiserver import ApiServer

LATENCY = 0.5


@pytest.fixture
async def slow_writes() -> AsyncIterator[Client]:
    api = ApiServer(write_latency=LATENCY)
    await api.start()
    async with aiohttp.ClientSession() as session:
        yield Client(session, api.url)
    await api.stop()


async def test_a_write_is_applied_and_answered_after_the_latency_while_reads_go_on(
    slow_writes: Client,
) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    create = asyncio.create_task(slow_writes.call("POST", f"{NS}/pods", pod("a")))
    await asyncio.sleep(LATENCY / 3)
    status, listing, _ = await slow_writes.call("GET", f"{NS}/pods")
    assert status == 200 and loop.time() - started < LATENCY, "a read does not wait for a write"
    assert listing["items"] == [], "the write is not applied before its latency is over"
    status, created, _ = await create
    assert status == 201 and loop.time() - started >= LATENCY
    _, got, _ = await slow_writes.call("GET", f"{NS}/pods/a")
    assert got["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_concurrent_writes_wait_together_and_keep_their_order(slow_writes: Client) -> None:
    assert (await slow_writes.call("POST", f"{NS}/pods", pod("a")))[0] == 201
    loop = asyncio.get_running_loop()
    started = loop.time()
    patches = []
    for value in range(8):
        patches.append(
            asyncio.create_task(
                slow_writes.call(
                    "PATCH",
                    f"{NS}/pods/a",
                    {"metadata": {"labels": {"n": str(value)}}},
                    "application/merge-patch+json",
                )
            )
        )
        await asyncio.sleep(0.01)
    answers = await asyncio.gather(*patches)
    assert loop.time() - started < 4 * LATENCY, "writes wait side by side, as etcd pipelines commits"
    versions = [int(body["metadata"]["resourceVersion"]) for _, body, _ in answers]
    assert versions == sorted(versions) and len(set(versions)) == 8, "applied in the order they came"
    _, got, _ = await slow_writes.call("GET", f"{NS}/pods/a")
    assert got["metadata"]["labels"]["n"] == "7"


async def test_deletes_wait_too(slow_writes: Client) -> None:
    assert (await slow_writes.call("POST", f"{NS}/pods", pod("a")))[0] == 201
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await slow_writes.call("DELETE", f"{NS}/pods/a"))[0] == 200
    assert loop.time() - started >= LATENCY


def test_negative_latency_is_refused() -> None:
    with pytest.raises(ValueError, match="write_latency"):
        ApiServer(write_latency=-0.001)


def test_sim_refuses_a_negative_write_latency(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "--write-latency-ms", "-5"]) == 2
    assert "--write-latency-ms must not be negative, got -5.0" in capsys.readouterr().err
