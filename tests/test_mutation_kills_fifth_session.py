"""Kill tests for the survivors of the fifth session's mutation runs (docs/MUTATION.md).

* ``multi/mechanism.py``: every pair component of an SPL report is perturbed from its joint
  index (``j >= len(attributes)``, not only the first pair's), and the exact output law of a
  categorical pair is taken at the joint index ``ia * kb + ib``.
* ``longitudinal.py``: rappor's exact output law keeps each true bit with probability
  ``p* = a / 2**128`` (a Fraction, not a floor division to 0).
* ``aggregator/estimate.py``: an estimate's repr leaves its arrays out.
* ``aggregator/postprocess.py``: SQUAREM's EM step keeps a value nobody supports at 0.
* ``aggregator/openended.py``: an empty prefix is not inside a character; a discovery's
  ``alpha`` is ``1 - level``, its ``sigma0`` counts the last level's reports, and it keeps
  ``3 * top`` candidates (at least 48) by default.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from client_sdk.mechanisms import create
from client_sdk.mechanisms.multi import create as create_multi

ATTRS = {"a": ["x", "y"], "b": ["p", "q", "r"], "c": ["u", "v"]}


def test_every_pair_component_of_an_spl_report_is_perturbed_from_its_joint_index() -> None:
    mech = create_multi("spl", epsilon=3.0, attributes=ATTRS, pairs=[["a", "b"], ["a", "c"]])
    width = len(ATTRS)
    for record in ({"a": "y", "b": "r", "c": "v"}, {"a": "x", "b": "p", "c": "u"}):
        report = mech.perturb(record)
        assert len(report) == width + 2
        for j in (width, width + 1):  # both pair components: indices into the joint domain
            pair = mech.mechanisms[j]
            assert pair.check_payload(report[j]) is not None


def test_a_categorical_pairs_exact_law_is_at_the_joint_index() -> None:
    mech = create_multi("spl", epsilon=3.0, attributes=ATTRS, pairs=[["a", "b"]])
    width = len(ATTRS)
    pair = mech.mechanisms[width]
    for ia, ib in ((1, 2), (1, 0), (0, 2)):
        law = mech.output_distribution([ia, ib, 0])
        # The pair's marginal of the whole report's law is its own law at ia * 3 + ib.
        marginal: dict[object, Fraction] = {}
        for key, prob in law.items():
            marginal[key[width]] = marginal.get(key[width], Fraction(0)) + prob
        assert marginal == pair.output_distribution(ia * 3 + ib), (ia, ib)


def test_rappor_exact_law_keeps_each_true_bit_with_p_star() -> None:
    mech = create("rappor", epsilon=1.0, domain=["a", "b", "c"])
    law = mech.output_distribution(1)
    assert sum(law.values()) == 1
    kept = sum(prob for key, prob in law.items() if _bit(key, 1))
    assert kept == Fraction(
        mech._effective_numerator(mech.threshold_permanent, mech.threshold_instant),
        2**128,
    )
    assert abs(float(kept) - mech.p_star) < 1e-15 and 0.5 < kept < 1


def _bit(key: object, i: int) -> int:
    """Bit ``i`` of an output key (a tuple of bits or an integer bit mask)."""
    if isinstance(key, tuple):
        return int(key[i])
    assert isinstance(key, int)
    return (key >> i) & 1


# -- run 2: aggregator/estimate.py, postprocess.py, openended.py ---------------------------------


def test_an_estimates_repr_leaves_the_arrays_out() -> None:
    from aggregator import estimate
    from client_sdk.mechanisms import Tally

    mech = create("grr", epsilon=1.0, domain=["a", "b", "c"])
    text = repr(estimate(mech, Tally(30, np.array([12, 10, 8]))))
    assert "std_errors" not in text and "counts=" not in text


def test_squarem_with_a_value_nobody_supports_stays_a_distribution() -> None:
    """A zero support count keeps its value at 0 under EM (``x * d c / (q + d x)``); a step
    that is not proportional to ``c`` pushes mass there and breaks the simplex."""
    from aggregator.postprocess import _squarem, water_filling

    mech = create("grr", epsilon=1.0, domain=4)
    c = np.array([400.0, 250.0, 0.0, 90.0])
    q, d = mech.q_star, mech.p_star - mech.q_star
    exact = water_filling(c, q / d)
    assert exact is not None
    f, _, converged, _ = _squarem(c, q, d, np.full(4, 0.25), tol=1e-8, max_iterations=10_000)
    assert converged and f.min() >= 0
    np.testing.assert_allclose(f, exact, atol=1e-6)


def test_a_prefix_of_no_bytes_does_not_end_inside_a_character() -> None:
    from aggregator.openended import _inside_character

    assert _inside_character(b"") is False
    assert _inside_character(b"\x80\x80") is False  # continuation bytes only: no lead byte
    assert _inside_character("é".encode()[:1]) is True


def _pem_discovery(top: int, **kw: object) -> object:
    import aggregator

    mech = create("pem", epsilon=4.0, max_length=2, width=64, depth=4)
    words = ["ab", "ac", "ba", "bb", "ca", "cd", "da", "dd"]
    tally = mech.tally(mech.perturb_many([words[i % 8] for i in range(4000)], rng=5))
    return mech, tally, aggregator.discover(mech, tally, top=top, **kw)


def test_a_discoverys_alpha_is_one_minus_its_level() -> None:
    _, _, found = _pem_discovery(2, level=0.9)
    assert found.alpha == pytest.approx(0.1, rel=1e-12)  # type: ignore[attr-defined]


def test_a_discoverys_sigma0_counts_the_last_levels_reports() -> None:
    import math

    mech, tally, found = _pem_discovery(2)
    last, blocks = mech.sketches[-1], len(mech.sketches)  # type: ignore[attr-defined]
    n_last = last.reports_in(mech.block(tally.counts, blocks - 1))  # type: ignore[attr-defined]
    n_first = mech.sketches[0].reports_in(mech.block(tally.counts, 0))  # type: ignore[attr-defined]
    assert n_last != n_first  # the levels' report counts differ: the test can tell them apart
    w = last.width
    want = math.sqrt((w / (w - 1)) ** 2 * n_last * last.v_other) * tally.n / n_last
    assert found.sigma0 == pytest.approx(want, rel=1e-12)  # type: ignore[attr-defined]


def test_discovery_keeps_three_candidates_per_answer_by_default() -> None:
    _, _, default = _pem_discovery(20)
    _, _, three = _pem_discovery(20, keep=60)
    _, _, four = _pem_discovery(20, keep=80)
    tested = default.candidates_tested  # type: ignore[attr-defined]
    assert tested == three.candidates_tested != four.candidates_tested  # type: ignore[attr-defined]
