"""Numeric campaigns in simulation: the binned frequency-oracle baseline and Wasserstein-1.

The baseline of issue 15 for distributions: cut ``[low, high]`` into ``bins`` equal bins, report
the bin with the best categorical mechanism for that domain size (``auto`` of the registry),
estimate counts (``aggregator.estimate``) and post-process with Norm-Sub (non-negative, sums to
``n``). Mass is spread uniformly inside each bin, as for the Square Wave estimate.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from aggregator.estimate import estimate
from aggregator.numeric import DistributionEstimate
from aggregator.postprocess import norm_sub
from client_sdk.mechanisms import create
from simulator.adult import ADULT_COLUMNS, ADULT_FILES, _parse_adult, _read_bundled
from simulator.errors import UnknownAttribute

#: Adult's numeric columns offered by :func:`adult_numeric`.
ADULT_NUMERIC = ("age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week")


def adult_numeric(name: str, split: str = "train") -> np.ndarray:
    """A numeric column of the bundled, checksum-verified Adult data as floats (one per row).

    ``simulator.adult.load_adult`` offers only categorical attributes (``age`` as labels); this
    reads the same verified files. Adult has no missing values in these columns.
    """
    if name not in ADULT_NUMERIC:
        raise UnknownAttribute(
            f"no numeric attribute {name!r} in Adult; choose one of: {', '.join(ADULT_NUMERIC)}"
        )
    parts = ["train", "test"] if split == "all" else [split]
    col = ADULT_COLUMNS.index(name)
    values: list[float] = []
    for part in parts:
        file_name, sha256, expected = ADULT_FILES[part]
        rows = _parse_adult(_read_bundled(file_name, sha256), expected, file_name)
        values.extend(float(row[col]) for row in rows)
    return np.array(values)


def binned_baseline(
    values: np.ndarray, *, epsilon: float, bounds: tuple[float, float], bins: int, rng: Any
) -> DistributionEstimate:
    """The binned frequency-oracle estimate of the distribution of ``values`` (clipped)."""
    low, high = bounds
    gen = np.random.default_rng(rng)
    x = np.clip(np.asarray(values, dtype=float), low, high)
    index = np.minimum(((x - low) / (high - low) * bins).astype(np.int64), bins - 1)
    mech = create("auto", epsilon=epsilon, domain=bins)
    tally = mech.tally(mech.perturb_many(index, rng=gen))
    counts = norm_sub(estimate(mech, tally).counts, float(tally.n))
    edges = np.linspace(low, high, bins + 1)
    return DistributionEstimate(
        f"binned-{mech.name}", tally.n, edges, counts / counts.sum(), (edges[:-1] + edges[1:]) / 2
    )


def wasserstein1(est: DistributionEstimate, values: np.ndarray, *, points: int = 8192) -> float:
    """W1 distance between the estimate and the empirical distribution of ``values``.

    ``integral |F_est(x) - F_true(x)| dx`` over the estimate's range, on ``points`` evenly
    spaced abscissae (values are clipped into the range first).
    """
    low, high = float(est.edges[0]), float(est.edges[-1])
    xs = np.linspace(low, high, points)
    true = np.sort(np.clip(np.asarray(values, dtype=float), low, high))
    f_true = np.searchsorted(true, xs, side="right") / true.size
    cum = np.concatenate(([0.0], np.cumsum(est.frequencies)))
    f_est = np.interp(xs, est.edges, cum)
    return float(np.abs(f_est - f_true).mean() * (high - low))


def true_quantile(values: np.ndarray, q: float, bounds: tuple[float, float]) -> float:
    """Quantile ``q`` of the clipped values (the 'inverted CDF' definition)."""
    x = np.clip(np.asarray(values, dtype=float), *bounds)
    return float(np.quantile(x, q, method="inverted_cdf"))
