"""``ldp demo``: UCI Adult replayed as devices through the real SDK, collector and aggregator.

An embedded collector runs on a temporary SQLite file on loopback; a campaign per attribute is
created through the admin API (mechanism ``auto`` at the demo's epsilon); every Adult row becomes
one device whose report goes through the SDK's real outbox and upload code; the estimates are
read back through the analyst API and set against the truth and a central Laplace release at the
same epsilon (L1 sensitivity 1, add/remove of one person).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from client_sdk.mechanisms import create
from simulator.adult import load_adult
from simulator.central import laplace_baseline
from simulator.http_mode import HttpBackend, collector_target
from simulator.metrics import all_metrics
from simulator.report import sanitise

DEFAULT_ATTRIBUTES = ("occupation", "education")
DEFAULT_EPSILON = 1.0
DEFAULT_OUTPUT = Path("ldp-demo-output")
LEVEL = 0.95


def run_demo(
    *,
    attributes: Sequence[str] = DEFAULT_ATTRIBUTES,
    epsilon: float = DEFAULT_EPSILON,
    output: str | Path = DEFAULT_OUTPUT,
    seed: int | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the demo; returns its results (also written to ``output/results.json``)."""
    started = time.perf_counter()
    data = load_adult("train")
    rng = np.random.default_rng(seed)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"epsilon": epsilon, "level": LEVEL, "attributes": {}}
    with collector_target() as target:
        echo(f"collector: {target.url} (embedded, temporary SQLite file, loopback only)")
        with HttpBackend(target, out / ".device-state") as backend:
            for name in attributes:
                labels, indices = data.column(name)
                mech = create("auto", epsilon=epsilon, domain=labels)
                est = backend.replay(name, mech, indices, rng)
                truth = np.bincount(indices, minlength=len(labels)).astype(float)
                central = laplace_baseline(epsilon).release(truth, rng=rng)
                lo, hi = est.ci(LEVEL)
                results["attributes"][name] = {
                    "n": est.n,
                    "mechanism": mech.name,
                    "params": mech.params(),
                    "theoretical_std_error": est.theoretical_std_error,
                    "labels": list(labels),
                    "truth": truth.tolist(),
                    "estimate": est.counts.tolist(),
                    "ci_low": lo.tolist(),
                    "ci_high": hi.tolist(),
                    "laplace": central.tolist(),
                    "local_errors": all_metrics(truth, est.counts, est.n),
                    "central_errors": all_metrics(truth, central, est.n),
                }
                echo(
                    f"campaign {name}: {len(labels)} values, {est.n:,} devices, mechanism "
                    f"{mech.name} (auto), epsilon {epsilon:g}"
                )
    from simulator import plots

    paths = []
    for name, r in results["attributes"].items():
        example = {
            **r,
            "attribute": name,
            "epsilon": epsilon,
            "resolved": r["mechanism"],
            "level": LEVEL,
        }
        paths.append(plots.truth_vs_estimate(example, out, name=f"demo_{name}.png"))
    results["plots"] = [str(p) for p in paths]
    results["seconds"] = time.perf_counter() - started
    (out / "results.json").write_text(json.dumps(sanitise(results), indent=1) + "\n")
    return results


def render_tables(results: dict[str, Any]) -> str:
    """The demo's tables: per attribute, value by value, then the error summary."""
    lines = []
    level = int(results["level"] * 100)
    for name, r in results["attributes"].items():
        lines.append(
            f"\n{name}: {r['n']:,} devices, mechanism {r['mechanism']}, "
            f"epsilon {results['epsilon']:g}"
        )
        width = max(len(x) for x in [*r["labels"], "value"])
        head = (
            f"  {'value':<{width}}  {'true':>7}  {'local estimate':>14}  "
            f"{f'{level}% CI':>19}  {'central Laplace':>15}"
        )
        lines += [head, "  " + "-" * (len(head) - 2)]
        for i, label in enumerate(r["labels"]):
            ci = f"[{r['ci_low'][i]:,.0f}, {r['ci_high'][i]:,.0f}]"
            lines.append(
                f"  {label:<{width}}  {r['truth'][i]:>7,.0f}  {r['estimate'][i]:>14,.0f}  "
                f"{ci:>19}  {r['laplace'][i]:>15,.1f}"
            )
        local, central = r["local_errors"], r["central_errors"]
        lines.append(
            f"  error (counts): local MAE {local['mae']:,.1f}, RMSE {local['rmse']:,.1f}, "
            f"max {local['max_abs_error']:,.1f} (theory SE {r['theoretical_std_error']:,.1f}); "
            f"central Laplace MAE {central['mae']:.2f}, RMSE {central['rmse']:.2f}; "
            f"local/central RMSE {local['rmse'] / central['rmse']:,.0f}x"
        )
    return "\n".join(lines)
