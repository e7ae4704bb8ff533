"""Numeric reports on the wire and in distribution: perturb vs perturb_many vs the exact law.

Both samplers are compared with the exact output distribution (``output_weights``) by a
chi-square goodness-of-fit test on outputs grouped into ~20 cells of equal probability
(significance 1e-4 per test, seeded where a seed exists); agreeing with the same exact law, they
agree with each other.
"""

from __future__ import annotations

import ast
import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms import NUMERIC_MECHANISMS
from client_sdk.mechanisms.numeric import create, from_config

ROOT = Path(__file__).resolve().parent.parent
#: Every numeric mechanism of the one registry (a new one is picked up without edits).
NAMES = sorted(NUMERIC_MECHANISMS)
SMALL = {"grid": 64}


def small(name: str, epsilon: float = 1.5):
    params = {"segments": 16} if name == "alpha_point" else SMALL
    return create(name, epsilon=epsilon, bounds=(0.0, 64.0), **params)


def exact_law(mech, x: float) -> np.ndarray:
    """P[report = y] for a device holding ``x``: a mixture of the two grid neighbours."""
    pos = mech.grid.position(x)
    base = math.floor(pos)
    frac = pos - base
    den, w = mech.output_weights(base)
    law = np.array([float(Fraction(v, den)) for v in w])
    if frac:
        den2, w2 = mech.output_weights(base + 1)
        law = (1 - frac) * law + frac * np.array([float(Fraction(v, den2)) for v in w2])
    return law


def chi2_pvalue(reports: np.ndarray, law: np.ndarray, cells: int = 20) -> float:
    cum = np.cumsum(law)
    cut = np.searchsorted(cum, np.linspace(0, 1, cells + 1)[1:-1])
    groups = np.unique(np.concatenate([cut, [law.size - 1]]))
    edges = np.concatenate([[0], groups + 1])
    observed = np.add.reduceat(np.bincount(reports, minlength=law.size), edges[:-1])
    expected = np.add.reduceat(law, edges[:-1]) * reports.size
    keep = expected > 0
    return float(
        stats.chisquare(
            observed[keep], expected[keep] * observed.sum() / expected[keep].sum()
        ).pvalue
    )


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("x", [0.0, 23.37, 64.0])
def test_perturb_and_perturb_many_follow_the_exact_law(name: str, x: float) -> None:
    mech = small(name)
    law = exact_law(mech, x)
    one = np.array([mech.perturb(x) for _ in range(6000)])
    many = mech.perturb_many(np.full(100_000, x), rng=7)
    assert chi2_pvalue(one, law) > 1e-4
    assert chi2_pvalue(many, law) > 1e-4


def test_the_agreement_test_can_fail() -> None:
    mech = small("piecewise")
    many = mech.perturb_many(np.full(100_000, 23.37), rng=7)
    assert chi2_pvalue(many, exact_law(mech, 30.0)) < 1e-4


@pytest.mark.parametrize("name", NAMES)
def test_wire_round_trip(name: str) -> None:
    mech = create(name, epsilon=1.0, bounds=(-1.0, 1.0))
    batch = mech.perturb_many(np.linspace(-2, 2, 500), rng=3)
    payloads = json.loads(json.dumps(mech.encode_many(batch)))
    assert np.array_equal(mech.decode_many(payloads), batch)
    assert [mech.check_payload(p) for p in payloads[:5]] == payloads[:5]
    rebuilt = from_config(json.loads(json.dumps(mech.config())))
    assert rebuilt == mech and rebuilt.digest() == mech.digest()


@pytest.mark.parametrize("name", NAMES)
def test_bad_payloads_are_rejected(name: str) -> None:
    mech = create(name, epsilon=1.0, bounds=(0, 1))
    size = mech.output_size
    for bad in [True, False, 1.0, "1", None, [1], {"y": 1}, -1, size, 2**70]:
        with pytest.raises(InvalidReport):
            mech.check_payload(bad)
    with pytest.raises(InvalidReport) as err:
        mech.decode_many([0, 1, "x", 0])
    assert err.value.index == 2
    with pytest.raises(InvalidReport):
        mech.tally([0, size])
    with pytest.raises(InvalidParameter):
        mech.tally(np.array([0, size]))


def test_bad_parameters_and_values_are_refused() -> None:
    for kwargs in [
        {"epsilon": 0, "bounds": (0, 1)},
        {"epsilon": float("nan"), "bounds": (0, 1)},
        {"epsilon": 1, "bounds": (1, 1)},
        {"epsilon": 1, "bounds": (0, float("inf"))},
        {"epsilon": 1, "bounds": (0,)},
        {"epsilon": 1, "bounds": "01"},
        {"epsilon": 1, "bounds": (0, 1), "grid": 1},
        {"epsilon": 1, "bounds": (0, 1), "colour": "red"},
    ]:
        with pytest.raises(InvalidParameter):
            create("piecewise", **kwargs)
    with pytest.raises(InvalidParameter, match="did you mean 'piecewise'"):
        create("piecewis", epsilon=1, bounds=(0, 1))
    mech = create("piecewise", epsilon=1, bounds=(0, 1))
    for bad in [float("nan"), "3", None, True]:
        with pytest.raises(InvalidParameter):
            mech.perturb(bad)
    for bad_batch in [np.array([0.5, np.nan]), ["0.5", "x"], np.zeros((2, 2)), [None]]:
        with pytest.raises(InvalidParameter):
            mech.perturb_many(bad_batch, rng=1)


def test_values_are_clipped_into_the_bounds() -> None:
    mech = create("duchi", epsilon=1, bounds=(0, 10))
    assert mech.grid.round(-1e300) == 0 and mech.grid.round(float("-inf")) == 0
    assert (
        mech.grid.round(1e300) == mech.grid.size and mech.grid.round(float("inf")) == mech.grid.size
    )
    idx = mech.grid.round_many(np.array([-5.0, 15.0, np.inf]), np.random.default_rng(0))
    assert idx.tolist() == [0, mech.grid.size, mech.grid.size]


def test_the_device_modules_import_numpy_only_inside_functions() -> None:
    """perturb must not need NumPy: no module-level numpy import in the numeric package."""
    for path in sorted((ROOT / "client_sdk" / "mechanisms" / "numeric").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            assert not any(n.split(".")[0] == "numpy" for n in names), path.name
