"""Several attributes per device (docs/MECHANISMS.md §22): exact privacy of the whole report,
the wire form, exact mergeable tallies, unbiasedness and the variance formulas, ``auto``."""

from __future__ import annotations

import math
import subprocess
import sys
import textwrap
from fractions import Fraction

import numpy as np
import pytest

from aggregator import estimate
from aggregator.estimate import Estimate
from aggregator.multi import MultiEstimate
from aggregator.numeric import MeanEstimate
from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms import MECHANISMS, REGISTRY, create, kind_of
from client_sdk.mechanisms.multi import (
    MultiMechanism,
    MultiTally,
    compare_protocols,
    from_config,
)
from client_sdk.mechanisms.multi import create as create_multi
from client_sdk.mechanisms.state import KINDS, AggregateState
from tests.conftest import REPO

SMALL = {"colour": ["red", "green", "blue"], "size": ["S", "L"]}
MIXED = {"colour": ["red", "green", "blue"], "size": ["S", "L"], "age": {"bounds": [17, 90]}}
ADULTISH = {
    "occupation": [f"o{i}" for i in range(14)],
    "education": [f"e{i}" for i in range(16)],
    "marital": [f"m{i}" for i in range(7)],
    "race": [f"r{i}" for i in range(5)],
    "sex": ["F", "M"],
}


def worst_log_ratio(mech: MultiMechanism) -> float:
    """ln of the largest P[y|x]/P[y|x'] over all inputs and outputs, computed exactly."""
    dists = [mech.output_distribution(x) for x in mech.input_space()]
    keys = set().union(*dists)
    worst = Fraction(1)
    for y in keys:
        probs = [d.get(y, Fraction(0)) for d in dists]
        hi, lo = max(probs), min(probs)
        assert lo > 0, "an output possible for one input must be possible for all"
        worst = max(worst, hi / lo)
    return math.log(worst.numerator) - math.log(worst.denominator)


# -- exact privacy: the whole report ---------------------------------------------------------


@pytest.mark.parametrize("protocol", ["spl", "smp", "rsfd"])
@pytest.mark.parametrize("oracle", ["grr", "oue", "auto"])
@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_whole_report_satisfies_epsilon_exactly(protocol: str, oracle: str, epsilon: float) -> None:
    mech = create_multi(protocol, epsilon=epsilon, attributes=SMALL, oracle=oracle)
    for x in mech.input_space():
        dist = mech.output_distribution(x)
        assert sum(dist.values()) == 1
    worst = worst_log_ratio(mech)
    assert worst <= mech.realised_epsilon + 1e-12
    assert mech.realised_epsilon <= epsilon
    # the bound is attained: the realised epsilon is the whole report's, not a loose sum
    assert worst == pytest.approx(mech.realised_epsilon, rel=1e-9)


def test_numeric_attribute_in_whole_report_privacy() -> None:
    attrs = {"colour": ["red", "green"], "x": {"bounds": [0, 1], "grid": 2}}
    for protocol in ("spl", "smp"):
        mech = create_multi(protocol, epsilon=1.0, attributes=attrs, oracle="grr")
        assert worst_log_ratio(mech) <= mech.realised_epsilon + 1e-12 <= 1.0 + 1e-12


def test_rsfd_gets_no_amplification_for_inputs_differing_everywhere() -> None:
    """With the paper's eps' = ln(d(e^eps - 1) + 1) per attribute the whole report would leak
    eps', not eps: inputs differing in every attribute reach the single mechanism's ratio."""
    eps, d = 1.0, 2
    amplified = math.log(d * (math.exp(eps) - 1) + 1)
    paper = create_multi("rsfd", epsilon=amplified, attributes=SMALL, oracle="grr")
    assert worst_log_ratio(paper) == pytest.approx(amplified, rel=1e-9)
    assert worst_log_ratio(paper) > eps


def test_smp_draws_the_attribute_uniformly_from_the_os() -> None:
    mech = create_multi("smp", epsilon=1.0, attributes=ADULTISH, oracle="grr")
    record = {a: mech.attributes[i].labels[0] for i, a in enumerate(mech.names)}  # type: ignore[index]
    n = 5000
    counts = np.bincount([mech.perturb(record)[0] for _ in range(n)], minlength=mech.d)
    expected = n / mech.d
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 30.0  # chi-square, 4 degrees of freedom: P[> 30] ~ 5e-6


