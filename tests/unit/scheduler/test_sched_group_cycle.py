"""The group cycle through the Scheduler: PreEnqueue, atomic decisions, records, topology, order."""

from __future__ import annotations

import dataclasses

from sched_helpers import RecordingPlugin, gang, make_node, make_pod, make_scheduler, settle

from lockstep.config import Settings
from lockstep.scheduler.framework import Code, GroupKey, PodInfo, Status
from lockstep.scheduler.queue import GroupState

ZONE = "topology.kubernetes.io/zone"


def _usage(cache: object) -> dict[str, int]:
    return {name: node.requested.get("cpu", 0) for name, node in cache.nodes.items()}  # type: ignore[attr-defined]


async def test_a_gang_that_fits_is_bound_whole() -> None:
    scheduler, api, cache = make_scheduler()
    for i in range(3):
        cache.upsert_node(make_node(f"n{i}", cpu="4"))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="3", group="g"))
    await settle(scheduler)
    assert sorted(p.node_name for p in api.pods.values()) == ["n0", "n1", "n2"]
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert (attempt.code, attempt.reason, attempt.scheduled, attempt.pending) == (
        Code.SUCCESS,
        "Scheduled",
        3,
        0,
    )
    assert len(attempt.placed) == 3


async def test_a_gang_that_does_not_fit_binds_nothing_and_says_why() -> None:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="4"))
    cache.upsert_node(make_node("n1", cpu="4"))
    cache.upsert_node(make_node("tainted", cpu="64", taints=[{"key": "gpu", "effect": "NoSchedule"}]))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="3", group="g"))
    before = _usage(cache)
    await settle(scheduler)
    assert api.bind_calls == []
    assert _usage(cache) == before
    assert not any(cache.is_assumed(p.uid) for p in api.pods.values())
    # p0 and p1 were reserved, then released when p2 found no node: each exactly once.
    assert sorted(recorder.reserved) == sorted(recorder.unreserved) == ["p0", "p1"]
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE and attempt.reason == "Unschedulable"
    assert attempt.scheduled == 0 and attempt.pending == 3
    assert dict(attempt.causes) == {"InsufficientCPU": 2, "Taint": 1}
    (diagnosis,) = attempt.pods
    assert diagnosis.pod == "default/p2"
    assert {r.plugin: (r.count, r.sample_nodes) for r in diagnosis.plugins} == {
        "NodeResourcesFit": (2, ("n0", "n1")),
        "TaintToleration": (1, ("tainted",)),
    }
    assert "minCount (3) cannot be satisfied" in attempt.message
    assert attempt.next_retry_at is not None
    # every member is told, with a strict patch carrying its resourceVersion
    await settle(scheduler)
    patched = {pod: rv for pod, rv, reason in api.patch_calls if reason == "Unschedulable"}
    assert set(patched) == {"default/p0", "default/p1", "default/p2"}
    assert all(api.pods[pod].scheduled_condition.status == "False" for pod in patched)  # type: ignore[union-attr]


async def test_the_same_failure_is_not_patched_twice() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="2"))
    cache.upsert_pod(make_pod("running", cpu="1", node_name="n0", scheduler="other"))
    api.add(make_pod("big", cpu="2"))  # fits once the other pod is gone: retried on backoff
    await settle(scheduler)
    assert len(api.patch_calls) == 1
    scheduler.clock.advance(2)  # type: ignore[attr-defined]
    await settle(scheduler)
    assert scheduler.attempts[GroupKey("default", "big", False)].attempt == 2
    assert len(api.patch_calls) == 1


async def test_preenqueue_waits_for_the_podgroup_and_for_min_count_pods() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="16"))
    key = GroupKey("default", "g")
    for i in range(2):
        api.add(make_pod(f"p{i}", group="g"))
    await settle(scheduler)
    attempt = scheduler.attempts[key]
    assert attempt.code is Code.WAIT and attempt.reason == "Waiting"
    assert "waiting for PodGroup default/g" in attempt.message
    cache.upsert_podgroup(gang("g", 4))
    await settle(scheduler)
    attempt = scheduler.attempts[key]
    assert (attempt.code, attempt.total_pods, attempt.missing_pods) == (Code.WAIT, 2, 2)
    assert dict(attempt.causes) == {"TooFewPods": 2}
    assert "2 of minCount 4 present, 2 missing" in attempt.message
    assert scheduler.queue.state(key) is GroupState.GATED
    assert api.bind_calls == [] and api.patch_calls == []
    for i in range(2, 4):
        api.add(make_pod(f"p{i}", group="g"))
    await settle(scheduler)
    assert scheduler.attempts[key].code is Code.SUCCESS
    assert all(p.node_name == "n0" for p in api.pods.values())


