"""Multi-attribute answers of the estimate service (docs/MECHANISMS.md §22).

Called by :func:`aggregator.service.estimate_range` for mechanisms of kind ``"multi"``. The
window tallies are summed (exact integers) and handed to :func:`aggregator.estimate`, which
gives a :class:`~aggregator.multi.MultiEstimate`; this module only lays it out as the typed
:class:`~aggregator.results.MultiEstimates`:

* a categorical attribute: per value the count over all ``n`` devices (in a declared
  categorical pair: combined with those pairs' margins, :meth:`MultiEstimate.consistent_counts`;
  mixed pairs are not combined), its standard error and a normal interval clipped to
  ``[0, n]``, beside the attribute's own raw count and that count's own standard error;
* a numeric attribute: the mean of the clipped values with its normal interval;
* a declared pair: the consistent joint table, the unbiased raw table and its standard errors,
  intervals ``counts -+ z * std_errors`` clipped to ``[0, n]``;
* a declared mixed pair (categorical x numeric): per label the unbiased count and sum and their
  ratio, the mean, with its delta-method standard error and normal interval;
* the trend (:func:`multi_trend`): per window, per attribute and per declared categorical pair,
  the window's own unbiased estimate with its standard error, and the smoothed value with its
  standard error (the categorical trend's smoother, :mod:`aggregator.smooth`).

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
    FrequencyTrendWindow,
    Interval,
    JointTable,
    LabelMean,
    LabelMeansTable,
    MultiEstimates,
    MultiTrendAttribute,
    MultiTrendJoint,
    MultiTrendWindow,
)
from aggregator.service import (
    EstimateQuery,
    header,
    smooth_one,
    sum_tallies,
    with_smoothed_frequencies,
)
from client_sdk.errors import InvalidParameter

#: What the answer's ``note`` says about its counts.
MULTI_NOTE = (
    "counts are unbiased over all n devices (smp: rescaled from the devices that sampled the "
    "attribute); an attribute in a declared categorical pair is combined with those pairs' "
    "margins (inverse-variance weights: its std_error is the combined count's, raw_count and "
    "raw_std_error are its own reports' alone) and each joint table is the least-squares "
    "closest table with those margins; a mixed pair (categorical x numeric) is not combined: "
    "its per-label counts are the pair's own; no other post-processing is applied"
)


#: What a multi-attribute trend's ``smoothed_*`` fields are.
MULTI_SMOOTHING_NOTE = (
    "per window, each attribute's and each declared pair's raw unbiased estimates (its own "
    "reports only, no combination with the pairs' margins); smoothed_* borrow strength across "
    "windows (local-level Kalman smoother per value, cell or mean, process noise fitted by "
    "empirical Bayes, new level at a break): lower error, not unbiased per window"
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
    trend = multi_trend(mechanism, selected, q) if q.trend else []
    return MultiEstimates(
        **header(mechanism, list(selected), n, q),
        attributes=attributes,
        joints=joints,
        label_means=label_means,
        trend=trend,
        note=MULTI_NOTE,
        trend_smoothing=MULTI_SMOOTHING_NOTE,
    )


def _categorical(est: Any, name: str, part: Estimate, z: float) -> AttributeEstimate:
    from aggregator.multi import _population

    n = est.n
    counts = est.consistent_counts(name)
    raw = est.counts(name)
    errors = est.count_std_errors(name)
    # The attribute's own counts and their errors (est.count_std_errors when it is in no pair).
    raw_errors = np.sqrt(_population(est.mechanism, n, part)[1])
    values = [
        AttributeValue(
            value=label,
            count=float(counts[i]),
            frequency=float(counts[i] / n),
            raw_count=float(raw[i]),
            raw_std_error=float(raw_errors[i]),
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


# -- the trend: per window, per attribute and per declared pair -------------------------------


def _window_component(mechanism: Any, tally: Any, j: int) -> Any:
    """Component ``j``'s own estimate in one window (None when no report carries it):
    categorical ``(frequencies, std_errors)`` over all the window's devices (SMP: with the term
    for estimating on its random share of them), numeric the ``MeanEstimate``."""
    from aggregator.estimate import estimate
    from aggregator.multi import _population, _rsfd
    from client_sdk.mechanisms import Mechanism

    part = tally.parts[j]
    if part.n < 1:
        return None
    sub = mechanism.mechanisms[j]
    if mechanism.name == "rsfd":
        est: Any = _rsfd(sub, mechanism.d, tally.n, part)
    elif isinstance(sub, Mechanism):
        est = estimate(sub, part, min_reports=1)
    else:
        return estimate(sub, part, min_reports=1, bootstrap=0)
    counts, var = _population(mechanism, tally.n, est)
    return counts / tally.n, np.sqrt(var) / tally.n


_NO_MEAN: dict[str, Any] = dict.fromkeys(
    ("mean", "std_error", "smoothed_mean", "smoothed_std_error")
)
_NO_FREQUENCIES: dict[str, Any] = dict.fromkeys(
    ("frequencies", "std_errors", "smoothed_frequencies", "smoothed_std_errors")
)


def _smoothed_rows(
    windows: list[tuple[str, int]], raw: list[Any], smoothing: bool
) -> list[FrequencyTrendWindow]:
    """The categorical trend's smoother (:func:`aggregator.service.with_smoothed_frequencies`)
    over one attribute's or pair's per-window ``(frequencies, std_errors)`` (None: none)."""
    rows = [
        FrequencyTrendWindow(w, n, None, None, None, None)
        if r is None
        else FrequencyTrendWindow(w, n, r[0].tolist(), r[1].tolist(), None, None)
        for (w, n), r in zip(windows, raw, strict=True)
    ]
    return with_smoothed_frequencies(rows) if smoothing else rows


def multi_trend(
    mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery
) -> list[MultiTrendWindow]:
    """Per window: per attribute its own unbiased estimate (categorical frequencies, numeric
    mean) with its standard error, per declared categorical pair its raw cell frequencies with
    standard errors, and beside each the smoothed values (:mod:`aggregator.smooth`, the
    categorical trend's smoother; means: :func:`aggregator.service.smooth_one`). A window below
    ``q.min_reports`` shows its report count only; a component no report of the window carries
    (SMP, small windows) shows null there."""
    windows = [(w, int(t.n)) for w, t in selected.items()]
    shown = [
        mechanism.check_tally(t) if t.n >= max(1, q.min_reports) else None
        for t in selected.values()
    ]
    width = len(mechanism.attributes)
    per_attr: list[list[MultiTrendAttribute]] = [[] for _ in windows]
    for j, attr in enumerate(mechanism.attributes):
        raw = [None if t is None else _window_component(mechanism, t, j) for t in shown]
        carried = [0 if t is None else int(t.carried[j]) for t in shown]
        if attr.categorical:
            rows = _smoothed_rows(windows, raw, q.smoothing)
            for t, (row, c) in enumerate(zip(rows, carried, strict=True)):
                per_attr[t].append(
                    MultiTrendAttribute(
                        name=attr.name,
                        kind="frequency",
                        reports=c,
                        frequencies=row.frequencies,
                        std_errors=row.std_errors,
                        smoothed_frequencies=row.smoothed_frequencies,
                        smoothed_std_errors=row.smoothed_std_errors,
                        **_NO_MEAN,
                    )
                )
            continue
        means = [None if e is None else float(e.mean) for e in raw]
        errors = [None if e is None else float(e.std_error) for e in raw]
        sm, sm_se = smooth_one(means, errors) if q.smoothing else ([None] * len(raw),) * 2
        for t, c in enumerate(carried):
            per_attr[t].append(
                MultiTrendAttribute(
                    name=attr.name,
                    kind="mean",
                    reports=c,
                    **_NO_FREQUENCIES,
                    mean=means[t],
                    std_error=errors[t],
                    smoothed_mean=sm[t],
                    smoothed_std_error=sm_se[t],
                )
            )
    per_joint: list[list[MultiTrendJoint]] = [[] for _ in windows]
    for position, pair in enumerate(mechanism.pairs):
        if mechanism.mixed_pair(pair) is not None:
            continue
        j = width + position
        kb = len(mechanism.attribute(pair[1]).labels)
        raw = [None if t is None else _window_component(mechanism, t, j) for t in shown]
        rows = _smoothed_rows(windows, raw, q.smoothing)
        for t, row in enumerate(rows):
            per_joint[t].append(
                MultiTrendJoint(
                    (pair[0], pair[1]),
                    _grid(row.frequencies, kb),
                    _grid(row.std_errors, kb),
                    _grid(row.smoothed_frequencies, kb),
                    _grid(row.smoothed_std_errors, kb),
                )
            )
    return [MultiTrendWindow(w, n, per_attr[t], per_joint[t]) for t, (w, n) in enumerate(windows)]


def _grid(cells: list[float] | None, columns: int) -> list[list[float]] | None:
    """A flat product-domain list (index ``i_a * k_b + i_b``) as rows of ``columns`` cells."""
    if cells is None:
        return None
    return [cells[i : i + columns] for i in range(0, len(cells), columns)]
