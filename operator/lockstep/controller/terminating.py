"""Lockstep PodGroups being deleted: they keep their finalizer, and their group-level claims stay
allocated and reserved, while any member is bound (or binding) and not finished; then the claims are
released (allocation cleared, then the claim's delete-protection finalizer removed) and, once none
is reserved for the PodGroup any more, lockstep's finalizer is removed, resourceVersion-guarded.

The scheduler binds nothing more of such a group (``PodGroupInfo.terminating``), so the members
holding it only ever go. Checked when the PodGroup changes, when a member changes or goes, after
each attempt of the group (a member whose binding failed), and when leadership starts (a PodGroup
deleted while no lockstep led).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping

from lockstep.api.podgroup import PROTECTION_FINALIZER, PodGroup
from lockstep.controller.status import GroupRef
from lockstep.kube.ports import KubePodGroupAPI
from lockstep.logging import get_logger
from lockstep.scheduler.framework import GroupKey
from lockstep.scheduler.ports import PatchResult
from lockstep.state.cluster import ClusterCache

log = get_logger("lockstep.controller.terminating")

RETRY_SECONDS = 1.0

# (namespace, name, uid) -> keys of the claims still reserved for the PodGroup after the release
ReleaseClaims = Callable[[str, str, str], Awaitable[list[str]]]


class TerminatingPodGroups:
    def __init__(
        self,
        api: KubePodGroupAPI,
        cache: ClusterCache,
        podgroups: Mapping[GroupRef, PodGroup],
        release_claims: ReleaseClaims | None,
    ) -> None:
        self.api = api
        self.cache = cache
        self.podgroups = podgroups
        self.release_claims = release_claims
        self.leading = False
        self._running: dict[GroupRef, asyncio.Task[None]] = {}
        self._again: set[GroupRef] = set()  # changed while its finalization ran: check once more after

    def check(self, key: GroupRef) -> None:
        """Finalize the PodGroup if it is being deleted, carries lockstep's finalizer and no member
        holds it any more (cheap when it is not being deleted: one lookup)."""
        podgroup = self.podgroups.get(key)
        if not self.leading or podgroup is None or podgroup.metadata.deletion_timestamp is None:
            return
        if PROTECTION_FINALIZER not in podgroup.metadata.finalizers or self.holders(key):
            return
        if key in self._running:
            self._again.add(key)
            return
        task = asyncio.get_running_loop().create_task(self._finalize(key, podgroup))
        self._running[key] = task
        task.add_done_callback(lambda _: self._done(key))

    def holders(self, key: GroupRef) -> list[str]:
        """The members bound (or being bound) and not finished: pod keys."""
        members = self.cache.members(GroupKey(key[0], key[1]))
        return [m.key for m in members if m.node_name or self.cache.is_assumed(m.uid)]

    def _done(self, key: GroupRef) -> None:
        self._running.pop(key, None)
        if key in self._again:
            self._again.discard(key)
            self.check(key)

    async def _finalize(self, key: GroupRef, podgroup: PodGroup) -> None:
        where = f"{key[0]}/{key[1]}"
        uid = podgroup.metadata.uid
        if self.release_claims is not None:
            held = await self.release_claims(key[0], key[1], uid)
            if held:
                log.warning(
                    "podgroup finalizer kept: claims still reserved for it, retrying",
                    podgroup=where,
                    claims=held,
                )
                self._retry(key)
                return
        latest = self.podgroups.get(key)
        if latest is None or latest.metadata.uid != uid:
            return
        outcome = await self.api.unprotect(latest)
        if outcome.result in (PatchResult.OK, PatchResult.NOT_FOUND):
            log.info("podgroup finalized", podgroup=where, finalizer=PROTECTION_FINALIZER)
            return
        log.warning(
            "could not remove the podgroup finalizer, retrying",
            podgroup=where,
            finalizer=PROTECTION_FINALIZER,
            result=outcome.result.value,
            error=outcome.message,
        )
        self._retry(key)

    def _retry(self, key: GroupRef) -> None:
        asyncio.get_running_loop().call_later(RETRY_SECONDS, self.check, key)
