"""What every mechanism provides; the one place the shared contract is written down.

A mechanism is built from ``epsilon`` and a ``domain`` and owns all of its mathematics:

* the sampling thresholds, the exact (realised) epsilon and the output distribution;
* ``perturb`` (one device, OS randomness) and ``perturb_many`` (vectorised, seeded);
* the wire form of a report (JSON-safe) and its strict parser;
* the support function as ``support_counts``, and the constants ``p_star``/``q_star`` with the
  closed-form variance that the aggregator uses to debias a :class:`Tally`.

Pure protocols (Wang et al., USENIX Security 2017): each report supports a set of values;
``p_star = P[v in S(report) | device holds v]`` and
``q_star = P[v in S(report) | device holds x != v]``.
Then ``count_v = (C_v - n q*) / (p* - q*)`` is unbiased and
``Var = n q*(1-q*)/(p*-q*)^2 + c_v (1-p*-q*)/(p*-q*)``.

Loading: a mechanism is built and ``perturb`` runs without NumPy (integer thresholds, OS
randomness); the batch, parsing and tally methods import NumPy when first called.
"""

from __future__ import annotations

import itertools
import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Sequence
from fractions import Fraction
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.identity import ConfigIdentity
from client_sdk.mechanisms.randomness import RandomSource, as_generator
from client_sdk.mechanisms.validation import check_domain, check_epsilon, value_error

if TYPE_CHECKING:
    import numpy as np

    from client_sdk.mechanisms.tally import Tally

Payload = int | str | list[int]


