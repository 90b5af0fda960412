"""Reading the YAML and JSON a user hands quotaguard, within bounds.

Every file quotaguard reads (policies, manifests, AdmissionReviews, traces, snapshots, policy
test suites) goes through here, so that no input can take unbounded time or memory or end in a
traceback. A document is refused, with `FILE:LINE:COLUMN: message`, when it is

- larger than the reader's byte limit;
- nested deeper than `max_depth` collections (the YAML composer recurses and libyaml's crashes
  the process on very deep input, so depth is checked on the event stream before composing);
- larger than `max_nodes` nodes once its aliases are expanded (an "alias bomb": a few hundred
  bytes of `&a [*a, *a, ...]` that would expand to gigabytes), or holds a recursive alias;
- holding an integer outside 64 bits (Kubernetes quantities and counts are 64-bit);
- holding a YAML-only type with no JSON equivalent (`!!binary`, `!!set`, `!!omap`, ...);
- holding a mapping with the same key twice (YAML and JSON libraries keep the last silently).

Unquoted dates stay strings, as Kubernetes reads them. The checks walk the parser's event stream
once (libyaml, ~10% of the cost of loading) and keep one counter per open collection; the same
pass builds the values of plain documents (no anchors, tags or merge keys), a fifth of the cost of
PyYAML's Python constructor, and anything else is read again by the safe loader.
"""

from __future__ import annotations

import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

MiB: Final = 1024 * 1024
INT64_LIMIT: Final = 2**63
_DECIMAL = re.compile(r"[-+]?[0-9][0-9_]*")
_BASED = re.compile(r"[-+]?0(?:b[01_]+|x[0-9a-fA-F_]+|o?[0-7_]+)")
_JSON_TAGS: Final = frozenset(
    f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "map", "seq")
) | {"!"}
_MERGE_KEY: Final = "<<"


@dataclass(frozen=True, slots=True)
class Limits:
    """What one kind of input may hold; `what` names it in messages."""

    what: str
    max_bytes: int
    max_depth: int = 100
    max_nodes: int = 1_000_000


POLICY: Final = Limits("policy", 4 * MiB, max_nodes=200_000)
MANIFEST: Final = Limits("manifest", 16 * MiB, max_nodes=2_000_000)
TRACE: Final = Limits("trace", 64 * MiB, max_nodes=4_000_000)
SNAPSHOT: Final = Limits("snapshot", 1024 * MiB, max_nodes=100_000_000)


class DocumentError(ValueError):
    """An input that cannot be read within its limits; `str()` is `FILE:LINE:COLUMN: message`."""

    def __init__(self, source: str, line: int, column: int, message: str) -> None:
        self.source, self.line, self.column, self.message = source, line, column, message
        super().__init__(f"{source}:{line}:{column}: {message}")


