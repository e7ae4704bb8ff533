"""The typed answers of the estimate service (:mod:`aggregator.service`).

One answer class per kind of campaign, chosen by the mechanism's ``kind``:

* ``"frequency"`` (categorical mechanisms): :class:`FrequencyEstimates`, one
  :class:`ValueEstimate` per domain value, heavy hitters and a per-window trend;
* ``"mean"``: :class:`MeanEstimates`, the mean of the clipped values with its interval;
* ``"distribution"``: :class:`DistributionEstimates`, a histogram with per-bin intervals,
  quantiles with intervals and the mean;
* ``"multi"`` (several attributes per device): :class:`MultiEstimates`, per attribute its
  counts or mean, per declared pair a :class:`JointTable` with standard errors;
* ``"open_domain"`` (strings nobody listed in advance): :class:`OpenDomainEstimates`, the
  discovered heavy hitters (:class:`OpenValueEstimate`, ranked, with the
  :class:`DiscoveryThreshold`) and the counts of the candidate strings asked about.

These dataclasses are the wire contract: :func:`aggregator.schema.to_json` gives the JSON the
collector serves and :func:`aggregator.schema.json_schema` the OpenAPI schema it publishes.
Every field is always present; ``None`` (JSON ``null``) marks a value that a window below the
campaign's minimum number of reports does not get.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

#: Field metadata of the answers' ``from`` (a Python keyword) and ``to``.
_FROM = {
    "json": "from",
    "format": "date",
    "description": "First day asked for (or first window), or null.",
}
_TO = {"format": "date", "description": "Last day asked for (or last window), or null."}
_WINDOWS = {"description": "The windows in the range that hold reports (ISO dates)."}
_DELETED = {
    "description": "The windows in the range whose reports were deleted by the campaign's "
    "retention (their tallies, hence these estimates, are kept)."
}
_SMOOTHING = {"description": "What the trend's smoothed_* values are."}


@dataclass(frozen=True)
class Interval:
    """A confidence interval ``[low, high]`` at ``level``."""

    level: float
    low: float
    high: float


@dataclass(frozen=True)
class RangeHeader:
    """What every answer states first: the campaign, the windows asked for and found, n, and
    the mechanism with its parameters, claimed and realised epsilon, and the interval level."""

    campaign: str | None
    from_: str | None = field(metadata=_FROM)
    to: str | None = field(metadata=_TO)
    windows: list[str] = field(metadata=_WINDOWS)
    n: int
    min_reports: int
    mechanism: str
    params: dict[str, Any]
    epsilon: float
    realised_epsilon: float
    level: float


# -- frequency (categorical) -------------------------------------------------------------------


@dataclass(frozen=True)
class ValueEstimate:
    """One domain value: post-processed and raw unbiased count, standard errors, interval."""

    value: str
    count: float = field(metadata={"description": "Count after the post-processing."})
    frequency: float = field(metadata={"description": "count / n."})
    raw_count: float = field(metadata={"description": "Unbiased count (no post-processing)."})
    raw_frequency: float
    std_error: float = field(metadata={"description": "Closed-form std error of raw_count."})
    plugin_std_error: float
    ci_low: float = field(metadata={"description": "Interval around raw_count, within [0, n]."})
    ci_high: float
    significant: bool = field(metadata={"description": "Above the heavy-hitter threshold."})


@dataclass(frozen=True)
class HeavyHitterRow:
    """A value significantly above zero: its raw count and standard error."""

    value: str
    count: float
    std_error: float


@dataclass(frozen=True)
class TopKSummary:
    """Values whose raw count exceeds ``threshold = z * sigma0`` (Bonferroni over k values)."""

    level: float
    alpha: float
    z: float
    sigma0: float
    threshold: float
    values: list[HeavyHitterRow]


@dataclass(frozen=True)
class FrequencyTrendWindow:
    """One window of a categorical trend: raw unbiased frequencies and smoothed ones."""

    window: str
    n: int
    frequencies: list[float] | None
    std_errors: list[float] | None
    smoothed_frequencies: list[float] | None
    smoothed_std_errors: list[float] | None


@dataclass(frozen=True)
class FrequencyEstimates(RangeHeader):
    """Frequency estimates of a categorical campaign over a range of windows."""

    theoretical_std_error: float
    postprocess: dict[str, Any] = field(
        metadata={"description": "The post-processing applied: method and its details."}
    )
    values: list[ValueEstimate]
    top_k: TopKSummary
    trend: list[FrequencyTrendWindow]
    trend_smoothing: str = field(metadata=_SMOOTHING)
    kind: Literal["frequency"] = "frequency"
    reports_deleted: list[str] = field(default_factory=list, metadata=_DELETED)


# -- mean --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeanTrendWindow:
    """One window of a mean's trend: its unbiased mean with interval, and the smoothed mean."""

    window: str
    n: int
    mean: float | None
    std_error: float | None
    ci_low: float | None
    ci_high: float | None
    smoothed_mean: float | None
    smoothed_std_error: float | None


