"""VolumeStore: the PersistentVolumes, PersistentVolumeClaims, StorageClasses and CSINodes the
scheduler knows, fed by the watch handlers.

Volumes and claims live in AssumeCaches (the scheduler's own pre-binding writes are seen before their
watch events); volumes are indexed by StorageClass so matching a claim reads only its class's volumes.
``changed()`` gives an event that is set by the next change, for the PreBind waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from lockstep.api.volume import CSINode, PersistentVolume, PersistentVolumeClaim, StorageClass
from lockstep.state.assume_cache import AssumeCache


class VolumeStore:
    def __init__(self, on_changed: Callable[[], None] | None = None) -> None:
        """``on_changed``: something that can let a waiting pod's volumes fit changed."""
        self.volumes: AssumeCache[PersistentVolume] = AssumeCache()
        self.claims: AssumeCache[PersistentVolumeClaim] = AssumeCache()
        self.classes: dict[str, StorageClass] = {}
        self.csinodes: dict[str, CSINode] = {}
        self._by_class: dict[str, dict[str, None]] = {}
        self._on_changed = on_changed
        self._next_change: asyncio.Event | None = None
        self.volumes.add_listener(self._volume_changed)
        self.claims.add_listener(lambda old, new: self._changed())

    def volumes_of_class(self, storage_class: str) -> list[PersistentVolume]:
        found = []
        for name in self._by_class.get(storage_class, ()):
            volume = self.volumes.get(name)
            if volume is not None:
                found.append(volume)
        return found

    def changed(self) -> asyncio.Event:
        """An event set by the next change of a volume, claim, class or CSINode."""
        if self._next_change is None:
            self._next_change = asyncio.Event()
        return self._next_change

    def _changed(self) -> None:
        if self._next_change is not None:
            self._next_change.set()
            self._next_change = None
        if self._on_changed is not None:
            self._on_changed()

    def _volume_changed(self, old: PersistentVolume | None, new: PersistentVolume | None) -> None:
        if old is not None and (new is None or new.storage_class != old.storage_class):
            members = self._by_class.get(old.storage_class)
            if members is not None:
                members.pop(old.name, None)
                if not members:
                    del self._by_class[old.storage_class]
        if new is not None:
            self._by_class.setdefault(new.storage_class, {})[new.name] = None
        self._changed()

    # --- watch feed ---------------------------------------------------------------------------------

    def upsert_volume(self, volume: PersistentVolume) -> None:
        self.volumes.on_informer_update(volume)

    def delete_volume(self, name: str) -> None:
        self.volumes.on_informer_delete(name)

    def upsert_claim(self, claim: PersistentVolumeClaim) -> None:
        self.claims.on_informer_update(claim)

    def delete_claim(self, namespace: str, name: str) -> None:
        self.claims.on_informer_delete(f"{namespace}/{name}")

    def upsert_class(self, storage_class: StorageClass) -> None:
        self.classes[storage_class.name] = storage_class
        self._changed()

    def delete_class(self, name: str) -> None:
        self.classes.pop(name, None)

    def upsert_csinode(self, csinode: CSINode) -> None:
        self.csinodes[csinode.metadata.name] = csinode
        self._changed()

    def delete_csinode(self, name: str) -> None:
        if self.csinodes.pop(name, None) is not None:
            self._changed()