class Mechanism(ConfigIdentity, ABC):
    """An epsilon-LDP frequency oracle over a finite domain.

    Privacy: every report satisfies ``P[y | x] <= e^realised_epsilon * P[y | x']`` for all inputs
    ``x, x'`` and outputs ``y``, where ``realised_epsilon <= epsilon`` is computed from the integer
    sampling thresholds that actually run. Repeated reports by one device compose; the client's
    budget ledger accounts for that.
    """

    name: ClassVar[str]
    #: Largest domain this mechanism accepts.
    max_k: ClassVar[int] = 1 << 20

    # -- capabilities (what callers ask instead of isinstance) --------------------------------

    #: What the estimator returns: one count per domain value.
    kind: ClassVar[Literal["frequency"]] = "frequency"
    #: Whether the consistency post-processors (aggregator/postprocess.py) apply to its estimates.
    postprocessable: ClassVar[bool] = True
    #: Whether the tally is a sufficient statistic of an exactly known multinomial channel
    #: (one output value per report, GRR/RR): the closed-form MLE and the exact flat-prior
    #: covariance apply. Otherwise ``mle`` maximises a composite likelihood.
    exact_channel: ClassVar[bool] = False
    #: Whether a device reports through :meth:`perturb_memoized` with its device secret
    #: (permanent randomisation, docs/MECHANISMS.md §7); then :attr:`permanent_epsilon` is the
    #: longitudinal bound the device budget checks.
    memoized: ClassVar[bool] = False

    epsilon: float
    domain: tuple[str, ...]

    def __init__(self, *, epsilon: float, domain: Sequence[str] | int) -> None:
        self.epsilon = check_epsilon(epsilon)
        self.domain = check_domain(domain, max_k=self.max_k, mechanism=self.name)
        self._index = {label: i for i, label in enumerate(self.domain)}

    # -- identity ---------------------------------------------------------------------------

    @property
    def k(self) -> int:
        """Domain size."""
        return len(self.domain)

    def params(self) -> dict[str, Any]:
        """Mechanism-specific parameters that fix its behaviour besides epsilon and domain."""
        return {}

    def config(self) -> dict[str, Any]:
        """Everything a device needs to rebuild this mechanism; JSON-safe."""
        return {
            "mechanism": self.name,
            "epsilon": self.epsilon,
            "domain": list(self.domain),
            "params": self.params(),
        }

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, k={self.k}, params={self.params()})"
        )

    # -- privacy ----------------------------------------------------------------------------

    @property
    @abstractmethod
    def realised_epsilon(self) -> float:
        """The epsilon of the sampler that runs: ln of its largest output-probability ratio."""

    @property
    def permanent_epsilon(self) -> float | None:
        """What unlimited reports of one value reveal, for :attr:`memoized` mechanisms; None."""
        return None

    @property
    def exact_support_size(self) -> int | None:
        """How many domain values every report supports, when that number is fixed (GRR: 1,
        SS: d) and the support covariance is therefore exact; None otherwise."""
        return None

    # -- estimation constants -----------------------------------------------------------------

    @property
    @abstractmethod
    def p_star(self) -> float:
        """P[a report supports v | the device holds v], exactly, for the thresholds in use."""

    @property
    @abstractmethod
    def q_star(self) -> float:
        """P[a report supports v | the device holds some x != v], exactly."""

    @property
    def v0(self) -> float:
        """Per-report count variance of an item nobody holds: ``q*(1-q*)/(p*-q*)^2``."""
        p, q = self.p_star, self.q_star
        return q * (1 - q) / (p - q) ** 2

    @property
    def beta(self) -> float:
        """Extra count variance per device holding the item: ``(1-p*-q*)/(p*-q*)``."""
        p, q = self.p_star, self.q_star
        return (1 - p - q) / (p - q)

    def count_variance(self, n: int, counts: np.ndarray | float) -> np.ndarray:
        """Exact variance of the unbiased count of each item, for ``n`` reports and true counts."""
        import numpy as np

        return n * self.v0 + self.beta * np.asarray(counts, dtype=float)

    def mean_variance(self) -> float:
        """Per-report count variance averaged over the domain for uniform data: ``v0 + beta/k``.

        ``auto`` minimises this; multiply by n for counts, divide by n for frequencies.
        """
        return self.v0 + self.beta / self.k

    # -- reports ----------------------------------------------------------------------------

    @property
    @abstractmethod
    def report_bits(self) -> int:
        """Information content of one report in bits (what a compact encoding needs)."""

    @property
    def report_bytes(self) -> int:
        """Bytes of a compactly encoded report: ``ceil(report_bits / 8)``."""
        return math.ceil(self.report_bits / 8)

    def index_of(self, value: object) -> int:
        """Position of ``value`` in the domain, or :class:`ValueNotInDomain`."""
        try:
            return self._index[value]  # type: ignore[index]
        except (KeyError, TypeError):
            raise value_error(value, self.domain) from None

    def perturb(self, value: str, *, rng: RandomSource = None) -> Payload:
        """The wire report for one device holding ``value``.

        ``value`` is seen only here. Randomness comes from the OS unless ``rng`` (a seed or
        NumPy generator, for tests and simulation only) is given.
        """
        if rng is None:  # the device path: index_of already returned a valid position
            return self._perturb_one(self.index_of(value), None)
        return self.perturb_index(self.index_of(value), rng=rng)

    def perturb_index(self, index: int, *, rng: RandomSource = None) -> Payload:
        """Like :meth:`perturb` for the domain position ``index``."""
        try:
            if isinstance(index, bool):
                raise TypeError
            position = operator.index(index)  # an int or a NumPy integer
        except TypeError:
            raise InvalidParameter(f"index must be an int, got {type(index).__name__}") from None
        if not 0 <= position < self.k:
            raise InvalidParameter(f"index must be in [0, {self.k}), got {position}")
        return self._perturb_one(position, as_generator(rng))

    @abstractmethod
    def _perturb_one(self, index: int, gen: np.random.Generator | None) -> Payload:
        """One report for domain position ``index``; ``gen`` None means OS randomness."""

    def perturb_many(
        self, values: Sequence[str] | np.ndarray, *, rng: RandomSource = None
    ) -> np.ndarray:
        """Reports for many devices at once, as a batch array (see :meth:`encode_many`).

        ``values`` is an integer array of domain indices, or a sequence of labels. Meant for the
        simulator and tests; a fresh OS-seeded generator is used when ``rng`` is None.
        """
        from client_sdk.mechanisms.randomness import require_generator, require_numpy

        require_numpy()
        return self._perturb_batch(self.indices_of(values), require_generator(rng))

    def indices_of(self, values: Sequence[str] | np.ndarray) -> np.ndarray:
        """Domain indices of ``values`` (labels or integer indices) as an int64 array."""
        import numpy as np

        arr = np.asarray(values)
        if arr.ndim != 1:
            raise InvalidParameter("values must be a 1-D sequence")
        if arr.size and np.issubdtype(arr.dtype, np.integer):
            if arr.min() < 0 or arr.max() >= self.k:
                bad = arr[(arr < 0) | (arr >= self.k)][0]
                raise InvalidParameter(f"index {int(bad)} is outside the domain [0, {self.k})")
            return arr.astype(np.int64, copy=False)
        if arr.size == 0:
            return np.zeros(0, dtype=np.int64)
        return np.fromiter((self.index_of(v) for v in arr.tolist()), dtype=np.int64, count=arr.size)

    @abstractmethod
    def _perturb_batch(self, indices: np.ndarray, gen: np.random.Generator) -> np.ndarray:
        """Vectorised reports for ``indices``."""

    @abstractmethod
    def encode_many(self, batch: np.ndarray) -> list[Payload]:
        """Wire payloads (JSON-safe) of a batch array."""

    @abstractmethod
    def check_payload(self, payload: object) -> Payload:
        """Return ``payload`` in canonical form, or raise :class:`InvalidReport` saying why."""

    @abstractmethod
    def decode_many(self, payloads: Sequence[object]) -> np.ndarray:
        """Batch array of wire payloads; :class:`InvalidReport` names the first bad index."""

    @abstractmethod
    def support_counts(self, batch: np.ndarray) -> np.ndarray:
        """Per domain index, how many reports in ``batch`` support it (int64, length k)."""

    def supports(self, batch: np.ndarray, index: int) -> np.ndarray:
        """For each report in ``batch``, whether it supports domain position ``index`` (bool).

        Mechanisms override this with a vectorised test; this fallback tallies row by row.
        """
        import numpy as np

        return np.array(
            [self.support_counts(batch[i : i + 1])[index] > 0 for i in range(len(batch))],
            dtype=bool,
        )

    def tally(self, reports: np.ndarray | Iterable[object]) -> Tally:
        """The tally of a batch array or of a sequence of wire payloads."""
        from client_sdk.mechanisms.randomness import require_numpy

        require_numpy()
        import numpy as np

        from client_sdk.mechanisms.tally import Tally

        batch = reports if isinstance(reports, np.ndarray) else self.decode_many(list(reports))
        return Tally(int(batch.shape[0]), self.support_counts(batch))

    # -- the exact output distribution (what the exact-ratio test enumerates) ----------------

    #: Whether :meth:`output_distribution` covers the whole output space (its values sum to 1);
    #: False when it lists a ratio-preserving sample of outputs (OLH's hash seeds).
    output_space_complete: ClassVar[bool] = True

    def output_distribution(self, index: int) -> dict[Hashable, Fraction]:
        """``P[report | domain position index]`` exactly, from the integer thresholds that run,
        keyed by :meth:`output_key` of the wire payload. Enumerates the output space, so meant
        for small domains (tests); privacy is ``max P[y|x] / P[y|x']`` over it."""
        raise NotImplementedError(f"{self.name} does not enumerate its output distribution")

    def output_key(self, payload: object) -> Hashable:
        """The key of a wire payload in :meth:`output_distribution`."""
        return tuple(payload) if isinstance(payload, list) else payload

    def empty_tally(self) -> Tally:
        """The tally of no reports (the neutral element of ``+``)."""
        from client_sdk.mechanisms.tally import Tally

        return Tally.empty(self.k)

    def tally_from(self, n: int, vector: Sequence[int]) -> Tally:
        """Rebuild a tally from its generic form ``(n, vector())``; checks the layout."""
        import numpy as np

        from client_sdk.mechanisms.tally import Tally

        if len(vector) != self.k:
            raise InvalidParameter(
                f"a {self.name} tally has {self.k} counts (one per domain value), got {len(vector)}"
            )
        return Tally(n, np.asarray(vector))  # Tally checks the counts (state.count_array)

    def _bad(self, message: str, index: int | None = None) -> InvalidReport:
        where = f"report #{index}: " if index is not None else ""
        return InvalidReport(f"{where}{message} (mechanism {self.name}, k={self.k})", index=index)

    def _check_each(self, payloads: Sequence[object]) -> list[Payload]:
        out = []
        for i, payload in enumerate(payloads):
            try:
                out.append(self.check_payload(payload))
            except InvalidReport as exc:
                raise InvalidReport(f"report #{i}: {exc.reason}", index=i) from None
        return out


def bit_vector_distribution(
    k: int, index: int, own: Fraction, other: Fraction
) -> dict[Hashable, Fraction]:
    """Independent bits: bit ``index`` is 1 with probability ``own``, every other with ``other``;
    keyed by the tuple of bits."""
    out: dict[Hashable, Fraction] = {}
    for bits in itertools.product((0, 1), repeat=k):
        prob = Fraction(1)
        for i, b in enumerate(bits):
            one = own if i == index else other
            prob *= one if b else 1 - one
        out[bits] = prob
    return out
