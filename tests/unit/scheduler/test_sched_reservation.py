"""Capacity reservation and EASY backfill on the scheduler's cache, without a server: which nodes a gang
holds, who may use them, and when the reservation ends."""

from __future__ import annotations

import dataclasses
from typing import Any

from sched_helpers import FakeClock, gang, make_node, make_pod, make_scheduler, settle

from lockstep.config import Settings
from lockstep.scheduler.framework import GroupKey, PodInfo
from lockstep.scheduler.reservation import Ending, NodeHold, Reservation

BIG = GroupKey("default", "big")
NOW = 1000.0


class World:
    """Three nodes of 4 cpus, each full of 1-cpu pods; a gang of two 4-cpu pods needs two empty nodes."""

    def __init__(self, nodes: int = 3, deadline: int | None = None, **settings: Any) -> None:
        self.clock = FakeClock(NOW)
        values: dict[str, Any] = {"leader_elect": False, "reservation_delay_seconds": 0.0, **settings}
        self.scheduler, self.api, self.cache = make_scheduler(
            Settings(**values), clock=self.clock, wall_clock=self.clock
        )
        self.events: list[tuple[GroupKey, Ending | None, str]] = []
        self.scheduler.on_reservation = lambda r, ending, message: self.events.append(
            (r.group, ending, message)
        )
        for n in range(nodes):
            self.cache.upsert_node(make_node(f"n{n}", cpu="4"))
            for i in range(4):
                self.running(f"s{n}-{i}", f"n{n}", deadline=deadline)

    def running(self, name: str, node: str, *, deadline: int | None = None, cpu: str = "1") -> PodInfo:
        spec: dict[str, Any] = {"activeDeadlineSeconds": deadline} if deadline else {}
        pod = dataclasses.replace(make_pod(name, cpu=cpu, node_name=node, **spec), start_time=self.clock.now)
        return self.api.add(pod)

    def finish(self, name: str) -> None:
        self.api.delete(f"default/{name}")

    def gang(self, name: str, size: int, cpu: str = "4", priority: int = 0, **group: Any) -> GroupKey:
        self.cache.upsert_podgroup(dataclasses.replace(gang(name, size), **group))
        for i in range(size):
            self.api.add(make_pod(f"{name}-{i}", cpu=cpu, group=name, priority=priority))
        return GroupKey("default", name)

    def pending(self, name: str, cpu: str = "1", priority: int = 0, deadline: int | None = None) -> None:
        spec: dict[str, Any] = {"activeDeadlineSeconds": deadline} if deadline else {}
        self.api.add(make_pod(name, cpu=cpu, priority=priority, **spec))

    def node_of(self, name: str) -> str:
        return self.api.pods[f"default/{name}"].node_name

    def message(self, key: GroupKey) -> str:
        return self.scheduler.attempts[key].message

    def reservation(self, key: GroupKey = BIG) -> Reservation:
        return self.scheduler.reservations.reservations[key]


async def test_a_starved_gang_holds_the_nodes_with_fewest_pods_and_binds_when_they_free() -> None:
    world = World()
    world.finish("s2-0")  # n2 has three pods left: the fewest to wait for
    world.gang("big", 2)
    await settle(world.scheduler)
    reservation = world.reservation()
    assert set(reservation.holds) == {"n2", "n0"}  # then the first by name among the equal ones
    assert reservation.holds["n2"].requests == {"cpu": 4000, "memory": 1024**3, "pods": 1}
    assert reservation.waiting == {"n0": 4, "n2": 3}
    assert "capacity held on 2 nodes (n0, n2), waiting for 7 pods to finish" in world.message(BIG)
    assert world.events[-1][:2] == (BIG, None)

    # freed capacity stays held: a small pod arriving now goes nowhere (n1 is full)
    world.pending("small")
    await settle(world.scheduler)
    assert world.node_of("small") == ""
    small = world.scheduler.attempts[GroupKey("default", "small", pod_group=False)]
    assert "node n2: capacity held for gang default/big" in small.message

    for node in ("n0", "n2"):
        for i in range(4):
            if f"default/s{node[1]}-{i}" in world.api.pods:
                world.finish(f"s{node[1]}-{i}")
    world.clock.advance(2)
    await settle(world.scheduler)
    assert {world.node_of("big-0"), world.node_of("big-1")} == {"n0", "n2"}
    assert BIG not in world.scheduler.reservations.reservations
    assert world.events[-1][:2] == (BIG, Ending.COMPLETED)


def test_room_beyond_the_held_share_stays_usable() -> None:
    world = World(nodes=1)
    for i in range(3):
        world.finish(f"s0-{i}")  # one pod left: 1 cpu used, 3 free, 2 of them held
    hold = NodeHold("n0", {"cpu": 2000, "pods": 1})
    book = world.scheduler.reservations
    book.restore(Reservation(BIG, {"n0": hold}, since=NOW, timeout=60, expected_completion=None))
    node = world.cache.nodes["n0"]
    with book.holding_for(GroupKey("default", "small", pod_group=False), 0):
        assert book.check(make_pod("small", cpu="1"), node)[0].ok
        refused, backfill = book.check(make_pod("small", cpu="2"), node)
        assert refused.message == "node n0: capacity held for gang default/big" and backfill is None
    with book.holding_for(BIG, 0):  # the gang itself is not held back by its own reservation
        assert book.check(make_pod("big-0", cpu="3"), node)[0].ok
    with book.holding_for(GroupKey("default", "urgent", pod_group=False), 1):  # nor a higher priority
        assert book.check(make_pod("urgent", cpu="3"), node)[0].ok


