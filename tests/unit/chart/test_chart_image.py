"""The Dockerfile builds the image the chart deploys (no Docker engine here: its structure is checked)."""

from __future__ import annotations

import json
import re
import tomllib

import pytest
from chart_render import REPO_ROOT, chart, only, render

from lockstep.config import Settings

DOCKERFILE = REPO_ROOT / "Dockerfile"
DOCKERIGNORE = REPO_ROOT / ".dockerignore"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", text)
    result = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            result.append((word.upper(), rest.strip()))
    return result


def stages(text: str) -> list[list[tuple[str, str]]]:
    result: list[list[tuple[str, str]]] = []
    for instruction in instructions(text):
        if instruction[0] == "FROM":
            result.append([])
        assert result, "the Dockerfile must start with FROM"
        result[-1].append(instruction)
    return result


def dockerignore_excludes(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories wins."""
    excluded = False
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        body = pattern.removeprefix("!").strip("/")
        regex = re.escape(body).replace(r"\*\*", ".*").replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, prefix) for prefix in prefixes):
            excluded = not negate
    return excluded


@pytest.fixture(scope="module")
def dockerfile() -> str:
    return DOCKERFILE.read_text()


def test_image_is_multi_stage_python_311_slim(dockerfile: str) -> None:
    built = stages(dockerfile)
    assert len(built) >= 2
    assert [stage[0][1].split()[0] for stage in built] == ["python:3.11-slim"] * len(built)
    build_stage = built[0][0][1].split()
    assert build_stage[1:] == ["AS", "build"]
    assert ("RUN", "/opt/lockstep/bin/pip install -c constraints.txt .") in built[0]
    assert ("COPY", "--from=build /opt/lockstep /opt/lockstep") in built[-1]
    assert not any(word == "RUN" and "pip install" in args for word, args in built[-1])


def test_image_runs_lockstep_as_the_non_root_user_the_chart_expects(dockerfile: str) -> None:
    final = stages(dockerfile)[-1]
    users = [args for word, args in final if word == "USER"]
    assert users, "the final stage must set USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "USER must be a numeric non-root UID (runAsNonRoot checks it)"
    entrypoints = [args for word, args in final if word == "ENTRYPOINT"]
    assert json.loads(entrypoints[-1]) == ["lockstep", "run"]
    pod = only(render(), "Deployment")["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsUser"] == int(uid)
    assert pod["securityContext"]["runAsGroup"] == int(gid)
    assert f"--uid {uid}" in dockerfile and f"--gid {gid}" in dockerfile


def test_chart_default_image_is_what_the_documented_build_command_tags(dockerfile: str) -> None:
    built = re.search(r"docker build -t (?P<repository>[^\s:]+):(?P<tag>\S+) \.", dockerfile)
    assert built is not None, "the Dockerfile's header documents its build command"
    version = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert built["tag"] == version == chart().metadata["appVersion"]
    assert chart().values["image"]["repository"] == built["repository"]
    assert chart().values["image"]["tag"] == ""  # so the tag follows appVersion
    assert f"docker build -t {built['repository']}:{version} ." in chart_values_text()


def chart_values_text() -> str:
    return (REPO_ROOT / "charts" / "lockstep" / "values.yaml").read_text()


def test_exposed_ports_are_the_default_health_and_metrics_ports(dockerfile: str) -> None:
    exposed = {
        int(port) for word, args in instructions(dockerfile) if word == "EXPOSE" for port in args.split()
    }
    defaults = {
        int(str(Settings.model_fields[name].default).rsplit(":", 1)[1])
        for name in ("health_bind_address", "metrics_bind_address")
    }
    assert exposed == defaults
    values = chart().values
    assert {values["health"]["port"], values["metrics"]["port"]} == defaults


def test_build_context_holds_what_pip_install_needs_and_nothing_else(dockerfile: str) -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    copied = [
        args.split()[:-1]
        for word, args in instructions(dockerfile)
        if word == "COPY" and "--from" not in args
    ]
    for sources in copied:
        for source in sources:
            assert (REPO_ROOT / source).exists(), source
            assert not dockerignore_excludes(patterns, source), f"{source} is excluded by .dockerignore"
    for needed in (
        "operator/lockstep/__init__.py",
        "operator/lockstep/config.py",
        "operator/lockstep/py.typed",
    ):
        assert not dockerignore_excludes(patterns, needed), needed
    for left_out in (".venv/bin/python", ".git/HEAD", "tests/unit", "charts/lockstep/Chart.yaml"):
        assert dockerignore_excludes(patterns, left_out), left_out
    for built_here in (
        "operator/lockstep.egg-info/PKG-INFO",
        "operator/lockstep/__pycache__/cli.cpython-311.pyc",
    ):
        assert dockerignore_excludes(patterns, built_here), built_here
    readme = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["readme"]
    assert any(readme in sources for sources in copied), "pyproject's readme must be in the build context"


@pytest.mark.parametrize(
    ("path", "excluded"),
    [("tests", True), ("operator/lockstep/cli.py", False), ("operator/x.egg-info/a", True)],
)
def test_dockerignore_reader_follows_last_match_wins(path: str, excluded: bool) -> None:
    patterns = ["*", "!operator/", "operator/*.egg-info"]
    assert dockerignore_excludes(patterns, path) is excluded


def test_image_installs_no_emulator_dependency_and_pins_every_one_it_does() -> None:
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    name = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")

    def names(requirements: list[str]) -> set[str]:
        found = (name.match(r) for r in requirements)
        return {m.group(0).lower().replace("_", "-") for m in found if m is not None}

    runtime, sim = names(project["dependencies"]), names(project["optional-dependencies"]["sim"])
    assert "kubernetes-validate" in sim and not runtime & sim
    assert "lockstep[sim]" in project["optional-dependencies"]["test"]  # make test and make demo get it
    pinned = {
        line.split("==")[0].lower().replace("_", "-")
        for line in (REPO_ROOT / "constraints.txt").read_text().splitlines()
        if "==" in line
    }
    assert runtime <= pinned, f"constraints.txt lacks {sorted(runtime - pinned)}: run make constraints"
