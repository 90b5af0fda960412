"""Policy test suites: cases kept in Git next to the policy, run through offline admission.

A suite is a YAML document of kind PolicyTest:

    apiVersion: quotaguard.dev/v1alpha1
    kind: PolicyTest
    metadata: {name: sample-policy}
    policy: ../policy.yaml            # relative to this file
    cases:
      - name: a small inference pod gets a 1g.10gb slice
        namespace: inference          # default: the object's metadata.namespace
        username: system:serviceaccount:kube-system:job-controller   # who creates it (userInfo)
        object: {...}                 # or objectFile: objects/pod.yaml (relative to this file)
        expect:
          allowed: true
          patched: {...}              # part of the object after mutation; null = must be absent
          warnings: [fragment, ...]   # each fragment appears in some warning
          message: fragment           # (or a list) denial message contains it
          rules: [max-gpus-per-pod]   # these denial rules fired
          unchanged: true             # mutation changed nothing
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from quotaguard.admission import BadReview, answer_offline, make_review
from quotaguard.admission.decision import Rule
from quotaguard.policy.model import TenantPolicy

API_VERSION = "quotaguard.dev/v1alpha1"
KIND = "PolicyTest"


class _Strict(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


class Expect(_Strict):
    allowed: bool
    message: str | list[str] | None = None
    rules: list[Rule] | None = None
    warnings: list[str] | None = None
    patched: dict[str, Any] | None = None
    unchanged: bool | None = None

    @property
    def message_fragments(self) -> list[str]:
        if self.message is None:
            return []
        return [self.message] if isinstance(self.message, str) else self.message


class Case(_Strict):
    name: Annotated[str, Field(min_length=1)]
    namespace: str | None = None
    username: str | None = None
    object: dict[str, Any] | None = None
    object_file: str | None = None
    expect: Expect

    @model_validator(mode="after")
    def _one_object(self) -> Case:
        if (self.object is None) == (self.object_file is None):
            raise ValueError("give exactly one of object and objectFile")
        return self


class SuiteMetadata(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    name: Annotated[str, Field(min_length=1)]


class Suite(_Strict):
    api_version: Literal["quotaguard.dev/v1alpha1"]
    kind: Literal["PolicyTest"]
    metadata: SuiteMetadata
    policy: Annotated[str, Field(min_length=1)]
    cases: Annotated[list[Case], Field(min_length=1)]


@dataclass(frozen=True)
class LoadedSuite:
    file: str
    suite: Suite

    @property
    def directory(self) -> Path:
        return Path(self.file).parent

    @property
    def policy_path(self) -> Path:
        return self.directory / self.suite.policy


class SuiteInvalid(Exception):
    """A suite file that cannot be run; one line per problem, FILE[:LINE:COLUMN]: message."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        super().__init__("\n".join(lines))


@dataclass
class CaseResult:
    name: str
    failures: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.failures


def load_suites(text: str, file: str, *, required: bool) -> list[LoadedSuite]:
    """Every PolicyTest document of a file; other kinds are skipped unless `required`."""
    from quotaguard.policy.loader import plain

    loaded: list[LoadedSuite] = []
    problems: list[tuple[int, int, str]] = []
    for root in _suite_roots(text, file):
        data = plain(root)
        if not isinstance(data, Mapping) or data.get("kind") != KIND:
            continue
        try:
            loaded.append(LoadedSuite(file, Suite.model_validate(data)))
        except ValidationError as exc:
            problems.extend(_schema_problems(exc, root, file))
    if problems:
        raise SuiteInvalid([text for _, _, text in sorted(problems)])
    if required and not loaded:
        raise SuiteInvalid([f"{file}: no {KIND} document (apiVersion {API_VERSION})"])
    return loaded


def _suite_roots(text: str, file: str) -> list[object]:
    """The YAML documents of a suite file; `SuiteInvalid` where the text does not parse."""
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    from quotaguard.kube.documents import MANIFEST, DocumentError
    from quotaguard.policy.loader import yaml_documents

    try:
        return yaml_documents(text, file, MANIFEST)
    except DocumentError as exc:
        raise SuiteInvalid([str(exc)]) from exc
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{file}:{mark.line + 1}:{mark.column + 1}" if mark else file
        raise SuiteInvalid([f"{where}: not YAML: {exc.problem or exc}"]) from exc
    except YAMLError as exc:
        raise SuiteInvalid([f"{file}: not YAML: {exc}"]) from exc


