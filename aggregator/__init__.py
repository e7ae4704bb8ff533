"""Turns tallies of perturbed reports into estimates with honest error bars."""

from aggregator.audit import WindowAudit, audit_windows, recompute_tally
from aggregator.errors import AggregatorError, NotEnoughReports
from aggregator.estimate import Estimate, debias, estimate, z_value
from aggregator.export import to_csv
from aggregator.postprocess import (
    DEFAULT_POSTPROCESS,
    POSTPROCESSORS,
    PostProcessed,
)
from aggregator.query import DEFAULT_LEVEL, estimate_windows
from aggregator.topk import HeavyHitter, TopK, heavy_hitters

__all__ = [
    "AggregatorError",
    "DEFAULT_LEVEL",
    "DEFAULT_POSTPROCESS",
    "Estimate",
    "HeavyHitter",
    "NotEnoughReports",
    "POSTPROCESSORS",
    "PostProcessed",
    "TopK",
    "WindowAudit",
    "audit_windows",
    "debias",
    "estimate",
    "estimate_windows",
    "heavy_hitters",
    "recompute_tally",
    "to_csv",
    "z_value",
]
