"""Replays the UCI Adult data set as devices and compares local DP with central baselines."""

from simulator.adult import ADULT_ATTRIBUTES, Column, Dataset, load_adult, load_csv
from simulator.errors import DataError, SimulatorError, UnknownAttribute

__all__ = [
    "ADULT_ATTRIBUTES",
    "Column",
    "DataError",
    "Dataset",
    "SimulatorError",
    "UnknownAttribute",
    "load_adult",
    "load_csv",
]
