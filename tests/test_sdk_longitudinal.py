"""The memoised two-stage mechanism ``rappor``: exact epsilons, estimator, memoisation."""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from aggregator import estimate
from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms import RapporUnary, Tally, create, from_config
from client_sdk.mechanisms.randomness import SCALE

S = SCALE


def secret_of(i: int) -> bytes:
    return hashlib.sha256(f"device-{i}".encode()).digest()


def effective_p(mech: RapporUnary, ts: int | None = None) -> Fraction:
    t1 = mech.threshold_permanent
    ts = mech.threshold_instant if ts is None else ts
    return Fraction(t1 * ts + (S - t1) * (S - ts), S * S)


@pytest.mark.parametrize(("epsilon", "permanent"), [(0.5, None), (1.0, 4.0), (2.0, 2.5), (4, 16)])
def test_epsilons_are_exact_and_tight(epsilon: float, permanent: float | None) -> None:
    mech = RapporUnary(epsilon=epsilon, domain=5, epsilon_permanent=permanent)
    eps_perm = 4 * epsilon if permanent is None else permanent
    t1, ts = mech.threshold_permanent, mech.threshold_instant
    # Per report: the effective channel p* = t1 s + (1-t1)(1-s), q* = 1 - p*; two bits differ.
    p = effective_p(mech)
    q = 1 - p
    assert mech.p_star == float(p) and mech.q_star == float(q)
    ratio = (p * (1 - q)) / ((1 - p) * q)
    assert ratio <= Fraction(math.exp(epsilon))
    assert mech.realised_epsilon == pytest.approx(math.log(ratio), rel=1e-12)
    assert epsilon * (1 - 1e-12) < mech.realised_epsilon <= epsilon
    # Tight: one more unit of the instantaneous threshold breaks the bound.
    p_next = effective_p(mech, ts + 1)
    assert (p_next / (1 - p_next)) ** 2 > Fraction(math.exp(epsilon)) * (1 - Fraction(1, 1 << 50))
    # Longitudinal: (t1 / (1 - t1))^2.
    perm_ratio = Fraction(t1, S - t1) ** 2
    assert perm_ratio <= Fraction(math.exp(eps_perm))
    assert mech.permanent_epsilon == pytest.approx(math.log(perm_ratio), rel=1e-12)
    assert eps_perm * (1 - 1e-6) < mech.permanent_epsilon <= eps_perm
    assert Fraction(t1 + 1, S - t1 - 1) ** 2 > Fraction(math.exp(eps_perm)) * (
        1 - Fraction(1, 1 << 50)
    )
    assert mech.permanent_epsilon > mech.realised_epsilon
    assert mech.irr_keep > 0.5 and mech.prr_keep > 0.5


def test_config_round_trip_and_validation() -> None:
    mech = create("rappor", epsilon=1.0, domain=["a", "b", "c"])
    assert mech.config()["params"] == {"epsilon_permanent": 4.0}
    assert from_config(mech.config()) == mech
    with pytest.raises(InvalidParameter, match="epsilon_permanent must be greater than epsilon"):
        RapporUnary(epsilon=1.0, domain=3, epsilon_permanent=1.0)
    with pytest.raises(InvalidParameter, match="epsilon_permanent must be a finite number"):
        RapporUnary(epsilon=1.0, domain=3, epsilon_permanent=float("nan"))
    with pytest.raises(InvalidParameter, match="at least 16 random bytes"):
        mech.perturb_memoized("a", b"short")
    with pytest.raises(InvalidReport):
        mech.check_payload("////")


def test_estimator_is_unbiased_with_the_formula_variance() -> None:
    """Seeded repetitions: mean within 4 standard errors, variance in a 99.9% chi-square band."""
    mech = RapporUnary(epsilon=1.0, domain=4)
    counts = np.array([1200, 500, 300, 0])
    truth = np.repeat(np.arange(4), counts)
    n, reps = truth.size, 300
    gen = np.random.default_rng(20261122)
    estimates = np.empty((reps, 4))
    for r in range(reps):
        batch = mech.perturb_many(truth, rng=gen)
        estimates[r] = estimate(mech, mech.tally(batch)).counts
    variance = mech.count_variance(n, counts)
    assert mech.beta == pytest.approx(0.0, abs=1e-12)  # p* + q* = 1
    mean_error = estimates.mean(axis=0) - counts
    assert np.all(np.abs(mean_error) < 4 * np.sqrt(variance / reps))
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1)
    scaled = (reps - 1) * estimates.var(axis=0, ddof=1) / variance
    assert np.all((lo < scaled) & (scaled < hi)), scaled


