"""kube-apiserver style errors: ``Status`` bodies, field errors and their aggregation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

JsonObject = dict[str, Any]


def go_value(value: Any) -> str:
    """Render a value the way apimachinery prints ``Invalid value: ...`` (strings quoted, JSON otherwise)."""
    if isinstance(value, str):
        return orjson.dumps(value).decode()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    return orjson.dumps(value).decode()


@dataclass(frozen=True, slots=True)
class FieldError:
    """One entry of a ``field.ErrorList``: the cause reason, the field path and the message body."""

    reason: str
    field: str
    detail: str

    def __str__(self) -> str:
        return f"{self.field}: {self.detail}"


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {go_value(value)}: {detail}")


def invalid_no_value(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, f"Invalid value: {detail}")


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueTypeInvalid", field, f"Invalid value: {go_value(value)}: {detail}")


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "Required value" + (f": {detail}" if detail else ""))


def forbidden(field: str, detail: str) -> FieldError:
    """``field.Forbidden``: an empty detail prints as a bare ``Forbidden``, as Go's ErrorBody does."""
    return FieldError("FieldValueForbidden", field, f"Forbidden: {detail}" if detail else "Forbidden")


def not_supported(field: str, value: Any, supported: list[Any]) -> FieldError:
    choices = ", ".join(go_value(s) for s in supported)
    return FieldError(
        "FieldValueNotSupported", field, f"Unsupported value: {go_value(value)}: supported values: {choices}"
    )


def value_not_found(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueNotFound", field, f"Not found: {go_value(value)}: {detail}")


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, f"Duplicate value: {go_value(value)}")


def too_many(field: str, actual: int, maximum: int) -> FieldError:
    return FieldError("FieldValueTooMany", field, f"Too many: {actual}: must have at most {maximum} items")


def too_long(field: str, maximum: int) -> FieldError:
    return FieldError("FieldValueTooLong", field, f"Too long: may not be more than {maximum} bytes")


def aggregate_message(errors: list[FieldError]) -> str:
    """``ErrorList.ToAggregate().Error()``: duplicates collapse, several errors are bracketed."""
    seen: list[str] = []
    for error in errors:
        text = str(error)
        if text not in seen:
            seen.append(text)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


class ApiError(Exception):
    """An error answered as a ``Status`` object (or as plain text when ``text`` is set)."""

    def __init__(
        self,
        code: int,
        reason: str | None,
        message: str,
        details: JsonObject | None = None,
        headers: dict[str, str] | None = None,
        text: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}
        self.text = text

    def status(self) -> JsonObject:
        body: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure"}
        body["message"] = self.message
        if self.reason:
            body["reason"] = self.reason
        if self.details is not None:
            body["details"] = self.details
        body["code"] = self.code
        return body


def _details(name: str | None, kind: str, group: str = "") -> JsonObject:
    details: JsonObject = {}
    if name is not None:
        details["name"] = name
    if group:
        details["group"] = group
    details["kind"] = kind
    return details


def qualified(resource_or_kind: str, group: str) -> str:
    return f"{resource_or_kind}.{group}" if group else resource_or_kind


def not_found(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        404, "NotFound", f'{qualified(plural, group)} "{name}" not found', _details(name, plural, group)
    )


def already_exists(plural: str, group: str, name: str) -> ApiError:
    return ApiError(
        409,
        "AlreadyExists",
        f'{qualified(plural, group)} "{name}" already exists',
        _details(name, plural, group),
    )


def conflict(plural: str, group: str, name: str, why: str, kind_for_details: str | None = None) -> ApiError:
    return ApiError(
        409,
        "Conflict",
        f'Operation cannot be fulfilled on {qualified(plural, group)} "{name}": {why}',
        _details(name, kind_for_details or plural, group),
    )


STALE_WRITE = "the object has been modified; please apply your changes to the latest version and try again"


def stale(plural: str, group: str, name: str) -> ApiError:
    return conflict(plural, group, name, STALE_WRITE)


def unprocessable(kind_or_plural: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    details = _details(name, kind_or_plural, group)
    details["causes"] = [{"reason": e.reason, "message": e.detail, "field": e.field} for e in errors]
    return ApiError(
        422,
        "Invalid",
        f'{qualified(kind_or_plural, group)} "{name}" is invalid: {aggregate_message(errors)}',
        details,
    )


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def expired(message: str) -> ApiError:
    return ApiError(410, "Expired", message)


def generic_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


def page_not_found() -> ApiError:
    return ApiError(404, None, "404 page not found", text="404 page not found\n")


def method_not_allowed() -> ApiError:
    return ApiError(
        405, "MethodNotAllowed", "the server does not allow this method on the requested resource", {}
    )
