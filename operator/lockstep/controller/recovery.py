"""Opt-in recovery of stale gangs (``spec.staleGracePeriodSeconds``; an annotation on upstream
PodGroups): a gang that reached minCount and then stays below it (fewer than minCount members bound or
succeeded) for longer than its grace period has its unfinished members evicted through the Eviction
API, each marked ``DisruptionTarget=True`` (reason ``StaleGang``) first, so that their controller can
start the whole gang again.

- Finished members are never evicted, and succeeded members count toward minCount: a gang whose
  members are finishing is not stale (KAI-Scheduler #1968 evicted such jobs).
- A PodDisruptionBudget that refuses an eviction (429) is respected: that member is tried again on the
  next check, the others are evicted meanwhile.
- The DisruptionTarget mark is guarded by the resourceVersion the decision saw: a member that changed
  since (it may have finished) is not marked (409) and is reconsidered on the next check.
- One Warning event ``StaleGang`` on the PodGroup and one count of
  ``lockstep_stale_gang_recoveries_total`` per recovery; ``lockstep_stale_gang_evictions_total{result}``
  per eviction. After a recovery the group gets a whole new grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

from lockstep.kube.events import WARNING, EventRecorder, ObjectReference
from lockstep.logging import get_logger
from lockstep.metrics import Metrics
from lockstep.scheduler.framework import GroupKey, PodInfo
from lockstep.scheduler.ports import EvictionAPI, PatchResult
from lockstep.state.cluster import ClusterCache

log = get_logger("lockstep.controller.recovery")

REASON_STALE_GANG = "StaleGang"
RESULTS = {
    PatchResult.OK: "evicted",
    PatchResult.TOO_MANY_REQUESTS: "refused",
    PatchResult.NOT_FOUND: "gone",
    PatchResult.CONFLICT: "changed",
    PatchResult.ERROR: "error",
}


class StaleGangs:
    def __init__(
        self,
        cache: ClusterCache,
        api: EvictionAPI,
        events: EventRecorder,
        metrics: Metrics,
        reference: Callable[[GroupKey], ObjectReference],
        *,
        period: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = cache
        self.api = api
        self.events = events
        self.metrics = metrics
        self.reference = reference
        self.period = period
        self.clock = clock
        self._below_since: dict[GroupKey, float] = {}
        self._refused: dict[str, str] = {}  # uid of a member whose eviction is retried -> message
        self._evicting: set[str] = set()
        self._recovered: set[GroupKey] = set()  # below minCount and recovered once: no new event
        self._tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.period)
                self.check()
        finally:
            for task in list(self._tasks):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._tasks, return_exceptions=True)

    def check(self) -> None:
        now = self.clock()
        watched: set[GroupKey] = set()
        for info in self.cache.podgroups():
            if info.stale_grace_seconds is None or not info.is_gang:
                continue
            key = info.key
            watched.add(key)
            satisfying = self.cache.bound_count(key) + self.cache.succeeded_count(key)
            if satisfying >= info.min_count or not self.cache.reached_min_count(key):
                self._below_since.pop(key, None)
                self._recovered.discard(key)
                continue
            since = self._below_since.setdefault(key, now)
            if now - since < info.stale_grace_seconds:
                continue
            victims = [
                m
                for m in self.cache.members(key)
                if not m.deleting
                and not m.terminal
                and m.uid not in self._evicting
                and m.uid not in self._refused  # retried below, once a check
            ]
            self._below_since[key] = now  # a new grace period for what its controller makes next
            if not victims:
                continue
            message = (
                f"PodGroup {key} was below minCount {info.min_count} for {now - since:.0f}s "
                f"({satisfying} of {info.min_count} members bound or succeeded; "
                f"staleGracePeriodSeconds {info.stale_grace_seconds:g}): evicting its "
                f"{len(victims)} unfinished members so that their controller can restart the gang"
            )
            log.warning("stale gang", podgroup=str(key), evicting=len(victims), satisfying=satisfying)
            if key not in self._recovered:  # members its controller made since are evicted quietly
                self._recovered.add(key)
                self.metrics.stale_gang_recoveries.inc()
                self.events.record(self.reference(key), WARNING, REASON_STALE_GANG, message)
            for victim in victims:
                self._evict(victim, message)
        for key in set(self._below_since) - watched:
            del self._below_since[key]
        self._recovered &= watched
        for uid, message in list(self._refused.items()):
            current = self.cache.get_pod(uid)
            del self._refused[uid]
            if current is not None and not current.deleting and not current.terminal:
                self._evict(current, message)

    def _evict(self, member: PodInfo, message: str) -> None:
        self._evicting.add(member.uid)
        task = asyncio.get_running_loop().create_task(self._evict_one(member, message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _evict_one(self, member: PodInfo, message: str) -> None:
        try:
            outcome = await self.api.evict(member, REASON_STALE_GANG, message)
        finally:
            self._evicting.discard(member.uid)
        self.metrics.stale_gang_evictions.labels(RESULTS[outcome.result]).inc()
        log.info(
            "stale gang eviction", pod=member.key, result=RESULTS[outcome.result], detail=outcome.message
        )
        if outcome.result in (PatchResult.TOO_MANY_REQUESTS, PatchResult.CONFLICT):
            # refused by a budget, or the member changed since: tried again against the cache, which
            # drops a member that finished meanwhile
            self._refused[member.uid] = message
        elif outcome.result not in (PatchResult.OK, PatchResult.NOT_FOUND):
            log.warning("evicting a member of a stale gang failed", pod=member.key, error=outcome.message)
            self._refused[member.uid] = message