def test_memoised_reports_of_many_devices_match_p_star_and_q_star() -> None:
    """Devices with their own secrets: the bit of the held value is set w.p. p*, others q*."""
    mech = RapporUnary(epsilon=1.0, domain=["a", "b", "c"])
    n = 6000
    gen = np.random.default_rng(7)
    payloads = [mech.perturb_memoized("a", secret_of(i), campaign="c", rng=gen) for i in range(n)]
    tally = mech.tally(payloads)
    for index, expected in ((0, mech.p_star), (1, mech.q_star), (2, mech.q_star)):
        sd = math.sqrt(n * expected * (1 - expected))
        assert abs(tally.support[index] - n * expected) < 4.5 * sd


def test_fresh_device_perturb_matches_the_effective_channel() -> None:
    mech = RapporUnary(epsilon=2.0, domain=3)
    n = 4000
    tally = Tally(n, mech.support_counts(mech.decode_many([mech.perturb("1") for _ in range(n)])))
    for index, expected in ((1, mech.p_star), (0, mech.q_star)):
        sd = math.sqrt(n * expected * (1 - expected))
        assert abs(tally.support[index] - n * expected) < 4.5 * sd
    a = mech.perturb_many(np.arange(3).repeat(10), rng=5)
    b = mech.perturb_many(np.arange(3).repeat(10), rng=5)
    assert np.array_equal(a, b)


def test_permanent_bits_are_a_keyed_function() -> None:
    mech = RapporUnary(epsilon=1.0, domain=64)
    bits = mech.permanent_bits("5", secret_of(1), campaign="c")
    assert bits == mech.permanent_bits("5", secret_of(1), campaign="c")
    others = {
        mech.permanent_bits("5", secret_of(2), campaign="c"),
        mech.permanent_bits("5", secret_of(1), campaign="d"),
        mech.permanent_bits("6", secret_of(1), campaign="c"),
    }
    assert bits not in others
    # Each permanent bit equals the true bit w.p. prr_keep, over many secrets.
    n = 400
    agree = sum(
        bin(~(mech.permanent_bits("5", secret_of(i), campaign="c") ^ (1 << 5)) & (2**64 - 1)).count(
            "1"
        )
        for i in range(n)
    )
    expected = n * 64 * mech.prr_keep
    assert abs(agree - expected) < 4.5 * math.sqrt(n * 64 * mech.prr_keep * (1 - mech.prr_keep))


def test_averaging_one_device_reveals_its_permanent_bits_not_its_value() -> None:
    mech = RapporUnary(epsilon=1.0, domain=16, epsilon_permanent=2.0)
    value, index = "3", 3
    onehot = 1 << index
    # A device whose permanent bits differ from its true one-hot vector in several places.
    secret = next(
        secret_of(i)
        for i in range(1000)
        if bin(mech.permanent_bits(value, secret_of(i), campaign="c") ^ onehot).count("1") >= 3
    )
    permanent = mech.permanent_bits(value, secret, campaign="c")
    m = 4000
    gen = np.random.default_rng(11)
    batch = mech.decode_many(
        [mech.perturb_memoized(value, secret, campaign="c", rng=gen) for _ in range(m)]
    )
    means = mech.support_counts(batch) / m
    s = mech.irr_keep
    tolerance = 5 * math.sqrt(s * (1 - s) / m)
    for i in range(16):
        toward_permanent = s if permanent >> i & 1 else 1 - s
        assert abs(means[i] - toward_permanent) < tolerance
    # Where the permanent bit differs from the truth, the average points away from the truth.
    differing = [i for i in range(16) if (permanent ^ onehot) >> i & 1]
    for i in differing:
        toward_truth = s if onehot >> i & 1 else 1 - s
        assert abs(means[i] - toward_truth) > 10 * tolerance


