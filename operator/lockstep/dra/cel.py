"""Kubernetes DRA device-selector CEL on top of cel-python (``celpy``).

As in k8s.io/dynamic-resource-allocation/cel plus k8s.io/apiserver/pkg/cel/library:

* ``device`` = {driver, attributes, capacity, allowMultipleAllocations}; an unqualified attribute or
  capacity name gets the driver as its domain, and an unknown domain is an empty map (so
  ``device.attributes["x"].foo`` fails with "no such key: foo" while ``has(...)`` and ``in`` are false);
* ``quantity()``/``isQuantity()`` and the Quantity methods, ``semver()``/``isSemver()`` and the Semver
  methods, ``compareTo``/``isGreaterThan``/``isLessThan``;
* with list-type attributes on (KEP-5491): list-valued attributes and ``<dyn>.includes(x)``;
* ``cel.bind``, two-variable comprehensions, cel-go's heterogeneous equality and cross-type numeric
  ordering;
* the libraries of Kubernetes' 1.36 environment (:mod:`lockstep.dra.cel_libraries`): ext.Strings v2,
  ext.Sets, Kubernetes lists and ext.Lists v3, regex, IP, CIDR, URL and format;
* optional types (``cel.OptionalTypes``): ``x.?f``, ``x[?k]``, ``[?x]``, ``{?k: v}``, ``optional.of``,
  ``optional.ofNonZeroValue``, ``optional.none``, ``hasValue``, ``value``, ``or``, ``orValue``,
  ``optMap``, ``optFlatMap``; the syntax comes from :mod:`lockstep.dra.cel_syntax`.

Each expression is compiled once per feature set (:func:`compile_selector`); a function or variable the
environment does not declare (``math.*``, ``base64.*``, ``devices``...) is refused at compile time, naming
it, and so is a selector that is a non-bool literal (cel-go checks the output type). A compile or runtime
error becomes :class:`CELError`, whose message quotes the expression; it never escapes as anything else.
The runtime cost limit is upstream's ``CELSelectorExpressionMaxCost`` (1,000,000), counted as cel-go's
cost tracker counts (1 per variable, selection, index and call, 10 per list and 30 per map literal), loop
iterations included. :meth:`Selector.estimated_cost` is cel-go's worst-case estimate
(:mod:`lockstep.dra.cel_cost`), which kube-apiserver checks against the same limit when a selector is
written.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from typing import Any

import celpy
import celpy.celtypes as ct
import lark
from celpy.evaluation import CELEvalError, Evaluator

from lockstep.dra.cel_cost import estimated_cost
from lockstep.dra.cel_errors import CELError, CELSyntaxError, qualify
from lockstep.dra.cel_fast import compile_fast
from lockstep.dra.cel_libraries import (
    LIBRARY_FUNCTIONS,
    UnknownFormatArgument,
    check_format_call,
    go_double_string,
    library_string,
    sort_values,
)
from lockstep.dra.cel_syntax import install_optional_syntax
from lockstep.dra.cel_values import (
    OPTIONAL_NONE,
    CELOptional,
    NoOverload,
    Value,
    cel_equal,
    compare,
    equal_is_true,
    eval_error,
    first_error,
    is_number,
    is_zero_value,
    no_overload,
    type_name,
)
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

Activation = Mapping[str, Any]


# resource.k8s.io CELSelectorExpressionMaxCost: the runtime cost limit of one selector evaluation.
SELECTOR_MAX_COST = 1_000_000


def _op_equal(a: Value, b: Value) -> Value:
    if error := first_error(a, b):
        return error
    try:
        return ct.BoolType(cel_equal(a, b))
    except NoOverload:
        return no_overload("_==_", a, b)


def _op_not_equal(a: Value, b: Value) -> Value:
    if error := first_error(a, b):
        return error
    return ct.BoolType(not equal_is_true(a, b))  # cel-go: Equal(l, r) != True


def _ordering(name: str, accept: Callable[[int], bool]) -> Callable[[Value, Value], Value]:
    def operator(a: Value, b: Value) -> Value:
        result = compare(a, b, name)
        if isinstance(result, CELEvalError):
            return result
        return ct.BoolType(result is not None and accept(result))

    return operator


def _op_in(item: Value, container: Value) -> Value:
    if error := first_error(item, container):
        return error
    if isinstance(container, list):
        return ct.BoolType(any(equal_is_true(item, x) for x in container))
    if isinstance(container, dict):
        if isinstance(item, str):
            return ct.BoolType(dict.__contains__(container, item))
        return ct.BoolType(any(equal_is_true(item, key) for key in container))
    return no_overload("@in", item, container)


# --- Kubernetes library functions ------------------------------------------------------------------


def _fn_quantity(text: Value) -> Value:
    if error := first_error(text):
        return error
    if not isinstance(text, str):
        return no_overload("quantity", text)
    try:
        return parse_quantity(str(text))
    except QuantityError as exc:
        return eval_error(str(exc))


def _fn_is_quantity(text: Value) -> Value:
    if error := first_error(text):
        return error
    if not isinstance(text, str):
        return no_overload("isQuantity", text)
    return ct.BoolType(is_quantity(str(text)))


def _fn_semver(text: Value, normalize: Value = None) -> Value:
    if error := first_error(text, normalize):
        return error
    if not isinstance(text, str) or (normalize is not None and not isinstance(normalize, ct.BoolType)):
        return no_overload("semver", text)
    try:
        return Semver.parse_normalized(str(text)) if normalize else parse_semver(str(text))
    except SemverError as exc:
        return eval_error(str(exc))


def _fn_is_semver(text: Value, normalize: Value = None) -> Value:
    if error := first_error(text, normalize):
        return error
    if not isinstance(text, str):
        return no_overload("isSemver", text)
    return ct.BoolType(is_semver(str(text), bool(normalize)))


def _same_type_binary(name: str, impl: Callable[[Any, Any], Value]) -> Callable[[Value, Value], Value]:
    def function(a: Value, b: Value) -> Value:
        if error := first_error(a, b):
            return error
        if isinstance(a, Quantity | Semver) and type(b) is type(a):
            return impl(a, b)
        return no_overload(name, a, b)

    return function


def _unary(name: str, operand_type: type, impl: Callable[[Any], Value]) -> Callable[[Value], Value]:
    def function(a: Value) -> Value:
        if error := first_error(a):
            return error
        if type(a) is not operand_type:
            return no_overload(name, a)
        try:
            return impl(a)
        except (QuantityError, SemverError) as exc:
            return eval_error(str(exc))

    return function


def _quantity_arithmetic(name: str) -> Callable[[Value, Value], Value]:
    def function(a: Value, b: Value) -> Value:
        if error := first_error(a, b):
            return error
        if type(a) is Quantity and (type(b) is Quantity or isinstance(b, ct.IntType)):
            return a.add(b) if name == "add" else a.sub(b)
        return no_overload(name, a, b)

    return function


def _fn_includes(target: Value, item: Value) -> Value:
    if error := first_error(target, item):
        return error
    if isinstance(target, list):
        if len(target) > MAX_ATTRIBUTE_VALUES_PER_DEVICE:
            return eval_error(
                "'includes' function cannot be applied to lists longer than "
                f"{MAX_ATTRIBUTE_VALUES_PER_DEVICE} values"
            )
        return ct.BoolType(any(equal_is_true(element, item) for element in target))
    return ct.BoolType(equal_is_true(target, item))


def _fn_string(value: Value) -> Value:
    """string(x) as cel-go converts: "true"/"false", doubles as Go's %g, and the library types."""
    if isinstance(value, ct.BoolType):
        return ct.StringType("true" if value else "false")
    if isinstance(value, ct.DoubleType):
        return ct.StringType(go_double_string(float(value)))
    text = library_string(value)
    return ct.StringType(text) if text is not None else celpy.evaluation.base_functions["string"](value)


