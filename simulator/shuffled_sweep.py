"""The honest comparison in ``ldp simulate`` (issue 18, docs/SHUFFLE.md).

For each cell of a sweep (attribute, local epsilon0, mechanism): the local estimate's measured
error beside central Laplace and Gaussian releases at the *amplified* central (epsilon, delta)
that the cell's n reports satisfy once shuffled
(:func:`simulator.central.shuffle_comparison`), so a reader sees the accuracy cost of trusting
no one at an equal end-to-end guarantee. A shuffler does not change the local estimate; the
central errors are the noise's exact standard deviation per count (the expected RMSE of a
central release), not a sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from simulator.central import ShuffleComparison, shuffle_comparison


@dataclass(frozen=True)
class ShuffledCell:
    """One sweep cell against the central baselines at its amplified (epsilon, delta)."""

    attribute: str
    mechanism: str  # the resolved mechanism
    n: int
    local_rmse: float  # measured, counts, mean over the cell's repetitions
    comparison: ShuffleComparison
    requested: str = ""  # as asked for ("auto"); "" or the resolved name: the same

    @property
    def label(self) -> str:
        """The mechanism as ``report.md`` names it: ``auto (ss)`` for a resolved ``auto``, so
        ``-m all``'s ``ss`` and ``auto`` cells do not print as two indistinguishable lines."""
        if self.requested and self.requested != self.mechanism:
            return f"{self.requested} ({self.mechanism})"
        return self.mechanism

    @property
    def over_laplace(self) -> float:
        """Local RMSE over central Laplace RMSE at the amplified epsilon."""
        return self.local_rmse / self.comparison.laplace.std

    @property
    def over_gaussian(self) -> float:
        """Local RMSE over central Gaussian RMSE at the amplified (epsilon, delta)."""
        return self.local_rmse / self.comparison.gaussian.std


def shuffled_cells(results: dict[str, Any]) -> list[ShuffledCell]:
    """One :class:`ShuffledCell` per run of ``results`` (what ``run_sweep`` returns); the
    amplification is computed once per (epsilon0, n)."""
    done: dict[tuple[float, int], ShuffleComparison] = {}
    cells = []
    for run in results["runs"]:
        key = (float(run["realised_epsilon"]), int(run["n"]))
        if key not in done:
            done[key] = shuffle_comparison(*key)
        cells.append(
            ShuffledCell(
                attribute=run["attribute"],
                mechanism=run["resolved"],
                n=key[1],
                local_rmse=float(run["metrics"]["rmse"]["mean"]),
                comparison=done[key],
                requested=run["mechanism"],
            )
        )
    return cells


def shuffle_lines(results: dict[str, Any]) -> list[str]:
    """The comparison as text lines, one per cell, for the command's output."""
    lines = [
        "through a shuffler: local epsilon0 -> central (epsilon, delta) of n shuffled reports; "
        "RMSE in counts, local measured, central at that budget"
    ]
    for c in shuffled_cells(results):
        s = c.comparison
        if s.epsilon == 0.0:
            lines.append(
                f"  {c.attribute} {c.label} epsilon0 {s.epsilon0:g}, n {c.n:,} -> (0, "
                f"{s.delta:.0e}): local {c.local_rmse:,.1f}; no central release at that budget "
                "has finite error"
            )
            continue
        lines.append(
            f"  {c.attribute} {c.label} epsilon0 {s.epsilon0:g}, n {c.n:,} -> "
            f"({s.epsilon:.4g}, {s.delta:.0e}): local {c.local_rmse:,.1f}, central Laplace "
            f"{s.laplace.std:,.2f} ({c.over_laplace:,.1f}x), Gaussian {s.gaussian.std:,.2f} "
            f"({c.over_gaussian:,.1f}x)"
        )
    return lines