@dataclass(frozen=True)
class MeanEstimates(RangeHeader):
    """The mean of a numeric campaign's clipped values over a range of windows."""

    bounds: tuple[float, float]
    mean: float
    std_error: float
    worst_case_std_error: float = field(
        metadata={
            "description": "The formula's bound sqrt(max_x Var / n) (std_error, estimated "
            "from the reports, can exceed it at small n)."
        }
    )
    ci: Interval
    trend: list[MeanTrendWindow]
    trend_smoothing: str = field(metadata=_SMOOTHING)
    kind: Literal["mean"] = "mean"
    reports_deleted: list[str] = field(default_factory=list, metadata=_DELETED)


# -- distribution ------------------------------------------------------------------------------


@dataclass(frozen=True)
class HistogramBin:
    """Estimated fraction of values in ``[low, high)``, with a bootstrap interval."""

    low: float
    high: float
    center: float
    frequency: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class Atom:
    """Estimated fraction of values equal to the integer ``value`` (an integer-valued
    distribution campaign), with its interval (bootstrap, widened for EMS's smoothing bias:
    ``aggregator.numeric.widen_interval``)."""

    value: float
    frequency: float
    ci_low: float
    ci_high: float


@dataclass(frozen=True)
class QuantileRow:
    """Quantile ``q`` of the distribution with its interval (bootstrap, widened for EMS's
    smoothing bias: ``aggregator.numeric.widen_interval``)."""

    q: float
    value: float
    low: float
    high: float


@dataclass(frozen=True)
class DistributionTrendWindow:
    """One window of a distribution's trend: mean and median with intervals, smoothed mean."""

    window: str
    n: int
    mean: float | None
    mean_std_error: float | None
    mean_low: float | None
    mean_high: float | None
    median: float | None
    median_low: float | None
    median_high: float | None
    smoothed_mean: float | None
    smoothed_std_error: float | None


@dataclass(frozen=True)
class DistributionEstimates(RangeHeader):
    """The distribution of a numeric campaign's clipped values over a range of windows."""

    bounds: tuple[float, float]
    bootstrap: int = field(metadata={"description": "Bootstrap replicates behind intervals."})
    bins: list[HistogramBin]
    mean: float
    mean_ci: Interval
    quantiles: list[QuantileRow]
    trend: list[DistributionTrendWindow]
    trend_smoothing: str = field(metadata=_SMOOTHING)
    kind: Literal["distribution"] = "distribution"
    reports_deleted: list[str] = field(default_factory=list, metadata=_DELETED)
    integer: bool = field(
        default=False,
        metadata={
            "description": "True when the campaign declares its values integers "
            "(square_wave params.integer): the estimate is then a set of atoms."
        },
    )
    atoms: list[Atom] = field(
        default_factory=list,
        metadata={
            "description": "Integer-valued campaigns: the estimated frequency of every integer "
            "in the bounds (ascending; they sum to 1), each with its bootstrap interval; the "
            "quantiles are read from them (the smallest integer whose cumulative frequency "
            "reaches q). [] for other campaigns."
        },
    )


# -- several attributes per device ------------------------------------------------------------


@dataclass(frozen=True)
class AttributeValue:
    """One value of a categorical attribute: its count over all devices, with an interval."""

    value: str
    count: float = field(
        metadata={
            "description": "Unbiased count over all n devices; for an attribute in a declared "
            "pair, combined with the pairs' margins (inverse-variance weights, summing to n)."
        }
    )
    frequency: float = field(metadata={"description": "count / n."})
    raw_count: float = field(
        metadata={
            "description": "The attribute's own unbiased count (its own reports only, not "
            "combined with the pairs' margins)."
        }
    )
    raw_std_error: float = field(
        metadata={
            "description": "Standard error of raw_count: equal to std_error for an attribute "
            "in no declared categorical pair, larger for one in a pair (count combines more "
            "reports)."
        }
    )
    std_error: float = field(metadata={"description": "Standard error of count."})
    ci_low: float = field(metadata={"description": "count - z std_error, within [0, n]."})
    ci_high: float