def _optional_method(name: str, impl: Callable[[CELOptional], Value]) -> Callable[[Value], Value]:
    def method(target: Value) -> Value:
        if isinstance(target, CELOptional):
            return impl(target)
        return no_overload(name, target)

    return method


def _optional_value(target: CELOptional) -> Value:
    return target.value if target.has_value else eval_error("optional.none() dereference")


_OPTIONAL_FUNCTIONS: dict[str, Callable[..., Value]] = {
    "optional.of": CELOptional,
    "optional.ofNonZeroValue": lambda value: OPTIONAL_NONE if is_zero_value(value) else CELOptional(value),
    "optional.none": lambda: OPTIONAL_NONE,
    "hasValue": _optional_method("hasValue", lambda target: ct.BoolType(target.has_value)),
    "value": _optional_method("value", _optional_value),
}

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
    **LIBRARY_FUNCTIONS,
    **_OPTIONAL_FUNCTIONS,
    "string": _fn_string,
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
_TRANSFORM_MACROS = frozenset({"transformList", "transformMap", "transformMapEntry"})
_OPTIONAL_SHORT_CIRCUITS = frozenset({"or", "orValue", "optMap", "optFlatMap"})
# Receivers that name a function namespace (``optional.of(x)``), not a variable.
NAMESPACES = frozenset({"optional", "sets", "lists", "strings", "ip", "format"})


