"""RAPPOR's permanent epsilon: the default, and the accepted range at its edges.

The permanent epsilon bounds what any number of reports of one value reveal; it must exceed the
per-report epsilon and is capped at 4 x the largest per-report epsilon (64).
"""

from __future__ import annotations

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import MAX_EPSILON, RapporUnary

LABELS = ("a", "b", "c")


def test_default_permanent_epsilon_is_four_times_epsilon_capped() -> None:
    assert RapporUnary(epsilon=1.0, domain=LABELS).params()["epsilon_permanent"] == 4.0
    top = RapporUnary(epsilon=MAX_EPSILON, domain=LABELS)
    assert top.params()["epsilon_permanent"] == 4 * MAX_EPSILON == 64.0


def test_permanent_epsilon_range_at_its_edges() -> None:
    assert RapporUnary(epsilon=2.0, domain=LABELS, epsilon_permanent=64.0).permanent_epsilon <= 64
    for bad in (64.0 * (1 + 1e-12), 65.0, 2.0, 1.5, float("inf"), True):
        with pytest.raises(InvalidParameter, match="epsilon_permanent"):
            RapporUnary(epsilon=2.0, domain=LABELS, epsilon_permanent=bad)
