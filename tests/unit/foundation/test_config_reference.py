"""The README's configuration reference is generated from the Settings model and must be current."""

from __future__ import annotations

from pathlib import Path

from lockstep.config import Settings, reference_markdown

README = Path(__file__).resolve().parents[3] / "README.md"
START = "<!-- config-reference:start (generated: make docs) -->"
END = "<!-- config-reference:end -->"


def test_readme_reference_matches_the_settings_model() -> None:
    text = README.read_text()
    assert START in text and END in text, "README.md lacks the configuration reference markers"
    current = text.split(START, 1)[1].split(END, 1)[0].strip()
    assert current == reference_markdown(), "README configuration reference is stale: run `make docs`"


def test_every_setting_has_a_row_with_flag_env_and_description() -> None:
    table = reference_markdown()
    for name, field in Settings.model_fields.items():
        flag = name.replace("_", "-")
        assert f"`--{flag}`" in table or f"`--[no-]{flag}`" in table
        assert f"`LOCKSTEP_{name.upper()}`" in table
        assert field.description, f"setting {name} has no description"
