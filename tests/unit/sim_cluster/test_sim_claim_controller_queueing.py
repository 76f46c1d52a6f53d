"""Which pod events give the resourceclaim controller work: only pods with a template claim their status
does not name yet (the claim controller's own status patch, bindings and kubelet updates do not)."""

from __future__ import annotations

from typing import Any

from lockstep.sim.controllers.resourceclaim import unrecorded_template_claims


def pod(statuses: list[dict[str, str]] | None = None, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "w", "namespace": "ns", "uid": "u"}
    if deleting:
        metadata["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {
        "metadata": metadata,
        "spec": {
            "resourceClaims": [
                {"name": "gpu", "resourceClaimTemplateName": "gpu-template"},
                {"name": "nic", "resourceClaimTemplateName": "nic-template"},
                {"name": "shared", "resourceClaimName": "group-claim"},
            ]
        },
        "status": {"resourceClaimStatuses": statuses or []},
    }


def test_only_template_claims_not_yet_recorded_need_work() -> None:
    assert unrecorded_template_claims(pod()) == {"gpu": "gpu-template", "nic": "nic-template"}
    partly = pod([{"name": "gpu", "resourceClaimName": "w-gpu-abcde"}])
    assert unrecorded_template_claims(partly) == {"nic": "nic-template"}
    done = pod(
        [
            {"name": "gpu", "resourceClaimName": "w-gpu-abcde"},
            {"name": "nic", "resourceClaimName": "w-nic-fghij"},
        ]
    )
    assert unrecorded_template_claims(done) == {}


def test_a_pod_being_deleted_needs_no_claims() -> None:
    assert unrecorded_template_claims(pod(deleting=True)) == {}