# -- registry and kinds ----------------------------------------------------------------------


def test_registry_creates_multi_without_changing_names() -> None:
    assert not {"spl", "smp", "rsfd"} & set(MECHANISMS)
    assert not {"spl", "smp", "rsfd"} & set(REGISTRY)
    mech = create("smp", epsilon=1.0, attributes=SMALL, pairs=[("colour", "size")])
    assert isinstance(mech, MultiMechanism) and mech.kind == "multi" and mech.kind in KINDS
    assert mech.pairs == (("colour", "size"),)
    assert kind_of("spl") == kind_of("smp") == kind_of("rsfd") == "multi"
    assert kind_of("oue") == "frequency"
    with pytest.raises(InvalidParameter):
        create("smp", epsilon=1.0, attributes=SMALL, domain=["a", "b"])
    with pytest.raises(InvalidParameter):
        create("oue", epsilon=1.0, domain=["a", "b"], pairs=[("a", "b")])
    with pytest.raises(InvalidParameter):
        create("rsfd", epsilon=1.0, attributes=MIXED)
    with pytest.raises(InvalidParameter):
        create("smp", epsilon=1.0, attributes=SMALL, pairs=[("colour", "colour")])
    with pytest.raises(InvalidParameter):
        create("smp", epsilon=1.0, attributes={"only": ["a", "b"]})
    with pytest.raises(InvalidParameter):
        create("nope", epsilon=1.0, attributes=SMALL)


def test_config_round_trip() -> None:
    for name in ("spl", "smp", "rsfd"):
        mech = create_multi(name, epsilon=1.5, attributes=ADULTISH)
        assert from_config(mech.config()) == mech
    mixed = create_multi("smp", epsilon=1.0, attributes=MIXED)
    assert from_config(mixed.config()) == mixed


@pytest.mark.parametrize("epsilon", [0.5, 1.0, 2.0, 4.0, 8.0])
def test_auto_picks_smallest_criterion(epsilon: float) -> None:
    choice = compare_protocols(epsilon=epsilon, attributes=ADULTISH)
    values = {k: v for k, v in choice.criteria.items() if v is not None}
    assert choice.chosen.variance_criterion() == pytest.approx(min(values.values()))
    assert create_multi("auto", epsilon=epsilon, attributes=ADULTISH) == choice.chosen
    assert choice.chosen.name in choice.reason
    assert compare_protocols(epsilon=epsilon, attributes=MIXED).criteria["rsfd"] is None


# -- wire form -------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["spl", "smp", "rsfd"])
def test_wire_round_trip_and_strict_parser(protocol: str) -> None:
    attrs = SMALL if protocol == "rsfd" else MIXED
    mech = create_multi(protocol, epsilon=1.0, attributes=attrs, oracle="oue")
    record = {"colour": "green", "size": "L", "age": 40}
    if protocol == "rsfd":
        record.pop("age")
    one = mech.perturb(record)
    assert mech.check_payload(one) == one
    cols = {"colour": ["red", "blue", "green"] * 20, "size": ["S", "L", "S"] * 20}
    if protocol != "rsfd":
        cols["age"] = [20.0, 50.5, 89.0] * 20
    batch = mech.perturb_many(cols, rng=3)
    payloads = mech.encode_many(batch)
    assert len(payloads) == 60
    again = mech.decode_many(payloads)
    assert mech.encode_many(again) == payloads
    assert mech.tally(again) == mech.tally(batch) == mech.tally(payloads)
    bad = [*payloads[:5], "nope", *payloads[5:]]
    with pytest.raises(InvalidReport) as info:
        mech.decode_many(bad)
    assert info.value.index == 5
    for junk in ([], [True, 0], [0] * 7, {"a": 1}, [payloads[0][0]]):
        with pytest.raises(InvalidReport):
            mech.check_payload(junk)
    if protocol == "smp":
        with pytest.raises(InvalidReport):
            mech.check_payload([mech.d, payloads[0][1]])
        with pytest.raises(InvalidReport):
            mech.check_payload([True, payloads[0][1]])


def test_bad_records_are_refused_before_any_randomness() -> None:
    mech = create_multi("smp", epsilon=1.0, attributes=MIXED)
    with pytest.raises(InvalidParameter):
        mech.perturb({"colour": "red", "size": "S"})
    with pytest.raises(InvalidParameter):
        mech.perturb({"colour": "red", "size": "S", "age": 30, "extra": 1})
    with pytest.raises(InvalidParameter):
        mech.perturb({"colour": "purple", "size": "S", "age": 30})
    with pytest.raises(InvalidParameter):
        mech.perturb({"colour": "red", "size": "S", "age": float("nan")})


