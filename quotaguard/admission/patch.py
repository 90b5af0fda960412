"""RFC 6902 JSON Patch operations built against the object as it arrived.

Keys are escaped per RFC 6901 (annotation and resource names contain `/`). Setting a key in a
map that does not exist yet adds the missing maps as one value at the first missing level, so
the patch applies to the original object and never to a half-built one.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from quotaguard.admission.decision import PatchOp

_MISSING = object()


@lru_cache(maxsize=4096)
def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _unescape(part: str) -> str:
    return part.replace("~1", "/").replace("~0", "~") if "~" in part else part


@lru_cache(maxsize=4096)
def _parts(pointer: str) -> tuple[str, ...]:
    """Unescaped reference tokens; pointers repeat across requests, so they are cached."""
    return tuple(_unescape(raw) for raw in pointer[1:].split("/")) if pointer else ()


def resolve(document: object, pointer: str) -> object:
    """The value at a JSON Pointer, or `_MISSING` (also for null and non-containers)."""
    node = document
    for part in _parts(pointer):
        if isinstance(node, dict):
            node = node.get(part, _MISSING)
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
        if node is None or node is _MISSING:
            return _MISSING
    return node


class PatchBuilder:
    """Collects removals and key settings; `ops()` emits them in an order that applies."""

    __slots__ = ("_created", "_document", "_removals", "_settings")

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document = document
        self._removals: list[str] = []
        self._settings: dict[tuple[str, str], Any] = {}
        self._created: dict[str, dict[str, Any]] = {}

    def remove(self, map_pointer: str, key: str) -> None:
        self._removals.append(f"{map_pointer}/{escape(key)}")

    def set(self, map_pointer: str, key: str, value: Any) -> None:
        """`map[key] = value` for the map at `map_pointer`, creating missing maps."""
        self._settings[(map_pointer, key)] = value

    def __bool__(self) -> bool:
        return bool(self._removals or self._settings)

    def ops(self) -> list[PatchOp]:
        ops: list[PatchOp] = [{"op": "remove", "path": path} for path in self._removals]
        created: dict[str, dict[str, Any]] = {}
        maps: dict[str, object] = {}
        for (map_pointer, key), value in self._settings.items():
            container = maps.get(map_pointer, _MISSING)
            if container is _MISSING:
                container = maps[map_pointer] = resolve(self._document, map_pointer)
            if isinstance(container, dict):
                path = f"{map_pointer}/{escape(key)}"
                current = container.get(key, _MISSING)
                if current is _MISSING:
                    ops.append({"op": "add", "path": path, "value": value})
                elif current != value:
                    ops.append({"op": "replace", "path": path, "value": value})
                continue
            root, below = self._first_missing(map_pointer)
            tree = created.setdefault(root, {})
            for part in below:
                tree = tree.setdefault(part, {})
            tree[key] = value
        ops.extend({"op": "add", "path": path, "value": tree} for path, tree in created.items())
        return ops

    def _first_missing(self, map_pointer: str) -> tuple[str, list[str]]:
        """The pointer of the first missing level of `map_pointer`, and the keys below it."""
        parts = map_pointer[1:].split("/")
        for depth in range(1, len(parts) + 1):
            pointer = "/" + "/".join(parts[:depth])
            if not isinstance(resolve(self._document, pointer), dict | list):
                return pointer, [_unescape(part) for part in parts[depth:]]
        raise AssertionError(f"{map_pointer} exists")  # pragma: no cover - guarded by caller
