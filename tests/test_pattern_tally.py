"""Subset selection's pattern tally: every reported d-subset counted at ingest, so the exact
per-report likelihood (the pattern MLE) is what ``auto`` returns where it returned the tally
``mle``, without reading a stored report (client_sdk/mechanisms/subset.py, tally.py;
aggregator/postprocess.py ``_auto``; docs/AGGREGATOR.md "Pattern MLE").

Statistical claims use paired draws and a one-sided z at 1% (2.326); seeds are fixed.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from aggregator.estimate import estimate
from aggregator.pattern import histogram_of_payloads, histogram_of_tally, pattern_frequencies
from aggregator.postprocess import mle_frequencies, postprocess
from aggregator.service import EstimateQuery, estimate_range
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Tally, compare, create, from_config
from client_sdk.mechanisms.subset import (
    MAX_PATTERN_CELLS,
    MAX_PATTERN_K,
    SubsetSelection,
    keeps_patterns,
    pattern_counts,
    subset_members,
)
from client_sdk.mechanisms.tally import PatternTally

Z_ONE_SIDED_1PCT = 2.326
#: Adult occupation's 14 frequencies (n = 30,718), the issue's benchmark domain.
OCCUPATION = np.array(
    [3770, 3650, 4140, 4099, 3721, 1350, 2002, 3295, 1597, 1490, 912, 9, 645, 1038]
)


def _mech(k: int = 6, d: int = 2, epsilon: float = 2.0) -> SubsetSelection:
    return SubsetSelection(epsilon=epsilon, domain=k, d=d, patterns=True)


def test_layout_is_itertools_combinations_order() -> None:
    k, d = 5, 2
    members = subset_members(k, d)
    assert members.shape == (math.comb(k, d), k) and not members.flags.writeable
    for row, subset in zip(members, itertools.combinations(range(k), d), strict=True):
        assert np.flatnonzero(row).tolist() == list(subset)
    # A packed report (bit v of the little-endian row: value v) lands in its subset's row.
    mech = _mech(k, d)
    for rank, subset in enumerate(itertools.combinations(range(k), d)):
        bits = np.zeros((1, k), dtype=bool)
        bits[0, list(subset)] = True
        from client_sdk.mechanisms import bitvector

        counts = pattern_counts(bitvector.pack_rows(bits), k, d)
        assert counts.tolist() == [int(r == rank) for r in range(members.shape[0])]
        assert mech.tally(mech.encode_many(bitvector.pack_rows(bits))).patterns[rank] == 1
    # Two bytes per report (k > 8): the high byte is read too.
    k = 12
    bits = np.zeros((1, k), dtype=bool)
    bits[0, [3, 10]] = True
    from client_sdk.mechanisms import bitvector

    rank = list(itertools.combinations(range(k), 2)).index((3, 10))
    assert np.flatnonzero(pattern_counts(bitvector.pack_rows(bits), k, 2)).tolist() == [rank]


def test_tally_of_payloads_batches_and_single_reports_agree() -> None:
    mech = _mech(9, 3)
    rng = np.random.default_rng(4)
    values = rng.integers(0, 9, size=2_000)
    batch = mech.perturb_many(values, rng=rng)
    tally = mech.tally(batch)
    assert isinstance(tally, PatternTally) and tally.n == 2_000 and tally.d == 3
    assert tally == mech.tally(mech.encode_many(batch))
    np.testing.assert_array_equal(tally.support, SubsetSelection.tally(mech, batch).support)
    # perturb (one report at a time) fills the same layout.
    one = [mech.perturb_index(int(v), rng=rng) for v in values[:200]]
    single = mech.tally(one)
    assert single.n == 200 and int(single.patterns.sum()) == 200
    np.testing.assert_array_equal(single.patterns @ subset_members(9, 3), single.support)
    # The histogram the tally keeps is what reading the payloads would build.
    from_tally = histogram_of_tally(tally)
    from_reports = histogram_of_payloads(mech, mech.encode_many(batch))
    assert from_tally.n == from_reports.n == 2_000
    order_t = np.lexsort(from_tally.patterns.T)
    order_r = np.lexsort(from_reports.patterns.T)
    np.testing.assert_array_equal(from_tally.patterns[order_t], from_reports.patterns[order_r])
    np.testing.assert_array_equal(from_tally.counts[order_t], from_reports.counts[order_r])


def test_state_adds_round_trips_and_refuses_what_is_not_one() -> None:
    mech = _mech()
    a = mech.tally(mech.perturb_many(np.arange(60) % 6, rng=1))
    b = mech.tally(mech.perturb_many(np.arange(40) % 6, rng=2))
    both = a + b
    assert isinstance(both, PatternTally) and both.n == 100
    assert both == b + a and both == mech.empty_tally() + a + b
    np.testing.assert_array_equal(both.patterns, a.patterns + b.patterns)
    vector = both.vector()
    assert len(vector) == 6 + 15 and all(type(v) is int for v in vector)
    assert vector[:6] == both.support.tolist() and vector[6:] == both.patterns.tolist()
    assert mech.tally_from(both.n, vector) == both
    assert Tally.from_dict(both.to_dict()) == both
    assert hash(Tally.from_dict(both.to_dict())) == hash(both)
    # With a plain tally the patterns of the other part are unknown: the plain sum.
    plain = Tally(a.n, a.support)
    for mixed in (a + plain, plain + a):
        assert type(mixed) is Tally and mixed.n == 2 * a.n
    # Pattern tallies of another d over the same values: no common layout, the plain sum.
    other = _mech(6, 3).tally(_mech(6, 3).perturb_many(np.arange(30) % 6, rng=4))
    for mixed in (a + other, other + a):
        assert type(mixed) is Tally and mixed.n == a.n + 30
        np.testing.assert_array_equal(mixed.support, a.support + other.support)
    assert plain != a and a != plain and a != b
    with pytest.raises(InvalidParameter, match="6 support counts and 15 pattern counts, got 6"):
        mech.tally_from(a.n, a.support.tolist())
    with pytest.raises(InvalidParameter, match="one per domain value"):
        SubsetSelection(epsilon=2.0, domain=6, d=2).tally_from(a.n, vector)
    with pytest.raises(InvalidParameter, match="add up to n = 61"):
        PatternTally(61, a.support, a.patterns, 2)
    shifted = a.patterns.copy()
    shifted[[0, 1]] += (1, -1) if shifted[1] else (0, 0)
    if shifted[1] or a.patterns[1]:
        with pytest.raises(InvalidParameter, match="not its patterns' sums"):
            PatternTally(a.n, a.support, shifted, 2)
    with pytest.raises(InvalidParameter, match="15 pattern counts"):
        PatternTally(a.n, a.support, a.patterns[:-1], 2)
    with pytest.raises(InvalidParameter, match="d must be in"):
        PatternTally(a.n, a.support, a.patterns, 6)
    with pytest.raises(InvalidParameter, match="pattern count must lie in"):
        PatternTally(a.n, a.support, -a.patterns, 2)


def test_which_configurations_keep_patterns() -> None:
    assert keeps_patterns(14, 2) and keeps_patterns(16, 2) and keeps_patterns(14, 4)
    assert not keeps_patterns(14, 1)  # d = 1 is GRR: its support counts are its patterns
    assert not keeps_patterns(MAX_PATTERN_K + 1, 2)
    assert math.comb(14, 5) <= MAX_PATTERN_CELLS and keeps_patterns(14, 5)
    assert math.comb(16, 6) > MAX_PATTERN_CELLS and not keeps_patterns(16, 6)
    with pytest.raises(InvalidParameter, match=r"k = 16, d = 6 has C\(k, d\) = 8008"):
        SubsetSelection(epsilon=0.5, domain=16, d=6, patterns=True)
    with pytest.raises(InvalidParameter, match="patterns must be true or false"):
        SubsetSelection(epsilon=2.0, domain=14, d=2, patterns=1)  # type: ignore[arg-type]
    # auto turns them on where allowed; the reports are those of plain SS.
    chosen = compare(2.0, [f"v{i}" for i in range(14)]).chosen
    assert chosen.params() == {"d": 2, "patterns": True}
    plain = create("ss", epsilon=2.0, domain=14)
    assert plain.params() == {"d": 2}
    assert chosen.threshold == plain.threshold  # type: ignore[attr-defined]
    assert chosen.output_distribution(3) == plain.output_distribution(3)
    assert chosen.realised_epsilon == plain.realised_epsilon
    assert "patterns" not in compare(4.0, 14).chosen.params()  # GRR (d = 1) at epsilon 4
    # A config written before pattern tallies (no "patterns") rebuilds without them, so its
    # stored k-number tallies still fit; a config with them rebuilds with them.
    labels = [f"v{i}" for i in range(14)]
    legacy = from_config({"mechanism": "ss", "epsilon": 2.0, "domain": labels, "params": {"d": 2}})
    assert legacy.params() == {"d": 2}
    assert type(legacy.empty_tally()) is Tally
    again = from_config(chosen.config())
    assert again.params() == chosen.params() and isinstance(again.empty_tally(), PatternTally)
    # A multi-attribute state keeps support counts only: its SS attributes keep no patterns.
    multi = create("spl", epsilon=4.0, attributes={"a": labels, "b": labels})
    for sub in multi.mechanisms:  # type: ignore[attr-defined]
        assert sub.params() == {"d": 2}  # epsilon 2 each: auto's SS, without patterns
        assert not getattr(sub, "patterns", False)


def test_auto_returns_the_pattern_mle_where_it_returned_mle() -> None:
    mech = compare(2.0, 14).chosen
    rng = np.random.default_rng(7)
    values = np.repeat(np.arange(14), OCCUPATION)
    batch = mech.perturb_many(values, rng=rng)
    est = estimate(mech, mech.tally(batch))
    post = postprocess(est)
    assert post.method == "auto" and post.chosen == "pattern" and post.pooled is False
    expected = pattern_frequencies(mech, histogram_of_payloads(mech, mech.encode_many(batch)))
    np.testing.assert_allclose(post.counts, expected.frequencies * est.n, rtol=1e-12)
    assert post.converged and post.patterns == 91
    assert post.std_errors is not None and len(post.std_errors) == 14 and post.note
    assert post.describe()["chosen"] == "pattern"
    explicit = postprocess(est, "pattern")
    assert explicit.method == "pattern"
    np.testing.assert_allclose(explicit.counts, post.counts, rtol=1e-12)
    # The same tally without its patterns: auto's former answer, the tally mle.
    plain = estimate(mech, Tally(est.n, est.tally.support))
    assert postprocess(plain).chosen == "mle"
    np.testing.assert_allclose(
        postprocess(plain).counts, mle_frequencies(mech, plain.tally)[0] * est.n, rtol=1e-12
    )
    with pytest.raises(InvalidParameter, match="needs the windows' report patterns"):
        postprocess(plain, "pattern")
    # Where noise dominates (few reports) auto's choice is unchanged: flat or pooled.
    few = estimate(mech, mech.tally(mech.perturb_many(values[::40], rng=rng)))
    assert postprocess(few).chosen in ("flat", "pooled")


def test_service_serves_pattern_from_the_tallies() -> None:
    mech = compare(2.0, 14).chosen
    rng = np.random.default_rng(8)
    values = np.repeat(np.arange(14), OCCUPATION // 3)
    tallies = {
        day: mech.tally(mech.perturb_many(values, rng=rng)) for day in ("2026-11-01", "2026-11-02")
    }
    answer = estimate_range(mech, tallies, EstimateQuery(postprocess="pattern"))
    assert answer.postprocess["method"] == "pattern"  # type: ignore[union-attr]
    total = tallies["2026-11-01"] + tallies["2026-11-02"]
    expected = pattern_frequencies(mech, histogram_of_tally(total)).frequencies * total.n  # type: ignore[arg-type]
    np.testing.assert_allclose([v.count for v in answer.values], expected, rtol=1e-12)  # type: ignore[union-attr]
    default = estimate_range(mech, tallies, EstimateQuery())
    assert default.postprocess["chosen"] == "pattern"  # type: ignore[union-attr]


def _draw_patterns(mech: SubsetSelection, counts: np.ndarray, rng: np.random.Generator) -> Tally:
    """A pattern tally drawn from its exact law: per true value x, a multinomial over the
    d-subsets with ``P(S | x) = p / C(k-1, d-1)`` if x is in S, else ``(1-p) / C(k-1, d)``."""
    k, d = mech.k, mech.d
    members = subset_members(k, d)
    p = mech.p_star
    patterns = np.zeros(members.shape[0], dtype=np.int64)
    for x in np.flatnonzero(counts):
        law = np.where(
            members[:, x] == 1, p / math.comb(k - 1, d - 1), (1 - p) / math.comb(k - 1, d)
        )
        patterns += rng.multinomial(counts[x], law / law.sum())
    return PatternTally.of_patterns(k, d, patterns)


def test_auto_with_patterns_beats_the_tally_mle_on_occupation_at_epsilon_2() -> None:
    # docs/AGGREGATOR.md measured 0.963 [0.950, 0.976] at R = 200; here R = 150 paired draws.
    mech = compare(2.0, 14).chosen
    assert isinstance(mech, SubsetSelection)
    rng = np.random.default_rng(20)
    diff = []
    for _ in range(150):
        tally = _draw_patterns(mech, OCCUPATION, rng)
        est = estimate(mech, tally)
        ours = postprocess(est).counts
        mle = postprocess(estimate(mech, Tally(tally.n, tally.support)), "mle").counts
        diff.append(np.mean((mle - OCCUPATION) ** 2) - np.mean((ours - OCCUPATION) ** 2))
    d = np.asarray(diff)
    z = d.mean() / (d.std(ddof=1) / math.sqrt(d.size))
    assert z > Z_ONE_SIDED_1PCT, z


def test_drawn_patterns_have_the_law_of_perturbed_reports() -> None:
    # The exact-law sampler above (and bench/accuracy.py's) against the mechanism itself.
    mech = _mech(6, 2)
    counts = np.array([400, 300, 200, 60, 30, 10])
    rng = np.random.default_rng(9)
    drawn = np.mean([_draw_patterns(mech, counts, rng).patterns for _ in range(300)], axis=0)
    real = np.mean(
        [
            mech.tally(mech.perturb_many(np.repeat(np.arange(6), counts), rng=rng)).patterns
            for _ in range(300)
        ],  # type: ignore[attr-defined]
        axis=0,
    )
    members = subset_members(6, 2)
    p = mech.p_star
    law = sum(
        c * np.where(members[:, x] == 1, p / math.comb(5, 1), (1 - p) / math.comb(5, 2))
        for x, c in enumerate(counts)
    )
    se = np.sqrt(law / 300)  # Poisson-bound per cell
    assert np.all(np.abs(drawn - law) < 4.5 * se) and np.all(np.abs(real - law) < 4.5 * se)


def test_what_the_helpers_promise() -> None:
    # subset_members is cached (one read-only matrix per (k, d)); the rank table marks codes
    # with other than d bits -1; a pattern tally's arrays are read-only.
    from client_sdk.mechanisms.subset import _rank_of_code

    assert subset_members(14, 2) is subset_members(14, 2)
    table = _rank_of_code(4, 2)
    assert not table.flags.writeable and table.shape == (16,)
    assert [int(table[c]) for c in (0b0000, 0b0001, 0b0111, 0b1111)] == [-1, -1, -1, -1]
    assert int(table[0b0011]) == 0 and int(table[0b1100]) == 5
    tally = _mech().tally(_mech().perturb_many(np.arange(30) % 6, rng=3))
    with pytest.raises(ValueError, match="read-only"):
        tally.patterns[0] = 1  # type: ignore[attr-defined]
    # One device at k = 8: one byte on the wire, exactly d bits set.
    mech = SubsetSelection(epsilon=1.0, domain=8, d=3)
    import base64

    for value in range(8):
        raw = base64.b64decode(mech.perturb_index(value))
        assert len(raw) == 1 and bin(raw[0]).count("1") == 3


def test_a_few_reports_fall_back_to_the_mle_saying_why() -> None:
    """Two reports' patterns cannot identify 14 frequencies (a singular Fisher information):
    ``postprocess=pattern`` answered a 500 there (LinAlgError). Now it is the tally mle with a
    note saying why, and ``auto`` keeps its mle branch."""
    from aggregator.pattern import SingularInformation, pattern_ratio, pattern_std_errors

    mech = compare(2.0, 14).chosen
    est = estimate(mech, mech.tally(mech.perturb_many(np.array([0, 1]), rng=3)))
    hist = histogram_of_tally(est.tally)  # type: ignore[arg-type]
    with pytest.raises(SingularInformation, match="do not identify the 14 frequencies"):
        pattern_std_errors(pattern_ratio(mech), hist, np.full(14, 1 / 14))
    post = postprocess(est, "pattern")
    assert post.method == "mle" and post.requested == "pattern"
    assert post.note is not None and post.note.endswith("this is the tally mle")
    np.testing.assert_allclose(post.counts, postprocess(est, "mle").counts, rtol=1e-12)
    # Enough reports: the information is regular and the fit is the pattern MLE.
    many = estimate(mech, mech.tally(mech.perturb_many(np.arange(14).repeat(50), rng=4)))
    assert postprocess(many, "pattern").method == "pattern"


def test_one_oue_report_through_the_service_is_the_mle_saying_why() -> None:
    """The collector's path (patterns built from stored reports): one OUE report made
    ``np.linalg.solve`` raise, a 500 from the collector."""
    mech = create("oue", epsilon=1.0, domain=["a", "b", "c", "d"])
    batch = mech.perturb_many(np.array([2]), rng=5)
    day = "2026-11-27"
    hist = histogram_of_payloads(mech, mech.encode_many(batch))
    answer = estimate_range(
        mech,
        {day: mech.tally(batch)},
        EstimateQuery(postprocess="pattern"),
        patterns={day: hist},
    )
    post = answer.postprocess
    assert post["method"] == "mle" and post["requested"] == "pattern"  # type: ignore[index]
    assert "do not identify the 4 frequencies" in post["note"]  # type: ignore[index]
