"""Scenario ``book-ch13``: the two experiments of chapter 13 of 'Programming Differential Privacy'.

(a) **Randomized response** (two-coin, keep probability 3/4, epsilon = ln 3) on "is the
occupation Sales?" over *all* rows of the data set; a missing occupation counts as "not Sales"
(Adult train: n = 32,561, true count 3,650). The book's estimator ``(#yes - n/4) * 2`` is the
mechanism's debiasing ``(C - n q*) / (p* - q*)`` with ``p* = 3/4, q* = 1/4``; the scenario
checks the two agree exactly in every repetition.

(b) **Unary encoding** (``sue-book``: p = .75, q = .25, epsilon = ln 9) on occupation with
missing values dropped (Adult train: 14 values, n = 30,718).

Theory. Both estimators are unbiased with per-count variance ``n v0 + beta c`` where
``v0 = q(1-q)/(p-q)^2 = 0.75`` and ``beta = (1-p-q)/(p-q) = 0`` (p + q = 1), so every count has
standard deviation ``sigma = sqrt(0.75 n)`` whatever its true value (about 156.3 for (a)). With
n in the tens of thousands the error is normal to a very good approximation, so
``E|error| = sigma sqrt(2/pi)`` and ``SD(|error|) = sigma sqrt(1 - 2/pi)``.

Checks over R repetitions, each at a stated two-sided level (default 99.9%, z = 3.29):

* **bias**: ``|mean error| <= z sigma / sqrt(R)``;
* **mean |error|**: the measured mean lies in ``theory +- z sigma sqrt(1-2/pi) / sqrt(R)``
  (the interval the theory predicts for an average of R values); a normal-approximation CI of the
  measured mean (its sample SD / sqrt(R)) is reported too, with whether the theory lies in it;
* **SD**: the chi-square CI of the measured SD (R - 1 degrees of freedom) and whether the theory
  SD lies in it.

In (b) the 14 counts of one repetition are independent (unary encoding flips every bit
independently), so the pooled mean |error| averages 14 R independent errors; the per-value bias
and SD checks use a Bonferroni level ``1 - (1 - level)/k`` so the family holds at ``level``.

The central Laplace baseline at the same epsilon (L1 sensitivity 1 under add/remove, scale
``1/epsilon``) has mean absolute error ``1/epsilon``; the scenario reports it, a simulated
check of it, and the ratio local / central of the mean |error|.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np

from aggregator import debias, estimate
from client_sdk.mechanisms import create
from simulator.adult import Dataset
from simulator.central import laplace_baseline
from simulator.errors import InvalidSetting

SCENARIO = "book-ch13"
DEFAULT_REPETITIONS = 200
DEFAULT_SEED = 2026
DEFAULT_LEVEL = 0.999
RR_ATTRIBUTE = "occupation"
RR_TARGET = "Sales"

_HALF_NORMAL_MEAN = math.sqrt(2 / math.pi)  # E|Z| for Z ~ N(0, 1)
_HALF_NORMAL_SD = math.sqrt(1 - 2 / math.pi)  # SD(|Z|)


def _z(level: float) -> float:
    return NormalDist().inv_cdf(0.5 + level / 2)


def _chi2_quantile(p: float, df: int) -> float:
    """Quantile of chi-square(df): scipy when installed, else Wilson-Hilferty (rel. err ~1e-4)."""
    try:
        from scipy.stats import chi2
    except ImportError:  # pragma: no cover - scipy is in the sim extra
        z = NormalDist().inv_cdf(p)
        c = 2 / (9 * df)
        return df * (1 - c + z * math.sqrt(c)) ** 3
    return float(chi2.ppf(p, df))


def _sd_interval(sd: float, r: int, level: float) -> tuple[float, float]:
    """Chi-square CI of a normal SD from ``r`` values: ``s sqrt((r-1) / chi2_{.., r-1})``."""
    df = r - 1
    alpha = 1 - level
    return (
        sd * math.sqrt(df / _chi2_quantile(1 - alpha / 2, df)),
        sd * math.sqrt(df / _chi2_quantile(alpha / 2, df)),
    )


def error_checks(errors: np.ndarray, sigma: float, *, level: float, z: float) -> dict[str, Any]:
    """Bias, mean |error| and SD of ``errors`` (independent draws) against ``N(0, sigma^2)``.

    ``z`` is the two-sided quantile used for the tolerances (``level`` or a Bonferroni one);
    ``level`` is only recorded. Every ``*_ok`` is True when the measurement agrees with theory.
    """
    errors = np.asarray(errors, dtype=float).ravel()
    r = errors.size
    if r < 2:
        raise InvalidSetting(f"the checks need at least 2 errors, got {r}")
    abs_err = np.abs(errors)
    mean = float(errors.mean())
    sd = float(errors.std(ddof=1))
    mean_abs = float(abs_err.mean())
    sd_abs = float(abs_err.std(ddof=1))
    theory_abs = sigma * _HALF_NORMAL_MEAN
    theory_sd_abs = sigma * _HALF_NORMAL_SD
    bias_tol = z * sigma / math.sqrt(r)
    abs_tol = z * theory_sd_abs / math.sqrt(r)
    emp_lo, emp_hi = mean_abs - z * sd_abs / math.sqrt(r), mean_abs + z * sd_abs / math.sqrt(r)
    sd_lo, sd_hi = _sd_interval(sd, r, 2 * NormalDist().cdf(z) - 1)
    return {
        "count": r,
        "level": level,
        "z": z,
        "theory_sd": sigma,
        "theory_mean_abs_error": theory_abs,
        "theory_sd_abs_error": theory_sd_abs,
        "mean_error": mean,
        "bias_tolerance": bias_tol,
        "bias_ok": abs(mean) <= bias_tol,
        "mean_abs_error": mean_abs,
        "sd_abs_error": sd_abs,
        "mean_abs_error_interval": [theory_abs - abs_tol, theory_abs + abs_tol],
        "mean_abs_error_ok": abs(mean_abs - theory_abs) <= abs_tol,
        "mean_abs_error_ci": [emp_lo, emp_hi],
        "theory_in_mean_abs_error_ci": emp_lo <= theory_abs <= emp_hi,
        "sd": sd,
        "sd_ci": [sd_lo, sd_hi],
        "theory_in_sd_ci": sd_lo <= sigma <= sd_hi,
        "rmse": float(np.sqrt(np.mean(errors**2))),
    }


def _laplace(epsilon: float, repetitions: int, k: int, gen: np.random.Generator) -> dict[str, Any]:
    base = laplace_baseline(epsilon)
    noise = base.release(np.zeros(repetitions * k), rng=gen)
    theory = base.mean_abs_error
    measured = float(np.mean(np.abs(noise)))
    # |Lap(b)| is exponential with mean b and SD b.
    tol = _z(DEFAULT_LEVEL) * base.scale / math.sqrt(noise.size)
    return {
        "epsilon": epsilon,
        "scale": base.scale,
        "theory_mean_abs_error": theory,
        "mean_abs_error": measured,
        "mean_abs_error_ok": abs(measured - theory) <= tol,
        "releases": int(noise.size),
    }


def run_rr(
    dataset: Dataset, *, repetitions: int, gen: np.random.Generator, level: float
) -> dict[str, Any]:
    """Experiment (a): two-coin RR on "occupation is Sales" over all rows."""
    labels, indices = dataset.column(RR_ATTRIBUTE, missing="keep")
    if RR_TARGET not in labels:
        raise InvalidSetting(
            f"experiment (a) needs the value {RR_TARGET!r} in {RR_ATTRIBUTE!r}; "
            f"{dataset.name} has: {', '.join(labels)}"
        )
    is_sales = (indices == labels.index(RR_TARGET)).astype(np.int64)
    n = int(is_sales.size)
    truth = int(is_sales.sum())
    mech = create("rr-two-coin", domain=["no", "yes"])
    sigma = math.sqrt(float(mech.count_variance(n, truth)))
    estimates = np.empty(repetitions)
    identity_gap = 0.0
    for i in range(repetitions):
        tally = mech.tally(mech.perturb_many(is_sales, rng=gen))
        yes = int(tally.support[1])
        book = (yes - n / 4) * 2
        ours = float(debias(mech, tally)[1])
        via_estimate = float(estimate(mech, tally).counts[1])
        identity_gap = max(identity_gap, abs(book - ours), abs(book - via_estimate))
        estimates[i] = book
    errors = estimates - truth
    checks = error_checks(errors, sigma, level=level, z=_z(level))
    return {
        "question": f"is the {RR_ATTRIBUTE} {RR_TARGET}? (missing counts as no)",
        "mechanism": "rr-two-coin",
        "epsilon": mech.epsilon,
        "p_star": mech.p_star,
        "q_star": mech.q_star,
        "n": n,
        "truth": truth,
        "estimator": "(#yes - n/4) * 2",
        "estimator_identity_max_gap": identity_gap,
        "estimator_identity_ok": identity_gap == 0.0,
        "mean_estimate": float(estimates.mean()),
        "estimates": estimates.tolist(),
        "errors": errors.tolist(),
        "checks": checks,
    }


def run_unary(
    dataset: Dataset, *, repetitions: int, gen: np.random.Generator, level: float
) -> dict[str, Any]:
    """Experiment (b): unary encoding p = .75, q = .25 on occupation, missing dropped."""
    labels, indices = dataset.column(RR_ATTRIBUTE)
    n, k = int(indices.size), len(labels)
    truth = np.bincount(indices, minlength=k)
    mech = create("sue-book", domain=labels)
    sigmas = np.sqrt(mech.count_variance(n, truth))
    estimates = np.empty((repetitions, k))
    for i in range(repetitions):
        estimates[i] = debias(mech, mech.tally(mech.perturb_many(indices, rng=gen)))
    errors = estimates - truth
    per_level = 1 - (1 - level) / k  # Bonferroni over the k values
    per_value = []
    for j, label in enumerate(labels):
        c = error_checks(errors[:, j], float(sigmas[j]), level=per_level, z=_z(per_level))
        per_value.append(
            {
                "value": label,
                "truth": int(truth[j]),
                "mean_estimate": float(estimates[:, j].mean()),
                "mean_error": c["mean_error"],
                "bias_tolerance": c["bias_tolerance"],
                "bias_ok": c["bias_ok"],
                "sd": c["sd"],
                "sd_ci": c["sd_ci"],
                "theory_sd": c["theory_sd"],
                "theory_in_sd_ci": c["theory_in_sd_ci"],
                "mean_abs_error": c["mean_abs_error"],
            }
        )
    if not np.allclose(sigmas, sigmas[0]):  # pragma: no cover - beta = 0 for p + q = 1
        raise InvalidSetting(f"sue-book should have beta = 0, got {mech.beta}")
    pooled = error_checks(errors, float(sigmas[0]), level=level, z=_z(level))
    return {
        "attribute": RR_ATTRIBUTE,
        "mechanism": "sue-book",
        "epsilon": mech.epsilon,
        "p": 0.75,
        "q": 0.25,
        "v0": mech.v0,
        "beta": mech.beta,
        "n": n,
        "k": k,
        "labels": list(labels),
        "truth": truth.tolist(),
        "per_value_level": per_level,
        "per_value": per_value,
        "all_bias_ok": all(v["bias_ok"] for v in per_value),
        "all_sd_ok": all(v["theory_in_sd_ci"] for v in per_value),
        "errors": errors.ravel().tolist(),
        "checks": pooled,
    }


def run_book_ch13(
    dataset: Dataset,
    *,
    repetitions: int = DEFAULT_REPETITIONS,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """Both chapter-13 experiments, ``repetitions`` times each, and the central Laplace baseline.

    Deterministic for a given ``seed``. The result is JSON-safe (plain floats, ints, lists); each
    experiment's ``checks`` say whether bias, mean |error| and SD agree with the closed-form
    theory at ``level`` (see the module docstring for the intervals).
    """
    if isinstance(repetitions, bool) or not isinstance(repetitions, int) or repetitions < 2:
        raise InvalidSetting(f"repetitions must be an integer >= 2, got {repetitions!r}")
    if not 0 < level < 1:
        raise InvalidSetting(f"level must be in (0, 1), e.g. 0.999, got {level!r}")
    g_rr, g_ue, g_lap_rr, g_lap_ue = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(4)
    )
    rr = run_rr(dataset, repetitions=repetitions, gen=g_rr, level=level)
    ue = run_unary(dataset, repetitions=repetitions, gen=g_ue, level=level)
    for exp, gen in ((rr, g_lap_rr), (ue, g_lap_ue)):
        k = exp.get("k", 1)
        exp["laplace"] = _laplace(exp["epsilon"], repetitions, k, gen)
        exp["local_over_laplace"] = (
            exp["checks"]["mean_abs_error"] / exp["laplace"]["theory_mean_abs_error"]
        )
    return {
        "scenario": SCENARIO,
        "dataset": {
            "name": dataset.name,
            "n_rows": dataset.n_rows,
            "attribution": dataset.attribution,
        },
        "repetitions": repetitions,
        "seed": seed,
        "level": level,
        "rr": rr,
        "unary": ue,
    }


def _f(x: float, digits: int = 1) -> str:
    return f"{x:,.{digits}f}"


def _yes(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def render_book_report(results: dict[str, Any], plots: list[Path] | None = None) -> str:
    """The Markdown table of ``book-ch13``: measured against theory, with the intervals."""
    rr, ue = results["rr"], results["unary"]
    lvl = f"{results['level'] * 100:g}%"
    lines = [
        "# Scenario book-ch13: 'Programming Differential Privacy', chapter 13",
        "",
        f"Data {results['dataset']['name']} ({results['dataset']['n_rows']:,} rows); "
        f"{results['repetitions']} repetitions; seed {results['seed']}; intervals at {lvl} "
        "(two-sided normal / chi-square).",
        "",
        f"Data: {results['dataset']['attribution'] or results['dataset']['name']}.",
        "",
        "| quantity | (a) RR: Sales? | (b) unary encoding: occupation |",
        "|---|---:|---:|",
    ]
    a, b = rr["checks"], ue["checks"]

    def row(name: str, x: str, y: str) -> None:
        lines.append(f"| {name} | {x} | {y} |")

    row("mechanism", "rr-two-coin (keep 3/4)", "sue-book (p = .75, q = .25)")
    row("epsilon", f"ln 3 = {rr['epsilon']:.4f}", f"ln 9 = {ue['epsilon']:.4f}")
    row("n", f"{rr['n']:,}", f"{ue['n']:,} (k = {ue['k']})")
    row("true count", f"{rr['truth']:,}", "per value, below")
    row("mean estimate", _f(rr["mean_estimate"]), "per value, below")
    row("errors pooled", f"{a['count']:,}", f"{b['count']:,}")
    row("mean error (bias)", _f(a["mean_error"], 2), _f(b["mean_error"], 2))
    row(
        "bias tolerance +-z SD/sqrt(R), ok",
        f"{_f(a['bias_tolerance'], 2)}, {_yes(a['bias_ok'])}",
        f"{_f(b['bias_tolerance'], 2)}, {_yes(b['bias_ok'])}",
    )
    row("theory SD sqrt(0.75 n)", _f(a["theory_sd"], 2), _f(b["theory_sd"], 2))
    row(
        f"measured SD [{lvl} chi-square CI]",
        f"{_f(a['sd'], 2)} [{_f(a['sd_ci'][0])}, {_f(a['sd_ci'][1])}]",
        f"{_f(b['sd'], 2)} [{_f(b['sd_ci'][0])}, {_f(b['sd_ci'][1])}]",
    )
    row("theory SD in CI", _yes(a["theory_in_sd_ci"]), _yes(b["theory_in_sd_ci"]))
    row(
        "theory mean abs error SD sqrt(2/pi)",
        _f(a["theory_mean_abs_error"], 2),
        _f(b["theory_mean_abs_error"], 2),
    )
    row(
        f"theory's {lvl} interval for the mean abs error",
        f"[{_f(a['mean_abs_error_interval'][0])}, {_f(a['mean_abs_error_interval'][1])}]",
        f"[{_f(b['mean_abs_error_interval'][0])}, {_f(b['mean_abs_error_interval'][1])}]",
    )
    row(
        "measured mean abs error, in the interval",
        f"{_f(a['mean_abs_error'], 2)}, {_yes(a['mean_abs_error_ok'])}",
        f"{_f(b['mean_abs_error'], 2)}, {_yes(b['mean_abs_error_ok'])}",
    )
    row(
        f"measured mean abs error {lvl} CI, has theory",
        f"[{_f(a['mean_abs_error_ci'][0])}, {_f(a['mean_abs_error_ci'][1])}], "
        f"{_yes(a['theory_in_mean_abs_error_ci'])}",
        f"[{_f(b['mean_abs_error_ci'][0])}, {_f(b['mean_abs_error_ci'][1])}], "
        f"{_yes(b['theory_in_mean_abs_error_ci'])}",
    )
    row(
        "central Laplace mean abs error 1/epsilon",
        f"{rr['laplace']['theory_mean_abs_error']:.3f}",
        f"{ue['laplace']['theory_mean_abs_error']:.3f}",
    )
    row(
        "central Laplace, simulated",
        f"{rr['laplace']['mean_abs_error']:.3f}",
        f"{ue['laplace']['mean_abs_error']:.3f}",
    )
    row(
        "local / central mean abs error",
        f"{rr['local_over_laplace']:.0f}x",
        f"{ue['local_over_laplace']:.0f}x",
    )
    lines += [
        "",
        f"(a) estimator `{rr['estimator']}` equals the mechanism's debiasing in every repetition: "
        f"{_yes(rr['estimator_identity_ok'])} (largest gap {rr['estimator_identity_max_gap']:g}).",
        "",
        f"## (b) per value (bias and SD checks at the Bonferroni level "
        f"{ue['per_value_level'] * 100:.4g}%)",
        "",
        "| value | true count | mean estimate | mean error | tolerance | bias ok | SD | SD CI "
        "| theory SD in CI |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for v in ue["per_value"]:
        lines.append(
            f"| {v['value']} | {v['truth']:,} | {_f(v['mean_estimate'])} | "
            f"{_f(v['mean_error'], 2)} | {_f(v['bias_tolerance'], 2)} | {_yes(v['bias_ok'])} | "
            f"{_f(v['sd'], 1)} | [{_f(v['sd_ci'][0])}, {_f(v['sd_ci'][1])}] | "
            f"{_yes(v['theory_in_sd_ci'])} |"
        )
    if plots:
        lines += ["", "## Plots", ""] + [f"![{p.stem}]({p.name})" for p in plots]
    return "\n".join(lines) + "\n"


def write_book_outputs(
    results: dict[str, Any], out_dir: str | Path, *, plots: bool = True
) -> list[Path]:
    """Write ``book-ch13.md``, ``book-ch13.json`` (the results) and, unless ``plots=False``,
    two histograms of the errors with the theory's normal density.

    Returns the paths written, the report first. The plots need matplotlib (the ``sim`` extra).
    """
    from simulator.report import sanitise

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    pngs = _book_plots(results, out) if plots else []
    report = out / "book-ch13.md"
    report.write_text(render_book_report(results, pngs))
    data = out / "book-ch13.json"
    data.write_text(json.dumps(sanitise(results), indent=1, allow_nan=False) + "\n")
    return [report, data, *pngs]


def _book_plots(results: dict[str, Any], out: Path) -> list[Path]:
    """The two error histograms (matplotlib)."""
    from simulator import plots as plotting

    rr, ue = results["rr"], results["unary"]
    return [
        plotting.error_histogram(
            np.asarray(rr["errors"]),
            rr["checks"]["theory_sd"],
            out,
            title=f"(a) two-coin RR, Sales?, n = {rr['n']:,}, epsilon = ln 3",
            name="book-ch13-rr-errors.png",
        ),
        plotting.error_histogram(
            np.asarray(ue["errors"]),
            ue["checks"]["theory_sd"],
            out,
            title=f"(b) unary encoding, occupation (k = {ue['k']}), n = {ue['n']:,}, "
            "epsilon = ln 9",
            name="book-ch13-unary-errors.png",
        ),
    ]
