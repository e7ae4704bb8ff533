"""``ldp simulate --scenario multi``: several attributes per device on Adult (issue 17).

Three measurements, each over ``repetitions`` replays of Adult's train split (optionally its
first ``rows`` rows) per epsilon, one report per row, in-process (the SDK's vectorised
``perturb_many`` and ``aggregator.estimate``, docs/MECHANISMS.md §22):

* **marginals**: per-attribute error of one multi-attribute campaign, for ``auto`` (SMP with
  the optimal sampling weights, or whichever protocol auto picks), uniform ``smp`` (the
  published protocol, one attribute in d), ``spl`` and ``rsfd``, on the five categorical
  attributes (count MSE, raw and after the default consistency post-processing), and again
  with ``age`` and ``hours-per-week`` declared numeric (their mean's MSE, in squared units).
  Baseline: the central Laplace mechanism on the d histograms at the same epsilon (L1
  sensitivity d under add/remove), count MSE ``2 (d/eps)^2``. ``predicted`` is the exact raw
  count MSE of the protocol at the true counts.
* **joints**: total variation distance ``0.5 sum |p - p_true|`` of occupation x sex and
  education x income to the true joint, for ours (one ``auto`` campaign over the four
  attributes with both pairs declared; the consistent table), (a) two independent campaigns
  at epsilon/2, one per pair, over the pair's product domain, and (b) the same campaign's raw
  product-domain table without post-processing.
* **label means**: a mixed pair (education x hours-per-week): the mean of the number per label
  with 95% intervals, against the true means; and the intervals' coverage over the replays. At
  one epsilon: 4 when ``-e`` lists it (the default sweep does), else the largest ``-e``.

Results are plain JSON-safe dicts; plots in :mod:`simulator.multi_plots`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import InvalidSetting
from simulator.sweep import check_setting_epsilon

CATEGORICAL = ("occupation", "education", "marital-status", "race", "sex")
NUMERIC = {"age": (17.0, 90.0), "hours-per-week": (1.0, 99.0)}
JOINT_PAIRS = (("occupation", "sex"), ("education", "income"))
MIXED_PAIR = ("education", "hours-per-week")
PROTOCOLS = ("auto", "smp", "spl", "rsfd")
JOINT_METHODS = ("ours (consistent)", "(a) 2 campaigns, eps/2", "(b) raw product")
DEFAULT_MULTI_EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
DEFAULT_MULTI_REPETITIONS = 10
#: The mixed-pair chart's epsilon when the sweep's epsilons include it (else their largest).
LABEL_EPSILON = 4.0


@dataclass(frozen=True)
class MultiSettings:
    """What the scenario replays. ``rows``: Adult train's first rows (None: all 32,561);
    ``label_epsilon``: the epsilon of the mixed-pair chart (the mean per label); None follows
    ``epsilons`` (``-e``): :data:`LABEL_EPSILON` when it is one of them (the default sweep),
    else the largest of them."""

    epsilons: tuple[float, ...] = DEFAULT_MULTI_EPSILONS
    repetitions: int = DEFAULT_MULTI_REPETITIONS
    seed: int = 2021
    rows: int | None = None
    label_epsilon: float | None = None

    def __post_init__(self) -> None:
        if not self.epsilons or any(not (e > 0 and math.isfinite(e)) for e in self.epsilons):
            raise InvalidSetting("epsilons must be positive and finite")
        for e in self.epsilons:
            check_setting_epsilon(e)  # every mechanism's range, before any cell runs
        if self.repetitions < 1:
            raise InvalidSetting("repetitions must be at least 1")
        if self.rows is not None and self.rows < 100:
            raise InvalidSetting("rows must be at least 100")
        if self.label_epsilon is None:
            chosen = LABEL_EPSILON if LABEL_EPSILON in self.epsilons else max(self.epsilons)
            object.__setattr__(self, "label_epsilon", float(chosen))
        elif not (self.label_epsilon > 0 and math.isfinite(self.label_epsilon)):
            raise InvalidSetting("label_epsilon must be positive and finite")

    @property
    def label_eps(self) -> float:
        """The mixed-pair chart's epsilon (``label_epsilon``, resolved)."""
        assert self.label_epsilon is not None  # resolved in __post_init__
        return self.label_epsilon


def load_columns(rows: int | None) -> tuple[dict[str, list[str]], dict[str, np.ndarray]]:
    """Adult train: (labels per categorical attribute, column per attribute), numeric columns as
    floats; missing categorical values kept as their own label so every row has every value."""
    from simulator.adult import load_adult
    from simulator.numeric import adult_numeric

    data = load_adult("train")
    labels: dict[str, list[str]] = {}
    cols: dict[str, np.ndarray] = {}
    for name in (*CATEGORICAL, "income"):
        labels[name], cols[name] = data.column(name, missing="keep")
    for name in NUMERIC:
        cols[name] = adult_numeric(name)
    if rows is not None:
        cols = {k: v[:rows] for k, v in cols.items()}
    return labels, cols


