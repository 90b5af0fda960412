"""Whether two shell-style namespace patterns can match the same name.

Two tenants whose `namespaces` could both claim one namespace make ownership ambiguous, so the
policy checker needs glob intersection, not just equality. Patterns support `*`, `?` and
`[...]` classes (with `!` negation), as `fnmatch` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

# Namespaces are DNS labels: the alphabet is small enough to pick witness characters from.
_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789-"


@dataclass(frozen=True, slots=True)
class _Token:
    star: bool
    chars: frozenset[str]  # characters one position may hold (ignored for star)


def _tokens(pattern: str) -> tuple[_Token, ...]:
    tokens: list[_Token] = []
    i = 0
    everything = frozenset(_ALPHABET)
    while i < len(pattern):
        char = pattern[i]
        if char == "*":
            if not (tokens and tokens[-1].star):
                tokens.append(_Token(True, everything))
        elif char == "?":
            tokens.append(_Token(False, everything))
        elif char == "[" and "]" in pattern[i + 2 :]:
            end = pattern.index("]", i + 2)
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = body[1:] if negate else body
            members: set[str] = set()
            j = 0
            while j < len(body):
                if j + 2 < len(body) and body[j + 1] == "-":
                    members.update(chr(c) for c in range(ord(body[j]), ord(body[j + 2]) + 1))
                    j += 3
                else:
                    members.add(body[j])
                    j += 1
            chars = everything - members if negate else frozenset(members)
            tokens.append(_Token(False, chars))
            i = end
        else:
            tokens.append(_Token(False, frozenset(char)))
        i += 1
    return tuple(tokens)


def witness(a: str, b: str) -> str | None:
    """A name both patterns match, or None when there is none."""
    left, right = _tokens(a), _tokens(b)

    @cache
    def search(i: int, j: int) -> str | None:
        if i == len(left) and j == len(right):
            return ""
        if i < len(left) and left[i].star:
            found = search(i + 1, j)
            if found is not None:
                return found
            if j < len(right):
                char = _pick(right[j].chars)
                rest = search(i, j + 1)
                if rest is not None:
                    return ("" if right[j].star else char) + rest
            return None
        if j < len(right) and right[j].star:
            found = search(i, j + 1)
            if found is not None:
                return found
            if i < len(left):
                rest = search(i + 1, j)
                if rest is not None:
                    return _pick(left[i].chars) + rest
            return None
        if i < len(left) and j < len(right):
            common = left[i].chars & right[j].chars
            if common:
                rest = search(i + 1, j + 1)
                if rest is not None:
                    return _pick(common) + rest
        return None

    return search(0, 0)


def _pick(chars: frozenset[str]) -> str:
    return min(chars) if chars else "?"


def globs_intersect(a: str, b: str) -> bool:
    return witness(a, b) is not None
