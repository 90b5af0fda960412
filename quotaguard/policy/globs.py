"""Whether shell-style namespace patterns can match the same name, exactly as `fnmatch` does.

Two tenants whose `namespaces` could both claim one namespace make ownership ambiguous, so the
policy checker needs glob intersection, not just equality. A pattern is split into `*` and
one-character positions; each position's character class is compiled by `fnmatch.translate`
itself, so every corner of its syntax (`[!]]`, `[]a]`, `[z-a]`, an unclosed `[`) means here what
it means when the webhook matches a namespace. Two patterns intersect when the product of their
automata reaches the end of both: a breadth-first search over (position, position) pairs.

A character common to two classes, when there is one, is found among few candidates: a union of
character ranges (or its complement) begins at a range's first character or just after a
range's last, and every such character appears in the class's own text.

Checking every pair of 20,000 patterns would take minutes, so `overlapping_pairs` only compares
patterns whose literal ends agree: two patterns can share a name only if one's literal prefix
is a prefix of the other's, and likewise for their literal suffixes. Patterns with neither (such
as `*[a-c]*`) are compared with every other.
"""

from __future__ import annotations

import bisect
import fnmatch
import re
from collections import defaultdict, deque
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

# Witness characters tried first, so that an example reads like a namespace.
_PREFERRED = "abcdefghijklmnopqrstuvwxyz0123456789-"


@dataclass(frozen=True, slots=True)
class _Class:
    """One character position: `literal` when it holds exactly that character."""

    text: str  # the pattern's own text for this position
    regex: re.Pattern[str] | None  # None for a literal
    literal: str | None = None

    def matches(self, char: str) -> bool:
        if self.regex is None:
            return char == self.literal
        return self.regex.match(char) is not None


_STAR = None
_SPECIAL = re.compile(r"[*?\[]")
_Token = _Class | None  # None is `*`


def _tokens(pattern: str) -> tuple[_Token, ...]:
    """The positions of a pattern, with brackets found as `fnmatch.translate` finds them."""
    tokens: list[_Token] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char == "*":
            if not tokens or tokens[-1] is not _STAR:
                tokens.append(_STAR)
            i += 1
            continue
        end = i + 1
        if char == "[":
            j = i + 1
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            end = j + 1 if j < n else i + 1  # no closing bracket: a literal "["
        text = pattern[i:end]
        if len(text) == 1 and text != "?":
            tokens.append(_Class(text, None, literal=text))
        else:
            tokens.append(_Class(text, re.compile(fnmatch.translate(text))))
        i = end
    return tuple(tokens)


def _common(left: _Class, right: _Class) -> str | None:
    """A character both classes hold, or None."""
    if left.literal is not None:
        return left.literal if right.matches(left.literal) else None
    if right.literal is not None:
        return right.literal if left.matches(right.literal) else None
    candidates: list[str] = [*_PREFERRED, "\0"]
    for char in left.text + right.text:
        candidates.append(char)
        if ord(char) < 0x10FFFF:
            candidates.append(chr(ord(char) + 1))
    for char in candidates:
        if left.matches(char) and right.matches(char):
            return char
    return None


def _witness(left: tuple[_Token, ...], right: tuple[_Token, ...]) -> str | None:
    start, goal = (0, 0), (len(left), len(right))
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None] = {start: None}
    queue = deque([start])
    while queue:
        state = queue.popleft()
        if state == goal:
            return _spell(came, state)
        for following, char in _steps(left, right, *state):
            if following not in came:
                came[following] = (state, char)
                queue.append(following)
    return None


def _steps(
    left: tuple[_Token, ...], right: tuple[_Token, ...], i: int, j: int
) -> Iterator[tuple[tuple[int, int], str]]:
    """From positions (i, j): a star skipped (no character), or one character both take."""
    a_star = i < len(left) and left[i] is _STAR
    b_star = j < len(right) and right[j] is _STAR
    if a_star:
        yield (i + 1, j), ""
    if b_star:
        yield (i, j + 1), ""
    if i == len(left) or j == len(right) or (a_star and b_star):
        return  # both stars: consuming a character only loops
    a, b = left[i], right[j]
    # A star stays where it is and takes whatever character the other side's class takes.
    char = _common(a or b, b or a)  # type: ignore[arg-type]  # not both stars, checked above
    if char is not None:
        yield (i + (a is not None), j + (b is not None)), char


