"""Object metadata rules every kind shares: names, labels, annotations, timestamps, object shape."""

from __future__ import annotations

import random
import re
import time
from datetime import UTC, datetime
from typing import Any

from lockstep.sim import errors as fe
from lockstep.sim.errors import FieldError, bad_request
from lockstep.sim.resources import ResourceType, Strategy, WriteContext

JsonObject = dict[str, Any]

DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
MICRO_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation "
    "is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start "
    "and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is "
    "'[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


_last_stamp: tuple[int, str] = (0, "")


def now_rfc3339() -> str:
    """The current second as RFC 3339 (formatted once per second: it is on every write)."""
    global _last_stamp
    second = int(time.time())
    if _last_stamp[0] != second:
        _last_stamp = (second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
    return _last_stamp[1]


def random_suffix(length: int = 5) -> str:
    # the alphabet of apimachinery's rand.String: no vowels, no confusable digits
    return "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=length))


def dns1123_label_errors(field: str, value: str) -> list[FieldError]:
    """``ValidateDNS1123Label``: one error per rule broken (length, then format)."""
    errors = []
    if len(value) > 63:
        errors.append(fe.invalid(field, value, "must be no more than 63 characters"))
    if not DNS1123_LABEL.match(value):
        errors.append(fe.invalid(field, value, LABEL_MESSAGE))
    return errors


def dns1123_subdomain_errors(field: str, value: str) -> list[FieldError]:
    """``NameIsDNSSubdomain``: one error per rule broken (length, then format)."""
    errors = []
    if len(value) > 253:
        errors.append(fe.invalid(field, value, "must be no more than 253 characters"))
    if not DNS1123_SUBDOMAIN.match(value):
        errors.append(fe.invalid(field, value, SUBDOMAIN_MESSAGE))
    return errors


def validate_name(name: Any, label: bool = False) -> list[FieldError]:
    if not name:
        return [fe.required("metadata.name", "name or generateName is required")]
    pattern, message, limit = (
        (DNS1123_LABEL, LABEL_MESSAGE, 63) if label else (DNS1123_SUBDOMAIN, SUBDOMAIN_MESSAGE, 253)
    )
    if not isinstance(name, str) or len(name) > limit or not pattern.match(name):
        return [fe.invalid("metadata.name", name, message)]
    return []


LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE_MESSAGE = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must "
    "start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used "
    "for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)
NAME_PART_MESSAGE = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is "
    "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
PREFIX_MESSAGE = "prefix part " + SUBDOMAIN_MESSAGE


def qualified_name_errors(field: str, key: Any) -> list[FieldError]:
    if not isinstance(key, str) or not key:
        return [fe.invalid(field, key, NAME_PART_MESSAGE)]
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not DNS1123_SUBDOMAIN.match(prefix)):
        return [fe.invalid(field, key, PREFIX_MESSAGE)]
    if len(name) > 63:
        return [fe.invalid(field, key, "name part must be no more than 63 characters")]
    if not NAME_PART.match(name):
        return [fe.invalid(field, key, NAME_PART_MESSAGE)]
    return []


def validate_object_meta(meta: JsonObject, path: str = "metadata") -> list[FieldError]:
    """Label keys and values and annotation keys, as ``ValidateObjectMeta`` checks them for every kind
    (``path``: where the metadata is, for one embedded in a template)."""
    errors: list[FieldError] = []
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        return [fe.invalid(f"{path}.labels", labels, "must be a map of strings")]
    for key, value in labels.items():
        errors.extend(qualified_name_errors(f"{path}.labels", key))
        if not isinstance(value, str) or len(value) > 63 or not LABEL_VALUE.match(value):
            message = (
                LABEL_VALUE_MESSAGE
                if isinstance(value, str) and len(value) <= 63
                else "must be no more than 63 characters"
            )
            errors.append(fe.invalid(f"{path}.labels", value, message))
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict):
        return [*errors, fe.invalid(f"{path}.annotations", annotations, "must be a map of strings")]
    for key in annotations:
        errors.extend(
            qualified_name_errors(f"{path}.annotations", key.lower() if isinstance(key, str) else key)
        )
    return errors


def check_micro_time(rt: ResourceType, obj: JsonObject, path: tuple[str, ...]) -> None:
    """MicroTime fields need exactly six fractional digits, or the decoder answers 400."""
    value: Any = obj
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if value is None or (isinstance(value, str) and MICRO_TIME.match(value)):
        return
    text = str(value)
    rest = text[19:] if len(text) >= 19 else text
    raise bad_request(
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: parsing time "{text}" as '
        f'"2006-01-02T15:04:05.000000Z07:00": cannot parse "{rest}" as ".000000"'
    )


# ---------------------------------------------------------------- namespaces


class PlainStrategy(Strategy):
    """A kind with no defaulting or validation beyond names."""

    def validate(
        self, rt: ResourceType, obj: JsonObject, old: JsonObject | None, ctx: WriteContext
    ) -> list[FieldError]:
        return validate_name(obj["metadata"].get("name")) if old is None else []


# apiserver's names.SimpleNameGenerator: the base is cut so that base and suffix fit a 63-character name.
MAX_GENERATED_NAME_BASE = 63 - 5


def random_name(prefix: str) -> str:
    return prefix[:MAX_GENERATED_NAME_BASE] + random_suffix()


def ensure_object_shape(rt: ResourceType, obj: Any) -> JsonObject:
    if not isinstance(obj, dict):
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: expected an object'
        )
    meta = obj.get("metadata")
    if meta is None:
        obj["metadata"] = {}
    elif not isinstance(meta, dict):
        raise bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: '
            "metadata must be an object"
        )
    return obj
