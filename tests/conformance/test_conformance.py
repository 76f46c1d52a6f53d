"""Replay the recorded kube-apiserver v1.36.2 transcripts in ``cases/`` against lockstep's API server
emulator.

Every case runs against a fresh emulator; any difference the transcripts' README says matters fails
the test (Status messages included: kubectl shows them). Differences in steps marked ``informative``
are printed, not failed. The known ones, on purpose:

- pod-crud steps 4-5: the recording server is the openshift fork, whose ServiceAccount admission adds
  a fourth projected source (``openshift-service-ca.crt``); the emulator mounts the upstream three.
- watch step 31: a LIST at an old ``resourceVersion`` with ``resourceVersionMatch=Exact`` needs etcd
  history; the emulator keeps none and answers 410 Expired, which is what the real server answers
  once etcd has compacted (every 5 minutes).

Steps the emulator does not serve yet are listed in ``PENDING`` with the issue building them: their
differences are expected (the test fails if such a step starts to pass, so the entry gets removed),
and every other step of the case is still checked.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import replay

from lockstep.sim.apiserver import ApiServer

HERE = Path(__file__).resolve().parent
CASES = sorted((HERE / "cases").glob("*.json"))
# CI checks the repository's copy out next to the recording it was vendored from.
RECORDING = HERE.parents[2] / "shared" / "apiserver-conformance"

STEP_RE = re.compile(r"^step (\d+)[ :]")


@dataclass(frozen=True)
class Pending:
    """Steps of a case whose kinds or fields the emulator does not serve yet."""

    issue: int
    why: str
    steps: frozenset[int] | None = None  # None: the whole case


PENDING: dict[str, Pending] = {}


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


def failing_step(failure: str) -> int:
    match = STEP_RE.match(failure)
    assert match, f"a replay failure that names no step: {failure}"
    return int(match.group(1))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.stem for c in CASES])
def test_case_replays_green(case: Path, loop: asyncio.AbstractEventLoop) -> None:
    pending = PENDING.get(case.stem)
    if pending is not None and pending.steps is None:
        pytest.skip(f"issue {pending.issue}: {pending.why}")
    # The recording server was v1.36.2 with GenericWorkload and DRAListTypeAttributes on: pinned, so
    # that moving the emulator's default kube version does not change what is replayed against.
    server = ApiServer(
        feature_gates={"GenericWorkload": True, "DRAListTypeAttributes": True}, kube_version="1.36"
    )
    url = asyncio.run_coroutine_threadsafe(server.start(), loop).result(timeout=10)
    try:
        result = replay.replay_case(replay.load_case(case), replay.HttpSender(url), strict_messages=True)
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(timeout=10)
    for difference in result.informative:
        print(f"informative difference in {case.stem}: {difference}")
    expected_steps = pending.steps if pending is not None and pending.steps is not None else frozenset()
    failures = [f for f in result.failures if failing_step(f) not in expected_steps]
    assert not failures, "\n".join(failures)
    now_passing = expected_steps - {failing_step(f) for f in result.failures}
    assert not now_passing, (
        f"steps {sorted(now_passing)} of {case.stem} replay clean now: remove them from PENDING"
    )
    if pending is not None:
        pytest.skip(
            f"issue {pending.issue}: steps {sorted(expected_steps)} not served yet ({pending.why}); "
            "every other step replays clean"
        )


def test_cases_match_the_recording() -> None:
    """The repository's copy of the transcripts and the replayer is the recording's, case for case."""
    if not RECORDING.is_dir():
        pytest.skip("the recording the cases were vendored from is not checked out next to the repository")
    recorded = sorted(p.name for p in (RECORDING / "cases").glob("*.json"))
    vendored = [c.name for c in CASES]
    assert vendored == recorded, (
        f"missing {set(recorded) - set(vendored)}, extra {set(vendored) - set(recorded)}"
    )
    for name in recorded:
        assert (HERE / "cases" / name).read_bytes() == (RECORDING / "cases" / name).read_bytes(), name
    vendored_replay = (HERE / "replay.py").read_text().splitlines(keepends=True)
    recorded_replay = (RECORDING / "replay.py").read_text().splitlines(keepends=True)
    without_vendoring_note = [line for line in vendored_replay[1:] if not line.startswith("# ")]
    assert vendored_replay[:1] + without_vendoring_note == recorded_replay
