"""AssumeCache and InFlightClaims, including upstream's dra_manager_test.go tables
(TestSignalClaimPendingAllocation, TestGetPendingAllocation, TestMaybeRemoveClaimPendingAllocation)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from lockstep.api.resource import (
    AllocationResult,
    DeviceAllocationResult,
    DeviceRequestAllocationResult,
    ObjectMeta,
    ResourceClaim,
    ResourceClaimStatus,
)
from lockstep.state.assume_cache import AssumeCache, AssumeCacheError
from lockstep.state.inflight import InFlightClaims


def make_claim(name: str, uid: str, rv: str = "1", device: str | None = None) -> ResourceClaim:
    allocation = None
    if device is not None:
        allocation = AllocationResult(
            devices=DeviceAllocationResult(
                results=[DeviceRequestAllocationResult(request="req", driver="d", pool="p", device=device)]
            )
        )
    return ResourceClaim(
        metadata=ObjectMeta(name=name, namespace="ns", uid=uid, resourceVersion=rv),
        status=ResourceClaimStatus(allocation=allocation),
    )


CLAIM = make_claim("claim", "uid-1")
ALLOCATED = make_claim("claim", "uid-1", device="dev-a")
OTHER_ALLOCATED = make_claim("claim", "uid-1", device="dev-b")
OTHER = make_claim("other", "uid-2", device="dev-c")


# --- TestSignalClaimPendingAllocation ---------------------------------------------------------------


@dataclass
class SignalCase:
    in_cache: list[ResourceClaim]
    initial: dict[str, tuple[ResourceClaim, int]]
    uid: str
    claim: ResourceClaim
    expect_recorded: bool
    expect: dict[str, tuple[ResourceClaim, int]] = field(default_factory=dict)


SIGNAL_CASES = {
    "empty": SignalCase([CLAIM], {}, "uid-1", ALLOCATED, True, {"uid-1": (ALLOCATED, 1)}),
    "claim-already-allocated": SignalCase([ALLOCATED], {}, "uid-1", ALLOCATED, False, {}),
    # A claim the informer never delivered (upstream: the synthetic extended-resource claim).
    "claim-not-in-cache": SignalCase([], {}, "uid-1", ALLOCATED, True, {"uid-1": (ALLOCATED, 1)}),
    "already-exists": SignalCase(
        [CLAIM],
        {"uid-1": (ALLOCATED, 1), "uid-2": (OTHER, 1)},
        "uid-1",
        ALLOCATED,
        True,
        {"uid-1": (ALLOCATED, 2), "uid-2": (OTHER, 1)},
    ),
    "already-exists-ignores-different-claim-argument": SignalCase(
        [CLAIM], {"uid-1": (ALLOCATED, 1)}, "uid-1", OTHER_ALLOCATED, True, {"uid-1": (ALLOCATED, 2)}
    ),
}


def _in_flight(
    cache_claims: list[ResourceClaim], initial: dict[str, tuple[ResourceClaim, int]]
) -> InFlightClaims:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    for claim in cache_claims:
        cache.on_informer_update(claim)
    in_flight = InFlightClaims(cache)
    for uid, (claim, sharers) in initial.items():
        for _ in range(sharers):
            in_flight.signal(uid, claim)
    return in_flight


def _snapshot(in_flight: InFlightClaims) -> dict[str, tuple[ResourceClaim, int]]:
    result = {}
    for claim in in_flight.claims():
        uid = claim.metadata.uid
        result[uid] = (claim, in_flight.sharers(uid))
    return result


@pytest.mark.parametrize("case", SIGNAL_CASES.values(), ids=SIGNAL_CASES.keys())
def test_signal_claim_pending_allocation(case: SignalCase) -> None:
    in_flight = _in_flight(case.in_cache, case.initial)
    assert in_flight.signal(case.uid, case.claim) is case.expect_recorded
    snapshot = _snapshot(in_flight)
    assert {uid: sharers for uid, (_, sharers) in snapshot.items()} == {
        uid: sharers for uid, (_, sharers) in case.expect.items()
    }
    for uid, (claim, _) in case.expect.items():
        assert snapshot[uid][0] is claim


# --- TestGetPendingAllocation -----------------------------------------------------------------------

GET_CASES = {
    "empty": ({}, "uid-1", None),
    "nil-claim": ({"uid-1": (CLAIM, 1)}, "uid-1", None),
    "claim": ({"uid-1": (ALLOCATED, 1)}, "uid-1", ALLOCATED.status.allocation),
}


@pytest.mark.parametrize(("initial", "uid", "expect"), GET_CASES.values(), ids=GET_CASES.keys())
def test_get_pending_allocation(
    initial: dict[str, tuple[ResourceClaim, int]], uid: str, expect: AllocationResult | None
) -> None:
    in_flight = _in_flight([], initial)
    before = {k: v[1] for k, v in _snapshot(in_flight).items()}
    assert in_flight.get(uid) is expect
    assert {k: v[1] for k, v in _snapshot(in_flight).items()} == before  # read-only


# --- TestMaybeRemoveClaimPendingAllocation ----------------------------------------------------------

REMOVE_CASES = {
    "empty": ({}, False, False, {}),
    "delete-last-sharer": ({"uid-1": (ALLOCATED, 1)}, False, True, {}),
    "force-delete-last-sharer": ({"uid-1": (ALLOCATED, 1)}, True, True, {}),
    "decrement-remaining-sharers": ({"uid-1": (ALLOCATED, 2)}, False, False, {"uid-1": 1}),
    "force-delete-remaining-sharers": ({"uid-1": (ALLOCATED, 2)}, True, True, {}),
}


@pytest.mark.parametrize(
    ("initial", "force", "deleted", "expect"), REMOVE_CASES.values(), ids=REMOVE_CASES.keys()
)
def test_maybe_remove_claim_pending_allocation(
    initial: dict[str, tuple[ResourceClaim, int]], force: bool, deleted: bool, expect: dict[str, int]
) -> None:
    in_flight = _in_flight([], initial)
    assert in_flight.maybe_remove("uid-1", force) is deleted
    assert {k: v[1] for k, v in _snapshot(in_flight).items()} == expect


def test_in_flight_listeners_see_creation_and_deletion_once() -> None:
    added: list[str] = []
    removed: list[str] = []
    in_flight = InFlightClaims(
        None, lambda c: added.append(c.metadata.uid), lambda c: removed.append(c.metadata.uid)
    )
    in_flight.signal("uid-1", ALLOCATED)
    in_flight.signal("uid-1", ALLOCATED)
    assert in_flight.maybe_remove("uid-1", False) is False
    assert in_flight.maybe_remove("uid-1", False) is True
    assert in_flight.maybe_remove("uid-1", False) is False
    assert (added, removed) == (["uid-1"], ["uid-1"])


# --- AssumeCache ------------------------------------------------------------------------------------


def test_assume_requires_a_version_not_older_than_the_stored_one() -> None:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    cache.on_informer_update(make_claim("claim", "uid-1", rv="5"))
    with pytest.raises(AssumeCacheError, match="older than the stored resourceVersion 5"):
        cache.assume(make_claim("claim", "uid-1", rv="4", device="x"))
    same = make_claim("claim", "uid-1", rv="5", device="x")
    cache.assume(same)
    assert cache.get("ns/claim") is same
    assert cache.is_assumed("ns/claim")


def test_assume_of_unknown_object_or_bad_version_is_refused_naming_the_object() -> None:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    with pytest.raises(AssumeCacheError, match="ns/claim"):
        cache.assume(make_claim("claim", "uid-1"))
    cache.on_informer_update(make_claim("claim", "uid-1", rv="1"))
    with pytest.raises(AssumeCacheError, match=r"ns/claim: metadata.resourceVersion 'abc'"):
        cache.assume(make_claim("claim", "uid-1", rv="abc"))


def test_newer_informer_object_replaces_the_assumed_one_older_does_not() -> None:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    cache.on_informer_update(make_claim("claim", "uid-1", rv="1"))
    assumed = make_claim("claim", "uid-1", rv="3", device="a")
    cache.assume(assumed)
    stale = make_claim("claim", "uid-1", rv="2")
    cache.on_informer_update(stale)  # resync with an older object: the assumed write stays
    assert cache.get("ns/claim") is assumed
    assert cache.get_api_obj("ns/claim") is stale
    newer = make_claim("claim", "uid-1", rv="4", device="b")
    cache.on_informer_update(newer)
    assert cache.get("ns/claim") is newer
    assert not cache.is_assumed("ns/claim")


def test_the_echo_of_two_writes_in_a_row_is_found_at_either_version() -> None:
    """A claim's finalizer write and its status write: both echoes are known objects, not news."""
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    informer = make_claim("claim", "uid-1", rv="1")
    cache.on_informer_update(informer)
    finalizer = make_claim("claim", "uid-1", rv="2")
    status = make_claim("claim", "uid-1", rv="3", device="a")
    cache.assume(finalizer)
    cache.assume(status)
    assert cache.assumed_at("ns/claim", "1") is None  # the informer's copy is not the latest
    assert cache.assumed_at("ns/claim", "2") is finalizer
    assert cache.assumed_at("ns/claim", "3") is status
    cache.on_informer_update(finalizer)  # its echo arrives: nothing older is kept any more
    assert cache.assumed_at("ns/claim", "2") is None
    assert cache.get("ns/claim") is status
    assert cache.assumed_at("ns/missing", "1") is None


def test_restore_drops_the_assumed_copy() -> None:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    informer = make_claim("claim", "uid-1", rv="1")
    cache.on_informer_update(informer)
    cache.assume(make_claim("claim", "uid-1", rv="2", device="a"))
    cache.restore("ns/claim")
    assert cache.get("ns/claim") is informer
    cache.restore("ns/missing")  # nothing to restore is not an error


def test_listeners_see_every_change_of_the_latest_object() -> None:
    cache: AssumeCache[ResourceClaim] = AssumeCache()
    changes: list[tuple[str | None, str | None]] = []
    cache.add_listener(
        lambda old, new: changes.append(
            (old.metadata.resource_version if old else None, new.metadata.resource_version if new else None)
        )
    )
    cache.on_informer_update(make_claim("claim", "uid-1", rv="1"))
    cache.assume(make_claim("claim", "uid-1", rv="2"))
    cache.on_informer_update(make_claim("claim", "uid-1", rv="2"))  # echo of our write: no change
    cache.restore("ns/claim")
    cache.on_informer_delete("ns/claim")
    assert changes == [(None, "1"), ("1", "2"), ("2", "2"), ("2", None)]
