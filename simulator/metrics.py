"""Error metrics of a histogram estimate against the true histogram.

Counts are compared directly; frequency vectors are ``counts / n`` with ``n`` the number of
people (reports), so the estimate's frequencies need not sum to exactly 1.

* ``mae``, ``rmse``, ``max_abs_error``: over the domain's counts;
* ``l1``: ``sum_v |f_est - f_true|``; ``tv``: total-variation distance, ``l1 / 2``;
* ``top5_relative_error``: mean of ``|c_est - c| / c`` over the 5 most frequent true values;
* ``top5_recall``: share of the true top 5 that are also among the estimate's top 5.

With fewer than 5 values in the domain, "top 5" means all of them. Ties are broken by domain
order (a stable sort), so the metrics are deterministic.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from simulator.errors import InvalidSetting

TOP = 5
METRICS: tuple[str, ...] = (
    "mae",
    "rmse",
    "max_abs_error",
    "l1",
    "tv",
    "top5_relative_error",
    "top5_recall",
)


def _pair(truth: np.ndarray, est: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    truth = np.asarray(truth, dtype=float)
    est = np.asarray(est, dtype=float)
    if truth.ndim != 1 or truth.shape != est.shape or truth.size == 0:
        raise InvalidSetting(
            f"truth and estimate must be 1-D of the same non-zero length, "
            f"got shapes {truth.shape} and {est.shape}"
        )
    return truth, est


def top_indices(counts: np.ndarray, top: int = TOP) -> np.ndarray:
    """Indices of the ``top`` largest counts, largest first, ties in domain order."""
    counts = np.asarray(counts, dtype=float)
    return np.argsort(-counts, kind="stable")[: min(top, counts.size)]


def mae(truth: np.ndarray, est: np.ndarray) -> float:
    truth, est = _pair(truth, est)
    return float(np.mean(np.abs(est - truth)))


def rmse(truth: np.ndarray, est: np.ndarray) -> float:
    truth, est = _pair(truth, est)
    return float(np.sqrt(np.mean((est - truth) ** 2)))


def max_abs_error(truth: np.ndarray, est: np.ndarray) -> float:
    truth, est = _pair(truth, est)
    return float(np.max(np.abs(est - truth)))


def l1_distance(truth: np.ndarray, est: np.ndarray, n: float) -> float:
    """``sum |est/n - truth/n|``, the L1 distance of the frequency vectors."""
    truth, est = _pair(truth, est)
    if not n > 0:
        raise InvalidSetting(f"n must be > 0 to form frequencies, got {n!r}")
    return float(np.sum(np.abs(est - truth)) / n)


def tv_distance(truth: np.ndarray, est: np.ndarray, n: float) -> float:
    """Total-variation distance of the frequency vectors: half the L1 distance."""
    return l1_distance(truth, est, n) / 2


def top_relative_error(truth: np.ndarray, est: np.ndarray, top: int = TOP) -> float:
    """Mean ``|est - truth| / truth`` over the ``top`` most frequent true values (truth > 0)."""
    truth, est = _pair(truth, est)
    idx = top_indices(truth, top)
    idx = idx[truth[idx] > 0]
    if idx.size == 0:
        return float("nan")
    return float(np.mean(np.abs(est[idx] - truth[idx]) / truth[idx]))


def top_recall(truth: np.ndarray, est: np.ndarray, top: int = TOP) -> float:
    """Share of the true top ``top`` values that the estimate also ranks in its top ``top``."""
    truth, est = _pair(truth, est)
    want = set(top_indices(truth, top).tolist())
    got = set(top_indices(est, top).tolist())
    return len(want & got) / len(want)


def all_metrics(truth: np.ndarray, est: np.ndarray, n: float | None = None) -> dict[str, float]:
    """Every metric of :data:`METRICS` for one run; ``n`` defaults to ``sum(truth)``."""
    truth, est = _pair(truth, est)
    n = float(truth.sum()) if n is None else float(n)
    return {
        "mae": mae(truth, est),
        "rmse": rmse(truth, est),
        "max_abs_error": max_abs_error(truth, est),
        "l1": l1_distance(truth, est, n),
        "tv": tv_distance(truth, est, n),
        "top5_relative_error": top_relative_error(truth, est),
        "top5_recall": top_recall(truth, est),
    }


def summarise(runs: Sequence[Mapping[str, float]]) -> dict[str, dict[str, float]]:
    """Per metric over repetitions: ``mean``, ``std`` (sample, ddof=1; 0 for one run), min, max."""
    if not runs:
        raise InvalidSetting("summarise needs at least one run")
    out = {}
    for name in runs[0]:
        values = np.array([r[name] for r in runs], dtype=float)
        out[name] = {
            "mean": float(np.mean(values)),
            "std": float(np.std(values, ddof=1)) if values.size > 1 else 0.0,
            "min": float(np.min(values)),
            "max": float(np.max(values)),
        }
    return out
