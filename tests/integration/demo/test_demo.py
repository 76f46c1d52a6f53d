"""``lockstep demo``: the examples reach the phases their headers promise, and bad input is named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from lockstep.demo import ExampleError, GroupView, find_examples_dir, load_examples, render

REPO = Path(__file__).resolve().parents[3]


def test_demo_brings_every_example_to_its_expected_phase(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lockstep", "demo", "--workdir", str(tmp_path), "--timeout", "60"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == 0, (
        result.stdout + result.stderr + (tmp_path / "operator.log").read_text()[-3000:]
    )
    assert "every example reached its expected phase" in result.stdout
    examples = load_examples(find_examples_dir())
    for example in examples:
        for namespace, name in example.podgroups:
            assert f"{namespace}/{name}" in result.stdout
    # The group meant to stay Unschedulable says why, in the summary.
    assert "stays Unschedulable by design" in result.stdout
    assert "node(s) didn't match Pod's node affinity/selector" in result.stdout
    assert (tmp_path / "kubeconfig").exists()


def test_headers_say_what_each_example_expects() -> None:
    examples = load_examples(find_examples_dir())
    expectations = {name: ex.expect for ex in examples for _, name in ex.podgroups}
    assert expectations, "no PodGroup examples"
    assert set(expectations.values()) <= {"Pending", "Running", "Scheduled", "Unschedulable", "Waiting"}
    assert "Unschedulable" in expectations.values()
    gated = [ex for ex in examples if ex.gates]
    assert all(set(ex.gates) <= {"DRAListTypeAttributes"} for ex in gated)


def test_an_example_the_demo_cannot_apply_is_named(tmp_path: Path) -> None:
    (tmp_path / "10-deployment.yaml").write_text(
        "# lockstep-demo: expect=Running\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\n"
    )
    with pytest.raises(ExampleError, match=r"10-deployment.yaml: the demo cannot apply Deployment 'apps/v1'"):
        load_examples(tmp_path)


def test_an_object_without_a_name_is_named(tmp_path: Path) -> None:
    (tmp_path / "10-pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {}\n")
    with pytest.raises(ExampleError, match=r"10-pod.yaml: a Pod without metadata.name"):
        load_examples(tmp_path)


def test_render_aligns_columns() -> None:
    table = render([GroupView("demo/a", "Running", "Running", 8, 8, 8), GroupView("demo/bb", "Running")])
    header, first, second = table.splitlines()
    assert header.index("EXPECT") == first.index("Running") == second.index("Running")
