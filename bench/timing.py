"""Does ``perturb``'s running time tell the hidden coin? AUC of a timing classifier per mechanism.

Run: .venv/bin/python bench/timing.py [--calls N] [--format json]

For each mechanism (epsilon 1, the 14 Adult occupations; rr over 2 values) one device value is
perturbed ``--calls`` times with OS randomness (the device path, ``perturb``), each call timed
alone with ``perf_counter_ns`` (garbage collector off, the classes interleaved as they come).
The hidden coin of each call is read from its output and the true value:

  rr, grr   the true value was kept (y == x)
  olh       the true bucket was kept (y == h_(a,b)(x))
  hr        the output lies in the true value's half C_x
  ss        the true value is in the reported subset
  oue, sue, rappor   the true value's bit is set

The classifier scores a call by its running time; its AUC (Mann-Whitney, ties counted half) is
the probability that a call with the coin up took longer than one with the coin down. 0.5 is
no information; the printed ``separation`` is max(AUC, 1 - AUC), since a classifier may use
either direction. Target (issue 14): separation <= 0.55 for every mechanism. Exit status 1 if
a mechanism misses it.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections.abc import Callable

import numpy as np
from scipy import stats

from client_sdk.mechanisms import create
from client_sdk.mechanisms.base import Mechanism, Payload
from client_sdk.mechanisms.bitvector import decode_one

OCCUPATIONS = [
    "Adm-clerical", "Armed-Forces", "Craft-repair", "Exec-managerial", "Farming-fishing",
    "Handlers-cleaners", "Machine-op-inspct", "Other-service", "Priv-house-serv",
    "Prof-specialty", "Protective-serv", "Sales", "Tech-support", "Transport-moving",
]  # fmt: skip
MECHANISMS = ("rr", "grr", "oue", "sue", "olh", "hr", "ss", "rappor")
TARGET = 0.55
TRUE_INDEX = 11  # "Sales"; 1 for rr


def coin_of(mech: Mechanism, x: int) -> Callable[[Payload], bool]:
    """The hidden coin of a report of ``x``, read from the report."""
    if mech.name in ("rr", "grr"):
        return lambda y: y == x
    if mech.name == "olh":
        return lambda r: r[2] == mech.bucket(r[0], r[1], x)  # type: ignore[index, attr-defined]
    if mech.name == "hr":
        return lambda y: mech.in_half(x, y)  # type: ignore[attr-defined, arg-type]
    return lambda r: bool(decode_one(r, mech.k)[x // 8] >> (x % 8) & 1)


def auc(up: np.ndarray, down: np.ndarray) -> float:
    """P[a time with the coin up > one with it down] + half the ties (Mann-Whitney)."""
    ranks = stats.rankdata(np.concatenate([up, down]))
    u = ranks[: up.size].sum() - up.size * (up.size + 1) / 2
    return float(u / (up.size * down.size))


def measure(name: str, calls: int) -> dict[str, float]:
    domain = ["no", "yes"] if name == "rr" else OCCUPATIONS
    mech = create(name, epsilon=1.0, domain=domain)
    x = 1 if name == "rr" else TRUE_INDEX
    coin = coin_of(mech, x)
    perturb, clock = mech.perturb_index, time.perf_counter_ns
    for _ in range(2_000):  # warm up caches and the allocator
        perturb(x)
    times = np.empty(calls, dtype=np.int64)
    coins = np.empty(calls, dtype=bool)
    gc.disable()
    try:
        for i in range(calls):
            start = clock()
            report = perturb(x)
            times[i] = clock() - start
            coins[i] = coin(report)
    finally:
        gc.enable()
    a = auc(times[coins], times[~coins])
    return {
        "auc": a,
        "separation": max(a, 1 - a),
        "median_ns_coin_up": float(np.median(times[coins])),
        "median_ns_coin_down": float(np.median(times[~coins])),
        "coin_up_share": float(coins.mean()),
        "calls": calls,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000, help="timed calls per mechanism")
    parser.add_argument("--only", nargs="*", choices=MECHANISMS, help="these mechanisms only")
    parser.add_argument("--format", choices=["table", "json"], default="table")
    args = parser.parse_args()
    results = {name: measure(name, args.calls) for name in args.only or MECHANISMS}
    worst = max(r["separation"] for r in results.values())
    if args.format == "json":
        print(json.dumps(results, indent=2))
    else:
        print(f"{'mechanism':<10}{'AUC':>7}{'separation':>12}{'median ns up':>14}{'down':>8}")
        for name, r in results.items():
            print(
                f"{name:<10}{r['auc']:>7.3f}{r['separation']:>12.3f}"
                f"{r['median_ns_coin_up']:>14,.0f}{r['median_ns_coin_down']:>8,.0f}"
            )
        print(f"({args.calls:,} timed perturb calls per mechanism, OS randomness, epsilon 1, k 14)")
        print(
            f"target separation <= {TARGET}: {'met' if worst <= TARGET else 'NOT met'} "
            f"(worst {worst:.3f})"
        )
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
