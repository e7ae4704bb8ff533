"""Numeric mechanisms: accuracy against the formulas, speed, Square Wave vs the binned baseline.

Run: .venv/bin/python bench/numeric.py [--quick] [--only mse,speed,sw]

mse    For Adult age, hours-per-week and capital-gain, every mean mechanism at epsilon in
       {0.5, 1, 2, 4}, R repetitions (default 100): the empirical MSE of the mean against the
       exact formula (``mean_variance``: the per-report variances of the data, averaged, / n),
       their ratio, and the bias in units of its standard error (sqrt(formula / R)). The truth is
       the mean of the values clipped into the declared bounds; ``clip bias`` is what the bounds
       cost (clipped mean - raw mean).
speed  ``perturb_many`` values/s (Piecewise, epsilon = 1, 10 M values, best of 3), one-device
       ``perturb`` median microseconds per mechanism, and a 30-window mean over 10 M reports
       (tally sum + estimate) in milliseconds.
sw     Square Wave + EMS vs the binned baseline (bins + ``auto`` + Norm-Sub) on age and
       hours-per-week: Wasserstein-1 distance, |median error|, |p90 error|, averaged over seeds.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from scipy.stats import chi2

from aggregator.numeric import estimate_numeric
from client_sdk.mechanisms.numeric import create
from simulator.adult import load_adult
from simulator.numeric import adult_numeric, binned_baseline, true_quantile, wasserstein1

#: (column, declared bounds); capital-gain twice: all of it, and clipped at 10,000 (what
#: tighter bounds buy in variance and cost in clipping bias).
COLUMNS = [
    ("age", (17.0, 90.0)),
    ("hours-per-week", (1.0, 99.0)),
    ("capital-gain", (0.0, 100_000.0)),
    ("capital-gain", (0.0, 10_000.0)),
]
EPSILONS = [0.5, 1.0, 2.0, 4.0]
MEANS = ["duchi", "1bitmean", "piecewise", "hybrid", "auto", "alpha_point"]


def column(data, name: str) -> np.ndarray:
    return adult_numeric(name)


def bench_mse(data, reps: int) -> None:
    print(f"== mean mechanisms: empirical MSE vs formula (R = {reps}) ==")
    print(
        f"{'column':15} {'eps':>4} {'mechanism':12} {'formula MSE':>12} {'empirical':>12} "
        f"{'ratio':>6} {'bias/se':>8}"
    )
    ratios: list[float] = []
    zs: list[float] = []
    for name, bounds in COLUMNS:
        x = column(data, name)
        truth = float(np.clip(x, *bounds).mean())
        print(
            f"{name}: n = {x.size}, bounds = {bounds}, clipped mean = {truth:.4f}, "
            f"clip bias = {truth - x.mean():+.4f}"
        )
        for eps in EPSILONS:
            for mech_name in MEANS:
                mech = create(mech_name, epsilon=eps, bounds=bounds)
                gen = np.random.default_rng([int(eps * 10), MEANS.index(mech_name), int(bounds[1])])
                est = np.array(
                    [
                        estimate_numeric(mech, mech.tally(mech.perturb_many(x, rng=gen))).mean
                        for _ in range(reps)
                    ]
                )
                formula = mech.mean_variance(x)
                mse = float(np.mean((est - truth) ** 2))
                bias_se = float(est.mean() - truth) / (formula / reps) ** 0.5
                ratios.append(mse / formula)
                zs.append(bias_se)
                label = mech_name if mech_name != "auto" else f"auto={mech.name}"
                print(
                    f"{name:15} {eps:4} {label:12} {formula:12.5g} {mse:12.5g} "
                    f"{mse / formula:6.3f} {bias_se:8.2f}"
                )
    r, z = np.array(ratios), np.array(zs)
    # R * MSE / formula is ~ chi-square(R) (noncentral only by the bias): its 99% band.
    lo, hi = (float(v) / reps for v in chi2.ppf([0.005, 0.995], reps))
    print(
        f"{r.size} cells: empirical/formula mean {r.mean():.3f}"
        f" +- {r.std(ddof=1) / r.size**0.5:.3f}"
        f" (sd {r.std(ddof=1):.3f}; one cell's sampling sd is sqrt(2/R) = {(2 / reps) ** 0.5:.3f});"
        f" outside the chi-square 99% band [{lo:.3f}, {hi:.3f}]: {int(((r < lo) | (r > hi)).sum())}"
    )
    print(
        f"bias/se: mean {z.mean():+.3f}, sd {z.std(ddof=1):.3f} (both ~0 and ~1 if unbiased);"
        f" |bias/se| > 3: {int((abs(z) > 3).sum())} of {z.size}"
    )


def bench_speed(quick: bool) -> None:
    print("== speed ==")
    n = 2_000_000 if quick else 10_000_000
    mech = create("piecewise", epsilon=1.0, bounds=(0.0, 100.0))
    x = np.random.default_rng(1).uniform(0, 100, n)
    best, best_cpu = float("inf"), float("inf")
    for seed in range(3):
        start, start_cpu = time.perf_counter(), time.process_time()
        mech.perturb_many(x, rng=seed)
        best = min(best, time.perf_counter() - start)
        best_cpu = min(best_cpu, time.process_time() - start_cpu)
    print(
        f"perturb_many piecewise eps=1: {n / best / 1e6:.1f} M values/s wall clock, "
        f"{n / best_cpu / 1e6:.1f} M values/s of CPU time ({n:,} values; the two differ "
        "when other processes share the cores)"
    )
    for name in ["duchi", "piecewise", "hybrid", "square_wave", "alpha_point"]:
        m = create(name, epsilon=1.0, bounds=(0.0, 100.0))
        perturb = m.perturb
        for _ in range(500):
            perturb(42.5)
        samples = []
        clock = time.perf_counter_ns
        for _ in range(5000 if quick else 20000):
            start = clock()
            perturb(42.5)
            samples.append(clock() - start)
        print(f"perturb {name:12} median {statistics.median(samples) / 1000:.2f} us")
    reports = mech.perturb_many(x, rng=9)
    windows = [mech.tally(part) for part in np.array_split(reports, 30)]
    samples = []
    for _ in range(20):
        start = time.perf_counter()
        total = windows[0]
        for w in windows[1:]:
            total = total + w
        est = estimate_numeric(mech, total)
        samples.append(time.perf_counter() - start)
    print(
        f"30-window mean over {total.n:,} reports: {statistics.median(samples) * 1e3:.3f} ms "
        f"(mean {est.mean:.3f} +- {est.std_error:.3f})"
    )


def bench_sw(data, seeds: int) -> None:
    print(f"== Square Wave + EMS vs binned baseline ({seeds} seeds; lower is better) ==")
    print(
        f"{'column':15} {'eps':>4} {'estimator':14} {'W1':>8} {'|med err|':>10} {'|p90 err|':>10}"
    )
    for name in ["age", "hours-per-week"]:
        bounds = dict(COLUMNS)[name]
        x = column(data, name)
        med, p90 = true_quantile(x, 0.5, bounds), true_quantile(x, 0.9, bounds)
        for eps in EPSILONS:
            rows = {}
            mech = create("square_wave", epsilon=eps, bounds=bounds)
            ests = [
                estimate_numeric(mech, mech.tally(mech.perturb_many(x, rng=s)), bootstrap=0)
                for s in range(seeds)
            ]
            rows["square_wave"] = ests
            for bins in (8, 16, 32):
                rows[f"binned-{bins}"] = [
                    binned_baseline(x, epsilon=eps, bounds=bounds, bins=bins, rng=s)
                    for s in range(seeds)
                ]
            for label, es in rows.items():
                w1 = np.mean([wasserstein1(e, x) for e in es])
                dm = np.mean([abs(e.quantile(0.5).value - med) for e in es])
                d9 = np.mean([abs(e.quantile(0.9).value - p90) for e in es])
                print(f"{name:15} {eps:4} {label:14} {w1:8.3f} {dm:10.3f} {d9:10.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="R = 30, fewer seeds and values")
    parser.add_argument("--only", default="mse,speed,sw", help="comma-separated sections")
    args = parser.parse_args()
    only = set(args.only.split(","))
    data = load_adult("train")
    if "speed" in only:
        bench_speed(args.quick)
    if "sw" in only:
        bench_sw(data, 2 if args.quick else 5)
    if "mse" in only:
        bench_mse(data, 30 if args.quick else 100)


if __name__ == "__main__":
    main()
