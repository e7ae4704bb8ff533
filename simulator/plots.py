"""PNG plots of a sweep's results (matplotlib, Agg backend: no display needed).

matplotlib is in the ``sim`` extra: ``pip install 'ldp-telemetry[sim]'``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from simulator.errors import SimulatorError


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        raise SimulatorError(
            "plots need matplotlib, which is missing: pip install 'ldp-telemetry[sim]' "
            "(or pass --no-plots)"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "-" for c in text).strip("-")


def error_vs_epsilon(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """One PNG per attribute: RMSE of the counts against epsilon (log-log), one panel per
    mechanism, with the mechanism's theory line and both central baselines."""
    plt = _pyplot()
    paths = []
    for attribute in results["attributes"]:
        runs = [r for r in results["runs"] if r["attribute"] == attribute]
        names = list(dict.fromkeys(r["mechanism"] for r in runs))
        central = [c for c in results["central"] if c["attribute"] == attribute]
        eps_c = [c["epsilon"] for c in central]
        cols = min(3, len(names))
        rows = math.ceil(len(names) / cols)
        fig, axes = plt.subplots(
            rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False, sharey=True
        )
        for ax, name in zip(axes.flat, names, strict=False):
            mine = sorted((r for r in runs if r["mechanism"] == name), key=lambda r: r["epsilon"])
            eps = [r["epsilon"] for r in mine]
            mean = [r["metrics"]["rmse"]["mean"] for r in mine]
            spread = [r["metrics"]["rmse"]["std"] for r in mine]
            ax.errorbar(eps, mean, yerr=spread, fmt="o", color="C0", label="local (measured)")
            ax.plot(eps, [r["theory"]["rmse"] for r in mine], "-", color="C0", label="theory")
            ax.plot(
                eps_c,
                [c["laplace"]["metrics"]["rmse"]["mean"] for c in central],
                "s--",
                color="C3",
                label="central Laplace",
            )
            ax.plot(
                eps_c,
                [c["gaussian"]["metrics"]["rmse"]["mean"] for c in central],
                "^:",
                color="C2",
                label="central Gaussian",
            )
            resolved = {r["resolved"] for r in mine}
            title = name if resolved == {name} else f"{name} -> {'/'.join(sorted(resolved))}"
            ax.set_title(title, fontsize=10)
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xticks(eps_c, [f"{e:g}" for e in eps_c])
            ax.minorticks_off()
            ax.set_xlabel("epsilon")
            ax.grid(True, which="both", alpha=0.3)
        for ax in axes.flat[len(names) :]:
            ax.set_visible(False)
        for ax in axes[:, 0]:
            ax.set_ylabel("RMSE of counts")
        axes.flat[0].legend(fontsize=7)
        n = results["attributes"][attribute]["n"]
        fig.suptitle(f"{attribute}: error vs epsilon (n = {n:,})")
        fig.tight_layout()
        path = out_dir / f"error_vs_epsilon_{_slug(attribute)}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        paths.append(path)
    return paths