async def test_backfill_takes_held_capacity_only_when_it_ends_before_the_expected_completion() -> None:
    world = World(deadline=20)  # every running pod ends by NOW + 20
    world.gang("big", 2)
    await settle(world.scheduler)
    reservation = world.reservation()
    assert reservation.expected_completion == NOW + 20
    held = sorted(reservation.holds)
    world.finish(f"s{held[0][1]}-0")
    world.finish(f"s{held[1][1]}-0")
    world.clock.advance(5)  # 15 s left: 1 s to start plus 14 s of deadline fits, 15 s does not
    world.pending("too-long", deadline=15)
    world.pending("no-deadline")
    await settle(world.scheduler)
    assert world.node_of("too-long") == "" and world.node_of("no-deadline") == ""
    world.pending("short", deadline=14)
    await settle(world.scheduler)
    assert world.node_of("short") in held
    assert world.reservation().backfilled == 1


async def test_a_node_where_a_waited_pod_has_no_deadline_gets_no_backfill() -> None:
    world = World(nodes=2, deadline=20)
    world.finish("s1-3")
    world.running("forever", "n1")  # n1 now waits for a pod without a deadline
    world.gang("big", 2)
    await settle(world.scheduler)
    reservation = world.reservation()
    assert reservation.no_backfill == {"n1"} and reservation.without_deadline == 1
    world.finish("s0-0")
    world.finish("s1-0")
    world.pending("short", deadline=5)
    world.clock.advance(1)
    await settle(world.scheduler)
    assert world.node_of("short") == "n0"
    world.pending("short-2", deadline=5)
    world.clock.advance(1)
    await settle(world.scheduler)
    assert world.node_of("short-2") == ""


async def test_a_higher_priority_group_ignores_the_hold_and_the_reservation_plans_again() -> None:
    world = World()
    world.gang("big", 2)
    await settle(world.scheduler)
    first = dict(world.reservation().holds)
    node = sorted(first)[0]
    world.finish(f"s{node[1]}-0")
    world.pending("urgent", priority=100)
    world.pending("peer", priority=0)
    world.clock.advance(2)
    await settle(world.scheduler)
    assert world.node_of("urgent") == node  # held capacity, taken by a higher priority
    assert world.node_of("peer") == ""
    assert world.reservation().since == NOW  # planned again, its timeout still counts from the start
    assert any("planned again" in message for _, ending, message in world.events if ending is None)


async def test_a_reservation_times_out_and_goes_to_the_next_gang() -> None:
    world = World(nodes=4, reservation_timeout_seconds=30)
    world.gang("big", 2)
    await settle(world.scheduler)
    world.clock.advance(1)
    world.gang("next", 2)
    await settle(world.scheduler)
    assert set(world.scheduler.reservations.reservations) == {BIG}
    assert "waits for a reservation slot (held by default/big)" in world.message(GroupKey("default", "next"))
    world.clock.advance(30)
    await settle(world.scheduler)
    assert set(world.scheduler.reservations.reservations) == {GroupKey("default", "next")}
    assert (BIG, Ending.TIMED_OUT) in [(key, ending) for key, ending, _ in world.events]


async def test_a_podgroup_timeout_wins_over_the_operator_default() -> None:
    world = World(reservation_timeout_seconds=600)
    world.gang("big", 2, reservation_timeout_seconds=5.0)
    await settle(world.scheduler)
    assert world.reservation().timeout == 5.0
    assert world.scheduler.queue.ready_at(BIG) is not None
    assert world.scheduler.queue.ready_at(BIG) <= world.clock.now + 5.0  # attempted again at its end


async def test_never_delay_parked_and_off_do_not_reserve() -> None:
    world = World()
    world.gang("polite", 2, reservation_policy="Never")
    world.gang("huge", 2, cpu="5")  # larger than every node: parked
    await settle(world.scheduler)
    assert world.scheduler.reservations.reservations == {}

    delayed = World(reservation_delay_seconds=10)
    delayed.gang("big", 2)
    await settle(delayed.scheduler)
    assert delayed.scheduler.reservations.reservations == {}
    assert "reserves capacity in 10s if it still does not fit" in delayed.message(BIG)
    delayed.clock.advance(10)
    await settle(delayed.scheduler)
    assert BIG in delayed.scheduler.reservations.reservations

    off = World(reservation=False)
    off.gang("big", 2)
    await settle(off.scheduler)
    assert off.scheduler.reservations.reservations == {}


async def test_a_gang_that_would_not_fit_on_an_emptied_cluster_does_not_reserve() -> None:
    world = World(nodes=2)
    world.gang("big", 3)  # three 4-cpu pods, two nodes
    await settle(world.scheduler)
    assert world.scheduler.reservations.reservations == {}
    assert "no capacity reservation: it would not fit even with every pod" in world.message(BIG)


async def test_a_higher_priority_gang_takes_the_slot_of_a_lower_one() -> None:
    world = World(nodes=4)
    world.gang("big", 2)
    await settle(world.scheduler)
    world.gang("vip", 2, priority=50)
    world.clock.advance(1)
    await settle(world.scheduler)
    assert set(world.scheduler.reservations.reservations) == {GroupKey("default", "vip")}
    assert (BIG, Ending.YIELDED) in [(key, ending) for key, ending, _ in world.events]


async def test_deleting_the_podgroup_releases_its_reservation() -> None:
    world = World()
    world.gang("big", 2)
    await settle(world.scheduler)
    world.cache.delete_podgroup("default", "big")
    assert world.scheduler.reservations.reservations == {}
    assert world.events[-1][1] is Ending.RELEASED
