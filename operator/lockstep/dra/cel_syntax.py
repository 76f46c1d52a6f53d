"""celpy's CEL grammar plus cel-go's optional syntax (``cel.OptionalTypes()``, on in Kubernetes since 1.28).

celpy 0.5.0 ships its grammar as ``cel.lark`` and keeps one lark parser per process in
``celpy.CELParser.CEL_PARSER`` (a documented singleton that every ``Environment`` uses).
:func:`install_optional_syntax` puts there a parser for celpy's grammar plus, as cel-go's parser has:

* ``x.?f`` optional field selection (``member_dot_opt``) and ``x[?k]`` optional index
  (``member_index_opt``);
* ``[a, ?b]`` optional list elements and ``{?k: v}`` optional map entries (``opt_elem`` and
  ``opt_key``; an ``opt_elem`` outside a list literal is refused by the function check in ``cel.py``).

The new rules extend celpy's grammar text instead of copying it, so the rest of the language stays
celpy's. Every Environment of the process then parses optional syntax, as Kubernetes' CEL environments
(CRD validation rules included) do.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import celpy.celparser
import lark
from celpy.celparser import CELParser

_CELPY_GRAMMAR = Path(celpy.celparser.__file__).with_name("cel.lark")

# (old text, new text) edits of celpy's grammar; each must match exactly once.
_GRAMMAR_EDITS = (
    (
        "member         : member_dot | member_dot_arg | member_index | member_object | primary\n",
        "member         : member_dot | member_dot_arg | member_index | member_object | primary\n"
        "               | member_dot_opt | member_index_opt\n"
        'member_dot_opt : member "." "?" IDENT\n'
        'member_index_opt : member "[" "?" expr "]"\n',
    ),
    (
        'exprlist       : expr ("," expr)*\n',
        'exprlist       : (expr | opt_elem) ("," (expr | opt_elem))*\nopt_elem       : "?" expr\n',
    ),
    (
        'mapinits       : expr ":" expr ("," expr ":" expr)*\n',
        'mapinits       : (expr | opt_key) ":" expr ("," (expr | opt_key) ":" expr)*\n'
        'opt_key        : "?" expr\n',
    ),
)


def optional_syntax_grammar() -> str:
    grammar = _CELPY_GRAMMAR.read_text()
    for old, new in _GRAMMAR_EDITS:
        if grammar.count(old) != 1:
            raise RuntimeError(f"celpy's cel.lark changed; cannot add optional syntax at {old.strip()!r}")
        grammar = grammar.replace(old, new)
    return grammar


def _parser_cache() -> str | bool:
    """Where lark keeps the analysed grammar between processes (building it takes 0.3 s, loading it
    10 ms): a file in the user's own cache directory; lark checks that it was made from this grammar
    with these options and rebuilds it otherwise. False when there is no such directory."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    directory = Path(base) / "lockstep"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError:
        return False
    if not os.access(directory, os.W_OK):
        return False
    return str(directory / f"cel-grammar-lark-{lark.__version__}.cache")


def install_optional_syntax() -> None:
    """Make celpy's process-wide parser one for its grammar plus optional syntax, built once.

    Call before creating a ``celpy.Environment``: an Environment builds the parser only when
    ``CELParser.CEL_PARSER`` is unset, so no second grammar is built."""
    if getattr(CELParser.CEL_PARSER, "optional_syntax", False):
        return
    parser = lark.Lark(
        optional_syntax_grammar(),
        parser="lalr",
        start="expr",
        g_regex_flags=re.M,
        lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
        propagate_positions=True,
        maybe_placeholders=False,
        priority="invert",
        cache=_parser_cache(),
    )
    parser.optional_syntax = True  # type: ignore[attr-defined]
    CELParser.CEL_PARSER = parser
