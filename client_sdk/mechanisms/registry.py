"""The explicit registry of mechanisms, presets, ``auto`` and rebuilding from a config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.base import Mechanism
from client_sdk.mechanisms.criterion import FIXED_SUM, check_expected, expected_mean_variance
from client_sdk.mechanisms.grr import GeneralizedRR, RandomizedResponse
from client_sdk.mechanisms.hadamard import HadamardResponse
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.olh import OptimizedLocalHashing, optimal_hash_range
from client_sdk.mechanisms.subset import SubsetSelection
from client_sdk.mechanisms.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding
from client_sdk.mechanisms.validation import check_epsilon

MECHANISMS: dict[str, type[Mechanism]] = {
    "rr": RandomizedResponse,
    "grr": GeneralizedRR,
    "sue": SymmetricUnaryEncoding,
    "oue": OptimizedUnaryEncoding,
    "olh": OptimizedLocalHashing,
    "hr": HadamardResponse,
    "ss": SubsetSelection,
    "rappor": RapporUnary,
}

#: Named parameter sets: name -> (mechanism, fixed parameters).
PRESETS: dict[str, tuple[str, dict[str, Any]]] = {
    # 'Programming Differential Privacy' ch. 13: two fair coins, epsilon = ln 3.
    "rr-two-coin": ("rr", {"p": 0.75}),
    # 'Programming Differential Privacy' ch. 13: unary encoding, p = .75, q = .25, epsilon = ln 9.
    "sue-book": ("sue", {"p": 0.75}),
}

#: What ``auto`` chooses among (rr is grr at k = 2).
AUTO_CANDIDATES = ("grr", "oue", "olh", "ss", "hr", "sue")


@dataclass(frozen=True)
class Candidate:
    """One row of the ``auto`` comparison."""

    name: str
    mechanism: Mechanism | None
    #: The criterion: per-report count variance averaged over the k values, after the sum
    #: constraint, at the expected frequencies (``criterion.expected_mean_variance``).
    mean_variance: float
    report_bytes: int
    excluded: str | None  # why it cannot be chosen, or None


@dataclass(frozen=True)
class AutoChoice:
    chosen: Mechanism
    candidates: tuple[Candidate, ...]
    #: The frequencies the criterion averaged over (None: uniform).
    expected: tuple[float, ...] | None = None

    @property
    def reason(self) -> str:
        c = self.chosen
        rivals = [x for x in self.candidates if x.excluded is None and x.name != c.name]
        mine = next(x.mean_variance for x in self.candidates if x.name == c.name)
        over = "uniform frequencies" if self.expected is None else "the expected frequencies"
        text = (
            f"{c.name} has the smallest estimator variance for epsilon={c.epsilon:g}, k={c.k}: "
            f"{mine:.4g} per report (mean count variance over the values at {over}, "
            "after the sum constraint)"
        )
        if rivals:
            best = min(rivals, key=lambda x: x.mean_variance)
            text += f"; next best {best.name} {best.mean_variance:.4g}"
        return text


def expected_variance(mechanism: Mechanism, expected: Sequence[float] | None = None) -> float:
    """The selection criterion for a built mechanism (its exact ``p*``/``q*``).

    Per-report count variance averaged over the k values at the ``expected`` frequencies
    (uniform when None), after the sum constraint every default post-processing enforces; see
    :mod:`client_sdk.mechanisms.criterion`.
    """
    return expected_mean_variance(
        mechanism.p_star,
        mechanism.q_star,
        mechanism.k,
        fixed_sum=mechanism.name in FIXED_SUM,
        expected=check_expected(expected, mechanism.k),
    )


def compare(
    epsilon: float,
    domain: Sequence[str] | int,
    *,
    max_report_bytes: int | None = None,
    expected: Sequence[float] | None = None,
) -> AutoChoice:
    """Build every candidate for (epsilon, domain) and pick the one with the smallest variance.

    The criterion is :func:`expected_variance`: the count variance per report averaged over the
    domain at the ``expected`` frequencies (uniform unless given; e.g. declared by the campaign
    or the previous windows' estimates), after the sum constraint. Ties go to the smaller
    report. With ``max_report_bytes`` larger reports are excluded. Deterministic: the same
    arguments always give the same mechanism and parameters.
    """
    check_epsilon(epsilon)
    if max_report_bytes is not None and (
        isinstance(max_report_bytes, bool)
        or not isinstance(max_report_bytes, int)
        or max_report_bytes < 1
    ):
        raise InvalidParameter(
            f"max_report_bytes must be an integer >= 1, got {max_report_bytes!r}"
        )
    k_all = domain if isinstance(domain, int) else len(domain)
    weights = check_expected(expected, k_all) if isinstance(k_all, int) else None
    rows = []
    for name in AUTO_CANDIDATES:
        cls = MECHANISMS[name]
        extra: dict[str, Any] = {}
        if name == "olh" and weights is not None:
            extra["g"] = optimal_hash_range(epsilon, k_all, weights)
        try:
            mech = cls(epsilon=epsilon, domain=domain, **extra)
        except InvalidParameter as exc:
            k = domain if isinstance(domain, int) else len(domain)
            if k > cls.max_k:
                rows.append(Candidate(name, None, float("inf"), 0, f"k > {cls.max_k}"))
                continue
            raise exc
        excluded = None
        if max_report_bytes is not None and mech.report_bytes > max_report_bytes:
            excluded = f"report {mech.report_bytes} B > cap {max_report_bytes} B"
        rows.append(
            Candidate(name, mech, expected_variance(mech, weights), mech.report_bytes, excluded)
        )
    usable = [r for r in rows if r.excluded is None]
    if not usable:
        raise InvalidParameter(
            f"no mechanism fits a report of at most {max_report_bytes} bytes for this domain"
        )
    best = min(usable, key=lambda r: (round(r.mean_variance, 12), r.report_bytes))
    assert best.mechanism is not None
    return AutoChoice(best.mechanism, tuple(rows), weights)


def create(
    name: str,
    *,
    epsilon: float | None = None,
    domain: Sequence[str] | int,
    max_report_bytes: int | None = None,
    expected: Sequence[float] | None = None,
    **params: Any,
) -> Mechanism:
    """Build a mechanism by name (see ``MECHANISMS``), preset (``PRESETS``) or ``"auto"``.

    >>> mech = create("oue", epsilon=1.0, domain=["a", "b", "c"])
    """
    if not isinstance(name, str):
        raise InvalidParameter(f"mechanism name must be a string, got {type(name).__name__}")
    if name == "auto":
        if params:
            raise InvalidParameter(f"'auto' takes no mechanism parameters, got {sorted(params)}")
        if epsilon is None:
            raise InvalidParameter("'auto' needs epsilon")
        return compare(epsilon, domain, max_report_bytes=max_report_bytes, expected=expected).chosen
    if max_report_bytes is not None:
        raise InvalidParameter("max_report_bytes applies only to 'auto'")
    if expected is not None:
        raise InvalidParameter("expected applies only to 'auto'")
    if name in PRESETS:
        base, fixed = PRESETS[name]
        return MECHANISMS[base](epsilon=epsilon, domain=domain, **fixed, **params)  # type: ignore[arg-type]
    if name not in MECHANISMS:
        known = ", ".join([*MECHANISMS, *PRESETS, "auto"])
        raise InvalidParameter(f"unknown mechanism {name!r}; known: {known}")
    if epsilon is None and not params:
        raise InvalidParameter(f"mechanism {name!r} needs epsilon")
    try:
        return MECHANISMS[name](epsilon=epsilon, domain=domain, **params)  # type: ignore[arg-type]
    except TypeError as exc:
        raise InvalidParameter(f"bad parameters for {name!r}: {exc}") from None


def from_config(config: Mapping[str, Any]) -> Mechanism:
    """Rebuild a mechanism from :meth:`Mechanism.config` output."""
    try:
        name, epsilon, domain = config["mechanism"], config["epsilon"], config["domain"]
        params = dict(config.get("params") or {})
    except (KeyError, TypeError, AttributeError) as exc:
        raise InvalidParameter(f"not a mechanism config: missing {exc}") from None
    if not isinstance(domain, list):
        raise InvalidParameter("config 'domain' must be a list of labels")
    if name not in MECHANISMS:
        raise InvalidParameter(f"unknown mechanism {name!r} in config")
    mech = create(name, epsilon=epsilon, domain=domain, **params)
    return mech
