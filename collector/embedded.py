"""A collector in a background thread of this process (simulator HTTP mode, ``ldp demo``).

``EmbeddedCollector(db_path)`` serves the same Flask app as ``ldp serve`` with werkzeug's
threaded server on 127.0.0.1, port 0 (a free port); ``.url`` is known once started.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

from collector.app import create_app


class _NoAccessLog(WSGIRequestHandler):
    """werkzeug's handler without the access log line (it would carry the client address)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        return None


class EmbeddedCollector:
    """A real collector on loopback, in a thread; a context manager.

    ``tokens`` maps ``admin``/``analyst``/``ingest`` to bearer tokens; missing ones are
    generated and readable as ``.tokens``. ``settings`` adds other collector settings.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        tokens: Mapping[str, str] | None = None,
        settings: Mapping[str, Any] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.db_path = Path(db_path)
        self.tokens = {
            role: (tokens or {}).get(role) or secrets.token_urlsafe(24)
            for role in ("admin", "analyst", "ingest")
        }
        self.host = host
        self._settings = dict(settings or {})
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self.app: Any = None

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError("the embedded collector is not running: call start() first")
        return f"http://{self.host}:{self._server.server_port}"

    @property
    def admin_token(self) -> str:
        return self.tokens["admin"]

    @property
    def analyst_token(self) -> str:
        return self.tokens["analyst"]

    @property
    def ingest_token(self) -> str:
        return self.tokens["ingest"]

    def start(self) -> EmbeddedCollector:
        """Build the app, bind a free port and serve in a daemon thread."""
        if self._server is not None:
            return self
        config = {
            **self._settings,
            "database": str(self.db_path),
            **{f"{role}_token": token for role, token in self.tokens.items()},
        }
        self.app = create_app(config)
        self._server = make_server(
            self.host, 0, self.app, threaded=True, request_handler=_NoAccessLog
        )
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="ldp-embedded-collector", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the storage connections."""
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.app.extensions["ldp_storage"].close()

    def __enter__(self) -> EmbeddedCollector:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