def truth_vs_estimate(example: dict[str, Any], out_dir: Path, *, name: str | None = None) -> Path:
    """Bars of the true counts, the local estimate with its CI, and the central Laplace one."""
    plt = _pyplot()
    labels = example["labels"]
    x = np.arange(len(labels))
    est = np.asarray(example["estimate"])
    lo, hi = np.asarray(example["ci_low"]), np.asarray(example["ci_high"])
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(labels) + 2), 4.2))
    ax.bar(x, example["truth"], color="0.8", label="true count")
    ax.errorbar(
        x - 0.15,
        est,
        yerr=[est - lo, hi - est],
        fmt="o",
        color="C0",
        capsize=3,
        label=f"local {example['resolved']} ({int(example['level'] * 100)}% CI)",
    )
    ax.plot(x + 0.15, example["laplace"], "s", color="C3", label="central Laplace")
    ax.set_xticks(x, labels, rotation=60, ha="right", fontsize=8)
    ax.set_ylabel("count")
    ax.set_title(f"{example['attribute']}, epsilon = {example['epsilon']:g}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / (name or f"truth_vs_estimate_{_slug(example['attribute'])}.png")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def error_histogram(errors: np.ndarray, sd: float, out_dir: Path, *, title: str, name: str) -> Path:
    """Histogram of errors over repetitions with the theory's normal density on top."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.hist(
        errors,
        bins=max(10, int(math.sqrt(errors.size))),
        density=True,
        color="0.75",
        label=f"measured ({errors.size} runs)",
    )
    grid = np.linspace(-4 * sd, 4 * sd, 200)
    ax.plot(
        grid,
        np.exp(-0.5 * (grid / sd) ** 2) / (sd * math.sqrt(2 * math.pi)),
        color="C0",
        label=f"theory N(0, {sd:.4g}^2)",
    )
    ax.set_xlabel("estimate - truth (count)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = out_dir / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def trend_band(
    rows: list[dict[str, Any]],
    labels: list[str],
    out_dir: Path,
    *,
    title: str,
    name: str,
    level: float = 0.95,
    lines: int = 4,
    truth: np.ndarray | None = None,
    values: list[int] | None = None,
) -> Path:
    """Frequencies per window of the ``lines`` most frequent values (or of ``values``): raw
    estimates (dots), smoothed estimates (line) and their ``level`` interval (band), from the
    trend rows of ``aggregator.estimate_windows``; ``truth`` (windows x k) adds the true
    frequencies (dotted)."""
    from aggregator.estimate import z_value

    plt = _pyplot()
    z = z_value(level)
    kept = [i for i, r in enumerate(rows) if r.get("smoothed_frequencies") is not None]
    raw = np.array([rows[i]["frequencies"] for i in kept])
    sm = np.array([rows[i]["smoothed_frequencies"] for i in kept])
    se = np.array([rows[i]["smoothed_std_errors"] for i in kept])
    order = values if values is not None else list(np.argsort(-sm.mean(axis=0))[:lines])
    fig, ax = plt.subplots(figsize=(8.0, 4.2))
    x = np.asarray(kept)
    for slot, j in enumerate(order):
        colour = f"C{slot}"
        ax.fill_between(
            x,
            sm[:, j] - z * se[:, j],
            sm[:, j] + z * se[:, j],
            color=colour,
            alpha=0.18,
            linewidth=0,
        )
        ax.plot(x, sm[:, j], "-", color=colour, linewidth=2, label=f"{labels[j]} smoothed")
        ax.plot(x, raw[:, j], "o", color=colour, markersize=3, alpha=0.7, label=f"{labels[j]} raw")
        if truth is not None:
            ax.plot(x, np.asarray(truth)[kept, j], ":", color=colour, linewidth=1)
    ax.set_xlabel("window")
    ax.set_ylabel("frequency")
    ax.set_title(f"{title} (band: smoothed {level:.0%} interval)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / name
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# -- numeric telemetry (``ldp simulate --scenario numeric``) ---------------------------------


def numeric_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every PNG of the numeric scenario (see :mod:`simulator.numeric_scenario`)."""
    paths = [numeric_mean_error(results, out_dir, column) for column in results["columns"]]
    if results["clipping"]:
        paths.append(numeric_clipping(results, out_dir))
    for column in results["examples"]:
        paths.append(numeric_distribution(results, out_dir, column))
    return paths


def numeric_mean_error(results: dict[str, Any], out_dir: Path, column: str) -> Path:
    """RMSE of the mean against epsilon (log-log): every local mechanism measured (markers) with
    its formula (line), the central Laplace mean and the central Laplace histogram's mean."""
    plt = _pyplot()
    rows = [r for r in results["means"] if r["column"] == column]
    names = list(dict.fromkeys(r["mechanism"] for r in rows))
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for slot, name in enumerate(names):
        mine = sorted((r for r in rows if r["mechanism"] == name), key=lambda r: r["epsilon"])
        eps = [r["epsilon"] for r in mine]
        colour = f"C{slot}"
        central = name.startswith("central")
        ax.plot(
            eps,
            [r["rmse"] for r in mine],
            "s" if central else "o",
            color=colour,
            label=name,
            markersize=5,
        )
        if mine[0]["formula_mse"] is not None:
            ax.plot(eps, [math.sqrt(r["formula_mse"]) for r in mine], "-", color=colour, lw=1)
        else:
            ax.plot(eps, [r["rmse"] for r in mine], ":", color=colour, lw=1)
    eps_all = sorted({r["epsilon"] for r in rows})
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xticks(eps_all, [f"{e:g}" for e in eps_all])
    ax.minorticks_off()
    ax.set_xlabel("epsilon")
    ax.set_ylabel("RMSE of the mean")
    bounds = results["bounds"][column]
    n = results["columns"][column]["n"]
    ax.set_title(
        f"{column} on ({bounds[0]:g}, {bounds[1]:g}), n = {n:,}: markers measured, lines formula",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / f"numeric_mean_{_slug(column)}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def numeric_clipping(results: dict[str, Any], out_dir: Path) -> Path:
    """capital-gain: squared clipping bias and ``auto``'s variance against the upper bound, one
    colour per epsilon, with the measured MSE against the raw mean (markers)."""
    plt = _pyplot()
    rows = results["clipping"]
    highs = sorted({r["high"] for r in rows})
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    first = [next(r for r in rows if r["high"] == h) for h in highs]
    ax.plot(highs, [max(r["bias2"], 1e-3) for r in first], "k-", lw=2.5, label="bias² (clipping)")
    for slot, eps in enumerate(sorted({r["epsilon"] for r in rows})):
        mine = sorted((r for r in rows if r["epsilon"] == eps), key=lambda r: r["high"])
        colour = f"C{slot}"
        ax.plot(
            highs, [r["variance"] for r in mine], "--", color=colour, label=f"variance, ε={eps:g}"
        )
        ax.plot(highs, [r["mse_raw"] for r in mine], "o", color=colour, markersize=4)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("upper bound (lower bound 0)")
    ax.set_ylabel("squared error of the mean")
    ax.set_title(
        "capital-gain: what clipping costs (markers: measured MSE against the raw mean)",
        fontsize=10,
    )
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = out_dir / "numeric_clipping_capital-gain.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def numeric_distribution(results: dict[str, Any], out_dir: Path, column: str) -> Path:
    """Left: W1 against epsilon per estimator (95% interval of the mean). Right: estimated CDFs
    at one epsilon against the true one."""
    plt = _pyplot()
    rows = [r for r in results["distributions"] if r["column"] == column]
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.4))
    kinds = {"square_wave": "square_wave + EMS", "central-laplace": "central Laplace histogram"}
    for slot, key in enumerate(["square_wave", "binned", "central-laplace"]):
        mine = sorted(
            (r for r in rows if r["estimator"].startswith(key)), key=lambda r: r["epsilon"]
        )
        if not mine:
            continue
        eps = [r["epsilon"] for r in mine]
        mean = np.array([r["w1"]["mean"] for r in mine])
        lo = np.array([r["w1"]["ci"][0] for r in mine])
        hi = np.array([r["w1"]["ci"][1] for r in mine])
        label = kinds.get(
            key, "binned baseline (" + ", ".join(r["estimator"][7:] for r in mine) + " bins)"
        )
        left.errorbar(
            eps,
            mean,
            yerr=[mean - lo, hi - mean],
            fmt="o-",
            color=f"C{slot}",
            capsize=3,
            label=label,
        )
    left.set_xscale("log")
    left.set_yscale("log")
    eps_all = sorted({r["epsilon"] for r in rows})
    left.set_xticks(eps_all, [f"{e:g}" for e in eps_all])
    left.minorticks_off()
    left.set_xlabel("epsilon")
    left.set_ylabel("Wasserstein-1 to the true distribution")
    left.grid(True, which="both", alpha=0.3)
    left.legend(fontsize=7)
    example = results["examples"][column]
    truth = example["truth_cdf"]
    right.step(truth["x"], truth["cdf"], "k-", where="post", lw=1.5, label="true")
    for slot, (label, est) in enumerate(example["estimates"].items()):
        cum = np.concatenate(([0.0], np.cumsum(est["frequencies"])))
        right.plot(est["edges"], cum, "-", color=f"C{slot}", lw=1, label=label)
    right.set_xlabel(column)
    right.set_ylabel("CDF")
    right.set_title(f"estimated CDFs at epsilon = {example['epsilon']:g}", fontsize=10)
    right.legend(fontsize=7)
    right.grid(True, alpha=0.3)
    fig.suptitle(f"{column}: distribution estimates", fontsize=11)
    fig.tight_layout()
    path = out_dir / f"numeric_distribution_{_slug(column)}.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