def _mean_sd(values: list[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=float)
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return {"mean": float(arr.mean()), "sd": sd}


def predicted_count_mse(mech: Any, name: str, truth: np.ndarray) -> float | None:
    """Exact raw count MSE of a categorical attribute at the true counts (SPL, SMP); None for
    RS+FD (its formula is in aggregator.multi, not needed for the chart)."""
    if mech.name == "rsfd":
        return None
    j = mech.names.index(name)
    sub, pi = mech.mechanisms[j], mech.sampling_probabilities[j]
    n = float(truth.sum())
    c = truth.astype(float)
    base = n * sub.v0 + sub.beta * c
    return float(np.mean(base / pi + (1 / pi - 1) * c * (1 - c / n)))


def _marginal_rows(
    settings: MultiSettings,
    labels: dict[str, list[str]],
    cols: dict[str, np.ndarray],
    campaign: str,
) -> list[dict[str, Any]]:
    """One row per (epsilon, protocol, attribute) of one campaign ("categorical" or "mixed")."""
    from aggregator import estimate
    from aggregator.postprocess import DEFAULT_POSTPROCESS, postprocess
    from client_sdk.mechanisms import create

    spec: dict[str, Any] = {a: labels[a] for a in CATEGORICAL}
    if campaign == "mixed":
        spec.update({a: {"bounds": list(b)} for a, b in NUMERIC.items()})
    columns = {a: cols[a] for a in spec}
    truth = {a: np.bincount(cols[a], minlength=len(labels[a])) for a in CATEGORICAL}
    means = {a: float(np.clip(cols[a], *NUMERIC[a]).mean()) for a in NUMERIC}
    protocols = PROTOCOLS if campaign == "categorical" else PROTOCOLS[:3]
    d = len(spec)
    rows = []
    for eps in settings.epsilons:
        gen = np.random.default_rng([settings.seed, int(eps * 1000), len(spec)])
        for protocol in protocols:
            mech = create(protocol, epsilon=eps, attributes=spec)
            raw: dict[str, list[float]] = {a: [] for a in spec}
            post: dict[str, list[float]] = {a: [] for a in CATEGORICAL}
            for _ in range(settings.repetitions):
                est = estimate(mech, mech.tally(mech.perturb_many(columns, rng=gen)))
                for a in CATEGORICAL:
                    raw[a].append(float(np.mean((est.counts(a) - truth[a]) ** 2)))
                    method = "norm-sub" if mech.name == "rsfd" else DEFAULT_POSTPROCESS
                    fixed = postprocess(est[a], method)  # type: ignore[arg-type]
                    counts = np.asarray(fixed.counts, dtype=float) * (est.n / est[a].n)
                    post[a].append(float(np.mean((counts - truth[a]) ** 2)))
                for a in NUMERIC if campaign == "mixed" else ():
                    raw[a].append((float(est[a].mean) - means[a]) ** 2)  # type: ignore[union-attr]
            for a in spec:
                numeric = a in NUMERIC
                rows.append(
                    {
                        "campaign": campaign,
                        "epsilon": eps,
                        "protocol": protocol,
                        "chosen": mech.name,
                        "attribute": a,
                        "metric": "mean squared error of the mean" if numeric else "count MSE",
                        "raw": _mean_sd(raw[a]),
                        "post": None if numeric else _mean_sd(post[a]),
                        "predicted": None if numeric else predicted_count_mse(mech, a, truth[a]),
                        "central_laplace": None if numeric else 2 * (d / eps) ** 2,
                    }
                )
    return rows


def _tvd(table: np.ndarray, truth: np.ndarray) -> float:
    n = float(truth.sum())
    return float(0.5 * np.abs(table / n - truth / n).sum())


def _clipped(table: np.ndarray) -> np.ndarray:
    c = np.clip(table, 0, None)
    return c * (table.sum() / c.sum()) if c.sum() > 0 else c


def _joint_rows(
    settings: MultiSettings, labels: dict[str, list[str]], cols: dict[str, np.ndarray]
) -> list[dict[str, Any]]:
    """One row per (epsilon, pair, method): TVD raw and after clip-and-renormalise."""
    from aggregator import estimate
    from client_sdk.mechanisms import create

    names = list(dict.fromkeys(a for pair in JOINT_PAIRS for a in pair))
    spec = {a: labels[a] for a in names}
    columns = {a: cols[a] for a in names}
    truths = {}
    for a, b in JOINT_PAIRS:
        t = np.zeros((len(labels[a]), len(labels[b])))
        np.add.at(t, (cols[a], cols[b]), 1)
        truths[(a, b)] = t
    rows = []
    for eps in settings.epsilons:
        gen = np.random.default_rng([settings.seed, int(eps * 1000), 99])
        mech = create("auto", epsilon=eps, attributes=spec, pairs=list(JOINT_PAIRS))
        singles = {
            (a, b): create(
                "auto",
                epsilon=eps / 2,
                domain=[f"{x}|{y}" for x in labels[a] for y in labels[b]],
            )
            for a, b in JOINT_PAIRS
        }
        tvds: dict[tuple[str, tuple[str, str]], list[tuple[float, float]]] = {}
        for _ in range(settings.repetitions):
            est = estimate(mech, mech.tally(mech.perturb_many(columns, rng=gen)))
            for pair in JOINT_PAIRS:
                truth = truths[pair]
                joint = est.joints[pair]
                single = singles[pair]
                product = cols[pair[0]] * len(labels[pair[1]]) + cols[pair[1]]
                e = estimate(single, single.tally(single.perturb_many(product, rng=gen)))
                separate = np.asarray(e.counts, dtype=float).reshape(truth.shape)
                for method, table in zip(
                    JOINT_METHODS, (joint.table, separate, joint.raw), strict=True
                ):
                    tvds.setdefault((method, pair), []).append(
                        (_tvd(table, truth), _tvd(_clipped(table), truth))
                    )
        for (method, pair), values in tvds.items():
            rows.append(
                {
                    "epsilon": eps,
                    "pair": list(pair),
                    "method": method,
                    "protocol": mech.name if method != JOINT_METHODS[1] else "auto (single)",
                    "tvd": _mean_sd([v[0] for v in values]),
                    "tvd_clipped": _mean_sd([v[1] for v in values]),
                }
            )
    return rows


def _label_means(
    settings: MultiSettings, labels: dict[str, list[str]], cols: dict[str, np.ndarray]
) -> dict[str, Any]:
    """The mixed pair's per-label means: one replay's estimates and intervals (the chart), the
    true means, and the 95% intervals' coverage over all replays."""
    from aggregator import estimate
    from aggregator.estimate import z_value
    from client_sdk.mechanisms import create

    cat, num = MIXED_PAIR
    low, high = NUMERIC[num]
    spec = {cat: labels[cat], num: {"bounds": [low, high]}}
    mech = create("auto", epsilon=settings.label_eps, attributes=spec, pairs=[MIXED_PAIR])
    x = np.clip(cols[num], low, high)
    k = len(labels[cat])
    counts = np.bincount(cols[cat], minlength=k)
    true = np.bincount(cols[cat], weights=x, minlength=k) / np.maximum(counts, 1)
    z = z_value(0.95)
    gen = np.random.default_rng([settings.seed, 17])
    covered, total = 0, 0
    first: dict[str, Any] = {}
    for _ in range(settings.repetitions):
        reports = mech.perturb_many({cat: cols[cat], num: cols[num]}, rng=gen)
        est = estimate(mech, mech.tally(reports))
        lm = est.label_means[MIXED_PAIR]
        ok = np.isfinite(lm.means) & np.isfinite(lm.std_errors)
        covered += int((np.abs(lm.means - true)[ok] <= z * lm.std_errors[ok]).sum())
        total += int(ok.sum())
        if not first:
            first = {
                "mean": lm.means.tolist(),
                "low": (lm.means - z * lm.std_errors).tolist(),
                "high": (lm.means + z * lm.std_errors).tolist(),
            }
    return {
        "pair": list(MIXED_PAIR),
        "epsilon": settings.label_eps,
        "protocol": mech.name,
        "bounds": [low, high],
        "labels": list(labels[cat]),
        "holders": counts.tolist(),
        "true": true.tolist(),
        **first,
        "coverage": covered / total if total else None,
        "intervals": total,
    }


def run_multi(settings: MultiSettings, progress: Any = None) -> dict[str, Any]:
    """Run the three measurements (module docstring); a JSON-safe dict (undefined values, such
    as the mean of a label whose estimated count is not positive, are None)."""
    labels, cols = load_columns(settings.rows)
    n = int(len(cols["sex"]))
    out: dict[str, Any] = {
        "n": n,
        "epsilons": list(settings.epsilons),
        "repetitions": settings.repetitions,
        "seed": settings.seed,
        "attributes": {a: len(labels[a]) for a in CATEGORICAL}
        | {a: list(NUMERIC[a]) for a in NUMERIC},
        "marginals": [],
    }
    for campaign in ("categorical", "mixed"):
        out["marginals"] += _marginal_rows(settings, labels, cols, campaign)
        if progress:
            progress(f"marginals ({campaign})")
    out["joints"] = _joint_rows(settings, labels, cols)
    if progress:
        progress("joints")
    out["label_means"] = _label_means(settings, labels, cols)
    if progress:
        progress("label means")
    from simulator.report import sanitise

    return dict(sanitise(out))  # NaN (a label's mean with no holders estimated) -> None


def _g(v: float | None, digits: int = 4) -> str:
    return "n/a" if v is None or not math.isfinite(v) else f"{v:.{digits}g}"


def table_lines(results: dict[str, Any]) -> list[str]:
    """Markdown tables of the results (the report and the CLI's output)."""
    lines = [
        f"# Several attributes per device: Adult train, n = {results['n']}, "
        f"{results['repetitions']} replays per epsilon",
        "",
        "## Per-attribute count MSE averaged over the categorical attributes (post-processed; "
        "raw in brackets; mean over replays)",
        "",
    ]
    for campaign in ("categorical", "mixed"):
        rows = [r for r in results["marginals"] if r["campaign"] == campaign and r["post"]]
        protocols = list(dict.fromkeys(r["protocol"] for r in rows))
        lines += [
            f"### {campaign} campaign",
            "",
            "| eps | " + " | ".join(protocols) + " | central Laplace |",
            "|---" * (len(protocols) + 2) + "|",
        ]
        for eps in results["epsilons"]:
            cells = []
            for p in protocols:
                mine = [r for r in rows if r["epsilon"] == eps and r["protocol"] == p]
                post = float(np.mean([r["post"]["mean"] for r in mine]))
                raw = float(np.mean([r["raw"]["mean"] for r in mine]))
                chosen = f" ({mine[0]['chosen']})" if p == "auto" else ""
                cells.append(f"{_g(post)} [{_g(raw)}]{chosen}")
            lap = [r["central_laplace"] for r in rows if r["epsilon"] == eps][0]
            lines.append(f"| {eps:g} | " + " | ".join(cells) + f" | {_g(lap)} |")
        lines.append("")
    numeric = [r for r in results["marginals"] if r["post"] is None]
    if numeric:
        lines += ["### Numeric attributes (mixed campaign): MSE of the mean", ""]
        protocols = list(dict.fromkeys(r["protocol"] for r in numeric))
        lines += ["| eps | attribute | " + " | ".join(protocols) + " |"]
        lines += ["|---" * (len(protocols) + 2) + "|"]
        for eps in results["epsilons"]:
            for a in NUMERIC:
                cells = [
                    _g(r["raw"]["mean"])
                    for p in protocols
                    for r in numeric
                    if r["epsilon"] == eps and r["attribute"] == a and r["protocol"] == p
                ]
                lines.append(f"| {eps:g} | {a} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["## Joint tables: TVD to the true joint (raw / clipped)", ""]
    lines += ["| eps | pair | " + " | ".join(JOINT_METHODS) + " |", "|---" * 5 + "|"]
    for eps in results["epsilons"]:
        for pair in JOINT_PAIRS:
            cells = []
            for method in JOINT_METHODS:
                r = next(
                    r
                    for r in results["joints"]
                    if r["epsilon"] == eps and r["method"] == method and tuple(r["pair"]) == pair
                )
                cells.append(f"{r['tvd']['mean']:.4f} / {r['tvd_clipped']['mean']:.4f}")
            lines.append(f"| {eps:g} | {pair[0]} x {pair[1]} | " + " | ".join(cells) + " |")
    lm = results["label_means"]
    lines += [
        "",
        f"## Mean {lm['pair'][1]} per {lm['pair'][0]} (eps {lm['epsilon']:g}, {lm['protocol']}):"
        f" 95% intervals cover the true mean in {lm['coverage'] or 0:.3f} of {lm['intervals']}",
        "",
        "| label | holders | true | estimate | 95% interval |",
        "|---|---|---|---|---|",
    ]
    for i, label in enumerate(lm["labels"]):
        lines.append(
            f"| {label} | {lm['holders'][i]} | {lm['true'][i]:.2f} | {_g(lm['mean'][i])} | "
            f"[{_g(lm['low'][i])}, {_g(lm['high'][i])}] |"
        )
    return lines


def write_multi_outputs(
    results: dict[str, Any], out_dir: str | Path, *, plots: bool = True
) -> list[Path]:
    """Write ``multi.md``, ``multi.json`` and (``plots``) the PNGs; the paths, report first."""
    from simulator.report import write_scenario_outputs

    def make_plots(out: Path) -> list[Path]:
        from simulator.multi_plots import multi_plots

        return multi_plots(results, out)

    return write_scenario_outputs(
        out_dir, "multi", table_lines(results), results, make_plots if plots else None
    )
