"""LIST paging and resourceVersion semantics; WATCH replay, 410, bookmarks, selectors, slow consumers."""

from __future__ import annotations

import asyncio

import orjson
from sim_helpers import NS, Client, pod

from lockstep.sim.apiserver import ApiServer

MERGE = "application/merge-patch+json"


async def test_limit_and_continue_page_through_a_snapshot(client: Client) -> None:
    for name in ("c", "a", "b"):
        await client.call("POST", f"{NS}/pods", pod(name))
    status, page, _ = await client.call("GET", f"{NS}/pods", params={"limit": "2"})
    assert status == 200
    assert [i["metadata"]["name"] for i in page["items"]] == ["a", "b"]
    assert page["metadata"]["remainingItemCount"] == 1
    assert "kind" not in page["items"][0]
    _, rest, _ = await client.call(
        "GET", f"{NS}/pods", params={"limit": "2", "continue": page["metadata"]["continue"]}
    )
    assert [i["metadata"]["name"] for i in rest["items"]] == ["c"]
    assert "continue" not in rest["metadata"]
    assert rest["metadata"]["resourceVersion"] == page["metadata"]["resourceVersion"]


async def test_pages_of_a_selective_list_carry_every_match_once_and_no_remaining_count(
    client: Client,
) -> None:
    for name in ("e", "a", "d", "b", "c"):
        await client.call("POST", f"{NS}/pods", pod(name))
    names: list[str] = []
    params = {"limit": "2", "fieldSelector": "metadata.name!=b"}
    while True:
        status, page, _ = await client.call("GET", f"{NS}/pods", params=params)
        assert status == 200
        names += [i["metadata"]["name"] for i in page["items"]]
        # like kube-apiserver: a count of the rest would include objects the selector drops
        assert "remainingItemCount" not in page["metadata"]
        if not page["metadata"].get("continue"):
            break
        params = {**params, "continue": page["metadata"]["continue"]}
    assert names == ["a", "c", "d", "e"]


async def test_list_resource_version_rules(client: Client) -> None:
    _, listed, _ = await client.call("GET", f"{NS}/pods")
    current = int(listed["metadata"]["resourceVersion"])
    status, _, _ = await client.call(
        "GET", f"{NS}/pods", params={"resourceVersion": str(current), "resourceVersionMatch": "NotOlderThan"}
    )
    assert status == 200
    status, body, _ = await client.call("GET", f"{NS}/pods", params={"resourceVersion": str(current + 100)})
    assert (status, body["reason"]) == (504, "Timeout")


async def test_label_and_field_selectors_on_list(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a", labels={"app": "web", "tier": "front"}))
    await client.call("POST", f"{NS}/pods", pod("b", labels={"app": "web"}, nodeName="n1"))
    await client.call("POST", f"{NS}/pods", pod("c", labels={"app": "db"}))

    async def names(**params: str) -> list[str]:
        status, body, _ = await client.call("GET", f"{NS}/pods", params=params)
        assert status == 200, body
        return [i["metadata"]["name"] for i in body["items"]]

    assert await names(labelSelector="app=web,tier in (front)") == ["a"]
    assert await names(labelSelector="app==web,!tier") == ["b"]
    assert await names(labelSelector="app!=web") == ["c"]
    assert await names(labelSelector="app notin (db),tier") == ["a"]
    assert await names(fieldSelector="spec.nodeName=") == ["a", "c"]
    assert await names(fieldSelector="spec.nodeName=n1,metadata.name!=x") == ["b"]
    assert await names(fieldSelector="spec.schedulerName=lockstep,status.phase=Pending") == ["a", "b", "c"]
    status, body, _ = await client.call("GET", f"{NS}/pods", params={"labelSelector": "app in web"})
    assert (status, body["message"]) == (400, "unable to parse requirement: found 'web' expected: '('")
    status, body, _ = await client.call("GET", f"{NS}/pods", params={"fieldSelector": "spec.bogus=x"})
    assert (status, body["message"]) == (400, "field label not supported: spec.bogus")


async def test_watch_replays_from_a_resource_version(client: Client) -> None:
    _, listed, _ = await client.call("GET", f"{NS}/pods")
    start = listed["metadata"]["resourceVersion"]
    await client.call("POST", f"{NS}/pods", pod("a"))
    await client.call("PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    _, deleted, _ = await client.call("DELETE", f"{NS}/pods/a")
    events = await client.watch(f"{NS}/pods", {"resourceVersion": start, "timeoutSeconds": "1"})
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "MODIFIED", "DELETED"]
    assert events[-1]["object"]["metadata"]["resourceVersion"] == deleted["metadata"]["resourceVersion"]


async def test_stale_watch_resume_gets_410_expired_in_a_200_stream(client: Client, server: ApiServer) -> None:
    _, created, _ = await client.call("POST", f"{NS}/pods", pod("a"))
    old = created["metadata"]["resourceVersion"]
    await client.call("PATCH", f"{NS}/pods/a", {"metadata": {"labels": {"x": "1"}}}, MERGE)
    server.compact()
    events = await client.watch(f"{NS}/pods", {"resourceVersion": old, "timeoutSeconds": "1"})
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    status = events[0]["object"]
    assert (status["code"], status["reason"]) == (410, "Expired")
    assert status["message"] == f"too old resource version: {old} ({server.rv})"


async def test_bounded_window_expires_old_resource_versions() -> None:
    server = ApiServer(watch_window=5)
    await server.start()
    try:
        namespaces = server.types[("", "v1", "namespaces")]
        first = server.create_object(namespaces, {"metadata": {"name": "first"}}, None)
        for i in range(10):
            server.create_object(namespaces, {"metadata": {"name": f"ns-{i}"}}, None)
        store = server.stores["/namespaces"]
        assert store.floor_rv > first.rv
        assert len(store.window) == 5
    finally:
        await server.stop()


async def test_selector_transitions_in_a_watch(client: Client) -> None:
    _, listed, _ = await client.call("GET", f"{NS}/pods")
    start = listed["metadata"]["resourceVersion"]
    await client.call("POST", f"{NS}/pods", pod("s", labels={"role": "member"}))
    _, left, _ = await client.call(
        "PATCH", f"{NS}/pods/s", {"metadata": {"labels": {"role": "other"}}}, MERGE
    )
    await client.call("PATCH", f"{NS}/pods/s", {"metadata": {"annotations": {"n": "1"}}}, MERGE)
    await client.call("PATCH", f"{NS}/pods/s", {"metadata": {"labels": {"role": "member"}}}, MERGE)
    events = await client.watch(
        f"{NS}/pods", {"resourceVersion": start, "labelSelector": "role=member", "timeoutSeconds": "1"}
    )
    assert [e["type"] for e in events] == ["ADDED", "DELETED", "ADDED"]
    leaving = events[1]["object"]["metadata"]
    assert leaving["labels"] == {"role": "member"}
    assert leaving["resourceVersion"] == left["metadata"]["resourceVersion"]


async def test_binding_moves_a_pod_into_a_node_field_selector(client: Client) -> None:
    _, listed, _ = await client.call("GET", f"{NS}/pods")
    start = listed["metadata"]["resourceVersion"]
    await client.call("POST", f"{NS}/pods", pod("p"))
    binding = {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": "p"},
        "target": {"kind": "Node", "name": "n1"},
    }
    await client.call("POST", f"{NS}/pods/p/binding", binding)
    events = await client.watch(
        f"{NS}/pods", {"resourceVersion": start, "fieldSelector": "spec.nodeName=n1", "timeoutSeconds": "1"}
    )
    assert [e["type"] for e in events] == ["ADDED"]
    assert events[0]["object"]["spec"]["nodeName"] == "n1"


async def test_watch_without_resource_version_starts_with_current_objects(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    for params in ({}, {"resourceVersion": "0"}):
        events = await client.watch(f"{NS}/pods", {**params, "timeoutSeconds": "1"})
        assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "a")]