OCCUPATIONS = [
    "Tech-support", "Craft-repair", "Other-service", "Exec-managerial", "Prof-specialty",
    "Handlers-cleaners", "Machine-op-inspct", "Adm-clerical", "Farming-fishing",
    "Transport-moving", "Priv-house-serv", "Sales", "Protective-serv", "Armed-Forces",
]  # fmt: skip


def _bit(bits: int, i: int) -> int:
    return bits >> i & 1


def test_recreating_a_campaign_shows_the_collector_nothing_new() -> None:
    """Issue 14 §1, the collector's attack: recreate the campaign with one label inserted in
    front and XOR the two permanent answers position by position. Before the fix the flips
    cancelled and the XOR was exactly the value's two positions for 1000 of 1000 secrets."""
    assert OCCUPATIONS.index("Sales") == 11
    first = create("rappor", epsilon=0.25, epsilon_permanent=0.5, domain=OCCUPATIONS)
    configs = [
        create("rappor", epsilon=0.25, epsilon_permanent=0.5, domain=["Unknown", *OCCUPATIONS]),
        create("rappor", epsilon=0.25, epsilon_permanent=0.5, domain=OCCUPATIONS[::-1]),
        create("rappor", epsilon=0.25, epsilon_permanent=0.5, domain=OCCUPATIONS[8:]),
        create("rappor", epsilon=0.4, epsilon_permanent=0.5, domain=OCCUPATIONS),  # new epsilon
    ]
    n, hits = 300, 0
    for i in range(n):
        secret = secret_of(i)
        old = first.permanent_bits("Sales", secret, campaign="occ")
        new = configs[0].permanent_bits("Sales", secret, campaign="occ")
        hits += (old ^ (new & (2**14 - 1))) == (1 << 11) | (1 << 12)
        # Aligned by label, every config with the same permanent threshold shows the same
        # permanent answer: the collector's union of views is one release, no new information.
        for config in configs:
            if config.threshold_permanent != first.threshold_permanent:
                continue
            bits = config.permanent_bits("Sales", secret, campaign="occ")
            for j, label in enumerate(config.domain):
                if label in first.domain:
                    assert _bit(bits, j) == _bit(old, first.domain.index(label))
    # The XOR is now that pattern only when no permanent bit of the 15 labels flipped (or all
    # did): t1^15 + (1-t1)^15 ~ 1.8e-4 per secret, so more than 2 hits in 300 has probability
    # ~1e-4. Before the fix: 300 of 300.
    assert hits <= 2


def test_a_changed_permanent_epsilon_is_a_new_release() -> None:
    """Another permanent threshold gives independent answers (coupled ones would leak), and a
    different ``release_key`` so the ledger charges it; the same threshold shares the key."""
    a = create("rappor", epsilon=0.25, epsilon_permanent=0.5, domain=OCCUPATIONS)
    b = create("rappor", epsilon=0.25, epsilon_permanent=1.0, domain=OCCUPATIONS)
    same = create("rappor", epsilon=0.4, epsilon_permanent=0.5, domain=OCCUPATIONS[::-1])
    secret = secret_of(1)
    assert a.release_key(secret) == same.release_key(secret)
    assert a.release_key(secret) != b.release_key(secret)
    assert a.release_key(secret) != a.release_key(secret_of(2))
    assert len(a.release_key(secret)) == 32 and secret.hex()[:32] not in a.release_key(secret)
    # Independence across thresholds: over many secrets the answers of a label agree as often
    # as two independent bits with those keep probabilities would.
    n = 2000
    agree = sum(
        _bit(a.permanent_bits("Sales", secret_of(i), campaign="c"), 0)
        == _bit(b.permanent_bits("Sales", secret_of(i), campaign="c"), 0)
        for i in range(n)
    )
    pa, pb = 1 - a.prr_keep, 1 - b.prr_keep  # flip probabilities of a 0 bit
    p = pa * pb + (1 - pa) * (1 - pb)
    assert abs(agree - n * p) < 5 * math.sqrt(n * p * (1 - p))
