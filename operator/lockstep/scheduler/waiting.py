"""Pods held at Permit: each waits on a future that a plugin resolves (allow / reject) or that
times out in the binding cycle."""

from __future__ import annotations

import asyncio

from lockstep.scheduler.framework import SUCCESS, GroupKey, PodInfo, Status


class WaitingPods:
    def __init__(self) -> None:
        self._futures: dict[str, asyncio.Future[Status]] = {}
        self._groups: dict[GroupKey, set[str]] = {}

    def add(self, pod: PodInfo) -> asyncio.Future[Status]:
        future: asyncio.Future[Status] = asyncio.get_running_loop().create_future()
        self._futures[pod.uid] = future
        self._groups.setdefault(pod.group_key, set()).add(pod.uid)
        return future

    def remove(self, pod: PodInfo) -> None:
        self._futures.pop(pod.uid, None)
        members = self._groups.get(pod.group_key)
        if members is not None:
            members.discard(pod.uid)
            if not members:
                del self._groups[pod.group_key]

    def _resolve(self, uid: str, status: Status) -> None:
        future = self._futures.get(uid)
        if future is not None and not future.done():
            future.set_result(status)

    def reject(self, uid: str, status: Status) -> None:
        self._resolve(uid, status)

    def allow_group(self, key: GroupKey) -> None:
        for uid in list(self._groups.get(key, ())):
            self._resolve(uid, SUCCESS)

    def reject_group(self, key: GroupKey, status: Status) -> None:
        for uid in list(self._groups.get(key, ())):
            self._resolve(uid, status)

    def uids(self, key: GroupKey) -> list[str]:
        return list(self._groups.get(key, ()))

    def count(self, key: GroupKey) -> int:
        return len(self._groups.get(key, ()))

    def __len__(self) -> int:
        return len(self._futures)
