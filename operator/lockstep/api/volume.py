"""Parse raw PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes (the API's JSON)
into the scheduler's volume types, once, at the edge. Malformed fields raise ``InvalidObjectError``
naming the object and field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from lockstep.api.pod import InvalidObjectError, _list, _mapping
from lockstep.api.quantity import QuantityError, to_units
from lockstep.api.resource import NodeSelector

SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
# The labels a PV's zone or region is named by (VolumeZone), as kube-scheduler reads them.
TOPOLOGY_LABELS = (
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
)


@dataclass(frozen=True, slots=True)
class VolumeMeta:
    name: str
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    deleting: bool = False
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    controller_uid: str = ""  # the uid of the ownerReference with controller: true (metav1.GetControllerOf)


@dataclass(frozen=True, slots=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class PersistentVolume:
    metadata: VolumeMeta
    capacity: int  # bytes
    access_modes: frozenset[str]
    storage_class: str
    volume_mode: str
    node_affinity: NodeSelector | None  # spec.nodeAffinity.required
    claim_ref: ClaimRef | None
    phase: str
    csi_driver: str = ""  # spec.csi.driver, for NodeVolumeLimits
    volume_handle: str = ""  # what NodeVolumeLimits counts (the PV name when not CSI)

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class PersistentVolumeClaim:
    metadata: VolumeMeta
    access_modes: frozenset[str]
    storage_class: str | None  # None: spec.storageClassName unset
    request: int  # bytes
    volume_mode: str
    volume_name: str
    phase: str
    selector: Mapping[str, Any] | None = None  # spec.selector, raw LabelSelector

    @property
    def key(self) -> str:
        return f"{self.metadata.namespace}/{self.metadata.name}"

    @property
    def selected_node(self) -> str:
        return self.metadata.annotations.get(SELECTED_NODE_ANNOTATION, "")


@dataclass(frozen=True, slots=True)
class StorageClass:
    metadata: VolumeMeta
    provisioner: str
    wait_for_first_consumer: bool
    # allowedTopologies: terms ORed, each a list of (label key, allowed values) ANDed
    allowed_topologies: tuple[tuple[tuple[str, frozenset[str]], ...], ...] = ()

    @property
    def name(self) -> str:
        return self.metadata.name


@dataclass(frozen=True, slots=True)
class CSINode:
    metadata: VolumeMeta
    limits: Mapping[str, int]  # driver -> allocatable.count (drivers without a count are unlimited)


def _meta(obj: Mapping[str, Any], kind: str, namespaced: bool) -> VolumeMeta:
    raw = _mapping(obj.get("metadata"), kind, "?", "metadata")
    name = raw.get("name")
    namespace = str(raw.get("namespace") or ("default" if namespaced else ""))
    if not isinstance(name, str) or not name:
        raise InvalidObjectError(
            kind, f"{namespace}/?" if namespaced else "?", "metadata.name", "must be set"
        )
    key = f"{namespace}/{name}" if namespaced else name
    controller_uid = ""
    for index, raw_ref in enumerate(_list(raw.get("ownerReferences"), kind, key, "metadata.ownerReferences")):
        ref = _mapping(raw_ref, kind, key, f"metadata.ownerReferences[{index}]")
        if ref.get("controller") is True:
            controller_uid = str(ref.get("uid") or "")
            break
    return VolumeMeta(
        name=name,
        namespace=namespace,
        uid=str(raw.get("uid") or ""),
        resource_version=str(raw.get("resourceVersion") or "0"),
        deleting=raw.get("deletionTimestamp") is not None,
        labels=dict(_mapping(raw.get("labels"), kind, key, "metadata.labels")),
        annotations=dict(_mapping(raw.get("annotations"), kind, key, "metadata.annotations")),
        controller_uid=controller_uid,
    )


def _storage(value: Any, kind: str, key: str, path: str) -> int:
    if value is None:
        return 0
    try:
        return to_units(value)
    except (QuantityError, TypeError, ValueError):
        raise InvalidObjectError(kind, key, path, f"not a quantity: {value!r}") from None


def _access_modes(spec: Mapping[str, Any], kind: str, key: str) -> frozenset[str]:
    return frozenset(str(mode) for mode in _list(spec.get("accessModes"), kind, key, "spec.accessModes"))


def parse_persistent_volume(obj: Mapping[str, Any]) -> PersistentVolume:
    meta = _meta(obj, "PersistentVolume", namespaced=False)
    key = meta.name
    spec = _mapping(obj.get("spec"), "PersistentVolume", key, "spec")
    affinity = _mapping(spec.get("nodeAffinity"), "PersistentVolume", key, "spec.nodeAffinity").get(
        "required"
    )
    node_affinity = None
    if affinity is not None:
        try:
            node_affinity = NodeSelector.model_validate(affinity)
        except ValidationError as exc:
            problem = exc.errors()[0]
            where = ".".join(str(p) for p in problem["loc"])
            raise InvalidObjectError(
                "PersistentVolume", key, f"spec.nodeAffinity.required.{where}", problem["msg"]
            ) from None
    ref = spec.get("claimRef")
    claim_ref = None
    if ref is not None:
        ref = _mapping(ref, "PersistentVolume", key, "spec.claimRef")
        claim_ref = ClaimRef(
            str(ref.get("namespace") or "default"), str(ref.get("name") or ""), str(ref.get("uid") or "")
        )
    csi = _mapping(spec.get("csi"), "PersistentVolume", key, "spec.csi")
    return PersistentVolume(
        metadata=meta,
        capacity=_storage(
            _mapping(spec.get("capacity"), "PersistentVolume", key, "spec.capacity").get("storage"),
            "PersistentVolume",
            key,
            "spec.capacity.storage",
        ),
        access_modes=_access_modes(spec, "PersistentVolume", key),
        storage_class=str(spec.get("storageClassName") or ""),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        node_affinity=node_affinity,
        claim_ref=claim_ref,
        phase=str(_mapping(obj.get("status"), "PersistentVolume", key, "status").get("phase") or "Pending"),
        csi_driver=str(csi.get("driver") or ""),
        volume_handle=str(csi.get("volumeHandle") or meta.name),
    )


def parse_persistent_volume_claim(obj: Mapping[str, Any]) -> PersistentVolumeClaim:
    meta = _meta(obj, "PersistentVolumeClaim", namespaced=True)
    key = f"{meta.namespace}/{meta.name}"
    kind = "PersistentVolumeClaim"
    spec = _mapping(obj.get("spec"), kind, key, "spec")
    requests = _mapping(
        _mapping(spec.get("resources"), kind, key, "spec.resources").get("requests"),
        kind,
        key,
        "spec.resources.requests",
    )
    class_name = spec.get("storageClassName")
    selector = spec.get("selector")
    return PersistentVolumeClaim(
        metadata=meta,
        access_modes=_access_modes(spec, kind, key),
        storage_class=None if class_name is None else str(class_name),
        request=_storage(requests.get("storage"), kind, key, "spec.resources.requests.storage"),
        volume_mode=str(spec.get("volumeMode") or "Filesystem"),
        volume_name=str(spec.get("volumeName") or ""),
        phase=str(_mapping(obj.get("status"), kind, key, "status").get("phase") or "Pending"),
        selector=None if selector is None else dict(_mapping(selector, kind, key, "spec.selector")),
    )


def parse_storage_class(obj: Mapping[str, Any]) -> StorageClass:
    meta = _meta(obj, "StorageClass", namespaced=False)
    terms = []
    for t, raw_term in enumerate(
        _list(obj.get("allowedTopologies"), "StorageClass", meta.name, "allowedTopologies")
    ):
        term = _mapping(raw_term, "StorageClass", meta.name, f"allowedTopologies[{t}]")
        expressions = _list(
            term.get("matchLabelExpressions"),
            "StorageClass",
            meta.name,
            f"allowedTopologies[{t}].matchLabelExpressions",
        )
        terms.append(
            tuple(
                (str(e.get("key")), frozenset(str(v) for v in e.get("values") or ()))
                for e in expressions
                if isinstance(e, Mapping)
            )
        )
    return StorageClass(
        metadata=meta,
        provisioner=str(obj.get("provisioner") or ""),
        wait_for_first_consumer=obj.get("volumeBindingMode") == "WaitForFirstConsumer",
        allowed_topologies=tuple(terms),
    )


def parse_csinode(obj: Mapping[str, Any]) -> CSINode:
    meta = _meta(obj, "CSINode", namespaced=False)
    spec = _mapping(obj.get("spec"), "CSINode", meta.name, "spec")
    limits: dict[str, int] = {}
    for index, raw in enumerate(_list(spec.get("drivers"), "CSINode", meta.name, "spec.drivers")):
        driver = _mapping(raw, "CSINode", meta.name, f"spec.drivers[{index}]")
        count = _mapping(
            driver.get("allocatable"), "CSINode", meta.name, f"spec.drivers[{index}].allocatable"
        ).get("count")
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            raise InvalidObjectError(
                "CSINode",
                meta.name,
                f"spec.drivers[{index}].allocatable.count",
                f"must be a non-negative integer, got {count!r}",
            )
        limits[str(driver.get("name"))] = count
    return CSINode(metadata=meta, limits=limits)


def label_selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A metav1.LabelSelector (matchLabels and matchExpressions, ANDed) against ``labels``."""
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or ():
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or ()
        present = key in labels
        if operator == "In" and (not present or labels[key] not in values):
            return False
        if operator == "NotIn" and present and labels[key] in values:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True
