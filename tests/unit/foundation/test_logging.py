"""Kopf's and lockstep's log records come out as one JSON object per line, with object keys lifted."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import kopf
import pytest
from kopf._cogs.structs.bodies import Body
from kopf._core.actions.loggers import ObjectLogger

from lockstep.logging import configure_logging, get_logger


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    buffer = io.StringIO()
    configure_logging("json", "debug", stream=buffer)
    yield buffer
    configure_logging("json", "info")


def lines(buffer: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in buffer.getvalue().splitlines() if line.strip()]


def test_kopf_object_logger_record_has_reference_keys(stream: io.StringIO) -> None:
    body = Body(
        {
            "apiVersion": "scheduling.lockstep.dev/v1alpha1",
            "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml", "uid": "u-1"},
        }
    )
    logger = ObjectLogger(body=body, settings=kopf.OperatorSettings())
    logger.warning("Handler failed temporarily")
    (record,) = lines(stream)
    assert record["event"] == "Handler failed temporarily"
    assert record["namespace"] == "ml"
    assert record["name"] == "train"
    assert record["kind"] == "PodGroup"
    assert record["podgroup"] == "ml/train"
    assert record["level"] == "warning"
    assert "k8s_ref" not in record


def test_kopf_object_chatter_below_warning_is_dropped(stream: io.StringIO) -> None:
    logging.getLogger("kopf.objects").info("Handler succeeded")
    assert lines(stream) == []


def test_kopf_per_probe_lines_are_quiet_and_a_failed_probe_is_not(stream: io.StringIO) -> None:
    probe = logging.getLogger("kopf.activities.probe")
    probe.info("Activity 'scheduler' succeeded.")
    assert lines(stream) == []
    probe.warning("Activity 'scheduler' failed temporarily")
    (record,) = lines(stream)
    assert record["level"] == "warning"


def test_structlog_and_stdlib_share_one_json_stream(stream: io.StringIO) -> None:
    get_logger("lockstep.scheduler").info("group placed", podgroup="ml/train", pods=8)
    logging.getLogger("kopf.reactor").error("watch stream failed")
    first, second = lines(stream)
    assert first["event"] == "group placed"
    assert first["podgroup"] == "ml/train"
    assert first["pods"] == 8
    assert first["logger"] == "lockstep.scheduler"
    assert "timestamp" in first
    assert second["event"] == "watch stream failed"
    assert second["level"] == "error"


def test_console_format_is_not_json() -> None:
    buffer = io.StringIO()
    configure_logging("console", "info", stream=buffer)
    try:
        get_logger().info("hello", pod="ns/p")
    finally:
        configure_logging("json", "info")
    text = buffer.getvalue()
    assert "hello" in text and "pod=ns/p" in text
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.splitlines()[0])
