"""Served resource types: names and discovery data, and the per-type write strategy hooks."""

from __future__ import annotations

import hashlib
from base64 import b64encode
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from lockstep.sim.errors import FieldError, bad_request
from lockstep.sim.patch import METADATA_LISTS, ListStrategies
from lockstep.sim.store import View

JsonObject = dict[str, Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
STATUS_VERBS = ("get", "patch", "update")
# Subresources created by a POST of another kind (kind, group, version); the rest serve their parent kind.
CREATE_SUBRESOURCES = {"binding": ("Binding", "", ""), "eviction": ("Eviction", "policy", "v1")}
METADATA_FIELDS = {"metadata.name": "metadata.name", "metadata.namespace": "metadata.namespace"}


@dataclass(slots=True)
class WriteContext:
    """Per-request knobs and results of a write: field validation mode and Warning headers."""

    field_validation: str = "Warn"
    subresource: str = ""
    dry_run: bool = False
    warnings: list[str] = field(default_factory=list)
    # The stored objects of a storage (``"scheduling.k8s.io/priorityclasses"``), for admission steps
    # that read other objects; the server sets it.
    objects_of: Callable[[str], Iterable[JsonObject]] = lambda storage: ()

    def report_unknown_fields(self, kind: str, version: str, unknown: list[str]) -> None:
        """What kube-apiserver does with the fields its decoder dropped: nothing with
        fieldValidation=Ignore, a warning each with Warn, and a 400 naming them with Strict."""
        if not unknown or self.field_validation == "Ignore":
            return
        if self.field_validation == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: '
                f"strict decoding error: {listed}"
            )
        self.warnings.extend(f'unknown field "{u}"' for u in unknown)


class Strategy:
    """Hooks that make a resource type behave like its kube-apiserver registry strategy."""

    # Unknown fields are dropped as Go's decoder does (warned of, or refused with
    # fieldValidation=Strict) before ``decode``: kinds whose every field the emulator knows.
    drops_unknown_fields = False

    def decode(self, rt: ResourceType, obj: JsonObject, ctx: WriteContext) -> None:
        """Reject what the real decoder would (400) and prune unknown fields; may mutate ``obj``."""

    def admit(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext) -> None:
        """Admission plugins of this kind (mutating, then validating; 403 as ``ApiError``), run on the
        decoded object before defaulting and validation."""

    def default(self, rt: ResourceType, obj: JsonObject, old: JsonObject | None) -> None:
        """Apply defaults (create, and again on update like the real decoder)."""

    def normalize(self, rt: ResourceType, obj: JsonObject) -> None:
        """Fields the server always renders (explicit nulls, derived fields)."""

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return []

    def bookmark(self, rt: ResourceType, rv: int) -> JsonObject:
        return {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": {"resourceVersion": str(rv)}}

    def spec_changed(self, new: JsonObject, old: JsonObject) -> bool:
        """Whether a write changes what metadata.generation tracks."""
        return new.get("spec") != old.get("spec")


def storage_version_hash(group: str, version: str, kind: str) -> str:
    digest = hashlib.sha256(f"{group}/{version}/{kind}".encode()).digest()
    return b64encode(digest[:8]).decode()


@dataclass(eq=False)
class ResourceType:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    strategy: Strategy
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    verbs: tuple[str, ...] = ALL_VERBS
    subresources: tuple[str, ...] = ()
    has_generation: bool = False
    returns_deleted_object: bool = False
    unconditional_update: bool = True
    # pods/status (and nodes/status) also apply label and annotation changes; others reset metadata.
    status_updates_metadata: bool = False
    storage: str = ""
    view: View | None = None
    field_labels: dict[str, str] = field(default_factory=lambda: dict(METADATA_FIELDS))
    smp_lists: ListStrategies | None = None
    storage_hash: str = ""
    custom: bool = False

    def __post_init__(self) -> None:
        if not self.storage:
            self.storage = f"{self.group}/{self.plural}"
        if not self.storage_hash:
            self.storage_hash = storage_version_hash(self.group, self.version, self.kind)
        if self.smp_lists is not None:
            self.smp_lists = {**METADATA_LISTS, **self.smp_lists}

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    def discovery(self) -> list[JsonObject]:
        """The APIResourceList entries of this type and its subresources."""
        main: JsonObject = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            main["shortNames"] = list(self.short_names)
        if self.categories:
            main["categories"] = list(self.categories)
        main["storageVersionHash"] = self.storage_hash
        entries = [main]
        for sub in self.subresources:
            entry: JsonObject = {
                "name": f"{self.plural}/{sub}",
                "singularName": "",
                "namespaced": self.namespaced,
            }
            if sub in CREATE_SUBRESOURCES:
                kind, group, version = CREATE_SUBRESOURCES[sub]
                if group:
                    entry.update(group=group, version=version)
                entry.update(kind=kind, verbs=["create"])
            else:
                entry.update(kind=self.kind, verbs=list(STATUS_VERBS))
            entries.append(entry)
        return entries

    def aggregated_discovery(self) -> JsonObject:
        entry: JsonObject = {
            "resource": self.plural,
            "responseKind": {"group": "", "version": "", "kind": self.kind},
            "scope": "Namespaced" if self.namespaced else "Cluster",
            "singularResource": self.singular,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        subs = []
        for sub in self.subresources:
            if sub in CREATE_SUBRESOURCES:
                kind, group, version = CREATE_SUBRESOURCES[sub]
                verbs = ["create"]
            else:
                kind, group, version, verbs = self.kind, "", "", list(STATUS_VERBS)
            subs.append(
                {
                    "subresource": sub,
                    "responseKind": {"group": group, "version": version, "kind": kind},
                    "verbs": verbs,
                }
            )
        if subs:
            entry["subresources"] = subs
        return entry
