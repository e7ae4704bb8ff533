"""Exact privacy: the largest output-probability ratio equals e^epsilon, computed from thresholds.

Output distributions are enumerated here from each mechanism's integer thresholds with exact
rational arithmetic, independently of the sampling code; a second set of tests checks that the
samplers (OS path and vectorised path) draw from exactly those distributions.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from client_sdk.mechanisms import create
from client_sdk.mechanisms.randomness import SCALE

EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
S = Fraction(SCALE)


def sylvester(size: int) -> np.ndarray:
    h = np.array([[1]])
    while h.shape[0] < size:
        h = np.kron(h, np.array([[1, 1], [1, -1]]))
    return h


def distribution(mech, x: int) -> dict[object, Fraction]:
    """P[output | input x] over the whole output space, from the thresholds (exact)."""
    k = mech.k
    name = mech.name
    if name in ("rr", "grr"):
        p = Fraction(mech.threshold) / S
        return {y: p if y == x else (1 - p) / (k - 1) for y in range(k)}
    if name in ("sue", "oue"):
        p, q = Fraction(mech.threshold_p) / S, Fraction(mech.threshold_q) / S
        out = {}
        for bits in itertools.product((0, 1), repeat=k):
            prob = Fraction(1)
            for i, b in enumerate(bits):
                one = p if i == x else q
                prob *= one if b else 1 - one
            out[bits] = prob
        return out
    if name == "ss":
        p, d = Fraction(mech.threshold) / S, mech.d
        with_x, without_x = math.comb(k - 1, d - 1), math.comb(k - 1, d)
        return {
            subset: (p / with_x if x in subset else (1 - p) / without_x)
            for subset in itertools.combinations(range(k), d)
        }
    if name == "hr":
        p, size = Fraction(mech.threshold) / S, mech.K
        row = sylvester(size)[x + 1]
        return {y: (p if row[y] == 1 else 1 - p) / (size // 2) for y in range(size)}
    if name == "olh":
        # Output (a, b, y); the seed is independent of x, so compare P[y | x, seed] per seed.
        # Buckets no input hashes to have the same probability under every input, so the
        # inputs' buckets plus one other bucket cover every distinct ratio.
        p, g = Fraction(mech.threshold) / S, mech.g
        prime = (1 << 31) - 1
        seeds = np.random.default_rng(5).integers(1, prime, size=(300, 2))
        out = {}
        for a, b in seeds.tolist():
            h = ((a * x + b) % prime) % g
            hit = {((a * z + b) % prime) % g for z in range(k)}
            ys = hit | {min(set(range(len(hit) + 1)) - hit)} if len(hit) < g else hit
            for y in ys:
                out[(a, b, y)] = p if y == h else (1 - p) / (g - 1)
        return out
    raise AssertionError(name)


def max_ratio(mech) -> Fraction:
    dists = [distribution(mech, x) for x in range(mech.k)]
    best = Fraction(0)
    for dx, dx2 in itertools.permutations(dists, 2):
        for y, prob in dx.items():
            best = max(best, prob / dx2[y])
    return best


CASES = [
    ("rr", 2),
    ("grr", 2),
    ("grr", 5),
    ("sue", 4),
    ("oue", 4),
    ("ss", 6),
    ("hr", 5),
    ("olh", 4),
]


@pytest.mark.parametrize("epsilon", EPSILONS)
@pytest.mark.parametrize(("name", "k"), CASES)
def test_largest_ratio_is_exactly_e_to_the_epsilon(name: str, k: int, epsilon: float) -> None:
    mech = create(name, epsilon=epsilon, domain=k)
    ratio = max_ratio(mech)
    # Never more (a leak) and never less (wasted budget), to 1e-9.
    assert float(ratio) == pytest.approx(math.exp(epsilon), rel=1e-9)
    assert ratio <= Fraction(math.exp(epsilon))
    # The mechanism reports the epsilon of the sampler that runs.
    assert mech.realised_epsilon == pytest.approx(math.log(ratio), rel=1e-12, abs=1e-15)
    assert mech.realised_epsilon <= epsilon


@pytest.mark.parametrize(
    ("preset", "k", "epsilon"),
    [("rr-two-coin", 2, math.log(3)), ("sue-book", 4, math.log(9))],
)
def test_book_presets_have_the_book_epsilon(preset: str, k: int, epsilon: float) -> None:
    mech = create(preset, domain=k)
    ratio = max_ratio(mech)
    assert ratio == {"rr-two-coin": 3, "sue-book": 9}[preset]  # exact, not approximate
    assert mech.realised_epsilon == pytest.approx(epsilon, rel=1e-15)


@pytest.mark.parametrize("epsilon", [0.5, 8.0])
@pytest.mark.parametrize("name", ["grr", "oue", "olh", "hr", "ss"])
def test_large_domains_are_tight_too(name: str, epsilon: float) -> None:
    """At k = 1024 the ratio is the closed form of the thresholds (per bit for oue)."""
    mech = create(name, epsilon=epsilon, domain=1024)
    if name == "oue":
        tp, tq = mech.threshold_p, mech.threshold_q
        ratio = Fraction(tp * (SCALE - tq), (SCALE - tp) * tq)
    elif name == "ss":
        t, d = mech.threshold, mech.d
        ratio = Fraction(t * (1024 - d), (SCALE - t) * d)
    elif name in ("grr", "olh"):
        others = 1023 if name == "grr" else mech.g - 1
        ratio = Fraction(mech.threshold * others, SCALE - mech.threshold)
    else:
        ratio = Fraction(mech.threshold, SCALE - mech.threshold)
    assert float(ratio) == pytest.approx(math.exp(epsilon), rel=1e-9)
    assert ratio <= Fraction(math.exp(epsilon))


# -- the samplers draw from exactly these distributions -----------------------------------------


def _key(mech, payload) -> object:
    if mech.name in ("sue", "oue"):
        bits = mech.support_counts(mech.decode_many([payload]))
        return tuple(int(b) for b in bits)
    if mech.name == "ss":
        bits = mech.support_counts(mech.decode_many([payload]))
        return tuple(int(i) for i in np.flatnonzero(bits))
    return payload


def _chi_square_pvalue(mech, x: int, payloads) -> float:
    exact = distribution(mech, x)
    keys = list(exact)
    position = {key: i for i, key in enumerate(keys)}
    observed = np.zeros(len(keys))
    for payload in payloads:
        observed[position[_key(mech, payload)]] += 1
    expected = np.array([float(exact[key]) for key in keys]) * len(payloads)
    return float(stats.chisquare(observed, expected).pvalue)


SAMPLER_CASES = [("grr", 5), ("sue", 3), ("oue", 3), ("ss", 5), ("hr", 5), ("rr", 2)]


@pytest.mark.parametrize(("name", "k"), SAMPLER_CASES)
def test_vectorised_sampler_matches_the_exact_distribution(name: str, k: int) -> None:
    mech = create(name, epsilon=1.0, domain=k)
    x = 1
    batch = mech.perturb_many(np.full(60_000, x), rng=np.random.default_rng(11))
    # Fixed seed: deterministic; a correct sampler passes at this level, a wrong one fails.
    assert _chi_square_pvalue(mech, x, mech.encode_many(batch)) > 1e-4


@pytest.mark.parametrize(("name", "k"), SAMPLER_CASES)
def test_os_sampler_matches_the_exact_distribution(name: str, k: int) -> None:
    mech = create(name, epsilon=1.0, domain=k)
    x = 1
    payloads = [mech.perturb_index(x) for _ in range(12_000)]
    # OS randomness is not seeded: the chance of a false alarm is 1e-6 per case.
    assert _chi_square_pvalue(mech, x, payloads) > 1e-6


def test_seeded_sampler_is_reproducible() -> None:
    mech = create("oue", epsilon=1.0, domain=14)
    a = mech.perturb_many(np.arange(14).repeat(10), rng=np.random.default_rng(3))
    b = mech.perturb_many(np.arange(14).repeat(10), rng=np.random.default_rng(3))
    assert np.array_equal(a, b)
    assert mech.perturb("3", rng=5) == mech.perturb("3", rng=5)


def test_olh_keeps_the_bucket_with_probability_p() -> None:
    mech = create("olh", epsilon=1.0, domain=14)
    batch = mech.perturb_many(np.full(200_000, 3), rng=np.random.default_rng(2))
    a, b, y = batch.T
    kept = np.count_nonzero(((a * 3 + b) % ((1 << 31) - 1)) % mech.g == y)
    p = mech.p_star
    sd = math.sqrt(200_000 * p * (1 - p))
    assert abs(kept - 200_000 * p) < 4.5 * sd


def test_the_distribution_check_catches_an_or_bug() -> None:
    """A unary encoding that ORs the true bit with background noise leaks; the check fails it."""
    mech = create("oue", epsilon=1.0, domain=3)
    rng = np.random.default_rng(4)
    bits = rng.random((60_000, 3)) < mech.q_star
    bits[:, 1] |= rng.random(60_000) < mech.p_star  # the bug: OR instead of replace
    packed = np.packbits(bits, axis=1, bitorder="little")
    assert _chi_square_pvalue(mech, 1, mech.encode_many(packed)) < 1e-9


# -- the p= construction path never states less than it realises ------------------------------


@pytest.mark.parametrize("name", ["rr", "sue"])
def test_given_p_never_realises_more_than_the_stated_epsilon(name: str) -> None:
    """Issue 14: p = 0.6 realised 0.40546510810816433 > epsilon 0.4054651081081642."""
    rng = np.random.default_rng(14)
    ps = [0.6, 0.75, 0.9, *rng.uniform(0.5, 0.995, size=3_000).tolist()]
    for p in ps:
        mech = create(name, domain=2, p=p)
        t = mech.threshold if name == "rr" else mech.threshold_p
        ratio = Fraction(t, SCALE - t) ** (1 if name == "rr" else 2)
        assert mech.realised_epsilon <= mech.epsilon, p
        assert ratio <= Fraction(math.exp(mech.epsilon)), p
        # Stated within float rounding of the ideal ln(p/(1-p)) (x2 for sue), not loosened.
        ideal = math.log(p / (1 - p)) * (1 if name == "rr" else 2)
        assert mech.epsilon == pytest.approx(ideal, rel=1e-12)
        # The config rebuilds the same mechanism (epsilon and p agree).
        assert create(name, epsilon=mech.epsilon, domain=2, p=p).epsilon == mech.epsilon


# -- the pure-Python (one device) and NumPy (batch) samplers ----------------------------------


def _olh_key(mech, x: int, payload) -> int:
    """OLH output relative to the true bucket: 0 if kept, else (y - h(x)) mod g."""
    a, b, y = payload
    return (y - mech.bucket(a, b, x)) % mech.g


def test_os_sampler_olh_keeps_the_bucket_exactly_and_draws_uniform_seeds() -> None:
    mech = create("olh", epsilon=2.0, domain=6)  # g = 8
    x, n = 2, 16_000
    payloads = [mech.perturb_index(x) for _ in range(n)]
    p = Fraction(mech.threshold, SCALE)
    observed = np.bincount([_olh_key(mech, x, r) for r in payloads], minlength=mech.g)
    expected = np.array([float(p)] + [float((1 - p) / (mech.g - 1))] * (mech.g - 1)) * n
    assert stats.chisquare(observed, expected).pvalue > 1e-6
    # The hash seed is uniform on its range (16 equal bins each) and independent of x.
    prime = (1 << 31) - 1
    for column, low in ((0, 1), (1, 0)):
        values = np.array([r[column] for r in payloads])
        bins = np.bincount((values - low) * 16 // (prime - low), minlength=16)
        assert stats.chisquare(bins).pvalue > 1e-6


def _samples_key(mech, x: int, payloads) -> list[object]:
    if mech.name == "olh":
        return [_olh_key(mech, x, p) for p in payloads]
    return [_key(mech, p) for p in payloads]


def _two_sample_pvalue(mech, x: int, first, second) -> float:
    """Chi-square test that two samples of reports come from one distribution."""
    a, b = _samples_key(mech, x, first), _samples_key(mech, x, second)
    keys = sorted(set(a) | set(b), key=repr)
    position = {key: i for i, key in enumerate(keys)}
    table = np.zeros((2, len(keys)))
    for row, sample in enumerate((a, b)):
        for key in sample:
            table[row, position[key]] += 1
    return float(stats.chi2_contingency(table).pvalue)


AGREE_CASES = [
    ("rr", 2),
    ("grr", 5),
    ("sue", 3),
    ("oue", 3),
    ("ss", 5),
    ("hr", 5),
    ("olh", 6),
    ("rappor", 3),
]


@pytest.mark.parametrize(("name", "k"), AGREE_CASES)
def test_pure_python_and_numpy_samplers_agree_in_distribution(name: str, k: int) -> None:
    mech = create(name, epsilon=1.0, domain=k)
    x, n = 1, 12_000
    pure = [mech.perturb_index(x) for _ in range(n)]  # OS randomness, no NumPy
    vectorised = mech.encode_many(mech.perturb_many(np.full(n, x), rng=np.random.default_rng(8)))
    # OS randomness is not seeded: a false alarm has probability 1e-6 per case.
    assert _two_sample_pvalue(mech, x, pure, vectorised) > 1e-6


@pytest.mark.parametrize(("name", "k"), SAMPLER_CASES)
def test_seeded_one_device_sampler_matches_the_exact_distribution(name: str, k: int) -> None:
    """``perturb`` with a seed runs the same pure-Python code as on a device, seeded."""
    mech = create(name, epsilon=1.0, domain=k)
    gen = np.random.default_rng(21)
    payloads = [mech.perturb_index(1, rng=gen) for _ in range(12_000)]
    assert _chi_square_pvalue(mech, 1, payloads) > 1e-4


def test_the_two_sample_check_catches_a_slightly_wrong_sampler() -> None:
    """A GRR keeping the true value 6 points too often is told apart from the right one
    (about 9 standard deviations at this sample size, so the check has the power it needs)."""
    mech = create("grr", epsilon=1.0, domain=5)
    wrong = create("grr", epsilon=1.0, domain=5)
    wrong.threshold = int(mech.threshold * 1.15)  # p 0.405 -> 0.466
    right = [mech.perturb_index(1) for _ in range(12_000)]
    biased = [wrong.perturb_index(1) for _ in range(12_000)]
    assert _two_sample_pvalue(mech, 1, right, biased) < 1e-6


def test_branch_free_coins_equal_the_comparisons_they_replace() -> None:
    """``coin``/``at_least`` (used so timing cannot tell a coin) are exact at every edge."""
    from client_sdk.mechanisms.randomness import (
        at_least,
        coin,
        coins_below,
        lane_coin,
        lane_offsets,
        pack_coins,
        select,
    )

    rng = np.random.default_rng(9)
    edges = [0, 1, 2, (1 << 30) - 1, 1 << 30, (1 << 60) - 1, 1 << 63, SCALE - 2, SCALE - 1]
    values = edges + [int(v) for v in rng.integers(0, SCALE, size=300, dtype=np.uint64)]
    thresholds = [1, 2, 1 << 32, SCALE // 2, SCALE - 1] + values[-20:]
    for u in values:
        raw = u.to_bytes(8, "little")
        for t in thresholds:
            if 0 < t < SCALE:
                assert coin(raw, 0, t) == (u < t)
            assert at_least(u, t) == (u >= t)
    assert select(1, 7, 9) == 7 and select(0, 7, 9) == 9
    lanes = bytearray(b"".join(v.to_bytes(8, "little") + b"\x01" for v in values) + b"\x01")
    for t in thresholds:
        if 0 < t < SCALE:
            coins = coins_below(lanes, len(values), lane_offsets(len(values), t))
            assert list(coins) == [int(u < t) for u in values]
            assert [lane_coin(lanes, i, t) for i in range(len(values))] == list(coins)
    bits = [int(u < SCALE // 2) for u in values[:13]]
    assert int.from_bytes(pack_coins(bytes(bits)), "little") == sum(
        b << i for i, b in enumerate(bits)
    )
    assert len(pack_coins(bytes(bits))) == 2


@pytest.mark.parametrize(("name", "k"), CASES)
def test_the_mechanisms_own_distribution_agrees_with_this_one(name: str, k: int) -> None:
    """``Mechanism.output_distribution`` (what the registry-generic test enumerates) against the
    independent table above: the same probabilities for GRR/UE/HR, the same worst ratio for all."""
    mech = create(name, epsilon=1.0, domain=k)
    mine = [mech.output_distribution(x) for x in range(k)]
    worst = max(a[y] / b[y] for a in mine for b in mine if a is not b for y in a)
    assert worst == max_ratio(mech)
    if name in ("rr", "grr", "hr", "sue", "oue"):
        for x in range(k):
            assert mine[x] == distribution(mech, x)
