"""``ldp demo``: UCI Adult replayed as devices through the real SDK, collector and aggregator.

An embedded collector runs on a temporary SQLite file on loopback; a campaign per attribute is
created through the admin API (mechanism ``auto`` at the demo's epsilon); every Adult row becomes
one device whose report goes through the SDK's real outbox and upload code; the estimates are
read back through the analyst API and set against the truth and a central Laplace release at the
same epsilon (L1 sensitivity 1, add/remove of one person).

One numeric attribute (``age``, bounds [17, 90], mean mechanism ``auto``) goes the same way: a
numeric campaign, one number per row through the SDK, and the collector's mean with its
interval against the true mean and a central Laplace mean at the same epsilon (the number of
people public, one person's age replaced: sensitivity ``(high - low) / n``).

The honest comparison for a shuffled deployment (docs/SHUFFLE.md): the same local estimate (a
shuffler does not change it) against central Laplace and Gaussian releases at the *amplified*
central (ε, δ) that the n shuffled reports satisfy (``simulator.central.shuffle_comparison``).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from client_sdk.mechanisms import create
from simulator.adult import load_adult
from simulator.central import laplace_baseline, shuffle_comparison
from simulator.http_mode import CollectorError, HttpBackend, collector_target
from simulator.metrics import all_metrics
from simulator.numeric import adult_numeric
from simulator.report import sanitise
from simulator.sweep import check_setting_epsilon

DEFAULT_ATTRIBUTES = ("occupation", "education")
#: The numeric attribute of the demo and its clipping bounds (Adult's ages lie in [17, 90]).
NUMERIC_ATTRIBUTE = "age"
NUMERIC_BOUNDS = (17.0, 90.0)
#: The multi-attribute campaign of the demo: both attributes in one report, and their crosstab.
CROSSTAB = ("sex", "income")
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
    numeric: bool = True,
    crosstab: bool = True,
) -> dict[str, Any]:
    """Run the demo; returns its results (also written to ``output/results.json``).

    ``numeric``: also replay Adult ``age`` through a numeric (mean) campaign. ``crosstab``:
    also replay ``sex`` and ``income`` as one multi-attribute campaign (one report per row)
    and read back their joint table.
    """
    started = time.perf_counter()
    # Refused before a collector starts or the output directory is made (it was left empty).
    check_setting_epsilon(epsilon)
    data = load_adult("train")
    rng = np.random.default_rng(seed)
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"epsilon": epsilon, "level": LEVEL, "attributes": {}}
    # The devices' state lives as long as the embedded collector: kept in the output directory,
    # a later run (a new collector; another epsilon, so another campaign digest) reused its
    # cached campaigns, whose uploads the new collector refused as stale, and had no reports.
    with collector_target() as target, tempfile.TemporaryDirectory() as state:
        echo(f"collector: {target.url} (embedded, temporary SQLite file, loopback only)")
        with HttpBackend(target, state) as backend:
            for name in attributes:
                labels, indices = data.column(name)
                mech = create("auto", epsilon=epsilon, domain=labels)
                est = backend.replay(name, mech, indices, rng)
                truth = np.bincount(indices, minlength=len(labels)).astype(float)
                central = laplace_baseline(epsilon).release(truth, rng=rng)
                shuffled = shuffle_comparison(mech.realised_epsilon, est.n)
                # At an amplified epsilon of 0 the central noise is unbounded: nothing to draw.
                released = shuffled.epsilon > 0
                shuffled_errors = {
                    "laplace_errors": all_metrics(
                        truth, shuffled.laplace.release(truth, rng=rng), est.n
                    )
                    if released
                    else None,
                    "gaussian_errors": all_metrics(
                        truth, shuffled.gaussian.release(truth, rng=rng), est.n
                    )
                    if released
                    else None,
                }
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
                    "shuffle": {**shuffled.to_dict(), **shuffled_errors},
                }
                echo(
                    f"campaign {name}: {len(labels)} values, {est.n:,} devices, mechanism "
                    f"{mech.name} (auto), epsilon {epsilon:g}"
                )
            if numeric:
                results["numeric"] = {NUMERIC_ATTRIBUTE: _numeric_mean(backend, epsilon, rng)}
                r = results["numeric"][NUMERIC_ATTRIBUTE]
                echo(
                    f"campaign {NUMERIC_ATTRIBUTE}: bounds {list(NUMERIC_BOUNDS)}, {r['n']:,} "
                    f"devices, mechanism {r['mechanism']} (auto), epsilon {epsilon:g}"
                )
            if crosstab:
                results["crosstab"] = _crosstab(backend, data, epsilon, rng)
                c = results["crosstab"]
                echo(
                    f"campaign {c['campaign']}: {' x '.join(CROSSTAB)} in one report per "
                    f"device, {c['n']:,} devices, mechanism {c['mechanism']} (auto), "
                    f"epsilon {epsilon:g}"
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


def _numeric_mean(backend: HttpBackend, epsilon: float, rng: np.random.Generator) -> dict:
    """Adult ``age`` through a numeric campaign: the collector's mean against the truth and a
    central Laplace mean at the same epsilon."""
    from simulator.http_mode import _call

    target = backend.target
    values = adult_numeric(NUMERIC_ATTRIBUTE)
    body = {
        "id": NUMERIC_ATTRIBUTE,
        "description": "Age (UCI Adult), clipped into the bounds on the device",
        "bounds": list(NUMERIC_BOUNDS),
        "mechanism": "auto",
        "epsilon": epsilon,
    }
    created = _call("POST", f"{target.url}/v1/campaigns", target.admin_token, json=body)
    backend.client.report_many(NUMERIC_ATTRIBUTE, values, simulate_devices=True, rng=rng)
    if not backend.client.flush(timeout=600):
        raise CollectorError(f"upload did not finish: {backend.client.stats()}")
    answer = _call(
        "GET",
        f"{target.url}/v1/campaigns/{NUMERIC_ATTRIBUTE}/estimates",
        target.analyst_token,
        params={"level": LEVEL},
    )
    n = int(answer["n"])
    low, high = NUMERIC_BOUNDS
    true_mean = float(np.clip(values, low, high).mean())
    scale = (high - low) / (n * epsilon)  # n public, one person's value replaced
    return {
        "n": n,
        "mechanism": created["mechanism"]["mechanism"],
        "bounds": list(NUMERIC_BOUNDS),
        "true_mean": true_mean,
        "estimate": answer["mean"],
        "std_error": answer["std_error"],
        "ci_low": answer["ci"]["low"],
        "ci_high": answer["ci"]["high"],
        "laplace_mean": true_mean + float(rng.laplace(0.0, scale)),
        "laplace_scale": scale,
    }


def _crosstab(backend: HttpBackend, data: Any, epsilon: float, rng: np.random.Generator) -> dict:
    """Adult ``sex`` and ``income`` through one multi-attribute campaign with their pair
    declared: the collector's joint table with intervals against the true one."""
    from simulator.http_mode import _call

    target = backend.target
    columns, attributes = {}, {}
    for name in CROSSTAB:
        labels, indices = data.column(name, missing="keep")
        attributes[name], columns[name] = labels, indices
    cid = "-".join(CROSSTAB)
    body = {
        "id": cid,
        "description": "Sex and income (UCI Adult): one report per device, one epsilon",
        "attributes": attributes,
        "pairs": [list(CROSSTAB)],
        "mechanism": "auto",
        "epsilon": epsilon,
    }
    created = _call("POST", f"{target.url}/v1/campaigns", target.admin_token, json=body)
    backend.client.report_many(cid, columns, simulate_devices=True, rng=rng)
    if not backend.client.flush(timeout=600):
        raise CollectorError(f"upload did not finish: {backend.client.stats()}")
    answer = _call(
        "GET",
        f"{target.url}/v1/campaigns/{cid}/estimates",
        target.analyst_token,
        params={"level": LEVEL},
    )
    (joint,) = answer["joints"]
    a, b = CROSSTAB
    truth = np.zeros((len(attributes[a]), len(attributes[b])))
    np.add.at(truth, (columns[a], columns[b]), 1)
    return {
        "campaign": cid,
        "n": int(answer["n"]),
        "mechanism": created["mechanism"]["mechanism"],
        "pair": list(CROSSTAB),
        "rows": joint["rows"],
        "columns": joint["columns"],
        "truth": truth.tolist(),
        "estimate": joint["counts"],
        "ci_low": joint["ci_low"],
        "ci_high": joint["ci_high"],
    }


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
        shuffle = r.get("shuffle")
        if shuffle and shuffle["laplace_errors"] is None:
            lines.append(
                f"  through a shuffler: the reports are already (0, "
                f"{shuffle['central_delta']:.1e})-DP from local epsilon {shuffle['epsilon0']:.4g}; "
                "no central release at that budget has finite error"
            )
        elif shuffle:
            lap, gau = shuffle["laplace_errors"], shuffle["gaussian_errors"]
            lines.append(
                f"  through a shuffler: central (epsilon {shuffle['central_epsilon']:.4f}, "
                f"delta {shuffle['central_delta']:.1e}) from local epsilon "
                f"{shuffle['epsilon0']:.4g}; at that budget central Laplace RMSE "
                f"{lap['rmse']:.2f}, Gaussian RMSE {gau['rmse']:.2f}; local/central RMSE "
                f"{local['rmse'] / lap['rmse']:,.0f}x (Laplace), "
                f"{local['rmse'] / gau['rmse']:,.0f}x (Gaussian)"
            )
    for name, r in results.get("numeric", {}).items():
        half = r["ci_high"] - r["estimate"]
        lines += [
            f"\n{name}: {r['n']:,} devices, mean mechanism {r['mechanism']}, "
            f"epsilon {results['epsilon']:g}, bounds {r['bounds']}",
            f"  true mean {r['true_mean']:.2f}; local estimate {r['estimate']:.2f} "
            f"+- {half:.2f} ({level}% CI [{r['ci_low']:.2f}, {r['ci_high']:.2f}], SE "
            f"{r['std_error']:.3f}); central Laplace mean {r['laplace_mean']:.3f} "
            f"(noise scale {r['laplace_scale']:.4f})",
        ]
    c = results.get("crosstab")
    if c:
        a, b = c["pair"]
        lines.append(
            f"\n{a} x {b}: {c['n']:,} devices, one report each ({c['mechanism']}), epsilon "
            f"{results['epsilon']:g}; true count / local estimate [{level}% CI]"
        )
        corner = f"{a} \\ {b}"
        width = max(len(x) for x in [*c["rows"], corner])
        cells = [
            [
                f"{c['truth'][i][j]:,.0f} / {c['estimate'][i][j]:,.0f} "
                f"[{c['ci_low'][i][j]:,.0f}, {c['ci_high'][i][j]:,.0f}]"
                for j in range(len(c["columns"]))
            ]
            for i in range(len(c["rows"]))
        ]
        cw = max(len(x) for x in [*c["columns"], *(v for row in cells for v in row)])
        head = "  ".join(f"{x:>{cw}}" for x in c["columns"])
        lines.append(f"  {corner:<{width}}  {head}")
        for label, row in zip(c["rows"], cells, strict=True):
            lines.append(f"  {label:<{width}}  " + "  ".join(f"{x:>{cw}}" for x in row))
    return "\n".join(lines)
