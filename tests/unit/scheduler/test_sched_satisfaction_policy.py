"""Members that join a gang after it reached minCount (replacements of lost or failed ones) under the
two satisfaction policies, and succeeded members counting toward minCount (kubernetes #142330)."""

from __future__ import annotations

import dataclasses

from sched_helpers import FakeClock, MemoryPodAPI, gang, make_node, make_pod, make_scheduler, settle

from lockstep.scheduler.framework import KEEP_MIN_COUNT, Code, GroupKey, PodGroupInfo
from lockstep.scheduler.scheduler import Scheduler
from lockstep.state.cluster import ClusterCache

KEY = GroupKey("default", "g")
ZONE = "topology.kubernetes.io/zone"


def _cluster(
    group: PodGroupInfo, pods: int, nodes: dict[str, str]
) -> tuple[Scheduler, MemoryPodAPI, ClusterCache, FakeClock]:
    clock = FakeClock()
    scheduler, api, cache = make_scheduler(clock=clock)
    for name, zone in nodes.items():
        cache.upsert_node(make_node(name, cpu="2", labels={ZONE: zone}))
    cache.upsert_podgroup(group)
    for i in range(pods):
        api.add(make_pod(f"p{i}", cpu="1", group="g"))
    return scheduler, api, cache, clock


def _bound(api: MemoryPodAPI) -> dict[str, str]:
    return {pod.name: pod.node_name for pod in api.pods.values() if pod.node_name}


def _lose(api: MemoryPodAPI, *names: str) -> None:
    for name in names:
        api.delete(f"default/{name}")


async def _replacements(scheduler: Scheduler, api: MemoryPodAPI, clock: FakeClock, *names: str) -> None:
    clock.advance(61)
    for name in names:
        api.add(make_pod(name, cpu="1", group="g"))
    await settle(scheduler)


async def test_once_satisfied_places_replacements_one_by_one_as_they_fit() -> None:
    scheduler, api, cache, clock = _cluster(gang("g", 4), 4, {"n0": "a", "n1": "a"})
    await settle(scheduler)
    assert len(_bound(api)) == 4
    _lose(api, "p0", "p1")
    cache.upsert_node(dataclasses.replace(make_node("n1", cpu="1", labels={ZONE: "a"})))  # room for one
    await _replacements(scheduler, api, clock, "r0", "r1")
    bound = _bound(api)
    assert len(bound) == 3 and len({"r0", "r1"} & set(bound)) == 1  # one fits, and binds alone
    assert len(scheduler.waiting) == 0


async def test_keep_min_count_places_replacements_together_or_not_at_all() -> None:
    policy = dataclasses.replace(gang("g", 4), satisfaction_policy=KEEP_MIN_COUNT)
    scheduler, api, cache, clock = _cluster(policy, 4, {"n0": "a", "n1": "a"})
    await settle(scheduler)
    _lose(api, "p0", "p1")
    cache.upsert_node(make_node("n1", cpu="1", labels={ZONE: "a"}))
    await _replacements(scheduler, api, clock, "r0", "r1")
    assert not {"r0", "r1"} & set(_bound(api))  # room for one of the two: neither binds
    assert scheduler.attempts[KEY].code is Code.UNSCHEDULABLE
    cache.upsert_node(make_node("n1", cpu="2", labels={ZONE: "a"}))
    clock.advance(61)
    await settle(scheduler)
    assert {"r0", "r1"} <= set(_bound(api))


async def test_replacements_join_the_survivors_domain_and_the_status_says_when_it_is_full() -> None:
    group = dataclasses.replace(gang("g", 2), satisfaction_policy=KEEP_MIN_COUNT, topology_keys=(ZONE,))
    scheduler, api, cache, clock = _cluster(group, 2, {"a0": "a", "a1": "a", "b0": "b", "b1": "b"})
    await settle(scheduler)
    zones = {cache.nodes[n].labels[ZONE] for n in _bound(api).values()}
    assert len(zones) == 1  # one domain
    (zone,) = zones
    _lose(api, "p0")
    survivors_nodes = [name for name, node in cache.nodes.items() if node.labels[ZONE] == zone]
    for node in survivors_nodes:  # the survivors' zone is full now; the other one has room
        free = 2 - sum(1 for n in _bound(api).values() if n == node)
        if free:
            api.add(make_pod(f"hog-{node}", cpu=str(free), node_name=node, scheduler="other"))
    await _replacements(scheduler, api, clock, "r0")
    assert "r0" not in _bound(api)
    attempt = scheduler.attempts[KEY]
    assert (
        f"the surviving members are in {ZONE}={zone}, which cannot hold the 1 new members" in attempt.message
    )
    assert attempt.code is Code.UNSCHEDULABLE
    assert f"the surviving members are in {ZONE}=a, which cannot hold the 1 new members" in attempt.message


async def test_succeeded_members_count_toward_min_count_so_a_retried_member_is_placed() -> None:
    """kubernetes #142330: index 0 succeeded, index 1 failed and was replaced: the replacement must
    not wait for a minCount that only finished members could make up."""
    for policy in ("OnceSatisfied", KEEP_MIN_COUNT):
        group = dataclasses.replace(gang("g", 2), satisfaction_policy=policy)
        scheduler, api, _cache, clock = _cluster(group, 2, {"n0": "a"})
        await settle(scheduler)
        done = api.pods["default/p0"]
        api.add(dataclasses.replace(done, phase="Succeeded"))
        _lose(api, "p1")  # failed and gone; the Job makes a new pod for its index
        await _replacements(scheduler, api, clock, "r1")
        assert "r1" in _bound(api), policy
        assert len(scheduler.waiting) == 0


async def test_a_gang_with_no_member_left_starts_anew_all_or_nothing() -> None:
    scheduler, api, cache, clock = _cluster(gang("g", 2), 2, {"n0": "a"})
    await settle(scheduler)
    _lose(api, "p0", "p1")
    assert not cache.once_satisfied(KEY)
    cache.upsert_node(make_node("n0", cpu="1", labels={ZONE: "a"}))
    await _replacements(scheduler, api, clock, "r0", "r1")
    assert not _bound(api)  # room for one of two: a new gang places none