async def test_bound_members_count_and_are_never_moved() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("full", cpu="2"))
    cache.upsert_node(make_node("free", cpu="8"))
    cache.upsert_podgroup(gang("g", 3))
    api.add(make_pod("old", cpu="2", group="g", node_name="full"))
    api.add(make_pod("new1", cpu="2", group="g"))
    api.add(make_pod("new2", cpu="2", group="g"))
    await settle(scheduler)
    assert api.pods["default/old"].node_name == "full"
    assert [call for call in api.bind_calls if call[0] == "default/old"] == []
    assert api.pods["default/new1"].node_name == api.pods["default/new2"].node_name == "free"
    assert scheduler.attempts[GroupKey("default", "g")].scheduled == 3


async def test_pods_beyond_min_count_that_do_not_fit_wait_while_the_rest_binds() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    cache.upsert_podgroup(gang("g", 2))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="2", group="g"))
    await settle(scheduler)
    bound = sorted(p.name for p in api.pods.values() if p.node_name)
    assert bound == ["p0", "p1"]
    key = GroupKey("default", "g")
    attempt = scheduler.attempts[key]
    assert (attempt.code, attempt.pending) == (Code.SUCCESS, 1)
    assert scheduler.queue.state(key) is GroupState.BACKOFF


async def test_a_pod_without_a_group_is_scheduled_alone() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0"))
    api.add(make_pod("solo"))
    await settle(scheduler)
    assert api.pods["default/solo"].node_name == "n0"
    assert scheduler.attempts[GroupKey("default", "solo", False)].code is Code.SUCCESS


async def test_a_gang_stays_in_one_zone_when_it_fits_and_spills_when_not() -> None:
    scheduler, api, cache = make_scheduler()
    for zone in ("a", "b"):
        for i in range(4):
            cache.upsert_node(make_node(f"{zone}{i}", cpu="4", labels={ZONE: zone}))
    cache.upsert_podgroup(gang("fits", 4))
    for i in range(4):
        api.add(make_pod(f"fits{i}", cpu="3", group="fits"))
    await settle(scheduler)
    zones = {cache.nodes[p.node_name].labels[ZONE] for p in api.pods.values() if p.group_name == "fits"}
    assert len(zones) == 1
    cache.upsert_podgroup(gang("spills", 4))
    for i in range(4):
        api.add(make_pod(f"spills{i}", cpu="3", group="spills"))
    await settle(scheduler)
    spilled = [p.node_name for p in api.pods.values() if p.group_name == "spills"]
    assert all(spilled) and len({cache.nodes[n].labels[ZONE] for n in spilled}) == 1  # the other zone
    assert {cache.nodes[n].labels[ZONE] for n in spilled} != zones


async def test_topology_key_comes_from_settings() -> None:
    scheduler, api, cache = make_scheduler(Settings(leader_elect=False, topology_key="rack"))
    for rack in ("r1", "r2", "r3"):
        for i in range(3):
            cache.upsert_node(make_node(f"{rack}-{i}", cpu="2", labels={"rack": rack}))
    cache.upsert_podgroup(gang("g", 3))
    for i in range(3):
        api.add(make_pod(f"p{i}", cpu="1500m", group="g"))
    await settle(scheduler)
    assert len({cache.nodes[p.node_name].labels["rack"] for p in api.pods.values()}) == 1


async def test_higher_priority_groups_go_first_then_first_seen() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="2"))
    api.add(make_pod("early", cpu="2"))
    api.add(make_pod("late", cpu="2"))
    api.add(make_pod("urgent", cpu="2", priority=100))
    await settle(scheduler)
    assert api.bind_calls == [("default/urgent", "n0")]
    scheduler2, api2, cache2 = make_scheduler()
    cache2.upsert_node(make_node("n0", cpu="2"))
    api2.add(make_pod("early", cpu="2"))
    api2.add(make_pod("late", cpu="2"))
    await settle(scheduler2)
    assert api2.bind_calls == [("default/early", "n0")]


async def test_a_failed_group_is_retried_when_a_node_is_added_not_by_its_own_cycle() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("small", cpu="1"))
    cache.upsert_podgroup(gang("g", 2))
    for i in range(2):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    await settle(scheduler)
    key = GroupKey("default", "g")
    assert scheduler.attempts[key].attempt == 1
    await settle(scheduler)  # nothing new: the group stays parked
    assert scheduler.attempts[key].attempt == 1 and scheduler.queue.state(key) is GroupState.BACKOFF
    cache.upsert_node(make_node("second", cpu="1"))
    scheduler.clock.advance(1)  # type: ignore[attr-defined]
    await settle(scheduler)
    assert scheduler.attempts[key].code is Code.SUCCESS
    assert sorted(p.node_name for p in api.pods.values()) == ["second", "small"]


async def test_a_reserve_failure_releases_the_pod_and_fails_the_gang() -> None:
    recorder = RecordingPlugin()
    recorder.fail_reserve.add("p1")
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder])
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 2))
    api.add(make_pod("p0", group="g"))
    api.add(make_pod("p1", group="g"))
    await settle(scheduler)
    assert api.bind_calls == []
    assert recorder.releases("p0") == 1 and recorder.releases("p1") == 1
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE
    assert dict(attempt.causes) == {"ReserveFailed": 1}


