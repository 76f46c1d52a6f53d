"""The worst-case cost of a DRA selector, as cel-go's checker estimates it for kube-apiserver.

kube-apiserver refuses a selector whose estimate exceeds ``CELSelectorExpressionMaxCost`` (validation:
"too complex, exceeds cost limit"). The estimate walks the parsed expression with cel-go's cost model
(``checker/cost.go`` plus Kubernetes' ``library.CostEstimator``) and the sizes the DRA environment
declares for ``device``:

* a constant costs 0, an identifier or field selection 1, an index 1, a call 1 plus its arguments;
  ``&&``/``||`` the sum of both sides, ``c ? a : b`` the condition plus the dearer branch; a list
  literal 10 and a map literal 30 plus their entries;
* ``==``/``!=`` on strings ``ceil(0.1 * shorter maximum length)``; ``in`` on a list its size;
  ``includes`` 48; and Kubernetes' ``library.CostEstimator`` for the library functions:
  ``matches``/``find``/``findAll`` ``ceil(0.1 * (1 + string length)) * ceil(0.25 * regex length)``,
  ``lowerAscii``/``upperAscii``/``substring``/``trim`` ``ceil(0.1 * length)``, ``split``/``replace``
  ``ceil(0.2 * length)``, ``isSorted``/``sum``/``min``/``max``/``indexOf``/``lastIndexOf`` one per list
  element (plus the strings' traversal), parsing functions (``quantity``, ``ip``, ``cidr``, ``url``...)
  ``ceil(0.1 * length)``, ``containsIP`` 4, ``containsCIDR`` 7; ``sets.*`` the product of both sizes and
  the ext.Lists functions one plus the list size (estimates of this module, not upstream's);
* a comprehension its range, its accumulator's initial value (10 for a list, 30 for a map), per element
  its loop condition and step (``all``: 3 + body, ``exists``: 4 + body, ``exists_one``: 2 + body,
  ``filter``: 13 + body, ``map`` and ``transformList``: 12 + body, ``transformMap``: 3 + body,
  ``transformMapEntry``: 2 + body; a filter adds itself), and its result; ``cel.bind`` 10 plus its
  two expressions;
* sizes: 32 domains and 32 attributes or capacities per domain, domains up to 63 characters, names up
  to 32, the driver name up to 63, attribute values up to 64 characters or list elements; a
  value of unknown size (a function's result) counts as 64.

These reproduce the costs of upstream's compile_test.go table (4 for one attribute lookup, 164 for
``device.attributes.exists_one(...)``, 85,555,551 for its seven nested ``all`` loops); functions
whose upstream cost depends on more than their sizes are estimated by the rules above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import lark


@dataclass(frozen=True)
class Shape:
    """What the estimator knows of a value: its maximum size, element/key shapes, fields."""

    size: int | None = None
    text: bool = False  # a string or bytes: equality and concatenation cost by length
    elem: Shape | None = None
    key: Shape | None = None
    fields: dict[str, Shape] = field(default_factory=dict)


UNKNOWN = Shape()
UNKNOWN_SIZE = 64
_ATTRIBUTE = Shape(64, text=True, elem=Shape(64, text=True))
_ID = Shape(32, text=True)
_DOMAIN = Shape(63, text=True)
_DEVICE = Shape(
    fields={
        "driver": Shape(63, text=True),
        "allowMultipleAllocations": Shape(1),
        "attributes": Shape(32, key=_DOMAIN, elem=Shape(32, key=_ID, elem=_ATTRIBUTE)),
        "capacity": Shape(32, key=_DOMAIN, elem=Shape(32, key=_ID, elem=UNKNOWN)),
    }
)

_REGEX_FUNCTIONS = frozenset({"matches", "find", "findAll"})
_LIST_FUNCTIONS = frozenset(
    {"isSorted", "sum", "min", "max", "slice", "flatten", "distinct", "reverse", "sort", "first", "last"}
)
# Functions parsing their string argument: the cost of one traversal.
_TWO_VARIABLE_MACROS = frozenset({"all", "exists", "existsOne", "exists_one"})
_PARSING_FUNCTIONS = frozenset({"quantity", "isQuantity", "url", "isURL", "ip", "isIP", "cidr", "isCIDR"})
# macro -> (cost of its accumulator's initial value, cost of one step beside the body)
_COMPREHENSIONS = {
    "all": (0, 3),
    "exists": (0, 4),
    "exists_one": (0, 2),
    "existsOne": (0, 2),
    "filter": (10, 13),
    "map": (10, 12),
    "sortBy": (10, 12),
    "transformList": (10, 12),
    "transformMap": (30, 3),
    "transformMapEntry": (30, 2),
}
_TWO_VARIABLES_ALWAYS = frozenset({"transformList", "transformMap", "transformMapEntry"})


def _size(shape: Shape) -> int:
    return UNKNOWN_SIZE if shape.size is None else shape.size


def _tenth(n: int) -> int:
    return math.ceil(0.1 * n)


class _Estimator:
    def __init__(self) -> None:
        self.scopes: list[dict[str, Shape]] = [{"device": _DEVICE}]

    def lookup(self, name: str) -> Shape | None:
        """The shape of a variable in scope; None when ``name`` is not one (a function namespace)."""
        for scope in reversed(self.scopes):
            if name in scope:
                return scope[name]
        return None

    def estimate(self, node: Any) -> tuple[int, Shape]:
        if not isinstance(node, lark.Tree):
            return 0, UNKNOWN
        method = getattr(self, f"n_{node.data}", None)
        if method is not None:
            result: tuple[int, Shape] = method(node)
            return result
        cost = 0
        for child in node.children:
            cost += self.estimate(child)[0]
        return cost, UNKNOWN

    # --- leaves and containers
    def n_primary(self, node: Any) -> tuple[int, Shape]:
        return self.estimate(node.children[0])

    def n_paren_expr(self, node: Any) -> tuple[int, Shape]:
        return self.estimate(node.children[0])

    def n_literal(self, node: Any) -> tuple[int, Shape]:
        token = node.children[0]
        if token.type in ("STRING_LIT", "MLSTRING_LIT", "BYTES_LIT"):
            return 0, Shape(len(_string_literal(str(token))), text=True)
        return 0, Shape(1)

    def n_ident(self, node: Any) -> tuple[int, Shape]:
        return 1, self.lookup(str(node.children[0])) or UNKNOWN

    def n_list_lit(self, node: Any) -> tuple[int, Shape]:
        items = node.children[0].children if node.children else []
        cost, elem = 10, UNKNOWN
        for item in items:
            item_cost, item_shape = self.estimate(item)
            cost, elem = cost + item_cost, item_shape
        return cost, Shape(len(items), elem=elem)

    def n_map_lit(self, node: Any) -> tuple[int, Shape]:
        entries = node.children[0].children if node.children else []
        return 30 + sum(self.estimate(e)[0] for e in entries), Shape(
            len(entries) // 2, key=UNKNOWN, elem=UNKNOWN
        )

    def n_opt_elem(self, node: Any) -> tuple[int, Shape]:
        return self.estimate(node.children[0])

    n_opt_key = n_opt_elem

    # --- selection and indexing
    def n_member_dot(self, node: Any) -> tuple[int, Shape]:
        cost, shape = self.estimate(node.children[0])
        name = str(node.children[1])
        return cost + 1, shape.fields.get(name) or shape.elem or UNKNOWN

    n_member_dot_opt = n_member_dot

    def n_member_index(self, node: Any) -> tuple[int, Shape]:
        cost, shape = self.estimate(node.children[0])
        return cost + self.estimate(node.children[1])[0] + 1, shape.elem or UNKNOWN

    n_member_index_opt = n_member_index

    # --- operators
    def n_expr(self, node: Any) -> tuple[int, Shape]:
        condition, then, otherwise = (self.estimate(child) for child in node.children)
        return condition[0] + max(then[0], otherwise[0]), then[1]

    def n_conditionalor(self, node: Any) -> tuple[int, Shape]:
        return sum(self.estimate(child)[0] for child in node.children), Shape(1)

    n_conditionaland = n_conditionalor

    def n_unary(self, node: Any) -> tuple[int, Shape]:
        cost, shape = self.estimate(node.children[-1])
        return cost + 1, shape

    def n_relation(self, node: Any) -> tuple[int, Shape]:
        operator = node.children[0]
        left_cost, left = self.estimate(operator.children[0])
        right_cost, right = self.estimate(node.children[1])
        cost = left_cost + right_cost
        if operator.data in ("relation_eq", "relation_ne") and (_is_text(left) or _is_text(right)):
            return cost + _tenth(min(_size(left), _size(right))), Shape(1)
        if operator.data == "relation_in" and right.key is None and right.elem is not None:
            return cost + _size(right), Shape(1)
        return cost + 1, Shape(1)

    def n_addition(self, node: Any) -> tuple[int, Shape]:
        operator = node.children[0]
        left_cost, left = self.estimate(operator.children[0])
        right_cost, right = self.estimate(node.children[1])
        size = None if left.size is None or right.size is None else left.size + right.size
        extra = _tenth(size or UNKNOWN_SIZE) if _is_text(left) or _is_text(right) else 1
        return left_cost + right_cost + extra, Shape(
            size, text=_is_text(left) or _is_text(right), elem=left.elem
        )

    def n_multiplication(self, node: Any) -> tuple[int, Shape]:
        operator = node.children[0]
        return self.estimate(operator.children[0])[0] + self.estimate(node.children[1])[0] + 1, Shape(1)

    # --- calls
    def n_ident_arg(self, node: Any) -> tuple[int, Shape]:
        name = str(node.children[0])
        args = node.children[1].children if len(node.children) > 1 else []
        if name == "has":
            return self.estimate(args[0].children[0])[0] if args else 0, Shape(1)
        estimates = [self.estimate(arg) for arg in args]
        cost = sum(c for c, _ in estimates)
        if name == "dyn" and estimates:
            return cost, estimates[0][1]
        if name in _PARSING_FUNCTIONS and estimates:
            return cost + _factor(_size(estimates[0][1]), 0.1), UNKNOWN
        return cost + 1, UNKNOWN

    def n_member_dot_arg(self, node: Any) -> tuple[int, Shape]:
        target_tree, method = node.children[0], str(node.children[1])
        args = node.children[2].children if len(node.children) > 2 else []
        receiver = _identifier(target_tree)
        namespace = receiver if receiver is not None and self.lookup(receiver) is None else None
        if namespace == "cel" and method == "bind" and len(args) == 3:
            init_cost, init = self.estimate(args[1])
            body_cost = self.scoped({_identifier(args[0]) or "": init}, args[2])[0]
            return 10 + init_cost + body_cost, UNKNOWN
        if method in _COMPREHENSIONS and len(args) >= 2 and namespace is None:
            return self.comprehension(method, target_tree, args)
        if method in ("optMap", "optFlatMap") and len(args) == 2:
            target_cost, _ = self.estimate(target_tree)
            return target_cost + self.scoped({_identifier(args[0]) or "": UNKNOWN}, args[1])[0] + 1, UNKNOWN
        if namespace is not None:
            estimates = [self.estimate(arg) for arg in args]
            cost = sum(c for c, _ in estimates)
            if namespace == "sets" and len(estimates) == 2:
                return cost + _size(estimates[0][1]) * _size(estimates[1][1]), Shape(1)
            if namespace == "ip" and method == "isCanonical" and estimates:
                return cost + _factor(_size(estimates[0][1]), 0.2), Shape(1)
            return cost + 1, UNKNOWN
        target_cost, target = self.estimate(target_tree)
        estimates = [self.estimate(arg) for arg in args]
        arg = estimates[0][1] if estimates else UNKNOWN
        call_cost, shape = _member_call(method, target, arg, args)
        return target_cost + sum(c for c, _ in estimates) + call_cost, shape

    def comprehension(self, macro: str, target_tree: Any, args: list[Any]) -> tuple[int, Shape]:
        """range + initial accumulator + per element (loop condition + step) + result, as cel-go's
        macros expand; a filter costs itself plus the dearer of the step and keeping the accumulator."""
        range_cost, iterated = self.estimate(target_tree)
        two_variables = macro in _TWO_VARIABLES_ALWAYS or (macro in _TWO_VARIABLE_MACROS and len(args) == 3)
        names = [_identifier(arg) or "" for arg in args[: 2 if two_variables else 1]]
        if iterated.key is not None:  # a map: the variable is the key (two variables: key, value)
            variables = dict(zip(names, (iterated.key, iterated.elem or UNKNOWN), strict=False))
        else:  # a list: one variable is the element; two are the index and the element
            shapes = (iterated.elem or UNKNOWN,) if len(names) == 1 else (Shape(1), iterated.elem or UNKNOWN)
            variables = dict(zip(names, shapes, strict=False))
        bodies = [self.scoped(variables, arg)[0] for arg in args[len(names) :]]
        initial, step = _COMPREHENSIONS[macro]
        per_element = step + bodies[-1]
        if len(bodies) == 2:  # map(x, filter, transform), transform*(k, v, filter, transform)
            per_element = bodies[0] + max(per_element, 1)
        result = 2 if macro in ("exists_one", "existsOne") else 1
        return range_cost + initial + _size(iterated) * per_element + result, iterated

    def scoped(self, variables: dict[str, Shape], tree: Any) -> tuple[int, Shape]:
        self.scopes.append(variables)
        try:
            return self.estimate(tree)
        finally:
            self.scopes.pop()


def _factor(size: int, factor: float) -> int:
    return math.ceil(size * factor)


def _member_call(method: str, target: Shape, arg: Shape, args: list[Any]) -> tuple[int, Shape]:
    """The cost of ``target.method(arg, ...)`` itself (Kubernetes' library.CostEstimator), and its result."""
    size = _size(target)
    if method == "includes":
        return 48, Shape(1)
    if method in _REGEX_FUNCTIONS:
        cost = _factor(1 + size, 0.1) * _factor(_size(arg), 0.25)
        if method == "matches":
            return cost, Shape(1)
        found = Shape(size, text=True)
        return cost, found if method == "find" else Shape(size, elem=found)
    if method in ("lowerAscii", "upperAscii", "substring", "trim"):
        return _factor(size, 0.1), Shape(size, text=True)
    if method in ("replace", "split"):
        part = Shape(size, text=True)
        return _factor(size, 0.2), Shape(size, elem=part) if method == "split" else part
    if method == "join":
        return _factor(size * _size(target.elem or UNKNOWN), 0.1), UNKNOWN
    if method in ("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf"):
        if target.elem is None:  # indexOf / lastIndexOf on a string
            return _factor(size, 0.1), Shape(1)
        element = target.elem
        per_element = 1 + (_factor(_size(element), 0.1) if _is_text(element) else 0)
        return size * per_element, UNKNOWN
    if method in ("startsWith", "endsWith"):
        return _factor(_size(arg), 0.1), Shape(1)
    if method == "contains":
        return _factor(size * _size(arg), 0.1), Shape(1)
    if method == "ip" and not args:
        return 1, UNKNOWN
    if method == "containsIP":
        return 4 + (_factor(_size(arg), 0.1) if _is_text(arg) else 0), Shape(1)
    if method == "containsCIDR":
        return 7 + (_factor(_size(arg), 0.1) if _is_text(arg) else 0), Shape(1)
    if method in _LIST_FUNCTIONS:
        return 1 + size, target
    return 1, UNKNOWN


def _identifier(tree: Any) -> str | None:
    while isinstance(tree, lark.Tree) and tree.data == "primary":
        tree = tree.children[0]
    if isinstance(tree, lark.Tree) and tree.data == "ident":
        return str(tree.children[0])
    return None


def _is_text(shape: Shape) -> bool:
    return shape.text


def _string_literal(token: str) -> str:
    body = token.lstrip("rRbB")
    quote = 3 if body[:3] in ('"""', "'''") else 1
    return body[quote:-quote]


def estimated_cost(tree: Any) -> int:
    """cel-go's worst-case estimate for a parsed (and collapsed) DRA selector."""
    return _Estimator().estimate(tree)[0]
