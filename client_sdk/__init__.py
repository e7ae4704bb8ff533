"""On-device half of ldp-telemetry: LDP mechanisms and the telemetry client.

A true value exists only inside this package, between the app's call and ``perturb``; it is never
stored, logged or sent.

Light: importing the package loads only the standard library; ``requests`` loads when a client
is made, and NumPy only on the batch path (``perturb_many``, ``report_many``, ``tally``), which
needs the ``[batch]`` extra. See docs/SDK.md "Installation".
"""

from client_sdk import mechanisms
from client_sdk.client import TelemetryClient
from client_sdk.errors import (
    AuthenticationFailed,
    CampaignNotReady,
    ConfigAboveCeiling,
    InvalidParameter,
    InvalidReport,
    LDPError,
    OutboxFull,
    PrivacyBudgetExceeded,
    StateDirInUse,
    StateUnusable,
    StorageFailed,
    TransportError,
    UnknownCampaign,
    ValueNotInDomain,
)
from client_sdk.ledger import BudgetSpent, DeviceSpent, PrivacyBudget
from client_sdk.outbox import NotSent, Report
from client_sdk.state import ClientClosed

__version__ = "0.1.0"

__all__ = [
    "AuthenticationFailed",
    "BudgetSpent",
    "CampaignNotReady",
    "ClientClosed",
    "ConfigAboveCeiling",
    "DeviceSpent",
    "InvalidParameter",
    "InvalidReport",
    "LDPError",
    "NotSent",
    "OutboxFull",
    "PrivacyBudget",
    "PrivacyBudgetExceeded",
    "Report",
    "StateDirInUse",
    "StateUnusable",
    "StorageFailed",
    "TelemetryClient",
    "TransportError",
    "UnknownCampaign",
    "ValueNotInDomain",
    "__version__",
    "mechanisms",
]
