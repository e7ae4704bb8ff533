"""Estimates of open-domain campaigns (issue 16): counts of candidate strings, and discovery.

* :func:`estimate_candidates` (``aggregator.estimate(mech, tally, candidates=[...])``): the
  estimated count of each candidate string, with standard errors and intervals.
* :func:`discover` (``aggregator.discover(mech, tally, top=k)``): the heavy hitters a ``pem``
  tally reveals, largest first, each with its count, standard error and significance.

Sketch estimate (docs/MECHANISMS.md, "Open-ended values"). For a block of ``n_b`` reports of
one sketch, ``X_d = sum_j scores[j, h_j(d)]`` has ``E[X_d] = sum_x c_x r(x, d)`` with
``r(x, d)`` the fraction of the public hash rows where ``x`` and ``d`` collide. Treating the
strings outside the candidate set as spread uniformly over the buckets (``r = 1/w``), the
candidates' counts solve ``sum_x (r(x, d) - 1/w) c_x = X_d - n_b/w``: this is Apple's estimator
``(X_d - n_b/w) w/(w-1)`` when no two candidates collide, and removes the candidates'
collisions with each other exactly (it is unbiased, given the hash functions, when the
candidates hold every report). Standard errors use the closed-form variance under random
hashing, ``(w/(w-1))^2 (n_b v_other + c (v_hold - v_other))`` (per-report ``v_*`` from the
mechanism).

Privacy: everything is computed from the tally of perturbed reports and public parameters.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from aggregator.errors import NotEnoughReports
from aggregator.estimate import binomial_critical_z
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.openended import (
    OpenDomainMechanism,
    PrefixExtending,
    SketchOracle,
)
from client_sdk.mechanisms.openended.sketch import Sketch
from client_sdk.mechanisms.openended.strings import to_text
from client_sdk.mechanisms.openended.tally import SketchTally

#: Confidence level of intervals and of the significance test unless the caller says otherwise.
DEFAULT_LEVEL = 0.95
#: Candidates solved jointly for their collisions at most (beyond: Apple's separate estimator).
JOINT_LIMIT = 800
#: Discovery solves collisions among the prefixes this many null standard errors above zero.
HEAVY_Z = 4.0
#: At most this many prefixes per level are taken as heavy (and solved jointly).
PEEL_LIMIT = 256
#: The first keys peeled scan every key; beyond, a sorted (row, bucket) index is built once.
_PEEL_SCAN = 32


@dataclass(frozen=True)
class CandidateCount:
    """One candidate string: its estimated count, standard error and interval."""

    value: str
    count: float = field(metadata={"description": "Estimated number of devices holding it."})
    std_error: float
    ci_low: float
    ci_high: float
    significant: bool = field(metadata={"description": "count > z * its null std error."})


@dataclass(frozen=True)
class CandidateEstimates:
    """Estimated counts of the strings an analyst asked about (``.counts`` in their order)."""

    mechanism: str
    params: dict[str, Any]
    epsilon: float
    realised_epsilon: float
    n: int
    level: float
    candidates: list[str]
    counts: list[float]
    std_errors: list[float]
    items: list[CandidateCount]
    #: z of the significance test: Bonferroni over the candidates at ``1 - level``, raised to
    #: the exact binomial critical value of a null count where that is larger.
    z: float
    kind: Literal["open_domain"] = "open_domain"


@dataclass(frozen=True)
class DiscoveredItem:
    """A discovered string: estimated count, standard error, interval, significance."""

    value: str
    count: float
    std_error: float
    ci_low: float
    ci_high: float
    significant: bool


@dataclass(frozen=True)
class Discoveries:
    """The heavy hitters of a discovery tally, largest estimated count first.

    ``threshold = z * sigma0``: ``sigma0`` is the standard error of a ``max_length``-byte string
    nobody holds, ``z`` the Bonferroni quantile over the ``candidates_tested`` strings of the
    last level (at least one) at family-wise level ``alpha = 1 - level``. Shorter strings are
    measured by more levels: each item's ``significant`` compares its count with ``z`` times its
    own null error. Counts of items found by the same reports carry a selection bias near the
    threshold (the winner's curse); ``estimate(mech, other_tally, candidates=...)`` on another
    window does not.
    """

    mechanism: str
    params: dict[str, Any]
    epsilon: float
    realised_epsilon: float
    n: int
    top: int
    level: float
    alpha: float
    z: float
    sigma0: float
    threshold: float
    candidates_tested: int
    items: list[DiscoveredItem]
    kind: Literal["open_domain"] = "open_domain"

    @property
    def values(self) -> list[str]:
        return [i.value for i in self.items]


# -- the sketch estimator --------------------------------------------------------------------


def sketch_counts(
    sketch: Sketch, block: np.ndarray, buckets: np.ndarray, *, joint: bool | float = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """Counts of the keys whose buckets are ``buckets`` among one block's reports.

    ``joint=True`` solves every key's collisions with the others (analyst-given candidates);
    ``joint=z`` (a float) solves only among the keys more than ``z`` null standard errors
    above zero and subtracts their collisions from every other key (discovery, where most
    keys are noise selected for being high: solving for those would pull real counts down);
    ``joint=False`` is Apple's separate estimator.
    Returns ``(counts, variance, null_variance, n_b)``: unbiased counts (module docstring),
    their closed-form variance at the clamped counts and at count 0, and the block's reports.
    """
    n_b = sketch.reports_in(block)
    k = buckets.shape[0]
    if n_b == 0:
        inf = np.full(k, np.inf)
        return np.zeros(k), inf, inf.copy(), 0
    if k == 0:  # discovery with no prefix left to extend (few reports): nothing to count
        return np.zeros(0), np.zeros(0), np.zeros(0), n_b
    w, depth = sketch.width, sketch.depth
    scale = (w / (w - 1)) ** 2
    scores = sketch.scores(block)
    x = scores[np.arange(depth)[None, :], buckets].sum(axis=1)
    rhs = x - n_b / w
    counts = rhs * w / (w - 1)
    null = np.full(k, scale * n_b * sketch.v_other)
    if joint is True:
        chosen = np.arange(k) if k <= JOINT_LIMIT else np.zeros(0, dtype=np.int64)
    elif joint is False:
        chosen = np.zeros(0, dtype=np.int64)
    else:
        chosen = _peel(buckets, rhs, w, float(joint) * math.sqrt(null[0]) * (w - 1) / w)
    if chosen.size:  # one heavy key too: its collisions are subtracted from the others
        hb = buckets[chosen]
        r = (hb[:, None, :] == hb[None, :, :]).mean(axis=2)
        try:
            solved = np.linalg.solve(r - 1 / w, rhs[chosen])
        except np.linalg.LinAlgError:
            solved = counts[chosen]
        if chosen.size < k:  # subtract the solved keys' collisions from every other key
            # sum_h (r(d, h) - 1/w) solved_h = mean_j acc[j, h_j(d)] - sum(solved)/w, with
            # acc[j, b] the solved count of the keys in bucket b of row j: O((k + c) depth).
            rows = np.arange(depth)
            acc = np.bincount(
                (rows[None, :] * w + hb).ravel(),
                weights=np.repeat(solved, depth),
                minlength=depth * w,
            ).reshape(depth, w)
            rest = np.setdiff1d(np.arange(k), chosen)
            collided = acc[rows[None, :], buckets[rest]].sum(axis=1) / depth - solved.sum() / w
            counts[rest] = (rhs[rest] - collided) * w / (w - 1)
        counts[chosen] = solved
        if joint is not True:
            # Discovery: a key sharing rows with heavy ones also carries the variance of their
            # reports there (v_hold instead of v_other per report): sum_h r(d, h) c_h. Without
            # it a noise prefix colliding with a string of 90% of the reports looks significant.
            rows = np.arange(depth)
            heavy = np.bincount(
                (rows[None, :] * w + hb).ravel(),
                weights=np.repeat(np.clip(solved, 0, n_b), depth),
                minlength=depth * w,
            ).reshape(depth, w)
            shared = heavy[rows[None, :], buckets].sum(axis=1) / depth
            shared[chosen] -= np.clip(solved, 0, n_b)  # not its own reports
            null += scale * np.clip(shared, 0, None) * (sketch.v_hold - sketch.v_other)
    var = null + scale * np.clip(counts, 0, n_b) * (sketch.v_hold - sketch.v_other)
    return counts, var, null, n_b


def _peel(buckets: np.ndarray, rhs: np.ndarray, w: int, bar: float) -> np.ndarray:
    """The keys that stand out, one at a time (CLEAN): take the key of largest residual while
    it is above ``bar``, subtract its collisions (``(r(h, d) - 1/w) * residual_h``) from every
    key, repeat. A key that is high only because it collides with a heavy one drops back to the
    noise once that one is taken; at most ``PEEL_LIMIT`` keys."""
    resid = rhs.astype(float).copy()
    taken = np.zeros(rhs.size, dtype=bool)
    chosen: list[int] = []
    depth = buckets.shape[1]
    index: tuple[np.ndarray, np.ndarray] | None = None
    while len(chosen) < PEEL_LIMIT:
        masked = np.where(taken, -np.inf, resid)
        h = int(np.argmax(masked))
        if not masked[h] > bar:
            break
        chosen.append(h)
        taken[h] = True
        step = resid[h] / (1 - 1 / w)
        if len(chosen) <= _PEEL_SCAN:  # a few keys: compare every key's buckets with h's
            shared = np.count_nonzero(buckets == buckets[h], axis=1)
            resid -= (shared / depth - 1 / w) * step
            continue
        if index is None:
            # Who shares a bucket with whom: every (row, bucket) cell's keys, sorted once, so
            # that a key's colliders (one entry per shared row) are found in O(depth log k).
            cells = (np.arange(depth)[None, :] * w + buckets).ravel()
            order = np.argsort(cells, kind="stable")
            index = (cells[order], order // depth)
        sorted_cells, key_of = index
        mine = np.arange(depth) * w + buckets[h]
        lo = np.searchsorted(sorted_cells, mine, side="left")
        hi = np.searchsorted(sorted_cells, mine, side="right")
        colliders = np.concatenate([key_of[a:b] for a, b in zip(lo, hi, strict=True)])
        resid += step / w  # - (r(h, d) - 1/w) * step, in its two parts
        np.subtract.at(resid, colliders, step / depth)
    return np.asarray(chosen, dtype=np.int64)


def _check(mech: Any, tally: Any, min_reports: int) -> SketchTally:
    if not isinstance(mech, OpenDomainMechanism):
        raise InvalidParameter(f"not an open-domain mechanism: {type(mech).__name__}")
    checked = mech.check_tally(tally)
    if checked.n < max(1, min_reports):
        raise NotEnoughReports(checked.n, max(1, min_reports))
    return checked


def _normalised(mech: OpenDomainMechanism, candidates: Sequence[str]) -> list[bytes]:
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, Sequence):
        raise InvalidParameter("candidates must be a list of strings")
    if not candidates:
        raise InvalidParameter("give at least one candidate string")
    datas = [mech.normalise(c) for c in candidates]
    if len(set(datas)) != len(datas):
        raise InvalidParameter("candidates must be distinct after normalisation (NFC)")
    return datas


def pem_level_estimates(
    mech: PrefixExtending,
    counts: np.ndarray,
    n: int,
    keys: list[bytes],
    level: int,
    joint: bool | float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, float]:
    """Population counts of prefix ``keys`` at ``level``.

    Returns ``(counts, variance, null variance, f)``: the level's block counts scaled by
    ``f = n / n_t``, the variance of the randomisation (scaled by ``f^2``) and at count 0. The
    role sampling (which devices picked this level) adds ``c (f - 1)`` on its own level and,
    pooled with weights ``a_t`` summing to 1, ``c (sum a_t^2 f_t - 1)`` (:class:`_Pool`).
    """
    sk = mech.sketches[level]
    est, var, null, n_t = sketch_counts(
        sk, mech.block(counts, level), mech.level_buckets(keys, level), joint=joint
    )
    if n_t == 0:
        return est, var, null, math.inf
    f = n / n_t
    return est * f, var * f * f, null * f * f, f


class _Pool:
    """Counts of one string from several levels, weighted by ``1/null variance``; ``levels``
    are the levels that measured it (for the exact null critical value)."""

    __slots__ = ("den", "levels", "num", "role", "var")

    def __init__(self) -> None:
        self.num = self.den = self.var = self.role = 0.0
        self.levels: list[int] = []

    def add(
        self, count: float, var: float, null: float, f: float, level: int | None = None
    ) -> None:
        weight = 1 / null
        self.num += weight * count
        self.den += weight
        self.var += weight**2 * var
        self.role += weight**2 * f
        if level is not None:
            self.levels.append(level)

    @property
    def count(self) -> float:
        return self.num / self.den

    def variance(self, n: int) -> float:
        role = self.role / self.den**2 - 1
        return self.var / self.den**2 + min(max(self.count, 0.0), n) * max(role, 0.0)

    @property
    def null(self) -> float:
        return 1 / self.den


#: The alphabet prior of ``discover``: a prefix whose last byte no heavy prefix (more than
#: ``SEEN_Z`` null standard errors above zero, at any level so far) has shown yet survives only
#: above ``ALPHABET_Z`` null standard errors (None: no prior).
ALPHABET_Z: float | None = 3.0
SEEN_Z = HEAVY_Z

#: Complete strings are ranked by ``count - FINAL_Z * null standard error``.
FINAL_Z = 2.0


def _final_score(pool: _Pool) -> float:
    """The rank of a complete string among the others: a lower confidence bound of its count,
    so that a string measured by one level, whose noise made it high, does not push out one
    measured precisely by many (a plain count favours the noisiest)."""
    return pool.count - FINAL_Z * math.sqrt(pool.null)


def _pooled_levels(mech: PrefixExtending, data: bytes) -> range:
    """Levels whose padded prefix identifies the whole string ``data``."""
    return range(min(len(data), mech.levels - 1), mech.levels)


def estimate_candidates(
    mech: OpenDomainMechanism,
    tally: SketchTally,
    candidates: Sequence[str],
    *,
    level: float = DEFAULT_LEVEL,
    min_reports: int = 1,
) -> CandidateEstimates:
    """The estimated count of each candidate string (see the module docstring)."""
    from aggregator.estimate import bonferroni_z, significance_level, z_value

    z_ci = z_value(level)
    checked = _check(mech, tally, min_reports)
    datas = _normalised(mech, candidates)
    n = checked.n
    if isinstance(mech, SketchOracle):
        est, var, null, _ = sketch_counts(
            mech.sketch, checked.counts, mech.buckets(datas), joint=True
        )
    elif isinstance(mech, PrefixExtending):
        est, var, null = _pem_pooled(mech, checked.counts, n, datas)
    else:
        raise InvalidParameter(f"no estimator for {mech.name!r}")
    tested = significance_level(level)  # alpha = 1 - tested is below 1 (estimate.py)
    z = max(
        bonferroni_z(tested, len(datas)),
        _candidates_critical_z(mech, checked.counts, datas, (1 - tested) / len(datas)),
    )
    items = [
        CandidateCount(
            value=to_text(d),
            count=float(c),
            std_error=float(math.sqrt(v)),
            ci_low=float(c - z_ci * math.sqrt(v)),
            ci_high=float(c + z_ci * math.sqrt(v)),
            significant=bool(c > z * math.sqrt(v0)),
        )
        for d, c, v, v0 in zip(datas, est, var, null, strict=True)
    ]
    return CandidateEstimates(
        mechanism=mech.name,
        params=mech.params(),
        epsilon=mech.epsilon,
        realised_epsilon=mech.realised_epsilon,
        n=n,
        level=level,
        candidates=[i.value for i in items],
        counts=[i.count for i in items],
        std_errors=[i.std_error for i in items],
        items=items,
        z=z,
    )


def _candidates_critical_z(
    mech: OpenDomainMechanism, counts: np.ndarray, datas: list[bytes], tail: float
) -> float:
    """The exact binomial critical value (:func:`binomial_critical_z`) of a null count at the
    candidates' one-sided ``tail``, the largest over the sketches that measure them (one for
    ``cms``/``hcms``; for ``pem`` the levels that identify each string). ``-inf`` when none
    holds a report, so the Gaussian z stands."""
    if isinstance(mech, SketchOracle):
        sketches = [(mech.sketch, counts)]
    else:
        assert isinstance(mech, PrefixExtending)
        levels = sorted({t for d in datas for t in _pooled_levels(mech, d)})
        sketches = [(mech.sketches[t], mech.block(counts, t)) for t in levels]
    out = -math.inf
    for sketch, block in sketches:
        n_b = sketch.reports_in(block)
        if n_b:
            out = max(out, binomial_critical_z(n_b, sketch.null_bernoulli[0], tail))
    return out


def _pem_pooled(
    mech: PrefixExtending, counts: np.ndarray, n: int, datas: list[bytes]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pooled counts over the levels that identify each string (see :class:`_Pool`).

    At each level every candidate's prefix is solved jointly (so the candidates' collisions
    with each other cancel, even those of prefixes that do not identify a whole string yet).
    """
    pools = [_Pool() for _ in datas]
    for t in range(mech.levels):
        idx = [i for i, d in enumerate(datas) if t in _pooled_levels(mech, d)]
        if not idx:
            continue
        keys = sorted({mech.prefix(d, t) for d in datas})
        position = {key: j for j, key in enumerate(keys)}
        est, var, null, f = pem_level_estimates(mech, counts, n, keys, t, joint=True)
        for i in idx:
            j = position[mech.prefix(datas[i], t)]
            if np.isfinite(null[j]):
                pools[i].add(float(est[j]), float(var[j]), float(null[j]), f, t)
    pooled = np.array([p.count if p.den else 0.0 for p in pools])
    var = np.array([p.variance(n) if p.den else np.inf for p in pools])
    null = np.array([p.null if p.den else np.inf for p in pools])
    return pooled, var, null


