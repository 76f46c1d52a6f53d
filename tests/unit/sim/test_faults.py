"""Fault injection (Python API and /__sim admin endpoint) and request counters."""

from __future__ import annotations

import asyncio

import pytest
from sim_helpers import NS, Client, pod

from lockstep.sim.apiserver import ApiServer
from lockstep.sim.faults import FaultRule


def binding(name: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name},
        "target": {"kind": "Node", "name": "n1"},
    }


async def test_next_n_failures_then_success(client: Client, server: ApiServer) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    server.faults.add(FaultRule(verb="create", resource="pods", subresource="binding", status=500, count=2))
    for _ in range(2):
        status, body, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
        assert status == 500 and body["kind"] == "Status" and body["code"] == 500
    status, _, _ = await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
    assert status == 201


async def test_429_carries_retry_after_and_409_is_a_conflict_status(
    client: Client, server: ApiServer
) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    server.faults.add(
        FaultRule(verb="get", resource="pods", name="a", status=429, count=1, retry_after_seconds=3)
    )
    status, body, headers = await client.call("GET", f"{NS}/pods/a")
    assert (status, headers["Retry-After"], body["reason"]) == (429, "3", "TooManyRequests")
    server.faults.add(FaultRule(verb="patch", resource="pods", subresource="status", status=409, count=1))
    status, body, _ = await client.call(
        "PATCH", f"{NS}/pods/a/status", {"status": {}}, "application/merge-patch+json"
    )
    assert (status, body["reason"], body["details"]["name"]) == (409, "Conflict", "a")
    status, _, _ = await client.call("GET", f"{NS}/pods/a")
    assert status == 200, "rules only match their own verb/resource/name and their count is spent"


async def test_probability_and_clear(client: Client, server: ApiServer) -> None:
    server.faults.rng.seed(7)
    server.faults.add(FaultRule(verb="list", resource="pods", status=500, probability=0.5))
    statuses = [(await client.call("GET", f"{NS}/pods"))[0] for _ in range(40)]
    assert 5 < statuses.count(500) < 35 and statuses.count(200) > 5
    server.faults.clear()
    assert (await client.call("GET", f"{NS}/pods"))[0] == 200


async def test_latency_is_added(client: Client, server: ApiServer) -> None:
    server.faults.add(FaultRule(verb="get", resource="namespaces", latency=0.2, latency_max=0.25))
    loop = asyncio.get_running_loop()
    started = loop.time()
    assert (await client.call("GET", "/api/v1/namespaces/default"))[0] == 200
    assert loop.time() - started >= 0.2


def test_rules_reject_bad_values() -> None:
    with pytest.raises(ValueError, match="status"):
        FaultRule(status=418)
    with pytest.raises(ValueError, match="probability"):
        FaultRule(status=500, probability=2)
    with pytest.raises(ValueError, match="unknown fault rule field"):
        FaultRule.from_json({"verbs": "get"})


async def test_admin_endpoint_adds_lists_and_clears_rules(client: Client) -> None:
    status, rule, _ = await client.call(
        "POST", "/__sim/faults", {"verb": "delete", "resource": "pods", "status": 500, "count": 1}
    )
    assert status == 200 and rule["id"] >= 1
    _, listed, _ = await client.call("GET", "/__sim/faults")
    assert [r["verb"] for r in listed["rules"]] == ["delete"]
    await client.call("POST", f"{NS}/pods", pod("a"))
    assert (await client.call("DELETE", f"{NS}/pods/a"))[0] == 500
    await client.call("POST", "/__sim/faults", {"verb": "get", "status": 500})
    await client.call("DELETE", "/__sim/faults")
    assert (await client.call("GET", f"{NS}/pods/a"))[0] == 200
    status, error, _ = await client.call("POST", "/__sim/faults", {"status": 418})
    assert status == 400 and "status" in error["error"]


async def test_drop_watches_and_compact_through_the_admin_endpoint(client: Client, server: ApiServer) -> None:
    async def watch() -> int:
        async with client.session.get(
            client.url + f"{NS}/pods", params={"watch": "true", "timeoutSeconds": "30"}
        ) as resp:
            await resp.read()
            return resp.status

    task = asyncio.create_task(watch())
    for _ in range(500):
        if server.stores["/pods"].watchers:
            break
        await asyncio.sleep(0.01)
    _, dropped, _ = await client.call("POST", "/__sim/faults", {"action": "drop_watches"})
    assert dropped == {"dropped": 1}
    assert await asyncio.wait_for(task, 5) == 200
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call(
        "PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, "application/merge-patch+json"
    )
    _, compacted, _ = await client.call("POST", "/__sim/faults", {"action": "compact"})
    assert int(compacted["compactedAt"]) >= int(created["metadata"]["resourceVersion"])
    events = await client.watch(
        f"{NS}/pods", {"resourceVersion": created["metadata"]["resourceVersion"], "timeoutSeconds": "1"}
    )
    assert events[0]["type"] == "ERROR" and events[0]["object"]["code"] == 410


async def test_periodic_watch_drops(client: Client, server: ApiServer) -> None:
    server.drop_watches_every(0.2)
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client.session.get(
        client.url + f"{NS}/pods", params={"watch": "true", "timeoutSeconds": "30"}
    ) as resp:
        await resp.read()
    assert loop.time() - started < 5
    server.drop_watches_every(None)


async def test_request_counters(client: Client, server: ApiServer) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call("POST", f"{NS}/pods/a/binding", binding("a"))
    await client.call("PATCH", f"{NS}/pods/a/status", {"status": {}}, "application/merge-patch+json")
    await client.call("GET", f"{NS}/pods")
    assert server.stats() == {
        "create pods": 1,
        "create pods/binding": 1,
        "list pods": 1,
        "patch pods/status": 1,
    }
    _, stats, _ = await client.call("GET", "/__sim/stats")
    assert stats["writes"] == 3
    await client.call("DELETE", "/__sim/stats")
    assert server.stats() == {}