def test_perturb_loads_no_numpy() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["numpy"] = None
        from client_sdk.mechanisms import create
        for name in ("spl", "smp", "rsfd"):
            attrs = {"colour": ["red", "green", "blue"], "size": ["S", "L"]}
            if name != "rsfd":
                attrs["age"] = {"bounds": [17, 90]}
            mech = create(name, epsilon=1.0, attributes=attrs)
            rec = {"colour": "red", "size": "L", "age": 33}
            if name == "rsfd":
                del rec["age"]
            mech.check_payload(mech.perturb(rec))
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- exact mergeable state -------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["spl", "smp", "rsfd"])
def test_tally_is_exact_and_mergeable(protocol: str) -> None:
    attrs = SMALL if protocol == "rsfd" else MIXED
    mech = create_multi(protocol, epsilon=1.0, attributes=attrs)
    gen = np.random.default_rng(1)
    cols = {"colour": gen.integers(0, 3, 500), "size": gen.integers(0, 2, 500)}
    if protocol != "rsfd":
        cols["age"] = gen.uniform(17, 90, 500)
    payloads = mech.encode_many(mech.perturb_many(cols, rng=2))
    a, b = mech.tally(payloads[:200]), mech.tally(payloads[200:])
    total = mech.tally(payloads)
    assert a + b == b + a == total
    assert isinstance(total, AggregateState)
    vec = total.vector()
    assert all(type(v) is int for v in vec)
    assert mech.tally_from(total.n, vec) == total
    assert mech.empty_tally() + total == total
    if protocol == "smp":
        assert sum(total.carried) == 500
    else:
        assert total.carried == (500,) * mech.d
    with pytest.raises(InvalidParameter):
        mech.tally_from(total.n, vec[:-1])
    with pytest.raises(InvalidParameter):
        mech.tally_from(total.n + 1, vec)


# -- statistics: unbiasedness and the variance formula ---------------------------------------


def _population(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    gen = np.random.default_rng(seed)
    out = {}
    for name, labels in ADULTISH.items():
        weights = gen.dirichlet(np.ones(len(labels)))
        out[name] = gen.choice(len(labels), size=n, p=weights)
    return out


@pytest.mark.parametrize("protocol", ["spl", "smp", "rsfd"])
def test_counts_unbiased_and_errors_match_the_formula(protocol: str) -> None:
    """R independent runs: the mean count is within 5 standard errors of the truth (per value),
    and the empirical variance of the counts of every value matches the formula's to the
    chi-square precision of R runs; and ``variance_criterion`` is that variance averaged."""
    n, runs = 4000, 200
    mech = create_multi(protocol, epsilon=2.0, attributes=ADULTISH, oracle="grr")
    cols = _population(n)
    truth = {a: np.bincount(cols[a], minlength=len(ADULTISH[a])) for a in ADULTISH}
    gen = np.random.default_rng(11)
    draws: dict[str, list[np.ndarray]] = {a: [] for a in ADULTISH}
    for _ in range(runs):
        est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=gen)))
        assert isinstance(est, MultiEstimate)
        for a in ADULTISH:
            draws[a].append(est.counts(a))
    for j, a in enumerate(ADULTISH):
        arr = np.array(draws[a])
        var = _formula_variance(mech, j, n, truth[a].astype(float))
        z = (arr.mean(axis=0) - truth[a]) / np.sqrt(var / runs)
        assert np.abs(z).max() < 5, (a, z)
        ratio = arr.var(axis=0, ddof=1).sum() / var.sum()
        assert abs(ratio - 1) < 5 * math.sqrt(2 / (runs - 1)), (a, ratio)


