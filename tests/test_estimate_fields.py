"""Every public field of an Estimate against its formula, on a tally given by hand.

The tallies here are fixed numbers, not samples, so each field has one right value: the tests
compare with the closed forms of docs/AGGREGATOR.md computed independently (Fractions or plain
floats), which catches a swapped operator anywhere between the tally and the served JSON.
"""

from __future__ import annotations

import json
import math
from statistics import NormalDist

import numpy as np
import pytest

from aggregator import Estimate, NotEnoughReports, debias, estimate, z_value
from aggregator.estimate import bonferroni_z, upper_z
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, create

LABELS = ("alpha", "beta", "gamma", "delta")


def _tally(n: int, support: list[int]) -> Tally:
    return Tally(n, np.array(support, dtype=np.int64))


@pytest.fixture(params=["grr", "oue", "sue", "olh", "hr", "ss"])
def fitted(request: pytest.FixtureRequest) -> tuple[object, Tally, Estimate]:
    mech = create(request.param, epsilon=1.3, domain=LABELS)
    tally = _tally(1000, [520, 180, 333, 17])
    return mech, tally, estimate(mech, tally)


def test_counts_are_the_debiased_support(fitted: tuple) -> None:
    mech, tally, est = fitted
    p, q = mech.p_star, mech.q_star
    expected = [(c - 1000 * q) / (p - q) for c in tally.support.tolist()]
    assert est.counts.tolist() == pytest.approx(expected, rel=1e-12)
    assert debias(mech, tally).tolist() == pytest.approx(expected, rel=1e-12)


def test_plugin_std_error_is_the_empirical_support_formula(fitted: tuple) -> None:
    mech, tally, est = fitted
    n = tally.n
    gap = mech.p_star - mech.q_star
    expected = [math.sqrt(c * (n - c) / (n * gap * gap)) for c in tally.support.tolist()]
    assert est.plugin_std_errors.tolist() == pytest.approx(expected, rel=1e-12)
    # The same numbers reach the JSON every analyst reads.
    served = [row["plugin_std_error"] for row in est.to_dict()["values"]]
    assert served == pytest.approx(expected, rel=1e-12)


def test_std_error_is_the_closed_form_variance_at_the_clamped_count(fitted: tuple) -> None:
    mech, tally, est = fitted
    n = tally.n
    for i, count in enumerate(est.counts.tolist()):
        clamped = min(max(count, 0.0), n)
        variance = n * mech.v0 + mech.beta * clamped
        assert est.std_errors[i] == pytest.approx(math.sqrt(max(variance, 0.0)), rel=1e-12)
    assert est.theoretical_std_error == pytest.approx(math.sqrt(n * mech.v0), rel=1e-12)


def test_frequencies_labels_and_frequency_std_errors(fitted: tuple) -> None:
    mech, tally, est = fitted
    assert est.n == 1000
    assert est.labels == LABELS == mech.domain
    assert est.frequencies.tolist() == pytest.approx((est.counts / 1000).tolist(), rel=1e-15)
    assert est.frequency_std_errors.tolist() == pytest.approx(
        (est.std_errors / 1000).tolist(), rel=1e-15
    )


def test_ci_is_symmetric_at_the_normal_quantile(fitted: tuple) -> None:
    _, _, est = fitted
    for level in (0.5, 0.9, 0.95, 0.99):
        z = NormalDist().inv_cdf((1 + level) / 2)
        lo, hi = est.ci(level)
        assert (est.counts - lo).tolist() == pytest.approx((z * est.std_errors).tolist())
        assert (hi - est.counts).tolist() == pytest.approx((z * est.std_errors).tolist())
        plo, phi = est.ci(level, plugin=True)
        assert (phi - plo).tolist() == pytest.approx((2 * z * est.plugin_std_errors).tolist())


def test_to_dict_has_one_row_per_label_with_every_field(fitted: tuple) -> None:
    mech, _, est = fitted
    doc = est.to_dict(level=0.9)
    assert json.loads(json.dumps(doc)) == doc  # JSON-safe: plain floats and strings
    assert doc["n"] == 1000
    assert doc["mechanism"] == mech.name
    assert doc["epsilon"] == mech.epsilon
    assert doc["realised_epsilon"] == mech.realised_epsilon
    assert doc["level"] == 0.9
    assert doc["theoretical_std_error"] == est.theoretical_std_error
    lo, hi = est.ci(0.9)
    assert [row["value"] for row in doc["values"]] == list(LABELS)
    for i, row in enumerate(doc["values"]):
        assert row == {
            "value": LABELS[i],
            "count": float(est.counts[i]),
            "frequency": float(est.counts[i]) / 1000,
            "std_error": float(est.std_errors[i]),
            "plugin_std_error": float(est.plugin_std_errors[i]),
            "ci_low": float(lo[i]),
            "ci_high": float(hi[i]),
        }
    assert est.to_dict()["level"] == 0.95


