"""``lockstep run``: the production entry point (kubeconfig or in-cluster service account)."""

from __future__ import annotations

import argparse
import asyncio
import atexit
import contextlib
import logging
import os
import sys
from typing import NoReturn

from lockstep.cli import settings_from_args
from lockstep.config import ConfigError, Settings
from lockstep.logging import configure_logging, get_logger

log = get_logger("lockstep.controller.main")


def skip_manifest_validation_import() -> None:
    """kubernetes_asyncio.dynamic, which Kopf's import of kubernetes_asyncio pulls in, imports
    kubernetes_validate whenever it is installed (lockstep.sim needs it). Through jsonschema that cost
    the operator 1-4 s of start-up (bench/startup.py) for client-side manifest validation it never
    does. A None entry in sys.modules makes that import fail as if the package were absent, which
    kubernetes_asyncio handles. Only for the operator process: called before it imports Kopf."""
    sys.modules.setdefault("kubernetes_validate", None)  # type: ignore[arg-type]


async def run_operator(settings: Settings) -> int:
    from lockstep.controller.runtime import Operator
    from lockstep.kube.credentials import load_connection_info

    connection = await load_connection_info(settings.kubeconfig)
    operator = Operator(
        settings, connection, reload_credentials=lambda: load_connection_info(settings.kubeconfig)
    )
    log.info(
        "starting",
        server=connection.server,
        scheduler=settings.scheduler_name,
        identity=operator.identity,
        leader_elect=settings.leader_elect,
        lease=f"{settings.resolved_lease_namespace()}/{settings.lease_name}"
        if settings.leader_elect
        else None,
        namespaces=settings.namespaces or "all",
        feature_gates=settings.feature_gates,
    )
    return await operator.run(asyncio.Event())


def exit_without_teardown(code: int) -> NoReturn:
    """Exit once the operator has stopped: the drain, the last statuses and Events, the lease's
    release, Kopf's stop and the sessions' close are all done by then. What the interpreter would do
    next is tear down its modules and free every object one by one: 0.6 s with the operator's
    modules, 1.2 s once Kopf is imported, more with a large cluster's caches (bench/startup.py
    --shutdown), after SIGTERM, on the clock of a rolling update. The exit handlers (temporary
    credential files) still run and the logs are flushed first."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run_command(args: argparse.Namespace) -> int:
    try:
        settings = settings_from_args(args)
    except ConfigError as exc:
        print(f"lockstep run: invalid configuration: {exc}", file=sys.stderr)
        return 2
    configure_logging(settings.resolved_log_format().value, settings.log_level.value)
    skip_manifest_validation_import()
    import aiohttp

    from lockstep.controller.runtime import MissingApiError
    from lockstep.kube.client import ApiError
    from lockstep.kube.credentials import CredentialsError

    try:
        code = asyncio.run(run_operator(settings))
    except CredentialsError as exc:
        log.error("no credentials", error=str(exc))
        return 2
    except MissingApiError as exc:
        log.error("cluster not ready for lockstep", error=str(exc))
        return 2
    except (ApiError, aiohttp.ClientError, OSError) as exc:
        log.error("cannot reach the API server", error=str(exc) or repr(exc))
        return 1
    except KeyboardInterrupt:
        return 130
    exit_without_teardown(code)
