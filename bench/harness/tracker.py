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
    ``settled`` is set while the emulator's own controllers are done with every created pod: bound
    pods marked Running by the kubelets, template claims recorded in the pod's status by the
    resourceclaim controller. Only then does the server's request count hold all of their writes.
    """

    def __init__(
        self,
        target: int,
        clock: Callable[[], float] = time.monotonic,
        claims_allocated: bool = True,
        kubelets: bool = True,
    ) -> None:
        if target < 1:
            raise ValueError(f"Tracker target: must be at least 1 pod, got {target}")
        self.target = target
        self.clock = clock
        self.pods: dict[str, PodTimes] = {}
        self.counted: set[str] = set()
        self.counted_bound = 0
        self.all_created = False
        self.complete = asyncio.Event()
        self.settled = asyncio.Event()
        self.running: set[str] = set()
        self.awaiting_running: set[str] = set()
        self.awaiting_claims: set[str] = set()
        self.claims_recorded_at: list[float] = []
        # Without a scheduler nobody allocates claims, and the kubelets never start pods that have one.
        self.claims_allocated = claims_allocated
        self.kubelets = kubelets  # False: the emulator's kubelets start no pod within the run
        self.never_run: set[str] = set()
        self.gang_sizes: dict[str, int] = {}
        self.status_at: dict[str, float] = {}  # gang -> when its PodGroup status first counted all scheduled

    def add_gang(self, gang: GangSpec) -> None:
        self.gang_sizes[gang.name] = gang.pods
        for index in range(gang.pods):
            name = pod_name(gang, index)
            if name in self.pods:
                raise ValueError(f"pod {name} of gang {gang.name} is already tracked")
            self.pods[name] = PodTimes(gang=gang.name)
            if gang.counted:
                self.counted.add(name)
            if gang.claim == "template":
                self.awaiting_claims.add(name)
            if gang.claim in ("template", "group") and not self.claims_allocated:
                self.never_run.add(name)
        self._check()

    def remove_gang(self, gang: GangSpec) -> None:
        self.gang_sizes.pop(gang.name, None)
        self.status_at.pop(gang.name, None)
        for index in range(gang.pods):
            name = pod_name(gang, index)
            times = self.pods.pop(name, None)
            if name in self.counted:
                self.counted.discard(name)
                if times is not None and times.bound_at is not None:
                    self.counted_bound -= 1
            self.running.discard(name)
            self.awaiting_running.discard(name)
            self.awaiting_claims.discard(name)
            self.never_run.discard(name)
        self._check()

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
        if self.kubelets and name not in self.running and name not in self.never_run:
            self.awaiting_running.add(name)
        if name in self.counted:
            self.counted_bound += 1
        self._check()

    def started(self, name: str) -> None:
        """The (simulated) kubelet reported the pod Running."""
        if name in self.pods and name not in self.running:
            self.running.add(name)
            self.awaiting_running.discard(name)
            self._check()

    def claims_recorded(self, name: str) -> None:
        """The resourceclaim controller named the pod's generated claims in its status."""
        if name in self.awaiting_claims:
            self.awaiting_claims.discard(name)
            self.claims_recorded_at.append(self.clock())
            self._check()

    def group_status(self, gang: str, scheduled: int) -> None:
        """PodGroup ``gang``'s status counts ``scheduled`` members scheduled."""
        size = self.gang_sizes.get(gang)
        if size is not None and scheduled >= size and gang not in self.status_at:
            self.status_at[gang] = self.clock()

    def creation_finished(self) -> None:
        self.all_created = True
        self._check()

    @property
    def bound_count(self) -> int:
        return sum(1 for t in self.pods.values() if t.bound_at is not None)

    def _check(self) -> None:
        if self.all_created and self.counted_bound >= self.target:
            self.complete.set()
        if self.all_created and not self.awaiting_running and not self.awaiting_claims:
            self.settled.set()
        else:
            self.settled.clear()
