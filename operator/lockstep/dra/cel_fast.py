"""The fast path for DRA selectors: Google's CEL runtime (``cel-expr-python``) where it agrees with
:mod:`lockstep.dra.cel`.

cel-expr-python evaluates a selector 10-100 times faster than the celpy-based evaluator, but it has
no Quantity or Semver values (they would need protobuf messages), no cost tracking and no map that
answers an unknown attribute domain with an empty map. So it takes a selector only when all of this
holds, and :class:`FastSelector.verdict` answers None (today's evaluator decides) otherwise:

* the selector uses only the constructs in ``_NODES``, the functions in ``_FUNCTIONS`` and the
  methods and macros in ``_METHODS`` (standard CEL that both runtimes implement alike; no
  Kubernetes library, no optional syntax, no type names, no stacked ``!!`` or ``--``);
* ``device`` is only used as ``device.driver``, ``device.allowMultipleAllocations``, or
  ``device.attributes[D].N`` / ``device.capacity[D].N`` with D and N plain literals (``[..]`` or
  ``.``): such a selector sees exactly the attributes it names, so a view of the device holding only
  those (and an empty map for a domain the device lacks) behaves as the full activation does;
* its worst-case cost estimate is within the selector limit, so the cost tracking cannot stop it;
* none of the attributes it names is a version or a capacity (a Quantity), and the device's
  attributes are well-formed (a malformed one makes every selector fail on it);
* the evaluation gives a bool: any error goes to today's evaluator, whose message users see.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

import lark
import re2

from lockstep.dra.cel_errors import qualify
from lockstep.dra.k8s_types import Quantity, SemverError, parse_semver

_NODES = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        *(f"relation_{op}" for op in ("eq", "ne", "lt", "le", "gt", "ge", "in")),
        "addition",
        "addition_add",
        "addition_sub",
        "multiplication",
        "multiplication_mul",
        "multiplication_div",
        "multiplication_mod",
        "unary",
        "unary_not",
        "unary_neg",
        "member_dot",
        "member_dot_arg",
        "member_index",
        "primary",
        "paren_expr",
        "ident",
        "ident_arg",
        "literal",
        "list_lit",
        "map_lit",
        "exprlist",
        "mapinits",
    }
)
_FUNCTIONS = frozenset({"size", "has", "int", "uint", "double", "bool"})
_METHODS = frozenset(
    {"size", "matches", "startsWith", "endsWith", "contains", "all", "exists", "exists_one", "map", "filter"}
)
_DEVICE_FIELDS = frozenset({"driver", "allowMultipleAllocations"})
_DOMAIN_KINDS = frozenset({"attributes", "capacity"})
_PLAIN_STRING = re.compile(r"""^(?:"([^"\\]*)"|'([^'\\]*)'|[rR]"([^"]*)"|[rR]'([^']*)')$""")


class _Opaque:
    """A value cel-expr-python cannot hold: a version or a Quantity."""


OPAQUE = _Opaque()
Reference = tuple[str, str, str]  # ("attributes" | "capacity", domain, name)
DomainValues = dict[str, dict[str, Any]]


class _Declined(Exception):
    pass


def _plain_string(tree: Any) -> str:
    while isinstance(tree, lark.Tree) and tree.data == "primary" and len(tree.children) == 1:
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "literal":
        token = tree.children[0]
        is_string = isinstance(token, lark.Token) and token.type == "STRING_LIT"
        match = _PLAIN_STRING.match(str(token)) if is_string else None
        if match is not None:
            return next(group for group in match.groups() if group is not None)
    raise _Declined


def _device_path(tree: Any) -> list[str] | None:
    """The selections below ``device`` (``device.attributes["d"].n`` -> [attributes, d, n]), or None if
    ``tree`` is not such a chain."""
    if not isinstance(tree, lark.Tree):
        return None
    if tree.data == "primary" and len(tree.children) == 1:
        child = tree.children[0]
        if isinstance(child, lark.Tree) and child.data == "ident" and str(child.children[0]) == "device":
            return []
        return None
    if tree.data == "member_dot":
        path = _device_path(tree.children[0])
        return None if path is None else [*path, str(tree.children[1])]
    if tree.data == "member_index":
        path = _device_path(tree.children[0])
        if path is None:
            return None
        try:
            return [*path, _plain_string(tree.children[1])]
        except _Declined:
            return None
    return None


_QUIET = re2.Options()
_QUIET.log_errors = False


def _check_pattern(arguments: Any) -> None:
    """A pattern must be a literal RE2 accepts: RE2 in cel-expr-python logs each failure to stderr."""
    try:
        re2.compile(_plain_string(arguments.children[-1]), _QUIET)
    except re2.error:
        raise _Declined from None


def _stacked_unary(operand: Any) -> bool:
    while isinstance(operand, lark.Tree) and operand.data in ("primary", "literal") and operand.children:
        if operand.data == "literal":
            return str(operand.children[0]).startswith("-")  # - -1: the lexer took one minus
        operand = operand.children[0]
    return isinstance(operand, lark.Tree) and operand.data == "unary"