async def test_send_initial_events_ends_with_an_annotated_bookmark(client: Client) -> None:
    await client.call("POST", f"{NS}/pods", pod("a"))
    params = {
        "sendInitialEvents": "true",
        "resourceVersionMatch": "NotOlderThan",
        "allowWatchBookmarks": "true",
        "timeoutSeconds": "1",
    }
    events = await client.watch(f"{NS}/pods", params)
    assert events[0]["type"] == "ADDED"
    assert events[1]["type"] == "BOOKMARK"
    assert events[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_periodic_bookmarks_carry_the_current_resource_version(
    client: Client, server: ApiServer
) -> None:
    events = await client.watch(
        f"{NS}/pods",
        {"resourceVersion": str(server.rv), "allowWatchBookmarks": "true", "timeoutSeconds": "1"},
    )
    bookmarks = [e for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, "a 1 s watch with a 0.2 s bookmark interval sends bookmarks"
    assert bookmarks[-1]["object"]["metadata"]["resourceVersion"] == str(server.rv)
    assert bookmarks[-1]["object"]["kind"] == "Pod"


async def test_watch_1_is_accepted_and_timeout_ends_the_stream(client: Client) -> None:
    loop = asyncio.get_running_loop()
    started = loop.time()
    async with client.session.get(
        client.url + f"{NS}/pods", params={"watch": "1", "timeoutSeconds": "1"}
    ) as resp:
        assert resp.status == 200
        await resp.read()
    assert 0.9 < loop.time() - started < 10


async def test_a_slow_watcher_is_closed_instead_of_stalling_writers() -> None:
    server = ApiServer(watch_buffer=10)
    await server.start()
    try:
        pods = server.types[("", "v1", "pods")]
        from lockstep.sim.selectors import parse_field_selector, parse_label_selector
        from lockstep.sim.store import Watcher

        watcher = Watcher(None, parse_label_selector(None), parse_field_selector(None, {}), None, 10)
        server.stores[pods.storage].watchers.add(watcher)
        for i in range(50):
            server.create_object(pods, orjson.loads(orjson.dumps(pod(f"p{i}"))), "default")
        assert watcher.closed
        assert len(server.stores[pods.storage].objects) == 50
    finally:
        await server.stop()


async def test_a_client_that_disconnects_leaves_no_watcher_behind(client: Client, server: ApiServer) -> None:
    store = server.stores["/pods"]

    async def watch() -> None:
        async with client.session.get(client.url + f"{NS}/pods", params={"watch": "true"}) as resp:
            await resp.read()

    task = asyncio.create_task(watch())
    for _ in range(50):
        await asyncio.sleep(0.02)
        if store.watchers:
            break
    assert len(store.watchers) == 1
    task.cancel()
    for _ in range(100):
        await asyncio.sleep(0.02)
        if not store.watchers:
            break
    assert not store.watchers


async def test_watch_from_a_future_resource_version_is_refused(client: Client, server: ApiServer) -> None:
    events = await client.watch(f"{NS}/pods", {"resourceVersion": str(server.rv + 50), "timeoutSeconds": "5"})
    assert [(e["type"], e["object"]["code"], e["object"]["reason"]) for e in events] == [
        ("ERROR", 504, "Timeout")
    ]
