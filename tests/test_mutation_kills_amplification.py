"""Shuffle amplification's pieces checked on their stated contracts (issue 21).

``tests/test_aggregator_amplification.py`` holds the answer to within 1% of an independent
reference, which leaves room for a search that stops one grid point off (the grid step is
2^(1/1024), 0.07%), for a wrong starting guess (the search verifies every value, so only time
is lost) and for small errors in ln x! (a few 1e-12). Mutation testing (docs/MUTATION.md) left
such changes alive. Here each piece is checked exactly against what its docstring states:

- the answer is the smallest grid point whose δ, as the module computes it, is at most the
  target (one grid step below is not), and ``_search`` returns what plain bisection over the
  grid returns for any non-increasing δ, including plateaus that stall the secant;
- the search takes fewer evaluations of δ than plain bisection over the grid would;
- the starting guess is the ε of μ-Gaussian DP (SciPy's normal CDF, root by ``brentq``);
- ln x! by Stirling's series matches ``math.lgamma`` within the series' first omitted term;
- the clone-count window's tail charges are the Chernoff bounds of the counts left out, at most
  the allowed share of δ, and bound SciPy's exact binomial tails.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from scipy import optimize, special, stats

from aggregator.amplification import (
    _GRID,
    _J_MIN,
    _TAIL_SHARE,
    _CloneBound,
    _gaussian_guess,
    _log_factorial,
    _lower_window,
    _search,
    _stirling,
    _upper_window,
    amplified_epsilon,
)

U = 2.0**-53  # unit roundoff of a float64

POINTS = [
    (n, eps0, delta)
    for n in (1_000, 10_000, 100_000)
    for eps0 in (0.1, 1.0, 4.0, 8.0)
    for delta in (1e-10, 1e-4)
]


def grid_point(j: int) -> float:
    return 2.0 ** (j / _GRID)


def plain_bisection(ok: Callable[[int], bool], j_lo: int, j_hi: int) -> tuple[int, int]:
    """The smallest j in (j_lo, j_hi] with ok(j), for ok false-then-true; and its call count."""
    lo, hi, calls = j_lo, j_hi, 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        calls += 1
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, calls


@pytest.fixture(autouse=True)
def time_limit() -> Iterator[None]:
    """Fail, rather than hang, when a search or a window bisection loops: every test here
    takes well under a second; a broken loop would otherwise run until the mutation tool's
    timeout."""
    seconds = 60.0

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"the test did not finish in {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, previous)


# -- the answer is exactly the smallest sufficient grid point ---------------------------------


@pytest.mark.parametrize(("n", "eps0", "delta"), POINTS)
def test_answer_is_the_smallest_grid_point_whose_delta_is_small_enough(
    n: int, eps0: float, delta: float
) -> None:
    eps = amplified_epsilon(eps0, n, delta)
    bound = _CloneBound(n, eps0, delta)
    assert bound.delta(0.0) > delta  # none of these points is (0, δ)-DP already
    j_top = math.ceil(_GRID * math.log2(eps0))  # the first grid point at or above ε0
    if eps == eps0:
        j = j_top
    else:
        j = round(_GRID * math.log2(eps))
        assert eps == grid_point(j) and _J_MIN < j < j_top  # on the grid, below ε0
    assert bound.delta(min(eps0, grid_point(j))) <= delta
    assert bound.delta(grid_point(j - 1)) > delta  # one grid step less is not enough


# -- _search against plain bisection over the grid --------------------------------------------


def _step_delta(breaks: np.ndarray, levels: np.ndarray) -> Callable[[float], float]:
    """δ(ε) = levels[i] on [breaks[i-1], breaks[i]): non-increasing when levels are."""

    def delta_of(eps: float) -> float:
        return float(levels[np.searchsorted(breaks, eps, side="right")])

    return delta_of


def _synthetic_cases() -> list[tuple[str, Callable[[float], float], float, float, int, int]]:
    """(name, δ, target, slack, j_lo, j_hi): non-increasing δ with δ(0) > target and
    δ(2^(j_hi/1024)) <= target, as ``_search`` assumes."""
    cases: list[tuple[str, Callable[[float], float], float, float, int, int]] = []
    target = 1e-6
    for slack in (0.0, 0.5 * target):  # a tail charge far below the target, and a large one
        for width in (1e-4, 1e-2, 1.0):

            def gauss(eps: float, slack: float = slack, width: float = width) -> float:
                # ln(δ − slack) linear in ε²: the shape the secant assumes
                return slack + (1.0 - slack) * math.exp(-(eps**2) / width)

            cases.append((f"gauss-{slack:g}-{width:g}", gauss, target, slack, _J_MIN, 3 * _GRID))
    rng = np.random.default_rng(21)
    near = [2.0, 1.0 + 1e-9, 1.0, 1.0 - 1e-9, 0.9, 0.5]  # levels around the target (x target)
    for i in range(150):
        slack = [0.0, 0.25 * target][i % 2]
        count = int(rng.integers(1, 7))
        levels = np.sort(rng.choice(near, size=count))[::-1] * target
        levels = np.concatenate(([2.0 * target], levels, [slack]))
        levels = np.maximum.accumulate(levels[::-1])[::-1]  # non-increasing
        breaks = np.sort(np.exp(rng.uniform(math.log(1e-9), math.log(4.0), size=levels.size - 1)))
        j_hi = math.ceil(_GRID * math.log2(breaks[-1])) + int(rng.integers(0, 3000))
        j_lo = _J_MIN if i % 3 else math.floor(_GRID * math.log2(breaks[0])) - 5
        cases.append((f"steps-{i}", _step_delta(breaks, levels), target, slack, j_lo, j_hi))
    return cases


@pytest.mark.parametrize(
    ("delta_of", "target", "slack", "j_lo", "j_hi"),
    [c[1:] for c in _synthetic_cases()],
    ids=[c[0] for c in _synthetic_cases()],
)
def test_search_returns_what_plain_bisection_over_the_grid_returns(
    delta_of: Callable[[float], float], target: float, slack: float, j_lo: int, j_hi: int
) -> None:
    def ok(j: int) -> bool:
        return delta_of(grid_point(j)) <= target

    assert delta_of(0.0) > target and ok(j_hi)
    expected, _ = plain_bisection(ok, j_lo, j_hi)
    for guess in (0.0, grid_point(expected), 3.0 * grid_point(j_hi)):
        got = _search(
            delta_of,
            target,
            at_zero=delta_of(0.0),
            slack=slack,
            j_lo=j_lo,
            j_hi=j_hi,
            guess=guess,
        )
        assert got == expected, (guess, got, expected)


def test_secant_finds_a_gaussian_tail_at_once_even_with_a_large_tail_charge() -> None:
    """ln(δ − slack) is exactly linear in ε² here: the secant on it lands on the root at its
    first step, so the whole search takes at most 6 evaluations (the guess, the secant point,
    one confirming step, then the grid point and its lower neighbour)."""
    target, slack, width = 1e-6, 0.5e-6, 1e-2
    calls: list[float] = []

    def delta_of(eps: float) -> float:
        calls.append(eps)
        return slack + (1.0 - slack) * math.exp(-(eps**2) / width)

    root = math.sqrt(width * math.log((1.0 - slack) / (target - slack)))
    j = _search(
        delta_of, target, at_zero=delta_of(0.0), slack=slack, j_lo=_J_MIN, j_hi=0, guess=0.05
    )
    calls.pop(0)  # the at_zero evaluation above
    assert j == math.ceil(_GRID * math.log2(root))
    assert len(calls) <= 6, calls


@pytest.mark.parametrize(("n", "eps0", "delta"), POINTS)
def test_search_takes_fewer_evaluations_than_plain_bisection(
    n: int, eps0: float, delta: float
) -> None:
    bound = _CloneBound(n, eps0, delta)
    j_hi = math.ceil(_GRID * math.log2(eps0))
    calls: list[float] = []

    def delta_of(eps: float) -> float:
        calls.append(eps)
        return bound.delta(eps)

    j = _search(
        delta_of,
        delta,
        at_zero=bound.delta(0.0),
        slack=bound.slack,
        j_lo=_J_MIN,
        j_hi=j_hi,
        guess=_gaussian_guess(n, eps0, delta),
    )
    expected, bisection_calls = plain_bisection(
        lambda i: bound.delta(min(eps0, grid_point(i))) <= delta, _J_MIN, j_hi
    )
    assert j == expected
    if j < j_hi:  # an amplified answer (at j_hi the secant has no root to find)
        assert len(calls) < bisection_calls, (len(calls), bisection_calls)


# -- the starting guess: the ε of μ-Gaussian DP -----------------------------------------------


@pytest.mark.parametrize(
    ("n", "eps0", "delta"),
    [(1_000, 1.0, 1e-6), (10_000, 0.5, 1e-8), (100_000, 4.0, 1e-6), (10**7, 2.0, 1e-10)],
)
def test_guess_is_the_epsilon_of_gaussian_dp_at_the_mean_clone_count(
    n: int, eps0: float, delta: float
) -> None:
    alpha = math.exp(eps0) / (math.exp(eps0) + 1.0)
    c = (n - 1) * math.exp(-eps0)  # the mean clone count (at least 1 at these points)
    assert c >= 1.0
    mu = 2.0 * (2.0 * alpha - 1.0) / math.sqrt(c)

    def gdp(eps: float) -> float:  # δ(ε) of μ-GDP: Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)
        return float(
            stats.norm.cdf(-eps / mu + mu / 2) - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2)
        )

    assert gdp(eps0) < delta < gdp(0.0)  # the root lies inside (0, ε0)
    root = optimize.brentq(lambda e: gdp(e) - delta, 0.0, eps0, xtol=1e-300, rtol=8 * U)
    # Tolerance: the guess bisects (0, ε0) 60 times (width ε0·2^-60); each Φ term is evaluated
    # with relative error <= 8U(1 + a²) (erfc to an ulp, its argument a to a few ulps, relative
    # sensitivity |a|φ(a)/Φ(a) <= 1 + a²), which moves the root by that error over |δ'(ε)| =
    # e^ε Φ(−ε/μ − μ/2); brentq's own rtol (its least, 8U) adds 8U·root.
    a1, a2 = -root / mu + mu / 2, -root / mu - mu / 2
    t1, t2 = stats.norm.cdf(a1), math.exp(root) * stats.norm.cdf(a2)
    err = 8 * U * ((1 + a1**2) * t1 + (1 + a2**2) * t2)
    tol = eps0 * 2.0**-60 + 8 * U * root + 2 * err / t2
    assert tol < 1e-9 * root  # the check is sharp
    assert abs(_gaussian_guess(n, eps0, delta) - root) <= tol


def test_guess_is_epsilon0_when_gaussian_dp_gives_no_amplification() -> None:
    # n = 2: one clone at most, μ = 2 tanh(ε0/2) is large and δ(ε0) of μ-GDP exceeds 1e-10.
    assert _gaussian_guess(2, 4.0, 1e-10) == 4.0


# -- ln x!: the table and Stirling's series ---------------------------------------------------


@pytest.mark.parametrize("x", [16, 32, 100, 1023, 1024, 1025, 5_000, 10**6])
def test_stirling_series_matches_lgamma_within_its_first_omitted_term(x: int) -> None:
    value = float(_stirling(np.array([float(x)]))[0])
    # The series stops after the x^-5 term; the first omitted one is 1/(1680 x^7). Rounding:
    # about 8 operations on magnitudes up to (x + 1/2) ln x, and lgamma's few ulps.
    tol = 1.0 / (1680.0 * x**7) + 8 * math.ulp((x + 0.5) * math.log(x))
    assert abs(value - math.lgamma(x + 1.0)) <= tol


def test_log_factorial_is_exact_on_both_sides_of_the_table() -> None:
    x = np.array([0, 1, 2, 10, 1023, 1024, 1025, 4096, 123_456], dtype=np.int64)
    got = _log_factorial(x)
    want = np.array([math.lgamma(v + 1.0) for v in x])
    tol = 8 * np.array([math.ulp(max(1.0, (v + 0.5) * math.log(max(v, 1)))) for v in x])
    assert (np.abs(got - want) <= tol).all(), got - want
    assert got[0] == got[1] == 0.0  # ln 0! = ln 1! = 0
    big = np.array([1024, 2048], dtype=np.int64)  # every entry above the table
    np.testing.assert_allclose(
        _log_factorial(big), [math.lgamma(1025.0), math.lgamma(2049.0)], rtol=8 * U, atol=0
    )


# -- the clone-count window -------------------------------------------------------------------


def _chernoff(m: int, p: float, a: int) -> tuple[float, float]:
    """exp(−m KL(a/m || p)), which bounds P[Bin(m, p) <= a] below the mean and P[>= a] above
    it, and the relative difference two float evaluations of it may show: the exponent is
    m (x ln(x/p) + (1 − x) ln((1 − x)/(1 − p))) with each logarithm's argument within a few U,
    so each logarithm within a few U absolutely and the exponent within 4U·m, the bound 8U·m."""
    x = a / m
    kl = float(special.rel_entr(x, p) + special.rel_entr(1 - x, 1 - p))
    return math.exp(-m * kl), 8 * U * m


@pytest.mark.parametrize(
    ("m", "p", "tau"),
    [
        (999, math.exp(-1.0), 1e-16),
        (99_999, math.exp(-4.0), 1e-16),
        (99_999, math.exp(-8.0), 1e-10),
        (9_999_999, math.exp(-2.0), 1e-14),
        (1_000, math.exp(-0.1), 1e-6),
    ],
)
def test_windows_charge_the_chernoff_bound_of_the_counts_left_out(
    m: int, p: float, tau: float
) -> None:
    c_lo, low = _lower_window(m, p, tau)
    c_hi, high = _upper_window(m, p, tau)
    assert 0 <= c_lo <= m * p <= c_hi <= m
    # Below: the counts 0 .. c_lo - 1 are left out, charged their Chernoff bound (<= tau), which
    # bounds SciPy's exact tail; c_lo itself could not be left out (its bound exceeds tau).
    if c_lo > 0:
        charge, rel = _chernoff(m, p, c_lo - 1)
        assert low == pytest.approx(charge, rel=rel, abs=0)
        assert low <= tau
        assert low >= stats.binom.cdf(c_lo - 1, m, p)
    else:
        assert low == 0.0
    assert _chernoff(m, p, c_lo)[0] > tau
    # Above: the counts c_hi + 1 .. m, likewise.
    if c_hi < m:
        charge, rel = _chernoff(m, p, c_hi + 1)
        assert high == pytest.approx(charge, rel=rel, abs=0)
        assert high <= tau
        assert high >= stats.binom.sf(c_hi, m, p)
    else:
        assert high == 0.0
    assert _chernoff(m, p, c_hi)[0] > tau


def test_clone_bound_sums_exactly_the_window_and_charges_the_rest() -> None:
    n, eps0, delta = 100_000, 4.0, 1e-6
    bound = _CloneBound(n, eps0, delta)
    m, p = n - 1, math.exp(-eps0)
    tau = _TAIL_SHARE * delta
    c_lo, low = _lower_window(m, p, tau)
    c_hi, high = _upper_window(m, p, tau)
    assert (bound.c[0], bound.c[-1]) == (c_lo, c_hi)
    assert bound.slack == low + high <= 2 * tau
    # ln pmf is a sum of log-factorials up to ln m! (about 1e6 here), each within a few of its
    # ulps, so the pmf is within 16 ulps of ln m! relatively (SciPy's pmf is far closer).
    rel = 16 * math.ulp(math.lgamma(m + 1.0))
    np.testing.assert_allclose(bound.pmf, stats.binom.pmf(bound.c, m, p), rtol=rel, atol=0)
