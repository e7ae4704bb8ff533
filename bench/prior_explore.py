"""Exploration (issue 20): shrink toward a declared distribution, against `auto`.

Run: PYTHONPATH=. python bench/prior_explore.py [--repetitions 300] [--cells occupation:0.5,...]

Why. The permutation oracle (``bench/oracle_bound.py``) leaves a third of `auto`'s error on
occupation at epsilon <= 1, and every label-symmetric rule measured so far failed to take it:
the k noisy values of one tally do not reveal the multiset of the truth. What is left is
information from outside the tally. A campaign may declare an ``expected`` distribution
(today it feeds only the mechanism-choice criterion), for instance last release's estimate.
This script measures what a posterior mean centred on such a declaration gains when it is
right, and what it costs when it is wrong, with the prior's strength fitted to the tally so
that a wrong declaration is down-weighted.

What. Per cell (Adult train attribute, epsilon) it takes our ``auto`` mechanism, draws R seeded
tallies (``aggregator.evaluation.sample_tally``) and computes on the SAME tallies ``auto`` and
a Gaussian empirical-Bayes posterior mean toward a declared distribution m
(:func:`fit_declared`): per value, the raw frequency ``r_v ~ N(f_v, se_v^2)`` (the mechanism's
closed-form standard error) and the prior ``f_v ~ N(m_v, tau^2 g_v + s_v^2)``, ``g_v =
max(m_v, 1/n)(1 - m_v)`` (a Dirichlet's shape of spread), ``s_v`` the declaration's own
standard error; ``tau^2 >= 0`` maximises the marginal likelihood of the k raw values over a
log grid; the posterior mean ``m_v + w_v (r_v - m_v)``, ``w_v = prior var / (prior var +
se_v^2)``, clipped at 0 and rescaled to n. It is shown unguarded (``<declaration>``) and behind
two guards that return ``auto`` where the tally does not support the declaration:
``bf-<declaration>`` keeps it where its fitted marginal likelihood is at least 20 times that of
the same model centred on 1/k; ``gated-<declaration>`` where the raw frequencies are within
noise of it (``sum (r - m)^2 / (se^2 + s^2)`` below chi-square(k - 1)'s 0.99 quantile).
Declarations:

* ``test``: the frequencies of Adult's test split (16,281 other rows, another sample of the
  same census): a right declaration, with its sampling error unknown to the estimator (s = 0);
* ``test-ldp``: `auto`'s estimate from one LDP tally of the test split at the same epsilon,
  with its standard errors as s (a previous window's estimate, the realistic case);
* ``shuffled``: the test frequencies with the labels permuted (a wrong declaration; the
  permutation is fixed per cell and printed);
* ``uniform``: 1/k for every value (no information).

It prints count MSE +- SE and the paired ratio of mean MSEs to ``auto`` (``bench/accuracy.py``'s
``paired_ratio_ci``, delta method, 95%), the median fitted ``tau^2`` and how often a guard kept
the declaration.

Measured (R = 300, seed 20261127, 2026-11-27, 79 s, load under 1; docs/AGGREGATOR.md "A
declared distribution"): ``test`` is 0.065-0.228x ``auto`` at epsilon <= 2 on occupation and
education and 0.75-0.82x at 4; ``shuffled`` costs up to 1.39x there and 43x on native-country;
``test-ldp`` loses 3-21x on native-country at epsilon <= 2, where ``auto`` pools; the
likelihood-ratio guard keeps ``shuffled`` on native-country at 2 and 4, the chi-square gate
refuses it in all 12 cells but refuses ``test`` at epsilon 4 as well. Nothing was added to
``aggregator``.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from accuracy import against, cells_main  # noqa: E402

if TYPE_CHECKING:
    from aggregator.estimate import Estimate

DEFAULT_CELLS = ",".join(
    f"{a}:{e}" for a in ("occupation", "education", "native-country") for e in (0.5, 1, 2, 4)
)
GATE_LEVEL = 0.99
#: The declaration is kept only where its fitted marginal likelihood is this many times that
#: of the same model centred on the uniform distribution ("strong" on Jeffreys' scale).
LIKELIHOOD_RATIO = 20.0
#: The candidates for the prior's spread ``tau^2``: 0 (the declaration exact up to its own
#: standard errors) and 141 points log-spaced over [1e-6, 10] (ratio 1.12 between neighbours).
TAU2_GRID = np.concatenate(([0.0], np.logspace(-6, 1, 141)))


@dataclass(frozen=True)
class DeclaredFit:
    """The fitted prior: posterior-mean ``frequencies`` (sum 1, none negative), ``tau2`` (the
    prior's fitted spread), ``log_ratio`` (its log marginal likelihood minus the uniform
    reference's) and ``kept`` (``log_ratio >= log LIKELIHOOD_RATIO``)."""

    frequencies: np.ndarray
    tau2: float
    log_ratio: float
    kept: bool


def _spread(m: np.ndarray, n: int) -> np.ndarray:
    """``g_v = max(m_v, 1/n)(1 - m_v)``: the prior variance per unit of ``tau^2``."""
    g: np.ndarray = np.maximum(m, 1.0 / n) * (1 - m)
    return g


def _fit(r: np.ndarray, var: np.ndarray, m: np.ndarray, s2: np.ndarray, n: int) -> tuple[
    float, float
]:
    """``(tau2, log marginal likelihood)`` at the best point of :data:`TAU2_GRID`."""
    g = _spread(m, n)
    total = TAU2_GRID[:, None] * g[None, :] + s2[None, :] + var[None, :]
    ll = -0.5 * np.sum(np.log(total) + (r - m)[None, :] ** 2 / total, axis=1)
    best = int(np.argmax(ll))  # the first maximum: the tightest prior among equals
    return float(TAU2_GRID[best]), float(ll[best])


def fit_declared(
    est: Estimate,
    expected: Sequence[float],
    expected_std_errors: Sequence[float] | None = None,
) -> DeclaredFit:
    """Fit the prior centred on ``expected`` (k weights >= 0, normalised here) to ``est``.

    ``expected_std_errors``: the declaration's own standard errors, as frequencies (an earlier
    window's estimate has them); None: exact.
    """
    k = len(est.counts)
    m = np.asarray(expected, dtype=float)
    m = m / m.sum()
    s2 = np.zeros(k) if expected_std_errors is None else np.asarray(expected_std_errors) ** 2
    n = int(est.n)
    r = np.asarray(est.counts, dtype=float) / n
    # A raw value exactly at 0 with no spread has se 0: the smallest positive variance keeps
    # the likelihood finite (only a degenerate tally has none).
    var = (np.asarray(est.std_errors, dtype=float) / n) ** 2
    positive = var[var > 0]
    var = np.where(var > 0, var, positive.min() if positive.size else 1.0 / n**2)
    tau2, ll = _fit(r, var, m, s2, n)
    uniform = np.full(k, 1.0 / k)
    _, ll_uniform = _fit(r, var, uniform, np.zeros(k), n)
    prior_var = tau2 * _spread(m, n) + s2
    w = prior_var / (prior_var + var)
    post = np.maximum(m + w * (r - m), 0.0)
    log_ratio = ll - ll_uniform
    return DeclaredFit(
        frequencies=post / post.sum(),
        tau2=tau2,
        log_ratio=log_ratio,
        kept=log_ratio >= math.log(LIKELIHOOD_RATIO),
    )


def fits_declaration(
    raw: np.ndarray, se: np.ndarray, declared: np.ndarray, declared_se: np.ndarray, n: int
) -> bool:
    """Whether the raw frequencies are within noise of ``declared``: the statistic
    ``sum (raw - m)^2 / (se^2 + s^2)`` (frequencies) below chi-square(k - 1)'s quantile
    ``GATE_LEVEL``."""
    from scipy.stats import chi2

    stat = float(np.sum((raw / n - declared) ** 2 / ((se / n) ** 2 + declared_se**2)))
    return stat <= float(chi2.ppf(GATE_LEVEL, len(raw) - 1))


def run_cell(attribute: str, epsilon: float, reps: int, seed: int) -> None:
    from aggregator.estimate import estimate
    from aggregator.evaluation import sample_tally
    from aggregator.postprocess import postprocess
    from client_sdk.mechanisms import create
    from simulator.adult import load_adult

    labels, indices = load_adult("train").column(attribute)
    counts = np.bincount(indices, minlength=len(labels))
    n = int(counts.sum())
    test_labels, test_indices = load_adult("test").column(attribute)
    test_counts = np.bincount(test_indices, minlength=len(test_labels))
    by_label = dict(zip(test_labels, test_counts, strict=True))
    test = np.array([by_label.get(lab, 0) for lab in labels], dtype=float)
    n_test = int(test.sum())
    mech = create("auto", epsilon=epsilon, domain=labels)
    rng = np.random.default_rng([seed, int(epsilon * 100)])
    perm = rng.permutation(len(labels))
    declared = {
        "test": (test / n_test, np.zeros(len(labels))),
        "shuffled": ((test / n_test)[perm], np.zeros(len(labels))),
        "uniform": (np.full(len(labels), 1 / len(labels)), np.zeros(len(labels))),
    }
    mse: dict[str, list[float]] = {}
    #: per variant: the fitted tau^2 (unguarded) or whether the guard kept the declaration
    fitted: dict[str, list[float]] = {}
    for _ in range(reps):
        est = estimate(mech, sample_tally(mech, counts, rng))
        raw = np.asarray(est.counts, dtype=float)
        se = np.asarray(est.std_errors, dtype=float)
        prev = estimate(mech, sample_tally(mech, test.astype(np.int64), rng))
        prev_auto = np.asarray(postprocess(prev, "auto").counts, dtype=float) / n_test
        declared["test-ldp"] = (prev_auto, np.asarray(prev.std_errors, dtype=float) / n_test)
        out = {"auto": np.asarray(postprocess(est, "auto").counts, dtype=float)}
        for name, (m, s) in declared.items():
            fit = fit_declared(est, m, s)
            out[name] = fit.frequencies * n
            fitted.setdefault(name, []).append(fit.tau2)
            out[f"bf-{name}"] = out[name] if fit.kept else out["auto"]
            fitted.setdefault(f"bf-{name}", []).append(float(fit.kept))
            kept = fits_declaration(raw, se, m, s, n)
            out[f"gated-{name}"] = out[name] if kept else out["auto"]
            fitted.setdefault(f"gated-{name}", []).append(float(kept))
        for name, c in out.items():
            mse.setdefault(name, []).append(float(((c - counts) ** 2).mean()))
    print(f"\n## {attribute} (k {len(labels)}, n {n:,}, test n {n_test:,}), epsilon {epsilon:g}, "
          f"{mech.name} {mech.params()}, R = {reps}, shuffle {perm.tolist()}", flush=True)
    for name, row in against(mse):
        if name.startswith(("gated-", "bf-")):
            tau = f"  declaration kept in {np.mean(fitted[name]):.0%}"
        else:
            tau = f"  median tau^2 {np.median(fitted[name]):.2e}" if name in fitted else ""
        print(f"  {name:>9} {row}{tau}")


def main() -> int:
    return cells_main(
        __doc__.splitlines()[0], run_cell, repetitions=300, cells=DEFAULT_CELLS
    )


if __name__ == "__main__":
    sys.exit(main())
