"""core/v1 PersistentVolumes and PersistentVolumeClaims, as ``pkg/registry/core/persistentvolume(claim)``
strategies and ``pkg/apis/core/validation``, plus the protection finalizers their admission plugins add."""

from __future__ import annotations

from typing import Any

from lockstep.api.quantity import QuantityError, parse_quantity
from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import (
    DNS1123_SUBDOMAIN,
    SUBDOMAIN_MESSAGE,
    now_rfc3339,
    validate_name,
    validate_object_meta,
)
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

PV_PROTECTION = "kubernetes.io/pv-protection"
PVC_PROTECTION = "kubernetes.io/pvc-protection"
ACCESS_MODES = ["ReadOnlyMany", "ReadWriteMany", "ReadWriteOnce", "ReadWriteOncePod"]
VOLUME_MODES = ["Block", "Filesystem"]
RECLAIM_POLICIES = ["Delete", "Recycle", "Retain"]
PV_SOURCES = (
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "hostPath",
    "glusterfs",
    "nfs",
    "rbd",
    "iscsi",
    "cinder",
    "cephfs",
    "fc",
    "flocker",
    "flexVolume",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "local",
    "storageos",
    "csi",
)
PVC_IMMUTABLE_MESSAGE = (
    "spec is immutable after creation except resources.requests and volumeAttributesClassName"
    " for bound claims"
)


def _add_finalizer(obj: JsonObject, finalizer: str) -> None:
    finalizers = obj["metadata"].setdefault("finalizers", [])
    if finalizer not in finalizers:
        finalizers.append(finalizer)


def _access_mode_errors(path: str, modes: Any, required_detail: str) -> list[FieldError]:
    if not modes:
        return [fe.required(path, required_detail)]
    if not isinstance(modes, list):
        return [fe.invalid(path, modes, "must be a list")]
    errors = [fe.not_supported(path, mode, ACCESS_MODES) for mode in modes if mode not in ACCESS_MODES]
    if "ReadWriteOncePod" in modes and len(modes) > 1:
        errors.append(fe.forbidden(path, "may not use ReadWriteOncePod with other access modes"))
    return errors


def _common_spec_errors(spec: JsonObject, path: str = "spec") -> list[FieldError]:
    errors: list[FieldError] = []
    mode = spec.get("volumeMode")
    if mode is not None and mode not in VOLUME_MODES:
        errors.append(fe.not_supported(f"{path}.volumeMode", mode, VOLUME_MODES))
    class_name = spec.get("storageClassName")
    if class_name and (not isinstance(class_name, str) or not DNS1123_SUBDOMAIN.match(class_name)):
        errors.append(fe.invalid(f"{path}.storageClassName", class_name, SUBDOMAIN_MESSAGE))
    return errors


def claim_spec_errors(spec: JsonObject, path: str = "spec") -> list[FieldError]:
    """``ValidatePersistentVolumeClaimSpec``: a claim's, or a claim template's, spec at ``path``."""
    errors = _access_mode_errors(
        f"{path}.accessModes", spec.get("accessModes"), "at least 1 access mode is required"
    )
    requests = (spec.get("resources") or {}).get("requests") or {}
    if "storage" not in requests:
        errors.append(fe.required(f"{path}.resources[storage]"))
    else:
        errors.extend(_storage_quantity_errors(f"{path}.resources[storage]", requests["storage"]))
    errors.extend(_common_spec_errors(spec, path))
    return errors


# ObjectMeta's fields in Go's order, by JSON name, with the name ``validateFieldAllowList`` reports
# (Go's field name, first letter lowered: UID is "uID").
_TEMPLATE_META_FIELDS = {
    "name": "name",
    "generateName": "generateName",
    "namespace": "namespace",
    "selfLink": "selfLink",
    "uid": "uID",
    "resourceVersion": "resourceVersion",
    "generation": "generation",
    "creationTimestamp": "creationTimestamp",
    "deletionTimestamp": "deletionTimestamp",
    "deletionGracePeriodSeconds": "deletionGracePeriodSeconds",
    "ownerReferences": "ownerReferences",
    "finalizers": "finalizers",
    "managedFields": "managedFields",
}


