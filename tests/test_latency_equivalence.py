"""The latency work changed no answer: the fast paths against main's code, bit for bit.

``tests/support/main_reference.py`` holds main's functions verbatim (the commit this work
started from). Every comparison here is exact (``np.array_equal``, ``==`` on floats, equal JSON
text), over seeded random tallies and series: every frequency mechanism, k from 2 to 41,
epsilon 0.5-4, n from 1 to 10 million, uniform, skewed, one dominant value, all-zero and
all-full support counts, windows below ``min_reports`` and missing smoother windows.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import aggregator.service as service
import aggregator.shrinkage as shrinkage
from aggregator.estimate import estimate
from aggregator.postprocess import POSTPROCESSORS, postprocess
from aggregator.query import estimate_windows
from aggregator.smooth import smooth_series
from client_sdk.mechanisms import Tally, create
from tests.support import main_reference as ref

MECHANISMS = ("grr", "oue", "olh", "ss", "hr", "sue")


def _shape(kind: str, k: int, rng: np.random.Generator) -> np.ndarray:
    if kind == "uniform":
        f = np.full(k, 1.0 / k)
    elif kind == "zipf":
        f = 1.0 / np.arange(1, k + 1) ** rng.uniform(0.5, 2.0)
    elif kind == "dominant":
        f = np.full(k, 1e-3)
        f[rng.integers(k)] = 1.0
    else:  # "sparse": most values absent
        f = np.where(rng.random(k) < 0.3, rng.random(k), 0.0)
        f[0] += 0.1
    out: np.ndarray = f / f.sum()
    return out


def _tally(mech, n: int, f: np.ndarray, rng: np.random.Generator) -> Tally:
    """Support counts near their means ``n (q* + (p*-q*) f)`` (any counts in [0, n] are a
    valid input; these reach every branch of ``auto`` quickly)."""
    p, q = mech.p_star, mech.q_star
    mean = n * (q + (p - q) * f)
    sd = np.sqrt(np.maximum(mean * (1 - mean / max(n, 1)), 0.25))
    support = np.clip(np.rint(mean + sd * rng.standard_normal(f.size)), 0, n)
    return Tally(n, support.astype(np.int64))


def _cases(count: int, seed: int) -> list[tuple[str, float, Tally]]:
    rng = np.random.default_rng(seed)
    cases = []
    for _ in range(count):
        name = str(rng.choice(MECHANISMS))
        k = int(rng.choice([2, 3, 5, 8, 14, 16, 41]))
        eps = float(rng.choice([0.5, 1.0, 2.0, 4.0]))
        n = int(rng.choice([1, 7, 100, 3_000, 30_000, 300_000, 10_000_000]))
        kind = str(rng.choice(["uniform", "zipf", "dominant", "sparse"]))
        mech = create(name, epsilon=eps, domain=k)
        cases.append((name, eps, _tally(mech, n, _shape(kind, k, rng), rng)))
    for name in ("grr", "oue"):  # edge cases: no report supporting any value, all, one value
        for k in (2, 14):
            n = 5_000
            cases.append((name, 1.0, Tally(n, np.zeros(k, dtype=np.int64))))
            cases.append((name, 1.0, Tally(n, np.full(k, n, dtype=np.int64))))
            one = np.zeros(k, dtype=np.int64)
            one[k - 1] = n
            cases.append((name, 1.0, Tally(n, one)))
    return cases


CASES = _cases(160, 20261126)


def _same_post(a, b) -> None:
    assert a.describe() == b.describe()
    assert a.counts.dtype == b.counts.dtype and np.array_equal(a.counts, b.counts)


def test_auto_eb_and_eb_joint_equal_mains_and_the_bound_never_undercuts_the_bic() -> None:
    chosen: dict[str, int] = {}
    ruled_out = 0
    for name, eps, tally in CASES:
        mech = create(name, epsilon=eps, domain=tally.k)
        est = estimate(mech, tally)
        fast = postprocess(est, "auto")
        _same_post(fast, ref._auto(est, 0.05))
        _same_post(postprocess(est, "eb"), ref._eb(est, 0.05))
        _same_post(postprocess(est, "eb-joint"), ref._eb_joint(est, 0.05))
        chosen[fast.chosen or ""] = chosen.get(fast.chosen or "", 0) + 1
        raw = est.counts / est.n
        full = ref.npmle_posterior_mean(raw, est.n, mech.v0, mech.beta)
        grid = shrinkage._npmle_grid(raw, est.n, mech.v0, mech.beta)
        # The bound is an upper bound on the BIC of main's fit, decided or not.
        assert shrinkage._pooling_bound(grid[2]) >= full.bic
        fit = shrinkage.npmle_unless_unpooled(raw, est.n, mech.v0, mech.beta)
        if fit is None:
            ruled_out += 1
            assert not full.pooled
        else:
            assert fit.bic == full.bic and fit.atoms == full.atoms
            assert np.array_equal(fit.pooled_frequencies, full.pooled_frequencies)
            assert np.array_equal(fit.weights, full.weights)
        # need_fit=True keeps the fit in the answer: main's, identically.
        kept, mains = shrinkage.auto_frequencies(est), ref.auto_frequencies(est)
        assert kept.chosen == mains.chosen and np.array_equal(kept.frequencies, mains.frequencies)
        assert kept.fit is not None and mains.fit is not None
        assert kept.fit.bic == mains.fit.bic
        lean, whole = shrinkage.eb_frequencies(est, need_fit=False), shrinkage.eb_frequencies(est)
        assert lean.pooled == whole.pooled
        assert np.array_equal(lean.frequencies, whole.frequencies)
        assert whole.fit is not None and whole.fit.bic == mains.fit.bic
    # Every branch was exercised, and the bound decided a good share of the unpooled ones.
    assert min(chosen.get(c, 0) for c in ("pooled", "flat", "mle")) >= 5, chosen
    assert ruled_out >= 40, ruled_out


@pytest.mark.parametrize("seed", range(6))
def test_smoother_equals_mains_with_missing_windows_steps_and_reports(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(25):
        t_len, k = int(rng.integers(1, 40)), int(rng.integers(1, 16))
        level = rng.random(k) * 0.3
        y = level + 0.01 * rng.standard_normal((t_len, k)).cumsum(axis=0) * rng.random()
        if t_len > 3 and rng.random() < 0.5:  # a step: breaks
            y[t_len // 2 :, 0] += 0.2
        se = rng.uniform(0.001, 0.05, size=(t_len, k))
        if rng.random() < 0.4:  # missing windows, whole or partial
            gone = rng.random((t_len, k)) < 0.2
            gone[rng.integers(t_len)] = True
            y, se = np.where(gone, np.nan, y), np.where(gone, np.nan, se)
            if np.isnan(y).all():
                continue
        reports = rng.integers(1, 10**6, size=t_len) if rng.random() < 0.5 else None
        fast, main = (
            smooth_series(y, se, reports=reports),
            ref.smooth_series(y, se, reports=reports),
        )
        for field in ("mean", "std_error", "filtered", "filtered_std_error", "tau"):
            a, b = getattr(fast, field), getattr(main, field)
            assert a.shape == b.shape and np.array_equal(a, b, equal_nan=True), field
        assert fast.breaks == main.breaks


def _windows(mech, rng: np.random.Generator, count: int) -> dict[str, Tally]:
    f = _shape(str(rng.choice(["uniform", "zipf", "dominant", "sparse"])), mech.k, rng)
    out = {}
    for day in range(count):
        n = int(rng.choice([0, 3, 50, 2_000, 300_000]))
        out[f"2026-10-{day + 1:02d}"] = _tally(mech, n, f, rng)
    return out


def test_whole_answer_json_equals_mains(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    answers = []
    for i in range(30):
        mech = create(
            str(rng.choice(MECHANISMS)),
            epsilon=float(rng.choice([0.5, 1.0, 4.0])),
            domain=int(rng.choice([2, 5, 14])),
        )
        tallies = _windows(mech, rng, int(rng.integers(1, 31)))
        if sum(t.n for t in tallies.values()) == 0:
            continue
        min_reports = int(rng.choice([1, 10, 1_000]))
        method = "auto" if i % 3 else str(rng.choice(["none", "mle", "eb"]))
        answers.append((mech, tallies, min_reports, method))
    fast = []
    for mech, tallies, min_reports, method in answers:
        try:
            fast.append(
                json.dumps(
                    estimate_windows(mech, tallies, postprocess=method, min_reports=min_reports)
                )
            )
        except Exception as exc:  # NotEnoughReports: the same on both sides
            fast.append(repr(exc))
    monkeypatch.setattr(service, "frequency_trend", ref.frequency_trend)
    monkeypatch.setattr(service, "sum_tallies", ref.sum_tallies)
    monkeypatch.setitem(POSTPROCESSORS, "auto", ref._auto)
    for (mech, tallies, min_reports, method), got in zip(answers, fast, strict=True):
        try:
            want = json.dumps(
                estimate_windows(mech, tallies, postprocess=method, min_reports=min_reports)
            )
        except Exception as exc:
            want = repr(exc)
        assert got == want
    assert sum(not a.startswith("NotEnough") for a in fast) >= 15


def test_raw_trend_and_sum_equal_mains() -> None:
    rng = np.random.default_rng(3)
    for name in MECHANISMS:
        for k in (2, 14):
            mech = create(name, epsilon=1.0, domain=k)
            tallies = _windows(mech, rng, 12)
            for min_reports in (1, 51, 10**9):
                assert service.raw_frequency_trend(mech, tallies, min_reports) == (
                    ref.raw_frequency_trend(mech, tallies, min_reports)
                )
                assert service.frequency_trend(mech, tallies, min_reports) == (
                    ref.frequency_trend(mech, tallies, min_reports)
                )
            assert service.sum_tallies(mech, tallies) == ref.sum_tallies(mech, tallies)


def test_partition_and_grid_equal_mains() -> None:
    # One linspace call for all windows against one per window: the same edges, including
    # windows clipped at 0 and 1, empty ones and duplicated raw values.
    rng = np.random.default_rng(11)
    for _ in range(300):
        k = int(rng.integers(2, 45))
        raw = rng.uniform(-0.2, 1.2, size=k) * rng.choice([1.0, 0.01])
        raw[rng.random(k) < 0.2] = raw[0]
        sd = 10.0 ** rng.uniform(-6, 0, size=k)
        assert np.array_equal(shrinkage._partition(raw, sd), ref._partition(raw, sd))
        n = int(rng.choice([10, 10**4, 10**7]))
        v0, beta = float(rng.uniform(0.1, 20)), float(rng.uniform(-0.1, 3))
        for a, b in zip(
            shrinkage._npmle_grid(raw, n, v0, beta), ref._npmle_grid(raw, n, v0, beta), strict=True
        ):
            assert np.array_equal(a, b)
