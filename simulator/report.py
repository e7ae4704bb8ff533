"""Writing a sweep's output directory: ``results.json``, ``report.md`` and the PNG plots."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator.sweep import mse_agreement


def _fmt(x: float, digits: int = 4) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{x:.{digits}g}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    right = ["---:" if i else "---" for i in range(len(header))]
    return [
        "| " + " | ".join(header) + " |",
        "|" + "|".join(right) + "|",
        *("| " + " | ".join(r) + " |" for r in rows),
    ]


def render_report(results: dict[str, Any], plots: list[Path] | None = None) -> str:
    """The Markdown report of a sweep: settings, per-attribute tables, theory agreement."""
    s = results["settings"]
    missing = "dropped" if s["missing"] == "drop" else "kept as the category '?'"
    lines = [
        "# Local DP simulation report",
        "",
        f"Mode `{results['mode']}`; data {results['dataset']['name']} "
        f"({results['dataset']['n_rows']:,} rows); missing values {missing}.",
        "",
        f"Epsilons {', '.join(f'{e:g}' for e in s['epsilons'])}; mechanisms "
        f"{', '.join(s['mechanisms'])}; {s['repetitions']} repetitions; seed {s['seed']}; "
        f"{results['replays']:,} replays in {results['seconds']:.1f} s.",
        "",
        "Errors are on counts, mean ± SD over repetitions. *theory* is the mechanism's "
        "closed-form RMSE (`count_variance(n, true counts)`); *Laplace* and *Gaussian* are the "
        "central baselines at the same epsilon (add/remove neighbours, sensitivity 1, "
        "Gaussian delta = 1/n^2, analytic calibration); *x Laplace* is local RMSE / central "
        "Laplace RMSE. TV is the total-variation distance of the frequency vectors.",
    ]
    attribution = results["dataset"].get("attribution")
    if attribution:  # the bundled Adult data; a user's own CSV has none
        lines += ["", f"Data: {attribution}."]
    for attribute, info in results["attributes"].items():
        lines += ["", f"## {attribute} (k = {len(info['labels'])}, n = {info['n']:,})", ""]
        central = {c["epsilon"]: c for c in results["central"] if c["attribute"] == attribute}
        rows = []
        for r in (r for r in results["runs"] if r["attribute"] == attribute):
            m, c = r["metrics"], central[r["epsilon"]]
            name = (
                r["mechanism"]
                if r["mechanism"] == r["resolved"]
                else (f"{r['mechanism']} ({r['resolved']})")
            )
            rows.append(
                [
                    name,
                    f"{r['epsilon']:g}",
                    f"{_fmt(m['rmse']['mean'])} ± {_fmt(m['rmse']['std'], 2)}",
                    _fmt(r["theory"]["rmse"]),
                    _fmt(m["mae"]["mean"]),
                    _fmt(m["max_abs_error"]["mean"]),
                    _fmt(m["tv"]["mean"], 3),
                    _fmt(m["top5_relative_error"]["mean"], 3),
                    _fmt(m["top5_recall"]["mean"], 3),
                    _fmt(c["laplace"]["metrics"]["rmse"]["mean"], 3),
                    _fmt(c["gaussian"]["metrics"]["rmse"]["mean"], 3),
                    _fmt(r["rmse_over_laplace"], 3),
                ]
            )
        lines += _table(
            [
                "mechanism",
                "epsilon",
                "RMSE",
                "theory",
                "MAE",
                "max |err|",
                "TV",
                "top-5 rel. err",
                "top-5 recall",
                "Laplace",
                "Gaussian",
                "x Laplace",
            ],
            rows,
        )
    agreement = mse_agreement(results)
    lines += [
        "",
        "## Measured MSE against the closed-form variance",
        "",
        "Pooled ratio = sum of measured MSE / sum of theoretical MSE over a mechanism's cells.",
        "",
    ]
    lines += _table(
        ["mechanism", "cells", "pooled ratio", "min cell", "max cell"],
        [
            [name, str(a["cells"]), f"{a['pooled']:.3f}", f"{a['min']:.3f}", f"{a['max']:.3f}"]
            for name, a in agreement.items()
        ],
    )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def write_outputs(
    results: dict[str, Any], out_dir: str | Path, *, plots: bool = True
) -> dict[str, Any]:
    """Write ``results.json``, the PNG plots (unless ``plots=False``) and ``report.md``.

    Returns the paths written: ``{"results": Path, "report": Path, "plots": [Path, ...]}``.
    """
    from simulator import plots as plotting

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs: list[Path] = []
    if plots:
        pngs += plotting.error_vs_epsilon(results, out)
        if results.get("example"):
            pngs.append(plotting.truth_vs_estimate(results["example"], out))
    results_path = out / "results.json"
    results_path.write_text(json.dumps(sanitise(results), indent=1, allow_nan=False) + "\n")
    report_path = out / "report.md"
    report_path.write_text(render_report(results, pngs))
    return {"results": results_path, "report": report_path, "plots": pngs}


def sanitise(obj: Any) -> Any:
    """A JSON-safe copy: NumPy values as Python ones, NaN and infinities as None, paths as str."""
    if isinstance(obj, dict):
        return {str(k): sanitise(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitise(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if hasattr(obj, "tolist"):
        return sanitise(obj.tolist())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def write_scenario_outputs(
    out_dir: str | Path,
    stem: str,
    lines: list[str],
    data: Any,
    make_plots: Callable[[Path], list[Path]] | None,
) -> list[Path]:
    """A named scenario's outputs: its PNGs (``make_plots(out)``, unless None), ``<stem>.md``
    (``lines`` and the plots) and ``<stem>.json`` (``data``, made JSON-safe); the paths, report
    first."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs = make_plots(out) if make_plots is not None else []
    report = out / f"{stem}.md"
    report.write_text("\n".join(lines + ["", *(f"![{p.stem}]({p.name})" for p in pngs)]) + "\n")
    path = out / f"{stem}.json"
    path.write_text(json.dumps(sanitise(data), indent=1, allow_nan=False) + "\n")
    return [report, path, *pngs]
