"""docs/user-guide.md describes the chart as it is: every value, the granted permissions, the examples."""

from __future__ import annotations

import re
from typing import Any

from chart_render import HA_VALUES, REPO_ROOT, chart, only, render
from rbac_scan import granted_permissions

GUIDE = REPO_ROOT / "docs" / "user-guide.md"
# Values documented as one row although they are maps.
WHOLE_VALUES = {"resources"}


def value_paths(values: dict[str, Any], prefix: str = "") -> set[str]:
    paths = set()
    for key, value in values.items():
        path = f"{prefix}{key}"
        if isinstance(value, dict) and value and path not in WHOLE_VALUES:
            paths |= value_paths(value, f"{path}.")
        else:
            paths.add(path)
    return paths


def table_rows(section: str) -> list[list[str]]:
    """Cells of the markdown table under the heading that starts with ``section``."""
    text = GUIDE.read_text()
    start = text.index(section)
    rows = []
    for line in text[start:].splitlines()[1:]:
        if line.startswith("#"):
            break
        if line.startswith("| ") and not line.startswith("|---"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
    return rows


def test_values_table_lists_every_value_and_nothing_else() -> None:
    rows = table_rows("## 3. Chart values")
    documented = {row[0].strip("`") for row in rows[1:]}
    assert documented == value_paths(chart().values)


def test_values_table_defaults_match_values_yaml() -> None:
    values = chart().values
    for name, default, _ in table_rows("## 3. Chart values")[1:]:
        path = name.strip("`")
        if path in WHOLE_VALUES:
            continue
        value: Any = values
        for key in path.split("."):
            value = value[key]
        shown = {True: "true", False: "false"}.get(value, value) if isinstance(value, bool) else value
        expected = '""' if shown == "" else str(shown).replace("'", "")
        assert default.strip("`") == expected, f"{path}: documented {default}, values.yaml has {value!r}"


def test_rbac_table_matches_the_rendered_roles() -> None:
    documented_cluster: set[tuple[str, str]] = set()
    for resources, verbs, _ in table_rows("**RBAC.**")[1:]:
        names = re.findall(r"`([a-z/]+)`", resources)
        if names == ["leases"]:
            continue
        documented_cluster |= {(name, verb.strip()) for name in names for verb in verbs.split(",")}
    granted = granted_permissions(only(render(HA_VALUES), "ClusterRole"))
    assert documented_cluster == {(p.resource, p.verb) for p in granted}
    lease_verbs = {p.verb for p in granted_permissions(only(render(HA_VALUES), "Role"))}
    assert lease_verbs == {"create", "get", "update"}


def test_examples_table_lists_every_example_file() -> None:
    documented = {row[0].strip("`") for row in table_rows("| file | shows |")}
    examples = {p.name for p in (REPO_ROOT / "examples").glob("*.yaml")} - {"00-namespace.yaml"}
    assert documented - {"file"} == examples


def test_documented_build_command_tags_the_chart_default_image() -> None:
    image = chart().values["image"]["repository"]
    assert f"docker build -t {image}:{chart().metadata['appVersion']} ." in GUIDE.read_text()
