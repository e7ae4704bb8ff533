"""``ldp shuffle``: a shuffler between devices and the collector (Encode-Shuffle-Analyze).

Devices seal each report to the collector's public key (``client_sdk.sealed``) and POST it,
one report per request, to the shuffler. The shuffler cannot read a message, keeps no address
and no arrival time (it logs no requests), stages each message durably in SQLite before it
answers 202, and once it holds at least B messages it takes the oldest whole multiple of B,
permutes them with the operating system's randomness and forwards them to the collector's
``POST /v1/sealed``; it deletes them only after the collector's 2xx. A crash at any point
loses nothing (staged before 202) and counts nothing twice (the report ids inside the
messages make a resent batch duplicates).

Below B it waits, however long: forwarding a smaller batch would shrink the crowd every report
hides in, and padding with dummy reports would bias the estimates. docs/SHUFFLE.md has the
guarantee and its limits; docs/MECHANISMS.md §21 the amplification it buys.
"""

from shuffler.forwarder import Forwarder, ForwardResult
from shuffler.staging import Staging

__all__ = ["ForwardResult", "Forwarder", "Staging"]
