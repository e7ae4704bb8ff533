"""The explicit registry of mechanisms, presets, ``auto`` and rebuilding from a config."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.base import Mechanism
from client_sdk.mechanisms.grr import GeneralizedRR, RandomizedResponse
from client_sdk.mechanisms.hadamard import HadamardResponse
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.olh import OptimizedLocalHashing
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
    mean_variance: float  # per-report count variance averaged over a uniform domain
    report_bytes: int
    excluded: str | None  # why it cannot be chosen, or None


@dataclass(frozen=True)
class AutoChoice:
    chosen: Mechanism
    candidates: tuple[Candidate, ...]

    @property
    def reason(self) -> str:
        c = self.chosen
        rivals = [x for x in self.candidates if x.excluded is None and x.name != c.name]
        text = (
            f"{c.name} has the smallest estimator variance for epsilon={c.epsilon:g}, k={c.k}: "
            f"{c.mean_variance():.4g} per report (v0 + beta/k)"
        )
        if rivals:
            best = min(rivals, key=lambda x: x.mean_variance)
            text += f"; next best {best.name} {best.mean_variance:.4g}"
        return text


def compare(
    epsilon: float, domain: Sequence[str] | int, *, max_report_bytes: int | None = None
) -> AutoChoice:
    """Build every candidate for (epsilon, domain) and pick the one with the smallest variance.

    The criterion is :meth:`Mechanism.mean_variance` (``v0 + beta/k``: the count variance per
    report averaged over the domain for uniform data); ties go to the smaller report. With
    ``max_report_bytes`` larger reports are excluded.
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
    rows = []
    for name in AUTO_CANDIDATES:
        cls = MECHANISMS[name]
        try:
            mech = cls(epsilon=epsilon, domain=domain)
        except InvalidParameter as exc:
            k = domain if isinstance(domain, int) else len(domain)
            if k > cls.max_k:
                rows.append(Candidate(name, None, float("inf"), 0, f"k > {cls.max_k}"))
                continue
            raise exc
        excluded = None
        if max_report_bytes is not None and mech.report_bytes > max_report_bytes:
            excluded = f"report {mech.report_bytes} B > cap {max_report_bytes} B"
        rows.append(Candidate(name, mech, mech.mean_variance(), mech.report_bytes, excluded))
    usable = [r for r in rows if r.excluded is None]
    if not usable:
        raise InvalidParameter(
            f"no mechanism fits a report of at most {max_report_bytes} bytes for this domain"
        )
    best = min(usable, key=lambda r: (round(r.mean_variance, 12), r.report_bytes))
    assert best.mechanism is not None
    return AutoChoice(best.mechanism, tuple(rows))


def create(
    name: str,
    *,
    epsilon: float | None = None,
    domain: Sequence[str] | int,
    max_report_bytes: int | None = None,
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
        return compare(epsilon, domain, max_report_bytes=max_report_bytes).chosen
    if max_report_bytes is not None:
        raise InvalidParameter("max_report_bytes applies only to 'auto'")
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
