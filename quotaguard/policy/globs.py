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
patterns whose fixed ends agree: the positions before a pattern's first star (after its last)
must take a common character, position by position, as far as both go. Two tries of those ends
(`_FixedEnds`) find the agreeing earlier patterns of each one, so classes and `?` at the ends
(`[tT]eam-7-*`, `?team-7*`) narrow the search as literals do; only patterns that begin and end
with a star (`*-7-*`) are compared with every other, and those mostly do intersect.
"""

from __future__ import annotations

import fnmatch
import re
from collections import deque
from collections.abc import Iterator, Sequence
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
        end = _bracket_end(pattern, i) if char == "[" else i + 1
        text = pattern[i:end]
        if len(text) == 1 and text != "?":
            tokens.append(_Class(text, None, literal=text))
        else:
            tokens.append(_Class(text, re.compile(fnmatch.translate(text))))
        i = end
    return tuple(tokens)


def _bracket_end(pattern: str, start: int) -> int:
    """Where the bracket expression opened at `start` ends (after its "]"); with no closing
    bracket, the "[" is a literal of its own."""
    j, n = start + 1, len(pattern)
    if j < n and pattern[j] == "!":
        j += 1
    if j < n and pattern[j] == "]":
        j += 1
    while j < n and pattern[j] != "]":
        j += 1
    return j + 1 if j < n else start + 1


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


_Position = str | _Class  # a literal character, or a class


class _Node:
    """One position of a trie of fixed ends: the patterns whose fixed end stops here, with a
    star after it (`starred`) or as the whole pattern (`whole`), and how many patterns the
    subtree holds. Empty parts stay empty tuples or None: most nodes of 20,000 patterns are bare."""

    __slots__ = ("classes", "literal", "size", "starred", "whole")

    def __init__(self) -> None:
        self.literal: dict[str, _Node] = {}
        self.classes: dict[str, tuple[_Class, _Node]] | None = None
        self.starred: list[int] | tuple[()] = ()
        self.whole: list[int] | tuple[()] = ()
        self.size = 0

    def children(self, position: _Position) -> Iterator[_Node]:
        """The children whose position can take a character `position` takes."""
        if isinstance(position, str):
            child = self.literal.get(position)
            if child is not None:
                yield child
            for cls, node in (self.classes or {}).values():
                if cls.matches(position):
                    yield node
            return
        for char, node in self.literal.items():
            if position.matches(char):
                yield node
        for cls, node in (self.classes or {}).values():
            if _common(position, cls) is not None:
                yield node

    def indices(self) -> Iterator[int]:
        pending = [self]
        while pending:
            node = pending.pop()
            yield from node.starred
            yield from node.whole
            pending.extend(node.literal.values())
            if node.classes:
                pending.extend(child for _, child in node.classes.values())


class _FixedEnds:
    """Patterns by one fixed end (the positions before the first star, or, reversed, after the
    last): the patterns whose fixed end agrees with a given one position by position. Two
    patterns can share a name only if their prefixes agree so far as both go, and likewise
    their suffixes: a class agrees with a character it takes, or with a class it shares one
    with. A trie, walked along one pattern's end, finds them without comparing every pair,
    whatever mix of literals, classes and `?` the ends hold."""

    def __init__(self) -> None:
        self._root = _Node()

    def add(self, index: int, end: Sequence[_Position], starred: bool) -> None:
        node = self._root
        node.size += 1
        for position in end:
            if isinstance(position, str):
                child = node.literal.get(position)
                if child is None:
                    child = node.literal[position] = _Node()
            else:
                if node.classes is None:
                    node.classes = {}
                found = node.classes.get(position.text)
                if found is None:
                    found = node.classes[position.text] = (position, _Node())
                child = found[1]
            node = child
            node.size += 1
        ending = node.starred if starred else node.whole
        if isinstance(ending, tuple):  # the first pattern to end here
            ending = []
            if starred:
                node.starred = ending
            else:
                node.whole = ending
        ending.append(index)

    def agreeing(self, end: Sequence[_Position], starred: bool) -> tuple[int, list[_Piece]]:
        """(how many, and the pieces holding them) of the patterns whose end agrees with `end`
        (`starred`: a star follows it, so longer ends agree too)."""
        pieces: list[_Piece] = []
        count = 0
        frontier = [self._root]
        for position in end:
            following: list[_Node] = []
            for node in frontier:
                if node.starred:  # shorter, then a star: agrees so far
                    pieces.append(node.starred)
                    count += len(node.starred)
                following.extend(node.children(position))
            frontier = following
            if not frontier:
                break
        for node in frontier:
            if starred:
                pieces.append(node)
                count += node.size
            else:  # names of exactly this length: only ends that stop here
                for found in (node.starred, node.whole):
                    if found:
                        pieces.append(found)
                        count += len(found)
        return count, pieces


_Piece = list[int] | _Node


def _fixed_ends(
    pattern: str, tokens: tuple[_Token, ...] | None
) -> tuple[Sequence[_Position], Sequence[_Position], bool]:
    """(prefix, reversed suffix, whether the pattern has a star); a pattern with no special
    character is its own prefix and suffix, read without tokens."""
    if tokens is None:
        return pattern, pattern[::-1], False

    def position(token: _Class) -> _Position:
        return token.literal if token.literal is not None else token

    if _STAR not in tokens:
        fixed = [position(t) for t in tokens]  # type: ignore[arg-type]  # no star in it
        return fixed, fixed[::-1], False
    first = tokens.index(_STAR)
    last = len(tokens) - 1 - tokens[::-1].index(_STAR)
    prefix = [position(t) for t in tokens[:first]]  # type: ignore[arg-type]  # before a star
    suffix = [position(t) for t in reversed(tokens[last + 1 :])]  # type: ignore[arg-type]
    return prefix, suffix, True


def overlapping_pairs(patterns: Sequence[str]) -> Iterator[tuple[int, int, str]]:
    """(later, earlier, a name both match) for every pair of patterns that intersect, ordered by
    the later pattern, then the earlier one."""
    # None for a pattern with no special character (most): tokens only when compared
    tokens = [_tokens(p) if _SPECIAL.search(p) else None for p in patterns]
    literal = [t is None for t in tokens]

    def tokens_of(index: int) -> tuple[_Token, ...]:
        found = tokens[index]
        if found is None:
            found = tokens[index] = _tokens(patterns[index])
        return found

    by_prefix, by_suffix = _FixedEnds(), _FixedEnds()
    for later, pattern in enumerate(patterns):
        prefix, suffix, starred = _fixed_ends(pattern, tokens[later])
        for earlier in _candidates(by_prefix, by_suffix, prefix, suffix, starred):
            if literal[later] and literal[earlier]:
                found: str | None = pattern if patterns[earlier] == pattern else None
            else:
                found = _witness(tokens_of(later), tokens_of(earlier))
            if found is not None:
                yield later, earlier, found
        by_prefix.add(later, prefix, starred)
        by_suffix.add(later, suffix, starred)


def _candidates(
    by_prefix: _FixedEnds,
    by_suffix: _FixedEnds,
    prefix: Sequence[_Position],
    suffix: Sequence[_Position],
    starred: bool,
) -> list[int]:
    """Earlier patterns that may share a name with this one, in order: the smaller of the two
    indexes' answers (each a superset of the partners)."""
    _, pieces = min(
        by_prefix.agreeing(prefix, starred),
        by_suffix.agreeing(suffix, starred),
        key=lambda answer: answer[0],
    )
    found: list[int] = []
    for piece in pieces:
        found.extend(piece.indices() if isinstance(piece, _Node) else piece)
    return sorted(found)
