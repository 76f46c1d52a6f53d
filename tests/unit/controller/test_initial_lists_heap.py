"""The collector policy around the initial lists: paused while they are applied, what they built frozen
after, and never left paused, even when a list fails; not applied to an operator on another thread."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from lockstep.controller.runtime import COLLECTOR_THRESHOLDS, initial_lists_heap


@pytest.fixture(autouse=True)
def restored_collector() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc.enable()


def test_the_lists_are_applied_without_the_collector_and_frozen_after() -> None:
    gc.unfreeze()
    with initial_lists_heap():
        assert not gc.isenabled()
        cached = [{"pod": i} for i in range(100)]
    assert gc.isenabled()
    assert gc.get_freeze_count() >= len(cached)
    assert gc.get_threshold() == COLLECTOR_THRESHOLDS


def test_a_failed_list_leaves_the_collector_running_and_freezes_nothing() -> None:
    gc.unfreeze()
    with pytest.raises(ConnectionError), initial_lists_heap():
        raise ConnectionError("list failed")
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_an_operator_on_another_thread_leaves_the_collector_alone() -> None:
    gc.unfreeze()
    thresholds = gc.get_threshold()
    seen: list[bool] = []

    def start() -> None:
        with initial_lists_heap():
            seen.append(gc.isenabled())

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()
    assert seen == [True]
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == thresholds
