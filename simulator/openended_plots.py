"""PNG plots of the open-domain scenario (:mod:`simulator.openended_scenario`).

Three figures per population: F1 and count error against epsilon (at the largest n), the same
against n (one line per epsilon), and the smallest n at which each true top-10 value is found.
matplotlib (the ``sim`` extra), Agg backend, as :mod:`simulator.plots`.
"""

from __future__ import annotations

from pathlib import Path

from simulator.openended_scenario import TOPS, OpenDomainResults
from simulator.plots import _pyplot


def open_domain_plots(results: OpenDomainResults, out_dir: Path) -> list[Path]:
    """Every PNG of the scenario, in report order."""
    return [
        open_domain_vs_epsilon(results, out_dir),
        open_domain_vs_n(results, out_dir),
        open_domain_first_found(results, out_dir),
    ]


def _short(n: int) -> str:
    """1k, 32.6k, 1M: tick labels of the n axis."""
    for scale, unit in ((1_000_000, "M"), (1_000, "k")):
        if n >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(n)


def _ks(results: OpenDomainResults) -> list[int]:
    return [min(k, results.distinct) for k in TOPS]


def open_domain_vs_epsilon(results: OpenDomainResults, out_dir: Path) -> Path:
    """Left: F1 of the top 10 and top 50 against epsilon (bars: standard deviation over the
    repetitions). Right: RMSE of the listed items' counts against epsilon (log scale)."""
    plt = _pyplot()
    s = results.settings
    n = s.sizes[-1]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.5, 4.2))
    for slot, k in enumerate(_ks(results)):
        pts = [results.point(e, n, k) for e in s.epsilons]
        left.errorbar(
            s.epsilons,
            [p.f1 for p in pts],
            yerr=[p.f1_std for p in pts],
            fmt="o-",
            color=f"C{slot}",
            capsize=3,
            label=f"top {k}",
        )
        rmse = [(e, p.count_rmse) for e, p in zip(s.epsilons, pts, strict=True)]
        right.plot(
            [e for e, v in rmse if v is not None],
            [v for _, v in rmse if v is not None],
            "o-",
            color=f"C{slot}",
            label=f"top {k}",
        )
    for ax in (left, right):
        ax.set_xscale("log")
        ax.set_xticks(list(s.epsilons), [f"{e:g}" for e in s.epsilons])
        ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    left.set_ylim(-0.03, 1.03)
    left.set_ylabel("F1 (discovered vs true top k)")
    right.set_yscale("log")
    right.set_ylabel("RMSE of the listed items' counts")
    fig.suptitle(f"{results.description}: {results.mechanism.get('mechanism')}, n = {n:,}")
    fig.tight_layout()
    path = out_dir / f"openended_{s.data}_vs_epsilon.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def open_domain_vs_n(results: OpenDomainResults, out_dir: Path) -> Path:
    """F1 of the top 10, F1 of the top 50 and the top 10's count RMSE against n (log x), one
    line per epsilon."""
    plt = _pyplot()
    s = results.settings
    k10, k50 = _ks(results)
    fig, axes = plt.subplots(1, 3, figsize=(14, 4.2))
    for slot, eps in enumerate(s.epsilons):
        colour = f"C{slot}"
        for ax, k in zip(axes[:2], (k10, k50), strict=True):
            pts = [results.point(eps, n, k) for n in s.sizes]
            ax.errorbar(
                s.sizes,
                [p.f1 for p in pts],
                yerr=[p.f1_std for p in pts],
                fmt="o-",
                color=colour,
                capsize=2,
                label=f"ε = {eps:g}",
            )
        rmse = [(n, results.point(eps, n, k10).count_rmse) for n in s.sizes]
        axes[2].plot(
            [n for n, v in rmse if v is not None],
            [v for _, v in rmse if v is not None],
            "o-",
            color=colour,
            label=f"ε = {eps:g}",
        )
    titles = (f"F1, top {k10}", f"F1, top {k50}", f"count RMSE, top {k10}")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xscale("log")
        ax.set_xticks(list(s.sizes), [_short(n) for n in s.sizes])
        ax.minorticks_off()
        ax.set_xlabel("n (devices)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    for ax in axes[:2]:
        ax.set_ylim(-0.03, 1.03)
    axes[2].set_yscale("log")
    fig.suptitle(f"{results.description}: against n")
    fig.tight_layout()
    path = out_dir / f"openended_{s.data}_vs_n.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def open_domain_first_found(results: OpenDomainResults, out_dir: Path) -> Path:
    """The smallest n at which each true top-10 value is found, one marker per epsilon; a value
    not found at the largest n is drawn as an open marker above it."""
    plt = _pyplot()
    s = results.settings
    ceiling = s.sizes[-1] * 2
    fig, ax = plt.subplots(figsize=(8.5, 4.4))
    ranks = [f.rank for f in results.first_found]
    width = 0.7 / max(1, len(s.epsilons))
    for slot, eps in enumerate(s.epsilons):
        colour = f"C{slot}"
        shift = (slot - (len(s.epsilons) - 1) / 2) * width
        found = [(f.rank + shift, f.smallest_n[slot]) for f in results.first_found]
        ax.plot(
            [x for x, n in found if n is not None],
            [n for _, n in found if n is not None],
            "o",
            color=colour,
            label=f"ε = {eps:g}",
        )
        ax.plot(
            [x for x, n in found if n is None],
            [ceiling] * sum(n is None for _, n in found),
            "o",
            mfc="none",
            color=colour,
        )
    ax.plot([], [], "o", mfc="none", color="0.4", label=f"not found at n = {_short(s.sizes[-1])}")
    ax.axhline(s.sizes[-1], color="0.5", lw=0.8, ls=":")
    ax.set_yscale("log")
    ax.set_yticks(list(s.sizes), [_short(n) for n in s.sizes])
    ax.minorticks_off()
    ax.set_xticks(ranks, [f"{f.rank}. {f.value}" for f in results.first_found])
    ax.tick_params(axis="x", labelrotation=45, labelsize=8)
    ax.set_ylabel("smallest n at which it is found")
    ax.set_title(f"{results.description}: when each true top-10 value is found", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out_dir / f"openended_{s.data}_first_found.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
