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
from simulator.errors import InvalidSetting, UnknownAttribute

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
    f_est = est.cdf_many(xs)  # mass uniform in bins, or atoms (integer-valued Square Wave)
    return float(np.abs(f_est - f_true).mean() * (high - low))


def true_quantile(values: np.ndarray, q: float, bounds: tuple[float, float]) -> float:
    """Quantile ``q`` of the clipped values (the 'inverted CDF' definition)."""
    x = np.clip(np.asarray(values, dtype=float), *bounds)
    return float(np.quantile(x, q, method="inverted_cdf"))


# -- central baselines for numbers --------------------------------------------------------------


def central_laplace_means(
    values: np.ndarray, *, bounds: tuple[float, float], epsilon: float, reps: int, rng: Any
) -> np.ndarray:
    """``reps`` releases of the clipped mean by a trusted curator: ``mean + Lap(span / (n eps))``.

    epsilon-DP under replacement of one person's value (the relation LDP protects): the clipped
    mean moves by at most ``(high - low) / n``. Its MSE is :func:`central_laplace_mean_mse`.
    """
    low, high = bounds
    x = np.clip(np.asarray(values, dtype=float), low, high)
    gen = np.random.default_rng(rng)
    scale = (high - low) / (x.size * _positive(epsilon))
    return float(x.mean()) + gen.laplace(0.0, scale, size=reps)


def central_laplace_mean_mse(n: int, *, bounds: tuple[float, float], epsilon: float) -> float:
    """``2 (span / (n eps))**2``: the variance of the central Laplace mean."""
    return 2.0 * ((bounds[1] - bounds[0]) / (n * _positive(epsilon))) ** 2


def central_laplace_histogram(
    values: np.ndarray, *, bounds: tuple[float, float], epsilon: float, bins: int, rng: Any
) -> DistributionEstimate:
    """A trusted curator's histogram: exact counts of the clipped values in ``bins`` equal bins,
    ``+ Lap(1/eps)`` each (``simulator.central.laplace_baseline``, add/remove neighbours), then
    Norm-Sub to non-negative counts summing to ``n``; mass uniform inside each bin."""
    from simulator.central import laplace_baseline

    low, high = bounds
    x = np.clip(np.asarray(values, dtype=float), low, high)
    index = np.minimum(((x - low) / (high - low) * bins).astype(np.int64), bins - 1)
    counts = np.bincount(index, minlength=bins)
    noisy = laplace_baseline(epsilon).release(counts, rng=np.random.default_rng(rng))
    fixed = norm_sub(noisy, float(x.size))
    edges = np.linspace(low, high, bins + 1)
    return DistributionEstimate(
        "central-laplace", int(x.size), edges, fixed / fixed.sum(), (edges[:-1] + edges[1:]) / 2
    )


def _positive(epsilon: float) -> float:
    if not isinstance(epsilon, (int, float)) or not epsilon > 0 or not np.isfinite(epsilon):
        raise InvalidSetting(f"epsilon must be a finite number > 0, got {epsilon!r}")
    return float(epsilon)


# -- repeated local estimates -------------------------------------------------------------------

#: Values perturbed per ``perturb_many`` call when repeating a column (R copies, tiled).
_TILE_VALUES = 2_000_000


def repeated_means(mech: Any, values: np.ndarray, *, reps: int, rng: Any) -> np.ndarray:
    """``reps`` independent estimates of the mean of ``values`` by the mean mechanism ``mech``.

    Each repetition perturbs every value once (``perturb_many`` on copies of the column, several
    repetitions per call), tallies its own reports and estimates (``estimate_numeric``).
    """
    from aggregator.numeric import estimate_numeric

    x = np.asarray(values, dtype=float)
    n = x.size
    gen = np.random.default_rng(rng)
    per_call = max(1, _TILE_VALUES // max(n, 1))
    out = np.empty(reps)
    done = 0
    while done < reps:
        block = min(per_call, reps - done)
        reports = mech.perturb_many(np.tile(x, block), rng=gen)
        for r in range(block):
            tally = mech.tally(reports[r * n : (r + 1) * n])
            out[done + r] = estimate_numeric(mech, tally).mean
        done += block
    return out
