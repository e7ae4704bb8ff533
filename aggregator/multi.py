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
class LabelMeans:
    """A declared mixed pair: the numeric attribute's mean among the devices holding each
    label of the categorical one (docs/MECHANISMS.md, mixed pairs).

    From the pair component's unbiased cell counts ``C[x, 0]``, ``C[x, 1]`` over all ``n``
    devices (the bit is 1 with probability the value's position in its bounds):
    ``counts = C0 + C1`` and ``sums = low C0 + high C1`` are unbiased (the count of label x
    and the sum of its clipped values); ``means = sums / counts`` (nan where ``counts <= 0``)
    is their ratio, with delta-method standard errors from the cells' covariance.
    """

    pair: tuple[str, str]
    label_attribute: str
    numeric_attribute: str
    labels: tuple[str, ...]
    bounds: tuple[float, float]
    counts: np.ndarray = field(repr=False)
    sums: np.ndarray = field(repr=False)
    sum_std_errors: np.ndarray = field(repr=False)
    means: np.ndarray = field(repr=False)
    std_errors: np.ndarray = field(repr=False)


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
    #: Standard errors of ``combined``: ``1 / sqrt(sum of the sources' inverse variances)``
    #: (the sources are independent: different components of the report or different devices).
    combined_std_errors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: Per declared mixed pair (categorical x numeric): the mean per label.
    label_means: dict[tuple[str, str], LabelMeans] = field(default_factory=dict, repr=False)

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

    def count_std_errors(self, name: str) -> np.ndarray:
        """Standard errors of :meth:`consistent_counts` over all ``n`` devices (SMP: with the
        term for estimating on a random ``1/d`` of the devices)."""
        if name in self.combined_std_errors:
            return self.combined_std_errors[name]
        est = self.attributes[name]
        if not isinstance(est, Estimate):
            raise InvalidParameter(f"attribute {name!r} is numeric: it has a mean, not counts")
        return np.asarray(np.sqrt(_population(self.mechanism, self.n, est)[1]), dtype=float)

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
            "label_means": [
                {
                    "pair": list(m.pair),
                    "labels": list(m.labels),
                    "means": [None if np.isnan(v) else float(v) for v in m.means],
                    "std_errors": [None if np.isnan(v) else float(v) for v in m.std_errors],
                    "counts": m.counts.tolist(),
                }
                for m in self.label_means.values()
            ],
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
            # Each report carries one attribute (or pair) of several: say which one lacks them.
            kind = "pair" if "|" in attr.name else "attribute"
            raise NotEnoughReports(
                part.n,
                need,
                f"{kind} {attr.name!r}",
                f": {tally.n} report(s) in the range, and each {kind} needs its own",
            )
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
    by_pair = list(zip(mech.pairs, pair_estimates, strict=True))
    mixed = {p: _label_means(mech, tally.n, p, e) for p, e in by_pair if mech.mixed_pair(p)}
    joints, combined, combined_se = _joints(
        mech, tally.n, out, [(p, e) for p, e in by_pair if not mech.mixed_pair(p)]
    )
    return MultiEstimate(mech, tally, out, joints, combined, combined_se, mixed)


def _population_cov(mech: MultiMechanism, n: int, sub: Mechanism, est: Estimate) -> np.ndarray:
    """Covariance of a component's counts over all ``n`` devices (:func:`_population`'s
    variances off the diagonal too): the oracle's covariance (``frequency_cov``: exact for
    GRR, SS and unary encoding), rescaled by ``n / n_j``; SMP adds the covariance of
    estimating on a random ``1/d`` of the devices, ``(d-1) (diag(c) - c c^T / n)``."""
    from aggregator.flat_prior import frequency_cov

    n_j = est.n
    scale = n / n_j
    freqs = np.clip(np.asarray(est.counts, dtype=float), 0, None) / n_j
    cov = frequency_cov(sub, n_j, freqs) * (n_j * scale) ** 2
    if mech.name == "smp":
        c = np.clip(np.asarray(est.counts, dtype=float) * scale, 0, n)
        factor = _sampling_factor(mech, sub)
        cov = cov + factor * (np.diag(c) - np.outer(c, c) / n)
    return np.asarray(cov, dtype=float)


