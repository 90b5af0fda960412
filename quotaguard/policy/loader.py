"""The one policy loader used by validate, review, test, serve, plan and simulate.

YAML is read with ruamel.yaml's round-trip loader because it keeps the line and column of every
key and value, so each problem is reported as FILE:LINE:COLUMN. Schema problems (pydantic) and
cross-checks (`checks.py`) are collected together: a user sees every problem at once.
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path as FilePath
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails
from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from quotaguard.kube.documents import (
    POLICY,
    DocumentError,
    Limits,
    check_yaml,
    load_yaml,
    read_text,
)
from quotaguard.policy.checks import check_policy
from quotaguard.policy.model import (
    API_VERSION,
    CLASS_NAME,
    DNS_LABEL,
    KIND,
    RESOURCE_NAME,
    TenantPolicy,
)
from quotaguard.policy.problems import LocatedProblem, Path, PolicyInvalid, Problem

YAML_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass
class PolicyDocument:
    """One TenantPolicy document of a file, parsed and checked."""

    file: str
    policy: TenantPolicy | None
    problems: list[LocatedProblem] = field(default_factory=list)
    unparsable: bool = False  # not YAML at all: an input error (exit 2), not a wrong policy

    @property
    def errors(self) -> list[LocatedProblem]:
        return [p for p in self.problems if p.severity == "error"]


def _plain(node: object) -> object:
    """ruamel's commented containers and scalar subclasses as plain Python values."""
    if isinstance(node, Mapping):
        return {str(key): _plain(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_plain(item) for item in node]
    if isinstance(node, bool) or node is None:
        return node
    if isinstance(node, int):
        return int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, str):
        return str(node)
    return node


def _locate(root: object, path: Path, *, at_key: bool) -> tuple[int, int]:
    """1-based line and column of the node at `path`, or of its deepest existing ancestor."""
    node = root
    line, column = _position(root)
    for index, part in enumerate(path):
        last = index == len(path) - 1
        if isinstance(node, CommentedMap) and part in node:
            key_line, key_col = node.lc.key(part)
            value_line, value_col = node.lc.value(part)
            line, column = (key_line, key_col) if (last and at_key) else (value_line, value_col)
            node = node[part]
        elif isinstance(node, CommentedSeq) and isinstance(part, int) and part < len(node):
            line, column = node.lc.item(part)
            node = node[part]
        else:
            break
    return line + 1, column + 1


def _position(node: object) -> tuple[int, int]:
    lc = getattr(node, "lc", None)
    if lc is None or lc.line is None:
        return 0, 0
    return lc.line, lc.col


def _model_fields(model: type[BaseModel], alias_path: Path) -> list[str]:
    """The YAML names allowed at a path of the schema (for "did you mean" on unknown fields)."""
    annotation: Any = model
    for part in alias_path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            match = next(
                (f for n, f in annotation.model_fields.items() if (f.alias or n) == part), None
            )
            if match is None:
                return []
            annotation = match.annotation
        else:  # a list index or a dict key: step into the element type
            annotation = _element(annotation)
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [f.alias or n for n, f in annotation.model_fields.items()]
    return []


def _unwrap(annotation: Any) -> Any:
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            options = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = options[0]
        else:
            return annotation


def _element(annotation: Any) -> Any:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is list and args:
        return args[0]
    if origin is dict and len(args) == 2:
        return args[1]
    return annotation


# What a name pattern of the model asks for, in words (CLASS_NAME is also DNS_SUBDOMAIN).
_PATTERN_WORDS = {
    RESOURCE_NAME: "must be an extended resource name, <domain>/<name>, such as nvidia.com/gpu",
    DNS_LABEL: "must be a DNS label: lower-case letters, digits and '-', beginning and ending "
    "with a letter or digit",
    CLASS_NAME: "must be lower-case letters, digits, '-' and '.', beginning and ending with a "
    "letter or digit",
}