def ephemeral_volume_errors(pod_spec: JsonObject) -> list[FieldError]:
    """``validateEphemeralVolumeSource`` for each ``spec.volumes[].ephemeral`` of a pod: a
    ``volumeClaimTemplate`` is required; its metadata may set only labels and annotations
    (``ValidateTemplateObjectMeta``) and its spec is validated as a claim's."""
    errors: list[FieldError] = []
    volumes = pod_spec.get("volumes")
    for index, volume in enumerate(volumes if isinstance(volumes, list) else []):
        if not isinstance(volume, dict) or volume.get("ephemeral") is None:
            continue
        path = f"spec.volumes[{index}].ephemeral"
        source = volume["ephemeral"]
        template = source.get("volumeClaimTemplate") if isinstance(source, dict) else None
        if template is None:
            errors.append(fe.required(f"{path}.volumeClaimTemplate"))
            continue
        path += ".volumeClaimTemplate"
        if not isinstance(template, dict):
            errors.append(fe.invalid(path, template, "must be an object"))
            continue
        meta = template.get("metadata") or {}
        if not isinstance(meta, dict):
            errors.append(fe.invalid(f"{path}.metadata", meta, "must be an object"))
        else:
            meta_errors = validate_object_meta(meta, f"{path}.metadata")
            errors.extend(e for e in meta_errors if ".annotations" in e.field)
            errors.extend(e for e in meta_errors if ".annotations" not in e.field)
            errors.extend(
                fe.forbidden(f"{path}.metadata.{reported}", "cannot be set")
                for field, reported in _TEMPLATE_META_FIELDS.items()
                if meta.get(field) not in (None, "", 0, [], {})
            )
        spec = template.get("spec")
        if not isinstance(spec, dict):
            errors.append(fe.invalid(f"{path}.spec", spec, "must be an object"))
        else:
            errors.extend(claim_spec_errors(spec, f"{path}.spec"))
    return errors


def default_ephemeral_volumes(pod_spec: JsonObject) -> None:
    """``SetDefaults_PersistentVolumeClaimSpec`` on each ephemeral volume's claim template."""
    volumes = pod_spec.get("volumes")
    for volume in volumes if isinstance(volumes, list) else []:
        source = volume.get("ephemeral") if isinstance(volume, dict) else None
        template = source.get("volumeClaimTemplate") if isinstance(source, dict) else None
        if isinstance(template, dict) and isinstance(template.get("spec"), dict):
            template["spec"].setdefault("volumeMode", "Filesystem")


def _storage_quantity_errors(path: str, value: Any) -> list[FieldError]:
    try:
        amount = parse_quantity(value)
    except (QuantityError, TypeError, ValueError):
        return [fe.invalid(path, value, "must be a valid quantity")]
    if amount <= 0:
        return [fe.invalid(path, value, "must be greater than zero")]
    return []


def _less(value: Any, than: Any) -> bool:
    """Whether quantity ``value`` is below ``than`` (False when either is missing or malformed)."""
    try:
        return parse_quantity(value) < parse_quantity(than)
    except (QuantityError, TypeError, ValueError):
        return False


class PersistentVolumeStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("persistentVolumeReclaimPolicy", "Retain")
        spec.setdefault("volumeMode", "Filesystem")
        status = obj.get("status")
        if old is None:
            _add_finalizer(obj, PV_PROTECTION)
            obj["status"] = {"phase": "Pending", "lastPhaseTransitionTime": now_rfc3339()}
        elif isinstance(status, dict) and status.get("phase") != (old.get("status") or {}).get("phase"):
            status["lastPhaseTransitionTime"] = now_rfc3339()

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [fe.invalid("spec", spec, "must be an object")]
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        capacity = spec.get("capacity")
        if not capacity:
            errors.append(fe.required("spec.capacity"))
        elif not isinstance(capacity, dict) or set(capacity) != {"storage"}:
            errors.append(fe.not_supported("spec.capacity", capacity, ["storage"]))
        else:
            errors.extend(_storage_quantity_errors("spec.capacity.storage", capacity["storage"]))
        errors.extend(_access_mode_errors("spec.accessModes", spec.get("accessModes"), ""))
        policy = spec.get("persistentVolumeReclaimPolicy")
        if policy not in RECLAIM_POLICIES:
            errors.append(fe.not_supported("spec.persistentVolumeReclaimPolicy", policy, RECLAIM_POLICIES))
        errors.extend(_common_spec_errors(spec))
        errors.extend(self._source_errors(spec))
        if old is not None:
            errors.extend(self._update_errors(spec, old.get("spec") or {}))
        return errors

    @staticmethod
    def _source_errors(spec: JsonObject) -> list[FieldError]:
        sources = [key for key in PV_SOURCES if spec.get(key) is not None]
        if not sources:
            return [fe.required("spec", "must specify a volume type")]
        errors = [
            fe.forbidden(f"spec.{key}", "may not specify more than 1 volume type") for key in sources[1:]
        ]
        affinity = spec.get("nodeAffinity")
        if affinity is not None and (not isinstance(affinity, dict) or not affinity.get("required")):
            errors.append(fe.required("spec.nodeAffinity.required", "must specify required node constraints"))
        source = spec[sources[0]]
        if not isinstance(source, dict):
            return [*errors, fe.invalid(f"spec.{sources[0]}", source, "must be an object")]
        if sources[0] in ("local", "hostPath") and not source.get("path"):
            errors.append(fe.required(f"spec.{sources[0]}.path"))
        if sources[0] == "local" and affinity is None:
            errors.append(fe.required("spec.nodeAffinity", "Local volume requires node affinity"))
        if sources[0] == "csi":
            errors.extend(
                fe.required(f"spec.csi.{key}") for key in ("driver", "volumeHandle") if not source.get(key)
            )
        return errors

    @staticmethod
    def _update_errors(spec: JsonObject, old_spec: JsonObject) -> list[FieldError]:
        errors: list[FieldError] = []
        if any(spec.get(key) != old_spec.get(key) for key in PV_SOURCES):
            errors.append(
                fe.forbidden(
                    "spec.persistentvolumesource", "spec.persistentvolumesource is immutable after creation"
                )
            )
        if spec.get("volumeMode") != old_spec.get("volumeMode"):
            errors.append(fe.invalid("spec.volumeMode", spec.get("volumeMode"), "field is immutable"))
        if old_spec.get("nodeAffinity") is not None and spec.get("nodeAffinity") != old_spec.get(
            "nodeAffinity"
        ):
            errors.append(fe.invalid("spec.nodeAffinity", spec.get("nodeAffinity"), "field is immutable"))
        return errors


class PersistentVolumeClaimStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        spec = obj.setdefault("spec", {})
        if not isinstance(spec, dict):
            return
        spec.setdefault("volumeMode", "Filesystem")
        if old is None:
            _add_finalizer(obj, PVC_PROTECTION)
            obj["status"] = {"phase": "Pending"}

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            return [fe.invalid("spec", spec, "must be an object")]
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        errors.extend(claim_spec_errors(spec))
        if old is not None and not ctx.subresource:
            errors.extend(self._update_errors(obj, old))
        return errors

    @staticmethod
    def _update_errors(obj: JsonObject, old: JsonObject) -> list[FieldError]:
        """The spec is immutable except that an empty volumeName may be set once, and a bound
        claim's storage request may grow (never below its status capacity)."""
        spec, old_spec = dict(obj["spec"]), dict(old.get("spec") or {})
        if not old_spec.get("volumeName"):
            old_spec["volumeName"] = spec.get("volumeName")
        old_spec["volumeAttributesClassName"] = spec.get("volumeAttributesClassName")
        status = old.get("status") or {}
        if status.get("phase") == "Bound":
            old_spec["resources"] = spec.get("resources")
            new_storage = ((spec.get("resources") or {}).get("requests") or {}).get("storage")
            old_storage = (((old.get("spec") or {}).get("resources") or {}).get("requests") or {}).get(
                "storage"
            )
            capacity = (status.get("capacity") or {}).get("storage")
            if _less(new_storage, old_storage) and _less(new_storage, capacity):
                return [
                    fe.forbidden(
                        "spec.resources.requests.storage", "field can not be less than status.capacity"
                    )
                ]
        spec = {k: v for k, v in spec.items() if v is not None}
        old_spec = {k: v for k, v in old_spec.items() if v is not None}
        return [] if spec == old_spec else [fe.forbidden("spec", PVC_IMMUTABLE_MESSAGE)]


def core_storage_types() -> list[ResourceType]:
    return [
        ResourceType(
            "",
            "v1",
            "persistentvolumes",
            "persistentvolume",
            "PersistentVolume",
            False,
            PersistentVolumeStrategy(),
            short_names=("pv",),
            subresources=("status",),
            returns_deleted_object=True,
            smp_lists={},
        ),
        ResourceType(
            "",
            "v1",
            "persistentvolumeclaims",
            "persistentvolumeclaim",
            "PersistentVolumeClaim",
            True,
            PersistentVolumeClaimStrategy(),
            short_names=("pvc",),
            subresources=("status",),
            returns_deleted_object=True,
            smp_lists={("status", "conditions"): "type"},
        ),
    ]