_STEP_COSTS = dict.fromkeys(
    (
        "member_dot",
        "member_index",
        "member_dot_opt",
        "member_index_opt",
        "member_dot_arg",
        "relation",
        "addition",
        "multiplication",
        "unary",
    ),
    1,
)
# celpy evaluates these children of a ``primary`` node in place, so the primary is charged for them.
_PRIMARY_COSTS = {"ident": 1, "ident_arg": 1, "list_lit": 10, "map_lit": 30}


class _CostLimitExceeded(Exception):
    """Not a CELEvalError: like cel-go's interrupt, no ``||`` or ``&&`` may absorb it."""


class _CostBudget:
    __slots__ = ("limit", "spent")

    def __init__(self, limit: int) -> None:
        self.limit, self.spent = limit, 0


class _DRAEvaluator(Evaluator):
    _budget: _CostBudget

    def sub_evaluator(self, ast: Any) -> _DRAEvaluator:
        evaluator = _DRAEvaluator(ast, activation=self.activation)
        evaluator._budget = self._budget
        return evaluator

    def visit(self, tree: Any) -> Value:
        """Runtime cost as cel-go's tracker counts it: 1 per variable, field selection, index and call
        (operators included), 10 per list and 30 per map literal, 0 per constant; loops included."""
        budget = self._budget
        if tree.data == "primary":
            budget.spent += _PRIMARY_COSTS.get(tree.children[0].data, 0)
        else:
            budget.spent += _STEP_COSTS.get(tree.data, 0)
        if budget.spent > budget.limit:
            raise _CostLimitExceeded
        return super().visit(tree)

    def visit_children(self, tree: Any) -> list[Value]:
        """As celpy's, but through :meth:`visit`, so that every step is charged."""
        self.level += 1
        try:
            return [self.visit(child) if isinstance(child, lark.Tree) else child for child in tree.children]
        finally:
            self.level -= 1

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
                return eval_error("cel.bind() requires (identifier, init, result)")
            initial = self.visit(args[1])
            try:
                return self.sub_evaluator(args[2]).evaluate({name: initial})
            except CELEvalError as exc:
                return exc
        if method in _TWO_VARIABLE_MACROS and len(tree.children) == 3 and len(tree.children[2].children) == 3:
            return self._two_variable_comprehension(str(method), member_tree, tree.children[2].children)
        if (
            method in _TRANSFORM_MACROS
            and len(tree.children) == 3
            and len(tree.children[2].children) in (3, 4)
        ):
            return self._transform(str(method), member_tree, tree.children[2].children)
        args = tree.children[2].children if len(tree.children) == 3 else []
        namespace = _single_identifier(member_tree)
        if namespace in NAMESPACES:
            return self._call(f"{namespace}.{method}", [self.visit(arg) for arg in args])
        if method in _OPTIONAL_SHORT_CIRCUITS:
            return self._optional_short_circuit(str(method), self.visit(member_tree), args)
        if method == "sortBy" and len(args) == 2:
            return self._sort_by(self.visit(member_tree), args)
        if method == "min":  # the Kubernetes lists function, not celpy's macro of that name
            return self._call("min", [self.visit(member_tree), *(self.visit(arg) for arg in args)])
        return super().member_dot_arg(tree)

    def _sort_by(self, target: Value, args: list[Any]) -> Value:
        """ext.Lists ``sortBy(x, key)`` macro."""
        name = _single_identifier(args[0])
        if isinstance(target, CELEvalError):
            return target
        if name is None or not isinstance(target, list):
            return no_overload("sortBy", target)
        body = self.sub_evaluator(args[1])
        keys: list[Value] = []
        for value in target:
            try:
                key = body.evaluate({name: value})
            except CELEvalError as exc:
                return exc
            keys.append(key)
        return sort_values(list(target), keys)

    def _call(self, name: str, args: list[Value]) -> Value:
        if error := first_error(*args):
            return error
        try:
            return self.activation.resolve_function(name)(*args)
        except KeyError:
            return eval_error(f"undeclared reference to '{name}'")

    def _optional_short_circuit(self, method: str, target: Value, args: list[Any]) -> Value:
        """or/orValue evaluate their argument only for an empty optional; optMap/optFlatMap are macros."""
        if isinstance(target, CELEvalError):
            return target
        if not isinstance(target, CELOptional):
            return no_overload(method, target)
        if method == "or" and len(args) == 1:
            return target if target.has_value else self.visit(args[0])
        if method == "orValue" and len(args) == 1:
            return target.value if target.has_value else self.visit(args[0])
        name = _single_identifier(args[0]) if len(args) == 2 else None
        if name is None:
            return eval_error(f"{method}() requires (identifier, expression)")
        if not target.has_value:
            return OPTIONAL_NONE
        try:
            result = self.sub_evaluator(args[1]).evaluate({name: target.value})
        except CELEvalError as exc:
            return exc
        if method == "optMap":
            return CELOptional(result)
        return result if isinstance(result, CELOptional) else no_overload(method, result)

    def _pairs(self, macro: str, member_tree: Any) -> list[tuple[Value, Value]] | CELEvalError:
        """(index, element) of a list or (key, value) of a map, for two-variable comprehensions."""
        target = self.visit(member_tree)
        if isinstance(target, CELEvalError):
            return target
        if isinstance(target, list):
            return [(ct.IntType(i), x) for i, x in enumerate(target)]
        if isinstance(target, dict):
            return list(target.items())
        return no_overload(macro, target)

    def _transform(self, macro: str, member_tree: Any, args: list[Any]) -> Value:
        """ext.TwoVarComprehensions transformList/transformMap/transformMapEntry(k, v, [filter,] expr)."""
        key_name, value_name = _single_identifier(args[0]), _single_identifier(args[1])
        if key_name is None or value_name is None:
            return eval_error(f"{macro}() requires identifiers")
        pairs = self._pairs(macro, member_tree)
        if isinstance(pairs, CELEvalError):
            return pairs
        condition = self.sub_evaluator(args[2]) if len(args) == 4 else None
        transform = self.sub_evaluator(args[-1])
        items: list[Value] = []
        result = ct.MapType()
        for key, value in pairs:
            variables = {key_name: key, value_name: value}
            try:
                if condition is not None:
                    keep = condition.evaluate(variables)
                    if not isinstance(keep, ct.BoolType):
                        return no_overload(macro, keep)
                    if not keep:
                        continue
                produced = transform.evaluate(variables)
            except CELEvalError as exc:
                return exc
            if macro == "transformList":
                items.append(produced)
            elif macro == "transformMap":
                result[key] = produced
            elif not isinstance(produced, dict):
                return no_overload(macro, produced)
            else:
                for entry_key, entry_value in produced.items():
                    if entry_key in result:
                        return eval_error(f"insert failed: key {entry_key!s} already exists")
                    result[entry_key] = entry_value
        return ct.ListType(items) if macro == "transformList" else result

    def _two_variable_comprehension(self, macro: str, member_tree: Any, args: list[Any]) -> Value:
        """cel-go ext.TwoVarComprehensions: all/exists/existsOne(k, v, predicate)."""
        key_name, value_name = _single_identifier(args[0]), _single_identifier(args[1])
        if key_name is None or value_name is None:
            return eval_error(f"{macro}() requires identifiers")
        pairs = self._pairs(macro, member_tree)
        if isinstance(pairs, CELEvalError):
            return pairs
        body = self.sub_evaluator(args[2])
        found, error = 0, None
        for key, value in pairs:
            result: Value
            try:
                result = body.evaluate({key_name: key, value_name: value})
            except CELEvalError as exc:
                result = exc
            if isinstance(result, CELEvalError) or not isinstance(result, ct.BoolType):
                error = error or (result if isinstance(result, CELEvalError) else no_overload(macro, result))
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
        target = self.visit(tree.children[0])
        name = ct.StringType(tree.children[1])
        if isinstance(target, CELOptional):  # cel-go: selection on an optional is optional selection
            return _optional_select(target, name)
        if isinstance(target, ct.MapType):
            try:
                return target[name]
            except KeyError:
                return eval_error(f"no such key: {name}")
        if isinstance(target, CELEvalError):
            return target
        return super().member_dot(tree)

    def member_index(self, tree: Any) -> Value:
        target = self.visit(tree.children[0])
        if isinstance(target, CELOptional):
            return _optional_index(target, self.visit(tree.children[1]))
        if isinstance(target, CELEvalError):
            return target
        key = self.visit(tree.children[1])
        if isinstance(key, CELEvalError):
            return key
        try:
            return self.activation.resolve_function("_[_]")(target, key)
        except KeyError:
            return eval_error(f"no such key: {key}")
        except IndexError:
            return eval_error(f"index out of bounds: {key}")
        except TypeError:
            return no_overload("_[_]", target, key)

    def member_dot_opt(self, tree: Any) -> Value:
        """``x.?f``"""
        return _optional_select(self.visit(tree.children[0]), ct.StringType(tree.children[1]))

    def member_index_opt(self, tree: Any) -> Value:
        """``x[?k]``"""
        return _optional_index(self.visit(tree.children[0]), self.visit(tree.children[1]))

    def optional_exprlist(self, tree: Any) -> Value:
        """A list literal with ``?x`` elements: each is added only when the optional has a value."""
        items: list[Value] = []
        for child in tree.children:
            optional = isinstance(child, lark.Tree) and child.data == "opt_elem"
            value = self.visit(child.children[0] if optional else child)
            if isinstance(value, CELEvalError):
                return value
            if not optional:
                items.append(value)
            elif not isinstance(value, CELOptional):
                return no_overload("optional list element", value)
            elif value.has_value:
                items.append(value.value)
        return ct.ListType(items)

    def optional_mapinits(self, tree: Any) -> Value:
        """A map literal with ``?k: v`` entries: each is added only when the optional ``v`` has a value."""
        result = ct.MapType()
        children = tree.children
        for key_tree, value_tree in zip(children[0::2], children[1::2], strict=True):
            optional = isinstance(key_tree, lark.Tree) and key_tree.data == "opt_key"
            key = self.visit(key_tree.children[0] if optional else key_tree)
            value = self.visit(value_tree)
            if error := first_error(key, value):
                return error
            if optional:
                if not isinstance(value, CELOptional):
                    return no_overload("optional map entry", value)
                if not value.has_value:
                    continue
                value = value.value
            if key in result:
                return eval_error(f"Failed with repeated key: {key}")
            result[key] = value
        return result

    def macro_has_eval(self, exprlist: Any) -> Value:
        """has(e.f): presence of key f in map e (an optional e: false when empty)."""
        argument = exprlist.children[0] if exprlist.children else None
        if not isinstance(argument, lark.Tree) or argument.data != "member_dot":
            return eval_error("invalid argument to has() macro")
        target = self.visit(argument.children[0])
        if isinstance(target, CELOptional):
            if not target.has_value:
                return ct.BoolType(False)
            target = target.value
        if isinstance(target, CELEvalError):
            return target
        if not isinstance(target, ct.MapType):
            return no_overload("has", target)
        try:
            target[ct.StringType(str(argument.children[1]))]
        except KeyError:
            return ct.BoolType(False)
        return ct.BoolType(True)


