"""Several attributes per device under one epsilon: SPL, SMP and RS+FD (docs/MECHANISMS.md §22).

A device holds one value per declared attribute (a label of a categorical attribute, a number
within the bounds of a numeric one) and sends ONE report that satisfies ``epsilon`` as a whole:

* ``spl``: every attribute through its own mechanism at ``epsilon / d`` (sequential
  composition: the realised epsilons add up to at most ``epsilon``);
* ``smp``: the device draws one attribute index ``j`` uniformly from the OS (exactly uniform,
  rejection sampling) and reports ``[j, report_j]`` at the full ``epsilon``;
* ``rsfd``: random sampling plus fake data (Arcolezi et al., 2021): the device draws ``j`` as in
  SMP and reports every attribute, attribute ``j`` through its mechanism and every other one as
  fake data, the same mechanism applied to a uniformly random input. The whole report is
  ``epsilon``-LDP only when each attribute's mechanism runs at ``epsilon`` itself: the ratio
  ``sum_j r_j(y_j|x_j) / sum_j r_j(y_j|x'_j)`` reaches ``e^eps_j`` when the two inputs differ in
  every attribute, so the paper's amplified ``ln(d(e^eps - 1) + 1)`` (which bounds inputs that
  differ in one attribute) is not used here. Categorical attributes only.

The per-attribute mechanisms are the registry's best (``auto``: smallest mean count variance;
numeric: the mean mechanism of smallest worst-case variance, or of smallest variance averaged
over the values the attribute declares, ``"expected": {"mean": m, "sd": s}``) unless
``oracle=`` names one.
``perturb`` is pure Python with OS randomness; ``perturb_many``/``tally``/``decode_many`` use
NumPy. The tally (:class:`MultiTally`) is exact integers: the per-attribute states concatenated,
then per attribute how many reports carry it.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, ClassVar, Literal

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.base import Mechanism
from client_sdk.mechanisms.identity import ConfigIdentity
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.grid import DEFAULT_GRID, check_bounds
from client_sdk.mechanisms.numeric.mean import (
    AUTO_MEAN_CANDIDATES,
    ExpectedValues,
    MeanChoice,
    MeanMechanism,
    check_expected_values,
    choose_mean,
    expected_variance,
)
from client_sdk.mechanisms.randomness import RandomSource, randbelow
from client_sdk.mechanisms.state import exact_int
from client_sdk.mechanisms.validation import MIN_EPSILON, check_epsilon

#: The protocols; ``auto`` picks one of them (:func:`compare_protocols`).
PROTOCOLS = ("spl", "smp", "rsfd")
#: Frequency oracles RS+FD runs over (fake data = the oracle applied to a uniform input).
RSFD_ORACLES = ("grr", "oue")
#: Resolution of SMP's optimal sampling weights (integers summing to about this).
WEIGHT_SCALE = 10_000
#: Fixed-point steps of SMP's optimal weights when the campaign declares categorical pairs.
OPTIMAL_STEPS = 200
#: With categorical pairs, SMP's optimal weights give every component at least this share.
MIN_SHARE = 0.01

SubMechanism = Mechanism | NumericMechanism
SubTally = Any  # Tally | NumericTally (Tally imports NumPy: kept out of the device path)


@contextmanager
def _naming(attribute: str) -> Iterator[None]:
    """Prefix an :class:`InvalidParameter` (``ValueNotInDomain`` included, same class) raised
    in the block with the attribute it concerns: "value 'X' is not in the domain" did not say
    which of a record's attributes held it."""
    try:
        yield
    except InvalidParameter as exc:
        raise type(exc)(f"attribute {attribute!r}: {exc}") from None


@dataclass(frozen=True)
class Attribute:
    """One declared attribute: ``labels`` (categorical) or ``bounds`` (numeric).

    ``expected`` (numeric only): the declared mean and sd of its values, which choose its mean
    mechanism and weigh it in ``auto``'s criterion; not part of :meth:`spec` (the stored config
    holds the chosen mechanism, as a single-attribute campaign's does)."""

    name: str
    labels: tuple[str, ...] | None = None
    bounds: tuple[float, float] | None = None
    grid: int | None = None
    expected: ExpectedValues | None = None

    @property
    def categorical(self) -> bool:
        return self.labels is not None

    def spec(self) -> Any:
        if self.labels is not None:
            return list(self.labels)
        out: dict[str, Any] = {"bounds": list(self.bounds or ())}
        if self.grid is not None:
            out["grid"] = self.grid
        return out


def parse_attributes(attributes: object) -> tuple[Attribute, ...]:
    """Validate ``{"name": [labels] | {"bounds": [low, high]} | {"domain": [labels]}}``; a
    numeric spec may add ``"grid"`` and ``"expected": {"mean": m, "sd": s}``
    (:func:`~client_sdk.mechanisms.numeric.check_expected_values` against its bounds)."""
    if not isinstance(attributes, Mapping) or len(attributes) < 2:
        raise InvalidParameter(
            "attributes must be a mapping of at least two names to a list of labels or "
            '{"bounds": [low, high]}'
        )
    out = []
    for name, spec in attributes.items():
        if not isinstance(name, str) or not name:
            raise InvalidParameter(f"an attribute name must be a non-empty string, got {name!r}")
        if isinstance(spec, Mapping):
            unknown = set(spec) - {"bounds", "domain", "grid", "expected"}
            if unknown:
                raise InvalidParameter(f"attribute {name!r}: unknown keys {sorted(unknown)}")
            if "expected" in spec and "bounds" not in spec:
                raise InvalidParameter(
                    f"attribute {name!r}: 'expected' ({{'mean': m, 'sd': s}}) applies to a "
                    "numeric attribute, one with 'bounds'"
                )
            if "domain" in spec:
                spec = spec["domain"]
            elif "bounds" in spec:
                try:
                    bounds = check_bounds(spec["bounds"])
                except InvalidParameter as exc:
                    raise InvalidParameter(f"attribute {name!r}: {exc}") from None
                grid = spec.get("grid")
                if grid is not None and (isinstance(grid, bool) or not isinstance(grid, int)):
                    raise InvalidParameter(f"attribute {name!r}: grid must be an integer")
                expected = None
                if spec.get("expected") is not None:
                    with _naming(name):
                        expected = check_expected_values(spec["expected"], bounds)
                out.append(Attribute(name, bounds=bounds, grid=grid, expected=expected))
                continue
            else:
                raise InvalidParameter(f"attribute {name!r} needs labels or bounds")
        if isinstance(spec, str) or not isinstance(spec, Sequence):
            raise InvalidParameter(
                f"attribute {name!r}: give a list of labels or {{'bounds': [low, high]}}"
            )
        labels = tuple(spec)
        if not all(isinstance(x, str) for x in labels):
            raise InvalidParameter(f"attribute {name!r}: labels must be strings")
        if len(labels) < 2 or len(set(labels)) != len(labels):
            raise InvalidParameter(f"attribute {name!r}: at least two distinct labels")
        out.append(Attribute(name, labels=labels))
    return tuple(out)