def _formula_variance(mech: MultiMechanism, j: int, n: int, c: np.ndarray) -> np.ndarray:
    """Count variance at the truth ``c``, over all n devices, from the closed forms."""
    sub = mech.mechanisms[j]
    assert hasattr(sub, "p_star")
    p, q, d = sub.p_star, sub.q_star, mech.d  # type: ignore[union-attr]
    if mech.name == "spl":
        return n * sub.v0 + sub.beta * c  # type: ignore[union-attr,no-any-return]
    if mech.name == "smp":
        # each device joins attribute j w.p. 1/d; rescaled by n/n_j ~ d: per device holding v,
        # E[(d * support)^2] - c_v^2 terms give Var = d (c p(1-p) + (n-c) q(1-q))/(p-q)^2
        # + (d - 1) c (sampling of the holders), the ratio estimator to first order.
        base = (c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2
        return d * base + (d - 1) * c * (1 - c / n)
    k = len(c)
    f = (p + (k - 1) * q) / k
    pi1, pi0 = p / d + (d - 1) * f / d, q / d + (d - 1) * f / d
    return d * d * (c * pi1 * (1 - pi1) + (n - c) * pi0 * (1 - pi0)) / (p - q) ** 2


def test_criterion_is_the_mean_formula_variance_on_uniform_data() -> None:
    n = 10_000
    for protocol in ("spl", "smp", "rsfd"):
        mech = create_multi(protocol, epsilon=1.0, attributes=ADULTISH, oracle="grr")
        per = []
        for j, a in enumerate(ADULTISH):
            k = len(ADULTISH[a])
            v = _formula_variance(mech, j, n, np.full(k, n / k))
            per.append(v.mean() / n)
        assert mech.variance_criterion() == pytest.approx(sum(per) / len(per), rel=1e-9)


def test_estimate_types_and_numeric_mean_is_unbiased() -> None:
    n = 20_000
    mech = create_multi("smp", epsilon=2.0, attributes=MIXED)
    gen = np.random.default_rng(5)
    ages = gen.uniform(20, 70, n)
    cols = {"colour": gen.integers(0, 3, n), "size": gen.integers(0, 2, n), "age": ages}
    est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=6)))
    assert isinstance(est, MultiEstimate)
    assert isinstance(est["colour"], Estimate) and isinstance(est["age"], MeanEstimate)
    age = est["age"]
    assert isinstance(age, MeanEstimate)
    # the mean over the sampled devices; plus the sampling of which devices those are
    se = math.hypot(age.worst_case_std_error, ages.std() / math.sqrt(age.n))
    assert abs(age.mean - ages.mean()) < 5 * se
    assert est.to_dict()["attributes"]["age"]["mean"] == pytest.approx(age.mean)
    with pytest.raises(InvalidParameter):
        est.counts("age")
    with pytest.raises(InvalidParameter):
        estimate(mech, mech.tally(mech.perturb_many(cols, rng=6)), bootstrap=10)


def test_too_few_reports_per_attribute() -> None:
    from aggregator.errors import NotEnoughReports

    mech = create_multi("smp", epsilon=1.0, attributes=SMALL)
    with pytest.raises(NotEnoughReports):
        estimate(mech, mech.empty_tally())
    assert isinstance(mech.empty_tally(), MultiTally)
    # One report carries one attribute: the error names one that has none (it said only
    # "0 of 1", which read as if the reports had not arrived).
    one = mech.tally(mech.perturb_many({a: np.zeros(1, dtype=int) for a in SMALL}, rng=1))
    said = r"for attribute '\w+' \(0 of 1\): 1 report\(s\) in the range"
    with pytest.raises(NotEnoughReports, match=said) as err:
        estimate(mech, one)
    assert err.value.part is not None and err.value.n == 0 and err.value.minimum == 1


# -- declared pairs: product-domain joint tables, consistent with the one-way counts ----------


@pytest.mark.parametrize("protocol", ["spl", "smp", "rsfd"])
def test_pairs_keep_the_whole_report_exact(protocol: str) -> None:
    mech = create_multi(
        protocol, epsilon=1.0, attributes=SMALL, pairs=[("colour", "size")], oracle="grr"
    )
    assert mech.d == 3  # two attributes and one product-domain component
    worst = worst_log_ratio(mech)
    assert worst <= mech.realised_epsilon + 1e-12 <= 1.0 + 1e-12
    assert worst == pytest.approx(mech.realised_epsilon, rel=1e-9)


def test_a_pair_of_two_numeric_attributes_is_refused() -> None:
    attrs = {**MIXED, "hours": {"bounds": [1, 99]}}
    with pytest.raises(InvalidParameter, match="needs a categorical attribute"):
        create_multi("smp", epsilon=1.0, attributes=attrs, pairs=[("hours", "age")])
    # categorical x numeric pairs are built (tests/test_multi_mixed_pairs.py)
    assert create_multi("smp", epsilon=1.0, attributes=MIXED, pairs=[("colour", "age")]).d == 4


