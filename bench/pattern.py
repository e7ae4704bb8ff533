"""The per-report pattern MLE for OUE against the tally ``mle``, and where it stops paying.

Run: python bench/pattern.py [--repetitions 100] [--attributes occupation,education]

Per Adult attribute (k <= 16) and epsilon 0.5, 1, 2, 4: R windows of OUE reports drawn by the
mechanism's own ``perturb_many`` from the true values; per window the count MSE of the tally
``mle`` and of the pattern MLE (``aggregator.pattern``) on the same reports (paired), and for
context ``auto`` with the default post-processing on its own draws. Prints the paired ratio with
a 95% interval, the number of distinct patterns per window and the milliseconds per estimate.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from aggregator.estimate import estimate
from aggregator.evaluation import sample_tally
from aggregator.pattern import pattern_frequencies, pattern_histogram
from aggregator.postprocess import DEFAULT_POSTPROCESS, mle_frequencies, postprocess
from client_sdk.mechanisms import create
from simulator.adult import load_adult


def paired_ratio(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float]:
    """mean(a)/mean(b) on paired draws with a 95% delta-method interval."""
    ma, mb = float(a.mean()), float(b.mean())
    r = ma / mb
    cov = np.cov(a, b, ddof=1) / a.size
    se = math.sqrt(max(float(cov[0, 0] - 2 * r * cov[0, 1] + r * r * cov[1, 1]), 0.0)) / mb
    return r, r - 1.96 * se, r + 1.96 * se


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repetitions", type=int, default=100)
    parser.add_argument("--attributes", default="occupation,education")
    parser.add_argument("--epsilons", default="0.5,1,2,4")
    args = parser.parse_args()
    data = load_adult("train")
    seed = 2020
    print(
        f"{'attribute':>12} {'k':>3} {'eps':>4} {'OUE tally mle':>14} {'OUE pattern':>12} "
        f"{'pattern/tally [95%]':>24} {'auto+' + DEFAULT_POSTPROCESS:>12} {'patterns':>9} "
        f"{'ms':>6}"
    )
    for attribute in args.attributes.split(","):
        labels, indices = data.column(attribute)
        counts = np.bincount(indices, minlength=len(labels))
        n = int(counts.sum())
        for epsilon in (float(x) for x in args.epsilons.split(",")):
            rng = np.random.default_rng(seed)
            seed += 1
            oue = create("oue", epsilon=epsilon, domain=labels)
            auto = create("auto", epsilon=epsilon, domain=labels)
            tally_mse, pattern_mse, auto_mse, cells, ms = [], [], [], [], []
            for _ in range(args.repetitions):
                batch = oue.perturb_many(indices, rng=rng)
                hist = pattern_histogram(oue, batch)
                t = time.perf_counter()
                fit = pattern_frequencies(oue, hist)
                ms.append((time.perf_counter() - t) * 1000)
                f_tally, _, _, _ = mle_frequencies(oue, oue.tally(batch))
                tally_mse.append(float(np.mean((f_tally * n - counts) ** 2)))
                pattern_mse.append(float(np.mean((fit.frequencies * n - counts) ** 2)))
                cells.append(hist.counts.size)
                est = estimate(auto, sample_tally(auto, counts, rng))
                auto_mse.append(float(np.mean((postprocess(est).counts - counts) ** 2)))
            r, lo, hi = paired_ratio(np.asarray(pattern_mse), np.asarray(tally_mse))
            print(
                f"{attribute:>12} {len(labels):>3} {epsilon:>4g} {np.mean(tally_mse):>14,.0f} "
                f"{np.mean(pattern_mse):>12,.0f} {r:>8.3f} [{lo:.3f}, {hi:.3f}] "
                f"{np.mean(auto_mse):>12,.0f} {np.mean(cells):>9,.0f} {np.median(ms):>6.0f}",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
