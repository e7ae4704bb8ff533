"""Mechanism speed: one-device perturb, vectorised perturb_many, and tallying.

Run: .venv/bin/python bench/mechanisms.py [--quick]

For each mechanism at epsilon = 1 and k = 14, 42, 1024 it prints
  perturb us      median microseconds of one `perturb` call with OS randomness (os.urandom)
  perturb_many/s  reports per second from `perturb_many` with a seeded NumPy generator
  tally/s         reports per second from `tally` on the batch array (packed bits for oue/sue/ss)
and, for olh, support counting in (report, item) pairs per second. Targets from the issue are
checked at the end. Single process, one core.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from client_sdk.mechanisms import create

NAMES = ["rr", "grr", "sue", "oue", "olh", "hr", "ss"]
KS = [14, 42, 1024]


def best_rate(fn, items: int, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return items / best


def perturb_us(mech, calls: int) -> float:
    label = mech.domain[1]
    perturb = mech.perturb
    for _ in range(200):
        perturb(label)
    samples = []
    clock = time.perf_counter_ns
    for _ in range(calls):
        start = clock()
        perturb(label)
        samples.append(clock() - start)
    return statistics.median(samples) / 1000


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer reports, for a smoke run")
    args = parser.parse_args()
    scale = 0.1 if args.quick else 1.0
    rows = []
    figures: dict[tuple[str, int], dict[str, float]] = {}
    for name in NAMES:
        for k in [2] if name == "rr" else KS:
            mech = create(name, epsilon=1.0, domain=k)
            n = int((2_000_000 if k <= 42 else 100_000) * scale)
            if name == "olh" and k == 1024:
                n = int(20_000 * scale)
            values = np.random.default_rng(0).integers(0, k, n)
            rng = np.random.default_rng(1)
            us = perturb_us(mech, 2000 if k == 1024 else 20000)
            many = best_rate(lambda m=mech, v=values, r=rng: m.perturb_many(v, rng=r), n)
            batch = mech.perturb_many(values, rng=rng)
            tally = best_rate(lambda m=mech, b=batch: m.tally(b), n)
            figures[(name, k)] = {"perturb_us": us, "many": many, "tally": tally}
            extra = f"{tally * k / 1e6:8.1f} M pairs/s" if name == "olh" else ""
            rows.append((name, k, us, many, tally, extra))
            print(
                f"{name:4} k={k:<5} perturb {us:7.2f} us   perturb_many {many / 1e6:8.2f} M/s   "
                f"tally {tally / 1e6:8.2f} M/s  {extra}",
                flush=True,
            )
    print("\nTargets (one core):")
    checks = [
        ("grr perturb k=14 <= 5 us", figures[("grr", 14)]["perturb_us"], 5, "le"),
        ("oue perturb k=14 <= 5 us", figures[("oue", 14)]["perturb_us"], 5, "le"),
        ("oue perturb_many k=14 >= 10 M/s", figures[("oue", 14)]["many"] / 1e6, 10, "ge"),
        ("grr perturb_many k=14 >= 30 M/s", figures[("grr", 14)]["many"] / 1e6, 30, "ge"),
        ("oue tally (packed) k=14 >= 20 M/s", figures[("oue", 14)]["tally"] / 1e6, 20, "ge"),
        (
            "olh support counting k=1024 >= 50 M pairs/s",
            figures[("olh", 1024)]["tally"] * 1024 / 1e6,
            50,
            "ge",
        ),
    ]
    for label, value, target, how in checks:
        ok = value <= target if how == "le" else value >= target
        print(f"  {'PASS' if ok else 'MISS'}  {label}: {value:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
