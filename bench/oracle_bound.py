"""How much room is left (issue 20): the permutation oracle's error against ours, same tallies.

Run: python bench/oracle_bound.py [--repetitions 200] [--cells occupation:0.5,occupation:1,...]

Every estimator that treats the k labels alike (permuting the labels permutes its answer:
``mle``, ``auto``, the flat-prior mean, every empirical-Bayes rule, the peers' estimators) has
the same risk at every relabelling of the true frequencies, so its risk is at least the Bayes
risk of the *permutation oracle*: the posterior mean of each frequency when the multiset of
the k true frequencies is known and only which label holds which is not (a uniform prior over
the k! relabellings). No such estimator can do better than this oracle, and a learnable one
has to find the multiset from the same k raw values; the ratio oracle / ``auto`` is the most
that better shrinkage could gain.

Two learnable stand-ins put a multiset estimated from the same tally in the oracle's place:
``plug-in`` uses ``auto``'s frequencies; ``plug-in, spread`` the raw frequencies pulled toward
1/k by ``c = sqrt(1 - mean variance / variance of the raw values)`` (so their spread matches
the spread the truth would have: Louis's constrained Bayes), clipped at 0 and made to sum 1.

The oracle's likelihood is Gaussian: the raw unbiased frequency ``r_v`` has mean ``f`` and
the mechanism's exact variance ``(v0 + beta f) / n`` at the candidate frequency ``f``
(``aggregator.shrinkage``'s model; values independent given f, which ignores the small
negative covariance of the support counts). The posterior probability that label v holds the
i-th true frequency is a ratio of permanents of the k x k likelihood matrix, computed exactly by
dynamic programming over the 2^k subsets (k <= 16 here; native-country's k = 41 is out of
reach). Tallies: ``create("auto", ...)``'s mechanism, ``aggregator.evaluation.sample_tally``,
seeded per cell as ``bench/gmodel_explore.py`` does. It prints count MSE +- SE (mean over the k
values of the squared count error) and the paired ratio to ``auto`` (delta-method 95%
interval, ``bench/accuracy.py``'s ``paired_ratio_ci``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from accuracy import paired_ratio_ci, summary  # noqa: E402

#: The largest domain the subset dynamic programme is run on (2^k subsets, k^2 passes).
MAX_K = 16

CELLS = "occupation:0.5,occupation:1,occupation:2,education:0.5,education:1,education:2"


def assignment_marginals(lik: np.ndarray) -> np.ndarray:
    """``P[v, i]``: the probability that row v is matched to column i, over all k! matchings.

    A matching's weight is the product of its ``lik[v, i]``; the result is each entry's share of
    the permanent. Forward ``f[S]`` sums the matchings of rows ``0..|S|-1`` onto the columns in
    S, backward ``g[S]`` those of the remaining rows onto the columns outside S; then
    ``P[v, i] = sum_{|S| = v, i not in S} f[S] lik[v, i] g[S + i] / perm``. Positive sums only
    (no cancellation, unlike Ryser's formula).
    """
    k = lik.shape[0]
    if lik.shape != (k, k) or k > MAX_K:
        raise ValueError(f"need a square matrix of at most {MAX_K} rows, got {lik.shape}")
    masks = np.arange(1 << k)
    size = np.zeros(1 << k, dtype=np.int64)
    for i in range(k):
        size += (masks >> i) & 1
    layers = [masks[size == s] for s in range(k + 1)]
    f = np.zeros(1 << k)
    f[0] = 1.0
    for s in range(1, k + 1):
        layer = layers[s]
        for i in range(k):
            has = layer[(layer >> i) & 1 == 1]
            f[has] += f[has ^ (1 << i)] * lik[s - 1, i]
    g = np.zeros(1 << k)
    g[-1] = 1.0
    for s in range(k - 1, -1, -1):
        layer = layers[s]
        for i in range(k):
            free = layer[(layer >> i) & 1 == 0]
            g[free] += lik[s, i] * g[free | (1 << i)]
    marginals = np.zeros((k, k))
    for s in range(k):
        layer = layers[s]
        for i in range(k):
            free = layer[(layer >> i) & 1 == 0]
            marginals[s, i] = lik[s, i] * float(f[free] @ g[free | (1 << i)])
    out: np.ndarray = marginals / f[-1]
    return out


def oracle_frequencies(raw: np.ndarray, truth: np.ndarray, n: int, v0: float, beta: float):
    """The permutation oracle's posterior mean of every frequency (module docstring)."""
    var = np.maximum(v0 + beta * truth, 1e-12 * v0) / n
    loglik = -0.5 * ((raw[:, None] - truth[None, :]) ** 2 / var[None, :] + np.log(var)[None, :])
    # Each row's scale cancels in its marginals: every matching uses each row once.
    lik = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    return assignment_marginals(lik) @ truth


def spread_matched(raw: np.ndarray, n: int, v0: float, beta: float) -> np.ndarray:
    """The raw frequencies pulled toward 1/k until their spread is the truth's expected spread."""
    k = raw.size
    noise = float(np.mean(np.maximum(v0 + beta * np.clip(raw, 0, 1), 1e-12 * v0))) / n
    spread = float(np.var(raw))
    c = np.sqrt(max(0.0, 1.0 - noise / spread)) if spread > 0 else 0.0
    t = np.clip(1.0 / k + (raw - 1.0 / k) * c, 0.0, None)
    out: np.ndarray = t / t.sum()
    return out


def run_cell(attribute: str, epsilon: float, reps: int) -> None:
    from aggregator.estimate import estimate
    from aggregator.evaluation import sample_tally
    from aggregator.postprocess import postprocess
    from client_sdk.mechanisms import create
    from simulator.adult import load_adult

    labels, indices = load_adult("train").column(attribute)
    counts = np.bincount(indices, minlength=len(labels))
    n, k = int(counts.sum()), len(labels)
    mech = create("auto", epsilon=epsilon, domain=labels)
    rng = np.random.default_rng([20261126, k, int(epsilon * 100)])
    methods = ("auto", "mle", "eb", "none")
    mse: dict[str, list[float]] = {
        m: [] for m in (*methods, "plug-in", "plug-in, spread", "oracle")
    }
    started = time.process_time()
    for _ in range(reps):
        est = estimate(mech, sample_tally(mech, counts, rng))
        for m in methods:
            mse[m].append(float(np.mean((postprocess(est, m).counts - counts) ** 2)))
        raw = est.counts / n
        for name, multiset in (
            ("plug-in", postprocess(est, "auto").counts / n),
            ("plug-in, spread", spread_matched(raw, n, mech.v0, mech.beta)),
            ("oracle", counts / n),
        ):
            fit = oracle_frequencies(raw, multiset, n, mech.v0, mech.beta)
            mse[name].append(float(np.mean((fit * n - counts) ** 2)))
    seconds = time.process_time() - started
    print(
        f"\n{attribute} (k {k}, n {n:,}) eps {epsilon:g}: {mech.name} {mech.params()}, "
        f"R = {reps}, {seconds:.0f} s CPU",
        flush=True,
    )
    base = np.asarray(mse["auto"])
    for name, values in mse.items():
        v = np.asarray(values)
        mean, se = summary(v)
        r, lo, hi = paired_ratio_ci(v, base)
        print(f"  {name:>15}  {mean:>11,.0f} +- {se:>7,.0f}   / auto {r:.3f} [{lo:.3f}, {hi:.3f}]")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=200)
    parser.add_argument("--cells", default=CELLS, help="attribute:epsilon,...")
    args = parser.parse_args()
    for cell in args.cells.split(","):
        attribute, eps = cell.split(":")
        run_cell(attribute, float(eps), args.repetitions)
    return 0


if __name__ == "__main__":
    sys.exit(main())
