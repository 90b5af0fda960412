import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.globs import globs_intersect, overlapping_pairs, witness

pattern = st.text(alphabet="ab-*?", min_size=0, max_size=6)


@settings(max_examples=300)
@given(pattern, pattern)
def test_witness_matches_both_patterns(a: str, b: str) -> None:
    found = witness(a, b)
    if found is not None:
        assert fnmatch.fnmatchcase(found, a) and fnmatch.fnmatchcase(found, b)


@settings(max_examples=300)
@given(pattern, pattern, st.text(alphabet="ab-", max_size=6))
def test_no_common_name_is_missed(a: str, b: str, name: str) -> None:
    if fnmatch.fnmatchcase(name, a) and fnmatch.fnmatchcase(name, b):
        assert globs_intersect(a, b)


def test_classes() -> None:
    assert globs_intersect("team-[a-c]", "team-b")
    assert not globs_intersect("team-[!a-c]", "team-b")


# The whole bracket syntax: negation, "]" first in a class, ranges (also empty ones), an
# unclosed "[", and characters outside the DNS alphabet.
hostile_pattern = st.text(alphabet="ab-*?[]!z^\\", min_size=0, max_size=7)
hostile_name = st.text(alphabet="ab-]![z^\\c", max_size=6)


@settings(max_examples=1500)
@given(hostile_pattern, hostile_pattern, hostile_name)
def test_intersection_is_exactly_fnmatchs(a: str, b: str, name: str) -> None:
    found = witness(a, b)
    if found is not None:
        assert fnmatch.fnmatchcase(found, a) and fnmatch.fnmatchcase(found, b), found
    if fnmatch.fnmatchcase(name, a) and fnmatch.fnmatchcase(name, b):
        assert found is not None


@settings(max_examples=300)
@given(st.lists(hostile_pattern, max_size=8))
def test_overlapping_pairs_are_every_intersecting_pair(patterns: list[str]) -> None:
    expected = {
        (later, earlier)
        for later in range(len(patterns))
        for earlier in range(later)
        if globs_intersect(patterns[later], patterns[earlier])
    }
    found = list(overlapping_pairs(patterns))
    assert {(later, earlier) for later, earlier, _ in found} == expected
    for later, earlier, name in found:
        assert fnmatch.fnmatchcase(name, patterns[later])
        assert fnmatch.fnmatchcase(name, patterns[earlier])


def test_a_negated_class_of_a_closing_bracket_is_read_as_fnmatch_reads_it() -> None:
    # fnmatch reads "[!]]" as "any character but ]": it matches "team-a".
    assert witness("team-[!]]", "team-a") == "team-a"
    assert not globs_intersect("team-[!]]", "team-]")
    assert witness("team-[]a]", "team-]") == "team-]"
    assert not globs_intersect("team-[z-a]", "team-*")  # an empty range matches nothing
    assert witness("team-[a", "team-[*") == "team-[a"  # no closing bracket: a literal "["


def test_many_literal_and_prefixed_patterns_are_compared_only_where_they_can_meet() -> None:
    patterns = [f"team-{i}" for i in range(3000)] + ["team-1*", "*-2999"]
    pairs = {(later, earlier) for later, earlier, _ in overlapping_pairs(patterns)}
    # team-1, team-10..19, team-100..199, team-1000..1999 under "team-1*"; team-2999 under "*-2999".
    assert len(pairs) == 1 + 10 + 100 + 1000 + 1 + 1


def test_classes_and_question_marks_at_the_ends_narrow_the_comparisons(monkeypatch) -> None:
    """Fixed ends of classes and `?` are indexed as literals are: 3,000 such tenants cost a
    few thousand pattern comparisons, not the 4.5 million of every pair."""
    from quotaguard.policy import globs

    compared = [0]
    witness_of = globs._witness

    def counting(left, right):  # type: ignore[no-untyped-def]
        compared[0] += 1
        return witness_of(left, right)

    monkeypatch.setattr(globs, "_witness", counting)
    patterns = [f"[tT]eam-{i}-*" for i in range(1000)]
    patterns += [f"?team-{i}-[ab]" for i in range(1000)]
    patterns += ["?team-7-a", "[Tt]eam-5*"]
    pairs = {(later, earlier) for later, earlier, _ in overlapping_pairs(patterns)}
    fives = [i for i in range(1000) if str(i).startswith("5")]  # 5, 50..59, 500..599
    assert pairs == {(2000, 1007)} | {(2001, i) for i in fives}
    assert compared[0] < 5 * len(patterns)
