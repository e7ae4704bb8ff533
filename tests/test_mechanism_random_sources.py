"""Both random sources of every mechanism, single reports and batches, against p* and q*.

A device uses OS randomness (``rng=None``); the simulator and tests pass a seed. The two paths
are separate code in each mechanism, so each is checked here on its own: seeded output is
reproducible and differs between seeds, OS output is not reproducible, and both give each value
support with probability ``p*`` when held and ``q*`` when not. The support counts of ``n``
independent reports are a sum of independent Bernoullis, so the tolerance is 5.5 standard
deviations of that sum (a false failure about once in 2.6e7 checks).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from aggregator import estimate
from client_sdk.mechanisms import create

LABELS = ("a", "b", "c", "d", "e")
NAMES = ["rr", "grr", "grr3", "oue", "sue", "olh", "hr", "ss", "rappor"]
Z = 5.5


def _mech(name: str, epsilon: float = 1.1):
    if name == "rr":
        return create(name, epsilon=epsilon, domain=("no", "yes"))
    if name == "grr3":  # two other values to pick from: the smallest non-trivial choice
        return create("grr", epsilon=epsilon, domain=LABELS[:3])
    return create(name, epsilon=epsilon, domain=LABELS)


def _values(mech, n: int) -> np.ndarray:
    """``n`` domain indices, uneven so that p* and q* both show: index i held by share ~ (i+1)."""
    k = mech.k
    weights = np.arange(1, k + 1)
    per = (weights * n) // weights.sum()
    per[0] += n - per.sum()
    return np.repeat(np.arange(k), per)


def _check_support(mech, values: np.ndarray, support: np.ndarray) -> None:
    n = values.size
    p, q = mech.p_star, mech.q_star
    held = np.bincount(values, minlength=mech.k)
    mean = held * p + (n - held) * q
    sd = np.sqrt(held * p * (1 - p) + (n - held) * q * (1 - q))
    z = (support - mean) / sd
    assert np.abs(z).max() < Z, f"{mech.name}: support z-scores {np.round(z, 2).tolist()}"


@pytest.mark.parametrize("name", NAMES)
def test_os_batches_match_p_star_and_q_star(name: str) -> None:
    mech = _mech(name)
    values = _values(mech, 6000)
    batch = mech.perturb_many(values)  # rng=None: a generator seeded from the OS
    _check_support(mech, values, mech.tally(batch).support)
    # The estimates that come out are unbiased for the true counts (same tolerance).
    est = estimate(mech, mech.tally(batch))
    held = np.bincount(values, minlength=mech.k)
    assert (np.abs(est.counts - held) < Z * est.std_errors).all()


@pytest.mark.parametrize("name", NAMES)
def test_os_batches_are_fresh_each_time(name: str) -> None:
    mech = _mech(name)
    values = _values(mech, 400)
    a, b = mech.perturb_many(values), mech.perturb_many(values)
    assert a.shape == b.shape
    assert not np.array_equal(a, b), "two OS batches of 400 reports were identical"


@pytest.mark.parametrize("name", NAMES)
def test_seeded_batches_are_reproducible_and_depend_on_the_seed(name: str) -> None:
    mech = _mech(name)
    values = _values(mech, 400)
    a, b = mech.perturb_many(values, rng=11), mech.perturb_many(values, rng=11)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, mech.perturb_many(values, rng=12))
    gen = np.random.default_rng(11)
    assert np.array_equal(a, mech.perturb_many(values, rng=gen))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("source", ["os", "seeded"])
def test_single_reports_match_p_star_and_q_star(name: str, source: str) -> None:
    mech = _mech(name, epsilon=0.9)
    values = _values(mech, 1500)
    gen = np.random.default_rng(20211) if source == "seeded" else None
    labels = mech.domain
    payloads = [mech.perturb(labels[i], rng=gen) for i in values.tolist()]
    _check_support(mech, values, mech.tally(payloads).support)


@pytest.mark.parametrize("name", NAMES)
def test_single_reports_seeded_are_reproducible_os_are_not(name: str) -> None:
    mech = _mech(name, epsilon=0.5)
    label = mech.domain[-1]
    seeded = [mech.perturb(label, rng=np.random.default_rng(3)) for _ in range(3)]
    assert seeded[0] == seeded[1] == seeded[2]
    run_a = [mech.perturb(label, rng=np.random.default_rng(s)) for s in range(40)]
    run_b = [mech.perturb(label, rng=np.random.default_rng(s)) for s in range(40)]
    assert run_a == run_b
    assert len({str(p) for p in run_a}) > 1, "the seed does not reach the report"
    fresh = [mech.perturb(label) for _ in range(40)]
    assert len({str(p) for p in fresh}) > 1, "OS reports of one value never vary"


def test_grr_os_path_keeps_the_value_with_probability_p() -> None:
    # GRR's single-report path has its own OS branch (12 bytes: a keep word and a replacement
    # word); count keeps and where the replacements land, with binomial tolerances.
    mech = create("grr", epsilon=0.7, domain=LABELS)
    n = 4000
    out = np.array([mech.perturb_index(2) for _ in range(n)])
    p = mech.p_star
    keeps = int((out == 2).sum())
    assert abs(keeps - n * p) < Z * math.sqrt(n * p * (1 - p))
    others = np.bincount(out[out != 2], minlength=5)
    assert others[2] == 0
    m = n - keeps
    for j in (0, 1, 3, 4):
        assert abs(others[j] - m / 4) < Z * math.sqrt(m * 0.25 * 0.75)
