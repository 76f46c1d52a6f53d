"""Replay the recorded kube-apiserver v1.36.2 transcripts against lockstep's API server emulator.

Every case runs against a fresh emulator; any difference the transcripts' README says matters fails
the test (Status messages included: kubectl shows them). Differences in steps marked ``informative``
are printed, not failed. The known ones, on purpose:

- pod-crud steps 4-5: the recording server is the openshift fork, whose ServiceAccount admission adds
  a fourth projected source (``openshift-service-ca.crt``); the emulator mounts the upstream three.
- watch step 31: a LIST at an old ``resourceVersion`` with ``resourceVersionMatch=Exact`` needs etcd
  history; the emulator keeps none and answers 410 Expired, which is what the real server answers
  once etcd has compacted (every 5 minutes).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from lockstep.sim.apiserver import ApiServer

CONFORMANCE = Path(__file__).resolve().parents[2] / ".." / "shared" / "apiserver-conformance"
CASES = sorted((CONFORMANCE / "cases").glob("*.json")) if CONFORMANCE.is_dir() else []

pytestmark = pytest.mark.skipif(
    not CASES, reason=f"the recorded conformance cases are not available at {CONFORMANCE.resolve()}"
)


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """An event loop in a thread: replay.py drives the server with blocking HTTP calls."""
    event_loop = asyncio.new_event_loop()
    thread = threading.Thread(target=event_loop.run_forever, daemon=True)
    thread.start()
    yield event_loop
    event_loop.call_soon_threadsafe(event_loop.stop)
    thread.join(timeout=5)
    event_loop.close()


def replay_module() -> Any:
    if str(CONFORMANCE) not in sys.path:
        sys.path.insert(0, str(CONFORMANCE))
    import replay  # type: ignore[import-not-found]

    return replay


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_case_replays_green(case: Path, loop: asyncio.AbstractEventLoop) -> None:
    replay = replay_module()
    # The discovery case lists scheduling.k8s.io/v1alpha2, enabled on the recording server by runtime config.
    server = ApiServer(scheduling_alpha_api=True)
    url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
    try:
        result = replay.replay_case(replay.load_case(case), replay.HttpSender(url), strict_messages=True)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
    for difference in result.informative:
        print(f"informative difference in {case.stem}: {difference}")
    assert not result.failures, "\n".join(result.failures)
