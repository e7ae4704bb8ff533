"""Numeric mechanisms: means and distributions of bounded numbers, with exact privacy.

mech = create("piecewise", epsilon=1.0, bounds=(0, 100))
report = mech.perturb(42.5)               # one device: OS randomness, pure Python
batch = mech.perturb_many(values, rng=7)  # simulator / tests (NumPy)
tally = mech.tally(batch)                 # exact integers: tally_a + tally_b

Estimates: ``aggregator.numeric.estimate_numeric(mech, tally)``. Formulas, grids and the
exactness argument: docs/MECHANISMS.md §19.
"""

from client_sdk.mechanisms.numeric.alpha_point import AlphaPointMean
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.grid import DEFAULT_GRID, Grid
from client_sdk.mechanisms.numeric.mean import (
    HYBRID_EPSILON_STAR,
    MEAN_MECHANISMS,
    Duchi,
    ExpectedValues,
    Hybrid,
    MeanCandidate,
    MeanChoice,
    MeanMechanism,
    OneBitMean,
    Piecewise,
    check_expected_values,
    choose_mean,
    expected_variance,
)
from client_sdk.mechanisms.numeric.registry import NUMERIC_MECHANISMS, create, from_config
from client_sdk.mechanisms.numeric.square_wave import DEFAULT_SW_GRID, SquareWave, square_wave_b
from client_sdk.mechanisms.numeric.tally import NumericTally

__all__ = [
    "AlphaPointMean",
    "DEFAULT_GRID",
    "DEFAULT_SW_GRID",
    "Duchi",
    "Grid",
    "HYBRID_EPSILON_STAR",
    "Hybrid",
    "MEAN_MECHANISMS",
    "ExpectedValues",
    "MeanCandidate",
    "MeanChoice",
    "MeanMechanism",
    "NUMERIC_MECHANISMS",
    "NumericMechanism",
    "NumericTally",
    "OneBitMean",
    "Piecewise",
    "SquareWave",
    "check_expected_values",
    "choose_mean",
    "expected_variance",
    "create",
    "from_config",
    "square_wave_b",
]