def _optional_select(target: Value, key: Value) -> Value:
    """``target.?key`` / ``target[?key]`` on a map, also through an optional target."""
    if isinstance(target, CELOptional):
        if not target.has_value:
            return OPTIONAL_NONE
        target = target.value
    if isinstance(target, CELEvalError):
        return target
    if not isinstance(target, ct.MapType):
        return eval_error(f"no such key: {key}")
    if isinstance(key, str):
        try:  # __getitem__, so that an unknown device.attributes domain is present (and empty)
            return CELOptional(target[key])
        except KeyError:
            return OPTIONAL_NONE
    for candidate, value in target.items():
        if equal_is_true(candidate, key):
            return CELOptional(value)
    return OPTIONAL_NONE


def _optional_index(target: Value, index: Value) -> Value:
    if isinstance(target, CELOptional):
        if not target.has_value:
            return OPTIONAL_NONE
        target = target.value
    if error := first_error(target, index):
        return error
    if isinstance(target, list):
        if not is_number(index) or isinstance(index, ct.BoolType) or int(index) != index:
            return no_overload("_[?_]", target, index)
        position = int(index)
        return CELOptional(target[position]) if 0 <= position < len(target) else OPTIONAL_NONE
    return _optional_select(target, index)


class _DRARunner(celpy.InterpretedRunner):
    """One base activation per compiled selector; the evaluator clones it on every call."""

    def __init__(self, environment: Any, ast: Any, functions: Any, cost_limit: int) -> None:
        super().__init__(environment, ast, functions)
        self._base_activation = self.new_activation()
        self.cost_limit = cost_limit

    def evaluate(self, context: Activation) -> Value:
        evaluator = _DRAEvaluator(ast=self.ast, activation=self._base_activation)
        evaluator._budget = _CostBudget(self.cost_limit)
        return evaluator.evaluate(context)


# --- compile-time check: every function is declared in the DRA environment -------------------------

# celpy's standard functions that CEL declares (celpy also has ``reduce``, which CEL does not).
_STANDARD_FUNCTIONS = frozenset(
    {"bool", "bytes", "double", "duration", "int", "string", "timestamp", "type", "uint", "size"}
    | {"dyn", "has"}
)
_STANDARD_METHODS = frozenset(
    {"contains", "endsWith", "startsWith", "matches", "size"}
    | {
        f"get{part}"
        for part in (
            "Date",
            "DayOfMonth",
            "DayOfWeek",
            "DayOfYear",
            "FullYear",
            "Hours",
            "Milliseconds",
            "Minutes",
            "Month",
            "Seconds",
        )
    }
)
_VARIABLES = frozenset({"device"})
# Type identifiers CEL declares (``type(x) == int``).
_TYPE_NAMES = frozenset(
    {"bool", "bytes", "double", "int", "uint", "string", "list", "map", "null_type", "type", "dyn"}
)
# Namespaces of the functions of cel-go's and Kubernetes' libraries, declared here or not.
_LIBRARY_NAMESPACES = NAMESPACES | {"cel", "math", "base64", "strings", "lists", "sets", "format", "regex"}
_MACROS = frozenset(
    {"all", "exists", "exists_one", "existsOne", "map", "filter", "sortBy"}
    | _OPTIONAL_SHORT_CIRCUITS
    | _TRANSFORM_MACROS
)


def _undeclared(expression: str, token: Any, name: str) -> CELError:
    line, column = getattr(token, "line", 1) or 1, getattr(token, "column", 1) or 1
    return CELError(
        expression,
        f"compilation failed: ERROR: <input>:{line}:{column}: "
        f"undeclared reference to '{name}' (in container '')",
    )


def _constant(tree: Any, functions: Mapping[str, Any]) -> Value:
    """The value of a subexpression without variables, or UnknownFormatArgument."""
    if any(isinstance(node, lark.Tree) and node.data == "ident" for node in tree.iter_subtrees()):
        return UnknownFormatArgument()
    try:
        value = _DRARunner(_environment(), tree, functions, SELECTOR_MAX_COST).evaluate({})
    except Exception:  # an error is the run time's to report
        return UnknownFormatArgument()
    return UnknownFormatArgument() if isinstance(value, CELEvalError) else value


def _format_call_problem(node: Any, functions: Mapping[str, Any]) -> str | None:
    """cel-go checks ``"literal".format([...])`` when compiling: clauses, argument count and kinds."""
    target, args = node.children[0], node.children[2].children if len(node.children) == 3 else []
    while (
        isinstance(target, lark.Tree)
        and target.data in _PASS_THROUGH | {"primary"}
        and len(target.children) == 1
    ):
        target = target.children[0]
    argument = args[0] if len(args) == 1 else None
    while isinstance(argument, lark.Tree) and argument.data in _PASS_THROUGH | {"primary"}:
        argument = argument.children[0]
    if not (isinstance(target, lark.Tree) and target.data == "literal") or not (
        isinstance(argument, lark.Tree) and argument.data == "list_lit"
    ):
        return None
    text = _constant(target, functions)
    if not isinstance(text, ct.StringType):
        return None
    elements = argument.children[0].children if argument.children else []
    if any(isinstance(e, lark.Tree) and e.data == "opt_elem" for e in elements):
        return None
    return check_format_call(str(text), [_constant(element, functions) for element in elements])