def _schema_problems(
    exc: ValidationError, root: object, file: str
) -> Iterator[tuple[int, int, str]]:
    """(line, column, FILE:LINE:COLUMN: path: message) for every schema error of a suite."""
    from quotaguard.policy.loader import position
    from quotaguard.policy.problems import format_path

    for error in exc.errors():
        path = tuple(p for p in error["loc"] if isinstance(p, str | int))
        at_key = error["type"] == "extra_forbidden"
        line, column = position(root, path, at_key=at_key)
        message = _schema_message(error["type"], error["msg"], path)
        yield line, column, f"{file}:{line}:{column}: {format_path(path)}: {message}"


def _schema_message(kind: str, message: str, path: tuple[str | int, ...]) -> str:
    if kind == "extra_forbidden":
        known = {
            "cases": list(Case.model_fields),
            "expect": list(Expect.model_fields),
        }
        parent = next((str(p) for p in reversed(path[:-1]) if isinstance(p, str)), "")
        names = [to_camel(n) for n in known.get(parent, list(Suite.model_fields))]
        close = difflib.get_close_matches(str(path[-1]), names, n=1)
        return "unknown field" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required field is missing"
    return message.removeprefix("Value error, ").replace("Input should be", "must be")


def run_case(policy: TenantPolicy, suite: LoadedSuite, case: Case) -> CaseResult:
    result = CaseResult(case.name)
    try:
        obj = case.object if case.object is not None else _object_file(suite, case)
    except (OSError, ValueError) as exc:
        result.failures.append(f"objectFile {case.object_file}: {exc}")
        return result
    metadata = obj.get("metadata")
    own = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    namespace = case.namespace or (own if isinstance(own, str) else None)
    if not namespace:
        result.failures.append("no namespace: set the case's namespace or metadata.namespace")
        return result
    try:
        response, patched = answer_offline(
            policy, make_review(obj, namespace=namespace, username=case.username)
        )
    except BadReview as exc:
        result.failures.append(f"the API server would not accept this object: {exc}")
        return result
    result.failures.extend(check(case.expect, response["response"], patched))
    return result


def _object_file(suite: LoadedSuite, case: Case) -> dict[str, Any]:
    from quotaguard.kube.documents import MANIFEST, load_json_or_yaml, read_text

    assert case.object_file is not None
    path = suite.directory / case.object_file
    documents = load_json_or_yaml(read_text(path, MANIFEST), str(path), MANIFEST)
    found = documents[0] if len(documents) == 1 else None
    if not isinstance(found, dict):
        raise ValueError("does not hold one object")
    return found


def check(expect: Expect, response: Mapping[str, Any], patched: Any) -> list[str]:
    """What differs between the expectation and the admission outcome (empty: passed)."""
    failures = _outcome(expect, response)
    if expect.patched is not None:
        mismatches = list(partial_mismatches(expect.patched, patched))
        if mismatches:
            failures.extend(mismatches)
            failures.extend(_diff(expect.patched, patched))
    return failures


def _outcome(expect: Expect, response: Mapping[str, Any]) -> list[str]:
    message = str(response.get("status", {}).get("message", ""))
    return [
        *_verdict(expect, response, message),
        *_rules(expect, response),
        *_warnings(expect, response),
        *_change(expect, response),
    ]


def _verdict(expect: Expect, response: Mapping[str, Any], message: str) -> Iterator[str]:
    allowed = bool(response.get("allowed"))
    if allowed != expect.allowed:
        yield (
            f"expected denied, got allowed ({_patch_summary(response)})"
            if allowed
            else f"expected allowed, got denied: {message}"
        )
    for fragment in expect.message_fragments:
        if fragment not in message:
            yield f'denial message does not contain "{fragment}"; message: {message or "(none)"}'


def _rules(expect: Expect, response: Mapping[str, Any]) -> Iterator[str]:
    if expect.rules is None:
        return
    fired = str(response.get("auditAnnotations", {}).get("denied", "")).split(",")
    missing = [rule for rule in expect.rules if rule not in fired]
    if missing:
        shown = ", ".join(filter(None, fired)) or "none"
        yield f"expected denial rules {', '.join(missing)}; fired: {shown}"