def parse_pairs(pairs: object, attributes: Sequence[Attribute]) -> tuple[tuple[str, str], ...]:
    """Validate declared attribute pairs (two different declared names each, each pair once
    in either order: a repeated pair is a component that splits the report's epsilon further
    and measures nothing new)."""
    if pairs is None:
        return ()
    if isinstance(pairs, str) or not isinstance(pairs, Iterable):
        raise InvalidParameter("pairs must be a list of (attribute, attribute)")
    names = {a.name for a in attributes}
    out = []
    seen: set[frozenset[str]] = set()
    for pair in pairs:
        if isinstance(pair, str) or not isinstance(pair, Sequence) or len(pair) != 2:
            raise InvalidParameter(f"a pair is two attribute names, got {pair!r}")
        a, b = pair
        if not (isinstance(a, str) and isinstance(b, str) and a in names and b in names) or a == b:
            raise InvalidParameter(f"pair {pair!r}: two different declared attributes")
        if frozenset((a, b)) in seen:
            raise InvalidParameter(
                f"pair {pair!r} is declared twice: each pair of attributes once, in either order"
            )
        seen.add(frozenset((a, b)))
        out.append((str(a), str(b)))
    return tuple(out)


def _build_one(
    attr: Attribute, epsilon: float, oracle: str, mean: str | None = None
) -> tuple[SubMechanism, MeanChoice | None]:
    """Component ``attr``'s mechanism at ``epsilon`` and, for a numeric attribute whose
    mechanism ``auto`` chose, that choice (:func:`choose_mean`: by the worst case, or averaged
    over ``attr.expected``). ``mean``: the numeric attribute's mean mechanism as a stored config
    names it (rebuilt by name, nothing chosen)."""
    from client_sdk.mechanisms.numeric.registry import create as create_numeric
    from client_sdk.mechanisms.registry import create

    if epsilon < MIN_EPSILON:
        raise InvalidParameter(
            f"attribute {attr.name!r} would get epsilon {epsilon!r}, below the smallest a "
            f"mechanism realises ({MIN_EPSILON:g}): give a larger epsilon or fewer attributes"
        )
    if attr.labels is not None:
        mech = create(oracle, epsilon=epsilon, domain=list(attr.labels))
        if getattr(mech, "patterns", False):
            # A multi-attribute state keeps each attribute's support counts only (its layout
            # predates pattern counts); the reports are the same.
            mech = create("ss", epsilon=epsilon, domain=list(attr.labels), d=mech.params()["d"])
        return mech, None
    params = {} if attr.grid is None else {"grid": attr.grid}
    if mean is not None:
        if mean not in AUTO_MEAN_CANDIDATES:
            raise InvalidParameter(
                f"attribute {attr.name!r}: a numeric attribute runs one of "
                f"{', '.join(AUTO_MEAN_CANDIDATES)}, not {mean!r}"
            )
        return create_numeric(mean, epsilon=epsilon, bounds=attr.bounds, **params), None
    grid = DEFAULT_GRID if attr.grid is None else attr.grid
    choice = choose_mean(epsilon=epsilon, bounds=attr.bounds, grid=grid, expected=attr.expected)
    return choice.chosen, choice


def report_variance(mech: SubMechanism, expected: ExpectedValues | None = None) -> float:
    """Per-report variance of one attribute's normalised estimate when every device reports it.

    Categorical: the count variance per report averaged over the values for uniform data,
    ``v0 + beta/k`` (= n * Var[frequency]). Numeric: the variance of the mean of the value
    rescaled to [0, 1], the worst case, or averaged over the ``expected`` values the attribute
    declares (:func:`~client_sdk.mechanisms.numeric.expected_variance`). The protocols'
    criterion scales these (docs/MECHANISMS.md §22).
    """
    if isinstance(mech, Mechanism):
        return mech.mean_variance()
    if isinstance(mech, MeanMechanism):
        if expected is not None:
            return expected_variance(mech, expected, unit=True)
        return mech.unit_worst_case_variance / 4
    raise InvalidParameter(f"{mech.name} is not a mean or frequency mechanism")


def sampling_variance(mech: SubMechanism, d: int, expected: ExpectedValues | None = None) -> float:
    """SMP's extra per-report variance from estimating on a random ``1/d`` of the devices: the
    variance of the per-device quantity across the population times ``d - 1``. At uniform data
    like the rest of the criterion: ``(d-1) f (1-f)`` per value at ``f = 1/k``; ``(d-1)/12``
    for a mean rescaled to [0, 1] (the variance of a uniform value), or, when the attribute
    declares its ``expected`` values, ``(d-1) (sd / (high - low))**2``, their variance on that
    scale. The worst case, 1/4, is no population's: it overweighted numeric attributes 3-fold
    against the categorical ones (Adult's age and hours-per-week have 0.035 and 0.016)."""
    if isinstance(mech, Mechanism):
        return (d - 1) * (mech.k - 1) / mech.k**2
    if expected is not None:
        assert isinstance(mech, NumericMechanism)
        spread = expected.sd / mech.grid.span
        return (d - 1) * spread * spread
    return (d - 1) / 12


