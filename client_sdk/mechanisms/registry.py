"""The one registry of mechanisms (categorical and numeric), presets, ``auto``, from_config.

``create(name, epsilon=..., domain=labels)`` builds a frequency oracle (``MECHANISMS``,
``PRESETS``, ``"auto"``); ``create(name, epsilon=..., bounds=(low, high))`` a numeric mechanism
(``NUMERIC_MECHANISMS``, ``"auto"``: the mean mechanism of smallest worst-case variance).
``REGISTRY`` maps every name to its class; ``kind_of(name)`` says what it estimates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Union, overload

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.base import Mechanism
from client_sdk.mechanisms.criterion import FIXED_SUM, check_expected, expected_mean_variance
from client_sdk.mechanisms.grr import GeneralizedRR, RandomizedResponse
from client_sdk.mechanisms.hadamard import HadamardResponse
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.registry import NUMERIC_MECHANISMS
from client_sdk.mechanisms.numeric.registry import create as create_numeric
from client_sdk.mechanisms.numeric.registry import from_config as numeric_from_config
from client_sdk.mechanisms.olh import OptimizedLocalHashing, optimal_hash_range
from client_sdk.mechanisms.openended import (
    OPEN_MECHANISMS,
    OpenDomainMechanism,
    create_open,
    open_from_config,
)
from client_sdk.mechanisms.subset import SubsetSelection, keeps_patterns
from client_sdk.mechanisms.unary import OptimizedUnaryEncoding, SymmetricUnaryEncoding
from client_sdk.mechanisms.validation import check_epsilon, config_parts

if TYPE_CHECKING:
    from client_sdk.mechanisms.multi import MultiMechanism

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

#: The multi-attribute protocols (``create(name, epsilon=..., attributes={...})``, kind
#: ``multi``, :mod:`client_sdk.mechanisms.multi`); kept out of ``REGISTRY``/``MECHANISMS``.
MULTI_PROTOCOLS = ("spl", "smp", "rsfd")

#: Any mechanism of the registry: a frequency oracle, a numeric, an open-domain or a
#: multi-attribute mechanism (what a campaign's config rebuilds to, :func:`from_config`).
AnyMechanism = Union[Mechanism, NumericMechanism, OpenDomainMechanism, "MultiMechanism"]  # noqa: UP007

#: Every mechanism by name: the frequency oracles, the numeric mechanisms, then the open-domain
#: ones (``create(name, epsilon=..., max_length=...)``, docs/MECHANISMS.md "Open-ended values").
REGISTRY: dict[str, type[Mechanism] | type[NumericMechanism] | type[OpenDomainMechanism]] = {
    **MECHANISMS,
    **NUMERIC_MECHANISMS,
    **OPEN_MECHANISMS,
}


def kind_of(name: str) -> str:
    """What the mechanism ``name`` estimates: ``frequency``, ``mean``, ``distribution``,
    ``open_domain`` (strings nobody listed: ``cms``, ``hcms``, ``pem``), or ``multi`` for the
    multi-attribute protocols (``spl``, ``smp``, ``rsfd``; docs/MECHANISMS.md §22)."""
    cls = REGISTRY.get(name)
    if cls is None:
        if name in PRESETS:
            return "frequency"
        if name in MULTI_PROTOCOLS:
            return "multi"
        raise InvalidParameter(f"unknown mechanism {name!r}; known: {', '.join(REGISTRY)}")
    return cls.kind


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
        if isinstance(mech, SubsetSelection) and keeps_patterns(mech.k, mech.d):
            # The same reports; the tally also counts each subset, for the pattern MLE.
            mech = SubsetSelection(epsilon=epsilon, domain=domain, d=mech.d, patterns=True)
        excluded = None
        if max_report_bytes is not None and mech.report_bytes > max_report_bytes:
            excluded = f"report {mech.report_bytes} B > cap {max_report_bytes} B"
        rows.append(
            Candidate(name, mech, expected_variance(mech, weights), mech.report_bytes, excluded)
        )
    usable = [r for r in rows if r.excluded is None]
    if not usable and all(r.mechanism is None for r in rows):
        largest = max(MECHANISMS[name].max_k for name in AUTO_CANDIDATES)
        raise InvalidParameter(
            f"no mechanism takes a domain of {k_all} values (at most {largest}); an "
            "open-domain campaign (max_length) takes any string"
        )
    if not usable:
        raise InvalidParameter(
            f"no mechanism fits a report of at most {max_report_bytes} bytes for this domain"
        )
    best = min(usable, key=lambda r: (round(r.mean_variance, 12), r.report_bytes))
    assert best.mechanism is not None
    return AutoChoice(best.mechanism, tuple(rows), weights)


@overload
def create(
    name: str,
    *,
    epsilon: float | None = None,
    domain: Sequence[str] | int,
    max_report_bytes: int | None = None,
    expected: Sequence[float] | None = None,
    **params: Any,
) -> Mechanism: ...


@overload
def create(
    name: str,
    *,
    epsilon: float | None = None,
    bounds: Any,
    **params: Any,
) -> NumericMechanism: ...


@overload
def create(
    name: str,
    *,
    epsilon: float | None = None,
    attributes: Mapping[str, Any],
    pairs: Any = None,
    **params: Any,
) -> MultiMechanism: ...


@overload
def create(
    name: str,
    *,
    epsilon: float | None = None,
    max_length: int,
    **params: Any,
) -> OpenDomainMechanism: ...


def create(
    name: str,
    *,
    epsilon: float | None = None,
    domain: Sequence[str] | int | None = None,
    bounds: Any = None,
    max_report_bytes: int | None = None,
    expected: Sequence[float] | None = None,
    attributes: Mapping[str, Any] | None = None,
    pairs: Any = None,
    max_length: int | None = None,
    **params: Any,
) -> Mechanism | NumericMechanism | MultiMechanism | OpenDomainMechanism:
    """Build a mechanism by name (see ``MECHANISMS``), preset (``PRESETS``) or ``"auto"``.

    With ``domain``: a frequency oracle. With ``bounds=(low, high)``: a numeric mechanism
    (``NUMERIC_MECHANISMS``; ``"auto"`` picks the mean mechanism of smallest worst-case
    variance at ``epsilon``, or of smallest variance averaged over ``expected={"mean": m,
    "sd": s}`` when the values are declared). With ``attributes={...}`` (and optional ``pairs``): a
    multi-attribute mechanism, ``spl``, ``smp``, ``rsfd`` or ``auto`` (docs/MECHANISMS.md §22);
    a numeric attribute declares its values in its own spec (``"expected"``), not here.
    With ``max_length=bytes``: an open-domain mechanism (``cms``, ``hcms``, ``pem``) for strings
    nobody listed in advance.

    >>> mech = create("oue", epsilon=1.0, domain=["a", "b", "c"])
    >>> mean = create("piecewise", epsilon=1.0, bounds=(0, 100))
    """
    if not isinstance(name, str):
        raise InvalidParameter(f"mechanism name must be a string, got {type(name).__name__}")
    if max_length is not None or name in OPEN_MECHANISMS:
        if domain is not None or bounds is not None or attributes is not None:
            raise InvalidParameter(
                "give max_length (an open-domain mechanism) without domain, bounds or attributes"
            )
        if max_report_bytes is not None or expected is not None or pairs is not None:
            raise InvalidParameter("max_report_bytes, expected and pairs do not apply here")
        if max_length is None:
            raise InvalidParameter(
                f"{name!r} is an open-domain mechanism: give max_length=<bytes>, not a domain"
            )
        if epsilon is None:
            raise InvalidParameter(f"mechanism {name!r} needs epsilon")
        return create_open(name, epsilon=epsilon, max_length=max_length, **params)
    if attributes is not None:
        if domain is not None or bounds is not None:
            raise InvalidParameter("give attributes (several per device) or domain or bounds")
        if max_report_bytes is not None:
            raise InvalidParameter("max_report_bytes applies only to one domain")
        if expected is not None:
            raise InvalidParameter(
                "with attributes, a numeric attribute declares its own values: "
                '{"bounds": [low, high], "expected": {"mean": m, "sd": s}}'
            )
        if epsilon is None:
            raise InvalidParameter(f"mechanism {name!r} needs epsilon")
        from client_sdk.mechanisms.multi import create as create_multi

        return create_multi(name, epsilon=epsilon, attributes=attributes, pairs=pairs, **params)
    if pairs is not None:
        raise InvalidParameter("pairs apply only with attributes={...}")
    if bounds is not None:
        if domain is not None:
            raise InvalidParameter(
                "give either domain (a frequency oracle) or bounds (a numeric mechanism), not both"
            )
        if name in MECHANISMS or name in PRESETS:
            raise InvalidParameter(
                f"{name!r} estimates frequencies over a domain: give domain=[...], not bounds "
                f"(numeric mechanisms: {', '.join([*NUMERIC_MECHANISMS, 'auto'])})"
            )
        if max_report_bytes is not None:
            raise InvalidParameter("max_report_bytes applies only to 'auto' over a domain")
        if expected is not None and name != "auto":
            raise InvalidParameter(
                f"expected values apply only to 'auto' (they choose the mechanism), not {name!r}"
            )
        if epsilon is None:
            raise InvalidParameter(f"mechanism {name!r} needs epsilon")
        extra = {} if expected is None else {"expected": expected}
        return create_numeric(name, epsilon=epsilon, bounds=bounds, **extra, **params)
    if domain is None:
        if name in NUMERIC_MECHANISMS:
            raise InvalidParameter(
                f"{name!r} is a numeric mechanism: give bounds=(low, high), not a domain"
            )
        raise InvalidParameter(
            f"mechanism {name!r} needs domain=[labels] (or bounds=(low, high) for a numeric one)"
        )
    return _create_frequency(
        name,
        epsilon=epsilon,
        domain=domain,
        max_report_bytes=max_report_bytes,
        expected=expected,
        **params,
    )


def _create_frequency(
    name: str,
    *,
    epsilon: float | None,
    domain: Sequence[str] | int,
    max_report_bytes: int | None,
    expected: Sequence[float] | None,
    **params: Any,
) -> Mechanism:
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
        if name in NUMERIC_MECHANISMS:
            raise InvalidParameter(
                f"{name!r} is a numeric mechanism: give bounds=(low, high), not a domain"
            )
        known = ", ".join([*MECHANISMS, *PRESETS, "auto"])
        raise InvalidParameter(f"unknown mechanism {name!r}; known: {known}")
    if epsilon is None and not params:
        raise InvalidParameter(f"mechanism {name!r} needs epsilon")
    try:
        return MECHANISMS[name](epsilon=epsilon, domain=domain, **params)  # type: ignore[arg-type]
    except TypeError as exc:
        raise InvalidParameter(f"bad parameters for {name!r}: {exc}") from None


def from_config(config: Mapping[str, Any]) -> AnyMechanism:
    """Rebuild a mechanism from its ``config()`` output (``domain``, ``bounds``,
    ``max_length`` or, for a multi-attribute mechanism, ``attributes``)."""
    if isinstance(config, Mapping) and "attributes" in config:
        from client_sdk.mechanisms.multi import from_config as multi_from_config

        return multi_from_config(config)
    if isinstance(config, Mapping) and "bounds" in config:
        return numeric_from_config(config)
    if isinstance(config, Mapping) and "max_length" in config:
        return open_from_config(config)
    return frequency_from_config(config)


def frequency_from_config(config: Mapping[str, Any]) -> Mechanism:
    """Rebuild a frequency oracle from :meth:`Mechanism.config` output."""
    name, epsilon, domain, params = config_parts(config, "domain", "a mechanism")
    if not isinstance(domain, list):
        raise InvalidParameter("config 'domain' must be a list of labels")
    if name not in MECHANISMS:
        raise InvalidParameter(f"unknown mechanism {name!r} in config")
    if name == "ss" and isinstance(params, Mapping) and "patterns" not in params:
        # Configs written before SS kept pattern counts: their stored tallies have k numbers.
        params = {**params, "patterns": False}
    mech: Mechanism = create(name, epsilon=epsilon, domain=domain, **params)
    return mech
