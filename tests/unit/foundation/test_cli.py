from __future__ import annotations

import subprocess
import sys

import pytest

from lockstep import __version__
from lockstep.cli import USAGE_EXIT, build_parser, main, settings_from_args
from lockstep.config import Settings


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_every_setting_is_a_run_flag() -> None:
    help_text = build_parser()._subparsers._group_actions[0].choices["run"].format_help()  # type: ignore[union-attr]
    for name in Settings.model_fields:
        assert "--" + name.replace("_", "-") in help_text
        assert "LOCKSTEP_" + name.upper() in help_text


def test_run_flags_become_settings() -> None:
    args = build_parser().parse_args(
        ["run", "--scheduler-name", "x", "--no-leader-elect", "--feature-gates", "DRAListTypeAttributes=true"]
    )
    settings = settings_from_args(args)
    assert settings.scheduler_name == "x"
    assert settings.leader_elect is False
    assert settings.feature_gates["DRAListTypeAttributes"] is True


def test_run_rejects_an_unknown_gate_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--feature-gates", "Bogus=true"]) == USAGE_EXIT
    assert "unknown feature gate 'Bogus'" in capsys.readouterr().err


def test_python_dash_m_entry_point() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lockstep", "--help"], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0
    for command in ("run", "sim", "demo", "bench", "explain"):
        assert command in result.stdout
