"""The open-domain answer's options and limits (``aggregator.openended_answers``, issue 21).

``top`` (the ``top`` query parameter, docs/HTTP_API.md): 1 to 200, default 10; at most 500
candidates, each a string; a range with exactly ``min_reports`` reports is answered; a
mechanism that does not say it discovers is answered as a frequency oracle.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from aggregator import NotEnoughReports
from aggregator.openended_answers import ORACLE_NOTE, check_candidates
from aggregator.results import OpenDomainEstimates
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create

#: Twelve strings each held by 6% of the devices, the rest unique: more heavy hitters than the
#: default of 10 listed.
HEAVY = [f"a{i:02d}" for i in range(12)]


def _tallies(mech: Any, n: int, seed: int) -> dict[str, Any]:
    gen = np.random.default_rng(seed)
    which = gen.choice(len(HEAVY) + 1, size=n, p=[0.06] * len(HEAVY) + [1 - 0.06 * len(HEAVY)])
    values = [HEAVY[w] if w < len(HEAVY) else f"{i:04x}" for i, w in enumerate(which.tolist())]
    half = n // 2
    return {
        "2026-11-01": mech.tally(mech.perturb_many(values[:half], rng=1)),
        "2026-11-02": mech.tally(mech.perturb_many(values[half:], rng=2)),
    }


@pytest.fixture(scope="module")
def pem() -> tuple[Any, dict[str, Any]]:
    mech = create("pem", epsilon=8.0, max_length=4, width=256, depth=8)
    return mech, _tallies(mech, 6000, 3)


def _answer(mech: Any, tallies: dict[str, Any], **query: Any) -> OpenDomainEstimates:
    answer = estimate_range(mech, tallies, EstimateQuery(**query))
    assert isinstance(answer, OpenDomainEstimates)
    return answer


def test_top_defaults_to_ten_and_takes_one_to_two_hundred(pem: tuple[Any, Any]) -> None:
    mech, tallies = pem
    answer = _answer(mech, tallies)
    assert answer.top == 10 and answer.discovers
    # More than 10 strings are significant (the 12 heavy hitters): 10 are listed.
    assert len(answer.discovered) == 10
    one = _answer(mech, tallies, top_k=1)
    assert one.top == 1 and len(one.discovered) == 1
    # 200 passes the check (the refusal then is for the reports, checked after it).
    with pytest.raises(NotEnoughReports):
        _answer(mech, tallies, top_k=200, min_reports=10**6)
    for top in (0, 201, -1):
        with pytest.raises(InvalidParameter) as info:
            _answer(mech, tallies, top_k=top)
        assert str(info.value) == f"top must be an integer in [1, 200], got {top}"


def test_exactly_min_reports_reports_are_answered(pem: tuple[Any, Any]) -> None:
    mech, tallies = pem
    assert _answer(mech, tallies, min_reports=6000).n == 6000
    with pytest.raises(NotEnoughReports):
        _answer(mech, tallies, min_reports=6001)


def test_candidates_are_at_most_500_strings() -> None:
    many = [f"c{i}" for i in range(500)]
    assert check_candidates(many) == tuple(many)
    with pytest.raises(InvalidParameter, match="at most 500 candidates per query, got 501"):
        check_candidates([*many, "one more"])
    with pytest.raises(InvalidParameter, match="a candidate is a string, got int"):
        check_candidates(["a", 3])
    with pytest.raises(InvalidParameter, match="a candidate is a string, got bytes"):
        check_candidates([b"a"])
    assert check_candidates(()) == ()


class _Undeclared:
    """A frequency oracle that does not declare ``discovers`` (a duck-typed mechanism)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        if name == "discovers":
            raise AttributeError(name)
        return getattr(self._inner, name)


def test_a_mechanism_that_does_not_say_it_discovers_is_a_frequency_oracle() -> None:
    inner = create("cms", epsilon=4.0, max_length=4)
    mech = _Undeclared(inner)
    assert not hasattr(mech, "discovers") and mech.kind == "open_domain"
    answer = _answer(mech, _tallies(inner, 400, 5))
    assert not answer.discovers and answer.discovered == [] and answer.threshold is None
    assert answer.note == ORACLE_NOTE and answer.n == 400