@pytest.mark.parametrize("protocol", ["spl", "smp"])
def test_joint_unbiased_and_consistent_with_marginals(protocol: str) -> None:
    n, runs = 6000, 120
    attrs = {"occupation": ADULTISH["occupation"][:5], "sex": ["F", "M"], "race": ["a", "b", "c"]}
    mech = create_multi(protocol, epsilon=4.0, attributes=attrs, pairs=[("occupation", "sex")])
    gen = np.random.default_rng(3)
    occ = gen.choice(5, size=n, p=[0.4, 0.3, 0.15, 0.1, 0.05])
    sex = (gen.random(n) < np.where(occ < 2, 0.8, 0.3)).astype(np.int64)  # dependent on occ
    cols = {"occupation": occ, "sex": sex, "race": gen.integers(0, 3, n)}
    truth = np.zeros((5, 2))
    np.add.at(truth, (occ, sex), 1)
    raws, ses = [], []
    for _ in range(runs):
        est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=gen)))
        assert isinstance(est, MultiEstimate)
        joint = est.joints[("occupation", "sex")]
        np.testing.assert_allclose(joint.table.sum(axis=1), est.consistent_counts("occupation"))
        np.testing.assert_allclose(joint.table.sum(axis=0), est.consistent_counts("sex"))
        assert joint.table.sum() == pytest.approx(n)
        assert est.consistent_counts("race") is not None
        raws.append(joint.raw)
        ses.append(joint.std_errors)
    raw = np.array(raws)
    se = np.mean(ses, axis=0)
    z = (raw.mean(axis=0) - truth) / (se / math.sqrt(runs))
    assert np.abs(z).max() < 5, z
    ratio = raw.var(axis=0, ddof=1).sum() / (se**2).sum()
    assert abs(ratio - 1) < 0.25, ratio  # std errors from the formulas describe the spread
    d = est.to_dict()
    assert d["pairs"][0]["pair"] == ["occupation", "sex"]
    assert len(d["pairs"][0]["table"]) == 5


def test_pair_reports_round_trip() -> None:
    mech = create_multi("smp", epsilon=1.0, attributes=SMALL, pairs=[("colour", "size")])
    one = mech.perturb({"colour": "blue", "size": "S"})
    assert mech.check_payload(one) == one and 0 <= one[0] < 3
    records = [{"colour": c, "size": s} for c in SMALL["colour"] for s in SMALL["size"]] * 10
    batch = mech.perturb_many(records, rng=4)
    payloads = mech.encode_many(batch)
    assert mech.tally(payloads) == mech.tally(batch)
    assert len(mech.tally(payloads).parts) == 3


# -- SMP's sampling weights (auto samples each attribute with its optimal probability) -------


def test_weighted_smp_satisfies_epsilon_exactly() -> None:
    mech = create_multi("smp", epsilon=1.0, attributes=SMALL, oracle="grr", weights=[3, 1])
    assert mech.sampling_probabilities == (0.75, 0.25)
    for x in mech.input_space():
        dist = mech.output_distribution(x)
        assert sum(dist.values()) == 1
        assert sum(p for (j, _), p in dist.items() if j == 0) == Fraction(3, 4)
    assert worst_log_ratio(mech) == pytest.approx(mech.realised_epsilon, rel=1e-9)
    assert mech.realised_epsilon <= 1.0


def test_weighted_smp_draws_the_attribute_with_its_weight() -> None:
    mech = create_multi(
        "smp", epsilon=1.0, attributes=ADULTISH, oracle="grr", weights=[1, 2, 3, 4, 5]
    )
    record = {a: mech.attributes[i].labels[0] for i, a in enumerate(mech.names)}  # type: ignore[index]
    n = 6000
    counts = np.bincount([mech.perturb(record)[0] for _ in range(n)], minlength=mech.d)
    expected = n * np.arange(1, 6) / 15
    assert float(((counts - expected) ** 2 / expected).sum()) < 30.0  # chi2(4): P ~ 5e-6
    batch = mech.perturb_many({a: np.zeros(n, dtype=int) for a in ADULTISH}, rng=5)
    counts = np.bincount(batch.sampled, minlength=mech.d)
    assert float(((counts - expected) ** 2 / expected).sum()) < 30.0


