"""What the load generator created and the watcher saw bound, and when the phase is complete."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.results import PodTimes
from harness.workloads import GangSpec, pod_name


class Tracker:
    """Pod records of the live gangs; complete once ``target`` counted pods are bound.

    Gangs deleted by churn leave the records, so only pods that still exist count towards the target.
    """

    def __init__(self, target: int, clock: Callable[[], float] = time.monotonic) -> None:
        if target < 1:
            raise ValueError(f"Tracker target: must be at least 1 pod, got {target}")
        self.target = target
        self.clock = clock
        self.pods: dict[str, PodTimes] = {}
        self.counted: set[str] = set()
        self.counted_bound = 0
        self.all_created = False
        self.complete = asyncio.Event()
        self.running: set[str] = set()
        self.bound_count = 0
        self.bound_running = 0
        self.settled = asyncio.Event()

    def add_gang(self, gang: GangSpec) -> None:
        for index in range(gang.pods):
            name = pod_name(gang, index)
            if name in self.pods:
                raise ValueError(f"pod {name} of gang {gang.name} is already tracked")
            self.pods[name] = PodTimes(gang=gang.name)
            if gang.counted:
                self.counted.add(name)

    def remove_gang(self, gang: GangSpec) -> None:
        for index in range(gang.pods):
            name = pod_name(gang, index)
            times = self.pods.pop(name, None)
            if times is not None and times.bound_at is not None:
                self.bound_count -= 1
                if name in self.running:
                    self.bound_running -= 1
            self.running.discard(name)
            if name in self.counted:
                self.counted.discard(name)
                if times is not None and times.bound_at is not None:
                    self.counted_bound -= 1

    def created(self, name: str) -> None:
        times = self.pods.get(name)
        if times is not None:
            times.created_at = self.clock()

    def bound(self, name: str) -> None:
        """The first sighting of ``spec.nodeName`` on pod ``name``; later ones change nothing."""
        times = self.pods.get(name)
        if times is None or times.bound_at is not None:
            return
        times.bound_at = self.clock()
        self.bound_count += 1
        if name in self.running:
            self.bound_running += 1
        if name in self.counted:
            self.counted_bound += 1
        self._check()

    def started(self, name: str) -> None:
        """The (simulated) kubelet reported the pod Running: the emulator's work for it is done."""
        times = self.pods.get(name)
        if times is None or name in self.running:
            return
        self.running.add(name)
        if times.bound_at is not None:
            self.bound_running += 1
        self._check()

    def creation_finished(self) -> None:
        self.all_created = True
        self._check()

    def _check(self) -> None:
        if self.all_created and self.counted_bound >= self.target:
            self.complete.set()
        # Settled: every bound pod is Running, so the kubelets' status writes of the phase are counted.
        if self.complete.is_set() and self.bound_running == self.bound_count:
            self.settled.set()
        else:
            self.settled.clear()