#: The bytes that may follow a prefix in valid UTF-8: inside a character only continuation
#: bytes; else the end (NUL), ASCII or a lead byte (0xC0, 0xC1 and 0xF5-0xFF never occur).
_NEXT = {
    True: list(range(0x80, 0xC0)),
    False: [0, *range(0x01, 0x80), *range(0xC2, 0xF5)],
}


def _inside_character(prefix: bytes) -> bool:
    """Whether ``prefix`` ends inside a multi-byte UTF-8 character."""
    i = len(prefix) - 1
    while i >= 0 and 0x80 <= prefix[i] < 0xC0:
        i -= 1
    if i < 0:
        return False
    lead = prefix[i]
    need = 1 if 0xC2 <= lead <= 0xDF else 2 if 0xE0 <= lead <= 0xEF else 3 if lead >= 0xF0 else 0
    return len(prefix) - 1 - i < need


def discover(
    mech: OpenDomainMechanism,
    tally: SketchTally,
    *,
    top: int = 10,
    keep: int | None = None,
    level: float = DEFAULT_LEVEL,
    min_reports: int = 1,
) -> Discoveries:
    """The ``top`` heavy hitters of a discovery tally (``pem``), largest count first.

    The walk (docs/MECHANISMS.md §24): level ``t`` measures every extension by one byte of
    the ``keep`` (default ``max(3 top, 48)``) best incomplete prefixes of level ``t - 1``,
    and every complete string found so far (NUL-terminated), whose counts pool all the levels
    that identify them. Incomplete prefixes compete among themselves by this level's count;
    complete strings among themselves by ``count - FINAL_Z * null std error`` (a string that
    one noisy level made high does not push out one that many levels measured), ``keep`` of
    each. Alphabet prior: an extension by a byte that no heavy prefix (``SEEN_Z`` null
    standard errors) has shown yet must itself be ``ALPHABET_Z`` null standard errors above
    zero, so the noise prefixes of bytes the population does not use stop competing with the
    real ones (with ~150 extensions per prefix, keeping the best ``keep`` needs ~2.5 standard
    errors; among the ~30 bytes the population uses, ~1.8). A heavy hitter with a byte no
    other heavy prefix uses is still found once its prefixes are ``ALPHABET_Z`` standard
    errors high. Everything is post-processing of the tally (no privacy cost).
    :class:`Discoveries` gives the threshold.
    """
    from aggregator.estimate import bonferroni_z, significance_level, z_value

    z_ci = z_value(level)
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise InvalidParameter(f"top must be a positive integer, got {top!r}")
    if not getattr(mech, "discovers", False):
        raise InvalidParameter(
            f"{getattr(mech, 'name', mech)!r} is a frequency oracle: it estimates candidates "
            "(aggregator.estimate(mech, tally, candidates=[...])) but cannot discover them; "
            "use 'pem'"
        )
    checked = _check(mech, tally, min_reports)
    assert isinstance(mech, PrefixExtending)
    keep = max(3 * top, 48) if keep is None else keep
    if isinstance(keep, bool) or not isinstance(keep, int) or keep < top:
        raise InvalidParameter(f"keep must be an integer >= top, got {keep!r}")
    n, counts, big = checked.n, checked.counts, mech.levels
    # A candidate: its bytes so far, NUL-terminated once complete (shorter than max_length).
    prefixes: list[bytes] = []  # incomplete: the ``keep`` best of the level, extended next
    finals: dict[bytes, _Pool] = {}  # complete strings, re-measured by every later level
    seen: set[int] = set()  # bytes of the prefixes found heavy so far (the alphabet prior)
    tested = 0
    for t in range(big):
        if t == 0:
            ext = [bytes([b]) for b in _NEXT[False][1:]]
        else:
            ext = [s + bytes([b]) for s in prefixes for b in _NEXT[_inside_character(s)]]
        cands = ext + [c for c in finals if c not in ext]
        keys = [c.ljust(t + 1, b"\x00")[: t + 1] for c in cands]
        est, var, null, f = pem_level_estimates(mech, counts, n, keys, t, joint=HEAVY_Z)
        tested = len(ext)
        final_level = t == big - 1
        complete = np.fromiter(
            (final_level or c.endswith(b"\x00") for c in cands), dtype=bool, count=len(cands)
        )
        ok = complete & np.isfinite(null)
        for i in np.flatnonzero(ok).tolist():
            finals.setdefault(cands[i], _Pool()).add(
                float(est[i]), float(var[i]), float(null[i]), f, t
            )
        # Prefixes compete with prefixes only (same level, same null variance); complete
        # strings with complete strings, by their pooled counts (FINAL_Z: see _final_score).
        open_ = np.flatnonzero(~complete)
        z_open = est[open_] / np.sqrt(null[open_])
        seen |= {cands[i][-1] for i in open_[z_open > SEEN_Z].tolist()}
        if t > 0 and ALPHABET_Z is not None:
            usual = np.fromiter((cands[i][-1] in seen for i in open_.tolist()), bool, open_.size)
            open_ = open_[usual | (z_open > ALPHABET_Z)]
        best = open_[np.argsort(-est[open_], kind="stable")[:keep]]
        prefixes = [cands[i] for i in best.tolist()]
        ranked = sorted(finals, key=lambda c: (-_final_score(finals[c]), c))
        finals = {c: finals[c] for c in ranked[:keep]}
    chosen = sorted(list(finals)[:top], key=lambda c: (-finals[c].count, c))
    alpha = 1 - significance_level(level)  # below 1 for every level (estimate.py)
    # The correction's family: the last level's new strings, at least one (a last level that
    # extended no prefix, as with a few reports, takes a single test's z). The answer reports
    # this number as ``candidates_tested``: it said 0 beside a z that used 1.
    tested = max(1, tested)
    z_normal = bonferroni_z(significance_level(level), tested)
    tail = alpha / tested
    exact: dict[int, float] = {}

    def z_at(t: int) -> float:
        """The Bonferroni z, raised to the exact binomial critical value of a null count at
        level ``t`` where that is larger (few reports: heavier tails than a Gaussian)."""
        if t not in exact:
            sketch = mech.sketches[t]
            n_t = sketch.reports_in(mech.block(counts, t))
            pi, _ = sketch.null_bernoulli
            exact[t] = max(z_normal, binomial_critical_z(n_t, pi, tail)) if n_t else z_normal
        return exact[t]

    last = mech.sketches[-1]
    n_last = last.reports_in(mech.block(counts, big - 1))
    w = last.width
    sigma0 = (
        math.sqrt((w / (w - 1)) ** 2 * n_last * last.v_other) * n / n_last if n_last else math.inf
    )
    z = z_at(big - 1)
    items = []
    for c in chosen:
        pool = finals[c]
        count, se, se0 = pool.count, math.sqrt(pool.variance(n)), math.sqrt(pool.null)
        # A string pooled over several levels: the largest of their critical values (pooling
        # averages their skews, so this errs on the side of fewer discoveries).
        z_item = max(z_at(t) for t in pool.levels)
        items.append(
            DiscoveredItem(
                value=to_text(c),
                count=float(count),
                std_error=float(se),
                ci_low=float(count - z_ci * se),
                ci_high=float(count + z_ci * se),
                significant=bool(count > z_item * se0),
            )
        )
    return Discoveries(
        mechanism=mech.name,
        params=mech.params(),
        epsilon=mech.epsilon,
        realised_epsilon=mech.realised_epsilon,
        n=n,
        top=top,
        level=level,
        alpha=alpha,
        z=z,
        sigma0=sigma0,
        threshold=z * sigma0,
        candidates_tested=tested,
        items=items,
    )
