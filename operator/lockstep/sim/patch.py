"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch."""

from __future__ import annotations

import copy
from typing import Any

JsonObject = dict[str, Any]

# Strategic-merge metadata of a list field: "key1,key2" (merge by these keys), "$set" (primitive
# list merged as a set) or absent (the list is replaced, like upstream lists without a merge key).
ListStrategies = dict[tuple[str, ...], str]

METADATA_LISTS: ListStrategies = {
    ("metadata", "finalizers"): "$set",
    ("metadata", "ownerReferences"): "uid",
}


class JsonPatchError(Exception):
    """A JSON patch operation could not be applied (answered as the generic 422)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, everything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for tok in tokens[:-1]:
        node = _child(node, tok)
    return node


def _child(node: Any, tok: str) -> Any:
    if isinstance(node, dict):
        if tok not in node:
            raise JsonPatchError(f"missing key {tok}")
        return node[tok]
    if isinstance(node, list):
        index = _index(node, tok, allow_end=False)
        return node[index]
    raise JsonPatchError(f"cannot descend into {type(node).__name__}")


def _index(node: list[Any], tok: str, allow_end: bool) -> int:
    if tok == "-" and allow_end:
        return len(node)
    if not tok.isdigit():
        raise JsonPatchError(f"invalid array index {tok}")
    index = int(tok)
    if index > len(node) or (index == len(node) and not allow_end):
        raise JsonPatchError(f"array index {index} out of bounds")
    return index


def _get(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for tok in tokens:
        node = _child(node, tok)
    return node


def _remove(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        raise JsonPatchError("cannot remove the whole document")
    parent = _parent(doc, tokens)
    tok = tokens[-1]
    if isinstance(parent, dict):
        if tok not in parent:
            raise JsonPatchError(f"missing key {tok}")
        return parent.pop(tok)
    if isinstance(parent, list):
        return parent.pop(_index(parent, tok, allow_end=False))
    raise JsonPatchError("cannot remove from a scalar")


def _add(doc: Any, tokens: list[str], value: Any, replace: bool) -> Any:
    if not tokens:
        return value
    parent = _parent(doc, tokens)
    tok = tokens[-1]
    if isinstance(parent, dict):
        if replace and tok not in parent:
            raise JsonPatchError(f"missing key {tok}")
        parent[tok] = value
    elif isinstance(parent, list):
        if replace:
            parent[_index(parent, tok, allow_end=False)] = value
        else:
            parent.insert(_index(parent, tok, allow_end=True), value)
    else:
        raise JsonPatchError("cannot add to a scalar")
    return doc


def json_patch(doc: Any, operations: Any) -> Any:
    """Apply RFC 6902 operations to a deep copy of ``doc``; raises JsonPatchError on any failure."""
    if not isinstance(operations, list):
        raise JsonPatchError("a JSON patch must be a list of operations")
    result = copy.deepcopy(doc)
    for op in operations:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise JsonPatchError("operation without op or path")
        kind = op["op"]
        tokens = _pointer(op["path"])
        if kind == "add":
            result = _add(result, tokens, copy.deepcopy(op.get("value")), replace=False)
        elif kind == "remove":
            _remove(result, tokens)
        elif kind == "replace":
            result = _add(result, tokens, copy.deepcopy(op.get("value")), replace=True)
        elif kind == "move":
            value = _remove(result, _pointer(op["from"]))
            result = _add(result, tokens, value, replace=False)
        elif kind == "copy":
            value = copy.deepcopy(_get(result, _pointer(op["from"])))
            result = _add(result, tokens, value, replace=False)
        elif kind == "test":
            if _get(result, tokens) != op.get("value"):
                raise JsonPatchError(f"test failed at {op['path']}")
        else:
            raise JsonPatchError(f"unknown operation {kind}")
    return result


def _go_map(value: JsonObject) -> str:
    parts = []
    for key in sorted(value):
        inner = value[key]
        rendered = _go_map(inner) if isinstance(inner, dict) else str(inner)
        parts.append(f"{key}:{rendered}")
    return "map[" + " ".join(parts) + "]"


class MergeKeyError(Exception):
    """An entry of a patch's merge-keyed list that is not an object or lacks its merge key.

    ``message`` is kube-apiserver's text, ``path``, ``index`` and ``key`` locate the entry."""

    def __init__(self, path: tuple[str, ...], index: int, key: str, item: Any) -> None:
        self.path, self.index, self.key, self.item = path, index, key, item
        if isinstance(item, dict):
            message = f"map: {_go_map(item)} does not contain declared merge key: {key}"
        else:
            message = f"expected a map in a list with merge key {key}, got {item!r}"
        super().__init__(message)
        self.message = message


def _merge_key(item: Any, keys: list[str], path: tuple[str, ...] = (), index: int = 0) -> tuple[Any, ...]:
    if not isinstance(item, dict):
        raise MergeKeyError(path, index, keys[0], item)
    for key in keys:
        if key not in item:
            raise MergeKeyError(path, index, key, item)
    return tuple(orjson_key(item[k]) for k in keys)


