"""Simulator speed and fidelity.

Run: .venv/bin/python bench/simulate.py [--quick]

1. Full Adult replay in HTTP mode: 5 attributes, every one of the 32,561 rows a device, through
   the SDK's outbox and upload code to an embedded collector (SQLite) and back through the
   analyst API (epsilon 1, mechanism auto). Target <= 60 s.
2. In-process sweep: 5 attributes x 4 epsilons x all mechanisms x 20 repetitions. Target <= 30 s.
3. The same sweep's empirical MSE against each mechanism's closed-form variance (pooled over
   cells; the target is agreement within 10%).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time

from simulator.adult import load_adult
from simulator.http_mode import HttpBackend, collector_target
from simulator.sweep import DEFAULT_ATTRIBUTES, SweepSettings, mse_agreement, run_sweep


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 repetitions, for a smoke run")
    args = parser.parse_args()
    adult = load_adult("train")
    print(f"attributes: {', '.join(DEFAULT_ATTRIBUTES)}; {adult.n_rows:,} rows", flush=True)

    settings = SweepSettings(epsilons=(1.0,), mechanisms=("auto",), repetitions=1)
    start = time.perf_counter()
    with collector_target() as target, tempfile.TemporaryDirectory() as state:
        with HttpBackend(target, state) as backend:
            http = run_sweep(adult, settings, backend=backend)
    http_seconds = time.perf_counter() - start
    devices = sum(r["n"] for r in http["runs"])
    print(
        f"\n1. HTTP replay: {len(http['runs'])} attributes, {devices:,} reports "
        f"({adult.n_rows:,} devices per attribute, missing values dropped) in "
        f"{http_seconds:.1f} s  {'OK' if http_seconds <= 60 else 'MISSES'} target <= 60 s"
    )

    reps = 2 if args.quick else 20
    sweep_settings = SweepSettings(mechanisms=("all",), repetitions=reps)
    start = time.perf_counter()
    sweep = run_sweep(adult, sweep_settings)
    sweep_seconds = time.perf_counter() - start
    print(
        f"\n2. In-process sweep: 5 attributes x 4 epsilons x all mechanisms x {reps} repetitions "
        f"= {sweep['replays']:,} replays in {sweep_seconds:.1f} s  "
        f"{'OK' if sweep_seconds <= 30 else 'MISSES'} target <= 30 s"
    )

    print("\n3. Empirical MSE / closed-form theory, pooled over the sweep's cells:")
    worst = 0.0
    for name, row in mse_agreement(sweep).items():
        worst = max(worst, abs(row["pooled"] - 1))
        print(
            f"   {name:6} {row['pooled']:.3f} over {row['cells']:3} cells "
            f"(per cell {row['min']:.2f} to {row['max']:.2f})"
        )
    print(
        f"   largest pooled deviation {100 * worst:.1f}%  "
        f"{'OK' if worst <= 0.10 else 'MISSES'} target within 10%"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