def read_error(exc: OSError | UnicodeDecodeError) -> str:
    """Why a file could not be read, in words and without Python's errno prefix: "no such
    file", "permission denied", "is a directory", "not UTF-8 text"."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text (byte {exc.start})"
    reason = exc.strerror or type(exc).__name__
    return {
        "No such file or directory": "no such file",
        "Permission denied": "permission denied",
        "Is a directory": "is a directory",
        "Not a directory": "a part of the path is not a directory",
    }.get(reason, reason.lower())


def read_text(path: str | Path, limits: Limits, source: str | None = None) -> str:
    """A file's UTF-8 text; `DocumentError` past the byte limit (without reading further).
    Raises `OSError` and `UnicodeDecodeError` as `open` and `decode` do."""
    with open(path, "rb") as file:
        data = file.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise _too_big(source or str(path), limits)
    return data.decode("utf-8")


STDIN = "-"  # the path that names standard input on the command line
STDIN_NAME = "<stdin>"


def source_name(path: str | Path) -> str:
    """How messages name an input: its path, or `<stdin>` for `-`."""
    return STDIN_NAME if str(path) == STDIN else str(path)


def read_input(path: str | Path, limits: Limits) -> str:
    """`read_text`, or standard input (read up to the same limit) when the path is `-`."""
    if str(path) != STDIN:
        return read_text(path, limits)
    data = read_stdin(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise _too_big(STDIN_NAME, limits)
    return data.decode("utf-8")


def read_stdin(at_most: int) -> bytes:
    """Up to `at_most` bytes of standard input."""
    stream = getattr(sys.stdin, "buffer", None)
    if stream is None:  # a text stream without bytes underneath (tests, embedding)
        return sys.stdin.read(at_most).encode("utf-8")
    return bytes(stream.read(at_most))


def _too_big(source: str, limits: Limits) -> DocumentError:
    max_bytes = limits.max_bytes
    size = f"{max_bytes / MiB:g} MiB" if max_bytes % MiB == 0 else f"{max_bytes:,} bytes"
    return DocumentError(
        source, 1, 1, f"larger than {size}, the most quotaguard reads for a {limits.what}"
    )


# -- YAML ----------------------------------------------------------------------------------------
_BaseLoader: type[Any] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BaseLoader):  # type: ignore[misc]
    """The safe loader without the implicit YAML-only types: an unquoted date stays a string."""


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, pattern)
        for tag, pattern in resolvers
        if tag not in ("tag:yaml.org,2002:timestamp", "tag:yaml.org,2002:value")
    ]
    for first, resolvers in _BaseLoader.yaml_implicit_resolvers.items()
}


@dataclass(slots=True)
class _Open:
    """A collection whose end event has not come yet."""

    anchor: str | None
    mapping: bool
    size: int = 1
    expect_key: bool = True
    keys: dict[str, int] | None = None


def check_yaml(text: str, source: str, limits: Limits) -> None:
    """Raise `DocumentError` for the first bound `text` breaks; YAML syntax errors are left to
    the loader, which reports them with their own position."""
    if len(text) > limits.max_bytes:
        raise _too_big(source, limits)
    try:
        _walk(text, source, limits, _BaseLoader)
    except yaml.YAMLError as exc:
        if "maximum nesting depth" not in str(exc):
            return
        # libyaml >= 0.2.5 refuses past 1,000 flow levels before emitting a single event (its
        # scanner reads ahead): walk with the pure-Python parser, which gets to our own, lower
        # limit after a few events and so says where.
        try:
            _walk(text, source, limits, yaml.SafeLoader)
        except yaml.YAMLError:
            return


def _walk(text: str, source: str, limits: Limits, loader: type[Any]) -> None:
    walk = _Walk(source, limits)
    for event in yaml.parse(text, Loader=loader):
        walk.step(event)


@dataclass(slots=True)
class _Walk:
    """The checks' state along one event stream: open collections, anchored sizes, the count
    of nodes of the current document with aliases expanded."""

    source: str
    limits: Limits
    stack: list[_Open] = field(default_factory=list)
    sizes: dict[str, int] = field(default_factory=dict)
    total: int = 0

    def step(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.DocumentStartEvent):
            self.sizes, self.total = {}, 0
            return
        if isinstance(event, yaml.AliasEvent):
            self._alias(event)
        elif isinstance(event, yaml.ScalarEvent):
            self._scalar(event)
        elif isinstance(event, yaml.CollectionStartEvent):
            self._start(event)
        elif isinstance(event, yaml.CollectionEndEvent):
            done = self.stack.pop()
            if done.anchor:
                self.sizes[done.anchor] = done.size
            _add(self.stack, done.size, None, self.source, event)
        if self.total > self.limits.max_nodes:
            raise _at(self.source, event, _bomb(self.limits))

    def _alias(self, event: yaml.AliasEvent) -> None:
        size = self.sizes.get(event.anchor or "")
        if size is None:
            if any(frame.anchor == event.anchor for frame in self.stack):
                raise _at(self.source, event, "recursive alias: a collection holding itself")
            return  # an undefined alias: the loader says so
        self.total += size
        if self.total > self.limits.max_nodes:
            raise _at(self.source, event, _bomb(self.limits))
        _add(self.stack, size, None, self.source, event)

    def _scalar(self, event: yaml.ScalarEvent) -> None:
        _check_tag(event, self.source)
        if event.implicit[0] and not event.style:
            _check_int(event.value, self.source, event)
        self.total += 1
        _add(self.stack, 1, event.value, self.source, event)
        if event.anchor:
            self.sizes[event.anchor] = 1

    def _start(self, event: yaml.CollectionStartEvent) -> None:
        _check_tag(event, self.source)
        self.total += 1
        if len(self.stack) >= self.limits.max_depth:
            raise _at(self.source, event, _deep(self.limits))
        mapping = isinstance(event, yaml.MappingStartEvent)
        self.stack.append(_Open(event.anchor, mapping, keys={} if mapping else None))


def _deep(limits: Limits) -> str:
    return f"nested deeper than {limits.max_depth} levels"


def _bomb(limits: Limits) -> str:
    return (
        f"more than {limits.max_nodes:,} values once aliases are expanded, the most quotaguard "
        f"reads for a {limits.what}"
    )


def _add(stack: list[_Open], size: int, key: str | None, source: str, event: yaml.Event) -> None:
    if not stack:
        return
    parent = stack[-1]
    parent.size += size
    if not parent.mapping:
        return
    if parent.expect_key and parent.keys is not None and key is not None and key != _MERGE_KEY:
        first = parent.keys.get(key)
        if first is not None:
            raise _at(source, event, f"duplicate key {_show(key)} (first at line {first})")
        parent.keys[key] = _line_column(event)[0]
    parent.expect_key = not parent.expect_key


def _check_tag(event: yaml.NodeEvent, source: str) -> None:
    tag = getattr(event, "tag", None)
    if tag is not None and tag not in _JSON_TAGS:
        name = tag.replace("tag:yaml.org,2002:", "!!")
        raise _at(
            source,
            event,
            f"YAML type {name} has no JSON equivalent; quotaguard reads only what JSON can hold "
            "(quote the value to keep it as a string)",
        )


def _check_int(value: str, source: str, event: yaml.Event) -> None:
    if len(value) < 19:
        return
    if _DECIMAL.fullmatch(value):
        digits = value.replace("_", "").lstrip("+-").lstrip("0")
        number = int(digits) if 0 < len(digits) <= 20 else (0 if not digits else INT64_LIMIT)
    elif _BASED.fullmatch(value):
        text = value.replace("_", "")
        number = INT64_LIMIT if len(text) > 70 else abs(_based_int(text))
    else:
        return
    if number >= INT64_LIMIT:
        raise _at(source, event, _int_message(value))


def _based_int(text: str) -> int:
    try:
        return int(text, 0)
    except ValueError:
        return int(text, 8)  # YAML 1.1 octal: 0755


def _int_message(value: str) -> str:
    return (
        f"integer {_show(value)} does not fit in 64 bits ({len(value)} characters); "
        "quotaguard reads integers up to 2^63 - 1 either side of 0"
    )


def _show(value: str) -> str:
    return repr(value if len(value) <= 40 else value[:37] + "...")


def _line_column(event: yaml.Event) -> tuple[int, int]:
    mark = event.start_mark
    return (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)


def _at(source: str, event: yaml.Event, message: str) -> DocumentError:
    return DocumentError(source, *_line_column(event), message)


def load_yaml(text: str, source: str, limits: Limits, *, syntax: str = "not YAML") -> list[object]:
    """Every non-empty document of a YAML text as plain Python values (dicts, lists, str, int,
    float, bool, None); `DocumentError` for a bound broken or a syntax error."""
    if len(text) > limits.max_bytes:
        raise _too_big(source, limits)
    try:
        return _plain_documents(text, _Walk(source, limits))
    except _NotPlain:
        pass  # anchors, tags, merge keys, collections as keys: the loader's full path
    except yaml.YAMLError:
        pass  # the full path says where, as it always has
    return full_load_yaml(text, source, limits, syntax=syntax)


def full_load_yaml(
    text: str, source: str, limits: Limits, *, syntax: str = "not YAML"
) -> list[object]:
    """`load_yaml` the long way: the checks' pass, then PyYAML's safe loader."""
    check_yaml(text, source, limits)
    try:
        return [doc for doc in yaml.load_all(text, Loader=_Loader) if doc is not None]
    except yaml.YAMLError as exc:
        raise yaml_error(exc, source, syntax) from exc


_NO_KEY: Final = object()


class _NotPlain(Exception):
    """A document outside what the one-pass reader builds: read it the full way."""


_CONSTRUCTOR: Final = yaml.constructor.SafeConstructor()
_BUILT: Final = {
    "tag:yaml.org,2002:null": _CONSTRUCTOR.construct_yaml_null,
    "tag:yaml.org,2002:bool": _CONSTRUCTOR.construct_yaml_bool,
    "tag:yaml.org,2002:int": _CONSTRUCTOR.construct_yaml_int,
    "tag:yaml.org,2002:float": _CONSTRUCTOR.construct_yaml_float,
}


def _plain_scalar(value: str) -> object:
    """A plain (unquoted, untagged) scalar as the safe loader resolves and builds it."""
    resolvers = _Loader.yaml_implicit_resolvers
    for tag, pattern in [*resolvers.get(value[:1] or "", []), *resolvers.get(None, [])]:
        if pattern.match(value):
            build = _BUILT.get(tag)
            if build is None:
                raise _NotPlain(tag)  # a merge key
            return build(yaml.ScalarNode(tag, value))
    return value


def _plain_documents(text: str, walk: _Walk) -> list[object]:
    """The documents built from one pass over libyaml's events, which also runs the checks of
    `check_yaml`: the loader's Python constructor and resolver cost five times as much. Raises
    `_NotPlain` for what only the full loader builds (anchors, aliases, explicit tags)."""
    documents: list[object] = []
    open_values: list[dict[Any, Any] | list[Any]] = []
    keys: list[object] = []  # per open collection: the key waiting for its value, or _NO_KEY
    scalars: dict[str, object] = {}
    for event in yaml.parse(text, Loader=_BaseLoader):
        walk.step(event)
        if isinstance(event, yaml.NodeEvent) and (event.anchor or getattr(event, "tag", None)):
            raise _NotPlain("anchor or tag")
        if isinstance(event, yaml.ScalarEvent):
            value: object = event.value
            if event.implicit[0]:
                value = scalars.get(event.value, scalars)
                if value is scalars:
                    value = scalars[event.value] = _plain_scalar(event.value)
        elif isinstance(event, yaml.CollectionStartEvent):
            value = {} if isinstance(event, yaml.MappingStartEvent) else []
            open_values.append(value)  # type: ignore[arg-type]
            keys.append(_NO_KEY)
            continue
        elif isinstance(event, yaml.CollectionEndEvent):
            value = open_values.pop()
            keys.pop()
        elif isinstance(event, yaml.AliasEvent):
            raise _NotPlain("alias")
        else:
            continue
        _place(value, open_values, keys, documents)
    return [document for document in documents if document is not None]


def _place(
    value: object,
    open_values: list[dict[Any, Any] | list[Any]],
    keys: list[object],
    documents: list[object],
) -> None:
    """A finished value into the collection open around it, or the documents at the top."""
    if not open_values:
        documents.append(value)
        return
    parent = open_values[-1]
    if isinstance(parent, list):
        parent.append(value)
    elif keys[-1] is _NO_KEY:
        if isinstance(value, dict | list):
            raise _NotPlain("a collection as a key")
        keys[-1] = value
    else:
        parent[keys[-1]] = value
        keys[-1] = _NO_KEY


def yaml_error(exc: Exception, source: str, prefix: str = "not YAML") -> DocumentError:
    """A YAML library's error (PyYAML or ruamel) as a located `DocumentError`."""
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    line, column = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
    parts = (getattr(exc, "context", None), getattr(exc, "problem", None))
    reason = " ".join(str(part) for part in parts if part) or str(exc).splitlines()[0]
    return DocumentError(source, line, column, f"{prefix}: {reason}")


