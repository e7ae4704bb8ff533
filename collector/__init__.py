"""The collector service: campaigns, report ingest, storage and the analyst endpoints.

app = create_app({"database": "ldp.db", "admin_token": ..., ...})   # Flask app factory
with EmbeddedCollector("ldp.db") as c: ...                           # in a thread
ldp serve                                                            # gunicorn, N workers
"""

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
