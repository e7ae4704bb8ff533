"""Exploration (issue 20): James-Stein shrinkage of the well-resolved values only, against `auto`.

Run: PYTHONPATH=. python bench/js_explore.py [--repetitions 400] [--cells occupation:0.5,...]

Why. On occupation at epsilon <= 1 the permutation oracle (``bench/oracle_bound.py``) leaves a
third of `auto`'s error, and the per-value errors show where: `auto` (the flat-prior posterior
mean at epsilon 0.5, the pattern MLE at 1) already helps the values near 0, while the six
values with 3,295-4,140 counts keep the raw error. Those six sit close together, so shrinking
them toward one another should pay; the earlier James-Stein variant shrank all k values toward
1/k and lost, because it also pulled the near-zero values up (docs/AGGREGATOR.md).

What. Per cell (Adult train attribute, epsilon) it takes our ``auto`` mechanism (as
``bench/accuracy.py``), draws R seeded tallies (``aggregator.evaluation.sample_tally``) and
computes on the SAME tallies ``none`` (raw), ``mle``, ``auto`` and the two-group estimator
``js<z>/<base>``: the values whose ``base`` count (``mle`` or ``auto``) exceeds ``z`` standard
errors form the group B (at least 4 values, else ``base`` unchanged); their raw counts are shrunk
toward their inverse-variance weighted mean by the positive-part James-Stein factor
``1 - (|B| - 3) mean(se^2) / sum (x - mean)^2``; the others keep ``base``; B absorbs the
difference to n equally, then negatives are clipped and the whole rescaled to n. It prints count
MSE +- SE, the paired ratio of mean MSEs to ``auto`` (``bench/accuracy.py``'s
``paired_ratio_ci``, delta method, 95%) and the per-value root MSE (values by true count).

Measured (R = 400, seed 20261127, 2026-11-27, load under 1; docs/AGGREGATOR.md "Two-group
James-Stein"): ``js3/auto`` is 0.958x ``auto`` [0.932, 0.983] on occupation at epsilon 0.5 but
1.025x at 1 and 1.012x on education at 0.5 and 1; ``js2/auto`` loses in all four cells
(1.011-1.066x). Which values form a tight group is a property of the data that 14-16 noisy
values do not reveal. Nothing was added to ``aggregator``.
"""

from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from accuracy import against, cells_main  # noqa: E402

DEFAULT_CELLS = "occupation:0.5,occupation:1,education:0.5,education:1"
THRESHOLDS = (2.0, 3.0)


def two_group_js(raw: np.ndarray, se: np.ndarray, base: np.ndarray, n: int, z: float) -> np.ndarray:
    """``base`` with the values above ``z`` standard errors replaced by James-Stein on the raw."""
    group = base > z * se
    out = np.asarray(base, dtype=float).copy()
    size = int(group.sum())
    if size < 4:
        return out
    x, var = raw[group], se[group] ** 2
    centre = float(np.sum(x / var) / np.sum(1 / var))
    spread = float(np.sum((x - centre) ** 2))
    factor = max(0.0, 1 - (size - 3) * float(np.mean(var)) / spread) if spread > 0 else 0.0
    out[group] = centre + factor * (x - centre)
    out[group] += (n - out.sum()) / size
    out = np.maximum(out, 0.0)
    return out * (n / out.sum())


def run_cell(attribute: str, epsilon: float, reps: int, seed: int) -> None:
    from aggregator.estimate import estimate
    from aggregator.evaluation import sample_tally
    from aggregator.postprocess import postprocess
    from client_sdk.mechanisms import create
    from simulator.adult import load_adult

    labels, indices = load_adult("train").column(attribute)
    counts = np.bincount(indices, minlength=len(labels))
    n = int(counts.sum())
    mech = create("auto", epsilon=epsilon, domain=labels)
    rng = np.random.default_rng([seed, int(epsilon * 100)])
    mse: dict[str, list[float]] = {}
    per_value: dict[str, np.ndarray] = {}
    for _ in range(reps):
        est = estimate(mech, sample_tally(mech, counts, rng))
        raw = np.asarray(est.counts, dtype=float)
        se = np.asarray(est.std_errors, dtype=float)
        out = {"none": raw, "mle": postprocess(est, "mle").counts}
        out["auto"] = postprocess(est, "auto").counts
        for base in ("mle", "auto"):
            for z in THRESHOLDS:
                out[f"js{z:g}/{base}"] = two_group_js(raw, se, out[base], n, z)
        for name, c in out.items():
            sq = (np.asarray(c, dtype=float) - counts) ** 2
            mse.setdefault(name, []).append(float(sq.mean()))
            per_value[name] = per_value.get(name, 0.0) + sq / reps
    print(f"\n## {attribute} (k {len(labels)}, n {n:,}), epsilon {epsilon:g}, "
          f"{mech.name} {mech.params()}, R = {reps}", flush=True)
    for name, row in against(mse):
        print(f"  {name:>10} {row}")
    order = np.argsort(counts)
    print("  root MSE per value, by true count:")
    print(f"  {'true':>10} " + " ".join(f"{counts[i]:>6d}" for i in order))
    for name in ("none", "mle", "auto", "js3/auto"):
        rmse = np.sqrt(per_value[name])
        print(f"  {name:>10} " + " ".join(f"{rmse[i]:>6.0f}" for i in order), flush=True)


def main() -> int:
    return cells_main(
        __doc__.splitlines()[0], run_cell, repetitions=400, cells=DEFAULT_CELLS
    )


if __name__ == "__main__":
    sys.exit(main())
