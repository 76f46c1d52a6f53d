"""PodGroupProtection: the first PreBind. It decides once per group cycle whether the placed members
may go on to bind, and every member of that cycle gets the same verdict (a gang never half binds
because its PodGroup's deletion arrived between two members):

- a PodGroup being deleted (either shape) or gone binds nothing more;
- a lockstep PodGroup gets the finalizer ``scheduling.lockstep.dev/podgroup-protection`` before the
  first of its members is bound and before any PreBind writes its group claims, as kube-scheduler
  puts ``resource.kubernetes.io/delete-protection`` on a claim before its allocation. One write per
  group, none when the finalizer is there already; a cycle whose write failed binds nothing. A gang
  withdrawn at shutdown keeps it: the next leader's first PreBind then writes nothing.

Upstream PodGroups get ``scheduling.k8s.io/podgroup-protection`` from the API server: nothing is
written for them.
"""

from __future__ import annotations

import asyncio
from typing import ClassVar

from lockstep.api.podgroup import PROTECTION_FINALIZER
from lockstep.scheduler.framework import SUCCESS, CycleState, GroupKey, PodGroupInfo, PodInfo, Status
from lockstep.scheduler.plugin_context import PluginContext
from lockstep.scheduler.ports import PatchResult, PodGroupAPI
from lockstep.state.cluster import ClusterCache

PODGROUP_API_SERVICE = "podgroup.api"
DELETING_CAUSE = "PodGroupDeleting"
_VERDICT_KEY = "PodGroupProtection/verdict"


def being_deleted(plugin: str, key: GroupKey) -> Status:
    return Status.unschedulable(plugin, DELETING_CAUSE, f"PodGroup {key} is being deleted")


class PodGroupProtection:
    name: ClassVar[str] = "PodGroupProtection"

    def __init__(self, cache: ClusterCache, api: PodGroupAPI | None) -> None:
        self.cache = cache
        self.api = api
        # uids of PodGroups this process protected whose watch event has not shown the finalizer yet
        self._protected: set[str] = set()
        self._writes: dict[str, asyncio.Task[Status]] = {}  # PodGroup uid -> its finalizer write

    @classmethod
    def from_context(cls, ctx: PluginContext) -> PodGroupProtection:
        api = ctx.services.get(PODGROUP_API_SERVICE)
        return cls(ctx.cache, api if isinstance(api, PodGroupAPI) else None)

    def pre_bind_writes(self, state: CycleState, pod: PodInfo, node_name: str) -> bool:
        """The finalizer may stay on a gang withdrawn at shutdown: the next leader finds it there."""
        return False

    async def pre_bind(self, state: CycleState, pod: PodInfo, node_name: str) -> Status:
        if state.group is None:
            return SUCCESS
        verdict: asyncio.Future[Status] | None = state.group_data.get(_VERDICT_KEY)
        if verdict is None:
            verdict = asyncio.ensure_future(self._decide(state.group))
            state.group_data[_VERDICT_KEY] = verdict
        # Shielded: a member cancelled at shutdown must not cancel the verdict its siblings await.
        return await asyncio.shield(verdict)

    async def _decide(self, group: PodGroupInfo) -> Status:
        current = self.cache.podgroup(group.key)
        if current is None or current.uid != group.uid:
            return Status.unschedulable(self.name, "PodGroupDeleted", f"PodGroup {group.key} was deleted")
        if current.terminating:
            return being_deleted(self.name, group.key)
        if current.upstream or current.dialect or self.api is None:  # only lockstep PodGroups are protected
            return SUCCESS
        if current.protected:
            self._protected.discard(current.uid)
            return SUCCESS
        if current.uid in self._protected:
            return SUCCESS
        write = self._writes.get(current.uid)
        if write is None:
            write = asyncio.ensure_future(self._protect(current))
            self._writes[current.uid] = write
            write.add_done_callback(lambda _: self._writes.pop(current.uid, None))
        return await asyncio.shield(write)

    async def _protect(self, group: PodGroupInfo) -> Status:
        assert self.api is not None
        outcome = await self.api.protect(group)
        if outcome.result is PatchResult.OK:
            self._protected.add(group.uid)
            return SUCCESS
        latest = self.cache.podgroup(group.key)
        if latest is not None and latest.uid == group.uid and latest.terminating:
            return being_deleted(self.name, group.key)
        message = (
            f"PodGroup {group.key}: could not add the finalizer {PROTECTION_FINALIZER} "
            f"({outcome.result.value}: {outcome.message or 'no detail'}); no member is bound without it"
        )
        if outcome.result is PatchResult.NOT_FOUND:
            return Status.unschedulable(self.name, "PodGroupDeleted", message)
        return Status.error(self.name, message)
