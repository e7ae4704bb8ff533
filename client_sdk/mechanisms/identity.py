"""What makes two mechanisms the same: the configuration a device rebuilds them from.

Every kind of mechanism (frequency oracle, numeric, open-domain, multi-attribute) states its
campaign configuration with ``config()``; equality, hashing and the configuration digest that
devices and the collector compare (a stale digest is refused) all derive from it here, once.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class ConfigIdentity:
    """Equality, hash and :meth:`digest` from :meth:`config` (canonical JSON)."""

    def config(self) -> dict[str, Any]:
        raise NotImplementedError

    def digest(self) -> str:
        """A sha256 hex digest of :meth:`config` (canonical JSON)."""
        blob = json.dumps(self.config(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigIdentity) and self.config() == other.config()

    def __hash__(self) -> int:
        return hash(self.digest())
