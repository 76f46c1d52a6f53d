"""Real kubectl against ``lockstep sim``: the PodGroup CRD as a user meets it.

The tests of this module share one simulated cluster and run in order: they walk one PodGroup
through apply, get, patch, describe, wait, explain, re-apply and delete.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from conftest import Kubectl

pytestmark = pytest.mark.e2e

MANIFESTS = Path(__file__).parent / "manifests"
REPO = Path(__file__).resolve().parents[2]

CRD = REPO / "crds" / "scheduling.lockstep.dev_podgroups.yaml"
GANG = MANIFESTS / "podgroup-gang.yaml"


def test_apply_crd_and_podgroup(kubectl: Kubectl) -> None:
    crd = kubectl.run("apply", "-f", str(CRD))
    assert "customresourcedefinition.apiextensions.k8s.io/podgroups.scheduling.lockstep.dev" in crd.stdout
    created = kubectl.run("apply", "-f", str(GANG))
    assert created.stdout.strip() == "podgroup.scheduling.lockstep.dev/train created"


def test_get_shows_the_printer_columns(kubectl: Kubectl) -> None:
    lines = kubectl.run("get", "lpg").stdout.splitlines()
    header = ["NAME", "POLICY", "MINCOUNT", "SCHEDULED", "RUNNING", "SATISFIED", "PHASE", "AGE"]
    assert lines[0].split() == header
    row = lines[1].split()
    assert row[0] == "train"
    assert row[1] == "4", "MinCount column (policy/status columns are empty until lockstep writes status)"
    by_category = kubectl.run("get", "lockstep", "-o", "name").stdout.split()
    assert by_category == ["podgroup.scheduling.lockstep.dev/train"]


def test_invalid_podgroup_is_rejected_naming_the_field(kubectl: Kubectl) -> None:
    result = kubectl.run("apply", "-f", str(MANIFESTS / "podgroup-invalid.yaml"), check=False)
    assert result.returncode != 0
    assert "spec.schedulingPolicy.gang.minCount" in result.stderr
    assert "empty-gang" in result.stderr
    missing = kubectl.run("get", "lpg", "empty-gang", check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_patch_then_describe(kubectl: Kubectl) -> None:
    patched = kubectl.run(
        "patch", "lpg", "train", "--type=merge", "-p", '{"spec":{"scheduleTimeoutSeconds":120}}'
    )
    assert "podgroup.scheduling.lockstep.dev/train patched" in patched.stdout
    timeout = kubectl.run("get", "lpg", "train", "-o", "jsonpath={.spec.scheduleTimeoutSeconds}").stdout
    assert timeout == "120"
    described = kubectl.run("describe", "lpg", "train").stdout
    assert "Name:         train" in described
    assert "Kind:         PodGroup" in described
    assert "Min Count:  4" in described
    assert "Schedule Timeout Seconds:  120" in described


def test_wait_for_a_status_written_through_the_status_subresource(kubectl: Kubectl) -> None:
    waiter = kubectl.start("wait", "lpg/train", "--for=jsonpath={.status.phase}=Scheduled", "--timeout=20s")
    try:
        kubectl.run(
            "patch",
            "lpg",
            "train",
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"phase": "Scheduled", "policy": "Gang", "scheduled": 4, "running": 0}}),
        )
        stdout, stderr = waiter.communicate(timeout=25)
    except subprocess.TimeoutExpired:
        waiter.kill()
        raise
    assert waiter.returncode == 0, stderr
    assert "podgroup.scheduling.lockstep.dev/train condition met" in stdout
    row = kubectl.run("get", "lpg", "train", "--no-headers").stdout.split()
    assert row[:6] == ["train", "Gang", "4", "4", "0", "Scheduled"]


def test_explain_reads_the_crd_schema(kubectl: Kubectl) -> None:
    # Plain "podgroups" is scheduling.k8s.io's on a cluster serving the upstream API (GenericWorkload).
    spec = kubectl.run("explain", "podgroups.spec", "--api-version=scheduling.lockstep.dev/v1alpha1").stdout
    assert "KIND:       PodGroup" in spec or "KIND:     PodGroup" in spec
    for field in ("schedulingPolicy", "resourceClaims", "scheduleTimeoutSeconds"):
        assert field in spec
    min_count = kubectl.run("explain", "lpg.spec.schedulingPolicy.gang.minCount").stdout
    assert "<integer>" in min_count
    assert "Pods that must be placed in the same scheduling cycle." in min_count


def test_reapply_of_a_changed_manifest_updates_the_podgroup(kubectl: Kubectl) -> None:
    applied = kubectl.run("apply", "-f", str(MANIFESTS / "podgroup-gang-changed.yaml"))
    assert applied.stdout.strip() == "podgroup.scheduling.lockstep.dev/train configured"
    spec = json.loads(kubectl.run("get", "lpg", "train", "-o", "jsonpath={.spec}").stdout)
    # scheduleTimeoutSeconds was 120 by patch; the manifest now owns it. disruptionMode and
    # satisfactionPolicy are the CRD's defaults.
    assert spec == {
        "schedulingPolicy": {"gang": {"minCount": 6}},
        "scheduleTimeoutSeconds": 60,
        "disruptionMode": "single",
        "satisfactionPolicy": "OnceSatisfied",
    }
    unchanged = kubectl.run("apply", "-f", str(MANIFESTS / "podgroup-gang-changed.yaml"))
    assert unchanged.stdout.strip() == "podgroup.scheduling.lockstep.dev/train unchanged"


def test_client_side_apply_of_a_pod_uses_strategic_merge(kubectl: Kubectl) -> None:
    manifest = (MANIFESTS / "pod-member.yaml").read_text()
    assert kubectl.run("apply", "-f", "-", stdin=manifest).stdout.strip() == "pod/train-0 created"
    relabelled = manifest.replace("  labels:\n", "  labels:\n    attempt: second\n")
    configured = kubectl.run("apply", "-f", "-", stdin=relabelled)
    assert configured.stdout.strip() == "pod/train-0 configured"
    labels = json.loads(kubectl.run("get", "pod", "train-0", "-o", "jsonpath={.metadata.labels}").stdout)
    assert labels == {"attempt": "second", "scheduling.lockstep.dev/pod-group": "train"}
    kubectl.run("delete", "pod", "train-0", "--wait=true")


def test_simulated_kubelet_runs_a_bound_pod_and_finishes_its_graceful_deletion(kubectl: Kubectl) -> None:
    kubectl.run("apply", "-f", str(MANIFESTS / "pod-on-node.yaml"))
    kubectl.run("wait", "pod/placed-by-hand", "--for=condition=Ready", "--timeout=20s")
    row = kubectl.run("get", "pod", "placed-by-hand", "-o", "wide", "--no-headers").stdout.split()
    assert row[2] == "Running" and row[6] == "node-000"
    assert row[5].startswith("10.64.0."), f"pod IP {row[5]} is outside node-000's pod CIDR"
    # A bound pod's delete is graceful: it is gone only once the kubelet confirmed it (kubectl waits).
    deleted = kubectl.run("delete", "pod", "placed-by-hand", "--timeout=20s")
    assert deleted.stdout.strip() == 'pod "placed-by-hand" deleted'
    assert kubectl.run("get", "pod", "placed-by-hand", check=False).returncode != 0


def test_delete_removes_the_podgroup(kubectl: Kubectl) -> None:
    deleted = kubectl.run("delete", "-f", str(GANG))
    assert deleted.stdout.strip() == 'podgroup.scheduling.lockstep.dev "train" deleted'
    gone = kubectl.run("get", "lpg", "train", check=False)
    assert gone.returncode != 0
    assert 'podgroups.scheduling.lockstep.dev "train" not found' in gone.stderr


def versioned_kubectls() -> list[Path]:
    """Other kubectl minor versions installed next to the default one (gcloud ships kubectl.1.NN)."""
    default = shutil.which("kubectl")
    if default is None:
        return []
    return sorted(
        Path(os.path.realpath(default)).parent.glob("kubectl.1.*"), key=lambda p: int(p.name.split(".")[-1])
    )


@pytest.mark.parametrize("binary", versioned_kubectls(), ids=lambda path: path.name)
def test_each_installed_kubectl_version_applies_explains_and_deletes(binary: Path, kubectl: Kubectl) -> None:
    versioned = kubectl.using(str(binary))
    name = binary.name.replace(".", "-")
    manifest = GANG.read_text().replace("name: train", f"name: {name}")
    assert versioned.run("apply", "-f", "-", stdin=manifest).stdout.strip() == (
        f"podgroup.scheduling.lockstep.dev/{name} created"
    )
    assert (
        versioned.run("get", "lpg", name, "-o", "jsonpath={.spec.schedulingPolicy.gang.minCount}").stdout
        == "4"
    )
    explained = versioned.run("explain", "podgroups.spec.schedulingPolicy.gang").stdout
    assert "minCount" in explained and "<integer>" in explained
    ports = versioned.run("explain", "pods.spec.containers.ports").stdout
    assert "containerPort" in ports
    assert (
        versioned.run("delete", "lpg", name).stdout.strip()
        == f'podgroup.scheduling.lockstep.dev "{name}" deleted'
    )
