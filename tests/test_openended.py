"""Open-ended values (issue 16): string normalisation, the sketch oracles' estimates in an open
population, discovery of planted heavy hitters, and clear errors.

The exact privacy ratio, wire round trip, strict parsing, one-device vs batch samplers and the
closed-candidate unbiasedness are covered for ``cms``, ``hcms`` and ``pem`` by the generic tests
(tests/test_registry_generic.py, tests/test_mechanism_core.py). Tolerances come from the
variances: 4.5 standard errors, chi-square central 0.999 intervals.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import aggregator
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create
from client_sdk.mechanisms.openended import ValueTooLong, normalise


def population(n: int, heavy: dict[str, int], seed: int) -> list[str]:
    """``heavy`` strings with their counts; every other device holds its own random string."""
    gen = np.random.default_rng(seed)
    rest = n - sum(heavy.values())
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    lengths = gen.integers(3, 8, rest)
    others = ["".join(gen.choice(letters, size=k)) + "~" for k in lengths.tolist()]
    values = [s for s, c in heavy.items() for _ in range(c)] + others
    return values


def test_normalisation_is_nfc_utf8_bytes_with_clear_errors() -> None:
    assert normalise("e\u0301t\u00e9", 8) == "été".encode()  # NFC: both become U+00E9
    assert normalise("été", 5) == b"\xc3\xa9t\xc3\xa9"
    with pytest.raises(ValueTooLong, match=r"6 bytes .* max_length=5"):
        normalise("étét", 5)
    for bad in (b"abc", 3, None, "", "a\x00b", "\ud800"):
        with pytest.raises(InvalidParameter):
            normalise(bad, 8)
    mech = create("hcms", epsilon=1.0, max_length=4)
    with pytest.raises(ValueTooLong):
        mech.perturb("hello")
    with pytest.raises(ValueTooLong):
        mech.perturb_many(["ok", "hello"], rng=1)


def test_create_and_estimate_say_what_an_open_domain_campaign_needs() -> None:
    with pytest.raises(InvalidParameter, match="max_length"):
        create("cms", epsilon=1.0)  # type: ignore[call-overload]
    with pytest.raises(InvalidParameter, match="without domain"):
        create("cms", epsilon=1.0, max_length=8, domain=["a", "b"])
    with pytest.raises(InvalidParameter, match="power of two"):
        create("cms", epsilon=1.0, max_length=8, width=1000)
    with pytest.raises(InvalidParameter, match="max_length"):
        create("pem", epsilon=1.0, max_length=0)
    mech = create("cms", epsilon=1.0, max_length=8, width=64, depth=4)
    tally = mech.tally(mech.perturb_many(["a"] * 50, rng=1))
    with pytest.raises(InvalidParameter, match="give candidates"):
        aggregator.estimate(mech, tally)
    with pytest.raises(InvalidParameter, match="distinct after normalisation"):
        aggregator.estimate(mech, tally, candidates=["é", "e\u0301"])
    with pytest.raises(InvalidParameter, match="cannot discover"):
        aggregator.discover(mech, tally, top=3)
    with pytest.raises(InvalidParameter, match="only to open-domain"):
        aggregator.estimate(create("oue", epsilon=1.0, domain=["a", "b"]), tally, candidates=["a"])


@pytest.mark.parametrize(
    ("name", "params"),
    [("cms", {"width": 256, "depth": 16}), ("hcms", {"width": 1024, "depth": 16})],
)
def test_oracle_counts_are_unbiased_in_an_open_population(name: str, params: dict) -> None:
    """Heavy strings among 6,000 strings held once each (not candidates): the estimates of the
    candidates (two absent) are unbiased and their variance is the closed form, up to the fixed
    hash functions' collisions with the background (a bias of standard deviation at most
    ``sqrt(sum c_x^2 / (w depth)) w/(w-1)``, added to the tolerance)."""
    heavy = {"home.example": 2000, "news.example": 1250, "mail.example": 750}
    x = population(10_000, heavy, seed=5)
    candidates = [*heavy, "absent.one", "absent.two"]
    truth = np.array([*heavy.values(), 0, 0], dtype=float)
    mech = create(name, epsilon=2.0, max_length=16, **params)
    gen = np.random.default_rng(11)
    reps = 30
    ests = [
        aggregator.estimate(mech, mech.tally(mech.perturb_many(x, rng=gen)), candidates=candidates)
        for _ in range(reps)
    ]
    counts = np.array([e.counts for e in ests])
    var = np.asarray(mech.count_variance(len(x), truth))
    assert np.allclose(np.mean([np.square(e.std_errors) for e in ests], axis=0), var, rtol=0.05)
    w = mech.width
    background = math.sqrt((len(x) - sum(heavy.values())) / (w * mech.depth)) * w / (w - 1)
    tolerance = 4.5 * np.sqrt(var / reps + background**2)
    assert np.all(np.abs(counts.mean(axis=0) - truth) <= tolerance), (counts.mean(0), truth)
    statistic = (reps - 1) * counts.var(axis=0, ddof=1) / var
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1)
    assert np.all((lo <= statistic) & (statistic <= hi)), (statistic, lo, hi)


def test_pem_discovers_the_planted_heavy_hitters_with_a_wide_margin() -> None:
    """Five planted strings hold 3% to 8% of 40,000 devices at epsilon 4: at every prefix level
    each is more than 7 standard errors above zero, so any seed finds exactly them, above the
    significance threshold, with counts within 4.5 standard errors of the truth."""
    heavy = {"cat": 3200, "dog": 2400, "dolphin": 2000, "cattle": 1600, "é-mail": 1200}
    x = population(40_000, heavy, seed=7)
    mech = create("pem", epsilon=4.0, max_length=8, width=256, depth=8)
    tally = mech.tally(mech.perturb_many(x, rng=np.random.default_rng(3)))
    found = aggregator.discover(mech, tally, top=5)
    assert set(found.values) == set(heavy)
    assert [i.count for i in found.items] == sorted((i.count for i in found.items), reverse=True)
    for item in found.items:
        assert item.significant and item.count > found.threshold / 2
        assert abs(item.count - heavy[item.value]) <= 4.5 * item.std_error
        assert item.ci_low < item.count < item.ci_high
    assert found.candidates_tested > 5 and found.threshold > 0 and found.n == 40_000
    asked = aggregator.estimate(mech, tally, candidates=["dolphin", "unseen"])
    assert abs(asked.counts[0] - 2000) <= 4.5 * asked.std_errors[0]
    assert abs(asked.counts[1]) <= 4.5 * asked.std_errors[1]


def test_tallies_merge_and_their_size_is_fixed_by_the_sketch() -> None:
    mech = create("pem", epsilon=2.0, max_length=6, width=64, depth=4)
    a = mech.tally(mech.perturb_many(["abc"] * 300, rng=1))
    b = mech.tally(mech.encode_many(mech.perturb_many(["xyz"] * 3000, rng=2)))
    assert (a + b).n == 3300 and len((a + b).vector()) == len(a.vector()) == mech.tally_size
    assert mech.tally_size == 6 * 4 * 65
    assert create("hcms", epsilon=1.0, max_length=8).report_bytes <= 4


# -- decoding: chunked, vectorised, memory bounded by the sketch (issue 16, decode target) ------


def test_tally_decodes_in_chunks_and_names_a_bad_report_by_its_index_in_the_whole_input(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Payloads, an iterator of them, and the batch array give one tally, whatever the chunk;
    a bad payload in a later chunk is named by its index in the whole input."""
    import client_sdk.mechanisms.openended.base as base
    from client_sdk.errors import InvalidReport

    monkeypatch.setattr(base, "TALLY_CHUNK", 64)
    for params in ({"oracle": "cms"}, {"oracle": "hcms"}):
        mech = create("pem", epsilon=2.0, max_length=6, width=64, depth=4, **params)
        batch = mech.perturb_many(["abc", "abd", "xyz", "é"] * 75, rng=4)
        payloads = mech.encode_many(batch)
        whole = mech.tally(batch)
        assert mech.tally(payloads) == whole == mech.tally(iter(payloads))
        assert whole.n == 300
        bad = [list(p) for p in payloads]
        bad[200][1] = mech.depth if params["oracle"] == "cms" else bad[200][1]
        if params["oracle"] == "hcms":
            bad[200][3] = 2
        with pytest.raises(InvalidReport) as info:
            mech.tally(bad)
        assert info.value.index == 200 and "report #200" in str(info.value)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda s: s[:10] + "=" + s[11:],  # padding inside
        lambda s: s[:-1] + "A",  # the final '=' missing
        lambda s: s[:5] + "*" + s[6:],  # outside the alphabet
        lambda s: s[:-1],  # too short
        lambda s: s[:5] + "é" + s[6:],  # not ASCII
    ],
)
def test_the_vectorised_base64_path_refuses_what_the_per_report_parser_refuses(spoil) -> None:
    """The C-speed decoding of a batch (``binascii`` over the joined reports) accepts exactly
    the well-formed ones: one spoiled report among many is found and named."""
    from client_sdk.errors import InvalidReport
    from client_sdk.mechanisms import bitvector

    mech = create("cms", epsilon=2.0, max_length=8, width=1024, depth=4)
    payloads = mech.encode_many(mech.perturb_many(["one", "two"] * 50, rng=2))
    bits = [p[1] for p in payloads]
    assert np.array_equal(bitvector.decode_rows_fast(bits, 1024), bitvector.decode_rows(bits, 1024))
    bits[37] = spoil(bits[37])
    assert bitvector.decode_rows_fast(bits, 1024) is None
    with pytest.raises(InvalidReport) as info:
        bitvector.decode_rows(bits, 1024)
    assert info.value.index == 37


