"""``auto`` with declared pairs (docs/MECHANISMS.md §22, "auto with pairs"): the criterion counts
the pairs' joint error and each attribute's error after combining it with its pairs' margins,
and SMP's optimal weights follow it (every component keeps at least ``MIN_SHARE``)."""

from __future__ import annotations

import math

import pytest

from client_sdk.mechanisms import create as create_oracle
from client_sdk.mechanisms.multi import (
    MultiMechanism,
    compare_protocols,
    from_config,
    optimal_weights,
    report_variance,
    sampling_variance,
)
from client_sdk.mechanisms.multi import create as create_multi
from client_sdk.mechanisms.multi.mechanism import MIN_SHARE

ADULT_PAIRS = {
    "occupation": [f"o{i}" for i in range(15)],
    "sex": ["F", "M"],
    "education": [f"e{i}" for i in range(16)],
    "income": ["<=50K", ">50K"],
}
PAIRS = [("occupation", "sex"), ("education", "income")]


def _by_hand(mech: MultiMechanism) -> float:
    """The criterion written out for the ADULT_PAIRS layout (attributes 0..3, pairs 4 and 5)."""
    pis = mech.sampling_probabilities
    smp = mech.name == "smp"
    v = [report_variance(m) for m in mech.mechanisms]
    s = [sampling_variance(m, 2) if smp else 0.0 for m in mech.mechanisms]
    comp = [v[j] / pis[j] + s[j] * (1 / pis[j] - 1) for j in range(6)]
    k = [15, 2, 16, 2]
    pair_of = {0: (4, 1), 1: (4, 0), 2: (5, 3), 3: (5, 2)}  # attribute -> (pair, other)
    questions = []
    for a in range(4):
        j, other = pair_of[a]
        margin = k[other] * v[j] / pis[j] + s[a] * (1 / pis[j] - 1)
        questions.append(1 / (1 / comp[a] + 1 / margin))
    return (sum(questions) + comp[4] + comp[5]) / 6


@pytest.mark.parametrize("protocol", ["spl", "smp"])
def test_criterion_with_pairs_combines_the_margins(protocol: str) -> None:
    for epsilon in (1.0, 8.0):
        mech = create_multi(protocol, epsilon=epsilon, attributes=ADULT_PAIRS, pairs=PAIRS)
        assert mech.variance_criterion() == pytest.approx(_by_hand(mech), rel=1e-12)
    # Without pairs: the mean over the components, as before.
    plain = create_multi("smp", epsilon=2.0, attributes=ADULT_PAIRS)
    per = [
        report_variance(m) / p + sampling_variance(m, 2) * (1 / p - 1)
        for m, p in zip(plain.mechanisms, plain.sampling_probabilities, strict=True)
    ]
    assert plain.variance_criterion() == pytest.approx(sum(per) / len(per), rel=1e-12)


def test_auto_beats_two_campaigns_at_half_epsilon_on_every_pair_cell() -> None:
    """The two-campaign baseline (each pair's product domain through its own best oracle at
    epsilon/2) against auto's pair component, per-report cell variance at uniform data:
    ``V/pi + s (1/pi - 1)`` against ``V(epsilon/2)``. Weights that ignore the pairs
    (:func:`optimal_weights`) lose at epsilon 8."""
    for epsilon in (0.5, 1.0, 2.0, 4.0, 8.0):
        mech = compare_protocols(epsilon=epsilon, attributes=ADULT_PAIRS, pairs=PAIRS).chosen
        pis = mech.sampling_probabilities
        for position, (a, b) in enumerate(PAIRS):
            j = len(ADULT_PAIRS) + position
            sub = mech.mechanisms[j]
            s = sampling_variance(sub, 2) if mech.name == "smp" else 0.0
            ours = report_variance(sub) / pis[j] + s * (1 / pis[j] - 1)
            product = [f"{x}|{y}" for x in ADULT_PAIRS[a] for y in ADULT_PAIRS[b]]
            single = create_oracle("auto", epsilon=epsilon / 2, domain=product)
            assert ours < report_variance(single), (epsilon, (a, b), ours)
    old = MultiMechanism("smp", epsilon=8.0, attributes=ADULT_PAIRS, pairs=PAIRS, weights=[1] * 6)
    share = optimal_weights(old.mechanisms)
    pi = share[4] / sum(share)
    sub = old.mechanisms[4]
    before = report_variance(sub) / pi + sampling_variance(sub, 2) * (1 / pi - 1)
    single = create_oracle("auto", epsilon=4.0, domain=[str(i) for i in range(30)])
    assert before > report_variance(single)


def test_pair_weights_are_deterministic_floored_and_locally_optimal() -> None:
    mech = create_multi("auto", epsilon=8.0, attributes=ADULT_PAIRS, pairs=PAIRS)
    again = create_multi("auto", epsilon=8.0, attributes=ADULT_PAIRS, pairs=PAIRS)
    assert mech.name == "smp" and mech.weights is not None and mech.weights == again.weights
    assert from_config(mech.config()) == mech
    total = sum(mech.weights)
    assert min(mech.weights) / total >= MIN_SHARE * (1 - 1e-3)
    assert (mech.weights[4] + mech.weights[5]) / total > 0.9  # the pairs carry the attributes
    best = mech.variance_criterion()
    for j in range(mech.d):
        for factor in (0.9, 1.1):
            moved = list(mech.weights)
            moved[j] = max(round(total * MIN_SHARE), round(moved[j] * factor))
            other = mech.criterion_at([w / sum(moved) for w in moved])
            assert other >= best * (1 - 1e-9), (j, factor)
    # No categorical pair: the closed form, unchanged.
    plain = create_multi("smp", epsilon=8.0, attributes=ADULT_PAIRS, weights="optimal")
    assert plain.weights == optimal_weights(plain.mechanisms)
    assert math.isclose(sum(plain.sampling_probabilities), 1.0)
