"""PNG plots of ``ldp simulate --scenario multi`` (:mod:`simulator.multi_scenario`).

matplotlib (the ``sim`` extra), Agg backend. Three charts:

* ``multi-marginals-<campaign>.png``: per attribute, the error vs epsilon (log-log) of each
  protocol (post-processed counts; means for numeric attributes) with +-1 sd bars, the exact
  raw prediction of ``auto`` and the central Laplace baseline;
* ``multi-joints.png``: per pair, TVD to the true joint vs epsilon for ours, (a) two
  campaigns at epsilon/2 and (b) the raw product domain;
* ``multi-label-means.png``: the mixed pair's mean per label with 95% intervals and the truth.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from simulator.plots import _pyplot


def multi_plots(results: dict[str, Any], out_dir: Path) -> list[Path]:
    """Every chart of the scenario; the paths written."""
    paths = [
        marginals_plot(results, out_dir, campaign)
        for campaign in dict.fromkeys(r["campaign"] for r in results["marginals"])
    ]
    paths.append(joints_plot(results, out_dir))
    paths.append(label_means_plot(results, out_dir))
    return paths


def marginals_plot(results: dict[str, Any], out_dir: Path, campaign: str) -> Path:
    """Per-attribute error vs epsilon, one panel per attribute (see the module docstring)."""
    plt = _pyplot()
    rows = [r for r in results["marginals"] if r["campaign"] == campaign]
    attributes = list(dict.fromkeys(r["attribute"] for r in rows))
    protocols = list(dict.fromkeys(r["protocol"] for r in rows))
    cols = min(4, len(attributes))
    nrows = math.ceil(len(attributes) / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(4.0 * cols, 3.3 * nrows), squeeze=False)
    for ax, attribute in zip(axes.flat, attributes, strict=False):
        mine = [r for r in rows if r["attribute"] == attribute]
        numeric = mine[0]["post"] is None
        for i, protocol in enumerate(protocols):
            line = sorted(
                (r for r in mine if r["protocol"] == protocol), key=lambda r: r["epsilon"]
            )
            key = "raw" if numeric else "post"
            eps = [r["epsilon"] for r in line]
            ax.errorbar(
                eps,
                [r[key]["mean"] for r in line],
                yerr=[r[key]["sd"] for r in line],
                fmt="o-",
                color=f"C{i}",
                capsize=2,
                label=protocol if protocol != "smp" else "smp (uniform)",
            )
            if protocol == "auto" and not numeric:
                predicted = [r["predicted"] for r in line]
                ax.plot(eps, predicted, ":", color="C0", label="auto, exact raw")
        if not numeric:
            base = sorted(mine, key=lambda r: r["epsilon"])
            ax.plot(
                [r["epsilon"] for r in base],
                [r["central_laplace"] for r in base],
                "k--",
                label="central Laplace",
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _epsilon_ticks(ax, [r["epsilon"] for r in mine])
        ax.set_title(attribute)
        ax.set_xlabel("epsilon")
        ax.set_ylabel("MSE of the mean" if numeric else "count MSE")
        ax.grid(True, which="both", alpha=0.3)
    for ax in list(axes.flat)[len(attributes) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"One report per device, {campaign} attributes (n = {results['n']})")
    fig.tight_layout()
    path = out_dir / f"multi-marginals-{campaign}.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _epsilon_ticks(ax: Any, epsilons: list[float]) -> None:
    """One labelled tick per swept epsilon ("0.5", "1", ...), as the sweep's plots have, not
    matplotlib's log-axis "2 x 10^0"."""
    eps = sorted(set(epsilons))
    ax.set_xticks(eps, [f"{e:g}" for e in eps])
    ax.xaxis.set_minor_locator(_null_locator())


def _null_locator() -> Any:
    from matplotlib.ticker import NullLocator  # matplotlib is imported by _pyplot() first

    return NullLocator()


def joints_plot(results: dict[str, Any], out_dir: Path) -> Path:
    """TVD of each declared pair's table vs epsilon, one panel per pair."""
    plt = _pyplot()
    pairs = list(dict.fromkeys(tuple(r["pair"]) for r in results["joints"]))
    methods = list(dict.fromkeys(r["method"] for r in results["joints"]))
    fig, axes = plt.subplots(1, len(pairs), figsize=(5.0 * len(pairs), 3.6), squeeze=False)
    for ax, pair in zip(axes.flat, pairs, strict=True):
        for i, method in enumerate(methods):
            line = sorted(
                (
                    r
                    for r in results["joints"]
                    if tuple(r["pair"]) == pair and r["method"] == method
                ),
                key=lambda r: r["epsilon"],
            )
            ax.errorbar(
                [r["epsilon"] for r in line],
                [r["tvd"]["mean"] for r in line],
                yerr=[r["tvd"]["sd"] for r in line],
                fmt="o-",
                color=f"C{i}",
                capsize=2,
                label=method,
            )
        ax.set_xscale("log")
        ax.set_yscale("log")
        _epsilon_ticks(ax, [r["epsilon"] for r in results["joints"] if tuple(r["pair"]) == pair])
        ax.set_title(f"{pair[0]} x {pair[1]}")
        ax.set_xlabel("epsilon")
        ax.set_ylabel("TVD to the true joint (raw)")
        ax.grid(True, which="both", alpha=0.3)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / "multi-joints.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def label_means_plot(results: dict[str, Any], out_dir: Path) -> Path:
    """The mixed pair's estimated mean per label with its 95% interval, and the true mean."""
    plt = _pyplot()
    lm = results["label_means"]
    labels = lm["labels"]
    y = list(range(len(labels)))
    fig, ax = plt.subplots(figsize=(6.5, 0.32 * len(labels) + 1.4))
    mean = [math.nan if v is None else v for v in lm["mean"]]
    low = [m - (math.nan if v is None else v) for m, v in zip(mean, lm["low"], strict=True)]
    high = [(math.nan if v is None else v) - m for m, v in zip(mean, lm["high"], strict=True)]
    ax.errorbar(mean, y, xerr=[low, high], fmt="o", color="C0", capsize=2, label="estimate, 95%")
    ax.plot(lm["true"], y, "x", color="k", label="true mean")
    low_b, high_b = lm["bounds"]
    margin = 0.1 * (high_b - low_b)
    ax.set_xlim(low_b - margin, high_b + margin)  # intervals may run past the bounds
    ax.set_yticks(y)
    ax.set_yticklabels(labels, fontsize=7)
    ax.set_xlabel(f"mean {lm['pair'][1]}")
    ax.set_title(
        f"{lm['pair'][1]} per {lm['pair'][0]}, eps {lm['epsilon']:g} ({lm['protocol']})",
        fontsize=9,
    )
    ax.legend(fontsize=7)
    ax.grid(True, axis="x", alpha=0.3)
    fig.tight_layout()
    path = out_dir / "multi-label-means.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
