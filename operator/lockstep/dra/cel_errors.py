"""What the allocator needs of CEL before it evaluates a selector: the errors and how a device's
attribute names are qualified. Kept apart from :mod:`lockstep.dra.cel` so that importing the allocator
does not load the CEL interpreter (cel-python, lark: 0.04 s of every start-up), which is imported when
the first selector is compiled or evaluated."""

from __future__ import annotations


class CELError(ValueError):
    """A selector could not be compiled or evaluated; the message quotes the expression."""

    def __init__(self, expression: str, problem: str) -> None:
        super().__init__(f"CEL expression {expression!r}: {problem}")
        self.expression = expression
        self.problem = problem


class CELSyntaxError(CELError):
    """The expression does not parse; ``column`` (1-based) is where the parser stopped, if known."""

    def __init__(self, expression: str, problem: str, column: int | None) -> None:
        super().__init__(expression, f"compilation failed: {problem}")
        self.detail = problem
        self.column = column


def qualify(name: str, driver: str) -> tuple[str, str]:
    """(domain, identifier) of an attribute or capacity name; unqualified names get the driver."""
    domain, slash, identifier = name.partition("/")
    return (domain, identifier) if slash else (driver, name)