def _references(tree: Any, found: set[Reference]) -> None:
    """Collects the attributes the selector names; raises _Declined on anything outside the rules."""
    if not isinstance(tree, lark.Tree):
        return
    if tree.data not in _NODES:
        raise _Declined
    path = _device_path(tree)
    if path is not None:
        if len(path) == 1 and path[0] in _DEVICE_FIELDS:
            return
        if len(path) >= 3 and path[0] in _DOMAIN_KINDS:
            found.add((path[0], path[1], path[2]))
            return
        raise _Declined  # bare device, device.attributes, a whole domain map...
    if tree.data == "unary" and _stacked_unary(tree.children[-1]):
        raise _Declined  # cel-go's parser drops an even run of ! or - (!!0 is 0); dra.cel does not
    if tree.data == "ident_arg" and str(tree.children[0]) not in _FUNCTIONS:
        raise _Declined
    if tree.data == "member_dot_arg" and str(tree.children[1]) not in _METHODS:
        raise _Declined
    if tree.data == "member_dot_arg" and str(tree.children[1]) == "matches":
        _check_pattern(tree.children[-1])
    for child in tree.children:
        _references(child, found)


@functools.cache
def _environment() -> Any:
    """cel-expr-python's environment, imported at the first selector compiled (40-70 ms); None when
    the platform has no wheel of it, and then every selector takes today's evaluator."""
    try:
        from cel_expr_python import cel
    except ImportError:
        return None
    return cel.NewEnv(variables={"device": cel.Type.DYN})


class FastSelector:
    """A selector compiled by cel-expr-python, with the attributes it names."""

    __slots__ = ("_program", "references")

    def __init__(self, program: Any, references: tuple[Reference, ...]) -> None:
        self._program = program
        self.references = references

    def verdict(self, device: FastDevice) -> bool | None:
        """The selector's verdict on ``device``, or None where today's evaluator must decide."""
        view = device.view(self.references)
        if view is None:
            return None
        try:
            result = self._program.eval(data={"device": view})
        except Exception:  # anything cel-expr-python raises: today's evaluator explains it
            return None
        value = result.value()
        return value if isinstance(value, bool) else None


def compile_fast(
    expression: str, tree: Any, estimated_cost: Callable[[], int], cost_limit: int
) -> FastSelector | None:
    """The fast form of a selector today's evaluator compiled to ``tree``, or None if it declines."""
    found: set[Reference] = set()
    try:
        _references(tree, found)
    except (_Declined, RecursionError):
        return None
    if estimated_cost() > cost_limit or _environment() is None:
        return None
    try:
        # Unchecked: its checker refuses comprehensions over dyn values (device.attributes[d].n.all(..)),
        # and dra.cel has made the compile-time checks; type errors surface at run time and decline.
        program = _environment().compile(expression, disable_check=True)
    except Exception:  # a construct cel-expr-python does not parse
        return None
    return FastSelector(program, tuple(sorted(found)))


def _plain_attribute(attribute: Mapping[str, Any], list_type_attributes: bool) -> Any:
    """As :func:`lockstep.dra.cel.attribute_value`, in plain Python; OPAQUE for versions, None when
    invisible; raises ValueError/SemverError where it does."""
    for kind in ("int", "bool", "string"):
        if attribute.get(kind) is not None:
            return attribute[kind]
    if attribute.get("version") is not None:
        parse_semver(attribute["version"])
        return OPAQUE
    for kind in ("ints", "bools", "strings", "versions"):
        values = attribute.get(kind)
        if values is None:
            continue
        if not list_type_attributes:
            return None
        if kind == "versions":
            for version in values:
                parse_semver(version)
            return OPAQUE
        return list(values)
    raise ValueError(f"attribute has no value: {attribute}")


class FastDevice:
    """A device's CEL variables in plain Python, for :class:`FastSelector`."""

    __slots__ = ("_attributes", "_capacity", "_fields")

    def __init__(
        self, fields: dict[str, Any], attributes: DomainValues | None, capacity: DomainValues
    ) -> None:
        self._fields = fields
        self._attributes = attributes  # None: a malformed attribute, every selector fails here
        self._capacity = capacity

    def view(self, references: tuple[Reference, ...]) -> dict[str, Any] | None:
        """``device`` with only the referenced attributes; None if one of them is opaque."""
        if self._attributes is None:
            return None
        views: dict[str, DomainValues] = {"attributes": {}, "capacity": {}}
        for kind, domain, name in references:
            values = (self._attributes if kind == "attributes" else self._capacity).get(domain, {})
            domain_view = views[kind].setdefault(domain, {})
            if name in values:
                value = values[name]
                if value is OPAQUE:
                    return None
                domain_view[name] = value
        return {**self._fields, **views}


def fast_device(
    driver: str,
    attributes: Mapping[str, Mapping[str, Any]],
    capacity: Mapping[str, Quantity],
    list_type_attributes: bool,
    allow_multiple_allocations: bool = False,
) -> FastDevice:
    """The same device as :func:`lockstep.dra.cel.device_activation` describes, for the fast path."""
    attribute_domains: DomainValues = {}
    malformed = False
    try:
        for name, attribute in attributes.items():
            value = _plain_attribute(attribute, list_type_attributes)
            if value is not None:
                domain, identifier = qualify(name, driver)
                attribute_domains.setdefault(domain, {})[identifier] = value
    except (ValueError, SemverError):
        malformed = True
    capacity_domains: DomainValues = {}
    for name in capacity:
        domain, identifier = qualify(name, driver)
        capacity_domains.setdefault(domain, {})[identifier] = OPAQUE
    fields = {"driver": driver, "allowMultipleAllocations": allow_multiple_allocations}
    return FastDevice(fields, None if malformed else attribute_domains, capacity_domains)