def _label_means(mech: MultiMechanism, n: int, pair: tuple[str, str], est: Estimate) -> LabelMeans:
    mixed = mech.mixed_pair(pair)
    assert mixed is not None
    cat, num = mixed
    sub = est.mechanism
    labels = mech.attribute(cat).labels or ()
    low, high = mech.attribute(num).bounds or (0.0, 1.0)
    cells = np.asarray(est.counts, dtype=float).reshape(len(labels), 2) * (n / est.n)
    cov = _population_cov(mech, n, sub, est)
    counts = cells.sum(axis=1)
    sums = low * cells[:, 0] + high * cells[:, 1]
    sum_var = np.empty(len(labels))
    mean_var = np.empty(len(labels))
    with np.errstate(divide="ignore", invalid="ignore"):
        means = np.where(counts > 0, sums / counts, np.nan)
    for x in range(len(labels)):
        block = cov[2 * x : 2 * x + 2, 2 * x : 2 * x + 2]
        w = np.array([low, high])
        sum_var[x] = w @ block @ w
        g = (w - means[x]) / counts[x] if counts[x] > 0 else np.full(2, np.nan)
        mean_var[x] = g @ block @ g
    return LabelMeans(
        pair=pair,
        label_attribute=cat,
        numeric_attribute=num,
        labels=tuple(labels),
        bounds=(float(low), float(high)),
        counts=counts,
        sums=sums,
        sum_std_errors=np.sqrt(np.maximum(sum_var, 0.0)),
        means=means,
        std_errors=np.sqrt(np.maximum(mean_var, 0.0)),
    )


def _sampling_factor(mech: MultiMechanism, sub: object) -> float:
    """``1/pi_j - 1`` of the component whose mechanism is ``sub`` (by identity)."""
    j = next(i for i, m in enumerate(mech.mechanisms) if m is sub)
    return mech.sampling_factor(j)


def _population(mech: MultiMechanism, n: int, est: Estimate) -> tuple[np.ndarray, np.ndarray]:
    """(counts, variances) of a categorical estimate over all n devices."""
    scale = n / est.n
    counts = np.asarray(est.counts, dtype=float) * scale
    var = (np.asarray(est.std_errors, dtype=float) * scale) ** 2
    if mech.name == "smp":  # estimated on a random share pi_j of the devices
        c = np.clip(counts, 0, n)
        var = var + _sampling_factor(mech, est.mechanism) * c * (1 - c / n)
    return counts, np.maximum(var, 1e-12)


def _joints(
    mech: MultiMechanism,
    n: int,
    singles: dict[str, Estimate | MeanEstimate | DistributionEstimate],
    pairs: list[tuple[tuple[str, str], Estimate]],
) -> tuple[dict[tuple[str, str], JointEstimate], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Joint tables made consistent with combined one-way counts (docs/MECHANISMS.md §22)."""
    if not pairs:
        return {}, {}, {}
    raw: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}
    sources: dict[str, list[tuple[np.ndarray, np.ndarray]]] = {}
    for (a, b), est in pairs:
        ka, kb = len(mech.attribute(a).labels or ()), len(mech.attribute(b).labels or ())
        counts, var = _population(mech, n, est)
        table, tvar = counts.reshape(ka, kb), var.reshape(ka, kb)
        raw[(a, b)] = (table, tvar)
        sources.setdefault(a, []).append((table.sum(axis=1), tvar.sum(axis=1)))
        sources.setdefault(b, []).append((table.sum(axis=0), tvar.sum(axis=0)))
    combined, combined_se = {}, {}
    for name, margins in sources.items():
        own = singles[name]
        assert isinstance(own, Estimate)
        parts = [_population(mech, n, own), *margins]
        weights = [1 / v for _, v in parts]
        value = sum(w * c for (c, _), w in zip(parts, weights, strict=True)) / sum(weights)
        combined[name] = value + (n - value.sum()) / value.size
        combined_se[name] = np.sqrt(1 / sum(weights))
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
    return joints, combined, combined_se
