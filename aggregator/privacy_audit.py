"""Black-box privacy audit: an empirical lower bound on a mechanism's epsilon.

Recipe (docs/MECHANISMS.md §14): for neighbouring inputs ``a`` and ``b`` run the mechanism's own
``perturb`` N times on each, count how often an output event E happens (``x`` of N for ``a``,
``x'`` for ``b``), and bound ``P[E | a] / P[E | b]`` from below with Clopper-Pearson intervals:
``eps_lb = ln(p_lo(x) / p_hi(x'))``. If ``eps_lb`` exceeds the claimed epsilon the implementation
violates its guarantee with confidence ``1 - alpha``.

The events are fixed before sampling, from the mechanism's support function: "the report
supports a and not b", its complement, and both with a and b swapped. For every mechanism here the
first event attains the largest probability ratio ``e^epsilon`` exactly, so the audit has power;
Bonferroni over the four events keeps the overall level at ``alpha``. A passing audit is only a
lower bound: it complements the white-box tests that compute the exact ratios.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism

DEFAULT_SAMPLES = 1_000_000
DEFAULT_ALPHA = 0.05
PATHS = ("device", "vectorised")
_CHUNK = 50_000


@dataclass(frozen=True)
class EventBound:
    """One event's counts and the lower bound it gives."""

    event: str
    hits_first: int  # occurrences among the samples of the input the event favours
    hits_second: int
    epsilon_lower: float


@dataclass(frozen=True)
class AuditResult:
    mechanism: str
    claimed_epsilon: float
    realised_epsilon: float
    k: int
    samples: int
    alpha: float
    path: str
    events: tuple[EventBound, ...]

    @property
    def epsilon_lower(self) -> float:
        """The best (largest) lower bound over the events; 0 when no event gives one."""
        return max(0.0, *(e.epsilon_lower for e in self.events))

    @property
    def violation(self) -> bool:
        """Whether the lower bound exceeds the mechanism's own (realised) epsilon."""
        return self.epsilon_lower > self.realised_epsilon

    @property
    def power(self) -> float:
        """The lower bound as a fraction of the claim."""
        return self.epsilon_lower / self.claimed_epsilon

    def to_dict(self) -> dict[str, object]:
        return {
            "mechanism": self.mechanism,
            "claimed_epsilon": self.claimed_epsilon,
            "realised_epsilon": self.realised_epsilon,
            "epsilon_lower_bound": self.epsilon_lower,
            "k": self.k,
            "samples": self.samples,
            "alpha": self.alpha,
            "path": self.path,
            "violation": self.violation,
            "events": [e.__dict__ for e in self.events],
        }


def clopper_pearson(hits: int, trials: int, alpha: float) -> tuple[float, float]:
    """Exact two-sided ``1 - alpha`` binomial interval for the success probability."""
    from scipy.stats import beta  # scipy is in the 'sim' and 'dev' extras

    lo = 0.0 if hits == 0 else float(beta.ppf(alpha / 2, hits, trials - hits + 1))
    hi = 1.0 if hits == trials else float(beta.ppf(1 - alpha / 2, hits + 1, trials - hits))
    return lo, hi


def _bound(x: int, x2: int, n: int, alpha: float) -> float:
    """``ln(p_lo(x) / p_hi(x2))`` at level alpha, or -inf when x = 0."""
    p_lo, _ = clopper_pearson(x, n, alpha)
    _, p_hi = clopper_pearson(x2, n, alpha)
    return math.log(p_lo / p_hi) if p_lo > 0 else -math.inf


def sample_reports(
    mech: Mechanism,
    index: int,
    samples: int,
    *,
    path: str,
    rng: np.random.Generator | None,
    progress: Callable[[int], None] | None = None,
) -> np.ndarray:
    """``samples`` reports for input ``index`` as a batch array, through the chosen path.

    ``device``: the SDK's own ``perturb`` one call at a time (OS randomness unless ``rng``), each
    report serialised to its wire form and parsed back, exactly what a collector receives.
    ``vectorised``: ``perturb_many``, which the exact-distribution tests tie to the same law.
    """
    parts = []
    done = 0
    while done < samples:
        size = min(_CHUNK, samples - done)
        if path == "device":
            payloads = [mech.perturb_index(index, rng=rng) for _ in range(size)]
            parts.append(mech.decode_many(payloads))
        else:
            parts.append(mech.perturb_many(np.full(size, index), rng=rng))
        done += size
        if progress is not None:
            progress(size)
    return np.concatenate(parts)


def audit(
    mech: Mechanism,
    *,
    samples: int = DEFAULT_SAMPLES,
    alpha: float = DEFAULT_ALPHA,
    pair: tuple[int, int] = (0, 1),
    path: str = "device",
    rng: np.random.Generator | None = None,
    progress: Callable[[int], None] | None = None,
) -> AuditResult:
    """Audit ``mech`` on the neighbouring inputs ``pair`` with ``samples`` reports each."""
    if not isinstance(mech, Mechanism):
        raise InvalidParameter(f"mech must be a Mechanism, got {type(mech).__name__}")
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 100:
        raise InvalidParameter(f"samples must be an integer >= 100, got {samples!r}")
    if not 0 < alpha < 1:
        raise InvalidParameter(f"alpha must be in (0, 1), got {alpha!r}")
    if path not in PATHS:
        raise InvalidParameter(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    a, b = pair
    if a == b or not (0 <= a < mech.k and 0 <= b < mech.k):
        raise InvalidParameter(f"pair must be two distinct indices in [0, {mech.k}), got {pair}")
    reports = {
        i: sample_reports(mech, i, samples, path=path, rng=rng, progress=progress) for i in (a, b)
    }
    level = alpha / 4  # Bonferroni over the four events below
    events = []
    for first, second in ((a, b), (b, a)):
        # E: "supports `first`, not `second`": favours input `first`.
        in_first = {
            i: mech.supports(reports[i], first) & ~mech.supports(reports[i], second) for i in (a, b)
        }
        x, x2 = int(in_first[first].sum()), int(in_first[second].sum())
        label = f"supports {first} and not {second}"
        events.append(EventBound(label, x, x2, _bound(x, x2, samples, level)))
        # The complement favours `second`.
        y, y2 = samples - x2, samples - x
        events.append(EventBound(f"not ({label})", y, y2, _bound(y, y2, samples, level)))
    return AuditResult(
        mechanism=mech.name,
        claimed_epsilon=mech.epsilon,
        realised_epsilon=mech.realised_epsilon,
        k=mech.k,
        samples=samples,
        alpha=alpha,
        path=path,
        events=tuple(events),
    )
