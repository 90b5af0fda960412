import fnmatch

from hypothesis import given, settings
from hypothesis import strategies as st

from quotaguard.policy.globs import globs_intersect, witness

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