def _warnings(expect: Expect, response: Mapping[str, Any]) -> Iterator[str]:
    warnings = [str(w) for w in response.get("warnings", [])]
    for fragment in expect.warnings or []:
        if not any(fragment in warning for warning in warnings):
            yield f'no warning contains "{fragment}"; warnings: {warnings or "none"}'


def _change(expect: Expect, response: Mapping[str, Any]) -> Iterator[str]:
    changed = "patch" in response
    if expect.unchanged is True and changed:
        yield f"expected no change, got {_patch_summary(response)}"
    if expect.unchanged is False and not changed:
        yield "expected a change, got none"


def _patch_summary(response: Mapping[str, Any]) -> str:
    import base64

    encoded = response.get("patch")
    if not encoded:
        return "no patch"
    ops = json.loads(base64.b64decode(encoded))
    paths = ", ".join(f"{op['op']} {op['path']}" for op in ops[:4])
    return f"patch: {paths}{', ...' if len(ops) > 4 else ''}"


def _same_scalar(expected: object, actual: object) -> bool:
    if expected == actual and type(expected) is type(actual):
        return True
    # Quantities are written both ways ("1" and 1); booleans never match strings.
    loose = (str, int, float)
    if isinstance(expected, bool) or isinstance(actual, bool):
        return expected is actual
    return (
        isinstance(expected, loose) and isinstance(actual, loose) and str(expected) == str(actual)
    )


_ABSENT = object()


def partial_mismatches(expected: Any, actual: Any, pointer: str = "") -> Iterator[str]:
    """Every place where `actual` does not contain `expected`, as JSON Pointer lines.

    Maps match when each expected key matches (a null value means the key must be absent);
    lists match element by element and must have the same length; scalars compare as
    written, with "1" and 1 equal.
    """
    if isinstance(expected, Mapping):
        yield from _map_mismatches(expected, actual, pointer)
    elif isinstance(expected, list):
        yield from _list_mismatches(expected, actual, pointer)
    elif not _same_scalar(expected, actual):
        yield f"{pointer or '/'}: expected {_show(expected)}, got {_show(actual)}"


def _map_mismatches(expected: Mapping[Any, Any], actual: Any, pointer: str) -> Iterator[str]:
    if not isinstance(actual, Mapping):
        yield f"{pointer or '/'}: expected a map, got {_show(actual)}"
        return
    for key, value in expected.items():
        path = f"{pointer}/{str(key).replace('~', '~0').replace('/', '~1')}"
        found = actual.get(key, _ABSENT)
        if value is None:
            if found is not _ABSENT and found is not None:
                yield f"{path}: expected absent, got {_show(found)}"
        elif found is _ABSENT:
            yield f"{path}: expected {_show(value)}, got nothing"
        else:
            yield from partial_mismatches(value, found, path)


def _list_mismatches(expected: list[Any], actual: Any, pointer: str) -> Iterator[str]:
    if not isinstance(actual, list) or len(actual) != len(expected):
        yield f"{pointer or '/'}: expected a list of {len(expected)}, got {_show(actual)}"
        return
    for index, (want, have) in enumerate(zip(expected, actual, strict=True)):
        yield from partial_mismatches(want, have, f"{pointer}/{index}")


def _show(value: object) -> str:
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:197] + "..."


def _project(expected: Any, actual: Any) -> Any:
    """`actual` cut to the shape of `expected`, so a diff shows only what the case asserts."""
    if isinstance(expected, Mapping) and isinstance(actual, Mapping):
        projected = {}
        for key, value in expected.items():
            found = actual.get(key, _ABSENT)
            if found is _ABSENT:
                projected[key] = None if value is None else "<absent>"
            else:
                projected[key] = _project(value, found)
        return projected
    if isinstance(expected, list) and isinstance(actual, list):
        return [
            _project(expected[i], item) if i < len(expected) else item
            for i, item in enumerate(actual)
        ]
    if _same_scalar(expected, actual):
        return expected
    return actual


def _diff(expected: Any, actual: Any) -> list[str]:
    import yaml

    want = yaml.safe_dump(expected, sort_keys=False).splitlines()
    have = yaml.safe_dump(_project(expected, actual), sort_keys=False).splitlines()
    return list(difflib.unified_diff(want, have, "expected", "got", lineterm="", n=2))