def rsfd_variance(mech: Mechanism, d: int) -> float:
    """RS+FD per-report count variance of one attribute averaged over its values, uniform data.

    With ``f = (p* + (k-1) q*)/k`` (the fake report's support rate), a holder supports ``v``
    w.p. ``pi1 = p*/d + (d-1) f/d``, a non-holder w.p. ``pi0 = q*/d + (d-1) f/d``, and the
    unbiased count is ``d (C_v - n f (d-1)/d - n q*/d) / (p* - q*)``.
    """
    p, q, k = mech.p_star, mech.q_star, mech.k
    f = (p + (k - 1) * q) / k
    pi1 = p / d + (d - 1) * f / d
    pi0 = q / d + (d - 1) * f / d
    return d * d * (pi1 * (1 - pi1) / k + pi0 * (1 - pi0) * (k - 1) / k) / (p - q) ** 2


def optimal_weights(
    mechs: Sequence[SubMechanism],
    expected: Sequence[ExpectedValues | None] | None = None,
) -> tuple[int, ...]:
    """SMP's sampling weights that minimise :meth:`MultiMechanism.variance_criterion`.

    Sampling component j with probability ``pi_j``, its per-report variance (uniform data) is
    ``A_j / pi_j - s_j`` with ``A_j = report_variance + s_j`` and ``s_j`` the sampling term of
    one device (:func:`sampling_variance` at d = 2); the sum over j is smallest at
    ``pi_j`` proportional to ``sqrt(A_j)`` (Cauchy-Schwarz). Integers (``WEIGHT_SCALE``
    resolution, at least 1) so the device draws them exactly. ``expected``: per component the
    values a numeric attribute declares (None: uniform data, as above).
    """
    declared = list(expected) if expected is not None else [None] * len(mechs)
    roots = [
        math.sqrt(report_variance(m, e) + sampling_variance(m, 2, e))
        for m, e in zip(mechs, declared, strict=True)
    ]
    total = math.fsum(roots)
    return tuple(max(1, round(WEIGHT_SCALE * r / total)) for r in roots)


def _floored(pis: Sequence[float]) -> list[float]:
    """``pis`` (summing to 1) with every share raised to at least ``MIN_SHARE``, the others
    scaled down proportionally to keep the sum 1 (repeated until none is below)."""
    out = list(pis)
    low: set[int] = set()
    while True:
        below = {j for j, p in enumerate(out) if j not in low and p < MIN_SHARE}
        if not below:
            return out
        low |= below
        rest = math.fsum(p for j, p in enumerate(out) if j not in low)
        free = 1 - MIN_SHARE * len(low)
        out = [MIN_SHARE if j in low else p * free / rest for j, p in enumerate(out)]


def check_weights(weights: object, d: int) -> tuple[int, ...] | None:
    """Validated SMP sampling weights: ``d`` positive integers (None, or all equal: uniform)."""
    if weights is None:
        return None
    if (
        isinstance(weights, str)
        or not isinstance(weights, Sequence)
        or len(weights) != d
        or not all(isinstance(w, int) and not isinstance(w, bool) and w > 0 for w in weights)
    ):
        raise InvalidParameter(
            f"weights must be {d} positive integers (one per attribute, then per pair)"
        )
    out = tuple(int(w) for w in weights)
    return None if len(set(out)) == 1 else out


@dataclass(frozen=True, eq=False)
class MultiTally:
    """Exact state of a multi-attribute campaign: ``n`` reports, per attribute its own state
    (``parts[j]``, over the ``carried[j]`` reports that carry attribute ``j``) and ``carried``.

    ``vector()`` concatenates the parts' vectors, then ``carried``; tallies add part-wise.
    """

    n: int
    parts: tuple[SubTally, ...]
    carried: tuple[int, ...]

    def __post_init__(self) -> None:
        if isinstance(self.n, bool) or not isinstance(self.n, int) or self.n < 0:
            raise InvalidParameter(f"a tally's n must be an integer >= 0, got {self.n!r}")
        if len(self.parts) != len(self.carried):
            raise InvalidParameter("a multi tally has one carried count per part")
        for part, c in zip(self.parts, self.carried, strict=True):
            if part.n != c or not 0 <= c <= self.n:
                raise InvalidParameter("each part's n must equal its carried count, in [0, n]")
        object.__setattr__(self, "parts", tuple(self.parts))
        object.__setattr__(self, "carried", tuple(int(c) for c in self.carried))

    def vector(self) -> list[int]:
        out: list[int] = []
        for part in self.parts:
            out.extend(part.vector())
        out.extend(self.carried)
        return out

    def __add__(self, other: object) -> MultiTally:
        if not isinstance(other, MultiTally):
            return NotImplemented
        if len(other.parts) != len(self.parts):
            raise InvalidParameter("cannot add tallies of different attribute counts")
        return MultiTally(
            self.n + other.n,
            tuple(a + b for a, b in zip(self.parts, other.parts, strict=True)),
            tuple(a + b for a, b in zip(self.carried, other.carried, strict=True)),
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MultiTally):
            return NotImplemented
        return self.n == other.n and self.vector() == other.vector()

    def __hash__(self) -> int:
        return hash((self.n, tuple(self.vector())))

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe and exact: ``{"n": int, "vector": [int, ...]}`` (see ``tally_from``)."""
        return {"n": self.n, "vector": self.vector()}


@dataclass(frozen=True, eq=False)
class MultiBatch:
    """Reports of many devices: per attribute a batch array of the reports that carry it.

    ``sampled`` (SMP only) is the attribute index each report names, which is part of the
    report; for SPL and RS+FD every part has one row per report and ``sampled`` is None.
    """

    n: int
    parts: tuple[Any, ...]
    sampled: Any = None

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, rows: Any) -> MultiBatch:
        """The reports at ``rows`` (an integer index array, in that order), as a batch: what
        the collector tallies per window. SMP keeps each part's reports of those rows."""
        import numpy as np

        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if self.sampled is None:
            return MultiBatch(int(rows.size), tuple(p[rows] for p in self.parts))
        sampled = np.asarray(self.sampled)
        parts = []
        for j, part in enumerate(self.parts):
            mask = sampled == j
            position = np.cumsum(mask) - 1  # row -> its place in part j
            chosen = rows[mask[rows]]
            parts.append(part[position[chosen]])
        return MultiBatch(int(rows.size), tuple(parts), sampled[rows])