def test_optimal_weights_minimise_the_criterion_and_auto_uses_them() -> None:
    attrs = {**ADULTISH, "age": [str(a) for a in range(40)]}
    for epsilon in (0.5, 4.0, 8.0):
        uniform = create_multi("smp", epsilon=epsilon, attributes=attrs)
        best = create_multi("smp", epsilon=epsilon, attributes=attrs, weights="optimal")
        assert best.weights is not None and uniform.weights is None
        assert best.variance_criterion() < uniform.variance_criterion()
        base = list(best.weights)
        for j in range(len(base)):  # moving 5% of the mass to or from any component costs
            for factor in (0.95, 1.05):
                moved = base.copy()
                moved[j] = round(moved[j] * factor)
                other = create_multi("smp", epsilon=epsilon, attributes=attrs, weights=moved)
                assert other.variance_criterion() >= best.variance_criterion() * (1 - 1e-9)
        choice = compare_protocols(epsilon=epsilon, attributes=attrs)
        if choice.chosen.name == "smp":
            assert choice.chosen == best
            assert choice.criteria["smp"] == pytest.approx(best.variance_criterion())


def test_weights_round_trip_and_bad_weights_refused() -> None:
    mech = create_multi("smp", epsilon=2.0, attributes=MIXED, weights="optimal")
    assert from_config(mech.config()) == mech
    assert mech.config()["params"]["weights"] == list(mech.weights or ())
    assert "weights" not in create_multi("smp", epsilon=2.0, attributes=MIXED).config()["params"]
    # equal weights are uniform sampling: the same mechanism as no weights
    assert create_multi("smp", epsilon=2.0, attributes=MIXED, weights=[2, 2, 2]) == create_multi(
        "smp", epsilon=2.0, attributes=MIXED
    )
    for bad in ([1, 2], [1, 0, 1], [1.5, 1, 1], "heavy", [True, 1, 1]):
        with pytest.raises(InvalidParameter):
            create_multi("smp", epsilon=2.0, attributes=MIXED, weights=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidParameter):
        create_multi("spl", epsilon=2.0, attributes=MIXED, weights=[1, 2, 3])
    with pytest.raises(InvalidParameter):
        create_multi("auto", epsilon=2.0, attributes=MIXED, weights=[1, 2, 3])


def test_weighted_smp_unbiased_and_errors_match_the_formula() -> None:
    """As the uniform test above, with the sampling term ``(1/pi_j - 1) c (1 - c/n)`` and the
    oracle's variance over ``pi_j n`` devices; the estimate's standard errors agree too."""
    n, runs = 4000, 200
    mech = create_multi(
        "smp", epsilon=2.0, attributes=ADULTISH, oracle="grr", weights=[4, 3, 2, 1, 5]
    )
    cols = _population(n)
    truth = {a: np.bincount(cols[a], minlength=len(ADULTISH[a])) for a in ADULTISH}
    gen = np.random.default_rng(12)
    draws: dict[str, list[np.ndarray]] = {a: [] for a in ADULTISH}
    ses: dict[str, list[np.ndarray]] = {a: [] for a in ADULTISH}
    for _ in range(runs):
        est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=gen)))
        assert isinstance(est, MultiEstimate)
        for a in ADULTISH:
            draws[a].append(est.counts(a))
            ses[a].append(est.count_std_errors(a))
    for j, a in enumerate(ADULTISH):
        sub = mech.mechanisms[j]
        p, q = sub.p_star, sub.q_star  # type: ignore[union-attr]
        pi = mech.sampling_probabilities[j]
        c = truth[a].astype(float)
        base = (c * p * (1 - p) + (n - c) * q * (1 - q)) / (p - q) ** 2
        var = base / pi + (1 / pi - 1) * c * (1 - c / n)
        arr = np.array(draws[a])
        z = (arr.mean(axis=0) - truth[a]) / np.sqrt(var / runs)
        assert np.abs(z).max() < 5, (a, z)
        ratio = arr.var(axis=0, ddof=1).sum() / var.sum()
        assert abs(ratio - 1) < 5 * math.sqrt(2 / (runs - 1)), (a, ratio)
        # the reported standard errors (plug-in at the estimate) average to the formula's
        mean_se2 = (np.array(ses[a]) ** 2).mean(axis=0).sum()
        assert abs(mean_se2 / var.sum() - 1) < 0.1, (a, mean_se2 / var.sum())
