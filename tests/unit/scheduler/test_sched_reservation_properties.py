"""Reservation properties over random streams of small pods and gangs, with time passing (hypothesis):

- no node is ever overcommitted;
- held capacity never goes to a pod that is not a valid backfill: on a held node, the pods placed
  since the reservation was planned that do not end before its expected completion fit beside the
  gang's share (higher-priority pods aside);
- no reservation delays a higher-priority group: no pod is kept off capacity held for a gang of
  lower priority than its own;
- every reservation either completes or times out: none outlives its timeout, and once the stream
  stops every one has ended (completed, timed out, or given way to a higher-priority gang).
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sched_helpers import FakeClock, gang, make_node, make_pod, make_scheduler, settle

from lockstep.config import Settings
from lockstep.scheduler.framework import GroupKey, PodInfo
from lockstep.scheduler.records import GroupAttempt
from lockstep.scheduler.reservation import BACKFILL_START_SLACK, Ending, Reservation

NODES = 4
CPU = 4000
HELD_FOR = re.compile(r"capacity held for gang ([\w-]+/[\w-]+(?:, [\w-]+/[\w-]+)*)")

small = st.tuples(
    st.just("small"),
    st.sampled_from([1, 2]),  # cpus
    st.one_of(st.none(), st.integers(1, 8)),  # activeDeadlineSeconds
    st.floats(0.5, 6.0),  # run seconds
    st.sampled_from([0, 10]),  # priority
)
gangs = st.tuples(
    st.just("gang"),
    st.integers(2, 3),  # pods of 4 cpus: half the cluster or more
    st.sampled_from([0, 5, 10]),
    st.sampled_from([None, 3.0, 10.0]),  # the PodGroup's own reservation timeout
)
ticks = st.tuples(st.just("tick"), st.floats(0.5, 3.0))
streams = st.lists(st.one_of(small, small, gangs, ticks, ticks), min_size=5, max_size=30)


class Run:
    def __init__(self) -> None:
        self.clock = FakeClock(1000.0)
        config = Settings(
            leader_elect=False,
            reservation_delay_seconds=0.0,
            reservation_timeout_seconds=10.0,
            max_reservations=2,
        )
        self.scheduler, self.api, self.cache = make_scheduler(config, clock=self.clock, wall_clock=self.clock)
        self.scheduler.on_reservation = self.changed
        self.scheduler.add_listener(self)
        self.events = 0  # orders placements and reservations made in one settle
        self.placed_seq: dict[str, int] = {}
        for n in range(NODES):
            self.cache.upsert_node(make_node(f"n{n}", cpu="4"))
        self.names = 0
        self.run_for: dict[str, float] = {}  # pod key -> how long its containers run
        self.bound_at: dict[str, float] = {}
        self.planned_seq: dict[GroupKey, int] = {}
        self.started: set[GroupKey] = set()
        self.endings: dict[GroupKey, list[Ending]] = {}

    def changed(self, reservation: Reservation, ending: Ending | None, message: str) -> None:
        self.events += 1
        if ending is None:
            self.planned_seq[reservation.group] = self.events
            self.started.add(reservation.group)
        else:
            self.endings.setdefault(reservation.group, []).append(ending)

    def on_group_attempt(self, attempt: GroupAttempt) -> None:
        self.events += 1
        for pod, _ in attempt.placed:
            self.placed_seq[pod] = self.events

    def on_pod_bound(self, pod: PodInfo, node_name: str) -> None:
        pass

    def on_group_note(self, attempt: GroupAttempt) -> None:
        pass

    def priority(self, key: GroupKey) -> int:
        return self.cache.group_priority(key)

    def apply(self, action: tuple[Any, ...]) -> None:
        self.names += 1
        if action[0] == "small":
            _, cpus, deadline, run, priority = action
            spec = {"activeDeadlineSeconds": deadline} if deadline else {}
            pod = make_pod(f"p{self.names}", cpu=str(cpus), memory=None, priority=priority, **spec)
            self.run_for[pod.key] = min(run, deadline) if deadline else run
            self.api.add(pod)
        elif action[0] == "gang":
            _, size, priority, timeout = action
            name = f"g{self.names}"
            self.cache.upsert_podgroup(
                dataclasses.replace(gang(name, size), priority=priority, reservation_timeout_seconds=timeout)
            )
            for i in range(size):
                pod = make_pod(f"{name}-{i}", cpu="4", memory=None, group=name, priority=priority)
                self.run_for[pod.key] = 2.0
                self.api.add(pod)
        else:
            self.clock.advance(action[1])

    def observe_bindings(self) -> list[PodInfo]:
        new = []
        for key, stored in list(self.api.pods.items()):
            if stored.node_name and key not in self.bound_at:
                self.bound_at[key] = self.clock.now
                new.append(self.api.add(dataclasses.replace(stored, start_time=self.clock.now)))
        return new

    def finish_due(self) -> None:
        for key in [k for k, at in self.bound_at.items() if k in self.api.pods]:
            if self.bound_at[key] + self.run_for[key] <= self.clock.now:
                self.api.delete(key)

    # ------------------------------------------------------------------ the properties

    def check(self) -> None:
        now = self.clock.now
        book = self.scheduler.reservations
        for name, node in self.cache.nodes.items():
            used = sum(p.requests.get("cpu", 0) for p in self.cache.pods_on_node(name))
            assert used <= node.allocatable["cpu"], f"{name} overcommitted: {used}m"
        for reservation in book.reservations.values():
            assert now < reservation.expires_at, f"{reservation.group} outlived its timeout"
            self.check_held(reservation)
        for key, attempt in self.scheduler.attempts.items():
            if attempt.attempt and attempt.timestamp == now:
                for diagnosis in attempt.pods:
                    for holder in (
                        h for found in HELD_FOR.findall(diagnosis.message) for h in found.split(", ")
                    ):
                        namespace, _, name = holder.partition("/")
                        assert self.cache.podgroup(GroupKey(namespace, name)) is not None, holder
                        assert self.priority(GroupKey(namespace, name)) >= self.priority(key), (
                            f"{key} kept off capacity held for the lower-priority gang {holder}"
                        )

    def check_held(self, reservation: Reservation) -> None:
        planned = self.planned_seq[reservation.group]
        priority = self.priority(reservation.group)
        for name, hold in reservation.holds.items():
            others = 0
            for pod in self.cache.pods_on_node(name):
                bound = self.bound_at.get(pod.key)
                if (
                    bound is None
                    or self.placed_seq.get(pod.key, 0) < planned
                    or pod.group_key == reservation.group
                    or self.priority(pod.group_key) > priority
                ):
                    continue
                deadline = pod.active_deadline_seconds
                backfill = (
                    deadline is not None
                    and reservation.expected_completion is not None
                    and bound + BACKFILL_START_SLACK + deadline <= reservation.expected_completion
                )
                if backfill:
                    assert bound + deadline <= reservation.expected_completion
                else:
                    others += pod.requests.get("cpu", 0)
            assert others + hold.requests.get("cpu", 0) <= CPU, (
                f"{name}: pods that are no valid backfill took capacity held for {reservation.group}"
            )


async def play(stream: list[tuple[Any, ...]]) -> Run:
    run = Run()
    for action in stream:
        run.apply(action)
        await settle(run.scheduler)
        run.observe_bindings()
        run.check()
        run.finish_due()
        await settle(run.scheduler)
        run.observe_bindings()
        run.check()
    for _ in range(40):  # the stream stops: everything finishes, every reservation ends
        run.clock.advance(1.0)
        run.finish_due()
        await settle(run.scheduler)
        run.observe_bindings()
        run.check()
    return run


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(streams)
def test_reservations_hold_their_promises_over_random_streams(stream: list[tuple[Any, ...]]) -> None:
    run = asyncio.run(play(stream))
    assert run.scheduler.reservations.reservations == {}
    for key in run.started:
        assert run.endings.get(key), f"{key} never ended"
        # it completes or times out, unless it gives way: to a higher-priority gang, or because the
        # capacity a higher-priority reservation holds leaves it nothing to plan
        assert set(run.endings[key]) <= set(Ending)
