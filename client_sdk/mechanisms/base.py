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

import hashlib
import json
import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from client_sdk.errors import InvalidParameter, InvalidReport
from client_sdk.mechanisms.randomness import RandomSource, as_generator
from client_sdk.mechanisms.validation import check_domain, check_epsilon, value_error

if TYPE_CHECKING:
    import numpy as np

    from client_sdk.mechanisms.tally import Tally

Payload = int | str | list[int]


class Mechanism(ABC):
    """An epsilon-LDP frequency oracle over a finite domain.

    Privacy: every report satisfies ``P[y | x] <= e^realised_epsilon * P[y | x']`` for all inputs
    ``x, x'`` and outputs ``y``, where ``realised_epsilon <= epsilon`` is computed from the integer
    sampling thresholds that actually run. Repeated reports by one device compose; the client's
    budget ledger accounts for that.
    """

    name: ClassVar[str]
    #: Largest domain this mechanism accepts.
    max_k: ClassVar[int] = 1 << 20

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

    def digest(self) -> str:
        """A sha256 hex digest of :meth:`config` (canonical JSON)."""
        blob = json.dumps(self.config(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(epsilon={self.epsilon!r}, k={self.k}, params={self.params()})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Mechanism) and self.config() == other.config()

    def __hash__(self) -> int:
        return hash(self.digest())

    # -- privacy ----------------------------------------------------------------------------

    @property
    @abstractmethod
    def realised_epsilon(self) -> float:
        """The epsilon of the sampler that runs: ln of its largest output-probability ratio."""

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
