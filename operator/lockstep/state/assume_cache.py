"""AssumeCache: the informer's objects plus the scheduler's own newer writes ("assumed" objects).

After the scheduler writes an object (a claim's allocation and reservations), the watch event may
arrive much later. Until then the scheduler must see what it wrote, or it would allocate the same
claim again. The cache keeps both copies per key: the informer's object and the latest one. Rules (as
kube-scheduler's assumecache):

* an informer object whose resourceVersion is newer than the latest replaces the assumed one; an older
  or equal one only updates the informer copy (a resync must not undo an assumed write);
* ``assume(obj)`` is refused when ``obj`` is older than the stored latest object;
* ``restore(key)`` drops the assumed copy and falls back to the informer's;
* ``assumed_at(key, version)`` finds what is known at a version, so the echo of an own write (also
  one a second write already replaced) need not be parsed again;
* an informer delete removes the key.

Listeners registered with ``add_listener`` see every change of the latest object (``old``, ``new``;
None for absent), which is how indexes such as the allocated-device set stay incremental.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar


class VersionedMeta(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def namespace(self) -> str: ...

    @property
    def resource_version(self) -> str: ...


class Versioned(Protocol):
    @property
    def metadata(self) -> VersionedMeta: ...


ObjT = TypeVar("ObjT", bound=Versioned)
Listener = Callable[[ObjT | None, ObjT | None], None]


class AssumeCacheError(ValueError):
    """An assume was refused: unknown object, unparsable or older resourceVersion."""


def object_key(obj: Versioned) -> str:
    meta = obj.metadata
    return f"{meta.namespace}/{meta.name}" if meta.namespace else meta.name


def _version(obj: Versioned) -> int:
    text = obj.metadata.resource_version
    try:
        return int(text)
    except ValueError:
        raise AssumeCacheError(
            f"{object_key(obj)}: metadata.resourceVersion {text!r} is not an integer"
        ) from None


@dataclass(slots=True)
class _Entry(Generic[ObjT]):
    api_obj: ObjT
    latest: ObjT
    # An assumed object a later assume replaced before the informer delivered it (two writes in a
    # row, e.g. a claim's finalizer then its status): its echo is still to come.
    superseded: ObjT | None = None


class AssumeCache(Generic[ObjT]):
    __slots__ = ("_entries", "_listeners")

    def __init__(self) -> None:
        self._entries: dict[str, _Entry[ObjT]] = {}
        self._listeners: list[Listener[ObjT]] = []

    def add_listener(self, listener: Listener[ObjT]) -> None:
        self._listeners.append(listener)

    def _changed(self, old: ObjT | None, new: ObjT | None) -> None:
        if old is new:
            return
        for listener in self._listeners:
            listener(old, new)

    # --- informer side ---

    def on_informer_update(self, obj: ObjT) -> None:
        """An add or update from the watch."""
        key = object_key(obj)
        entry = self._entries.get(key)
        if entry is None:
            self._entries[key] = _Entry(obj, obj)
            self._changed(None, obj)
            return
        entry.api_obj = obj
        if entry.superseded is not None and _version(obj) >= _version(entry.superseded):
            entry.superseded = None
        if _version(obj) > _version(entry.latest):
            old = entry.latest
            entry.latest = obj
            self._changed(old, obj)

    def on_informer_delete(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._changed(entry.latest, None)

    # --- scheduler side ---

    def assume(self, obj: ObjT) -> None:
        """Make ``obj`` (typically the object an API write returned) the latest version."""
        key = object_key(obj)
        entry = self._entries.get(key)
        if entry is None:
            raise AssumeCacheError(f"{key}: cannot assume an object the informer has not delivered")
        new_version, stored_version = _version(obj), _version(entry.latest)
        if new_version < stored_version:
            raise AssumeCacheError(
                f"{key}: cannot assume resourceVersion {new_version}, "
                f"older than the stored resourceVersion {stored_version}"
            )
        old = entry.latest
        entry.superseded = old if old is not entry.api_obj else None
        entry.latest = obj
        self._changed(old, obj)

    def restore(self, key: str) -> None:
        """Drop the assumed copy of ``key``: the informer's object is the latest again."""
        entry = self._entries.get(key)
        if entry is None:
            return
        old = entry.latest
        entry.latest = entry.api_obj
        self._changed(old, entry.api_obj)

    def get(self, key: str) -> ObjT | None:
        entry = self._entries.get(key)
        return entry.latest if entry is not None else None

    def assumed_at(self, key: str, resource_version: str) -> ObjT | None:
        """The object stored for ``key`` at ``resource_version`` (the latest, or an assumed one a later
        assume replaced), if any: a watch event at that version is the echo of what is known."""
        entry = self._entries.get(key)
        if entry is None:
            return None
        for candidate in (entry.latest, entry.superseded):
            if candidate is not None and candidate.metadata.resource_version == resource_version:
                return candidate
        return None

    def get_api_obj(self, key: str) -> ObjT | None:
        entry = self._entries.get(key)
        return entry.api_obj if entry is not None else None

    def is_assumed(self, key: str) -> bool:
        entry = self._entries.get(key)
        return entry is not None and entry.latest is not entry.api_obj

    def values(self) -> list[ObjT]:
        """The latest version of every object (assumed where assumed)."""
        return [entry.latest for entry in self._entries.values()]

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries
