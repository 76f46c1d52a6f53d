"""Just enough of Kubernetes' protobuf encoding to accept what kubectl's typed clients send.

``kubectl create namespace`` posts a Namespace as ``application/vnd.kubernetes.protobuf`` (the
``k8s\\x00`` magic, a ``runtime.Unknown`` envelope, then the message). Only the kinds listed in
``DECODERS`` are understood; anything else is answered 415.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

JsonObject = dict[str, Any]
MAGIC = b"k8s\x00"


class ProtobufError(ValueError):
    """The body is not a protobuf message this emulator can decode."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise ProtobufError("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) pairs: ints for varints, bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
            yield number, value
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield number, data[pos : pos + length]
            pos += length
        elif wire == 1:
            pos += 8
        elif wire == 5:
            pos += 4
        else:
            raise ProtobufError(f"unsupported wire type {wire}")


def _text(value: int | bytes) -> str:
    if not isinstance(value, bytes):
        raise ProtobufError("expected a string field")
    return value.decode()


def _string_map(entries: list[bytes]) -> dict[str, str]:
    out: dict[str, str] = {}
    for entry in entries:
        parts = dict(fields(entry))
        out[_text(parts.get(1, b""))] = _text(parts.get(2, b""))
    return out


def object_meta(data: bytes) -> JsonObject:
    meta: JsonObject = {}
    labels: list[bytes] = []
    annotations: list[bytes] = []
    finalizers: list[str] = []
    for number, value in fields(data):
        if number == 1:
            meta["name"] = _text(value)
        elif number == 2:
            meta["generateName"] = _text(value)
        elif number == 3:
            meta["namespace"] = _text(value)
        elif number == 6:
            meta["resourceVersion"] = _text(value)
        elif number == 11 and isinstance(value, bytes):
            labels.append(value)
        elif number == 12 and isinstance(value, bytes):
            annotations.append(value)
        elif number == 14:
            finalizers.append(_text(value))
    if labels:
        meta["labels"] = _string_map(labels)
    if annotations:
        meta["annotations"] = _string_map(annotations)
    if finalizers:
        meta["finalizers"] = finalizers
    return {k: v for k, v in meta.items() if v != ""}


def _namespace(data: bytes) -> JsonObject:
    obj: JsonObject = {"apiVersion": "v1", "kind": "Namespace", "metadata": {}}
    for number, value in fields(data):
        if number == 1 and isinstance(value, bytes):
            obj["metadata"] = object_meta(value)
        elif number == 2 and isinstance(value, bytes):
            finalizers = [_text(v) for n, v in fields(value) if n == 1]
            if finalizers:
                obj["spec"] = {"finalizers": finalizers}
    return obj


DECODERS: dict[tuple[str, str], Callable[[bytes], JsonObject]] = {("v1", "Namespace"): _namespace}


def decode(body: bytes) -> JsonObject:
    """Decode a ``runtime.Unknown``-wrapped object of a supported kind."""
    if not body.startswith(MAGIC):
        raise ProtobufError("missing the k8s protobuf magic prefix")
    api_version = kind = ""
    raw = b""
    for number, value in fields(body[len(MAGIC) :]):
        if number == 1 and isinstance(value, bytes):
            type_meta = dict(fields(value))
            api_version, kind = _text(type_meta.get(1, b"")), _text(type_meta.get(2, b""))
        elif number == 2 and isinstance(value, bytes):
            raw = value
    decoder = DECODERS.get((api_version, kind))
    if decoder is None:
        raise ProtobufError(f"no protobuf decoder for {api_version}/{kind}")
    return decoder(raw)