@dataclass(frozen=True)
class AttributeEstimate:
    """One attribute of a multi-attribute campaign: value counts (categorical) or a mean."""

    name: str
    kind: Literal["frequency", "mean"]
    reports: int = field(metadata={"description": "Reports that carry this attribute."})
    values: list[AttributeValue] = field(metadata={"description": "Categorical only, else []."})
    bounds: tuple[float, float] | None = field(metadata={"description": "Numeric only."})
    mean: float | None = field(metadata={"description": "Numeric only: the clipped mean."})
    std_error: float | None
    ci: Interval | None


@dataclass(frozen=True)
class JointTable:
    """The joint counts of a declared pair of categorical attributes (rows x columns)."""

    pair: tuple[str, str]
    rows: list[str]
    columns: list[str]
    counts: list[list[float]] = field(
        metadata={
            "description": "Consistent counts: the least-squares closest table to raw_counts "
            "whose margins equal the attributes' counts (entries may be negative)."
        }
    )
    frequencies: list[list[float]] = field(metadata={"description": "counts / n."})
    raw_counts: list[list[float]] = field(metadata={"description": "Unbiased joint counts."})
    std_errors: list[list[float]] = field(metadata={"description": "Std errors of raw_counts."})
    ci_low: list[list[float]] = field(
        metadata={"description": "counts - z std_errors, within [0, n]."}
    )
    ci_high: list[list[float]]


@dataclass(frozen=True)
class LabelMean:
    """The numeric attribute's mean among the devices holding one label (a mixed pair)."""

    label: str
    count: float = field(metadata={"description": "Unbiased count of devices with the label."})
    sum: float = field(metadata={"description": "Unbiased sum of their clipped values."})
    sum_std_error: float
    mean: float | None = field(
        metadata={"description": "sum / count (delta-method std error); null if count <= 0."}
    )
    std_error: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class LabelMeansTable:
    """A declared categorical x numeric pair: the numeric attribute's mean per label."""

    pair: tuple[str, str]
    label_attribute: str
    numeric_attribute: str
    bounds: tuple[float, float]
    rows: list[LabelMean]


@dataclass(frozen=True)
class MultiTrendAttribute:
    """One attribute in one window: its raw unbiased estimate with standard error and the
    smoothed estimate with its standard error (null below the minimum, or when no report of
    the window carries the attribute).

    Categorical attributes fill the ``*frequencies``/``*std_errors`` lists (in the order of the
    attribute's values), numeric ones the ``*mean``/``*std_error`` fields; the rest are null."""

    name: str
    kind: Literal["frequency", "mean"]
    reports: int = field(metadata={"description": "Reports of the window that carry it."})
    frequencies: list[float] | None = field(
        metadata={"description": "The window's raw unbiased frequencies over all its devices."}
    )
    std_errors: list[float] | None
    smoothed_frequencies: list[float] | None = field(
        metadata={"description": "Borrow strength across windows (see trend_smoothing)."}
    )
    smoothed_std_errors: list[float] | None
    mean: float | None = field(metadata={"description": "The window's unbiased clipped mean."})
    std_error: float | None
    smoothed_mean: float | None
    smoothed_std_error: float | None


@dataclass(frozen=True)
class MultiTrendJoint:
    """One declared categorical pair in one window: raw unbiased cell frequencies (rows: the
    first attribute's values, columns: the second's) with standard errors, and the smoothed
    cells with theirs; null below the minimum or when no report of the window carries it."""

    pair: tuple[str, str]
    frequencies: list[list[float]] | None
    std_errors: list[list[float]] | None
    smoothed_frequencies: list[list[float]] | None
    smoothed_std_errors: list[list[float]] | None


@dataclass(frozen=True)
class MultiTrendWindow:
    """One window of a multi-attribute campaign: how many reports it holds and, per attribute
    and per declared categorical pair, the window's own estimates beside the smoothed ones."""

    window: str
    n: int
    attributes: list[MultiTrendAttribute] = field(
        default_factory=list, metadata={"description": "Per attribute, in declared order."}
    )
    joints: list[MultiTrendJoint] = field(
        default_factory=list, metadata={"description": "Per declared categorical pair."}
    )