# -- PEM: public level weights -----------------------------------------------------------------


def test_pem_level_weights_are_exact_and_leave_the_privacy_ratio_unchanged() -> None:
    """A level drawn with public integer weights: ``P[level t] = w_t / sum w`` exactly in the
    enumerated output distribution, every output's ratio still ``<= e^epsilon``, and the
    sampler draws the levels in those proportions (chi-square)."""
    from fractions import Fraction

    weights = [1, 3, 2]
    mech = create("pem", epsilon=2.0, max_length=3, width=4, depth=2, level_weights=weights)
    dists = [mech.output_distribution(v) for v in ["a", "b", "zz", "é", "q"]]
    for d in dists:
        assert sum(d.values()) == 1
        for t, w in enumerate(weights):
            assert sum(p for (level, _), p in d.items() if level == t) == Fraction(w, 6)
    worst = max(d1[y] / d2[y] for d1 in dists for d2 in dists if d1 is not d2 for y in d1)
    assert worst <= Fraction(math.exp(2.0))
    assert float(worst) == pytest.approx(math.exp(mech.realised_epsilon), rel=1e-12)
    batch = mech.perturb_many(["ab"] * 12_000, rng=np.random.default_rng(5))
    observed = np.bincount(batch[:, 0].astype(int), minlength=3)
    assert stats.chisquare(observed, np.array(weights) / 6 * 12_000).pvalue > 1e-4
    one = [mech.perturb("ab")[0] for _ in range(3000)]  # the device path, OS randomness
    assert (
        stats.chisquare(np.bincount(one, minlength=3), np.array(weights) / 6 * 3000).pvalue > 1e-4
    )
    assert mech.params()["level_weights"] == weights
    assert "level_weights" not in create("pem", epsilon=2.0, max_length=3).params()
    for bad in ([1, 2], [1, 0, 1], [1, True, 1], "111", [1, 2.0, 1]):
        with pytest.raises(InvalidParameter, match="level_weights"):
            create("pem", epsilon=2.0, max_length=3, level_weights=bad)