# -- JSON ----------------------------------------------------------------------------------------
class _Refused(Exception):
    def __init__(self, message: str, needle: str | None = None) -> None:
        super().__init__(message)
        self.message, self.needle = message, needle


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise _Refused(f"duplicate key {_show(key)}", json.dumps(key))
            seen.add(key)
    return found


def _bounded_int(text: str) -> int:
    if len(text) > 18:
        digits = text.lstrip("-").lstrip("0")
        if len(digits) > 19 or (digits and int(digits) >= INT64_LIMIT):
            raise _Refused(_int_message(text), text)
    return int(text)


def load_json(text: str, source: str, limits: Limits) -> object:
    """A JSON text as plain Python values; `DocumentError` for a bound broken or a syntax
    error. Duplicate keys, integers outside 64 bits and nesting past the limit are refused."""
    if len(text) > limits.max_bytes:
        raise _too_big(source, limits)
    try:
        document = json.loads(text, object_pairs_hook=_unique, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise DocumentError(source, exc.lineno, exc.colno, f"not JSON: {exc.msg}") from exc
    except _Refused as exc:
        raise _located(text, source, exc.needle, exc.message, limits.max_depth) from None
    except RecursionError:
        raise _located(text, source, None, _deep(limits), limits.max_depth) from None
    if _too_deep(document, limits.max_depth):
        raise _located(text, source, None, _deep(limits), limits.max_depth)
    return document


def _too_deep(document: object, max_depth: int) -> bool:
    level: list[object] = [document]
    for _ in range(max_depth):
        below: list[object] = []
        for node in level:
            if isinstance(node, dict):
                below.extend(v for v in node.values() if isinstance(v, dict | list))
            elif isinstance(node, list):
                below.extend(v for v in node if isinstance(v, dict | list))
        if not below:
            return False
        level = below
    return True


def _located(
    text: str, source: str, needle: str | None, message: str, max_depth: int
) -> DocumentError:
    """The position of a refused JSON value: the YAML checker walks the same text with marks
    (JSON is YAML); failing that, the last occurrence of the offending text."""
    if len(text) <= 64 * MiB:
        whole = Limits("document", len(text) + 1, max_depth, max_nodes=len(text) + 1)
        try:
            check_yaml(text, source, whole)
        except DocumentError as exc:
            return exc
    if needle is not None:
        index = text.rfind(needle)
        if index >= 0:
            line = text.count("\n", 0, index) + 1
            return DocumentError(source, line, index - text.rfind("\n", 0, index), message)
    return DocumentError(source, 1, 1, message)


def load_json_or_yaml(text: str, source: str, limits: Limits) -> list[object]:
    """JSON when the text is JSON (one document), else every YAML document."""
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        try:
            return [load_json(text, source, limits)]
        except DocumentError as exc:
            if not exc.message.startswith("not JSON"):
                raise
    return load_yaml(text, source, limits, syntax="neither JSON nor YAML")