@dataclass(frozen=True)
class MultiEstimates(RangeHeader):
    """A multi-attribute campaign over a range of windows: per attribute its estimate, per
    declared pair its joint table with standard errors and intervals."""

    attributes: list[AttributeEstimate]
    joints: list[JointTable]
    label_means: list[LabelMeansTable]
    trend: list[MultiTrendWindow]
    note: str = field(metadata={"description": "How the counts were made consistent."})
    kind: Literal["multi"] = "multi"
    trend_smoothing: str = field(default="", metadata=_SMOOTHING)
    reports_deleted: list[str] = field(default_factory=list, metadata=_DELETED)


# -- open-ended values (strings nobody listed in advance) -------------------------------------


@dataclass(frozen=True)
class OpenValueEstimate:
    """One string of an open-domain campaign: its estimated count over all n devices."""

    value: str
    count: float = field(metadata={"description": "Estimated number of devices holding it."})
    std_error: float | None = field(
        metadata={
            "description": "Standard error of count (null: no report measured it, e.g. a "
            "level of the walk that holds no report yet)."
        }
    )
    ci_low: float | None = field(
        metadata={"description": "count - z std_error (not clipped; null with std_error)."}
    )
    ci_high: float | None
    significant: bool = field(
        metadata={
            "description": "count > z times the standard error it would have if nobody held "
            "it (Bonferroni over the strings tested)."
        }
    )


@dataclass(frozen=True)
class DiscoveryThreshold:
    """The significance threshold of a discovery: ``threshold = z * sigma0``.

    ``sigma0`` is the standard error of a ``max_length``-byte string nobody holds and ``z`` the
    Bonferroni quantile over the ``candidates_tested`` strings of the last level (at least one)
    at family-wise level ``alpha = 1 - level``; shorter strings are measured by more levels, so
    each item's ``significant`` compares it with its own null standard error.
    """

    level: float
    alpha: float
    z: float | None = field(
        metadata={
            "description": "The Bonferroni z, raised to the exact binomial critical value of "
            "a null count at the last level where that is larger (where no count can pass, "
            "just above the largest possible count)."
        }
    )
    sigma0: float | None = field(
        metadata={"description": "Null: the walk's last level holds no report yet."}
    )
    threshold: float | None = field(metadata={"description": "z * sigma0; null with either."})
    candidates_tested: int


@dataclass(frozen=True)
class OpenDomainTrendWindow:
    """One window of an open-domain campaign: how many reports it holds."""

    window: str
    n: int


@dataclass(frozen=True)
class OpenDomainEstimates(RangeHeader):
    """An open-domain campaign over a range of windows: the heavy hitters its reports reveal
    (a discovery mechanism, ``pem``) and the counts of the candidate strings asked about."""

    max_length: int = field(
        metadata={"description": "Bytes of UTF-8 (after NFC) a value may hold."}
    )
    discovers: bool = field(
        metadata={
            "description": "Whether the mechanism discovers heavy hitters (pem); a frequency "
            "oracle (cms, hcms) only counts candidates."
        }
    )
    top: int = field(metadata={"description": "At most this many discoveries are listed."})
    discovered: list[OpenValueEstimate] = field(
        metadata={"description": "The heavy hitters found, largest estimated count first."}
    )
    threshold: DiscoveryThreshold | None = field(
        metadata={"description": "The discovery's significance threshold (null: no discovery)."}
    )
    candidates: list[OpenValueEstimate] = field(
        metadata={"description": "The candidate strings asked about, in the order given."}
    )
    candidate_z: float | None = field(
        metadata={
            "description": "z of the candidates' significance test: the Bonferroni z, raised "
            "to the exact binomial critical value of a null count where that is larger (null: "
            "none asked)."
        }
    )
    trend: list[OpenDomainTrendWindow]
    note: str = field(metadata={"description": "What the counts are and how they were found."})
    kind: Literal["open_domain"] = "open_domain"
    reports_deleted: list[str] = field(default_factory=list, metadata=_DELETED)


#: What :func:`aggregator.service.estimate_range` returns.
EstimateAnswer = (
    FrequencyEstimates
    | MeanEstimates
    | DistributionEstimates
    | MultiEstimates
    | OpenDomainEstimates
)
