"""The LDP mechanisms: the single definition of each one's mathematics.

mech = create("oue", epsilon=1.0, domain=labels)
report = mech.perturb("Sales")            # one device, OS randomness
batch = mech.perturb_many(values, rng=7)  # simulator / tests
tally = mech.tally(batch)                 # mergeable: tally_a + tally_b

mean = create("piecewise", epsilon=1.0, bounds=(0, 100))   # numeric: the same contract

Every mechanism declares ``kind`` ("frequency", "mean", "distribution") and its capabilities
(``postprocessable``, ``exact_channel``, ``memoized``, ``permanent_epsilon``,
``exact_support_size``); its tally satisfies :class:`AggregateState` (``state.py``).

Importing this package does not load NumPy: ``perturb`` is pure Python. ``perturb_many``,
``tally``, ``decode_many`` and ``Tally`` (imported on first use) load it.
"""

from typing import TYPE_CHECKING, Any

from client_sdk.mechanisms.base import Mechanism, Payload
from client_sdk.mechanisms.grr import GeneralizedRR, RandomizedResponse
from client_sdk.mechanisms.hadamard import HadamardResponse
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.numeric.base import NumericMechanism
from client_sdk.mechanisms.numeric.registry import NUMERIC_MECHANISMS
from client_sdk.mechanisms.olh import OptimizedLocalHashing
from client_sdk.mechanisms.openended import OPEN_MECHANISMS, OpenDomainMechanism
from client_sdk.mechanisms.registry import (
    AUTO_CANDIDATES,
    MECHANISMS,
    PRESETS,
    REGISTRY,
    AnyMechanism,
    AutoChoice,
    Candidate,
    compare,
    create,
    frequency_from_config,
    from_config,
    kind_of,
)
from client_sdk.mechanisms.state import KINDS, AggregateState
from client_sdk.mechanisms.subset import SubsetSelection
from client_sdk.mechanisms.unary import (
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    UnaryEncoding,
)
from client_sdk.mechanisms.validation import MAX_EPSILON, MIN_EPSILON

if TYPE_CHECKING:
    from client_sdk.mechanisms.tally import Tally


def __getattr__(name: str) -> Any:
    # Tally holds NumPy arrays: import it (and NumPy) only when someone asks for it.
    if name == "Tally":
        from client_sdk.mechanisms.tally import Tally

        return Tally
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "AUTO_CANDIDATES",
    "AggregateState",
    "AnyMechanism",
    "AutoChoice",
    "Candidate",
    "GeneralizedRR",
    "HadamardResponse",
    "KINDS",
    "MAX_EPSILON",
    "MECHANISMS",
    "MIN_EPSILON",
    "Mechanism",
    "NUMERIC_MECHANISMS",
    "NumericMechanism",
    "OPEN_MECHANISMS",
    "OpenDomainMechanism",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PRESETS",
    "Payload",
    "REGISTRY",
    "RandomizedResponse",
    "RapporUnary",
    "SubsetSelection",
    "SymmetricUnaryEncoding",
    "Tally",
    "UnaryEncoding",
    "compare",
    "create",
    "frequency_from_config",
    "from_config",
    "kind_of",
]