_LITERAL_TYPES = {
    "INT_LIT": "int",
    "UINT_LIT": "uint",
    "FLOAT_LIT": "double",
    "STRING_LIT": "string",
    "MLSTRING_LIT": "string",
    "BYTES_LIT": "bytes",
    "NULL_LIT": "null_type",
}


def _constant_output_type(tree: Any) -> str | None:
    """The type of an expression that is a non-bool literal (cel-go's checker refuses it for a selector)."""
    while isinstance(tree, lark.Tree) and tree.data in ("primary", "paren_expr") and len(tree.children) == 1:
        tree = tree.children[0]
    if not isinstance(tree, lark.Tree):
        return None
    if tree.data == "literal":
        return _LITERAL_TYPES.get(getattr(tree.children[0], "type", ""))
    if tree.data == "list_lit":
        return "list(dyn)" if not tree.children else None
    if tree.data == "map_lit":
        return "map(dyn, dyn)" if not tree.children else None
    return None


def _bound_variables(method: str, namespace: str | None, args: list[Any]) -> int:
    """How many leading arguments of ``x.method(...)`` name variables the later arguments see."""
    if namespace == "cel":
        return 1 if method == "bind" else 0
    if namespace is not None:
        return 0
    if method in _TRANSFORM_MACROS or (method in _TWO_VARIABLE_MACROS and len(args) == 3):
        return 2
    if method in _MACROS and len(args) >= 2:
        return 1
    return 0


def _check_declarations(expression: str, tree: Any, functions: Mapping[str, Any]) -> None:
    """Refuse, naming it, a function or variable the DRA environment does not declare (cel-go's checker
    does): ``device`` and the variables of macros and ``cel.bind`` are the only variables."""
    stack: list[tuple[Any, tuple[str, ...], frozenset[str]]] = [(tree, (), _VARIABLES)]
    while stack:
        node, ancestors, scope = stack.pop()
        if not isinstance(node, lark.Tree):
            continue
        children: list[tuple[Any, frozenset[str]]] = [(child, scope) for child in node.children]
        if node.data == "ident":
            token = node.children[0]
            if str(token) not in scope and str(token) not in _TYPE_NAMES:
                raise _undeclared(expression, token, str(token))
        elif node.data == "ident_arg":
            token = node.children[0]
            name = str(token)
            if name not in _STANDARD_FUNCTIONS and (name not in functions or "." in name):
                raise _undeclared(expression, token, name)
        elif node.data == "member_dot_arg":
            method = node.children[1]
            receiver = _single_identifier(node.children[0])
            namespace = receiver if receiver in _LIBRARY_NAMESPACES and receiver not in scope else None
            args = node.children[2].children if len(node.children) == 3 else []
            if namespace is not None:
                qualified = f"{namespace}.{method}"
                if qualified not in functions and qualified != "cel.bind":
                    raise _undeclared(expression, method, qualified)
            elif method not in functions and method not in _STANDARD_METHODS and method not in _MACROS:
                raise _undeclared(expression, method, str(method))
            elif method == "format" and (problem := _format_call_problem(node, functions)):
                column = getattr(method, "column", 1)
                raise CELError(expression, f"compilation failed: ERROR: <input>:1:{column}: {problem}")
            bound = _bound_variables(str(method), namespace, args)
            names = frozenset(var for arg in args[:bound] if (var := _single_identifier(arg)) is not None)
            children = [] if namespace is not None else [(node.children[0], scope)]
            children += [(arg, scope) for arg in args[bound : bound + (namespace == "cel")]]
            children += [(arg, scope | names) for arg in args[bound + (namespace == "cel") :]]
        elif node.data == "opt_elem" and ancestors[-2:-1] != ("list_lit",):
            raise CELError(expression, "compilation failed: optional element '?' outside a list literal")
        child_ancestors = (*ancestors, str(node.data))
        stack.extend((child, child_ancestors, child_scope) for child, child_scope in children)


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
        if tree.data in _OPTIONAL_ENTRY_NODES and any(
            isinstance(child, lark.Tree) and child.data in ("opt_elem", "opt_key") for child in tree.children
        ):
            tree.data = _OPTIONAL_ENTRY_NODES[tree.data]
    return tree


