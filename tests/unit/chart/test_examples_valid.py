"""examples/: every object is valid, every pod reaches a PodGroup and its claims, headers parse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate
import pytest
import yaml
from chart_render import REPO_ROOT

from lockstep import POD_GROUP_LABEL, SCHEDULER_NAME
from lockstep.api import kueue, owners
from lockstep.api.coscheduling import from_coscheduling
from lockstep.api.pod import COSCHEDULING_POD_GROUP_LABEL, VOLCANO_GROUP_NAME_ANNOTATION, parse_pod
from lockstep.api.podgroup import PodGroup, PodGroupPhase
from lockstep.api.upstream_podgroup import GROUP as UPSTREAM_GROUP
from lockstep.api.upstream_podgroup import UpstreamPodGroup
from lockstep.api.volcano import from_volcano
from lockstep.config import KNOWN_FEATURE_GATES
from lockstep.controller.template_gangs import MIN_COUNT_ANNOTATION, requested_min_count
from lockstep.sim.registry import OPTIONAL_CRDS
from lockstep.sim.registry.jobset import jobset_crd
from lockstep.sim.registry.leaderworkerset import leaderworkerset_crd

EXAMPLES = REPO_ROOT / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.yaml"))
NAMESPACE = "demo"
DRIVER = "gpu.sim.lockstep.dev"
HEADER_RE = re.compile(
    r"^# lockstep-demo: expect=(?P<phase>[A-Za-z]+)(?: gates=(?P<gates>[A-Za-z,]+))?"
    r"(?: infer=(?P<infer>[A-Za-z,]+))?$"
)
# the workload operators' kinds the examples use, with their emulated CRDs and owner parsers
OWNER_CRDS = {
    "JobSet": (jobset_crd, owners.parse_jobset),
    "LeaderWorkerSet": (leaderworkerset_crd, owners.parse_leaderworkerset),
}
CRD = yaml.safe_load((REPO_ROOT / "crds" / "scheduling.lockstep.dev_podgroups.yaml").read_text())
PODGROUP_SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def objects(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def header(path: Path) -> tuple[str, list[str]] | None:
    """(expected phase, gates) from the ``# lockstep-demo:`` first line; None for setup files."""
    first = path.read_text().splitlines()[0]
    if not first.startswith("# lockstep-demo:"):
        return None
    match = HEADER_RE.match(first)
    assert match is not None, f"{path.name}: malformed header {first!r}"
    return match["phase"], (match["gates"] or "").split(",") if match["gates"] else []


def is_upstream(obj: dict[str, Any]) -> bool:
    return str(obj["apiVersion"]).startswith(f"{UPSTREAM_GROUP}/")


def is_lockstep(obj: dict[str, Any]) -> bool:
    return obj["apiVersion"] == PodGroup.model_fields["api_version"].default


DEMO_FILES = [path for path in EXAMPLE_FILES if header(path) is not None]
# examples whose group is a lockstep PodGroup written out (not another shape's, not made from a Job)
LOCKSTEP_GROUP_FILES = [
    path for path in DEMO_FILES if any(o["kind"] == "PodGroup" and is_lockstep(o) for o in objects(path))
]
# other schedulers' PodGroups: validated against the CRDs the emulator installs (their published schemas)
DIALECT_CRDS = {crd()["spec"]["group"]: crd() for crd in OPTIONAL_CRDS.values()}


def by_kind(path: Path, kind: str) -> list[dict[str, Any]]:
    return [o for o in objects(path) if o["kind"] == kind]


def example(stem_fragment: str) -> Path:
    [path] = [p for p in EXAMPLE_FILES if stem_fragment in p.stem]
    return path


def test_namespace_file_comes_first_and_every_example_is_tagged() -> None:
    assert EXAMPLE_FILES[0].name == "00-namespace.yaml"
    assert [o["kind"] for o in objects(EXAMPLE_FILES[0])] == ["Namespace"]
    assert objects(EXAMPLE_FILES[0])[0]["metadata"]["name"] == NAMESPACE
    assert EXAMPLE_FILES[1:] == DEMO_FILES, "every file but the namespace starts with # lockstep-demo:"
    for path in DEMO_FILES:
        text = path.read_text().splitlines()
        assert any(line.startswith("# expect: ") for line in text[:10]), f"{path.name}: no # expect: line"


@pytest.mark.parametrize("path", DEMO_FILES, ids=lambda p: p.stem)
def test_header_names_a_phase_and_known_gates(path: Path) -> None:
    parsed = header(path)
    assert parsed is not None
    phase, gates = parsed
    assert phase in {p.value for p in PodGroupPhase}
    assert set(gates) <= set(KNOWN_FEATURE_GATES)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.stem)
