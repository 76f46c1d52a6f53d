"""The Kopf side: a dedicated registry with thin ``on.event`` handlers, the login and the probe.

Handlers translate a watch event into one synchronous call on the runtime's ingest functions and
return None (a return value would be patched into the object's status). No on.create/update/delete
(they persist progress in annotations), no daemons or timers, no indexes on pods. Imported only
when Kopf starts (``Operator._kopf``), after the first binding.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import kopf

from lockstep.kube.client import PODS, ConnectionInfo, ResourceKind
from lockstep.kube.watch import EventSink
from lockstep.logging import get_logger

log = get_logger("lockstep.controller.handlers")


def _event_handler(kind: ResourceKind, sink: EventSink) -> Callable[..., Any]:
    async def on_event(event: Mapping[str, Any], **_: Any) -> None:
        obj = event.get("object")
        if not isinstance(obj, Mapping):
            return
        try:
            sink(event.get("type") or "ADDED", dict(obj))
        except Exception:
            meta = obj.get("metadata") or {}
            log.exception(
                "watch event not applied",
                kind=kind.kind,
                object=f"{meta.get('namespace', '')}/{meta.get('name', '')}",
            )

    on_event.__name__ = f"watch_{kind.plural}"
    return on_event


def kopf_connection(info: ConnectionInfo) -> kopf.ConnectionInfo:
    """The same server and credentials in Kopf's terms."""
    return kopf.ConnectionInfo(
        server=info.server,
        ca_path=info.ca_path,
        insecure=info.insecure,
        username=info.username,
        password=info.password,
        scheme=info.scheme,
        token=info.token,
        certificate_path=info.certificate_path,
        private_key_path=info.private_key_path,
    )


def build_registry(
    login: Callable[[], Awaitable[ConnectionInfo]],
    sinks: Mapping[ResourceKind, EventSink],
    probe: Callable[[], Mapping[str, Any]],
) -> kopf.OperatorRegistry:
    """``login`` gives Kopf the same credentials lockstep's own session uses (called again when
    Kopf re-authenticates after a 401)."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def kopf_login(**_: Any) -> kopf.ConnectionInfo:
        return kopf_connection(await login())

    for kind, sink in sinks.items():
        kopf.on.event(kind.group, kind.version, kind.plural, registry=registry, id=f"watch-{kind.plural}")(
            _event_handler(kind, sink)
        )

    @kopf.on.probe(id="scheduler", registry=registry)
    async def scheduler_probe(**_: Any) -> dict[str, Any]:
        return dict(probe())

    return registry


def build_settings(
    scheduler_name: str, *, exit_timeout: float | None, watch_pods_with_kopf: bool
) -> kopf.OperatorSettings:
    settings = kopf.OperatorSettings()
    settings.scanning.disabled = True
    settings.posting.enabled = False
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.reconnect_backoff = 0.5
    settings.process.ultimate_exiting_timeout = exit_timeout
    if watch_pods_with_kopf:
        # Server-side: only our pods. Never select on spec.nodeName: a binding would look like a deletion.
        settings.watching.field_selectors[(PODS.group, PODS.version, PODS.plural)] = (
            f"spec.schedulerName={scheduler_name}"
        )
    return settings
