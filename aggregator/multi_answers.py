"""Multi-attribute answers of the estimate service (docs/MECHANISMS.md §22).

Called by :func:`aggregator.service.estimate_range` for mechanisms of kind ``"multi"``. The
window tallies are summed (exact integers) and handed to :func:`aggregator.estimate`, which
gives a :class:`~aggregator.multi.MultiEstimate`; this module only lays it out as the typed
:class:`~aggregator.results.MultiEstimates`:

* a categorical attribute: per value the count over all ``n`` devices (in a declared pair:
  combined with the pairs' margins, :meth:`MultiEstimate.consistent_counts`), its standard
  error and a normal interval clipped to ``[0, n]``, beside the attribute's own raw count;
* a numeric attribute: the mean of the clipped values with its normal interval;
* a declared pair: the consistent joint table, the unbiased raw table and its standard errors,
  intervals ``counts -+ z * std_errors`` clipped to ``[0, n]``;
* a declared mixed pair (categorical x numeric): per label the unbiased count and sum and their
  ratio, the mean, with its delta-method standard error and normal interval.

Privacy: computed from tallies of perturbed reports and public mechanism constants only.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from aggregator.errors import NotEnoughReports
from aggregator.estimate import Estimate, z_value
from aggregator.numeric import MeanEstimate
from aggregator.results import (
    AttributeEstimate,
    AttributeValue,
    Interval,
    JointTable,
    LabelMean,
    LabelMeansTable,
    MultiEstimates,
    MultiTrendWindow,
)
from aggregator.service import EstimateQuery, header, sum_tallies
from client_sdk.errors import InvalidParameter

#: What the answer's ``note`` says about its counts.
MULTI_NOTE = (
    "counts are unbiased over all n devices (smp: rescaled from the devices that sampled the "
    "attribute); an attribute in a declared pair is combined with the pairs' margins "
    "(inverse-variance weights) and each joint table is the least-squares closest table with "
    "those margins; no other post-processing is applied"
)


def multi_answer(mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery) -> MultiEstimates:
    """Per attribute and per declared pair, over the selected windows (see the module doc)."""
    from aggregator.estimate import estimate
    from aggregator.multi import MultiEstimate

    total = sum_tallies(mechanism, selected)
    need = max(1, q.min_reports)
    if total.n < need:
        raise NotEnoughReports(total.n, need)
    est = estimate(mechanism, total, min_reports=1)
    if not isinstance(est, MultiEstimate):
        raise InvalidParameter(f"{mechanism.name} is not a multi-attribute mechanism")
    z = z_value(q.level)
    n = est.n
    attributes = []
    for name, part in est.attributes.items():
        if isinstance(part, Estimate):
            attributes.append(_categorical(est, name, part, z))
        elif isinstance(part, MeanEstimate):
            low, high = part.ci(q.level)
            attributes.append(
                AttributeEstimate(
                    name=name,
                    kind="mean",
                    reports=part.n,
                    values=[],
                    bounds=(float(part.bounds[0]), float(part.bounds[1])),
                    mean=float(part.mean),
                    std_error=float(part.std_error),
                    ci=Interval(level=q.level, low=float(low), high=float(high)),
                )
            )
        else:
            raise InvalidParameter(f"attribute {name!r}: no answer for {type(part).__name__}")
    joints = []
    for (a, b), joint in est.joints.items():
        half = z * joint.std_errors
        joints.append(
            JointTable(
                pair=(a, b),
                rows=list(joint.row_labels),
                columns=list(joint.column_labels),
                counts=joint.table.tolist(),
                frequencies=(joint.table / n).tolist(),
                raw_counts=joint.raw.tolist(),
                std_errors=joint.std_errors.tolist(),
                ci_low=np.clip(joint.table - half, 0, n).tolist(),
                ci_high=np.clip(joint.table + half, 0, n).tolist(),
            )
        )
    label_means = [_label_means(m, z) for m in est.label_means.values()]
    trend = [MultiTrendWindow(w, int(t.n)) for w, t in selected.items()] if q.trend else []
    return MultiEstimates(
        **header(mechanism, list(selected), n, q),
        attributes=attributes,
        joints=joints,
        label_means=label_means,
        trend=trend,
        note=MULTI_NOTE,
    )


def _categorical(est: Any, name: str, part: Estimate, z: float) -> AttributeEstimate:
    n = est.n
    counts = est.consistent_counts(name)
    raw = est.counts(name)
    errors = est.count_std_errors(name)
    values = [
        AttributeValue(
            value=label,
            count=float(counts[i]),
            frequency=float(counts[i] / n),
            raw_count=float(raw[i]),
            std_error=float(errors[i]),
            ci_low=float(np.clip(counts[i] - z * errors[i], 0, n)),
            ci_high=float(np.clip(counts[i] + z * errors[i], 0, n)),
        )
        for i, label in enumerate(part.labels)
    ]
    return AttributeEstimate(
        name=name,
        kind="frequency",
        reports=part.n,
        values=values,
        bounds=None,
        mean=None,
        std_error=None,
        ci=None,
    )


def _label_means(m: Any, z: float) -> LabelMeansTable:
    rows = []
    for i, label in enumerate(m.labels):
        mean, se = float(m.means[i]), float(m.std_errors[i])
        shown = math.isfinite(mean) and math.isfinite(se)
        rows.append(
            LabelMean(
                label=label,
                count=float(m.counts[i]),
                sum=float(m.sums[i]),
                sum_std_error=float(m.sum_std_errors[i]),
                mean=mean if shown else None,
                std_error=se if shown else None,
                ci_low=mean - z * se if shown else None,
                ci_high=mean + z * se if shown else None,
            )
        )
    return LabelMeansTable(
        pair=m.pair,
        label_attribute=m.label_attribute,
        numeric_attribute=m.numeric_attribute,
        bounds=m.bounds,
        rows=rows,
    )