def test_built_in_objects_validate_against_the_kubernetes_schema(path: Path) -> None:
    for obj in objects(path):
        # kubernetes_validate carries no schema for CRDs (it has 1.37's v1beta1 PodGroup, not 1.36's alpha)
        if obj["apiVersion"] in (PodGroup.model_fields["api_version"].default, f"{UPSTREAM_GROUP}/v1alpha2"):
            continue
        if str(obj["apiVersion"]).split("/")[0] in DIALECT_CRDS:
            continue
        if obj["kind"] in OWNER_CRDS:
            continue  # a workload operator's kind: test_owner_examples_are_gangs_inferred_from_their_spec
        kubernetes_validate.validate(obj, "1.37.0", strict=True)


@pytest.mark.parametrize("path", LOCKSTEP_GROUP_FILES, ids=lambda p: p.stem)
def test_podgroups_validate_against_the_crd_schema_and_model(path: Path) -> None:
    groups = by_kind(path, "PodGroup")
    assert len(groups) == 1, f"{path.name}: one PodGroup per example"
    jsonschema.validate(groups[0], PODGROUP_SCHEMA)
    PodGroup.model_validate(groups[0])


@pytest.mark.parametrize("path", LOCKSTEP_GROUP_FILES, ids=lambda p: p.stem)
def test_pods_join_the_group_and_reference_claims_defined_with_them(path: Path) -> None:
    [group] = by_kind(path, "PodGroup")
    pods = by_kind(path, "Pod")
    claims = {o["metadata"]["name"] for o in by_kind(path, "ResourceClaim")}
    templates = {o["metadata"]["name"] for o in by_kind(path, "ResourceClaimTemplate")}
    for obj in objects(
        path
    ):  # a DeviceClass is cluster-scoped; everything else lives in the demo's namespace
        assert obj["metadata"].get("namespace") == (None if obj["kind"] == "DeviceClass" else NAMESPACE)
    assert pods, f"{path.name}: no pods"
    for pod in pods:
        name = pod["metadata"]["name"]
        assert pod["metadata"]["labels"][POD_GROUP_LABEL] == group["metadata"]["name"], name
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME, name
        declared = {entry["name"] for entry in pod["spec"].get("resourceClaims", [])}
        for entry in pod["spec"].get("resourceClaims", []):
            if "resourceClaimName" in entry:
                assert entry["resourceClaimName"] in claims, name
            else:
                assert entry["resourceClaimTemplateName"] in templates, name
        for container in pod["spec"]["containers"]:
            assert {c["name"] for c in container["resources"].get("claims", [])} <= declared, name
    for entry in group["spec"].get("resourceClaims", []):
        assert entry.get("resourceClaimTemplateName") in templates or entry.get("resourceClaimName") in claims
    min_count = PodGroup.model_validate(group).spec.min_count
    assert len(pods) >= min_count, f"{path.name}: fewer pods than minCount"


def device_requests(path: Path) -> list[dict[str, Any]]:
    specs = [o["spec"] for o in by_kind(path, "ResourceClaim")]
    specs += [o["spec"]["spec"] for o in by_kind(path, "ResourceClaimTemplate")]
    return [spec["devices"] for spec in specs]


@pytest.mark.parametrize("path", DEMO_FILES, ids=lambda p: p.stem)
def test_claims_ask_the_simulated_driver_for_devices(path: Path) -> None:
    for devices in device_requests(path):
        for request in devices["requests"]:
            assert request["exactly"]["deviceClassName"] == DRIVER


def test_training_gang_is_eight_workers_all_required() -> None:
    path = example("training-gang")
    [group] = by_kind(path, "PodGroup")
    assert group["spec"]["schedulingPolicy"]["gang"]["minCount"] == 8
    assert len(by_kind(path, "Pod")) == 8


def test_shared_claim_is_one_claim_referenced_by_name_by_every_member() -> None:
    path = example("shared-claim")
    [claim] = by_kind(path, "ResourceClaim")
    for pod in by_kind(path, "Pod"):
        assert [e.get("resourceClaimName") for e in pod["spec"]["resourceClaims"]] == [
            claim["metadata"]["name"]
        ]


