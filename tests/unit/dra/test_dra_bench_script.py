"""bench/dra.py stays runnable: a small run places every placeable pod and passes its own checks
(no device allocated twice, every claim's devices on its pod's node). No timing is asserted."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "bench" / "dra.py"


def load_bench() -> ModuleType:
    if str(SCRIPT.parent) not in sys.path:  # as when run as a script: it imports its sibling bench/core.py
        sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("bench_dra", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("args", "bound", "writes"),
    [
        (["--nodes", "4", "--devices", "2", "--pods", "10"], 8, 8),  # 8 devices for 10 pods
        (["--nodes", "4", "--devices", "2", "--pods", "12", "--gang-size", "3"], 12, 4),
        (["--nodes", "4", "--devices", "2", "--pods", "10", "--selector", "plain", "--memory"], 8, 8),
    ],
)
def test_bench_dra_runs_and_checks_itself(
    args: list[str], bound: int, writes: int, capsys: pytest.CaptureFixture[str]
) -> None:
    assert load_bench().main([*args, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["pods_bound"] == bound
    assert result["claim_writes"] == writes
    assert result["devices_allocated_twice"] == 0 and result["allocations_on_another_node"] == 0
