"""The per-report pattern MLE (OUE, SS) against the tally ``mle``, and where it stops paying.

Run: python bench/pattern.py [--repetitions 100] [--attributes occupation,education]
     [--mechanisms oue,ss] [--epsilons 0.5,1,2,4]

Per Adult attribute (k <= 16), mechanism and epsilon: R windows of reports drawn by the
mechanism's own ``perturb_many`` from the true values (SS with its default subset size d);
per window the count MSE of the tally ``mle`` and of the pattern MLE (``aggregator.pattern``) on
the same reports (paired), and for context ``auto`` with the default post-processing on its own
draws. Prints the paired ratio with a 95% interval, the number of distinct patterns per window
(SS: at most C(k, d)), the milliseconds per pattern fit and per histogram built from the wire
payloads (what ``postprocess=pattern`` does per estimate, before reading the store).
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np

from aggregator.estimate import estimate
from aggregator.evaluation import sample_tally
from aggregator.pattern import histogram_of_payloads, pattern_frequencies, pattern_histogram
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
    parser.add_argument("--mechanisms", default="oue,ss")
    args = parser.parse_args()
    data = load_adult("train")
    seed = 2020
    print(
        f"{'attribute':>12} {'k':>3} {'mech':>6} {'eps':>4} {'tally mle':>10} {'pattern':>10} "
        f"{'pattern/tally [95%]':>24} {'auto+' + DEFAULT_POSTPROCESS:>10} {'patterns':>9} "
        f"{'cells':>6} {'fit ms':>6} {'hist ms':>7}"
    )
    for attribute in args.attributes.split(","):
        labels, indices = data.column(attribute)
        counts = np.bincount(indices, minlength=len(labels))
        n = int(counts.sum())
        for name in args.mechanisms.split(","):
            for epsilon in (float(x) for x in args.epsilons.split(",")):
                rng = np.random.default_rng(seed)
                seed += 1
                mech = create(name, epsilon=epsilon, domain=labels)
                d = getattr(mech, "d", None)
                label = name if d is None else f"ss d={d}"
                cells = 2 ** len(labels) if d is None else math.comb(len(labels), d)
                auto = create("auto", epsilon=epsilon, domain=labels)
                tally_mse, pattern_mse, auto_mse, distinct, ms, hist_ms = [], [], [], [], [], []
                for r in range(args.repetitions):
                    batch = mech.perturb_many(indices, rng=rng)
                    hist = pattern_histogram(mech, batch)
                    if r < 5:
                        payloads = mech.encode_many(batch)
                        t = time.perf_counter()
                        histogram_of_payloads(mech, payloads)
                        hist_ms.append((time.perf_counter() - t) * 1000)
                    t = time.perf_counter()
                    fit = pattern_frequencies(mech, hist)
                    ms.append((time.perf_counter() - t) * 1000)
                    f_tally, _, _, _ = mle_frequencies(mech, mech.tally(batch))
                    tally_mse.append(float(np.mean((f_tally * n - counts) ** 2)))
                    pattern_mse.append(float(np.mean((fit.frequencies * n - counts) ** 2)))
                    distinct.append(hist.counts.size)
                    est = estimate(auto, sample_tally(auto, counts, rng))
                    auto_mse.append(float(np.mean((postprocess(est).counts - counts) ** 2)))
                r_, lo, hi = paired_ratio(np.asarray(pattern_mse), np.asarray(tally_mse))
                print(
                    f"{attribute:>12} {len(labels):>3} {label:>6} {epsilon:>4g} "
                    f"{np.mean(tally_mse):>10,.0f} {np.mean(pattern_mse):>10,.0f} "
                    f"{r_:>8.3f} [{lo:.3f}, {hi:.3f}] {np.mean(auto_mse):>10,.0f} "
                    f"{np.mean(distinct):>9,.0f} {cells:>6,} {np.median(ms):>6.1f} "
                    f"{np.median(hist_ms):>7.0f}",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
