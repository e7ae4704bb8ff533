"""How often Square Wave's quantile intervals hold the true quantile (docs/MECHANISMS.md §19.5).

Run: python bench/quantile_coverage.py [--runs 40] [--bootstrap 50] [--shard I/K] [--at-bound]

For each distribution (normal(40, 12), uniform(20, 60), 5 + lognormal(3, 0.5), clipped to
(1, 99)), n in {1000, 5000, 30000}, epsilon in {1, 4}, and a grid campaign (continuous values)
or an integer-valued one (the values rounded: no gap between what the estimate and the truth
mean by a quantile), ``--runs`` independent populations are drawn, perturbed with the real
mechanism and estimated with ``aggregator.estimate_numeric`` (its ``--bootstrap`` replicates
give the intervals). Printed per cell: the share of runs whose 95% interval holds the true
median and p90 (``simulator.numeric.true_quantile``) and their mean widths, for the served
interval (the bootstrap's widened for the smoothing bias, ``aggregator.numeric.widen_interval``)
and, beside it, the bootstrap percentile interval alone (served before 2026-11-28: the same
estimate without its relaxed fit); then the mean share of the 32 histogram bins whose whisker
(``aggregator.numeric_answers.histogram_bins``) holds the bin's true share, and the worst bin's
share over the runs. With 40 runs a coverage share has a standard error of about 0.035 at 0.95.

``--at-bound``: instead, mass piled against a bound on (0, 1), as the served answer sees it (its
20 replicates seeded from the tally): beta(0.5, 5) at n = 200 and 5,000 (epsilon 4) and 1,000
(epsilon 1), and every value at the low bound at n = 200 and 5,000 (epsilon 4).

A parametric *basic* bootstrap was measured here on 2026-11-27 and not adopted (§19.5).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from collections.abc import Callable

import numpy as np

from aggregator.numeric import DistributionEstimate, estimate_numeric
from aggregator.numeric_answers import histogram_bins
from aggregator.service import seed_of
from client_sdk.mechanisms.numeric import SquareWave
from simulator.numeric import true_quantile

BOUNDS = (1.0, 99.0)
LEVEL = 0.95
BINS = 32


def population(dist: str, n: int, rng: np.random.Generator, integer: bool) -> np.ndarray:
    bounds = (0.0, 1.0) if dist in ("beta", "low") else BOUNDS
    if dist == "normal":
        x = rng.normal(40, 12, n)
    elif dist == "uniform":
        x = rng.uniform(20, 60, n)
    elif dist == "lognormal":
        x = 5 + rng.lognormal(3, 0.5, n)
    elif dist == "beta":
        x = rng.beta(0.5, 5, n)
    else:
        x = np.zeros(n)
    x = np.clip(x, *bounds)
    return np.rint(x) if integer else x


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type: an integer >= ``low`` (a usage error otherwise)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be at least {low}, got {value}")
        return value

    return parse


def shard(text: str) -> tuple[int, int]:
    """``I/K`` with ``0 <= I < K``: every K-th cell from the I-th (a usage error otherwise)."""
    try:
        first, step = (int(p) for p in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected I/K, e.g. 0/2, got {text!r}") from None
    if not 0 <= first < step:
        raise argparse.ArgumentTypeError(f"expected I/K with 0 <= I < K, got {text!r}")
    return first, step


def bin_hits(est: DistributionEstimate, x: np.ndarray) -> np.ndarray:
    """Which of the displayed bins' whiskers hold the share of ``x`` in that bin."""
    bins = histogram_bins(est, LEVEL, BINS)
    lows = np.array([b.low for b in bins])
    share = np.diff(np.searchsorted(np.sort(x), lows, side="left"), append=x.size) / x.size
    return np.array(
        [b.ci_low - 1e-12 <= s <= b.ci_high + 1e-12 for b, s in zip(bins, share, strict=True)]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # Zero runs printed coverage shares of -0.00 and widths nan; K = 0 raised a traceback.
    ap.add_argument("--runs", type=at_least(1), default=40)
    ap.add_argument("--bootstrap", type=at_least(2), default=50)
    ap.add_argument(
        "--shard", type=shard, default=(0, 1), help="I/K: every K-th cell from the I-th"
    )
    ap.add_argument(
        "--at-bound", action="store_true", help="mass piled at a bound (served: 20 replicates)"
    )
    args = ap.parse_args()
    first, step = args.shard
    if args.at_bound:
        cells = [
            ("beta", 200, 4.0, False),
            ("beta", 5000, 4.0, False),
            ("beta", 1000, 1.0, False),
            ("low", 200, 4.0, False),
            ("low", 5000, 4.0, False),
        ][first::step]
    else:
        cells = [
            (d, n, e, i)
            for d in ("normal", "uniform", "lognormal")
            for n in (1000, 5000, 30000)
            for e in (1.0, 4.0)
            for i in (False, True)
        ][first::step]
    for dist, n, eps, integer in cells:
        bounds = (0.0, 1.0) if args.at_bound else BOUNDS
        mech = SquareWave(epsilon=eps, bounds=bounds, integer=integer)
        hits = {(m, q): 0 for m in ("new", "old") for q in (0.5, 0.9)}
        widths: dict[tuple[str, float], list[float]] = {k: [] for k in hits}
        bin_cover: dict[str, list[np.ndarray]] = {"new": [], "old": []}
        started = time.process_time()
        for r in range(args.runs):
            rng = np.random.default_rng(1000 + r)
            x = population(dist, n, rng, integer)
            tally = mech.tally(mech.perturb_many(x, rng=rng))
            if args.at_bound:
                est = estimate_numeric(mech, tally, bootstrap=20, rng=seed_of(tally))
            else:
                est = estimate_numeric(mech, tally, bootstrap=args.bootstrap, rng=r)
            assert isinstance(est, DistributionEstimate)
            both = {"new": est, "old": dataclasses.replace(est, relaxed=None)}
            for m, e in both.items():
                bin_cover[m].append(bin_hits(e, x))
                for q in (0.5, 0.9):
                    truth = true_quantile(x, q, bounds)
                    qe = e.quantile(q, LEVEL)
                    hits[m, q] += qe.low <= truth <= qe.high
                    widths[m, q].append(qe.high - qe.low)

        cols = {
            m: f"median {hits[m, 0.5] / args.runs:.2f} p90 {hits[m, 0.9] / args.runs:.2f} "
            f"width {np.mean(widths[m, 0.5]):.3g}/{np.mean(widths[m, 0.9]):.3g} "
            f"bins {np.mean(bin_cover[m]):.2f} (worst {np.mean(bin_cover[m], axis=0).min():.2f})"
            for m in ("new", "old")
        }
        print(
            f"{dist:9s} n={n:6d} eps={eps:g} {'integer' if integer else 'grid   '} | "
            f"served {cols['new']} | percentile only {cols['old']} "
            f"({time.process_time() - started:.0f} s CPU)",
            flush=True,
        )


if __name__ == "__main__":
    main()
