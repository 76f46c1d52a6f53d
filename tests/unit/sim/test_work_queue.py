"""The emulator's controllers' work queue: a key is never synced by two workers at once."""

from __future__ import annotations

import asyncio

from lockstep.sim.watching import WorkQueue


async def test_a_key_added_while_it_syncs_is_synced_again_after_not_beside() -> None:
    running: set[str] = set()
    overlaps: list[str] = []
    synced: list[str] = []
    release = asyncio.Event()

    async def sync(key: str) -> None:
        if key in running:
            overlaps.append(key)
        running.add(key)
        try:
            await release.wait()
            synced.append(key)
        finally:
            running.discard(key)

    queue = WorkQueue(sync, workers=4, name="test")
    queue.start()
    try:
        queue.add("pod:a")
        await asyncio.sleep(0.01)
        queue.add("pod:a")  # an event for the pod while its first sync waits for the API
        queue.add("pod:a")
        queue.add("pod:b")
        await asyncio.sleep(0.01)
        assert running == {"pod:a", "pod:b"}, "the other workers take other keys, not pod:a again"
        release.set()
        for _ in range(100):
            if len(synced) == 3:
                break
            await asyncio.sleep(0.01)
    finally:
        await queue.stop()
    assert overlaps == []
    assert sorted(synced) == ["pod:a", "pod:a", "pod:b"], "the adds during the sync make one more sync"
