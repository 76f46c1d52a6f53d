"""celpy's CEL grammar plus cel-go's optional syntax (``cel.OptionalTypes()``, on in Kubernetes since 1.28).

celpy 0.5.0 ships its grammar as ``cel.lark`` and builds its parser in ``celpy.CELParser``; an
``Environment`` keeps the parser in its ``cel_parser`` attribute. :class:`OptionalSyntaxParser` is a
``CELParser`` whose grammar adds, as cel-go's parser does:

* ``x.?f`` optional field selection (``member_dot_opt``) and ``x[?k]`` optional index
  (``member_index_opt``);
* ``[a, ?b]`` optional list elements and ``{?k: v}`` optional map entries (``opt_elem`` and
  ``opt_key``; an ``opt_elem`` outside a list literal is refused by the function check in ``cel.py``).

The new rules extend celpy's grammar text instead of copying it, so the rest of the language stays
celpy's.
"""

from __future__ import annotations

import re
from pathlib import Path

import celpy.celparser
import lark
from celpy.celparser import CELParseError, CELParser

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


class OptionalSyntaxParser(CELParser):
    """celpy's parser with cel-go's optional syntax; one lark parser per process."""

    _LARK: lark.Lark | None = None

    def __init__(self, tree_class: type = lark.Tree) -> None:
        # No super().__init__(): it would build celpy's own grammar.
        if OptionalSyntaxParser._LARK is None:
            OptionalSyntaxParser._LARK = lark.Lark(
                optional_syntax_grammar(),
                parser="lalr",
                start="expr",
                g_regex_flags=re.M,
                lexer_callbacks={"IDENT": CELParser.ambiguous_literals},
                propagate_positions=True,
                maybe_placeholders=False,
                priority="invert",
                tree_class=tree_class,
            )

    def parse(self, text: str) -> lark.Tree:
        assert OptionalSyntaxParser._LARK is not None
        self.text = text
        try:
            return OptionalSyntaxParser._LARK.parse(text)
        except (lark.exceptions.UnexpectedToken, lark.exceptions.UnexpectedCharacters) as ex:
            raise CELParseError(ex.get_context(text), *ex.args, line=ex.line, column=ex.column) from None
        except (lark.exceptions.LexError, lark.exceptions.ParseError) as ex:
            raise CELParseError(str(ex).splitlines()[0] if str(ex) else type(ex).__name__) from None
