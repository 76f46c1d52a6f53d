"""What a plugin factory is given: the settings, the cluster cache, the waiting pods and the services
other parts of lockstep hand to their plugins. Its own module so that plugins can import it without
importing the profile, which imports every plugin."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from lockstep.config import Settings
from lockstep.scheduler.framework import Plugin
from lockstep.scheduler.waiting import WaitingPods
from lockstep.state.cluster import ClusterCache

T = TypeVar("T")


@dataclass(slots=True)
class PluginContext:
    """What plugin factories may use. ``services`` carries objects other parts of lockstep hand to
    their plugins (e.g. the DRA claim tracker and claim API port), by name."""

    settings: Settings
    cache: ClusterCache
    waiting: WaitingPods
    services: Mapping[str, object] = field(default_factory=dict)

    def service(self, name: str, kind: type[T]) -> T:
        value = self.services.get(name)
        if not isinstance(value, kind):
            raise LookupError(
                f"plugin service {name!r} is missing or not a {kind.__name__} (got {type(value).__name__})"
            )
        return value


PluginFactory = Callable[[PluginContext], Plugin]
