"""The part of a DRA device selector (CEL) quotaguard reads: which attribute values it pins.

A selector such as `device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com']
.profile == '1g.10gb'` is read as a conjunction of conditions, each pinning one attribute (or
the driver) to one value or a list of values (`in [...]`). Whatever else the expression says
(`||` at the top, capacity comparisons, `has`-style checks) is kept as an unread term: the
expression may be narrower than what was read, never wider. quotaguard evaluates no CEL; the
scheduler does.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

AttributeValue = str | int | bool
# The key of the driver condition: attribute names are domain-qualified (they hold a `/`), so
# it never clashes with one.
DRIVER = "driver"

_DOMAIN = r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?"
_QUALIFIED = re.compile(rf"^{_DOMAIN}/[A-Za-z_][A-Za-z0-9_]*$")
_STRING = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""
_LITERAL = rf"(?:{_STRING}|-?\d+|true|false)"
_SUBJECT = (
    rf"device\.driver|device\.attributes\[\s*(?P<domain>{_STRING})\s*\]"
    rf"(?:\.(?P<name>[A-Za-z_][A-Za-z0-9_]*)|\[\s*(?P<quoted>{_STRING})\s*\])"
)
_EQUALS = re.compile(rf"^(?P<subject>{_SUBJECT})\s*==\s*(?P<value>{_LITERAL})$")
_IN = re.compile(
    rf"^(?P<subject>{_SUBJECT})\s+in\s+\[\s*(?P<values>{_LITERAL}(?:\s*,\s*{_LITERAL})*)\s*,?\s*\]$"
)
_LITERALS = re.compile(_LITERAL)


@dataclass(frozen=True, slots=True)
class Condition:
    """One attribute (`gpu.nvidia.com/profile`, or `driver`) pinned to one of `values`."""

    attribute: str
    values: frozenset[AttributeValue]

    def holds(self, value: AttributeValue | None) -> bool:
        return value is not None and value in self.values

    def __str__(self) -> str:
        shown = sorted(map(_shown, self.values))
        return (
            f"{self.attribute} == {shown[0]}"
            if len(shown) == 1
            else (f"{self.attribute} in [{', '.join(shown)}]")
        )


@dataclass(frozen=True, slots=True)
class Selection:
    """What some selectors pin (their conjunction), and the terms that were not read."""

    conditions: tuple[Condition, ...] = ()
    unread: tuple[str, ...] = ()

    @property
    def fully_read(self) -> bool:
        return not self.unread

    def pinned(self) -> dict[str, frozenset[AttributeValue]]:
        """Attribute -> the values every condition on it allows (their intersection)."""
        found: dict[str, frozenset[AttributeValue]] = {}
        for condition in self.conditions:
            earlier = found.get(condition.attribute)
            found[condition.attribute] = (
                condition.values if earlier is None else earlier & condition.values
            )
        return found

    def also(self, other: Selection) -> Selection:
        """Both selections at once (a request's selectors and its DeviceClass's)."""
        return Selection(self.conditions + other.conditions, self.unread + other.unread)

    def compatible(self, other: Selection) -> bool:
        """Whether some device could satisfy both, as far as the read conditions tell."""
        mine, theirs = self.pinned(), other.pinned()
        if any(not values for values in (*mine.values(), *theirs.values())):
            return False
        return all(mine[key] & theirs[key] for key in mine.keys() & theirs.keys())

    def implies(self, other: Selection) -> bool:
        """Whether every device this selection admits also satisfies `other`'s read
        conditions (each attribute `other` pins is pinned here to a subset)."""
        mine = self.pinned()
        return all(key in mine and mine[key] <= values for key, values in other.pinned().items())

    def matches(self, driver: str, attributes: Mapping[str, AttributeValue]) -> bool:
        """Whether a device (its driver, its qualified attributes) meets every read condition;
        unread terms are taken to hold."""
        for condition in self.conditions:
            value = driver if condition.attribute == DRIVER else attributes.get(condition.attribute)
            if not condition.holds(value):
                return False
        return True


def _shown(value: AttributeValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, str) else str(value)


def qualified(name: str) -> bool:
    """Whether an attribute name carries its domain (`gpu.nvidia.com/productName`)."""
    return _QUALIFIED.match(name) is not None


def read_selectors(expressions: list[str] | tuple[str, ...]) -> Selection:
    """The conjunction of several CEL selectors (a request's or a DeviceClass's)."""
    found = Selection()
    for expression in expressions:
        found = found.also(read_selector(expression))
    return found


def read_selector(expression: str) -> Selection:
    if len(expression) > MAX_READ:
        return Selection((), (expression,))
    conditions: list[Condition] = []
    unread: list[str] = []
    for term in _conjuncts(expression):
        condition = _condition(term)
        if condition is None:
            unread.append(term)
        else:
            conditions.append(condition)
    return Selection(tuple(conditions), tuple(unread))


def _condition(term: str) -> Condition | None:
    match = _EQUALS.match(term)
    if match is not None:
        return Condition(_subject(match), frozenset({_literal(match["value"])}))
    match = _IN.match(term)
    if match is not None:
        values = frozenset(_literal(v) for v in _LITERALS.findall(match["values"]))
        return Condition(_subject(match), values)
    return None


def _subject(match: re.Match[str]) -> str:
    if match["domain"] is None:
        return DRIVER
    name = match["name"] if match["name"] is not None else _literal(match["quoted"])
    return f"{_literal(match['domain'])}/{name}"


def _literal(text: str) -> AttributeValue:
    if text in ("true", "false"):
        return text == "true"
    if text[0] in "'\"":
        return re.sub(r"\\(.)", r"\1", text[1:-1])
    return int(text)


# Parentheses around a term quotaguard looks inside, and the longest selector it reads: one
# nested deeper or longer (the API server allows 10 KiB of CEL) is kept as an unread term, so
# reading stays quick and shallow whatever a tenant writes.
MAX_NESTING = 16
MAX_READ = 2048


def _conjuncts(expression: str, depth: int = 0) -> list[str]:
    """The top-level `&&` terms of an expression, outer parentheses removed; the whole
    expression as one term when it has a top-level `||` or `?:`, or does not balance."""
    text = _strip_parens(expression.strip())
    if not text:
        return []
    if depth > MAX_NESTING:
        return [text]
    if not _balanced(text):
        return [text]
    cuts: list[int] = []
    for index, level in _unquoted(text):
        if level == 0 and (text.startswith("||", index) or text[index] == "?"):
            return [text]  # a disjunction or a conditional: nothing is pinned for sure
        if level == 0 and text.startswith("&&", index):
            cuts.append(index)
    bounds = zip([0, *(cut + 2 for cut in cuts)], [*cuts, len(text)], strict=True)
    found: list[str] = []
    for start, end in bounds:
        term = text[start:end].strip()
        inner = _strip_parens(term)
        found.extend(_conjuncts(inner, depth + 1) if inner != term else [term] if term else [])
    return found


def _unquoted(text: str) -> Iterator[tuple[int, int]]:
    """(index, bracket depth before it) of every character outside string literals; a
    character that closes a bracket is reported at the depth it closes to."""
    depth, quote, escaped = 0, "", False
    for index, char in enumerate(text):
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
            continue
        if char in "'\"":
            quote = char
        elif char in "([{":
            depth += 1
            continue
        elif char in ")]}":
            depth -= 1
        yield index, depth


def _balanced(text: str) -> bool:
    """Every bracket closed and every string literal ended."""
    depth, quote, escaped = 0, "", False
    for char in text:
        if escaped:
            escaped = False
        elif quote:
            escaped = char == "\\"
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        else:
            depth += (char in "([{") - (char in ")]}")
            if depth < 0:
                return False
    return depth == 0 and not quote


def _strip_parens(text: str) -> str:
    """`(a && b)` -> `a && b`, when the parentheses enclose the whole text."""
    for _ in range(MAX_NESTING):
        if not (text.startswith("(") and text.endswith(")") and _closes_at_end(text)):
            break
        text = text[1:-1].strip()
    return text


def _closes_at_end(text: str) -> bool:
    """Whether the parenthesis opening `text` closes at its last character."""
    return all(
        depth > 0 or index == len(text) - 1
        for index, depth in _unquoted(text)
        if text[index] == ")"
    )
