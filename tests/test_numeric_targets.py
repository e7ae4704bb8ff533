"""Issue 15's numeric targets as tests (speed lives in bench/numeric.py, not here).

* The empirical MSE of every mean mechanism matches its formula on Adult data. The estimate of
  the mean is a sum of ``n`` independent terms, so its error ``e`` is normal to within
  ``O(1/n)`` in kurtosis; for ``e ~ N(0, V)`` the empirical MSE over ``R`` repetitions has mean
  ``V`` and standard deviation ``V sqrt(2 / R)``. The tolerance is 4 of those standard
  deviations (and a test checks that a formula 1.5x off is caught).
* The vectorised band sampler's Lemire step rejects exactly the products whose low word is
  below *that element's* threshold (compared with a per-element reference).
* ``ldp simulate --scenario numeric`` runs end to end and writes its report.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from click.testing import CliRunner

from client_sdk.mechanisms.numeric import create
from client_sdk.mechanisms.numeric.band import uniform_below
from ldp_cli.main import cli
from simulator.numeric import adult_numeric, repeated_means
from simulator.numeric_scenario import NUMERIC_BOUNDS, baseline_bins

R = 800
N = 1000
Z = 4.0
MEANS = ["duchi", "1bitmean", "piecewise", "hybrid", "alpha_point", "auto"]


def sample(column: str) -> np.ndarray:
    x = adult_numeric(column)
    return np.random.default_rng(15).choice(x, N, replace=False)


def mse_within_tolerance(errors: np.ndarray, formula: float) -> tuple[bool, float, float]:
    mse = float(np.mean(errors**2))
    sd = formula * math.sqrt(2 / errors.size)
    return abs(mse - formula) <= Z * sd, mse, sd


@pytest.mark.parametrize("column", ["age", "capital-gain"])
@pytest.mark.parametrize("epsilon", [0.5, 4.0])
@pytest.mark.parametrize("name", MEANS)
def test_empirical_mse_matches_the_formula_on_adult(name: str, epsilon: float, column: str) -> None:
    bounds = NUMERIC_BOUNDS[column]
    x = sample(column)
    mech = create(name, epsilon=epsilon, bounds=bounds)
    truth = float(np.clip(x, *bounds).mean())
    errors = (
        repeated_means(mech, x, reps=R, rng=[len(name), int(epsilon * 10), len(column)]) - truth
    )
    formula = mech.mean_variance(x)  # type: ignore[attr-defined]
    ok, mse, sd = mse_within_tolerance(errors, formula)
    assert ok, f"empirical MSE {mse:.4g}, formula {formula:.4g}, sd of the estimate {sd:.3g}"
    # bias within noise: the mean error over its standard error
    assert abs(errors.mean()) <= Z * math.sqrt(formula / R)


def test_the_mse_check_catches_a_formula_off_by_half() -> None:
    x = sample("age")
    mech = create("piecewise", epsilon=1.0, bounds=NUMERIC_BOUNDS["age"])
    errors = repeated_means(mech, x, reps=R, rng=3) - float(np.clip(x, 17, 90).mean())
    formula = mech.mean_variance(x)  # type: ignore[attr-defined]
    assert mse_within_tolerance(errors, formula)[0]
    assert not mse_within_tolerance(errors, 1.5 * formula)[0]
    assert not mse_within_tolerance(errors, formula / 1.5)[0]


def reference_lemire(gen, words, bounds, thresholds) -> np.ndarray:
    """Per element: ``(u m) >> 32`` unless the low word is below the element's threshold; the
    rejected elements are redrawn in rounds, in index order (as the vectorised version draws)."""
    out = np.zeros(len(words), dtype=np.int64)
    pending = []
    for k, (u, m, t) in enumerate(zip(words, bounds, thresholds, strict=True)):
        p = int(u) * int(m)
        if p & 0xFFFFFFFF < t:
            pending.append(k)
        else:
            out[k] = p >> 32
    while pending:
        fresh = gen.bit_generator.random_raw(len(pending)) >> np.uint64(32)
        still = []
        for k, u in zip(pending, fresh.tolist(), strict=True):
            p = int(u) * int(bounds[k])
            if p & 0xFFFFFFFF < thresholds[k]:
                still.append(k)
            else:
                out[k] = p >> 32
        pending = still
    return out


@pytest.mark.parametrize("width, outside", [(39749, 65536), (17, 256), (3, 100_003), (1, 7)])
def test_lemire_rejects_by_each_elements_own_threshold(width: int, outside: int) -> None:
    gen = np.random.default_rng(width)
    n = 4000
    flag = (gen.random(n) < 0.5).astype(np.uint64)
    bound = np.where(flag == 1, width, outside).astype(np.uint64)
    # Words whose products land just above a multiple of 2**32: low words below m, so many fall
    # between the two thresholds 2**32 mod W and 2**32 mod O, where the two rules differ.
    k = gen.integers(0, bound.astype(np.int64))
    words = ((k.astype(object) << 32) + bound.astype(object) - 1) // bound.astype(object)
    words = np.array([int(w) & 0xFFFFFFFF for w in words], dtype=np.uint32)
    words[::7] = gen.integers(0, 1 << 32, words[::7].size, dtype=np.uint64).astype(np.uint32)
    thresholds = [(1 << 32) % (width if f else outside) for f in flag.tolist()]
    t1, t0 = (1 << 32) % width, (1 << 32) % outside
    got = uniform_below(np.random.default_rng(1), words, bound, (flag, t1, t0))
    expected = reference_lemire(np.random.default_rng(1), words, bound, thresholds)
    assert np.array_equal(got, expected)
    explicit = np.array(thresholds, dtype=np.uint64)
    assert np.array_equal(uniform_below(np.random.default_rng(1), words, bound, explicit), expected)
    assert (got >= 0).all() and (got < bound.astype(np.int64)).all()


def test_baseline_bins_depend_only_on_n_and_epsilon() -> None:
    bins = [baseline_bins(32561, e) for e in (0.5, 1, 2, 4, 8)]
    assert bins == sorted(bins) and all(b & (b - 1) == 0 for b in bins)
    assert baseline_bins(10**9, 8.0) == 256 and baseline_bins(10, 0.1) == 4


def test_simulate_numeric_scenario_end_to_end(tmp_path) -> None:
    out = tmp_path / "numeric"
    result = CliRunner().invoke(
        cli,
        ["simulate", "--scenario", "numeric", "-a", "age", "-e", "2", "-r", "3", "-o", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "## Means" in result.output and "square_wave" in result.output
    data = json.loads((out / "numeric.json").read_text())
    names = {r["mechanism"] for r in data["means"]}
    assert {*MEANS, "central-laplace-mean", "central-laplace-hist"} <= names
    assert {r["estimator"] for r in data["distributions"]} == {
        "square_wave",
        f"binned-{baseline_bins(32561, 2.0)}",
        "central-laplace",
    }
    assert (out / "numeric_mean_age.png").stat().st_size > 0
    assert (out / "numeric_distribution_age.png").stat().st_size > 0
    # the truth appears only as aggregates (its CDF on a grid), never as individual values
    cdf = data["examples"]["age"]["truth_cdf"]
    assert len(cdf["x"]) == 1024 and cdf["cdf"][-1] == 1.0


def test_simulate_numeric_refuses_an_unknown_column(tmp_path) -> None:
    result = CliRunner().invoke(
        cli, ["simulate", "--scenario", "numeric", "-a", "occupation", "-o", str(tmp_path)]
    )
    assert result.exit_code != 0
    assert "no numeric column 'occupation'" in result.output
