"""The volume plugins: kube-scheduler's volumebinding, volumezone and volumerestrictions test tables
translated, and the gang behaviour of VolumeBinding (choices per cycle, writes after Permit, undo)."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest
from sched_helpers import FakeClock, gang, make_node, make_scheduler, pod_dict, settle

from lockstep.api.pod import parse_pod
from lockstep.api.volume import (
    SELECTED_NODE_ANNOTATION,
    ClaimRef,
    PersistentVolume,
    PersistentVolumeClaim,
    parse_csinode,
    parse_persistent_volume,
    parse_persistent_volume_claim,
    parse_storage_class,
)
from lockstep.scheduler.framework import Code, CycleState, GroupKey, NodeInfo, PodInfo, Status
from lockstep.scheduler.plugins.node_volume_limits import MAX_VOLUME_COUNT, NodeVolumeLimits
from lockstep.scheduler.plugins.volume_binding import (
    BIND_COMPLETED,
    BIND_CONFLICT,
    NODE_CONFLICT,
    PV_NOT_EXIST,
    STORE_SERVICE,
    VOLUME_API_SERVICE,
    VolumeBinding,
)
from lockstep.scheduler.plugins.volume_restrictions import RWOP_CONFLICT, VolumeRestrictions
from lockstep.scheduler.plugins.volume_zone import NO_VOLUME_ZONE, VolumeZone
from lockstep.scheduler.ports import PatchResult, VolumeWriteOutcome
from lockstep.state.cluster import ClusterCache
from lockstep.state.volumes import VolumeStore

HOSTNAME = "kubernetes.io/hostname"


def storage_class(
    name: str, mode: str = "WaitForFirstConsumer", provisioner: str = "kubernetes.io/no-provisioner"
) -> dict[str, Any]:
    return {"metadata": {"name": name}, "provisioner": provisioner, "volumeBindingMode": mode}


def pvc(
    name: str,
    storage_class: str | None = "wait-sc",
    *,
    bound_to: str = "",
    storage: str = "1Gi",
    phase: str = "Pending",
    modes: tuple[str, ...] = ("ReadWriteOnce",),
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "default",
        "uid": f"uid-pvc-{name}",
        "resourceVersion": "1",
    }
    meta["annotations"] = dict(annotations or {})
    spec: dict[str, Any] = {"accessModes": list(modes), "resources": {"requests": {"storage": storage}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    if bound_to:
        spec["volumeName"] = bound_to
        meta["annotations"][BIND_COMPLETED] = "yes"
        phase = phase if phase != "Pending" else "Bound"
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def pv(
    name: str,
    storage_class: str = "wait-sc",
    *,
    capacity: str = "1Gi",
    affinity: dict[str, list[str]] | None = None,
    labels: dict[str, str] | None = None,
    claim: str = "",
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "capacity": {"storage": capacity},
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": storage_class,
        "local": {"path": "/d"},
    }
    if affinity:
        expressions = [{"key": k, "operator": "In", "values": v} for k, v in affinity.items()]
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": expressions}]}}
    if claim:
        spec["claimRef"] = {"namespace": "default", "name": claim, "uid": f"uid-pvc-{claim}"}
    return {
        "metadata": {"name": name, "labels": labels or {}, "resourceVersion": "1"},
        "spec": spec,
        "status": {"phase": "Bound" if claim else "Available"},
    }


def store_with(
    claims: list[dict[str, Any]] = (),  # type: ignore[assignment]
    volumes: list[dict[str, Any]] = (),  # type: ignore[assignment]
    classes: list[dict[str, Any]] | None = None,
) -> VolumeStore:
    store = VolumeStore()
    for raw in (
        classes
        if classes is not None
        else [storage_class("wait-sc"), storage_class("immediate-sc", "Immediate")]
    ):
        store.upsert_class(parse_storage_class(raw))
    for raw in claims:
        store.upsert_claim(parse_persistent_volume_claim(raw))
    for raw in volumes:
        store.upsert_volume(parse_persistent_volume(raw))
    return store


def pod_with(*claims: str, name: str = "pod-a", group: str | None = None) -> PodInfo:
    volumes = [{"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}} for i, c in enumerate(claims)]
    return parse_pod(pod_dict(name, group=group, volumes=volumes))


def node(name: str, **labels: str) -> NodeInfo:
    return make_node(name, labels={HOSTNAME: name, **labels})


def run_filters(plugin: Any, pod: PodInfo, nodes: list[NodeInfo]) -> tuple[Status, list[Status]]:
    state = CycleState()
    pre = plugin.pre_filter(state, pod)
    if not pre.ok:
        return pre, []
    return pre, [plugin.filter(state, pod, n) for n in nodes]


# --- VolumeBinding: upstream's TestVolumeBinding (PreFilter and Filter) -----------------------------


@pytest.mark.parametrize(
    ("claims", "volumes", "pod_claims", "nodes", "want_pre", "want_filter"),
    [
        pytest.param([], [], (), [node("node-a")], "Skip", [], id="pod has not pvcs"),
        pytest.param(
            [pvc("pvc-a", bound_to="pv-a")],
            [pv("pv-a")],
            ("pvc-a",),
            [node("node-a")],
            "",
            [()],
            id="all bound",
        ),
        pytest.param(
            [],
            [],
            ("pvc-a",),
            [node("node-a")],
            'persistentvolumeclaim "pvc-a" not found',
            [],
            id="PVC does not exist",
        ),
        pytest.param(
            [pvc("pvc-a", bound_to="pv-a")],
            [pv("pv-a")],
            ("pvc-a", "pvc-b"),
            [node("node-a")],
            'persistentvolumeclaim "pvc-b" not found',
            [],
            id="Part of PVCs do not exist",
        ),
        pytest.param(
            [pvc("pvc-a", "immediate-sc")],
            [],
            ("pvc-a",),
            [node("node-a")],
            "pod has unbound immediate PersistentVolumeClaims",
            [],
            id="immediate claims not bound",
        ),
        pytest.param(
            [pvc("pvc-a")],
            [],
            ("pvc-a",),
            [node("node-a")],
            "",
            [(BIND_CONFLICT,)],
            id="unbound claims no matches",
        ),
        pytest.param(
            [pvc("pvc-a", bound_to="pv-a"), pvc("pvc-b")],
            [pv("pv-a", affinity={"foo": ["bar"]})],
            ("pvc-a", "pvc-b"),
            [make_node("node-a", labels={"foo": "barbar"})],
            "",
            [(NODE_CONFLICT, BIND_CONFLICT)],
            id="bound and unbound unsatisfied",
        ),
        pytest.param(
            [pvc("pvc-a", bound_to="pv-a")],
            [],
            ("pvc-a",),
            [node("node-a")],
            "",
            [(PV_NOT_EXIST,)],
            id="pv not found",
        ),
        pytest.param(
            [pvc("pvc-a", bound_to="pv-a", phase="Lost")],
            [],
            ("pvc-a",),
            [node("node-a")],
            'persistentvolumeclaim "pvc-a" bound to non-existent persistentvolume "pv-a"',
            [],
            id="pv not found claim lost",
        ),
        pytest.param(
            [pvc("pvc-a", storage="50Gi")],
            [
                pv("pv-a-0", capacity="200Gi", affinity={HOSTNAME: ["node-a"]}),
                pv("pv-a-1", capacity="200Gi", affinity={HOSTNAME: ["node-a"]}),
                pv("pv-b-0", capacity="100Gi", affinity={HOSTNAME: ["node-b"]}),
                pv("pv-b-1", capacity="100Gi", affinity={HOSTNAME: ["node-b"]}),
            ],
            ("pvc-a",),
            [node("node-a"), node("node-b"), node("node-c")],
            "",
            [(), (), (BIND_CONFLICT,)],
            id="local volumes with close capacity",
        ),
    ],
)
def test_volume_binding_table(
    claims: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    pod_claims: tuple[str, ...],
    nodes: list[NodeInfo],
    want_pre: str,
    want_filter: list[tuple[str, ...]],
) -> None:
    plugin = VolumeBinding(store_with(claims, volumes), None)
    pre, filtered = run_filters(plugin, pod_with(*pod_claims), nodes)
    if want_pre == "Skip":
        assert pre.code is Code.SKIP
    elif want_pre:
        assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and pre.reasons == (want_pre,)
    else:
        assert pre.ok
    for status, reasons in zip(filtered, want_filter, strict=True):
        assert status.reasons == reasons
        assert status.ok == (not reasons)
        if reasons:
            assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE


def test_claim_being_deleted_keeps_the_pod_pending() -> None:
    raw = pvc("pvc-a")
    raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pre, _ = run_filters(VolumeBinding(store_with([raw]), None), pod_with("pvc-a"), [])
    assert pre.reasons == ('persistentvolumeclaim "pvc-a" is being deleted',)


def test_smallest_fitting_volume_is_chosen_and_pre_bound_volume_first() -> None:
    store = store_with(
        [pvc("pvc-a", storage="5Gi"), pvc("pvc-b", storage="5Gi")],
        [
            pv("big", capacity="100Gi"),
            pv("small", capacity="10Gi"),
            pv("tiny", capacity="1Gi"),
            pv("reserved", capacity="50Gi"),
        ],
    )
    reserved = parse_persistent_volume(pv("reserved", capacity="50Gi"))
    newer = dataclasses.replace(reserved.metadata, resource_version="2")
    store.upsert_volume(dataclasses.replace(reserved, metadata=newer, claim_ref=ClaimRef("default", "pvc-b")))
    plugin = VolumeBinding(store, None)
    for claim, want in (("pvc-a", "small"), ("pvc-b", "reserved")):
        state, pod = CycleState(), pod_with(claim, name=f"pod-{claim}")
        assert plugin.pre_filter(state, pod).ok
        assert plugin.filter(state, pod, node("n")).ok
        assert [d.volume for d in plugin._pod_volumes(state, pod).found["n"]] == [want]  # type: ignore[union-attr]


def test_dynamic_provisioning_follows_selected_node_and_allowed_topologies() -> None:
    dynamic = storage_class("fast", provisioner="example.com/fast")
    dynamic["allowedTopologies"] = [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]
    store = store_with(
        [pvc("free", "fast"), pvc("chosen", "fast", annotations={SELECTED_NODE_ANNOTATION: "n2"})],
        classes=[dynamic],
    )
    plugin = VolumeBinding(store, None)
    nodes = [
        make_node("n1", labels={"zone": "a"}),
        make_node("n2", labels={"zone": "a"}),
        make_node("n3", labels={"zone": "b"}),
    ]
    _, free = run_filters(plugin, pod_with("free"), nodes)
    assert [s.ok for s in free] == [True, True, False]
    _, chosen = run_filters(plugin, pod_with("chosen"), nodes)
    assert [s.ok for s in chosen] == [False, True, False]


# --- VolumeZone: upstream's TestSingleZone, TestMultiZone, TestWithBinding -----------------------------

BETA_ZONE, BETA_REGION = "failure-domain.beta.kubernetes.io/zone", "failure-domain.beta.kubernetes.io/region"
ZONE, REGION = "topology.kubernetes.io/zone", "topology.kubernetes.io/region"
ZONE_VOLUMES = {
    "Vol_1": {BETA_ZONE: "us-west1-a"},
    "Vol_2": {BETA_REGION: "us-west1", "uselessLabel": "none"},
    "Vol_Stable_1": {ZONE: "us-west1-a"},
    "Vol_Stable_2": {REGION: "us-west1", "uselessLabel": "none"},
    "Vol_Stable_3": {ZONE: "us-west1-a", REGION: "us-west1-a"},
    "Vol_Multi": {ZONE: "us-west1-c__us-west1-a"},
}


def zone_store() -> VolumeStore:
    claims = [pvc(f"PVC_{name}", bound_to=name) for name in ZONE_VOLUMES]
    claims += [
        pvc("PVC_EmptySC", None),
        pvc("PVC_NoSC", "Class_0"),
        pvc("PVC_ImmediateSC", "immediate-sc"),
        pvc("PVC_WaitSC"),
    ]
    volumes = [pv(name, labels=labels) for name, labels in ZONE_VOLUMES.items()]
    return store_with(claims, volumes)


@pytest.mark.parametrize(
    ("claim", "labels", "want"),
    [
        ("Vol_1", {}, ""),  # node without labels
        ("Vol_1", {BETA_ZONE: "us-west1-a", "uselessLabel": "none"}, ""),
        ("Vol_2", {BETA_REGION: "us-west1"}, ""),
        ("Vol_2", {BETA_REGION: "no_us-west1"}, NO_VOLUME_ZONE),
        ("Vol_1", {BETA_ZONE: "no_us-west1-a"}, NO_VOLUME_ZONE),
        ("Vol_Stable_1", {ZONE: "us-west1-a"}, ""),
        ("Vol_Stable_2", {REGION: "us-west1"}, ""),
        ("Vol_Stable_2", {REGION: "no_us-west1"}, NO_VOLUME_ZONE),
        ("Vol_Stable_1", {ZONE: "no_us-west1-a"}, NO_VOLUME_ZONE),
        ("Vol_Stable_3", {ZONE: "us-west1-a"}, NO_VOLUME_ZONE),  # pv with zone and region, node with zone
        ("Vol_Stable_1", {BETA_ZONE: "us-west1-a"}, NO_VOLUME_ZONE),  # GA pv label, beta node label
        ("Vol_1", {ZONE: "us-west1-a"}, ""),  # beta pv label, GA node label
        ("Vol_1", {ZONE: "us-west1-b"}, NO_VOLUME_ZONE),
        ("Vol_Multi", {ZONE: "us-west1-a"}, ""),  # multi zone
        ("Vol_Multi", {ZONE: "us-west1-b"}, NO_VOLUME_ZONE),
    ],
)
def test_volume_zone_table(claim: str, labels: dict[str, str], want: str) -> None:
    pre, filtered = run_filters(
        VolumeZone(zone_store()), pod_with(f"PVC_{claim}"), [make_node("host1", labels=labels)]
    )
    assert pre.ok
    assert filtered[0].reasons == ((want,) if want else ())


@pytest.mark.parametrize(
    ("claim", "want"),
    [
        ("PVC_EmptySC", "PersistentVolumeClaim had no pv name and storageClass name"),
        ("PVC_NoSC", 'storageclasses.storage.k8s.io "Class_0" not found'),
        ("PVC_ImmediateSC", 'VolumeBindingMode not set for StorageClass "immediate-sc"'),
        ("PVC_WaitSC", "Skip"),
    ],
)
def test_volume_zone_with_binding(claim: str, want: str) -> None:
    pre, _ = run_filters(VolumeZone(zone_store()), pod_with(claim), [])
    if want == "Skip":
        assert pre.code is Code.SKIP
    else:
        assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and pre.reasons == (want,)


# --- VolumeRestrictions: ReadWriteOncePod ---------------------------------------------------------------


def test_read_write_once_pod_claim_is_used_by_one_pod_at_a_time() -> None:
    store = store_with([pvc("solo", modes=("ReadWriteOncePod",)), pvc("shared")])
    cache = ClusterCache("lockstep")
    cache.upsert_node(node("n1"))
    plugin = VolumeRestrictions(cache, store)
    assert plugin.pre_filter(CycleState(), pod_with("shared")).code is Code.SKIP
    first = pod_with("solo", name="first")
    cache.upsert_pod(first)
    assert plugin.pre_filter(CycleState(), first).ok
    cache.assume(first, "n1")  # an earlier member of the same cycle counts like a bound pod
    second = pod_with("solo", name="second")
    status = plugin.pre_filter(CycleState(), second)
    assert status.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and status.reasons == (RWOP_CONFLICT,)


# --- VolumeBinding in a gang ----------------------------------------------------------------------------


class MemoryVolumeAPI:
    """The pre-binding writes; with ``controller`` on, the PV controller (or provisioner) completes
    each binding right after, as the informer would show it."""

    def __init__(self, store: VolumeStore, controller: bool = True) -> None:
        self.store = store
        self.controller = controller
        self.calls: list[tuple[str, str, str | None]] = []
        self.rv = 100

    def _version(self) -> str:
        self.rv += 1
        return str(self.rv)

    async def set_claim_ref(
        self, volume: PersistentVolume, claim: PersistentVolumeClaim | None
    ) -> VolumeWriteOutcome:
        self.calls.append(("claimRef", volume.name, claim.key if claim else None))
        ref = (
            None
            if claim is None
            else ClaimRef(claim.metadata.namespace, claim.metadata.name, claim.metadata.uid)
        )
        written = dataclasses.replace(
            volume,
            claim_ref=ref,
            metadata=dataclasses.replace(volume.metadata, resource_version=self._version()),
        )
        self.store.upsert_volume(written)
        if claim is not None and self.controller:
            asyncio.get_running_loop().call_soon(self._bind, claim.key, volume.name)
        return VolumeWriteOutcome(PatchResult.OK, written)

    async def set_selected_node(
        self, claim: PersistentVolumeClaim, node_name: str | None
    ) -> VolumeWriteOutcome:
        self.calls.append(("selectedNode", claim.key, node_name))
        annotations = {k: v for k, v in claim.metadata.annotations.items() if k != SELECTED_NODE_ANNOTATION}
        if node_name:
            annotations[SELECTED_NODE_ANNOTATION] = node_name
        meta = dataclasses.replace(claim.metadata, annotations=annotations, resource_version=self._version())
        written = dataclasses.replace(claim, metadata=meta)
        self.store.upsert_claim(written)
        return VolumeWriteOutcome(PatchResult.OK, written)

    def _bind(self, claim_key: str, volume_name: str) -> None:
        claim = self.store.claims.get(claim_key)
        volume = self.store.volumes.get(volume_name)
        assert claim is not None and volume is not None
        ref = ClaimRef(claim.metadata.namespace, claim.metadata.name, claim.metadata.uid)
        self.store.upsert_volume(
            dataclasses.replace(
                volume,
                claim_ref=ref,
                phase="Bound",
                metadata=dataclasses.replace(volume.metadata, resource_version=self._version()),
            )
        )
        meta = dataclasses.replace(
            claim.metadata,
            annotations={**claim.metadata.annotations, BIND_COMPLETED: "yes"},
            resource_version=self._version(),
        )
        self.store.upsert_claim(
            dataclasses.replace(claim, metadata=meta, volume_name=volume_name, phase="Bound")
        )


def gang_scheduler(store: VolumeStore, api: MemoryVolumeAPI) -> tuple[Any, Any, ClusterCache]:
    scheduler, pods, cache = make_scheduler(services={STORE_SERVICE: store, VOLUME_API_SERVICE: api})
    for name in ("n1", "n2"):
        cache.upsert_node(node(name))
    cache.upsert_podgroup(gang("g", 2))
    return scheduler, pods, cache


async def test_a_volume_chosen_for_one_member_is_not_offered_to_the_next() -> None:
    store = store_with([pvc("a"), pvc("b")], [pv("only", affinity={HOSTNAME: ["n1"]})])
    api = MemoryVolumeAPI(store)
    scheduler, pods, _ = gang_scheduler(store, api)
    pods.add(pod_with("a", name="m0", group="g"))
    pods.add(pod_with("b", name="m1", group="g"))
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE and "VolumeBindConflict" in attempt.causes
    assert api.calls == [] and pods.bind_calls == []


async def test_gang_volumes_are_written_after_permit_and_bound_before_binding() -> None:
    store = store_with(
        [pvc("a"), pvc("b")],
        [pv("disk-1", affinity={HOSTNAME: ["n1"]}), pv("disk-2", affinity={HOSTNAME: ["n2"]})],
    )
    api = MemoryVolumeAPI(store)
    scheduler, pods, _ = gang_scheduler(store, api)
    pods.add(pod_with("a", name="m0", group="g"))
    await settle(scheduler)
    assert api.calls == [], "nothing is written while the gang is incomplete"
    pods.add(pod_with("b", name="m1", group="g"))
    await settle(scheduler)
    await scheduler.wait_for_tasks()
    assert sorted(api.calls) == [("claimRef", "disk-1", "default/a"), ("claimRef", "disk-2", "default/b")]
    assert sorted(pods.bind_calls) == [("default/m0", "n1"), ("default/m1", "n2")]
    assert {store.claims.get(k).volume_name for k in ("default/a", "default/b")} == {"disk-1", "disk-2"}  # type: ignore[union-attr]


async def test_binding_that_never_completes_times_out_and_is_undone() -> None:
    store = store_with(
        [pvc("a"), pvc("b", "fast")],
        [pv("disk-1", affinity={HOSTNAME: ["n1"]})],
        classes=[storage_class("wait-sc"), storage_class("fast", provisioner="example.com/fast")],
    )
    api = MemoryVolumeAPI(store, controller=False)
    scheduler, pods, _ = gang_scheduler(store, api)
    plugin = scheduler.profile.get(VolumeBinding.name)
    assert isinstance(plugin, VolumeBinding)
    plugin.bind_timeout = 0.05
    pods.add(pod_with("a", name="m0", group="g"))
    pods.add(pod_with("b", name="m1", group="g"))
    while scheduler.schedule_one() is not None:
        pass
    await asyncio.sleep(0.2)  # PreBind waits for the bindings, then gives up
    await scheduler.wait_for_tasks()
    await plugin.wait_for_background()
    assert pods.bind_calls == []
    assert ("claimRef", "disk-1", None) in api.calls, api.calls  # the pre-binding is taken back
    assert ("selectedNode", "default/b", None) in api.calls, api.calls
    volume = store.volumes.get("disk-1")
    claim = store.claims.get("default/b")
    assert volume is not None and volume.claim_ref is None
    assert claim is not None and SELECTED_NODE_ANNOTATION not in claim.metadata.annotations
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert "VolumeBindingTimeout" in attempt.causes


# --- NodeVolumeLimits (CSI), cases after upstream's nodevolumelimits csi tests ---------------------------


def csi_volume(name: str, driver: str = "ebs.csi.aws.com") -> dict[str, Any]:
    raw = pv(name)
    del raw["spec"]["local"]
    raw["spec"]["csi"] = {"driver": driver, "volumeHandle": f"handle-{name}"}
    return raw


@pytest.mark.parametrize(
    ("new_claims", "existing_claims", "limit", "fits"),
    [
        pytest.param(("c1",), ("c2",), 2, True, id="fits under the limit"),
        pytest.param(("c1",), ("c2", "c3"), 2, False, id="exceeds the limit"),
        pytest.param(("c1",), ("c1", "c2"), 2, True, id="a volume already on the node counts once"),
        pytest.param(
            ("c1", "unbound"), ("c2",), 2, False, id="an unbound claim counts under its provisioner"
        ),
        pytest.param(("other",), ("c2", "c3"), 2, True, id="another driver is not limited"),
        pytest.param(("c1",), ("c2", "c3"), None, True, id="a node without a CSINode is not limited"),
    ],
)
def test_node_volume_limits(
    new_claims: tuple[str, ...], existing_claims: tuple[str, ...], limit: int | None, fits: bool
) -> None:
    claims = [pvc(f"c{i}", bound_to=f"v{i}") for i in (1, 2, 3)]
    claims += [pvc("other", bound_to="vo"), pvc("unbound", "csi-wait")]
    volumes = [csi_volume(f"v{i}") for i in (1, 2, 3)] + [csi_volume("vo", "other.csi")]
    classes = [storage_class("wait-sc"), storage_class("csi-wait", provisioner="ebs.csi.aws.com")]
    store = store_with(claims, volumes, classes)
    if limit is not None:
        driver = {"name": "ebs.csi.aws.com", "nodeID": "n1", "allocatable": {"count": limit}}
        store.upsert_csinode(parse_csinode({"metadata": {"name": "n1"}, "spec": {"drivers": [driver]}}))
    else:
        store.upsert_csinode(parse_csinode({"metadata": {"name": "elsewhere"}, "spec": {"drivers": []}}))
    cache = ClusterCache("lockstep")
    cache.upsert_node(node("n1"))
    cache.upsert_pod(
        parse_pod(
            pod_dict(
                "running",
                node_name="n1",
                volumes=[
                    {"name": f"v{i}", "persistentVolumeClaim": {"claimName": c}}
                    for i, c in enumerate(existing_claims)
                ],
            )
        )
    )
    _, filtered = run_filters(NodeVolumeLimits(cache, store), pod_with(*new_claims), [node("n1")])
    status = filtered[0] if filtered else Status()
    assert status.ok == fits
    if not fits:
        assert status.code is Code.UNSCHEDULABLE and status.reasons == (MAX_VOLUME_COUNT,)


def test_candidate_nodes_are_narrowed_to_where_a_bound_volume_is_pinned() -> None:
    store = store_with(
        [pvc("local", bound_to="disk"), pvc("zonal", bound_to="zoned")],
        [pv("disk", affinity={HOSTNAME: ["n2"]}), pv("zoned", affinity={"zone": ["a"]})],
    )
    cache = ClusterCache("lockstep")
    for name in ("n1", "n2", "n3"):
        cache.upsert_node(node(name, zone="a"))
    plugin = VolumeBinding(store, None, cache=cache)
    for claims, want in ((("local",), {"n2"}), (("zonal",), None), (("local", "zonal"), {"n2"})):
        state, pod = CycleState(), pod_with(*claims)
        assert plugin.pre_filter(state, pod).ok
        assert plugin.candidate_nodes(state, pod) == want
    state, pod = CycleState(), pod_with()
    assert plugin.pre_filter(state, pod).code is Code.SKIP
    assert plugin.candidate_nodes(state, pod) is None


# --- generic ephemeral volumes: the claim <pod>-<volume>, owned by the pod --------------------------


def ephemeral_pod(name: str = "pod-a", *volumes: str, group: str | None = None, **spec: Any) -> PodInfo:
    template = {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}
    raw = [{"name": v, "ephemeral": {"volumeClaimTemplate": template}} for v in volumes or ("data",)]
    return parse_pod(pod_dict(name, group=group, volumes=raw, **spec))


def owned_pvc(name: str, owner: str = "pod-a", *, controller: bool = True, **kwargs: Any) -> dict[str, Any]:
    """The claim as the ephemeral volume controller creates it for pod ``owner``."""
    raw = pvc(name, **kwargs)
    raw["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": owner,
            "uid": f"uid-default-{owner}",
            "controller": controller,
            "blockOwnerDeletion": True,
        }
    ]
    return raw


@pytest.mark.parametrize(
    ("claims", "volumes", "want_pre", "want_filter"),
    [
        pytest.param(
            [],
            [],
            'waiting for ephemeral volume controller to create the persistentvolumeclaim "pod-a-data"',
            (),
            id="ephemeral claim not created yet",
        ),
        pytest.param(
            [pvc("pod-a-data")],
            [],
            "PVC default/pod-a-data was not created for pod default/pod-a (pod is not owner)",
            (),
            id="ephemeral claim without owner",
        ),
        pytest.param(
            [owned_pvc("pod-a-data", owner="pod-b")],
            [],
            "PVC default/pod-a-data was not created for pod default/pod-a (pod is not owner)",
            (),
            id="ephemeral claim owned by another pod",
        ),
        pytest.param(
            [owned_pvc("pod-a-data", controller=False)],
            [],
            "PVC default/pod-a-data was not created for pod default/pod-a (pod is not owner)",
            (),
            id="ephemeral claim owned but not controlled by the pod",
        ),
        pytest.param(
            [owned_pvc("pod-a-data", bound_to="pv-a")],
            [pv("pv-a", affinity={HOSTNAME: ["node-b"]})],
            "",
            (NODE_CONFLICT,),
            id="bound ephemeral claim limits the nodes",
        ),
        pytest.param(
            [owned_pvc("pod-a-data")],
            [],
            "",
            (BIND_CONFLICT,),
            id="unbound ephemeral claim no matches",
        ),
        pytest.param(
            [owned_pvc("pod-a-data", storage_class="immediate-sc")],
            [],
            "pod has unbound immediate PersistentVolumeClaims",
            (),
            id="unbound immediate ephemeral claim",
        ),
        pytest.param(
            [owned_pvc("pod-a-data")],
            [pv("pv-a", affinity={HOSTNAME: ["node-a"]})],
            "",
            (),
            id="unbound ephemeral claim finds a volume",
        ),
    ],
)
def test_ephemeral_volume_binding_table(
    claims: list[dict[str, Any]],
    volumes: list[dict[str, Any]],
    want_pre: str,
    want_filter: tuple[str, ...],
) -> None:
    plugin = VolumeBinding(store_with(claims, volumes), None)
    pre, filtered = run_filters(plugin, ephemeral_pod(), [node("node-a")])
    if want_pre:
        assert pre.code is Code.UNSCHEDULABLE_AND_UNRESOLVABLE and pre.reasons == (want_pre,)
        return
    assert pre.ok
    assert filtered[0].reasons == want_filter
    assert filtered[0].ok == (not want_filter)


def test_an_ephemeral_claim_counts_towards_node_volume_limits_only_for_its_pod() -> None:
    def fits_beside(running_claim_owner: str) -> Status:
        claims = [owned_pvc("running-data", owner=running_claim_owner, bound_to="v-running")]
        claims.append(owned_pvc("pod-a-data", bound_to="v-pod-a"))
        store = store_with(claims, [csi_volume("v-running"), csi_volume("v-pod-a")])
        driver = {"name": "ebs.csi.aws.com", "nodeID": "n1", "allocatable": {"count": 1}}
        store.upsert_csinode(parse_csinode({"metadata": {"name": "n1"}, "spec": {"drivers": [driver]}}))
        cache = ClusterCache("lockstep")
        cache.upsert_node(node("n1"))
        cache.upsert_pod(ephemeral_pod("running", node_name="n1"))
        _, filtered = run_filters(NodeVolumeLimits(cache, store), ephemeral_pod("pod-a"), [node("n1")])
        return filtered[0]

    assert fits_beside("running").reasons == (MAX_VOLUME_COUNT,), "its ephemeral volume fills the node"
    assert fits_beside("someone-else").ok, "a claim the running pod does not own is not its volume"


def test_volume_zone_and_read_write_once_pod_ignore_ephemeral_volumes_as_upstream() -> None:
    store = store_with(
        [owned_pvc("pod-a-data", bound_to="zoned", modes=("ReadWriteOncePod",))],
        [pv("zoned", labels={"topology.kubernetes.io/zone": "a"})],
    )
    cache = ClusterCache("lockstep")
    assert VolumeZone(store).pre_filter(CycleState(), ephemeral_pod()).code is Code.SKIP
    assert VolumeRestrictions(cache, store).pre_filter(CycleState(), ephemeral_pod()).code is Code.SKIP


async def test_a_gang_waiting_for_its_ephemeral_claims_is_woken_when_they_are_created() -> None:
    woken: list[ClusterCache] = []
    store = VolumeStore(lambda: woken[0].on_volumes_changed() if woken else None)
    store.upsert_class(parse_storage_class(storage_class("wait-sc")))
    store.upsert_volume(parse_persistent_volume(pv("disk-1", affinity={HOSTNAME: ["n1"]})))
    store.upsert_volume(parse_persistent_volume(pv("disk-2", affinity={HOSTNAME: ["n2"]})))
    api = MemoryVolumeAPI(store)
    scheduler, pods, cache = gang_scheduler(store, api)
    woken.append(cache)
    pods.add(ephemeral_pod("m0", "scratch", group="g"))
    pods.add(ephemeral_pod("m1", "scratch", group="g"))
    await settle(scheduler)
    attempt = scheduler.attempts[GroupKey("default", "g")]
    assert attempt.code is Code.UNSCHEDULABLE and pods.bind_calls == []
    assert 'create the persistentvolumeclaim "m0-scratch"' in attempt.message
    clock = scheduler.clock
    assert isinstance(clock, FakeClock)
    clock.advance(3600)
    await settle(scheduler)
    assert scheduler.attempts[GroupKey("default", "g")] is attempt, "parked: no timed retry helps"
    for member in ("m0", "m1"):  # the ephemeral volume controller creates them
        store.upsert_claim(parse_persistent_volume_claim(owned_pvc(f"{member}-scratch", owner=member)))
    await settle(scheduler)
    await scheduler.wait_for_tasks()
    assert sorted(api.calls) == [
        ("claimRef", "disk-1", "default/m0-scratch"),
        ("claimRef", "disk-2", "default/m1-scratch"),
    ]
    assert sorted(pods.bind_calls) == [("default/m0", "n1"), ("default/m1", "n2")]
