"""Hypothesis profiles. Under CI (`.ci/run` sets CI=true) the `ci` profile tests the same
examples on every run: a failure there is reproduced from the log alone, and the suite's time
does not vary with the draw. Elsewhere each run draws anew and keeps what failed in
.hypothesis/. HYPOTHESIS_PROFILE=ci (or default) chooses either by name."""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if _CI else "default"))