def test_podgroup_claim_comes_from_a_template_on_the_group() -> None:
    path = example("podgroup-claim")
    [group] = by_kind(path, "PodGroup")
    [template] = by_kind(path, "ResourceClaimTemplate")
    assert group["spec"]["resourceClaims"] == [
        {"name": "gpus", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    assert not by_kind(path, "ResourceClaim")


def test_numa_example_matches_a_list_attribute_and_needs_its_gate() -> None:
    path = example("numa")
    parsed = header(path)
    assert parsed is not None and "DRAListTypeAttributes" in parsed[1]
    [devices] = device_requests(path)
    assert devices["constraints"] == [{"requests": ["gpus"], "matchAttribute": f"{DRIVER}/numaNodes"}]
    from lockstep.sim.controllers.dra_driver import device

    assert "ints" in device(0, 8)["attributes"]["numaNodes"], "numaNodes must be a list attribute"


def test_cannot_fit_example_selects_a_rack_no_simulated_node_has() -> None:
    path = example("cannot-fit")
    parsed = header(path)
    assert parsed is not None and parsed[0] == "Unschedulable"
    from lockstep.sim.cluster import RACK_LABEL, make_node

    racks = {make_node(i, 1000)["metadata"]["labels"][RACK_LABEL] for i in range(1000)}
    for pod in by_kind(path, "Pod"):
        assert pod["spec"]["nodeSelector"][RACK_LABEL] not in racks


def test_upstream_podgroup_example_is_joined_by_scheduling_group() -> None:
    path = example("upstream-podgroup")
    [group] = by_kind(path, "PodGroup")
    parsed = UpstreamPodGroup.model_validate(group)
    pods = by_kind(path, "Pod")
    assert len(pods) >= parsed.spec.min_count
    for pod in pods:
        assert pod["spec"]["schedulingGroup"] == {"podGroupName": group["metadata"]["name"]}
        assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
        assert POD_GROUP_LABEL not in (pod["metadata"].get("labels") or {})


@pytest.mark.parametrize("stem", ["job-gang", "job-gated"])
def test_job_examples_form_a_gang_with_the_two_template_lines(stem: str) -> None:
    path = example(stem)
    [job] = by_kind(path, "Job")
    assert not by_kind(path, "PodGroup"), "lockstep creates the PodGroup of a Job's template lines"
    template = job["spec"]["template"]
    min_count = requested_min_count(template)
    assert isinstance(min_count, int) and min_count <= job["spec"]["parallelism"]
    assert template["metadata"]["labels"][POD_GROUP_LABEL] == job["metadata"]["name"]
    assert MIN_COUNT_ANNOTATION in template["metadata"]["annotations"]
    assert template["spec"]["schedulerName"] == SCHEDULER_NAME
    assert bool(template["spec"].get("schedulingGates")) == (stem == "job-gated")


@pytest.mark.parametrize("stem", ["coscheduling-podgroup", "volcano-podgroup"])
def test_other_schedulers_podgroups_validate_against_their_crd_and_are_joined_by_their_pods(
    stem: str,
) -> None:
    path = example(stem)
    [group] = by_kind(path, "PodGroup")
    crd = DIALECT_CRDS[group["apiVersion"].split("/")[0]]
    jsonschema.validate(group, crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    info = from_coscheduling(group) if "coscheduling" in stem else from_volcano(group, {})
    assert not info.refusal
    pods = by_kind(path, "Pod")
    assert len(pods) >= info.min_count
    for pod in pods:
        parsed = parse_pod(pod)
        assert parsed.group_key == info.key, pod["metadata"]["name"]
        assert parsed.scheduler_name == SCHEDULER_NAME
        joined_by = COSCHEDULING_POD_GROUP_LABEL if "coscheduling" in stem else VOLCANO_GROUP_NAME_ANNOTATION
        assert joined_by in {
            **(pod["metadata"].get("labels") or {}),
            **(pod["metadata"].get("annotations") or {}),
        }
    tasks = [parse_pod(p).task for p in pods]
    for task, minimum in info.min_task_members:
        assert tasks.count(task) >= minimum, f"task {task}: fewer pods than minTaskMember"


def test_kueue_example_pods_make_one_gang_of_their_total_count() -> None:
    pods = by_kind(example("kueue-pod-group"), "Pod")
    asks = {p["metadata"]["name"]: kueue.total_count(p["metadata"]["annotations"]) for p in pods}
    [name] = {p["metadata"]["labels"][kueue.POD_GROUP_NAME_LABEL] for p in pods}
    info = kueue.group_info(NAMESPACE, name, asks)
    assert not info.refusal and info.min_count == len(pods)
    assert all(not p["spec"].get("schedulingGates") for p in pods), "the demo has no Kueue to ungate them"


OWNER_FILES = [path for path in DEMO_FILES if any(o["kind"] in OWNER_CRDS for o in objects(path))]


@pytest.mark.parametrize("path", OWNER_FILES, ids=lambda p: p.stem)
def test_owner_examples_are_gangs_inferred_from_their_spec(path: Path) -> None:
    first = path.read_text().splitlines()[0]
    match = HEADER_RE.match(first)
    assert match is not None
    inferred = (match["infer"] or "").split(",")
    assert not by_kind(path, "PodGroup"), "lockstep creates the PodGroups of gangs from owners"
    for obj in objects(path):
        crd_of, parse = OWNER_CRDS[obj["kind"]]
        schema = crd_of()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        jsonschema.validate(obj, schema)
        owner = parse(obj)
        assert owner.problem is None and owner.not_a_gang is None, owner.problem
        labelled = {s.group_label for s in owner.pod_sets} - {None}
        assert labelled or obj["kind"] in inferred, f"{path.name}: neither labelled nor named in infer="
        assert owner.total >= 2, f"{path.name}: a gang of one shows nothing"
