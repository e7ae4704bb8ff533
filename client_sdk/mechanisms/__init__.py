"""The LDP mechanisms: the single definition of each one's mathematics.

mech = create("oue", epsilon=1.0, domain=labels)
report = mech.perturb("Sales")            # one device, OS randomness
batch = mech.perturb_many(values, rng=7)  # simulator / tests
tally = mech.tally(batch)                 # mergeable: tally_a + tally_b

Importing this package does not load NumPy: ``perturb`` is pure Python. ``perturb_many``,
``tally``, ``decode_many`` and ``Tally`` (imported on first use) load it.
"""

from typing import TYPE_CHECKING, Any

from client_sdk.mechanisms.base import Mechanism, Payload
from client_sdk.mechanisms.grr import GeneralizedRR, RandomizedResponse
from client_sdk.mechanisms.hadamard import HadamardResponse
from client_sdk.mechanisms.longitudinal import RapporUnary
from client_sdk.mechanisms.olh import OptimizedLocalHashing
from client_sdk.mechanisms.registry import (
    AUTO_CANDIDATES,
    MECHANISMS,
    PRESETS,
    AutoChoice,
    Candidate,
    compare,
    create,
    from_config,
)
from client_sdk.mechanisms.subset import SubsetSelection
from client_sdk.mechanisms.unary import (
    OptimizedUnaryEncoding,
    SymmetricUnaryEncoding,
    UnaryEncoding,
)
from client_sdk.mechanisms.validation import MAX_EPSILON

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
    "AutoChoice",
    "Candidate",
    "GeneralizedRR",
    "HadamardResponse",
    "MAX_EPSILON",
    "MECHANISMS",
    "Mechanism",
    "OptimizedLocalHashing",
    "OptimizedUnaryEncoding",
    "PRESETS",
    "Payload",
    "RandomizedResponse",
    "RapporUnary",
    "SubsetSelection",
    "SymmetricUnaryEncoding",
    "Tally",
    "UnaryEncoding",
    "compare",
    "create",
    "from_config",
]