def test_pem_estimates_stay_unbiased_under_level_weights() -> None:
    """Candidates' pooled counts with unequal level weights: the mean over repetitions is
    within 4.5 standard errors of the truth (the reported variance, averaged, over reps) and
    the reported variance matches the observed one (chi-square central 0.999)."""
    heavy = {"cat": 2500, "dolphin": 1500, "é-mail": 1000}
    x = population(20_000, heavy, seed=3)
    candidates = [*heavy, "absent"]
    truth = np.array([*heavy.values(), 0], dtype=float)
    mech = create(
        "pem", epsilon=4.0, max_length=8, width=256, depth=8, level_weights=[1, 3, 3, 2, 2, 1, 1, 1]
    )
    gen = np.random.default_rng(8)
    reps = 30
    ests = [
        aggregator.estimate(mech, mech.tally(mech.perturb_many(x, rng=gen)), candidates=candidates)
        for _ in range(reps)
    ]
    counts = np.array([e.counts for e in ests])
    var = np.mean([np.square(e.std_errors) for e in ests], axis=0)
    # the fixed hashes' collisions with the 15,000 singletons: a bias of sd <= sqrt(n/(w d))
    w, d = mech.width, mech.depth
    background = math.sqrt(15_000 / (w * d)) * w / (w - 1)
    tolerance = 4.5 * np.sqrt(var / reps + background**2)
    assert np.all(np.abs(counts.mean(axis=0) - truth) <= tolerance), (counts.mean(0), truth)
    statistic = (reps - 1) * counts.var(axis=0, ddof=1) / var
    lo, hi = stats.chi2.ppf([0.0005, 0.9995], reps - 1)
    assert np.all((lo <= statistic) & (statistic <= hi)), (statistic, lo, hi)


