"""storage.k8s.io/v1: StorageClasses and CSINodes, as ``pkg/registry/storage/{storageclass,csinode}``
and ``pkg/apis/storage/validation``."""

from __future__ import annotations

from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError
from lockstep.sim.objectmeta import qualified_name_errors, validate_name
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

GROUP = "storage.k8s.io"
RECLAIM_POLICIES = ["Delete", "Retain"]
BINDING_MODES = ["Immediate", "WaitForFirstConsumer"]


class StorageClassStrategy(Strategy):
    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        obj.setdefault("reclaimPolicy", "Delete")
        obj.setdefault("volumeBindingMode", "Immediate")

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        provisioner = obj.get("provisioner")
        if not provisioner:
            errors.append(fe.required("provisioner"))
        else:
            errors.extend(qualified_name_errors("provisioner", str(provisioner).lower()))
        if obj.get("reclaimPolicy") not in RECLAIM_POLICIES:
            errors.append(fe.not_supported("reclaimPolicy", obj.get("reclaimPolicy"), RECLAIM_POLICIES))
        if obj.get("volumeBindingMode") not in BINDING_MODES:
            errors.append(fe.not_supported("volumeBindingMode", obj.get("volumeBindingMode"), BINDING_MODES))
        if old is None:
            return errors
        for key in ("parameters", "provisioner", "reclaimPolicy"):
            if obj.get(key) != old.get(key):
                errors.append(fe.forbidden(key, f"updates to {key} are forbidden."))
        if obj.get("volumeBindingMode") != old.get("volumeBindingMode"):
            errors.append(fe.invalid("volumeBindingMode", obj.get("volumeBindingMode"), "field is immutable"))
        return errors

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        return False


class CSINodeStrategy(Strategy):
    """A node's CSI drivers: ``allocatable.count`` is the most volumes of that driver the node takes."""

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        errors = validate_name(obj["metadata"].get("name")) if old is None else []
        drivers = (obj.get("spec") or {}).get("drivers")
        if drivers is None:
            return [*errors, fe.required("spec.drivers")]
        if not isinstance(drivers, list):
            return [*errors, fe.invalid("spec.drivers", drivers, "must be a list")]
        old_drivers = {
            d.get("name"): d
            for d in ((old or {}).get("spec") or {}).get("drivers") or []
            if isinstance(d, dict)
        }
        seen: set[str] = set()
        for index, driver in enumerate(drivers):
            path = f"spec.drivers[{index}]"
            if not isinstance(driver, dict):
                errors.append(fe.invalid(path, driver, "must be an object"))
                continue
            name = driver.get("name")
            if not name:
                errors.append(fe.required(f"{path}.name"))
            elif name in seen:
                errors.append(fe.duplicate(f"{path}.name", name))
            seen.add(str(name))
            if not driver.get("nodeID"):
                errors.append(fe.required(f"{path}.nodeID"))
            count = (driver.get("allocatable") or {}).get("count")
            if count is not None and (not isinstance(count, int) or isinstance(count, bool) or count < 0):
                errors.append(
                    fe.invalid(f"{path}.allocatable.count", count, "must be greater than or equal to 0")
                )
            before = old_drivers.get(name)
            if before is not None:
                for key in ("nodeID", "topologyKeys", "allocatable"):
                    if driver.get(key) != before.get(key):
                        errors.append(fe.invalid(f"{path}.{key}", driver.get(key), "field is immutable"))
        return errors


def storage_types() -> list[ResourceType]:
    return [
        ResourceType(
            GROUP,
            "v1",
            "storageclasses",
            "storageclass",
            "StorageClass",
            False,
            StorageClassStrategy(),
            short_names=("sc",),
            smp_lists={},
            returns_deleted_object=True,
        ),
        ResourceType(
            GROUP,
            "v1",
            "csinodes",
            "csinode",
            "CSINode",
            False,
            CSINodeStrategy(),
            smp_lists={("spec", "drivers"): "name"},
            returns_deleted_object=True,
        ),
    ]