def test_counts_outside_zero_n_keep_a_positive_error() -> None:
    # A support below n q* debiases to a negative count: the error uses the count clamped to 0,
    # and one above n p* clamps to n. Neither may give a NaN or a zero error.
    mech = create("grr", epsilon=2.0, domain=LABELS)
    est = estimate(mech, _tally(200, [0, 200, 100, 0]))
    assert est.counts[0] < 0 < est.counts[1] - 200
    assert np.isfinite(est.std_errors).all() and (est.std_errors > 0).all()
    at_zero = math.sqrt(200 * mech.v0)
    at_n = math.sqrt(200 * mech.v0 + mech.beta * 200)
    assert est.std_errors[0] == pytest.approx(at_zero, rel=1e-12)
    assert est.std_errors[1] == pytest.approx(at_n, rel=1e-12)
    assert est.plugin_std_errors[0] == 0.0 == est.plugin_std_errors[1]


def test_refusals_are_clear() -> None:
    mech = create("oue", epsilon=1.0, domain=LABELS)
    with pytest.raises(NotEnoughReports):
        estimate(mech, Tally.empty(4))
    with pytest.raises(NotEnoughReports):
        estimate(mech, _tally(5, [1, 1, 1, 1]), min_reports=6)
    assert estimate(mech, _tally(6, [1, 1, 1, 1]), min_reports=6).n == 6
    with pytest.raises(NotEnoughReports):  # no reports is never enough
        estimate(mech, Tally.empty(4), min_reports=0)
    with pytest.raises(InvalidParameter, match="3 counts"):
        estimate(mech, _tally(5, [1, 1, 1]))
    with pytest.raises(InvalidParameter, match="Mechanism"):
        estimate("oue", _tally(5, [1, 1, 1, 1]))  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter, match="Tally"):
        estimate(mech, [5, 1, 1, 1, 1])  # type: ignore[arg-type]


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, True, "0.9", float("nan")])
def test_z_value_refuses_levels_outside_zero_one(level: object) -> None:
    with pytest.raises(InvalidParameter):
        z_value(level)  # type: ignore[arg-type]


def test_z_value_is_the_two_sided_quantile() -> None:
    assert z_value(0.95) == pytest.approx(1.959963984540054, rel=1e-12)
    assert z_value(0.5) == pytest.approx(0.6744897501960817, rel=1e-12)


def test_quantiles_at_levels_within_2_to_the_minus_53_of_0_and_1() -> None:
    """0.5 + level/2 and 1 - (1 - level)/m round to 1 (or 1 - level to 1) next to the ends of
    (0, 1); the normal quantile of 0 or 1 raised StatisticsError, a 500 on every estimate."""
    top = math.nextafter(1.0, 0.0)  # 1 - 2**-53
    assert 0.5 + top / 2 == 1.0 and 1 - (1 - top) / 14 == 1.0  # what used to fail
    assert z_value(top) == pytest.approx(-NormalDist().inv_cdf(2**-54), rel=1e-12)
    assert z_value(top) == pytest.approx(8.29236107581, rel=1e-9)
    assert upper_z(2**-60) == pytest.approx(-NormalDist().inv_cdf(2**-60), rel=1e-12)
    assert bonferroni_z(top, 14) == pytest.approx(-NormalDist().inv_cdf(2**-53 / 14), rel=1e-9)
    for tiny in (1e-17, 5e-324):  # 1 - level is 1.0: with one test z = inv_cdf(level)
        assert bonferroni_z(tiny, 1) == NormalDist().inv_cdf(tiny)
        assert z_value(tiny) == pytest.approx(0.0, abs=1e-15)
    # Elsewhere the old formulas, to the last bit (answers stay identical).
    for level in (0.5, 0.9, 0.95, 0.99, 1e-3):
        assert z_value(level) == NormalDist().inv_cdf(0.5 + level / 2)
        for m in (1, 2, 14, 500):
            assert bonferroni_z(level, m) == NormalDist().inv_cdf(1 - (1 - level) / m)
            assert upper_z((1 - level) / m) == bonferroni_z(level, m)


def test_options_are_keyword_only() -> None:
    # estimate(m, t, 5) or est.ci(0.9, True) would silently mean something else if positional.
    mech = create("grr", epsilon=1.0, domain=LABELS)
    tally = _tally(10, [4, 3, 2, 1])
    with pytest.raises(TypeError):
        estimate(mech, tally, 5)  # type: ignore[misc]
    est = estimate(mechanism=mech, tally=tally, min_reports=5)
    with pytest.raises(TypeError):
        est.ci(0.9, True)  # type: ignore[misc]
    assert est.ci(level=0.9, plugin=True)[0].shape == (4,)


def test_estimates_compare_by_identity_and_hash() -> None:
    # Field-wise equality would compare numpy arrays (an "ambiguous truth value" error) and
    # make estimates unhashable; an Estimate is one computation, equal only to itself.
    mech = create("oue", epsilon=1.0, domain=LABELS)
    tally = _tally(10, [4, 3, 2, 1])
    a, b = estimate(mech, tally), estimate(mech, tally)
    assert a == a and a != b
    assert len({a, b, a}) == 2