class MultiMechanism(ConfigIdentity):
    """One report per device over several attributes, ``epsilon``-LDP as a whole.

    Privacy (exact, tested by enumeration): SPL is the product of mechanisms whose realised
    epsilons sum to at most ``epsilon``; SMP is a uniform mixture over attributes, each at the
    full ``epsilon``; RS+FD's worst ratio is the largest of its mechanisms' (each at ``epsilon``).
    """

    kind: ClassVar[Literal["multi"]] = "multi"
    postprocessable: ClassVar[bool] = False
    exact_channel: ClassVar[bool] = False
    memoized: ClassVar[bool] = False

    def __init__(
        self,
        protocol: str,
        *,
        epsilon: float,
        attributes: Mapping[str, Any],
        pairs: Iterable[Sequence[str]] | None = None,
        oracle: str = "auto",
        weights: Sequence[int] | str | None = None,
        means: Mapping[str, str] | None = None,
    ) -> None:
        """``means``: per numeric attribute the mean mechanism a stored config names
        (``params.per_attribute``, :func:`~client_sdk.mechanisms.multi.from_config`), built by
        name; an attribute not in it gets ``auto``'s choice (by its declared ``expected``
        values, else the worst case)."""
        if protocol not in PROTOCOLS:
            raise InvalidParameter(
                f"unknown multi-attribute protocol {protocol!r}; known: {', '.join(PROTOCOLS)}"
            )
        self.name = protocol
        self.epsilon = check_epsilon(epsilon)
        self.attributes = parse_attributes(attributes)
        self.pairs = parse_pairs(pairs, self.attributes)
        if not isinstance(oracle, str):
            raise InvalidParameter("oracle must be a mechanism name or 'auto'")
        self.oracle = oracle
        for a, b in self.pairs:
            if not (self.attribute(a).categorical or self.attribute(b).categorical):
                raise InvalidParameter(
                    f"pair ({a!r}, {b!r}): a pair needs a categorical attribute (two "
                    "categorical: a joint table; categorical x numeric: the mean per label)"
                )
        # components: the attributes, then one product-domain attribute per declared pair
        d = len(self.attributes) + len(self.pairs)
        if protocol == "rsfd":
            if not all(a.categorical for a in self.attributes):
                raise InvalidParameter("rsfd takes categorical attributes only (use spl or smp)")
            if oracle not in (*RSFD_ORACLES, "auto"):
                raise InvalidParameter(f"rsfd runs over {' or '.join(RSFD_ORACLES)}, not {oracle}")
        means = dict(means or {})
        for attr_name in means:
            if self.attribute(attr_name).categorical:
                raise InvalidParameter(
                    f"attribute {attr_name!r} is categorical: only a numeric one has a mean "
                    "mechanism"
                )
        each = self.epsilon / d if protocol == "spl" else self.epsilon
        mechs: list[SubMechanism] = []
        #: Per numeric attribute whose mechanism ``auto`` chose here, what it compared
        #: (``MeanChoice.criterion``: the worst case, or the declared values).
        self.mean_choices: dict[str, MeanChoice] = {}
        for attr in self.components():
            if protocol == "rsfd" and oracle == "auto":
                built = [_build_one(attr, each, o)[0] for o in RSFD_ORACLES]
                mech = min(built, key=lambda m: rsfd_variance(m, d))  # type: ignore[arg-type]
            else:
                mech, choice = _build_one(attr, each, oracle, means.get(attr.name))
                if choice is not None:
                    self.mean_choices[attr.name] = choice
            mechs.append(mech)
        self.mechanisms: tuple[SubMechanism, ...] = tuple(mechs)
        self._by_name = {a.name: i for i, a in enumerate(self.attributes)}
        if weights is not None and protocol != "smp":
            raise InvalidParameter("sampling weights apply to smp only")
        if weights == "optimal":
            weights = self._optimal_weights()
        #: SMP's integer sampling weights (None: uniform, 1/d each); component j is sampled
        #: with probability ``weights[j] / sum(weights)``, drawn exactly from the OS.
        self.weights = check_weights(weights, d)

    # -- identity ---------------------------------------------------------------------------

    def attribute(self, name: str) -> Attribute:
        """The declared attribute ``name``."""
        for a in self.attributes:
            if a.name == name:
                return a
        raise InvalidParameter(
            f"no attribute {name!r}; declared: {[a.name for a in self.attributes]}"
        )

    def components(self) -> list[Attribute]:
        """What the protocol reports: the attributes, then per declared pair ``(a, b)`` an
        attribute over the product domain (index ``i_a * k_b + i_b``), named ``"a|b"``.

        A mixed pair (one categorical attribute ``c``, one numeric ``x``) is an attribute over
        ``labels(c) x {0, 1}`` (index ``2 i_c + bit``): the bit is 1 with probability the
        value's position in its bounds, exactly ``i / D`` for its randomly rounded grid index
        ``i`` (docs/MECHANISMS.md, mixed pairs)."""
        out = list(self.attributes)
        for a, b in self.pairs:
            la, lb = self.attribute(a).labels, self.attribute(b).labels
            if la is not None and lb is not None:
                labels = tuple(f"{x}|{y}" for x in la for y in lb)
            else:
                cat, num = (a, b) if la is not None else (b, a)
                labels = tuple(
                    f"{x}|{num}:{end}"
                    for x in self.attribute(cat).labels or ()
                    for end in ("low", "high")
                )
            out.append(Attribute(f"{a}|{b}", labels=labels))
        return out

    def mixed_pair(self, pair: Sequence[str]) -> tuple[str, str] | None:
        """``(categorical, numeric)`` names of a declared mixed pair, None for two categorical."""
        a, b = pair
        if self.attribute(a).categorical and self.attribute(b).categorical:
            return None
        return (a, b) if self.attribute(a).categorical else (b, a)

    def _mixed_bit(self, ix: int, value: float) -> int:
        """The pair bit of a numeric value (one device, OS randomness): 1 w.p. ``i / D``."""
        m = self.mechanisms[ix]
        assert isinstance(m, NumericMechanism)
        i = m.grid.round(m.clip(value))
        return int(randbelow(m.grid.size, None) < i)

    def _pair_inputs(self, values: Sequence[Any]) -> list[int]:
        """The pair components' input indices for one device's attribute values."""
        out = []
        for (a, b), (ia, ib, kb) in zip(self.pairs, self._pair_indices(), strict=True):
            mixed = self.mixed_pair((a, b))
            if mixed is None:
                ma, mb = self.mechanisms[ia], self.mechanisms[ib]
                assert isinstance(ma, Mechanism) and isinstance(mb, Mechanism)
                out.append(ma.index_of(values[ia]) * kb + mb.index_of(values[ib]))
                continue
            ic, ix = self._by_name[mixed[0]], self._by_name[mixed[1]]
            mc = self.mechanisms[ic]
            assert isinstance(mc, Mechanism)
            out.append(2 * mc.index_of(values[ic]) + self._mixed_bit(ix, values[ix]))
        return out

    @property
    def d(self) -> int:
        """How many components a report covers: attributes plus declared pairs."""
        return len(self.mechanisms)

    def _pair_indices(self) -> list[tuple[int, int, int]]:
        """Per pair: (attribute index of a, of b, k_b)."""
        out = []
        for a, b in self.pairs:
            ib, kb = self._by_name[b], len(self.attribute(b).labels or ())
            out.append((self._by_name[a], ib, kb))  # kb == 0: b is numeric (a mixed pair)
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def params(self) -> dict[str, Any]:
        """``order`` is the attributes' order (the report's layout): stores that sort JSON
        keys lose the order of the ``attributes`` object, so ``from_config`` restores it."""
        out: dict[str, Any] = {
            "oracle": self.oracle,
            "order": list(self.names),
            "pairs": [list(p) for p in self.pairs],
            "per_attribute": [m.config() for m in self.mechanisms],
        }
        if self.weights is not None:
            out["weights"] = list(self.weights)
        return out

    def config(self) -> dict[str, Any]:
        """Everything a device needs to rebuild this mechanism; JSON-safe."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "attributes": {a.name: a.spec() for a in self.attributes},
            "params": self.params(),
        }

    def __repr__(self) -> str:
        pairs = zip(self.components(), self.mechanisms, strict=True)
        subs = ", ".join(f"{a.name}={m.name}" for a, m in pairs)
        return f"MultiMechanism({self.name!r}, epsilon={self.epsilon!r}, {subs})"

    # -- privacy ----------------------------------------------------------------------------

    @property
    def attribute_epsilons(self) -> tuple[float, ...]:
        """The realised epsilon of each attribute's mechanism."""
        return tuple(m.realised_epsilon for m in self.mechanisms)

    @property
    def realised_epsilon(self) -> float:
        """ln of the largest ratio of whole-report probabilities: the sum (SPL) or the largest
        (SMP, RS+FD) of the attributes' realised epsilons; never above ``epsilon``."""
        eps = self.attribute_epsilons
        return math.fsum(eps) if self.name == "spl" else max(eps)

    @property
    def permanent_epsilon(self) -> float | None:
        return None

    @property
    def sampling_probabilities(self) -> tuple[float, ...]:
        """Per component, the probability a report carries it (1 for SPL and RS+FD)."""
        if self.name != "smp":
            return (1.0,) * self.d
        if self.weights is None:
            return (1 / self.d,) * self.d
        total = sum(self.weights)
        return tuple(w / total for w in self.weights)

    def sampling_factor(self, j: int) -> float:
        """``1/pi_j - 1``: SMP's sampling term multiplies ``c (1 - c/n)`` by this (0 for SPL
        and RS+FD; exactly ``d - 1`` for uniform SMP)."""
        if self.name != "smp":
            return 0.0
        if self.weights is None:
            return float(self.d - 1)
        return sum(self.weights) / self.weights[j] - 1

    def _sample_component(self) -> int:
        """SMP's component index for one device, exact, from the OS."""
        if self.weights is None:
            return randbelow(self.d, None)
        u = randbelow(sum(self.weights), None)
        for j, w in enumerate(self.weights):
            if u < w:
                return j
            u -= w
        raise AssertionError("unreachable")

    def _joint_pairs(self) -> list[tuple[int, tuple[str, str]]]:
        """``(component index, pair)`` of every declared pair of two categorical attributes."""
        width = len(self.attributes)
        return [
            (width + position, pair)
            for position, pair in enumerate(self.pairs)
            if self.mixed_pair(pair) is None
        ]

    def _terms(self) -> tuple[list[float], list[float]]:
        """Per component ``(V_j, s_j)``: its per-report variance when every device reports it
        (:func:`report_variance`; RS+FD: :func:`rsfd_variance`) and SMP's sampling term of one
        device (:func:`sampling_variance` at d = 2; 0 for SPL and RS+FD)."""
        if self.name == "rsfd":
            return [rsfd_variance(m, self.d) for m in self.mechanisms], [0.0] * self.d  # type: ignore[arg-type]
        pairs = list(zip(self.mechanisms, self.declared, strict=True))
        sampling = [sampling_variance(m, 2, e) if self.name == "smp" else 0.0 for m, e in pairs]
        return [report_variance(m, e) for m, e in pairs], sampling

    @property
    def declared(self) -> tuple[ExpectedValues | None, ...]:
        """Per component, the values a numeric attribute declares (``expected``), else None:
        the criterion averages over them instead of its worst case and uniform data."""
        width = len(self.attributes)
        return tuple(a.expected for a in self.attributes) + (None,) * (self.d - width)

    def _sources(self) -> list[list[tuple[int, float, float]]]:
        """Per attribute, where its estimate comes from: ``(component, B, s)`` with the source's
        per-report variance ``B / pi - s`` when the component is sampled with probability
        ``pi``. Its own component (``B = V + s``) and, per declared categorical pair holding
        it, the pair's margin: ``k_o`` cells of the pair (``k_o`` the other attribute's
        labels), ``B = k_o V_pair + s_a`` (the cells' covariances are left out) with the
        attribute's own sampling term ``s_a`` (a margin of a sampled share of the devices)."""
        v, s = self._terms()
        out = [[(j, v[j] + s[j], s[j])] for j in range(len(self.attributes))]
        for j, (a, b) in self._joint_pairs():
            for name, other in ((a, b), (b, a)):
                i = self._by_name[name]
                k_other = len(self.attribute(other).labels or ())
                out[i].append((j, k_other * v[j] + s[i], s[i]))
        return out

    def criterion_at(self, probabilities: Sequence[float]) -> float:
        """:meth:`variance_criterion` if component j were carried with ``probabilities[j]``.

        Questions: every attribute and every declared pair. A pair's error is its component's
        per-report variance averaged over its cells, ``A_j / pi_j - s_j`` (``A_j = V_j +
        s_j``); an attribute in no categorical pair likewise over its values (a numeric one:
        its mean's, rescaled to [0, 1]). An attribute in categorical pairs is estimated from
        its own component and its pairs' margins combined by inverse variance
        (``MultiEstimate.consistent_counts``): its error is ``1 / sum(1 / var_source)`` over
        :meth:`_sources`. The criterion is the mean over the questions. Without categorical
        pairs this is the mean of ``A_j / pi_j - s_j`` over the components, as before."""
        v, s = self._terms()
        comp = [v[j] / pi + s[j] * (1 / pi - 1) for j, pi in enumerate(probabilities)]
        if not self._joint_pairs():
            return math.fsum(comp) / self.d
        width = len(self.attributes)
        questions = []
        for sources in self._sources():
            precision = math.fsum(1 / (b / probabilities[j] - c) for j, b, c in sources)
            questions.append(1 / precision)
        questions += comp[width:]
        return math.fsum(questions) / len(questions)

    def variance_criterion(self) -> float:
        """Per-report variance of the normalised estimates, averaged over the questions: the
        attributes (combined with their pairs' margins) and the declared pairs (``auto``
        minimises it; :meth:`criterion_at`, docs/MECHANISMS.md §22)."""
        return self.criterion_at(self.sampling_probabilities)

    def _optimal_weights(self) -> tuple[int, ...]:
        """SMP's integer sampling weights minimising :meth:`criterion_at`.

        Without categorical pairs: :func:`optimal_weights` (closed form). With them, the
        first-order condition ``-d criterion / d pi_j = lambda`` reads ``pi_j`` proportional
        to ``sqrt(G_j)``, ``G_j = sum of w_src B_src`` over the sources on component j, with
        ``w_src = d question / d var_src`` (1 for a pair; ``(question / var_src)^2`` for an
        attribute's combined estimate). It is solved by a damped fixed-point iteration from
        the closed form, a fixed number of steps in plain floating point (deterministic), and
        the best point seen is kept. Every component keeps a share of at least
        ``MIN_SHARE``: at large epsilon the optimum samples an attribute that its pairs cover
        almost never, and a campaign (or a window) whose reports carry it none at all could
        not estimate it."""
        if not self._joint_pairs():
            return optimal_weights(self.mechanisms, self.declared)
        v, s = self._terms()
        width = len(self.attributes)
        sources = self._sources()
        roots = [math.sqrt(v[j] + s[j]) for j in range(self.d)]
        pis = _floored([r / math.fsum(roots) for r in roots])
        best, best_value = pis, self.criterion_at(pis)
        for _ in range(OPTIMAL_STEPS):
            g = [0.0] * self.d
            for per in sources:
                vars_ = [(j, b, b / pis[j] - c) for j, b, c in per]
                combined = 1 / math.fsum(1 / x for _, _, x in vars_)
                for j, b, x in vars_:
                    g[j] += (combined / x) ** 2 * b
            for j in range(width, self.d):
                g[j] += v[j] + s[j]
            roots = [math.sqrt(x) for x in g]
            total = math.fsum(roots)
            pis = _floored([(p + r / total) / 2 for p, r in zip(pis, roots, strict=True)])
            value = self.criterion_at(pis)
            if value < best_value:
                best, best_value = pis, value
        return tuple(max(1, round(WEIGHT_SCALE * p)) for p in best)

    # -- one device (pure Python, OS randomness) --------------------------------------------

    def _values(self, record: Mapping[str, Any]) -> list[Any]:
        """The attributes' values of one record, in declared order (names checked)."""
        self._check_names(record)
        return [record[a.name] for a in self.attributes]

    def _check_names(self, record: object) -> None:
        if not isinstance(record, Mapping):
            raise InvalidParameter("a record is a mapping of attribute name to value")
        missing = [a.name for a in self.attributes if a.name not in record]
        extra = [k for k in record if k not in self._by_name]
        if missing or extra:
            raise InvalidParameter(
                f"a record has exactly the attributes {list(self.names)}; "
                f"missing {missing}, unknown {extra}"
            )

    def _report(self, j: int, value: Any) -> Any:
        """Component ``j``'s report of ``value`` (a pair component's value is its index)."""
        m = self.mechanisms[j]
        if j >= len(self.attributes):
            assert isinstance(m, Mechanism)
            return m.perturb_index(value)
        return m.perturb(value)

    def perturb(self, record: Mapping[str, Any]) -> list[Any]:
        """The wire report of one device holding ``record`` (every attribute), OS randomness.

        SPL: ``[report_1, ..., report_d]``; SMP: ``[j, report_j]``; RS+FD: ``[y_1, ..., y_d]``
        with the real report at the hidden index ``j`` and fake data elsewhere. The values are
        validated before any randomness is drawn, and each is seen only here.
        """
        values = self._values(record)
        mechs = self.mechanisms
        width = len(self.attributes)
        for attr, m, v in zip(self.attributes, mechs[:width], values[:width], strict=True):
            with _naming(attr.name):  # validate before drawing
                if isinstance(m, Mechanism):
                    m.index_of(v)
                else:
                    m.clip(v)
        values += self._pair_inputs(values)
        if self.name == "spl":
            return [self._report(j, v) for j, v in enumerate(values)]
        j = self._sample_component() if self.name == "smp" else randbelow(self.d, None)
        if self.name == "smp":
            return [j, self._report(j, values[j])]
        out = []
        for i, (m, v) in enumerate(zip(mechs, values, strict=True)):
            assert isinstance(m, Mechanism)
            real = self._report(i, v)
            fake = m.perturb_index(randbelow(m.k, None))
            out.append((fake, real)[i == j])  # both drawn: the same work for every j
        return out

    # -- batches (NumPy) --------------------------------------------------------------------

    def columns(self, columns_or_records: Any, gen: Any = None) -> list[Any]:
        """Per component, the column of inputs: from a mapping of columns or from records.
        ``gen`` (a NumPy generator) draws the bits of mixed pairs (None: seeded by the OS)."""
        import numpy as np

        from client_sdk.mechanisms.randomness import require_generator

        width = len(self.attributes)
        if isinstance(columns_or_records, Mapping):
            self._check_names(columns_or_records)
            cols = [columns_or_records[a.name] for a in self.attributes]
        else:
            records = [self._values(r)[:width] for r in columns_or_records]
            cols = [[r[j] for r in records] for j in range(width)]
        out = []
        n = None
        for attr, m, col in zip(self.attributes, self.mechanisms[:width], cols, strict=True):
            if isinstance(m, Mechanism):
                with _naming(attr.name):
                    arr = m.indices_of(col)
            else:
                try:
                    arr = np.asarray(col, dtype=float)
                except (TypeError, ValueError) as exc:
                    raise InvalidParameter(f"numeric values must be numbers: {exc}") from None
                if arr.ndim != 1:
                    raise InvalidParameter("each column must be 1-D")
            if n is not None and arr.size != n:
                raise InvalidParameter("all columns must have the same length")
            n = arr.size
            out.append(arr)
        for (a, b), (ia, ib, kb) in zip(self.pairs, self._pair_indices(), strict=True):
            mixed = self.mixed_pair((a, b))
            if mixed is None:
                out.append(out[ia] * kb + out[ib])
                continue
            ic, ix = self._by_name[mixed[0]], self._by_name[mixed[1]]
            m = self.mechanisms[ix]
            assert isinstance(m, NumericMechanism)
            gen = require_generator(gen) if not isinstance(gen, np.random.Generator) else gen
            grid = m.grid.round_many(out[ix], gen)
            bits = gen.integers(0, m.grid.size, size=grid.size, dtype=np.int64) < grid
            out.append(2 * out[ic] + bits.astype(np.int64))
        return out

    def perturb_many(self, columns_or_records: Any, *, rng: RandomSource = None) -> MultiBatch:
        """Reports for many devices (simulation and tests): a :class:`MultiBatch`.

        ``columns_or_records``: a mapping attribute -> column (labels, domain indices or
        numbers) or a sequence of records. ``rng``: a seed or NumPy generator (None: OS seed).
        """
        import numpy as np

        from client_sdk.mechanisms.randomness import require_generator

        gen = require_generator(rng)
        cols = self.columns(columns_or_records, gen)
        n = int(cols[0].size)
        if self.name == "spl":
            mechs = zip(self.mechanisms, cols, strict=True)
            parts = tuple(m.perturb_many(c, rng=gen) for m, c in mechs)
            return MultiBatch(n, parts)
        if self.name == "smp" and self.weights is not None:
            edges = np.cumsum(self.weights)
            draws = gen.integers(0, int(edges[-1]), size=n, dtype=np.int64)
            sampled = np.searchsorted(edges, draws, side="right").astype(np.int64)
        else:
            sampled = gen.integers(0, self.d, size=n, dtype=np.int64)
        if self.name == "smp":
            parts = tuple(
                m.perturb_many(c[sampled == j], rng=gen)
                for j, (m, c) in enumerate(zip(self.mechanisms, cols, strict=True))
            )
            return MultiBatch(n, parts, sampled)
        out = []
        for j, (m, c) in enumerate(zip(self.mechanisms, cols, strict=True)):
            assert isinstance(m, Mechanism)
            real = m.perturb_many(c, rng=gen)
            fake = m.perturb_many(gen.integers(0, m.k, size=n, dtype=np.int64), rng=gen)
            mask = sampled == j
            out.append(np.where(mask.reshape((-1,) + (1,) * (real.ndim - 1)), real, fake))
        return MultiBatch(n, tuple(out))  # which attribute is real is not part of the report

    def encode_many(self, batch: MultiBatch) -> list[list[Any]]:
        """Wire payloads of a batch, as :meth:`perturb` makes them."""
        encoded = [m.encode_many(p) for m, p in zip(self.mechanisms, batch.parts, strict=True)]
        if batch.sampled is None:
            return [list(row) for row in zip(*encoded, strict=True)] if encoded else []
        pos = [0] * self.d
        out = []
        for j in batch.sampled.tolist():
            out.append([j, encoded[j][pos[j]]])
            pos[j] += 1
        return out

    def check_payload(self, payload: object) -> list[Any]:
        """``payload`` in canonical form, or :class:`InvalidReport` saying why."""
        if not isinstance(payload, list):
            raise InvalidReport(
                f"a {self.name} report is a JSON array, got {type(payload).__name__}"
            )
        if self.name == "smp":
            if len(payload) != 2:
                raise InvalidReport(
                    f"an smp report is [attribute index, report], got {len(payload)} items"
                )
            j = payload[0]
            if type(j) is not int or not 0 <= j < self.d:
                raise InvalidReport(
                    f"an smp report's attribute index is an integer in [0, {self.d})"
                )
            return [j, self.mechanisms[j].check_payload(payload[1])]
        if len(payload) != self.d:
            raise InvalidReport(f"a {self.name} report has {self.d} items, got {len(payload)}")
        return [m.check_payload(p) for m, p in zip(self.mechanisms, payload, strict=True)]

    def decode_many(self, payloads: Sequence[object]) -> MultiBatch:
        """The batch of wire payloads; :class:`InvalidReport` names the first bad report."""
        import numpy as np

        rows = []
        for i, payload in enumerate(payloads):
            try:
                rows.append(self.check_payload(payload))
            except InvalidReport as exc:
                raise InvalidReport(f"report #{i}: {exc.reason}", index=i) from None
        n = len(rows)
        if self.name == "smp":
            sampled = np.array([r[0] for r in rows], dtype=np.int64)
            parts = tuple(
                m.decode_many([r[1] for r in rows if r[0] == j])
                for j, m in enumerate(self.mechanisms)
            )
            return MultiBatch(n, parts, sampled)
        return MultiBatch(
            n, tuple(m.decode_many([r[j] for r in rows]) for j, m in enumerate(self.mechanisms))
        )

    # -- aggregation ------------------------------------------------------------------------

    def tally(self, reports: MultiBatch | Iterable[object]) -> MultiTally:
        """The exact tally of a batch or of a sequence of wire payloads."""
        batch = reports if isinstance(reports, MultiBatch) else self.decode_many(list(reports))
        parts = []
        for m, part in zip(self.mechanisms, batch.parts, strict=True):
            parts.append(m.tally(part) if len(part) else m.empty_tally())
        if batch.sampled is None:
            carried = (batch.n,) * self.d
        else:
            carried = tuple(int((batch.sampled == j).sum()) for j in range(self.d))
        return MultiTally(batch.n, tuple(parts), carried)

    def check_tally(self, tally: object) -> MultiTally:
        """``tally`` if it is a :class:`MultiTally` of this mechanism's layout, else
        :class:`InvalidParameter`."""
        if not isinstance(tally, MultiTally):
            raise InvalidParameter(f"expected a MultiTally, got {type(tally).__name__}")
        return self.tally_from(tally.n, tally.vector())

    def empty_tally(self) -> MultiTally:
        return MultiTally(0, tuple(m.empty_tally() for m in self.mechanisms), (0,) * self.d)

    def _part_size(self, m: SubMechanism) -> int:
        return m.k if isinstance(m, Mechanism) else len(m.tally_fields)

    def tally_from(self, n: int, vector: Sequence[int]) -> MultiTally:
        """Rebuild a tally from ``(n, vector())``; checks the layout and the carried counts."""
        sizes = [self._part_size(m) for m in self.mechanisms]
        if len(vector) != sum(sizes) + self.d:
            raise InvalidParameter(
                f"a {self.name} tally over these attributes has {sum(sizes) + self.d} integers, "
                f"got {len(vector)}"
            )
        n = exact_int(n, "a tally's n")
        carried = [exact_int(v, "a carried count") for v in vector[-self.d :]]
        if self.name == "smp" and sum(carried) != n:
            raise InvalidParameter("an smp tally's carried counts must add up to n")
        if self.name != "smp" and any(c != n for c in carried):
            raise InvalidParameter(f"every report of a {self.name} tally carries every attribute")
        parts = []
        start = 0
        for m, size, c in zip(self.mechanisms, sizes, carried, strict=True):
            parts.append(m.tally_from(c, list(vector[start : start + size])))
            start += size
        return MultiTally(int(n), tuple(parts), tuple(carried))

    # -- the exact output distribution (tests; small domains) -------------------------------

    def _attribute_distribution(self, j: int, i: int) -> dict[Hashable, Fraction]:
        m = self.mechanisms[j]
        if isinstance(m, Mechanism):
            return m.output_distribution(i)
        den, weights = m.output_weights(i)
        return {y: Fraction(w, den) for y, w in enumerate(weights) if w}

    def _inputs(self, j: int) -> int:
        m = self.mechanisms[j]
        return m.k if isinstance(m, Mechanism) else m.grid.size + 1

    def output_distribution(self, inputs: Sequence[int]) -> dict[Hashable, Fraction]:
        """``P[whole report | inputs]`` exactly (``inputs``: domain or grid indices), keyed by
        tuples of the attributes' output keys (SMP: ``(j, key)``). Enumerates the product of
        the output spaces: meant for small domains."""
        import itertools

        inputs = list(inputs)
        width = len(self.attributes)
        dists = [self._attribute_distribution(j, i) for j, i in enumerate(inputs)]
        for position, ((a, b), (ia, ib, kb)) in enumerate(
            zip(self.pairs, self._pair_indices(), strict=True)
        ):
            j = width + position
            mixed = self.mixed_pair((a, b))
            if mixed is None:
                dists.append(self._attribute_distribution(j, inputs[ia] * kb + inputs[ib]))
                continue
            ic, ix = self._by_name[mixed[0]], self._by_name[mixed[1]]
            num = self.mechanisms[ix]
            assert isinstance(num, NumericMechanism)
            up = Fraction(inputs[ix], num.grid.size)  # P[bit = 1] at grid index inputs[ix]
            mix: dict[Hashable, Fraction] = {}
            for bit, weight in ((0, 1 - up), (1, up)):
                if weight:
                    for y, prob in self._attribute_distribution(j, 2 * inputs[ic] + bit).items():
                        mix[y] = mix.get(y, Fraction(0)) + weight * prob
            dists.append(mix)
        if self.name == "smp":
            share = self.weights or (1,) * self.d
            return {
                (j, y): p * Fraction(share[j], sum(share))
                for j, dist in enumerate(dists)
                for y, p in dist.items()
            }
        if self.name == "spl":
            out: dict[Hashable, Fraction] = {}
            for combo in itertools.product(*(list(d.items()) for d in dists)):
                prob = Fraction(1)
                for _, p in combo:
                    prob *= p
                out[tuple(y for y, _ in combo)] = prob
            return out
        fakes = []
        for j in range(self.d):
            k = self._inputs(j)
            fake: dict[Hashable, Fraction] = {}
            for x in range(k):
                for y, p in self._attribute_distribution(j, x).items():
                    fake[y] = fake.get(y, Fraction(0)) + p / k
            fakes.append(fake)
        out = {}
        for ys in itertools.product(*(list(f) for f in fakes)):
            total = Fraction(0)
            for j in range(self.d):
                prob = dists[j].get(ys[j], Fraction(0))
                for i in range(self.d):
                    if i != j:
                        prob *= fakes[i][ys[i]]
                total += prob
            out[tuple(ys)] = total / self.d
        return out

    def input_space(self) -> list[tuple[int, ...]]:
        """Every combination of the attributes' inputs (domain or grid indices)."""
        import itertools

        width = len(self.attributes)
        return list(itertools.product(*(range(self._inputs(j)) for j in range(width))))
