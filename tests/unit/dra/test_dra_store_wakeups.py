"""What the ResourceStore reports to the scheduler: a new claim only as a new claim (it frees no device),
a released allocation as a change that can let waiting pods fit."""

from __future__ import annotations

from dra_builders import DRIVER, claim, exactly

from lockstep.api.resource import ResourceClaim
from lockstep.dra.features import Features
from lockstep.dra.store import ResourceStore

ALLOCATED = {
    "allocation": {
        "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": "p", "device": "d"}]}
    },
    "reservedFor": [{"resource": "pods", "name": "p", "uid": "uid-p"}],
}


def recording_store(with_claim_hook: bool) -> tuple[ResourceStore, list[str]]:
    seen: list[str] = []

    def claim_added(added: ResourceClaim) -> None:
        seen.append(f"added {added.metadata.name}")

    store = ResourceStore(
        Features(), lambda: seen.append("resources changed"), claim_added if with_claim_hook else None
    )
    return store, seen


def test_a_new_claim_is_reported_as_added_and_a_released_allocation_as_a_change() -> None:
    store, seen = recording_store(with_claim_hook=True)
    store.upsert_claim(claim("c", exactly("gpu"), uid="uid-c", rv="1"))
    assert seen == ["added c"]

    store.upsert_claim(claim("c", exactly("gpu"), uid="uid-c", rv="2", status=ALLOCATED))
    assert seen == ["added c"], "an allocation takes devices: it cannot help anyone fit"

    store.upsert_claim(claim("c", exactly("gpu"), uid="uid-c", rv="3"))
    assert seen == ["added c", "resources changed"]


def test_without_a_claim_hook_a_new_claim_counts_as_a_change() -> None:
    store, seen = recording_store(with_claim_hook=False)
    store.upsert_claim(claim("c", exactly("gpu")))
    assert seen == ["resources changed"]


def test_a_podgroup_status_without_claim_names_is_no_change() -> None:
    store, seen = recording_store(with_claim_hook=True)
    store.record_group_claims(("ns", "g"), {})
    store.record_group_claims(("ns", "g"), {})
    assert seen == []
    store.record_group_claims(("ns", "g"), {"gpu": "g-gpu-abcde"})
    assert seen == ["resources changed"]
    store.record_group_claims(("ns", "g"), {"gpu": "g-gpu-abcde"})
    assert seen == ["resources changed"]
