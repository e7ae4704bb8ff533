"""The collector service: campaigns, report ingest, storage and the analyst endpoints.

app = create_app({"database": "ldp.db", "admin_token": ..., ...})   # Flask app factory
with EmbeddedCollector("ldp.db") as c: ...                           # in a thread
ldp serve                                                            # gunicorn, N workers
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collector.app import create_app
    from collector.campaigns import Campaign
    from collector.embedded import EmbeddedCollector
    from collector.errors import (
        APIError,
        CampaignExists,
        CollectorError,
        ConfigError,
        StorageBusy,
        StorageError,
        StorageUnavailable,
    )
    from collector.settings import SETTINGS, Setting, load_settings
    from collector.storage import SQLiteStorage, Storage, open_storage

# Loaded on first use, so a part that needs one module (the shuffler's error answers need
# ``collector.errors``) does not import the app, the storage and the dashboard with it.
_HOMES = {
    "create_app": "collector.app",
    "Campaign": "collector.campaigns",
    "EmbeddedCollector": "collector.embedded",
    **dict.fromkeys(
        [
            "APIError",
            "CampaignExists",
            "CollectorError",
            "ConfigError",
            "StorageBusy",
            "StorageError",
            "StorageUnavailable",
        ],
        "collector.errors",
    ),
    **dict.fromkeys(["SETTINGS", "Setting", "load_settings"], "collector.settings"),
    **dict.fromkeys(["SQLiteStorage", "Storage", "open_storage"], "collector.storage"),
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'collector' has no attribute {name!r}")
    return getattr(importlib.import_module(home), name)


__all__ = [
    "APIError",
    "Campaign",
    "CampaignExists",
    "CollectorError",
    "ConfigError",
    "EmbeddedCollector",
    "SETTINGS",
    "SQLiteStorage",
    "Setting",
    "Storage",
    "StorageBusy",
    "StorageError",
    "StorageUnavailable",
    "create_app",
    "load_settings",
    "open_storage",
]
