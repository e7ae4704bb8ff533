"""Turns tallies of perturbed reports into estimates with honest error bars."""

from aggregator.amplification import (
    ShuffleAmplification,
    amplified_epsilon,
    default_delta,
    shuffle_amplification,
)
from aggregator.audit import WindowAudit, audit_windows, recompute_tally
from aggregator.errors import AggregatorError, NotEnoughReports
from aggregator.estimate import Estimate, debias, estimate, z_value
from aggregator.export import to_csv
from aggregator.openended import (
    CandidateCount,
    CandidateEstimates,
    DiscoveredItem,
    Discoveries,
    discover,
)
from aggregator.postprocess import (
    DEFAULT_POSTPROCESS,
    POSTPROCESS_METHODS,
    POSTPROCESSORS,
    PostProcessed,
)
from aggregator.query import DEFAULT_LEVEL, estimate_windows
from aggregator.results import (
    DistributionEstimates,
    EstimateAnswer,
    FrequencyEstimates,
    MeanEstimates,
)
from aggregator.schema import json_schema, to_json
from aggregator.service import EstimateQuery, estimate_range
from aggregator.topk import HeavyHitter, TopK, heavy_hitters

__all__ = [
    "AggregatorError",
    "CandidateCount",
    "CandidateEstimates",
    "DEFAULT_LEVEL",
    "DEFAULT_POSTPROCESS",
    "DiscoveredItem",
    "Discoveries",
    "DistributionEstimates",
    "Estimate",
    "EstimateAnswer",
    "EstimateQuery",
    "FrequencyEstimates",
    "HeavyHitter",
    "MeanEstimates",
    "NotEnoughReports",
    "POSTPROCESSORS",
    "POSTPROCESS_METHODS",
    "PostProcessed",
    "ShuffleAmplification",
    "TopK",
    "WindowAudit",
    "amplified_epsilon",
    "audit_windows",
    "debias",
    "default_delta",
    "discover",
    "estimate",
    "estimate_range",
    "estimate_windows",
    "heavy_hitters",
    "json_schema",
    "recompute_tally",
    "shuffle_amplification",
    "to_csv",
    "to_json",
    "z_value",
]