# -- discovery internals: the fast collision algebra equals the pairwise definition ------------


def test_peeling_through_the_bucket_index_equals_scanning_every_key(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_peel`` takes the same keys in the same order whether it compares every key's buckets
    (the first keys) or looks colliders up in the sorted (row, bucket) index (beyond)."""
    import aggregator.openended as ao

    gen = np.random.default_rng(12)
    w, depth, k = 64, 8, 3000
    buckets = gen.integers(0, w, size=(k, depth))
    rhs = gen.normal(0, 1, k)
    rhs[gen.choice(k, 120, replace=False)] += gen.uniform(5, 60, 120)  # heavy keys
    picks = []
    for scan in (0, 10**9):
        monkeypatch.setattr(ao, "_PEEL_SCAN", scan)
        picks.append(ao._peel(buckets, rhs, w, 4.0).tolist())
    assert picks[0] == picks[1] and len(picks[0]) > 40


def test_solved_collisions_are_subtracted_as_the_pairwise_formula_says() -> None:
    """``sketch_counts`` with a peel bar: every key not solved gets ``(rhs_d - sum_h (r(d, h) -
    1/w) solved_h) w/(w-1)``, computed here pair by pair."""
    import aggregator.openended as ao

    mech = create("cms", epsilon=4.0, max_length=8, width=64, depth=8)
    values = ["alpha"] * 3000 + ["beta"] * 2000 + ["gamma"] * 1000 + [f"x{i}" for i in range(4000)]
    tally = mech.tally(mech.perturb_many(values, rng=5))
    keys = [s.encode() for s in ["alpha", "beta", "gamma"]] + [b"k%d" % i for i in range(500)]
    buckets = mech.buckets(keys)
    counts, *_ = ao.sketch_counts(mech.sketch, tally.counts, buckets, joint=4.0)
    sk, w, depth = mech.sketch, mech.width, mech.depth
    x = sk.scores(tally.counts)[np.arange(depth)[None, :], buckets].sum(axis=1)
    rhs = x - sk.reports_in(tally.counts) / w
    null_sd = math.sqrt((w / (w - 1)) ** 2 * tally.n * sk.v_other)
    chosen = ao._peel(buckets, rhs, w, 4.0 * null_sd * (w - 1) / w)
    assert {0, 1, 2} <= set(chosen.tolist())
    r = (buckets[:, None, :] == buckets[None, chosen, :]).mean(axis=2) - 1 / w
    rest = np.setdiff1d(np.arange(len(keys)), chosen)
    expected = (rhs[rest] - r[rest] @ counts[chosen]) * w / (w - 1)
    assert np.allclose(counts[rest], expected, rtol=1e-9, atol=1e-6)


def test_a_string_of_nine_tenths_does_not_make_its_colliders_significant() -> None:
    """One string holds 90% of the reports (as `United-States` in Adult): noise prefixes that
    share hash rows with it carry its reports' variance, and its collisions are subtracted
    even when it is the only heavy key, so across 10 windows at most 3 declare any string
    nobody holds significant (each window's family-wise level is 5%: P[>= 4 of 10] < 2e-4)."""
    heavy = {"home": 18_000, "mail.example": 600}
    x = population(20_000, heavy, seed=9)
    mech = create("pem", epsilon=4.0, max_length=12, width=256, depth=8)
    gen = np.random.default_rng(21)
    false_windows = 0
    for _ in range(10):
        found = aggregator.discover(mech, mech.tally(mech.perturb_many(x, rng=gen)), top=20)
        assert "home" in found.values
        false_windows += any(i.significant and i.value not in heavy for i in found.items)
    assert false_windows <= 3


def test_discovery_answers_a_campaign_of_a_few_reports() -> None:
    """A few reports leave the walk with no prefix to extend at some level while that level
    holds reports: discovery raised IndexError there (28 of 30 seeds with one report), which
    the collector answered as a 500. Now it answers."""
    mech = create("pem", epsilon=4.0, max_length=16)
    for n in (1, 2, 3):
        for seed in range(8):
            tally = mech.tally(
                mech.perturb_many(["example.org"] * n, rng=np.random.default_rng(seed))
            )
            found = aggregator.discover(mech, tally, top=10)
            assert found.n == n and len(found.items) <= 10
    # The estimator's own edge: no keys to count among a block that holds reports.
    import aggregator.openended as ao

    sketch = mech.sketches[0]
    block = mech.block(tally.counts, 0)
    buckets = mech.level_buckets([], 0)
    counts, var, null, n_b = ao.sketch_counts(sketch, block, buckets, joint=3.0)
    assert counts.size == var.size == null.size == 0 and n_b == sketch.reports_in(block)


@pytest.mark.parametrize(
    ("n", "pi", "tail"),
    [(300, 0.0185, 0.05 / 7500), (20, 0.0185, 6.7e-6), (100_000, 0.3, 1e-6), (5000, 0.5, 0.01)],
)
def test_binomial_critical_z_is_the_exact_binomial_critical_value(
    n: int, pi: float, tail: float
) -> None:
    from aggregator.estimate import binomial_critical_z

    z = binomial_critical_z(n, pi, tail)
    mean, sd = n * pi, math.sqrt(n * pi * (1 - pi))
    first = round(mean + z * sd + 0.5)  # the first count that passes
    assert stats.binom.sf(first - 1, n, pi) <= tail < stats.binom.sf(first - 2, n, pi)
    assert binomial_critical_z(0, pi, tail) == math.inf
    # No count of 3 reports passes: the threshold sits just above the largest possible count.
    assert binomial_critical_z(3, 0.01, 1e-9) == (3.5 - 0.03) / math.sqrt(3 * 0.01 * 0.99)


def test_the_null_law_of_a_sketch_count_is_the_variance_it_is_scaled_by() -> None:
    for name, params in (("pem", {}), ("cms", {"flips": "symmetric"}), ("hcms", {})):
        mech = create(name, epsilon=2.0, max_length=8, width=256, depth=8, **params)
        sketch = mech.sketches[0] if name == "pem" else mech.sketch  # type: ignore[attr-defined]
        pi, step = sketch.null_bernoulli
        assert math.isclose(step**2 * pi * (1 - pi), sketch.v_other, rel_tol=1e-12), name


def test_few_reports_per_level_do_not_make_noise_significant() -> None:
    """With 2,400 devices over 8 levels (300 reports each) a null count's upper tail is far
    heavier than a Gaussian's (pi = 0.018): the Gaussian Bonferroni threshold let a noise string
    through in 20 of 40 runs of a population of unique strings. With the exact binomial
    critical value the family-wise rate is at its level (5%): at most 4 of 24 runs here
    (P = 0.007 at 5%), and a string every device holds is still found."""
    mech = create("pem", epsilon=4.0, max_length=8)
    noisy, zs = 0, []
    for seed in range(24):
        gen = np.random.default_rng(seed)
        x = [f"u{i:06d}" for i in gen.permutation(10**6)[:2400]]
        found = aggregator.discover(mech, mech.tally(mech.perturb_many(x, rng=gen)), top=10)
        noisy += any(item.significant for item in found.items)
        zs.append(found.z)
    assert noisy <= 4, noisy
    assert min(zs) > 5  # raised from the Gaussian Bonferroni z, 4.3-4.4 here
    gen = np.random.default_rng(99)
    found = aggregator.discover(mech, mech.tally(mech.perturb_many(["abcdefgh"] * 2400, rng=gen)))
    assert [i.value for i in found.items if i.significant] == ["abcdefgh"]


def test_many_candidates_at_few_reports_keep_their_family_wise_level() -> None:
    """400 candidate strings nobody holds, 2,400 devices: the Gaussian Bonferroni z (3.5)
    called one of them significant in many runs; the exact binomial critical value keeps the
    family-wise rate at its level (at most 4 of 24 runs, P = 0.007 at 5%)."""
    mech = create("pem", epsilon=4.0, max_length=8)
    asked = [f"c{i:07d}" for i in range(400)]
    noisy, zs = 0, []
    for seed in range(24):
        gen = np.random.default_rng(seed)
        x = [f"u{i:06d}" for i in gen.permutation(10**6)[:2400]]
        est = aggregator.estimate(mech, mech.tally(mech.perturb_many(x, rng=gen)), candidates=asked)
        noisy += any(item.significant for item in est.items)
        zs.append(est.z)
    assert noisy <= 4, noisy
    assert min(zs) > 4  # the Gaussian Bonferroni z over 400 strings is 3.48
