"""One structured log stream for lockstep, Kopf and the standard library.

structlog is configured once. Standard-library records (Kopf logs through ``logging``) pass through
structlog's ProcessorFormatter, so both end up as one JSON object per line (or a console line).
Kopf's per-object records carry ``extra={"k8s_ref": {...}}``; the reference is lifted to
``namespace``/``name``/``kind`` keys plus a kind-specific key (``pod``, ``podgroup``, ``claim``,
``node``) holding ``namespace/name``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import MutableMapping
from typing import Any, TextIO

import orjson
import structlog
from structlog.typing import EventDict, Processor, WrappedLogger

KIND_KEYS = {
    "Pod": "pod",
    "PodGroup": "podgroup",
    "ResourceClaim": "claim",
    "Node": "node",
    "ResourceSlice": "slice",
}

_configured = False


def lift_k8s_ref(_: WrappedLogger, __: str, event_dict: EventDict) -> EventDict:
    """Move Kopf's ``k8s_ref`` extra to flat keys."""
    ref = event_dict.pop("k8s_ref", None)
    if isinstance(ref, MutableMapping):
        kind = ref.get("kind")
        name = ref.get("name")
        namespace = ref.get("namespace")
        if kind:
            event_dict.setdefault("kind", kind)
        if name:
            event_dict.setdefault("name", name)
        if namespace:
            event_dict.setdefault("namespace", namespace)
        key = KIND_KEYS.get(str(kind))
        if key and name:
            event_dict.setdefault(key, f"{namespace}/{name}" if namespace else str(name))
    event_dict.pop("k8s_skip", None)
    event_dict.pop("settings", None)
    return event_dict


def _orjson_dumps(obj: Any, default: Any = None) -> str:
    return orjson.dumps(obj, default=default or str).decode()


def _renderer(fmt: str) -> Processor:
    if fmt == "console":
        return structlog.dev.ConsoleRenderer(colors=False)
    return structlog.processors.JSONRenderer(serializer=_orjson_dumps)


KOPF_PROBE_LOGGER = "kopf.activities.probe"


def configure_logging(fmt: str = "json", level: str = "info", stream: TextIO | None = None) -> None:
    """Route structlog and stdlib logging (Kopf included) into one stream. Safe to call again."""
    global _configured
    shared: list[Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            *shared,
            structlog.stdlib.ExtraAdder(allow=["k8s_ref"]),
            lift_k8s_ref,
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            _renderer(fmt),
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        if getattr(old, "_lockstep", False):
            root.removeHandler(old)
    handler._lockstep = True  # type: ignore[attr-defined]
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    # Kopf's per-object chatter (one line per handled event) is far too much at high throughput.
    logging.getLogger("kopf.objects").setLevel(max(numeric, logging.WARNING))
    logging.getLogger("aiohttp.access").setLevel(max(numeric, logging.WARNING))
    # "Activity 'scheduler' succeeded." for every /healthz Kopf answers from its cache: a failing
    # probe is still said at warning.
    logging.getLogger(KOPF_PROBE_LOGGER).setLevel(max(numeric, logging.WARNING))

    structlog.configure(
        processors=[
            structlog.stdlib.filter_by_level,  # first: a disabled debug line costs no processing
            *shared,
            structlog.processors.StackInfoRenderer(),
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    _configured = True


def get_logger(name: str = "lockstep") -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
