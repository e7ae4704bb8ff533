"""Turns tallies of perturbed reports into estimates with honest error bars."""

from aggregator.errors import AggregatorError, NotEnoughReports
from aggregator.estimate import Estimate, debias, estimate, z_value

__all__ = [
    "AggregatorError",
    "Estimate",
    "NotEnoughReports",
    "debias",
    "estimate",
    "z_value",
]
