"""SIGTERM reaches lockstep's stop flag, not Kopf's, however Kopf's start-up interleaves with it: Kopf
stopping first cancels the binding cycles it finds 5 s later, before they are drained."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
from typing import Any

import kopf

from lockstep.controller.runtime import route_stop_signals


async def test_kopf_starting_does_not_take_sigterm_from_the_stop_flag() -> None:
    assert threading.current_thread() is threading.main_thread()  # where signals are handled
    stop, kopf_stop, kopf_ready = asyncio.Event(), asyncio.Event(), asyncio.Event()
    route_stop_signals(stop)
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    async def login(**_: Any) -> kopf.ConnectionInfo:
        return kopf.ConnectionInfo(server="http://127.0.0.1:9")  # nothing listens: Kopf only starts

    kopf_task = asyncio.create_task(
        kopf.operator(
            registry=registry, standalone=True, clusterwide=True, stop_flag=kopf_stop, ready_flag=kopf_ready
        )
    )
    try:
        await asyncio.wait_for(kopf_ready.wait(), 10)  # its own handlers are installed by now
        os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.wait_for(stop.wait(), 5)
        assert not kopf_task.done(), "Kopf stopped on the signal instead of waiting for its stop flag"
    finally:
        kopf_stop.set()  # then cancelled: its API scans would retry against the closed port for 5 s
        kopf_task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await kopf_task


async def test_the_signal_runs_the_operators_callback_before_the_stop_flag_wakes_anyone() -> None:
    """The operator stops placing gangs in the signal's own callback: the stop flag's waiter
    resumes loop iterations later, and a gang placed meanwhile is only withdrawn again."""
    stop = asyncio.Event()
    seen: list[bool] = []
    route_stop_signals(stop, lambda: seen.append(stop.is_set()))
    os.kill(os.getpid(), signal.SIGTERM)
    await asyncio.wait_for(stop.wait(), 5)
    assert seen == [False]
