"""The CEL parser is built once per user and grammar, then loaded from the user's cache directory."""

from __future__ import annotations

import re
from pathlib import Path

import lark
import pytest
from celpy.celparser import CELParser

from lockstep.dra.cel_syntax import _parser_cache, optional_syntax_grammar

EXPRESSION = 'device.attributes[?"x"].orValue(1) == 1 && [?optional.none()].size() == 0'


def _parser(cache: str | bool) -> lark.Lark:
    return lark.Lark(
        optional_syntax_grammar(),
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        cache=cache,
    )


def test_the_parser_loaded_from_the_cache_parses_as_the_built_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = _parser_cache()
    assert isinstance(cache, str) and Path(cache).parent == tmp_path / "lockstep"
    assert (tmp_path / "lockstep").stat().st_mode & 0o777 == 0o700  # the user's own
    built = _parser(cache)
    assert Path(cache).exists()
    loaded = _parser(cache)
    assert loaded.parse(EXPRESSION) == built.parse(EXPRESSION) == _parser(False).parse(EXPRESSION)


def test_no_cache_without_a_usable_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # a file where the directory would go
    assert _parser_cache() is False