def _schema_problem(error: ErrorDetails) -> Problem:
    path: Path = tuple(part for part in error["loc"] if isinstance(part, str | int))
    kind = error["type"]
    message = error["msg"]
    if kind == "extra_forbidden":
        name = str(path[-1]) if path else "?"
        allowed = _model_fields(TenantPolicy, path[:-1])
        hint = difflib.get_close_matches(name, allowed, n=1)
        message = f"unknown field {name!r}" + (f" (did you mean {hint[0]!r}?)" if hint else "")
        if allowed and not hint:
            message += f"; allowed: {', '.join(allowed)}"
    elif kind == "missing":
        message = "required field is missing"
    elif kind == "literal_error":
        message = message.replace("Input should be", "must be")
    elif kind == "value_error":
        message = message.removeprefix("Value error, ")
    elif kind == "string_pattern_mismatch":
        words = _PATTERN_WORDS.get(str((error.get("ctx") or {}).get("pattern")))
        message = f"{words} (not {error['input']!r})" if words else message
    else:
        message = message.replace("Input should be", "must be")
    return Problem(path, message)


def _place(file: str, root: object, problem: Problem, *, at_key: bool = False) -> LocatedProblem:
    line, column = _locate(root, problem.path, at_key=at_key)
    return LocatedProblem(file, line, column, problem.path, problem.message, problem.severity)


def _documents(text: str, file: str, limits: Limits = POLICY) -> Iterator[object]:
    check_yaml(text, file, limits)  # alias bombs, depth, huge integers, YAML-only types
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yield from yaml.load_all(text)


def load_policy_documents(
    text: str, file: str, *, require_policy: bool = True
) -> list[PolicyDocument]:
    """Every TenantPolicy document of a YAML text, each with all its problems.

    Documents of other kinds are skipped (a directory may hold kustomizations and tests);
    with `require_policy`, a text without any TenantPolicy is itself a problem.
    """
    if not require_policy and holds_no_policy(text, file):
        return []
    roots = _roots(text, file)
    if isinstance(roots, LocatedProblem):
        return [PolicyDocument(file, None, [roots], unparsable=True)]
    found = []
    for root in roots:
        document = _document_of(root, file, require_policy=require_policy)
        if document is not None:
            found.append(document)
            if len(found) > 1 and _is_policy(root):
                found[-1] = _second_policy(found[-1], root)
    if not found and require_policy:
        problem = LocatedProblem(
            file, 1, 1, (), f"no {KIND} document (apiVersion {API_VERSION}) in this file"
        )
        found.append(PolicyDocument(file, None, [problem]))
    return found


def holds_no_policy(text: str, file: str) -> bool:
    """Whether a text read with the plain loader (libyaml, no positions) holds no document to
    judge: no policy and no near miss of one. A directory's traces and manifests are then
    skipped without the positioned reader, which costs about twenty times as much (seconds for
    a 300 kB trace); a text the plain loader refuses is left to it, to say where and why."""
    try:
        documents = load_yaml(text, file, POLICY)
    except DocumentError:
        return False
    return not any(_is_policy(root) or _misspelt_kind(root) is not None for root in documents)


def _roots(text: str, file: str) -> list[object] | LocatedProblem:
    """The non-empty YAML documents of the text, or where and why it does not parse."""
    try:
        return [root for root in _documents(text, file) if root is not None]
    except DocumentError as exc:
        return LocatedProblem(file, exc.line, exc.column, (), exc.message)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, column = (mark.line + 1, mark.column + 1) if mark else (1, 1)
        reason = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        return LocatedProblem(file, line, column, (), reason)
    except YAMLError as exc:
        return LocatedProblem(file, 1, 1, (), f"not YAML: {exc}")


def _second_policy(document: PolicyDocument, root: object) -> PolicyDocument:
    """`serve`, `review` and `plan` read one policy per file; `validate` must say so too."""
    line, column = _position(root)
    problem = LocatedProblem(
        document.file,
        line + 1,
        column + 1,
        (),
        f"a second {KIND} in this file; quotaguard reads exactly one policy per file",
    )
    return PolicyDocument(document.file, None, [*document.problems, problem])


# quotaguard.dev kinds that are not policies: the test suites of `quotaguard test`.
OTHER_KINDS = ("PolicyTest",)


def _document_of(root: object, file: str, *, require_policy: bool) -> PolicyDocument | None:
    """The policy document `root` is, a misspelt one, or None for a document of another kind."""
    misspelt = _misspelt_kind(root)
    if misspelt is not None:
        return PolicyDocument(file, None, [_place(file, root, misspelt)])
    if _is_policy(root) or (require_policy and not isinstance(root, Mapping)):
        return _check_document(root, file)
    return None


def _misspelt_kind(root: object) -> Problem | None:
    """A document that was surely meant as a TenantPolicy (its kind a near miss, or another
    kind under quotaguard's apiVersion) is an error rather than a document to skip."""
    if not isinstance(root, Mapping):
        return None
    kind, api_version = root.get("kind"), root.get("apiVersion")
    if not isinstance(kind, str) or kind in (KIND, *OTHER_KINDS):
        return None
    near = difflib.SequenceMatcher(None, kind.lower(), KIND.lower()).ratio() >= 0.75
    ours = isinstance(api_version, str) and api_version.split("/")[0] == API_VERSION.split("/")[0]
    if not (near or ours):
        return None
    return Problem(("kind",), f"unknown kind {kind!r}; did you mean {KIND}?")


def _is_policy(root: object) -> bool:
    if not isinstance(root, Mapping):
        return False
    kind = root.get("kind")
    return kind == KIND or (kind is None and root.get("apiVersion") == API_VERSION)


def _check_document(root: object, file: str) -> PolicyDocument:
    data = _plain(root)
    if not isinstance(data, dict):
        problem = Problem((), f"a {KIND} must be a mapping, not {type(data).__name__}")
        return PolicyDocument(file, None, [_place(file, root, problem)])
    located: list[LocatedProblem] = []
    policy: TenantPolicy | None = None
    try:
        policy = TenantPolicy.model_validate(data)
    except ValidationError as exc:
        for error in exc.errors():
            problem = _schema_problem(error)
            at_key = error["type"] == "extra_forbidden"
            located.append(_place(file, root, problem, at_key=at_key))
    located.extend(_place(file, root, problem) for problem in check_policy(data))
    located.sort(key=lambda p: (p.line, p.column, p.message))
    errors = any(p.severity == "error" for p in located)
    return PolicyDocument(file, None if errors else policy, located)


def load_policy_text(text: str, file: str = "<policy>") -> TenantPolicy:
    """The policy of a text holding exactly one TenantPolicy; PolicyInvalid otherwise."""
    documents = load_policy_documents(text, file)
    problems = [p for document in documents for p in document.problems]
    if any(document.unparsable for document in documents):
        raise PolicyInvalid(problems, unparsable=True)
    if len(documents) > 1:
        raise PolicyInvalid(problems)  # the second one carries the problem
    policy = documents[0].policy
    if policy is None:
        raise PolicyInvalid(problems)
    return policy


def load_policy_file(path: str | FilePath) -> TenantPolicy:
    """Read and check a policy file; `OSError` when unreadable, `PolicyInvalid` when wrong."""
    file = str(path)
    try:
        text = read_text(path, POLICY)
    except DocumentError as exc:
        problem = LocatedProblem(file, exc.line, exc.column, (), exc.message)
        raise PolicyInvalid([problem], unparsable=True) from exc
    return load_policy_text(text, file)


def policy_files(paths: list[str]) -> Iterator[tuple[str, bool]]:
    """Files named on the command line, and the YAML files of named directories.

    Yields (file, explicit): a file named explicitly must hold a policy; one found in a
    directory is checked only when it does.
    """
    for name in paths:
        path = FilePath(name)
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and child.suffix in YAML_SUFFIXES:
                    yield str(child), False
        else:
            yield name, True


def yaml_documents(text: str, file: str = "<input>", limits: Limits = POLICY) -> list[object]:
    """Round-trip YAML documents that keep the line and column of every node; raises
    `DocumentError` past `limits` and ruamel's YAMLError. For other files kept next to the
    policy (e.g. policy tests)."""
    return [root for root in _documents(text, file, limits) if root is not None]


def plain(node: object) -> object:
    """A document from `yaml_documents` as plain dicts, lists and scalars."""
    return _plain(node)


def position(root: object, path: Path, *, at_key: bool = False) -> tuple[int, int]:
    """1-based line and column of `path` (or its deepest existing ancestor) in `root`."""
    return _locate(root, path, at_key=at_key)