def orjson_key(value: Any) -> Any:
    return value if not isinstance(value, dict | list) else repr(value)


def _normalize_order(
    patch_items: list[Any], server_only: list[Any], server_order: list[Any], key_of: Any
) -> list[Any]:
    """Upstream ``mergeSortedSlice``: patch items keep their order and go before server-only items
    unless both appear in the live list in the other order."""
    positions = {key_of(item): i for i, item in enumerate(server_order)}
    result: list[Any] = []
    i = j = 0
    while i < len(server_only) or j < len(patch_items):
        if i >= len(server_only):
            result.append(patch_items[j])
            j += 1
        elif j >= len(patch_items):
            result.append(server_only[i])
            i += 1
        else:
            left = positions.get(key_of(server_only[i]))
            right = positions.get(key_of(patch_items[j]))
            if left is not None and right is not None and left < right:
                result.append(server_only[i])
                i += 1
            else:
                result.append(patch_items[j])
                j += 1
    return result


def _merge_keyed_list(
    original: list[Any], patch: list[Any], keys: list[str], path: tuple[str, ...], lists: ListStrategies
) -> list[Any]:
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch):
        return [p for p in patch if not (isinstance(p, dict) and "$patch" in p)]

    def key_of(item: Any) -> tuple[Any, ...]:
        return _merge_key(item, keys)

    merged: dict[tuple[Any, ...], Any] = {}
    order: list[tuple[Any, ...]] = []
    for item in original:
        k = key_of(item)
        merged[k] = item
        order.append(k)
    patch_keys: list[tuple[Any, ...]] = []
    for index, item in enumerate(patch):
        k = _merge_key(item, keys, path, index)
        if isinstance(item, dict) and item.get("$patch") == "delete":
            if k in merged:
                del merged[k]
                order.remove(k)
            continue
        if k in merged:
            merged[k] = strategic_merge(merged[k], item, path, lists)
        else:
            merged[k] = strategic_merge({}, item, path, lists)
            order.append(k)
        patch_keys.append(k)
    patch_items = [merged[k] for k in patch_keys if k in merged]
    server_only = [merged[k] for k in order if k not in set(patch_keys)]
    return _normalize_order(patch_items, server_only, original, key_of)


def _merge_set(original: list[Any], patch: list[Any]) -> list[Any]:
    merged = list(original)
    for item in patch:
        if item not in merged:
            merged.append(item)
    patch_items = [m for m in merged if m in patch]
    server_only = [m for m in merged if m not in patch]
    return _normalize_order(patch_items, server_only, original, orjson_key)


def strategic_merge(original: Any, patch: Any, path: tuple[str, ...], lists: ListStrategies) -> Any:
    """Strategic merge patch of ``patch`` into ``original`` (a new value; the inputs are not changed)."""
    if not isinstance(patch, dict) or not isinstance(original, dict):
        return _strip_directives(copy.deepcopy(patch))
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip_directives({k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return {}
    result = dict(original)
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    orders: dict[str, list[Any]] = {}
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            if isinstance(value, list):
                orders[key.split("/", 1)[1]] = value
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [v for v in result[field] if v not in value]
            continue
        if key.startswith("$"):
            continue
        child_path = (*path, key)
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        strategy = lists.get(child_path)
        if isinstance(value, list) and isinstance(current, list) and strategy:
            if strategy == "$set":
                result[key] = _merge_set(current, value)
            else:
                result[key] = _merge_keyed_list(current, value, strategy.split(","), child_path, lists)
        elif isinstance(value, list) and strategy and strategy != "$set":
            result[key] = _merge_keyed_list([], value, strategy.split(","), child_path, lists)
        elif isinstance(value, dict) and isinstance(current, dict):
            merged = strategic_merge(current, value, child_path, lists)
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = merged
        else:
            result[key] = _strip_directives(copy.deepcopy(value))
    for field, wanted in orders.items():
        items = result.get(field)
        strategy = lists.get((*path, field))
        if isinstance(items, list) and strategy:
            result[field] = _apply_element_order(items, wanted, strategy)
    return result


def _apply_element_order(items: list[Any], wanted: list[Any], strategy: str) -> list[Any]:
    keys = None if strategy == "$set" else strategy.split(",")

    def key_of(item: Any) -> Any:
        if keys is None:
            return orjson_key(item)
        return tuple(orjson_key(item.get(k)) if isinstance(item, dict) else None for k in keys)

    rank = {key_of(w): i for i, w in enumerate(wanted)}
    return sorted(items, key=lambda item: rank.get(key_of(item), len(rank)))


def _strip_directives(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items() if not k.startswith("$")}
    if isinstance(value, list):
        return [
            _strip_directives(v) for v in value if not (isinstance(v, dict) and v.get("$patch") == "delete")
        ]
    return value