# A list or map literal with optional entries gets its own node, evaluated by _DRAEvaluator.
_OPTIONAL_ENTRY_NODES = {"exprlist": "optional_exprlist", "mapinits": "optional_mapinits"}


@functools.cache
def _environment() -> celpy.Environment:
    """The environment, with its parser built at the first compile instead of at import (0.2-0.4 s)."""
    install_optional_syntax()
    return celpy.Environment(runner_class=_DRARunner)


class Selector:
    """A compiled selector expression. Evaluating it never raises anything but CELError."""

    __slots__ = ("_estimated_cost", "_runner", "expression", "fast")

    def __init__(
        self, expression: str, list_type_attributes: bool, cost_limit: int = SELECTOR_MAX_COST
    ) -> None:
        self.expression = expression
        self._estimated_cost: int | None = None
        try:
            ast = _environment().compile(expression)
        except Exception as exc:  # celpy.CELParseError and lark errors
            first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CELSyntaxError(expression, first_line, getattr(exc, "column", None)) from None
        functions = _LIST_TYPE_FUNCTIONS if list_type_attributes else _BASE_FUNCTIONS
        # Declarations as in the stored-expressions environment, which declares includes() whatever
        # the gate; without list types it fails at run time, where the allocator explains the gate.
        _check_declarations(expression, ast, _LIST_TYPE_FUNCTIONS)
        try:
            tree = _collapse(ast)
        except RecursionError:  # cel-go's parser stops at its own depth limit with this message
            raise CELError(expression, "compilation failed: max recursion depth exceeded") from None
        if (output := _constant_output_type(tree)) is not None:
            raise CELError(expression, f"must evaluate to bool or the unknown type, not {output}")
        self._runner = _DRARunner(_environment(), tree, functions, cost_limit)
        # Where cel-expr-python agrees with this evaluator (lockstep.dra.cel_fast), it decides first.
        self.fast = compile_fast(expression, tree, self.estimated_cost, cost_limit)

    def estimated_cost(self) -> int:
        """cel-go's worst-case cost estimate, which kube-apiserver compares to SELECTOR_MAX_COST."""
        if self._estimated_cost is None:
            try:
                self._estimated_cost = estimated_cost(self._runner.ast)
            except RecursionError:  # nested too deeply to estimate: too complex
                self._estimated_cost = sys.maxsize
        return self._estimated_cost

    def evaluate(self, activation: Activation) -> Value:
        """The expression's value (of any type); raises CELError."""
        try:
            result = self._runner.evaluate(activation)
        except CELEvalError as exc:
            raise CELError(self.expression, str(exc.args[0]) if exc.args else repr(exc)) from None
        except _CostLimitExceeded:
            raise CELError(
                self.expression,
                "operation cancelled: actual cost limit exceeded "
                f"(the DRA selector limit is {self._runner.cost_limit:,})",
            ) from None
        except Exception as exc:  # celpy internals raising on inputs they do not expect
            raise CELError(self.expression, f"evaluation failed: {type(exc).__name__}: {exc}") from None
        if isinstance(result, CELEvalError):
            raise CELError(self.expression, str(result.args[0]) if result.args else repr(result))
        return result

    def matches(self, activation: Activation) -> bool:
        result = self.evaluate(activation)
        if not isinstance(result, ct.BoolType):
            raise CELError(
                self.expression, f"CEL result of type {type_name(result)} could not be converted to bool"
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
