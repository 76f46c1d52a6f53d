"""``lockstep sim``: argument checks and the kubeconfig it writes."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from lockstep.cli import main
from lockstep.sim.cli import write_kubeconfig


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "0"], "--nodes must be at least 1, got 0"),
        (["--devices-per-node", "-1"], "--devices-per-node must not be negative, got -1"),
        (["--port", "70000"], "--port must be between 0 and 65535, got 70000"),
        (["--feature-gates", "DRAListTypeAtributes=true"], "unknown feature gate 'DRAListTypeAtributes'"),
        (["--feature-gates", "GenericWorkload=yes"], "'GenericWorkload' has invalid value 'yes'"),
        (["--node-monitor-grace-period", "0"], "--node-monitor-grace-period must be a positive number"),
        (["--pod-gc-period", "-1"], "--pod-gc-period must be a positive number of seconds, got -1.0"),
        (["--node-monitor-period", "nan"], "--node-monitor-period must be a positive number"),
        (["--pod-start-seconds", "-0.5"], "--pod-start-seconds must not be negative, got -0.5"),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["sim", *argv]) == 2
    assert message in capsys.readouterr().err


def test_kubeconfig_points_at_the_server_over_plain_http(tmp_path: Path) -> None:
    path, temporary = write_kubeconfig("http://127.0.0.1:41234", str(tmp_path / "sub" / "config"))
    assert not temporary
    config = yaml.safe_load(path.read_text())
    assert config["current-context"] == "lockstep-sim"
    assert config["clusters"] == [{"name": "lockstep-sim", "cluster": {"server": "http://127.0.0.1:41234"}}]
    assert config["contexts"][0]["context"]["namespace"] == "default"


def test_the_kubeconfig_is_renamed_into_place_whole(tmp_path: Path) -> None:
    """Bench and the e2e tests wait for the file to appear, then read it: written in place, it was
    there, empty, for a moment first."""
    target = tmp_path / "config"
    target.write_text("an older one")
    older = target.stat().st_ino
    path, _ = write_kubeconfig("http://127.0.0.1:1", str(target))
    assert path.stat().st_ino != older  # a new file renamed over it, not the old one rewritten
    assert [p.name for p in tmp_path.iterdir()] == ["config"]
    assert yaml.safe_load(path.read_text())["current-context"] == "lockstep-sim"


def test_without_a_path_the_kubeconfig_is_a_temporary_file() -> None:
    path, temporary = write_kubeconfig("http://127.0.0.1:1", None)
    try:
        assert temporary and path.name.startswith("lockstep-sim-")
    finally:
        path.unlink()


def test_a_busy_port_is_a_clear_error_not_a_traceback() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "lockstep", "sim", "--nodes", "1", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert result.returncode == 1
    assert f"lockstep sim: cannot start the API server on port {port}" in result.stderr
    assert "Traceback" not in result.stderr
