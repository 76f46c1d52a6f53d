"""InFlightClaims: allocations decided in Reserve but not yet written to the API.

One entry per claim UID with a sharer count: the first pod that reserves an unallocated claim
records the allocated claim, later pods of the same group that share the claim add themselves as
sharers and reuse the stored allocation (they never allocate again). Each successful ``signal`` is
released exactly once: by ``maybe_remove(uid, force=True)`` after PreBind wrote the claim, which
deletes the whole entry, or by ``maybe_remove(uid, force=False)`` in Unreserve.

``signal`` records nothing when the assume cache already holds the claim allocated (docs/architecture.md
behaviour 1, upstream #140269): removing such a record later would restore a stale, unallocated copy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lockstep.api.resource import AllocationResult, ResourceClaim
from lockstep.state.assume_cache import AssumeCache, object_key

ClaimListener = Callable[[ResourceClaim], None]


@dataclass(slots=True)
class InFlightAllocation:
    claim: ResourceClaim
    sharers: int


class InFlightClaims:
    __slots__ = ("_cache", "_entries", "_on_added", "_on_removed")

    def __init__(
        self,
        cache: AssumeCache[ResourceClaim] | None = None,
        on_added: ClaimListener | None = None,
        on_removed: ClaimListener | None = None,
    ) -> None:
        self._cache = cache
        self._entries: dict[str, InFlightAllocation] = {}
        self._on_added = on_added
        self._on_removed = on_removed

    def signal(self, claim_uid: str, allocated_claim: ResourceClaim) -> bool:
        """Record a pending allocation or add a sharer to it; True if something was recorded.

        An existing entry keeps its stored claim whatever ``allocated_claim`` says.
        """
        entry = self._entries.get(claim_uid)
        if entry is not None:
            entry.sharers += 1
            return True
        if self._cache is not None:
            cached = self._cache.get(object_key(allocated_claim))
            if cached is not None and cached.metadata.uid == claim_uid and cached.allocated:
                return False
        self._entries[claim_uid] = InFlightAllocation(allocated_claim, 1)
        if self._on_added is not None:
            self._on_added(allocated_claim)
        return True

    def get(self, claim_uid: str) -> AllocationResult | None:
        """The pending allocation of the claim, if any (read-only)."""
        entry = self._entries.get(claim_uid)
        return entry.claim.status.allocation if entry is not None else None

    def sharers(self, claim_uid: str) -> int:
        entry = self._entries.get(claim_uid)
        return entry.sharers if entry is not None else 0

    def maybe_remove(self, claim_uid: str, force: bool) -> bool:
        """Release one sharer, or with ``force`` the whole entry; True if the entry was deleted."""
        entry = self._entries.get(claim_uid)
        if entry is None:
            return False
        entry.sharers -= 1
        if entry.sharers > 0 and not force:
            return False
        del self._entries[claim_uid]
        if self._on_removed is not None:
            self._on_removed(entry.claim)
        return True

    def claims(self) -> Iterator[ResourceClaim]:
        return (entry.claim for entry in self._entries.values())

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, claim_uid: object) -> bool:
        return claim_uid in self._entries
