"""Hypothesis profiles: "ci" (./dev test) runs the same cases every time; "long" (./dev fuzz) runs
over 10,000 cases through tests/test_fuzz.py. Neither has a deadline: a loaded machine is not a failure.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

for _profile, _examples in (("ci", 60), ("long", 2200)):
    settings.register_profile(
        _profile,
        max_examples=_examples,
        deadline=None,
        derandomize=_profile == "ci",
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example],
    )
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
"""The profile this run uses (``HYPOTHESIS_PROFILE``, default ``ci``)."""
