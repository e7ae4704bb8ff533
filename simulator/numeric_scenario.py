"""``ldp simulate --scenario numeric``: numeric telemetry on Adult against central DP.

Three Adult columns (train split, n = 32,561), each with declared bounds:

* **means** of ``age``, ``hours-per-week`` and ``capital-gain`` by every mean mechanism and
  ``auto`` (``client_sdk.mechanisms.numeric``), swept over epsilon: empirical MSE over
  repetitions against the exact formula (``mean_variance``), against the central Laplace mean
  (``mean + Lap(span / (n eps))``) and the mean of a central Laplace histogram, both at the same
  epsilon;
* **what bounds cost** on heavy-tailed ``capital-gain``: for several upper bounds, the squared
  clipping bias (clipped mean - raw mean)**2 against the variance of ``auto``'s estimate, and the
  measured MSE against the *raw* mean;
* **distributions** of ``age`` and ``hours-per-week``: Square Wave + EMS against the binned
  frequency-oracle baseline (:func:`simulator.numeric.binned_baseline`, bins from
  :func:`baseline_bins`) and the central Laplace histogram: Wasserstein-1 and the errors of the
  median, p90 and p99, mean over repetitions with a 95% interval of that mean, and the Square
  Wave estimate's own bootstrap intervals (first repetition).

Only perturbed reports reach the estimators; the true values serve as the yardstick.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aggregator.numeric import estimate_numeric
from client_sdk.mechanisms.numeric import MeanMechanism, create
from simulator.errors import InvalidSetting, UnknownAttribute
from simulator.numeric import (
    adult_numeric,
    binned_baseline,
    central_laplace_histogram,
    central_laplace_mean_mse,
    central_laplace_means,
    repeated_means,
    true_quantile,
    wasserstein1,
)
from simulator.sweep import check_setting_epsilon

#: Declared bounds of the numeric columns the scenario replays.
NUMERIC_BOUNDS: dict[str, tuple[float, float]] = {
    "age": (17.0, 90.0),
    "hours-per-week": (1.0, 99.0),
    "capital-gain": (0.0, 100_000.0),
}
#: Mean mechanisms compared (``auto`` last: it resolves to one of the others).
MEAN_NAMES = ("duchi", "1bitmean", "piecewise", "hybrid", "alpha_point", "auto")
#: Upper bounds swept for capital-gain (lower bound 0).
CAPITAL_GAIN_HIGHS = (2_000.0, 5_000.0, 10_000.0, 20_000.0, 50_000.0, 100_000.0)
#: Columns whose distribution is estimated.
DISTRIBUTION_COLUMNS = ("age", "hours-per-week")
#: Bins of the central Laplace histogram (its noise is tiny: fine bins cost little).
CENTRAL_HISTOGRAM_BINS = 256
QUANTILES = (0.5, 0.9, 0.99)
DEFAULT_NUMERIC_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_NUMERIC_REPETITIONS = 50
#: Repetitions of the distribution estimates (EMS is the expensive part).
DEFAULT_DISTRIBUTION_REPETITIONS = 10


def baseline_bins(n: int, epsilon: float) -> int:
    """Bins of the binned baseline, fixed from ``n`` and ``epsilon`` only (not from the data).

    Chosen to minimise the baseline's own Wasserstein-1 error bound. With ``k`` equal bins on a
    range of length ``L`` and per-bin frequency noise of variance ``V/n`` (the optimal frequency
    oracles, OUE/OLH: ``V = 4 e^eps / (e^eps - 1)**2``), the CDF at the ``j``-th edge errs by
    about ``sqrt(j V / n)``, so noise adds ``~ (2/3) L sqrt(k V / n)`` to W1, while spreading
    mass uniformly inside a bin adds ``~ L / (4 k)``. The sum is smallest at
    ``k = (9 n / (16 V))**(1/3)``, rounded to a power of two in ``[4, 256]``.
    """
    e = math.exp(epsilon)
    variance = 4 * e / (e - 1) ** 2
    k = (9 * n / (16 * variance)) ** (1 / 3)
    return int(min(256, max(4, 2 ** round(math.log2(k)))))


@dataclass(frozen=True)
class NumericSettings:
    columns: tuple[str, ...] = tuple(NUMERIC_BOUNDS)
    epsilons: tuple[float, ...] = DEFAULT_NUMERIC_EPSILONS
    repetitions: int = DEFAULT_NUMERIC_REPETITIONS
    distribution_repetitions: int = DEFAULT_DISTRIBUTION_REPETITIONS
    seed: int = 0

    def __post_init__(self) -> None:
        for c in self.columns:
            if c not in NUMERIC_BOUNDS:
                raise UnknownAttribute(
                    f"no numeric column {c!r} in the scenario; choose from "
                    + ", ".join(NUMERIC_BOUNDS)
                )
        for e in self.epsilons:
            check_setting_epsilon(e)  # every mechanism's range, before any cell runs
        for name in ("repetitions", "distribution_repetitions"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 2:
                raise InvalidSetting(f"{name} must be an integer >= 2, got {v!r}")


def _interval(values: np.ndarray) -> tuple[float, float, float]:
    """Mean and a normal 95% interval of the mean of ``values``."""
    m = float(values.mean())
    half = 1.96 * float(values.std(ddof=1)) / math.sqrt(values.size) if values.size > 1 else 0.0
    return m, m - half, m + half


def _mse_interval(errors: np.ndarray) -> tuple[float, float, float]:
    """Empirical MSE with a 95% interval (chi-square on R degrees of freedom, normal errors)."""
    from scipy.stats import chi2

    r = errors.size
    mse = float(np.mean(errors**2))
    lo, hi = chi2.ppf([0.975, 0.025], r)
    return mse, r * mse / float(lo), r * mse / float(hi)


def _seed(settings: NumericSettings, *parts: float) -> list[int]:
    return [settings.seed, *(int(round(p * 1000)) for p in parts)]


def _mean_rows(settings: NumericSettings, column: str, x: np.ndarray) -> list[dict[str, Any]]:
    bounds = NUMERIC_BOUNDS[column]
    truth = float(np.clip(x, *bounds).mean())
    rows = []
    reps = settings.repetitions
    for eps in settings.epsilons:
        for k, name in enumerate(MEAN_NAMES):
            mech = create(name, epsilon=eps, bounds=bounds)
            assert isinstance(mech, MeanMechanism)
            means = repeated_means(mech, x, reps=reps, rng=_seed(settings, eps, k, bounds[1]))
            formula = mech.mean_variance(x)
            rows.append(_mean_row(column, eps, name, mech.name, means - truth, formula))
        central = central_laplace_means(
            x, bounds=bounds, epsilon=eps, reps=reps, rng=_seed(settings, eps, 90)
        )
        rows.append(
            _mean_row(
                column,
                eps,
                "central-laplace-mean",
                "central-laplace-mean",
                central - truth,
                central_laplace_mean_mse(x.size, bounds=bounds, epsilon=eps),
            )
        )
        gen = np.random.default_rng(_seed(settings, eps, 91))
        hist = np.array(
            [
                central_laplace_histogram(
                    x, bounds=bounds, epsilon=eps, bins=CENTRAL_HISTOGRAM_BINS, rng=gen
                ).mean
                for _ in range(reps)
            ]
        )
        rows.append(
            _mean_row(column, eps, "central-laplace-hist", "central-laplace-hist", hist - truth)
        )
    return rows


def _mean_row(
    column: str,
    eps: float,
    name: str,
    resolved: str,
    errors: np.ndarray,
    formula: float | None = None,
) -> dict[str, Any]:
    mse, lo, hi = _mse_interval(errors)
    bias = float(errors.mean())
    se = float(errors.std(ddof=1)) / math.sqrt(errors.size)
    return {
        "column": column,
        "epsilon": eps,
        "mechanism": name,
        "resolved": resolved,
        "formula_mse": formula,
        "mse": mse,
        "mse_ci": [lo, hi],
        "ratio": mse / formula if formula else None,
        "bias": bias,
        "bias_over_se": bias / se if se > 0 else 0.0,
        "rmse": math.sqrt(mse),
    }


def _clipping_rows(settings: NumericSettings, x: np.ndarray) -> list[dict[str, Any]]:
    """capital-gain: bias**2 of clipping vs the variance of ``auto``, and the total MSE."""
    raw = float(x.mean())
    rows = []
    for high in CAPITAL_GAIN_HIGHS:
        bounds = (0.0, high)
        clipped = float(np.clip(x, *bounds).mean())
        for eps in settings.epsilons:
            mech = create("auto", epsilon=eps, bounds=bounds)
            assert isinstance(mech, MeanMechanism)
            means = repeated_means(
                mech, x, reps=settings.repetitions, rng=_seed(settings, eps, high, 7)
            )
            mse, lo, hi = _mse_interval(means - raw)
            rows.append(
                {
                    "high": high,
                    "epsilon": eps,
                    "resolved": mech.name,
                    "clipped_fraction": float((x > high).mean()),
                    "bias": clipped - raw,
                    "bias2": (clipped - raw) ** 2,
                    "variance": mech.mean_variance(x),
                    "mse_raw": mse,
                    "mse_raw_ci": [lo, hi],
                    "central_variance": central_laplace_mean_mse(
                        x.size, bounds=bounds, epsilon=eps
                    ),
                }
            )
    return rows


def _distribution_rows(
    settings: NumericSettings, column: str, x: np.ndarray
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    bounds = NUMERIC_BOUNDS[column]
    truth = {q: true_quantile(x, q, bounds) for q in QUANTILES}
    rows: list[dict[str, Any]] = []
    example: dict[str, Any] = {}
    reps = settings.distribution_repetitions
    for eps in settings.epsilons:
        bins = baseline_bins(x.size, eps)
        mech = create("square_wave", epsilon=eps, bounds=bounds)
        gen = np.random.default_rng(_seed(settings, eps, bounds[1], 3))
        per: dict[str, list[Any]] = {"square_wave": [], f"binned-{bins}": [], "central-laplace": []}
        sw_intervals: dict[str, Any] = {}
        for r in range(reps):
            est = estimate_numeric(
                mech,
                mech.tally(mech.perturb_many(x, rng=gen)),
                bootstrap=50 if r == 0 else 0,
                rng=gen,
            )
            if r == 0:
                sw_intervals = {
                    str(q): vars(est.quantile(q)) | {"truth": truth[q]}  # type: ignore[union-attr]
                    for q in QUANTILES
                }
            per["square_wave"].append(est)
            per[f"binned-{bins}"].append(
                binned_baseline(x, epsilon=eps, bounds=bounds, bins=bins, rng=gen)
            )
            per["central-laplace"].append(
                central_laplace_histogram(
                    x, bounds=bounds, epsilon=eps, bins=CENTRAL_HISTOGRAM_BINS, rng=gen
                )
            )
        for label, ests in per.items():
            row: dict[str, Any] = {"column": column, "epsilon": eps, "estimator": label}
            m, lo, hi = _interval(np.array([wasserstein1(e, x) for e in ests]))
            row["w1"] = {"mean": m, "ci": [lo, hi]}
            for q in QUANTILES:
                err = np.array([abs(e.quantile(q).value - truth[q]) for e in ests])
                m, lo, hi = _interval(err)
                row[f"q{q:g}"] = {"mean": m, "ci": [lo, hi]}
            if label == "square_wave":
                row["bootstrap_intervals"] = sw_intervals
            rows.append(row)
        if math.isclose(eps, 1.0) or not example:
            sw, bn, cl = (per[k][0] for k in per)
            example = {
                "epsilon": eps,
                "truth_cdf": _true_cdf(x, bounds),
                "estimates": {
                    k: {"edges": e.edges.tolist(), "frequencies": e.frequencies.tolist()}
                    for k, e in zip(per, (sw, bn, cl), strict=True)
                },
            }
    return rows, example


def _true_cdf(x: np.ndarray, bounds: tuple[float, float], points: int = 1024) -> dict[str, Any]:
    """The empirical CDF of the clipped values on ``points`` abscissae (for the CDF plot)."""
    xs = np.linspace(bounds[0], bounds[1], points)
    clipped = np.sort(np.clip(x, *bounds))
    cdf = np.searchsorted(clipped, xs, side="right") / clipped.size
    return {"x": xs.tolist(), "cdf": cdf.tolist()}


def run_numeric(settings: NumericSettings, progress: Any = None) -> dict[str, Any]:
    """Run the scenario; a JSON-safe dict of settings and rows (see the module docstring)."""
    start = time.perf_counter()
    results: dict[str, Any] = {
        "settings": asdict(settings),
        "bounds": {c: list(NUMERIC_BOUNDS[c]) for c in settings.columns},
        "columns": {},
        "means": [],
        "clipping": [],
        "distributions": [],
        "examples": {},
    }
    for column in settings.columns:
        x = adult_numeric(column)
        results["columns"][column] = {
            "n": int(x.size),
            "raw_mean": float(x.mean()),
            "clipped_mean": float(np.clip(x, *NUMERIC_BOUNDS[column]).mean()),
        }
        results["means"] += _mean_rows(settings, column, x)
        if progress:
            progress(f"means of {column}")
        if column == "capital-gain":
            results["clipping"] = _clipping_rows(settings, x)
            if progress:
                progress("clipping bounds of capital-gain")
        if column in DISTRIBUTION_COLUMNS:
            rows, example = _distribution_rows(settings, column, x)
            results["distributions"] += rows
            results["examples"][column] = example
            if progress:
                progress(f"distribution of {column}")
    results["seconds"] = time.perf_counter() - start
    return results


def _g(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "-"
    if v != 0 and (abs(v) >= 1e5 or abs(v) < 1e-3):
        return f"{v:.{digits - 1}e}"
    return f"{v:.{digits}g}"


def table_lines(results: dict[str, Any]) -> list[str]:
    """The scenario's tables as Markdown lines (also printed by ``ldp simulate``)."""
    s = results["settings"]
    lines = [
        "# Numeric telemetry on Adult: local mechanisms vs central DP",
        "",
        f"Epsilons {', '.join(f'{e:g}' for e in s['epsilons'])}; {s['repetitions']} repetitions "
        f"for means, {s['distribution_repetitions']} for distributions; seed {s['seed']}; "
        f"{results['seconds']:.1f} s.",
        "",
        "## Means (error against the clipped mean)",
        "",
        "MSE is empirical over the repetitions with a 95% chi-square interval; formula is the "
        "exact variance of the estimate for this data (`mean_variance`); bias/se is the mean "
        "error over its standard error. central-laplace-mean: `clipped mean + Lap(span/(n eps))`;"
        f" central-laplace-hist: the mean of a {CENTRAL_HISTOGRAM_BINS}-bin central Laplace "
        "histogram.",
        "",
        "| column | bounds | eps | mechanism | formula MSE | empirical MSE [95%] | ratio "
        "| bias/se |",
        "|---|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results["means"]:
        name = r["mechanism"] if r["mechanism"] == r["resolved"] else f"auto ({r['resolved']})"
        b = results["bounds"][r["column"]]
        lines.append(
            f"| {r['column']} | ({b[0]:g}, {b[1]:g}) | {r['epsilon']:g} | {name} | "
            f"{_g(r['formula_mse'])} | {_g(r['mse'])} [{_g(r['mse_ci'][0], 3)}, "
            f"{_g(r['mse_ci'][1], 3)}] | {_g(r['ratio'], 3)} | {r['bias_over_se']:+.2f} |"
        )
    if results["clipping"]:
        cg = results["columns"]["capital-gain"]
        lines += [
            "",
            f"## What bounds cost: capital-gain (error against the raw mean {cg['raw_mean']:.1f})",
            "",
            "bias² = (clipped mean − raw mean)²; variance = the formula variance of `auto`; "
            "empirical MSE is against the raw mean (≈ bias² + variance).",
            "",
            "| high | clipped | eps | auto | bias² | variance | empirical MSE | central variance |",
            "|---:|---:|---:|---|---:|---:|---:|---:|",
        ]
        for r in results["clipping"]:
            lines.append(
                f"| {r['high']:,.0f} | {r['clipped_fraction']:.2%} | {r['epsilon']:g} | "
                f"{r['resolved']} | {_g(r['bias2'])} | {_g(r['variance'])} | "
                f"{_g(r['mse_raw'])} | {_g(r['central_variance'])} |"
            )
    if results["distributions"]:
        lines += [
            "",
            "## Distributions: Square Wave + EMS vs the binned baseline vs central Laplace",
            "",
            "Mean over repetitions [95% interval of that mean]. Binned: equal bins (count "
            "fixed by `baseline_bins(n, eps)` before seeing data), the registry's `auto` "
            "frequency oracle, Norm-Sub. Lower is better.",
            "",
            "| column | eps | estimator | W1 | abs median err | abs p90 err | abs p99 err |",
            "|---|---:|---|---:|---:|---:|---:|",
        ]
        for r in results["distributions"]:
            cells = [
                f"{_g(r[k]['mean'], 3)} [{_g(r[k]['ci'][0], 3)}, {_g(r[k]['ci'][1], 3)}]"
                for k in ("w1", "q0.5", "q0.9", "q0.99")
            ]
            lines.append(
                f"| {r['column']} | {r['epsilon']:g} | {r['estimator']} | "
                + " | ".join(cells)
                + " |"
            )
        lines += [
            "",
            "Square Wave's own 95% bootstrap intervals (first repetition, 50 replicates):",
            "",
            "| column | eps | quantile | truth | estimate [95% interval] |",
            "|---|---:|---:|---:|---|",
        ]
        for r in results["distributions"]:
            for q, iv in r.get("bootstrap_intervals", {}).items():
                lines.append(
                    f"| {r['column']} | {r['epsilon']:g} | {q} | {iv['truth']:g} | "
                    f"{iv['value']:.2f} [{iv['low']:.2f}, {iv['high']:.2f}] |"
                )
    return lines


def write_numeric_outputs(
    results: dict[str, Any], out_dir: str | Path, *, plots: bool = True
) -> list[Path]:
    """Write ``numeric.md``, ``numeric.json`` and (``plots``) the PNGs; the paths, report first."""
    from simulator.report import write_scenario_outputs

    def make_plots(out: Path) -> list[Path]:
        from simulator import plots as plotting

        return plotting.numeric_plots(results, out)

    return write_scenario_outputs(
        out_dir, "numeric", table_lines(results), results, make_plots if plots else None
    )
