"""The mechanism core of issue 15: one registry, declared kinds and capabilities, one state type.

Every test iterates ``client_sdk.mechanisms.REGISTRY``: a mechanism added there is covered
without editing this file.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import aggregator
from aggregator.numeric import DistributionEstimate, MeanEstimate
from aggregator.postprocess import is_exact_channel
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import (
    KINDS,
    MECHANISMS,
    NUMERIC_MECHANISMS,
    OPEN_MECHANISMS,
    REGISTRY,
    AggregateState,
    NumericMechanism,
    Tally,
    create,
    from_config,
    kind_of,
)
from client_sdk.mechanisms.numeric import NumericTally

LABELS = ["a", "b", "c", "d", "e"]
BOUNDS = (-5.0, 20.0)
FREQUENCY = sorted(MECHANISMS)
NUMERIC = sorted(NUMERIC_MECHANISMS)


def build(name: str, epsilon: float = 1.0):
    if kind_of(name) == "frequency":
        labels = LABELS[: min(len(LABELS), MECHANISMS[name].max_k)]
        return create(name, epsilon=epsilon, domain=labels)
    if kind_of(name) == "open_domain":
        return create(name, epsilon=epsilon, max_length=4, width=64, depth=4)
    return create(name, epsilon=epsilon, bounds=BOUNDS)


def inputs(mech, n: int, seed: int) -> np.ndarray:
    gen = np.random.default_rng(seed)
    if mech.kind == "frequency":
        return gen.integers(0, mech.k, n)
    if mech.kind == "open_domain":
        return np.array(LABELS, dtype=object)[gen.integers(0, len(LABELS), n)]
    return gen.uniform(BOUNDS[0] - 3, BOUNDS[1] + 3, n)  # some outside: clipped


def test_the_registry_holds_every_name_once_with_its_kind() -> None:
    assert set(REGISTRY) == set(MECHANISMS) | set(NUMERIC_MECHANISMS) | set(OPEN_MECHANISMS)
    assert not set(MECHANISMS) & set(NUMERIC_MECHANISMS)
    assert not (set(MECHANISMS) | set(NUMERIC_MECHANISMS)) & set(OPEN_MECHANISMS)
    for name, cls in REGISTRY.items():
        assert cls.kind in KINDS, name
        assert kind_of(name) == cls.kind
    assert {REGISTRY[n].kind for n in NUMERIC} == {"mean", "distribution"}
    assert kind_of("sue-book") == "frequency"
    with pytest.raises(InvalidParameter, match="unknown mechanism"):
        kind_of("nope")


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_capabilities_are_declared_by_every_mechanism(name: str) -> None:
    mech = build(name)
    assert isinstance(mech.postprocessable, bool)
    assert isinstance(mech.exact_channel, bool)
    assert isinstance(mech.memoized, bool)
    assert mech.postprocessable == (mech.kind == "frequency")
    if mech.memoized:
        assert mech.permanent_epsilon is not None
        assert mech.permanent_epsilon >= mech.realised_epsilon
    else:
        assert mech.permanent_epsilon is None
    assert is_exact_channel(mech) if mech.exact_channel else not mech.exact_channel
    size = mech.exact_support_size
    assert size is None or (mech.kind == "frequency" and 1 <= size < mech.k)


def test_capability_values_of_the_special_cases() -> None:
    assert create("grr", epsilon=1, domain=LABELS).exact_channel
    assert create("rr", epsilon=1, domain=["y", "n"]).exact_support_size == 1
    ss = create("ss", epsilon=1, domain=LABELS)
    assert ss.exact_support_size == ss.d and not ss.exact_channel
    assert create("oue", epsilon=1, domain=LABELS).exact_support_size is None
    assert create("rappor", epsilon=1, domain=LABELS).memoized
    ap = create("alpha_point", epsilon=1, bounds=BOUNDS, segments=8)
    assert ap.memoized and ap.permanent_epsilon == ap.realised_epsilon
    assert ap.longitudinal_epsilon(100) == pytest.approx(9 * ap.realised_epsilon)
    assert len(set(ap.rounded_labels())) == 9


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_config_round_trips_through_the_one_from_config(name: str) -> None:
    mech = build(name)
    config = json.loads(json.dumps(mech.config()))
    again = from_config(config)
    assert again == mech and type(again) is type(mech)
    assert ("bounds" in config) == (mech.kind in ("mean", "distribution"))
    assert ("max_length" in config) == (mech.kind == "open_domain")


def test_create_says_which_argument_a_mechanism_needs() -> None:
    with pytest.raises(InvalidParameter, match="numeric mechanism: give bounds"):
        create("piecewise", epsilon=1.0, domain=LABELS)
    with pytest.raises(InvalidParameter, match="give domain"):
        create("oue", epsilon=1.0, bounds=BOUNDS)
    with pytest.raises(InvalidParameter, match="not both"):
        create("auto", epsilon=1.0, domain=LABELS, bounds=BOUNDS)
    with pytest.raises(InvalidParameter, match="needs epsilon"):
        create("duchi", bounds=BOUNDS)
    with pytest.raises(InvalidParameter, match="needs domain"):
        create("oue", epsilon=1.0)  # type: ignore[call-overload]
    with pytest.raises(InvalidParameter):
        create("auto", epsilon=1.0, bounds=(3, 3))
    assert isinstance(create("auto", epsilon=1.0, bounds=BOUNDS), NumericMechanism)
    assert create("auto", epsilon=1.0, domain=LABELS).kind == "frequency"


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_tally_is_an_exact_mergeable_aggregate_state(name: str) -> None:
    mech = build(name, epsilon=2.0)
    a = mech.tally(mech.perturb_many(inputs(mech, 300, 1), rng=1))
    b = mech.tally(mech.encode_many(mech.perturb_many(inputs(mech, 200, 2), rng=2)))
    for t in (a, b):
        assert isinstance(t, AggregateState)
        assert all(type(v) is int for v in t.vector())
    assert a + b == b + a
    assert (a + b).n == 500
    assert [x + y for x, y in zip(a.vector(), b.vector(), strict=True)] == (a + b).vector()
    assert mech.empty_tally() + a == a
    assert mech.tally_from(a.n, a.vector()) == a
    again = type(a).from_dict(json.loads(json.dumps(a.to_dict())))
    assert again == a
    with pytest.raises(InvalidParameter):
        mech.tally_from(a.n, [*a.vector(), 0])


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_aggregator_estimate_returns_the_mechanism_s_own_result(name: str) -> None:
    mech = build(name, epsilon=2.0)
    tally = mech.tally(mech.perturb_many(inputs(mech, 2000, 3), rng=3))
    if mech.kind == "open_domain":
        est = aggregator.estimate(mech, tally, candidates=LABELS)
        assert isinstance(est, aggregator.CandidateEstimates) and len(est.counts) == len(LABELS)
        with pytest.raises(aggregator.NotEnoughReports):
            aggregator.estimate(mech, mech.empty_tally(), candidates=LABELS)
        return
    est = aggregator.estimate(mech, tally)
    if mech.kind == "frequency":
        assert isinstance(tally, Tally)
        assert isinstance(est, aggregator.Estimate) and est.counts.shape == (mech.k,)
    elif mech.kind == "mean":
        assert isinstance(tally, NumericTally)
        assert isinstance(est, MeanEstimate)
        low, high = est.ci(0.95)
        assert low < est.mean < high and est.std_error > 0
    else:
        assert isinstance(est, DistributionEstimate)
        assert est.frequencies.sum() == pytest.approx(1.0)
        assert est.edges[0] == BOUNDS[0] and est.edges[-1] == BOUNDS[1]
        assert BOUNDS[0] <= est.quantile(0.5).value <= BOUNDS[1]
        assert BOUNDS[0] <= est.mean <= BOUNDS[1]
    with pytest.raises(aggregator.NotEnoughReports):
        aggregator.estimate(mech, mech.empty_tally())


def test_estimate_keeps_its_frequency_signature() -> None:
    mech = create("oue", epsilon=1.0, domain=LABELS)
    tally = mech.tally(mech.perturb_many(np.zeros(50, dtype=np.int64), rng=0))
    with pytest.raises(aggregator.NotEnoughReports):
        aggregator.estimate(mech, tally, min_reports=51)
    with pytest.raises(InvalidParameter, match="only to numeric"):
        aggregator.estimate(mech, tally, bootstrap=3)
    numeric = create("duchi", epsilon=1.0, bounds=BOUNDS)
    with pytest.raises(InvalidParameter):
        aggregator.estimate(numeric, tally)  # type: ignore[call-overload]
