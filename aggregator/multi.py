"""Per-attribute estimates of a multi-attribute campaign (docs/MECHANISMS.md §22).

``aggregator.estimate(mech, tally)`` hands a ``kind == "multi"`` mechanism here. Each attribute
gets the result type of its own mechanism: a categorical :class:`~aggregator.estimate.Estimate`
or a numeric ``MeanEstimate``.

* SPL: attribute ``j``'s estimate from its part of the tally (all ``n`` reports).
* SMP: from the ``n_j`` reports that sampled it; its counts are over those ``n_j`` devices and
  its frequencies estimate the population's (:meth:`MultiEstimate.counts` rescales by
  ``n / n_j``).
* RS+FD: unbiased counts ``(d C_v - n q* - n (d-1) f) / (p* - q*)``, ``f`` the fake report's
  support rate ``(p* + (k-1) q*)/k``; exact variance
  ``d^2 (c pi1 (1-pi1) + (n-c) pi0 (1-pi0)) / (p*-q*)^2`` at ``c`` the clamped estimate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from aggregator.errors import NotEnoughReports
from aggregator.estimate import Estimate
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism, NumericMechanism, Tally
from client_sdk.mechanisms.multi import MultiMechanism, MultiTally

if TYPE_CHECKING:
    from aggregator.numeric import DistributionEstimate, MeanEstimate


@dataclass(frozen=True, eq=False)
class JointEstimate:
    """The joint counts of a declared pair ``(a, b)`` over all ``n`` devices.

    ``raw``: unbiased counts of the product-domain attribute (rows: a's values, columns: b's);
    ``std_errors``: their standard errors (§9 formulas, SMP: rescaled and with the sampling
    term); ``table``: the consistent table, the least-squares closest table whose row and
    column sums are the consistent one-way counts (:meth:`MultiEstimate.consistent_counts`).
    """

    pair: tuple[str, str]
    row_labels: tuple[str, ...]
    column_labels: tuple[str, ...]
    raw: np.ndarray = field(repr=False)
    std_errors: np.ndarray = field(repr=False)
    table: np.ndarray = field(repr=False)

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        from aggregator.estimate import z_value

        half = z_value(level) * self.std_errors
        return {
            "pair": list(self.pair),
            "rows": list(self.row_labels),
            "columns": list(self.column_labels),
            "table": self.table.tolist(),
            "raw": self.raw.tolist(),
            "std_errors": self.std_errors.tolist(),
            "ci_low": (self.table - half).tolist(),
            "ci_high": (self.table + half).tolist(),
            "level": level,
        }


@dataclass(frozen=True, eq=False)
class MultiEstimate:
    """Per attribute (by name), the estimate its mechanism's estimator gives."""

    mechanism: MultiMechanism
    tally: MultiTally
    #: Per attribute: ``Estimate`` (categorical) or ``MeanEstimate`` (numeric).
    attributes: dict[str, Estimate | MeanEstimate | DistributionEstimate] = field(repr=False)
    #: Per declared pair: its joint table (see :class:`JointEstimate`).
    joints: dict[tuple[str, str], JointEstimate] = field(default_factory=dict, repr=False)
    #: Per attribute in a declared pair: the inverse-variance combination of its own counts
    #: and its pairs' margins, shifted to sum to n; the joint tables' margins equal it.
    combined: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def n(self) -> int:
        return self.tally.n

    def __getitem__(self, name: str) -> Estimate | MeanEstimate | DistributionEstimate:
        return self.attributes[name]

    def counts(self, name: str) -> np.ndarray:
        """Unbiased counts of a categorical attribute over all ``n`` devices (SMP rescales the
        sampled devices' counts by ``n / n_j``)."""
        est = self.attributes[name]
        if not isinstance(est, Estimate):
            raise InvalidParameter(f"attribute {name!r} is numeric: it has a mean, not counts")
        return np.asarray(est.counts * (self.n / est.n), dtype=float)

    def consistent_counts(self, name: str) -> np.ndarray:
        """One-way counts that agree with every declared pair's joint table (the attribute's
        own counts when it is in no pair)."""
        if name in self.combined:
            return self.combined[name]
        return self.counts(name)

    def frequencies(self, name: str) -> np.ndarray:
        """Estimated frequencies of a categorical attribute's values."""
        return self.counts(name) / self.n

    def to_dict(self, level: float = 0.95) -> dict[str, Any]:
        mech = self.mechanism
        return {
            "n": self.n,
            "mechanism": mech.name,
            "epsilon": mech.epsilon,
            "realised_epsilon": mech.realised_epsilon,
            "attributes": {k: v.to_dict(level) for k, v in self.attributes.items()},
            "pairs": [j.to_dict(level) for j in self.joints.values()],
        }


