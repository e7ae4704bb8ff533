"""bench/js_explore.py: the two-group James-Stein estimator does what its docstring says.

Its figures are quoted in docs/AGGREGATOR.md as a measured negative result, so the estimator
behind them is checked: counts summing to n, never negative, ``base`` untouched below four
qualifying values, and the shrinkage factor exactly the positive-part James-Stein one.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np
import pytest

from tests.support.bench import bench_module


@pytest.fixture(scope="module")
def js() -> ModuleType:
    return bench_module("js_explore")


def test_below_four_values_in_the_group_base_is_returned(js: ModuleType) -> None:
    base = np.array([5000.0, 4000.0, 900.0, 100.0, 0.0])
    raw = base + np.array([30.0, -20.0, 10.0, -5.0, -40.0])
    se = np.full(5, 400.0)  # only 5000 and 4000 exceed 3 standard errors
    out = js.two_group_js(raw, se, base, 10_000, 3.0)
    np.testing.assert_array_equal(out, base)


def test_the_group_is_shrunk_by_the_james_stein_factor(js: ModuleType) -> None:
    n = 20_000
    raw = np.array([4200.0, 3900.0, 4100.0, 3800.0, 4000.0, 20.0])
    base = raw.copy()
    base[-1] = 0.0
    se = np.full(6, 100.0)
    out = js.two_group_js(raw, se, base, n, 2.0)
    group = raw[:5]
    centre = group.mean()
    factor = 1 - (5 - 3) * 100.0**2 / np.sum((group - centre) ** 2)
    shrunk = centre + factor * (group - centre)
    shrunk += (n - shrunk.sum() - 0.0) / 5
    expected = np.append(shrunk, 0.0)
    expected *= n / expected.sum()
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    assert 0 < factor < 1
    # shrinkage keeps the order of the group and narrows its spread
    assert np.std(out[:5]) == pytest.approx(factor * np.std(group), rel=1e-9)


def test_counts_sum_to_n_and_are_never_negative(js: ModuleType) -> None:
    rng = np.random.default_rng(3)
    n = 30_000
    for _ in range(200):
        truth = rng.dirichlet(np.full(12, 0.7)) * n
        se = rng.uniform(50, 700, 12)
        raw = truth + rng.normal(0, se)
        base = np.maximum(raw, 0.0)
        base *= n / base.sum()
        out = js.two_group_js(raw, se, base, n, 2.0)
        assert out.min() >= 0
        assert out.sum() == pytest.approx(n, rel=1e-12)