def _spell(
    came: dict[tuple[int, int], tuple[tuple[int, int], str] | None], end: tuple[int, int]
) -> str:
    chars: list[str] = []
    step = came[end]
    while step is not None:
        previous, char = step
        chars.append(char)
        step = came[previous]
    return "".join(reversed(chars))


def witness(a: str, b: str) -> str | None:
    """A name both patterns match (as `fnmatch.fnmatchcase` matches), or None when none is."""
    return _witness(_tokens(a), _tokens(b))


def globs_intersect(a: str, b: str) -> bool:
    return witness(a, b) is not None


def _literal_ends(tokens: tuple[_Token, ...]) -> tuple[str, str, bool]:
    """(literal prefix, literal suffix, whether the pattern is all literal)."""
    prefix = ""
    for token in tokens:
        if token is None or token.literal is None:
            break
        prefix += token.literal
    if len(prefix) == len(tokens):
        return prefix, prefix, True
    suffix = ""
    for token in reversed(tokens):
        if token is None or token.literal is None:
            break
        suffix = token.literal + suffix
    return prefix, suffix, False


class _EndIndex:
    """Patterns by a literal end (prefix, or reversed suffix): which ones may be compatible."""

    def __init__(self, ends: Sequence[str]) -> None:
        self._exact: dict[str, list[int]] = defaultdict(list)
        for index, end in enumerate(ends):
            self._exact[end].append(index)
        self._sorted = sorted((end, index) for index, end in enumerate(ends))
        self._keys = [end for end, _ in self._sorted]

    def count(self, end: str) -> int:
        """About how many patterns `compatible` yields (exact but for a U+10FFFF after `end`)."""
        shorter = sum(len(self._exact.get(end[:length], ())) for length in range(len(end)))
        low = bisect.bisect_left(self._keys, end)
        return shorter + bisect.bisect_left(self._keys, end + "\U0010ffff", low) - low

    def compatible(self, end: str) -> Iterator[int]:
        """Patterns whose end is a prefix of `end` or has `end` as a prefix."""
        for length in range(len(end)):
            yield from self._exact.get(end[:length], ())
        position = bisect.bisect_left(self._keys, end)
        while position < len(self._keys) and self._keys[position].startswith(end):
            yield self._sorted[position][1]
            position += 1


def overlapping_pairs(patterns: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    """(later, earlier, a name both match) for every pair of patterns that intersect, ordered by
    the later pattern, then the earlier one."""
    tokens: dict[int, tuple[_Token, ...]] = {}

    def tokens_of(index: int) -> tuple[_Token, ...]:
        found = tokens.get(index)
        if found is None:
            found = tokens[index] = _tokens(patterns[index])
        return found

    ends = [
        (pattern, pattern, True) if not _SPECIAL.search(pattern) else _literal_ends(tokens_of(k))
        for k, pattern in enumerate(patterns)
    ]
    by_prefix = _EndIndex([prefix for prefix, _, _ in ends])
    by_suffix = _EndIndex([suffix[::-1] for _, suffix, _ in ends])
    for later, (prefix, suffix, literal) in enumerate(ends):
        for earlier in _candidates(later, prefix, suffix, literal, by_prefix, by_suffix):
            if literal and ends[earlier][2]:
                found: str | None = prefix if ends[earlier][0] == prefix else None
            else:
                found = _witness(tokens_of(later), tokens_of(earlier))
            if found is not None:
                yield later, earlier, found


def _candidates(
    later: int, prefix: str, suffix: str, literal: bool, by_prefix: _EndIndex, by_suffix: _EndIndex
) -> Iterable[int]:
    """Earlier patterns that may share a name with this one: the smaller of the prefix and the
    suffix index's answers (each is a superset of the partners), or every earlier one."""
    options = []
    if prefix or literal:
        options.append((by_prefix.count(prefix), by_prefix, prefix))
    if suffix and not literal:
        options.append((by_suffix.count(suffix[::-1]), by_suffix, suffix[::-1]))
    if not options:
        return range(later)
    _, index, end = min(options, key=lambda option: option[0])
    return sorted(c for c in index.compatible(end) if c < later)