def _rsfd(mech: Mechanism, d: int, n: int, tally: Tally) -> Estimate:
    p, q, k = mech.p_star, mech.q_star, mech.k
    f = (p + (k - 1) * q) / k
    support = tally.support.astype(float)
    counts = (d * support - n * q - n * (d - 1) * f) / (p - q)
    c = np.clip(counts, 0, n)
    pi1 = p / d + (d - 1) * f / d
    pi0 = q / d + (d - 1) * f / d
    var = d * d * (c * pi1 * (1 - pi1) + (n - c) * pi0 * (1 - pi0)) / (p - q) ** 2
    plugin = d * d * support * (n - support) / (n * (p - q) ** 2)
    return Estimate(
        mechanism=mech,
        tally=tally,
        counts=counts,
        std_errors=np.sqrt(np.maximum(var, 0.0)),
        plugin_std_errors=np.sqrt(plugin),
    )


def estimate_multi(
    mech: MultiMechanism, tally: MultiTally, *, min_reports: int = 1
) -> MultiEstimate:
    """Per-attribute estimates from ``tally`` (see the module docstring); every attribute needs
    at least ``min_reports`` reports carrying it, else :class:`NotEnoughReports`."""
    from aggregator.estimate import estimate

    if not isinstance(tally, MultiTally):
        raise InvalidParameter(f"a {mech.name} campaign's tally is a MultiTally")
    if len(tally.parts) != mech.d:
        raise InvalidParameter(f"tally has {len(tally.parts)} parts, campaign {mech.d} attributes")
    need = max(1, min_reports)
    out: dict[str, Estimate | MeanEstimate | DistributionEstimate] = {}
    components = mech.components()
    pair_estimates: list[Estimate] = []
    for j, (attr, sub, part) in enumerate(
        zip(components, mech.mechanisms, tally.parts, strict=True)
    ):
        if part.n < need:
            raise NotEnoughReports(part.n, need)
        if mech.name == "rsfd":
            assert isinstance(sub, Mechanism)
            est: Estimate | MeanEstimate | DistributionEstimate = _rsfd(sub, mech.d, tally.n, part)
        elif isinstance(sub, Mechanism):
            est = estimate(sub, part, min_reports=need)
        else:
            assert isinstance(sub, NumericMechanism)
            est = estimate(sub, part, min_reports=need, bootstrap=0)
        if j < len(mech.attributes):
            out[attr.name] = est
        else:
            assert isinstance(est, Estimate)
            pair_estimates.append(est)
    joints, combined = _joints(mech, tally.n, out, pair_estimates)
    return MultiEstimate(mech, tally, out, joints, combined)


def _population(mech: MultiMechanism, n: int, est: Estimate) -> tuple[np.ndarray, np.ndarray]:
    """(counts, variances) of a categorical estimate over all n devices."""
    scale = n / est.n
    counts = np.asarray(est.counts, dtype=float) * scale
    var = (np.asarray(est.std_errors, dtype=float) * scale) ** 2
    if mech.name == "smp":  # estimated on a random 1/d of the devices
        c = np.clip(counts, 0, n)
        var = var + (mech.d - 1) * c * (1 - c / n)
    return counts, np.maximum(var, 1e-12)


def _joints(
    mech: MultiMechanism,
    n: int,
    singles: dict[str, Estimate | MeanEstimate | DistributionEstimate],
    pairs: list[Estimate],
) -> tuple[dict[tuple[str, str], JointEstimate], dict[str, np.ndarray]]:
    """Joint tables made consistent with combined one-way counts (docs/MECHANISMS.md §22)."""
    if not pairs:
        return {}, {}
    raw: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    sources: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for (a, b), est in zip(mech.pairs, pairs, strict=True):
        ka, kb = len(mech.attribute(a).labels or ()), len(mech.attribute(b).labels or ())
        counts, var = _population(mech, n, est)
        table, tvar = counts.reshape(ka, kb), var.reshape(ka, kb)
        raw[(a, b)] = (table, tvar)
        sources.setdefault(a, []).append((table.sum(axis=1), tvar.sum(axis=1)))
        sources.setdefault(b, []).append((table.sum(axis=0), tvar.sum(axis=0)))
    combined = {}
    for name, margins in sources.items():
        own = singles[name]
        assert isinstance(own, Estimate)
        parts = [_population(mech, n, own), *margins]
        weights = [1 / v for _, v in parts]
        value = sum(w * c for (c, _), w in zip(parts, weights, strict=True)) / sum(weights)
        combined[name] = value + (n - value.sum()) / value.size
    joints = {}
    for (a, b), (table, tvar) in raw.items():
        r, c = combined[a], combined[b]
        ka, kb = table.shape
        fixed = (
            table
            + (r - table.sum(axis=1))[:, None] / kb
            + (c - table.sum(axis=0))[None, :] / ka
            + (table.sum() - n) / (ka * kb)
        )
        joints[(a, b)] = JointEstimate(
            (a, b),
            mech.attribute(a).labels or (),
            mech.attribute(b).labels or (),
            raw=table,
            std_errors=np.sqrt(tvar),
            table=fixed,
        )
    return joints, combined
