"""Kubernetes DRA device-selector CEL on top of cel-python (``celpy``).

As in k8s.io/dynamic-resource-allocation/cel plus k8s.io/apiserver/pkg/cel/library:

* ``device`` = {driver, attributes, capacity, allowMultipleAllocations}; an unqualified attribute or
  capacity name gets the driver as its domain, and an unknown domain is an empty map (so
  ``device.attributes["x"].foo`` fails with "no such key: foo" while ``has(...)`` and ``in`` are false);
* ``quantity()``/``isQuantity()`` and the Quantity methods, ``semver()``/``isSemver()`` and the Semver
  methods, ``compareTo``/``isGreaterThan``/``isLessThan``;
* with list-type attributes on (KEP-5491): list-valued attributes and ``<dyn>.includes(x)``;
* ``cel.bind``, two-variable comprehensions, cel-go's heterogeneous equality and cross-type numeric
  ordering, and a subset of the ext.Strings / lists / regex libraries.

Each expression is compiled once per feature set (:func:`compile_selector`). A compile or runtime error
becomes :class:`CELError`, whose message quotes the expression; it never escapes as anything else.
Cost limits are not enforced.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
import re2
from celpy.evaluation import CELEvalError, Evaluator

from lockstep.dra.k8s_types import (
    MAX_ATTRIBUTE_VALUES_PER_DEVICE,
    Quantity,
    QuantityError,
    Semver,
    SemverError,
    is_quantity,
    is_semver,
    parse_quantity,
    parse_semver,
)

Value = Any  # a celpy value, a Quantity, a Semver or a CELEvalError
Activation = Mapping[str, Any]


class CELError(ValueError):
    """A selector could not be compiled or evaluated; the message quotes the expression."""

    def __init__(self, expression: str, problem: str) -> None:
        super().__init__(f"CEL expression {expression!r}: {problem}")
        self.expression = expression
        self.problem = problem


def _error(message: str) -> CELEvalError:
    return CELEvalError(message, TypeError, (message,))


def _type_name(value: Value) -> str:
    if isinstance(value, Quantity):
        return "Quantity"
    if isinstance(value, Semver):
        return "Semver"
    return type(value).__name__.replace("Type", "").lower()


def _no_overload(name: str, *args: Value) -> CELEvalError:
    return _error(f"no such overload: {name}({', '.join(_type_name(a) for a in args)})")


# --- equality and ordering as in cel-go (heterogeneous equality, cross-type numbers) ---------------

_NUMBERS = (ct.IntType, ct.UintType, ct.DoubleType)


class _NoOverload(Exception):
    pass


def _is_number(value: Value) -> bool:
    return isinstance(value, _NUMBERS) or type(value) in (int, float)


def _as_python_number(value: Value) -> int | float:
    """celpy numbers refuse mixed-type operators; compare them as exact builtin int/float."""
    return float(value) if isinstance(value, ct.DoubleType | float) else int(value)


def _is_null(value: Value) -> bool:
    return value is None or isinstance(value, ct.NullType)


def _cel_equal(a: Value, b: Value) -> bool:
    """types.Equal(a, b): a bool, or _NoOverload for Quantity/Semver against another type."""
    if _is_null(a) or _is_null(b):
        return _is_null(a) and _is_null(b)
    if isinstance(a, Quantity | Semver):
        if type(b) is type(a):
            return bool(a == b)
        raise _NoOverload
    if isinstance(a, ct.BoolType) or type(a) is bool:
        return (isinstance(b, ct.BoolType) or type(b) is bool) and bool(a) == bool(b)
    if _is_number(a):
        if not _is_number(b) or isinstance(b, ct.BoolType):
            return False
        return _as_python_number(a) == _as_python_number(b)
    if isinstance(a, str):
        return isinstance(b, str) and str(a) == str(b)
    if isinstance(a, list):
        if not isinstance(b, list) or len(a) != len(b):
            return False
        for x, y in zip(a, b, strict=True):
            try:
                if not _cel_equal(x, y):
                    return False
            except _NoOverload:  # cel-go: only an explicit False ends list equality
                continue
        return True
    if isinstance(a, dict):
        if not isinstance(b, dict) or len(a) != len(b):
            return False
        for key, value in a.items():
            if key not in b:
                return False
            try:
                if not _cel_equal(value, b[key]):
                    return False
            except _NoOverload:
                continue
        return True
    return type(a) is type(b) and bool(a == b)


def _equal_is_true(a: Value, b: Value) -> bool:
    try:
        return _cel_equal(a, b)
    except _NoOverload:
        return False


def _first_error(*args: Value) -> CELEvalError | None:
    for arg in args:
        if isinstance(arg, CELEvalError):
            return arg
    return None


def _op_equal(a: Value, b: Value) -> Value:
    if error := _first_error(a, b):
        return error
    try:
        return ct.BoolType(_cel_equal(a, b))
    except _NoOverload:
        return _no_overload("_==_", a, b)


def _op_not_equal(a: Value, b: Value) -> Value:
    if error := _first_error(a, b):
        return error
    return ct.BoolType(not _equal_is_true(a, b))  # cel-go: Equal(l, r) != True


def _compare(a: Value, b: Value, name: str) -> int | CELEvalError | None:
    """-1/0/1, None when either side is NaN, or an error when the types do not order."""
    if error := _first_error(a, b):
        return error
    if _is_number(a) and _is_number(b) and not isinstance(a, ct.BoolType) and not isinstance(b, ct.BoolType):
        x, y = _as_python_number(a), _as_python_number(b)
        if x != x or y != y:
            return None
        return (x > y) - (x < y)
    orderable: tuple[tuple[type, Callable[[Any], Any] | None], ...] = (
        (ct.StringType, str),
        (ct.BoolType, int),
        (ct.BytesType, bytes),
        (ct.TimestampType, None),
        (ct.DurationType, None),
    )
    for cel_type, convert in orderable:
        if isinstance(a, cel_type) and isinstance(b, cel_type):
            if convert is not None:
                a, b = convert(a), convert(b)
            return int((a > b) - (a < b))
    return _no_overload(name, a, b)


def _ordering(name: str, accept: Callable[[int], bool]) -> Callable[[Value, Value], Value]:
    def operator(a: Value, b: Value) -> Value:
        result = _compare(a, b, name)
        if isinstance(result, CELEvalError):
            return result
        return ct.BoolType(result is not None and accept(result))

    return operator


def _op_in(item: Value, container: Value) -> Value:
    if error := _first_error(item, container):
        return error
    if isinstance(container, list):
        return ct.BoolType(any(_equal_is_true(item, x) for x in container))
    if isinstance(container, dict):
        if isinstance(item, str):
            return ct.BoolType(dict.__contains__(container, item))
        return ct.BoolType(any(_equal_is_true(item, key) for key in container))
    return _no_overload("@in", item, container)


# --- Kubernetes library functions ------------------------------------------------------------------


def _fn_quantity(text: Value) -> Value:
    if error := _first_error(text):
        return error
    if not isinstance(text, str):
        return _no_overload("quantity", text)
    try:
        return parse_quantity(str(text))
    except QuantityError as exc:
        return _error(str(exc))


def _fn_is_quantity(text: Value) -> Value:
    if error := _first_error(text):
        return error
    if not isinstance(text, str):
        return _no_overload("isQuantity", text)
    return ct.BoolType(is_quantity(str(text)))


def _fn_semver(text: Value, normalize: Value = None) -> Value:
    if error := _first_error(text, normalize):
        return error
    if not isinstance(text, str) or (normalize is not None and not isinstance(normalize, ct.BoolType)):
        return _no_overload("semver", text)
    try:
        return Semver.parse_normalized(str(text)) if normalize else parse_semver(str(text))
    except SemverError as exc:
        return _error(str(exc))


def _fn_is_semver(text: Value, normalize: Value = None) -> Value:
    if error := _first_error(text, normalize):
        return error
    if not isinstance(text, str):
        return _no_overload("isSemver", text)
    return ct.BoolType(is_semver(str(text), bool(normalize)))


def _same_type_binary(name: str, impl: Callable[[Any, Any], Value]) -> Callable[[Value, Value], Value]:
    def function(a: Value, b: Value) -> Value:
        if error := _first_error(a, b):
            return error
        if isinstance(a, Quantity | Semver) and type(b) is type(a):
            return impl(a, b)
        return _no_overload(name, a, b)

    return function


def _unary(name: str, operand_type: type, impl: Callable[[Any], Value]) -> Callable[[Value], Value]:
    def function(a: Value) -> Value:
        if error := _first_error(a):
            return error
        if type(a) is not operand_type:
            return _no_overload(name, a)
        try:
            return impl(a)
        except (QuantityError, SemverError) as exc:
            return _error(str(exc))

    return function


def _quantity_arithmetic(name: str) -> Callable[[Value, Value], Value]:
    def function(a: Value, b: Value) -> Value:
        if error := _first_error(a, b):
            return error
        if type(a) is Quantity and (type(b) is Quantity or isinstance(b, ct.IntType)):
            return a.add(b) if name == "add" else a.sub(b)
        return _no_overload(name, a, b)

    return function


def _fn_includes(target: Value, item: Value) -> Value:
    if error := _first_error(target, item):
        return error
    if isinstance(target, list):
        if len(target) > MAX_ATTRIBUTE_VALUES_PER_DEVICE:
            return _error(
                "'includes' function cannot be applied to lists longer than "
                f"{MAX_ATTRIBUTE_VALUES_PER_DEVICE} values"
            )
        return ct.BoolType(any(_equal_is_true(element, item) for element in target))
    return ct.BoolType(_equal_is_true(target, item))


def _string_function(name: str, impl: Callable[..., Value]) -> Callable[..., Value]:
    def function(*args: Value) -> Value:
        if error := _first_error(*args):
            return error
        try:
            return impl(*args)
        except (TypeError, AttributeError, IndexError, ValueError):
            return _no_overload(name, *args)

    return function


def _index_of(target: Value, item: Value, start: Value = 0) -> Value:
    if isinstance(target, list):  # Kubernetes lists library
        for i, element in enumerate(target):
            if _equal_is_true(element, item):
                return ct.IntType(i)
        return ct.IntType(-1)
    return ct.IntType(str(target).find(str(item), int(start)))


def _last_index_of(target: Value, item: Value) -> Value:
    if isinstance(target, list):
        for i in range(len(target) - 1, -1, -1):
            if _equal_is_true(target[i], item):
                return ct.IntType(i)
        return ct.IntType(-1)
    return ct.IntType(str(target).rfind(str(item)))


def _substring(text: Value, start: Value, end: Value = None) -> Value:
    if not isinstance(text, ct.StringType):
        raise TypeError("substring needs a string")
    return ct.StringType(text[int(start) :] if end is None else text[int(start) : int(end)])


def _split(text: Value, separator: Value, limit: Value = None) -> Value:
    if limit is None or int(limit) < 0:
        parts = text.split(separator)
    else:
        parts = [] if int(limit) == 0 else text.split(separator, int(limit) - 1)
    return ct.ListType([ct.StringType(p) for p in parts])


def _find(text: Value, pattern: Value) -> Value:
    match = re2.search(str(pattern), str(text))
    return ct.StringType(match.group(0) if match else "")


def _find_all(text: Value, pattern: Value, limit: Value = -1) -> Value:
    found = [ct.StringType(m.group(0)) for m in re2.finditer(str(pattern), str(text))]
    return ct.ListType(found if int(limit) < 0 else found[: int(limit)])


def _ascii_case(pattern: str, convert: Callable[[str], str]) -> Callable[[Value], Value]:
    compiled = re.compile(pattern)
    return lambda text: ct.StringType(compiled.sub(lambda m: convert(m.group(0)), text))


_STRING_IMPLEMENTATIONS: dict[str, Callable[..., Value]] = {
    "lowerAscii": _ascii_case("[A-Z]+", str.lower),
    "upperAscii": _ascii_case("[a-z]+", str.upper),
    "trim": lambda text: ct.StringType(text.strip()),
    "split": _split,
    "join": lambda items, sep="": ct.StringType(str(sep).join(str(x) for x in items)),
    "replace": lambda text, old, new, n=-1: ct.StringType(text.replace(old, new, int(n))),
    "charAt": lambda text, i: ct.StringType(text[int(i)] if int(i) < len(text) else ""),
    "indexOf": _index_of,
    "lastIndexOf": _last_index_of,
    "substring": _substring,
    "find": _find,
    "findAll": _find_all,
    "isSorted": lambda items: ct.BoolType(all(items[i] <= items[i + 1] for i in range(len(items) - 1))),
    "sum": lambda items: sum(items[1:], items[0]) if items else ct.IntType(0),
}
_STRING_FUNCTIONS = {name: _string_function(name, impl) for name, impl in _STRING_IMPLEMENTATIONS.items()}

_BASE_FUNCTIONS: dict[str, Callable[..., Value]] = {
    "_==_": _op_equal,
    "_!=_": _op_not_equal,
    "_<_": _ordering("_<_", lambda c: c < 0),
    "_<=_": _ordering("_<=_", lambda c: c <= 0),
    "_>_": _ordering("_>_", lambda c: c > 0),
    "_>=_": _ordering("_>=_", lambda c: c >= 0),
    "_in_": _op_in,
    "quantity": _fn_quantity,
    "isQuantity": _fn_is_quantity,
    "sign": _unary("sign", Quantity, lambda q: ct.IntType(q.sign())),
    "isInteger": _unary("isInteger", Quantity, lambda q: ct.BoolType(q.is_integer())),
    "asInteger": _unary("asInteger", Quantity, lambda q: ct.IntType(q.as_integer())),
    "asApproximateFloat": _unary(
        "asApproximateFloat", Quantity, lambda q: ct.DoubleType(q.as_approximate_float())
    ),
    "add": _quantity_arithmetic("add"),
    "sub": _quantity_arithmetic("sub"),
    "semver": _fn_semver,
    "isSemver": _fn_is_semver,
    "major": _unary("major", Semver, lambda v: ct.IntType(v.major)),
    "minor": _unary("minor", Semver, lambda v: ct.IntType(v.minor)),
    "patch": _unary("patch", Semver, lambda v: ct.IntType(v.patch)),
    "compareTo": _same_type_binary("compareTo", lambda a, b: ct.IntType(a.compare_to(b))),
    "isGreaterThan": _same_type_binary("isGreaterThan", lambda a, b: ct.BoolType(a.compare_to(b) == 1)),
    "isLessThan": _same_type_binary("isLessThan", lambda a, b: ct.BoolType(a.compare_to(b) == -1)),
    **_STRING_FUNCTIONS,
}
_LIST_TYPE_FUNCTIONS: dict[str, Callable[..., Value]] = {**_BASE_FUNCTIONS, "includes": _fn_includes}


# --- the evaluator: cel.bind, two-variable comprehensions, Kubernetes "no such key" messages --------


def _single_identifier(tree: Any) -> str | None:
    """The name if ``tree`` is just an identifier (below optional pass-through nodes)."""
    while isinstance(tree, lark.Tree) and len(tree.children) == 1 and tree.data != "ident":
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "ident":
        return str(tree.children[0])
    return None


_MISSING = object()
_TWO_VARIABLE_MACROS = ("all", "exists", "existsOne", "exists_one")


class _DRAEvaluator(Evaluator):
    def sub_evaluator(self, ast: Any) -> _DRAEvaluator:
        return _DRAEvaluator(ast, activation=self.activation)

    def literal(self, tree: Any) -> Value:
        """Parsed literal values are cached on the (immutable) AST node."""
        value = getattr(tree, "_dra_literal", _MISSING)
        if value is _MISSING:
            value = super().literal(tree)
            if not isinstance(value, CELEvalError):
                tree._dra_literal = value
        return value

    def member_dot_arg(self, tree: Any) -> Value:
        member_tree, method = tree.children[0], tree.children[1]
        if method == "bind" and _single_identifier(member_tree) == "cel" and len(tree.children) == 3:
            args = tree.children[2].children
            name = _single_identifier(args[0]) if len(args) == 3 else None
            if name is None:
                return _error("cel.bind() requires (identifier, init, result)")
            initial = self.visit(args[1])
            try:
                return self.sub_evaluator(args[2]).evaluate({name: initial})
            except CELEvalError as exc:
                return exc
        if method in _TWO_VARIABLE_MACROS and len(tree.children) == 3 and len(tree.children[2].children) == 3:
            return self._two_variable_comprehension(str(method), member_tree, tree.children[2].children)
        return super().member_dot_arg(tree)

    def _two_variable_comprehension(self, macro: str, member_tree: Any, args: list[Any]) -> Value:
        """cel-go ext.TwoVarComprehensions: all/exists/existsOne(k, v, predicate)."""
        key_name, value_name = _single_identifier(args[0]), _single_identifier(args[1])
        if key_name is None or value_name is None:
            return _error(f"{macro}() requires identifiers")
        target = self.visit(member_tree)
        if isinstance(target, CELEvalError):
            return target
        pairs: Iterable[tuple[Value, Value]]
        if isinstance(target, list):
            pairs = [(ct.IntType(i), x) for i, x in enumerate(target)]
        elif isinstance(target, dict):
            pairs = list(target.items())
        else:
            return _no_overload(macro, target)
        body = self.sub_evaluator(args[2])
        found, error = 0, None
        for key, value in pairs:
            result: Value
            try:
                result = body.evaluate({key_name: key, value_name: value})
            except CELEvalError as exc:
                result = exc
            if isinstance(result, CELEvalError) or not isinstance(result, ct.BoolType):
                error = error or (result if isinstance(result, CELEvalError) else _no_overload(macro, result))
                if macro in ("existsOne", "exists_one"):
                    return error
                continue
            if macro == "all" and not result:
                return ct.BoolType(False)
            if macro == "exists" and result:
                return ct.BoolType(True)
            found += bool(result)
        if error is not None:
            return error
        if macro == "all":
            return ct.BoolType(True)
        if macro == "exists":
            return ct.BoolType(False)
        return ct.BoolType(found == 1)

    def member_dot(self, tree: Any) -> Value:
        value = super().member_dot(tree)
        if (
            isinstance(value, CELEvalError)
            and value.args
            and str(value.args[0]).startswith("no such member in mapping")
        ):
            return _error(f"no such key: {tree.children[1]}")
        return value

    def member_index(self, tree: Any) -> Value:
        value = super().member_index(tree)
        if isinstance(value, CELEvalError) and value.args and value.args[0] == "no such key":
            key = value.args[2][0] if len(value.args) > 2 and value.args[2] else "?"
            return _error(f"no such key: {key}")
        return value


class _DRARunner(celpy.InterpretedRunner):
    """One base activation per compiled selector; the evaluator clones it on every call."""

    def __init__(self, environment: Any, ast: Any, functions: Any = None) -> None:
        super().__init__(environment, ast, functions)
        self._base_activation = self.new_activation()

    def evaluate(self, context: Activation) -> Value:
        return _DRAEvaluator(ast=self.ast, activation=self._base_activation).evaluate(context)


# Collapsing single-child pass-through nodes halves the depth of the tree walk.
_PASS_THROUGH = frozenset(
    {"expr", "conditionalor", "conditionaland", "relation", "addition", "multiplication", "unary", "member"}
)


def _collapse(tree: Any) -> Any:
    while (
        isinstance(tree, lark.Tree)
        and tree.data in _PASS_THROUGH
        and len(tree.children) == 1
        and isinstance(tree.children[0], lark.Tree)
    ):
        tree = tree.children[0]
    if isinstance(tree, lark.Tree):
        tree.children = [_collapse(child) for child in tree.children]
    return tree


_ENVIRONMENT = celpy.Environment(runner_class=_DRARunner)


class Selector:
    """A compiled selector expression. Evaluating it never raises anything but CELError."""

    __slots__ = ("_runner", "expression")

    def __init__(self, expression: str, list_type_attributes: bool) -> None:
        self.expression = expression
        try:
            ast = _ENVIRONMENT.compile(expression)
        except Exception as exc:  # celpy.CELParseError and lark errors
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CELError(expression, f"compilation failed: {first_line}") from None
        functions = _LIST_TYPE_FUNCTIONS if list_type_attributes else _BASE_FUNCTIONS
        self._runner = _DRARunner(_ENVIRONMENT, _collapse(ast), functions)

    def matches(self, activation: Activation) -> bool:
        try:
            result = self._runner.evaluate(activation)
        except CELEvalError as exc:
            raise CELError(self.expression, str(exc.args[0]) if exc.args else repr(exc)) from None
        except Exception as exc:  # celpy internals raising on inputs they do not expect
            raise CELError(self.expression, f"evaluation failed: {type(exc).__name__}: {exc}") from None
        if isinstance(result, CELEvalError):
            raise CELError(self.expression, str(result.args[0]) if result.args else repr(result))
        if not isinstance(result, ct.BoolType):
            raise CELError(
                self.expression, f"CEL result of type {_type_name(result)} could not be converted to bool"
            )
        return bool(result)


@functools.lru_cache(maxsize=1024)
def _compile_cached(expression: str, list_type_attributes: bool) -> Selector | CELError:
    try:
        return Selector(expression, list_type_attributes)
    except CELError as exc:
        return exc


def compile_selector(expression: str, list_type_attributes: bool = False) -> Selector:
    """The compiled selector for ``expression``, compiled once per process; raises CELError."""
    compiled = _compile_cached(expression, list_type_attributes)
    if isinstance(compiled, CELError):
        raise compiled
    return compiled


# --- activations: build once per device (per slice generation) -------------------------------------


class _DomainMap(ct.MapType):
    """device.attributes / device.capacity: an unknown domain is an empty map."""

    def __missing__(self, key: Any) -> Any:
        return ct.MapType()


def _domain_map(domains: dict[str, dict[str, Any]]) -> _DomainMap:
    return _DomainMap(
        {
            ct.StringType(domain): ct.MapType({ct.StringType(k): v for k, v in values.items()})
            for domain, values in domains.items()
        }
    )


_LIST_ATTRIBUTE_KINDS = ("ints", "bools", "strings", "versions")


def attribute_value(attribute: Mapping[str, Any], list_type_attributes: bool) -> Value | None:
    """A DeviceAttribute in API shape ({"int": 1}, {"versions": [...]}) as a CEL value.

    None when the attribute cannot be seen: a list attribute while list types are off.
    """
    if "int" in attribute and attribute["int"] is not None:
        return ct.IntType(attribute["int"])
    if "bool" in attribute and attribute["bool"] is not None:
        return ct.BoolType(attribute["bool"])
    if "string" in attribute and attribute["string"] is not None:
        return ct.StringType(attribute["string"])
    if "version" in attribute and attribute["version"] is not None:
        return parse_semver(attribute["version"])
    for kind in _LIST_ATTRIBUTE_KINDS:
        values = attribute.get(kind)
        if values is None:
            continue
        if not list_type_attributes:
            return None
        if kind == "ints":
            return ct.ListType([ct.IntType(v) for v in values])
        if kind == "bools":
            return ct.ListType([ct.BoolType(v) for v in values])
        if kind == "strings":
            return ct.ListType([ct.StringType(v) for v in values])
        versions: list[Any] = [parse_semver(v) for v in values]
        return ct.ListType(versions)
    raise ValueError(
        f"attribute has no value (expected one of int, bool, string, version, ints, ...): {attribute}"
    )


def qualify(name: str, driver: str) -> tuple[str, str]:
    """(domain, identifier) of an attribute or capacity name; unqualified names get the driver."""
    domain, slash, identifier = name.partition("/")
    return (domain, identifier) if slash else (driver, name)


def device_activation(
    driver: str,
    attributes: Mapping[str, Mapping[str, Any]],
    capacity: Mapping[str, Quantity],
    list_type_attributes: bool,
    allow_multiple_allocations: bool = False,
) -> dict[str, Any]:
    """The CEL variables for one device. Raises ValueError/SemverError on malformed attributes."""
    attribute_domains: dict[str, dict[str, Any]] = {}
    for name, attribute in attributes.items():
        value = attribute_value(attribute, list_type_attributes)
        if value is not None:
            domain, identifier = qualify(name, driver)
            attribute_domains.setdefault(domain, {})[identifier] = value
    capacity_domains: dict[str, dict[str, Any]] = {}
    for name, quantity in capacity.items():
        domain, identifier = qualify(name, driver)
        capacity_domains.setdefault(domain, {})[identifier] = quantity
    return {
        "device": ct.MapType(
            {
                ct.StringType("driver"): ct.StringType(driver),
                ct.StringType("allowMultipleAllocations"): ct.BoolType(allow_multiple_allocations),
                ct.StringType("attributes"): _domain_map(attribute_domains),
                ct.StringType("capacity"): _domain_map(capacity_domains),
            }
        )
    }
