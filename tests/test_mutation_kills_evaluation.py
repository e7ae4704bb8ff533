"""The figures of ``aggregator/evaluation.py`` checked against values found another way.

The benchmark (``bench/estimate.py``) and the accuracy tests quote these figures, so each is
recomputed here: the reduction's delta-method standard error and the paired z in exact rational
arithmetic, ``method_errors``'s MSEs and ``stream_errors``'s MSEs, coverage and delays by a plain
cell-by-cell reimplementation fed the same seeded draws, and a noiseless stream whose figures
are known by hand. Mutation testing (docs/MUTATION.md) showed that no test read them directly.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest

from aggregator.estimate import Estimate, estimate
from aggregator.evaluation import MethodErrors, method_errors, sample_tally, stream_errors
from aggregator.postprocess import postprocess
from aggregator.query import smooth_trend, trend_rows
from client_sdk.mechanisms import GeneralizedRR, Mechanism, create

U = 2.0**-53  # unit roundoff of a float64
# A sum of N non-negative floats taken in another order differs by at most about N·U relative;
# the sums below have at most a few dozen terms, so 64·U bounds the difference.
SUM_RTOL = 64 * U


# -- MethodErrors: reduction and paired test in exact arithmetic ----------------------------


def _mean(xs: Sequence[Fraction]) -> Fraction:
    return sum(xs, Fraction(0)) / len(xs)


def _cov(xs: Sequence[Fraction], ys: Sequence[Fraction]) -> Fraction:
    mx, my = _mean(xs), _mean(ys)
    return sum(((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)), Fraction(0)) / (
        len(xs) - 1
    )


A = [1.0, 2.0, 1.5, 2.75, 0.5]  # the method's MSE per repetition
B = [2.0, 4.0, 2.5, 3.0, 1.25]  # the baseline's, paired (cov(A, B) != 0, ratio != 1)


def test_reduction_is_one_minus_the_ratio_with_the_delta_method_error() -> None:
    res = MethodErrors("grr", 1.0, 10, {"none": np.array(B), "mle": np.array(A)})
    a = [Fraction(x) for x in A]
    b = [Fraction(x) for x in B]
    reps = len(a)
    ma, mb = _mean(a), _mean(b)
    r = ma / mb
    # Var(ma/mb) ≈ (Var ma − 2 r Cov(ma, mb) + r² Var mb) / mb², with Var ma = s_a² / reps.
    var = (_cov(a, a) - 2 * r * _cov(a, b) + r**2 * _cov(b, b)) / reps / mb**2
    assert var > 0
    reduction, se = res.reduction("mle")
    # About 20 float operations, each within U: 64·U bounds the relative difference.
    assert reduction == pytest.approx(float(1 - r), rel=SUM_RTOL, abs=0)
    assert se == pytest.approx(math.sqrt(var), rel=SUM_RTOL, abs=0)
    # The baseline is a parameter: the reduction of the baseline against the method.
    back, _ = res.reduction("none", baseline="mle")
    assert back == pytest.approx(float(1 - 1 / r), rel=SUM_RTOL, abs=0)


@pytest.mark.parametrize("fraction", [0.0, 0.3, 0.9])
def test_paired_test_is_the_z_of_the_paired_difference(fraction: float) -> None:
    res = MethodErrors("grr", 1.0, 10, {"none": np.array(B), "mle": np.array(A)})
    f = Fraction(fraction)
    diff = [(1 - f) * Fraction(b) - Fraction(a) for a, b in zip(A, B, strict=True)]
    z = float(_mean(diff)) / math.sqrt(float(_cov(diff, diff)) / len(diff))
    assert res.paired_test("mle", fraction) == pytest.approx(z, rel=SUM_RTOL, abs=0)


def test_paired_test_without_spread_is_infinite_with_the_sign_of_the_mean() -> None:
    up = MethodErrors("grr", 1.0, 10, {"none": np.full(4, 2.0), "mle": np.full(4, 1.0)})
    assert up.paired_test("mle", 0.0) == math.inf  # 2 − 1 > 0 on every repetition
    assert up.paired_test("mle", 0.75) == -math.inf  # 0.25·2 − 1 < 0 on every repetition


# -- method_errors: the MSE of every method on the same seeded draws -------------------------


def test_method_errors_scores_each_method_by_its_mean_squared_error() -> None:
    mech = create("grr", epsilon=1.0, domain=4)
    true_indices = np.repeat(np.arange(4), [90, 60, 30, 20])
    methods = ("none", "norm-sub")

    def blend(est: Estimate, freqs: dict[str, np.ndarray]) -> np.ndarray:
        return 0.5 * (freqs["none"] + est.counts / est.n)

    res = method_errors(
        mech, true_indices, repetitions=3, seed=11, methods=methods, extra={"blend": blend}
    )
    assert (res.mechanism, res.epsilon, res.n) == ("grr", 1.0, 200)
    assert set(res.mse) == {"none", "norm-sub", "blend"}
    truth = [c / 200 for c in (90, 60, 30, 20)]
    rng = np.random.default_rng(11)  # the same draws, in the same order
    expected: dict[str, list[float]] = {m: [] for m in res.mse}
    for _ in range(3):
        tally = mech.tally(mech.perturb_many(true_indices, rng=rng))
        est = estimate(mech, tally)
        freqs = {m: postprocess(est, m).counts / tally.n for m in methods}
        freqs["blend"] = blend(est, freqs)
        for m, f in freqs.items():
            expected[m].append(sum((float(f[v]) - truth[v]) ** 2 for v in range(4)) / 4)
    for m, values in expected.items():
        assert all(v > 0 for v in values)
        np.testing.assert_allclose(res.mse[m], values, rtol=SUM_RTOL, atol=0)


# -- stream_errors: a plain reimplementation on the same draws -------------------------------


def _stream_reference(
    mech: Mechanism,
    before: np.ndarray,
    after: np.ndarray | None,
    *,
    windows: int,
    step_at: int,
    reports: int,
    repetitions: int,
    seed: int,
) -> tuple[list[float], list[float], float, float, list[int | None], list[int | None]]:
    """What the docstring of ``stream_errors`` says, cell by cell, drawing in the same order."""
    k = mech.k
    old = [float(x) for x in before / before.sum()]
    new = None if after is None else [float(x) for x in after / after.sum()]
    rng = np.random.default_rng(seed)
    raw_sq = [0.0] * windows
    smooth_sq = [0.0] * windows
    covered_raw = covered_smooth = 0
    delays_raw: list[int | None] = []
    delays_smooth: list[int | None] = []
    for _ in range(repetitions):
        truth = []
        tallies = {}
        for t in range(windows):
            level = new if new is not None and t >= step_at else old
            counts = rng.multinomial(reports, level)
            truth.append([int(c) / reports for c in counts])
            tallies[f"w{t:04d}"] = sample_tally(mech, counts, rng)
        rows = trend_rows(mech, tallies, 1)
        sm = smooth_trend(rows)
        assert sm is not None
        for t in range(windows):
            for v in range(k):
                raw, se = rows[t]["frequencies"][v], rows[t]["std_errors"][v]
                mean, sd = float(sm.mean[t, v]), float(sm.std_error[t, v])
                raw_sq[t] += (raw - truth[t][v]) ** 2 / k
                smooth_sq[t] += (mean - truth[t][v]) ** 2 / k
                covered_raw += abs(raw - truth[t][v]) <= 1.96 * se
                covered_smooth += abs(mean - truth[t][v]) <= 1.96 * sd
        if new is None:
            continue
        moved = max(range(k), key=lambda v: (abs(new[v] - old[v]), -v))  # first of the largest
        sign = 1.0 if new[moved] > old[moved] else -1.0
        for out, est, err in (
            (
                delays_raw,
                [r["frequencies"][moved] for r in rows],
                [r["std_errors"][moved] for r in rows],
            ),
            (delays_smooth, list(sm.filtered[:, moved]), list(sm.filtered_std_error[:, moved])),
        ):
            out.append(
                next(
                    (
                        t - step_at
                        for t in range(step_at, windows)
                        if sign * (est[t] - old[moved]) > 1.96 * err[t]
                    ),
                    None,
                )
            )
    cells = repetitions * windows * k
    return (
        [x / repetitions for x in raw_sq],
        [x / repetitions for x in smooth_sq],
        covered_raw / cells,
        covered_smooth / cells,
        delays_raw,
        delays_smooth,
    )


@pytest.mark.parametrize(
    ("name", "after"),
    [
        ("grr", None),  # stationary: no step, no delays
        ("grr", np.array([4.5, 4.0, 1.5])),  # value 0 falls by 0.15, about 2.7 standard errors
        ("oue", np.array([4.0, 2.0, 4.0])),  # value 2 rises by 0.3
    ],
)
def test_stream_errors_matches_a_plain_reimplementation(
    name: str, after: np.ndarray | None
) -> None:
    mech = create(name, epsilon=1.0, domain=3)
    before = np.array([6.0, 3.0, 1.0])
    args = {"windows": 8, "step_at": 3, "reports": 400, "repetitions": 4, "seed": 5}
    res = stream_errors(mech, before, after, **args)  # type: ignore[arg-type]
    raw_mse, smooth_mse, raw_cov, smooth_cov, raw_delays, smooth_delays = _stream_reference(
        mech, before, after, **args
    )
    np.testing.assert_allclose(res.raw_mse, raw_mse, rtol=SUM_RTOL, atol=0)
    np.testing.assert_allclose(res.smoothed_mse, smooth_mse, rtol=SUM_RTOL, atol=0)
    assert res.ratio == pytest.approx(np.mean(smooth_mse) / np.mean(raw_mse), rel=SUM_RTOL)
    assert (res.raw_coverage, res.smoothed_coverage) == (raw_cov, smooth_cov)
    assert (res.raw_delays, res.smoothed_delays) == (tuple(raw_delays), tuple(smooth_delays))
    assert len(res.raw_delays) == (0 if after is None else 4)
    assert 0.5 < raw_cov < 1.0 and 0.5 < smooth_cov <= 1.0  # neither all in nor all out


def test_stream_delays_vary_in_the_reimplementation_check() -> None:
    """The step case above is not trivial: the delays differ between repetitions and methods,
    so taking another element of the detection list, or another sign, changes them."""
    mech = create("grr", epsilon=1.0, domain=3)
    res = stream_errors(
        mech,
        np.array([6.0, 3.0, 1.0]),
        np.array([4.5, 4.0, 1.5]),
        windows=8,
        step_at=3,
        reports=400,
        repetitions=4,
        seed=5,
    )
    assert len(set(res.raw_delays) | set(res.smoothed_delays)) >= 2, res


# -- a noiseless stream: the figures are known by hand --------------------------------------


class _Noiseless(GeneralizedRR):
    """GRR with p* = 1, q* = 0: every report is the device's value, so each window's estimate
    is its true frequency, with standard error 0 (the degenerate case the smoother allows)."""

    @property
    def p_star(self) -> float:
        return 1.0

    @property
    def q_star(self) -> float:
        return 0.0


def test_noiseless_stream_has_exact_estimates_full_coverage_and_no_delay() -> None:
    mech = _Noiseless(epsilon=1.0, domain=3)
    windows, step_at, reps = 6, 2, 3
    res = stream_errors(
        mech,
        np.array([5.0, 3.0, 2.0]),
        np.array([2.0, 4.0, 4.0]),  # value 0 falls from 0.5 to 0.2, far outside sampling noise
        windows=windows,
        step_at=step_at,
        reports=400,
        repetitions=reps,
        seed=9,
    )
    assert res.raw_mse.shape == res.smoothed_mse.shape == (windows,)
    assert (res.raw_mse == 0.0).all()  # estimate = truth in every cell
    # The interval est ± 1.96·0 = [truth, truth] holds the truth: every cell is covered.
    assert res.raw_coverage == 1.0
    assert 0.0 <= res.smoothed_coverage <= 1.0
    # The step shows in the first window after it, in every repetition.
    assert res.raw_delays == (0,) * reps
    assert len(res.smoothed_delays) == reps
