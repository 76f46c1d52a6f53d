"""The emulator checks CEL selectors and quantities with the operator's own code (``lockstep.dra.cel``
and ``lockstep.api.quantity``, see docs/architecture.md "The emulator"), so a bug there could hide
from tests that run the operator against the emulator. These tests hold that shared code to what a
real kube-apiserver v1.36.2 answered (the recorded transcripts in ``cases/``), independently of the
scheduler: the recorded request goes to the emulator and the recorded answer must come back verbatim.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from lockstep.sim.apiserver import ApiServer

CASES = Path(__file__).resolve().parent / "cases"


def recorded_steps(predicate: Any) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(CASES.glob("*.json")):
        for step in json.loads(path.read_text()):
            if predicate(step):
                found.append((f"{path.stem} step {step['step']}", step))
    return found


def _cel_refusal(step: dict[str, Any]) -> bool:
    body = step["response"].get("body")
    causes = ((body if isinstance(body, dict) else {}).get("details") or {}).get("causes") or []
    return any(str(c.get("field", "")).endswith("cel.expression") for c in causes)


QUANTITY_FIELDS = ("requests", "limits", "capacity", "value", "default", "min", "max", "step")


def _quantities(request: Any, answer: Any, path: str = "") -> list[tuple[str, str, str]]:
    """(path, sent, answered) of every quantity-looking string the request set and the answer echoed."""
    if isinstance(request, dict) and isinstance(answer, dict):
        return [q for k in request if k in answer for q in _quantities(request[k], answer[k], f"{path}.{k}")]
    if isinstance(request, list) and isinstance(answer, list) and len(request) == len(answer):
        return [q for a, b in zip(request, answer, strict=True) for q in _quantities(a, b, f"{path}[]")]
    parent = path.rsplit(".", 2)[-2] if path.count(".") >= 2 else ""
    if isinstance(request, str) and request[:1].isdigit() and parent in QUANTITY_FIELDS:
        return [(path, request, str(answer))]
    return []


def served() -> ApiServer:
    return ApiServer(
        feature_gates={"GenericWorkload": True, "DRAListTypeAttributes": True}, kube_version="1.36"
    )


@pytest.fixture
async def server() -> AsyncIterator[str]:
    api = served()
    url = await api.start()
    try:
        yield url
    finally:
        await api.stop()


async def send(url: str, request: dict[str, Any]) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(request["method"], url + request["path"], json=request.get("body")) as response,
    ):
        return response.status, await response.json()


async def test_a_cel_selector_is_refused_with_kube_apiservers_words(server: str) -> None:
    steps = recorded_steps(_cel_refusal)
    assert steps, "the transcripts hold a CEL refusal"
    for name, step in steps:
        status, body = await send(server, step["request"])
        assert status == step["response"]["status"], name
        assert body["message"] == step["response"]["body"]["message"], name
        assert body["details"]["causes"] == step["response"]["body"]["details"]["causes"], name


async def test_quantities_are_echoed_in_kube_apiservers_canonical_form() -> None:
    checked = 0
    for path in sorted(CASES.glob("*.json")):
        api = served()
        url = await api.start()
        try:
            for step in json.loads(path.read_text()):  # in order: later objects need earlier ones
                request = step["request"]
                if request["method"] != "POST" or "<" in request["path"]:
                    continue
                status, body = await send(url, request)
                if status != 201 or step["response"]["status"] != 201:
                    continue
                recorded = _quantities(request.get("body"), step["response"].get("body"))
                ours = {(p, a) for p, _, a in _quantities(request.get("body"), body)}
                for where, _, answer in recorded:
                    assert (where, answer) in ours, f"{path.stem} step {step['step']}: {where}"
                    checked += 1
        finally:
            await api.stop()
    assert checked >= 5