async def test_groups_that_are_gone_are_forgotten() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0"))
    api.add(make_pod("done"))
    api.add(make_pod("deleted"))
    cache.upsert_podgroup(gang("g", 1))
    api.add(make_pod("member", group="g"))
    await settle(scheduler)
    assert len(scheduler.attempts) == 3
    finished = dataclasses.replace(api.pods["default/done"], phase="Succeeded")
    cache.upsert_pod(finished)
    api.delete("default/deleted")
    api.delete("default/member")
    assert set(scheduler.attempts) == {GroupKey("default", "g")}  # its PodGroup still exists
    cache.delete_podgroup("default", "g")
    assert scheduler.attempts == {}


async def test_a_gang_starts_in_a_zone_that_can_hold_all_of_it() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("a-big", cpu="8", labels={ZONE: "a"}))  # the emptiest single node
    for i in range(4):
        cache.upsert_node(make_node(f"b{i}", cpu="4", labels={ZONE: "b"}))
    cache.upsert_podgroup(gang("g", 4))
    for i in range(4):
        api.add(make_pod(f"p{i}", cpu="3", group="g"))
    await settle(scheduler)
    assert sorted(p.node_name for p in api.pods.values()) == ["b0", "b1", "b2", "b3"]


class ExplodingFilter:
    name = "Exploding"

    def __init__(self, victim: str) -> None:
        self.victim = victim

    def filter(self, state: object, pod: PodInfo, node: object) -> Status:
        if pod.name == self.victim:
            raise RuntimeError("boom")
        return Status()


async def test_a_plugin_that_raises_fails_its_group_cleanly_and_scheduling_goes_on() -> None:
    recorder = RecordingPlugin()
    scheduler, api, cache = make_scheduler(extra_plugins=[recorder, ExplodingFilter("p1")])
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 2))
    api.add(make_pod("p0", group="g"))
    api.add(make_pod("p1", group="g"))
    api.add(make_pod("solo"))
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert (attempt.code, attempt.reason) == (Code.ERROR, "SchedulerError")
    assert "RuntimeError: boom" in attempt.message
    assert recorder.releases("p0") == 1
    assert not any(cache.is_assumed(p.uid) for p in api.pods.values())
    assert api.pods["default/solo"].node_name == "n0"
    assert {(pod, reason) for pod, _, reason in api.patch_calls} >= {("default/p0", "SchedulerError")}


class BrokenListener:
    def on_pod_bound(self, pod: PodInfo, node_name: str) -> None:
        raise ValueError("status writer bug")

    def on_group_attempt(self, attempt: object) -> None:
        raise ValueError("status writer bug")

    def on_group_note(self, attempt: object) -> None:
        raise ValueError("status writer bug")


async def test_a_failing_listener_does_not_stop_scheduling() -> None:
    scheduler, api, cache = make_scheduler()
    scheduler.add_listener(BrokenListener())
    cache.upsert_node(make_node("n0"))
    api.add(make_pod("a"))
    api.add(make_pod("b"))
    await settle(scheduler)
    assert api.pods["default/a"].node_name == api.pods["default/b"].node_name == "n0"


async def test_a_pod_too_big_for_every_node_is_not_retried_when_capacity_frees() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="4"))
    api.add(make_pod("small", cpu="1"))
    api.add(make_pod("huge", cpu="6"))
    await settle(scheduler)
    huge = GroupKey("default", "huge", False)
    assert scheduler.attempts[huge].pods[0].code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    ready_at = scheduler.queue.ready_at(huge)
    scheduler.clock.advance(0.5)  # type: ignore[attr-defined]
    api.delete("default/small")  # frees cpu on n0: no help for a 6-cpu pod
    assert scheduler.queue.ready_at(huge) == ready_at
    cache.upsert_node(make_node("n1", cpu="8"))  # a bigger node is
    assert scheduler.queue.ready_at(huge) == scheduler.clock() + 0.5


async def test_gated_pods_count_as_absent_until_their_gates_are_removed() -> None:
    scheduler, api, cache = make_scheduler()
    cache.upsert_node(make_node("n0", cpu="8"))
    cache.upsert_podgroup(gang("g", 2))
    api.add(make_pod("open", group="g"))
    gated = api.add(make_pod("gated", group="g", schedulingGates=[{"name": "example.com/quota"}]))
    assert gated.scheduling_gated
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert (attempt.code, attempt.total_pods, attempt.missing_pods) == (Code.WAIT, 1, 1)
    assert api.bind_calls == []
    api.add(dataclasses.replace(gated, scheduling_gated=False))  # the gate is lifted
    await settle(scheduler)
    assert api.pods["default/gated"].node_name == api.pods["default/open"].node_name == "n0"
