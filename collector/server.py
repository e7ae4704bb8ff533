"""Running the collector under gunicorn (production WSGI) as one process tree.

Each worker builds its own app (``preload_app`` off), so no SQLite connection crosses a fork.
The worker class is :class:`collector.worker.CollectorWorker` (threads behind an event loop
that reads requests and sheds load; see its docstring for why). gunicorn's access log is off:
the collector writes its own (``collector.accesslog``), which never records a client address.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from typing import Any

from gunicorn.app.base import BaseApplication

from collector.app import create_app

LISTENING = "ldp serve: listening on {url}"


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _announce(server: Any) -> None:
    """gunicorn ``when_ready`` hook: print the real URL (the port may have been 0)."""
    host, port = server.LISTENERS[0].getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    print(LISTENING.format(url=f"http://{shown}:{port}"), flush=True)


def _no_request_log(worker: Any, req: Any) -> None:
    """gunicorn's ``pre_request`` hook: nothing (its default logs the path at DEBUG)."""


class CollectorServer(BaseApplication):  # type: ignore[misc]
    """gunicorn application that serves ``create_app(config)`` in ``workers`` processes."""

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        host: str,
        port: int,
        workers: int,
        timeout: int,
        threads: int = 4,
        loglevel: str = "info",
        on_ready: Callable[[Any], None] = _announce,
    ) -> None:
        self.app_config = dict(config)
        self.options = {
            "bind": [bind_address(host, port)],
            "workers": workers,
            "worker_class": "collector.worker.CollectorWorker",
            "threads": threads,
            "timeout": timeout,
            "graceful_timeout": 10,
            "accesslog": None,
            "disable_redirect_access_to_syslog": True,
            "errorlog": "-",
            "loglevel": loglevel,
            "preload_app": False,
            "proc_name": "ldp-serve",
            "when_ready": on_ready,
            # gunicorn's default hook logs every request's path at DEBUG: campaign ids and
            # upload times in order, which the access log's route templates leave out.
            "pre_request": _no_request_log,
            # gunicorn >= 25 opens a control socket at one fixed path per user; several
            # collectors (tests, benchmarks) would fight over it.
            "control_socket_disable": True,
        }
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            if key in self.cfg.settings:  # control_socket_disable exists from gunicorn 25 on
                self.cfg.set(key, value)

    def load(self) -> Any:
        try:
            app = create_app(self.app_config)
            # Each worker polls the lease; one of them (of any replica) sweeps per interval.
            app.extensions["ldp_retention"].ensure_started()
            app.extensions["ldp_mixer"].ensure_started()  # staged reports -> reports
            return app
        except Exception as exc:  # a worker that cannot build the app must say why
            print(f"ldp serve: worker failed to start: {exc}", file=sys.stderr, flush=True)
            raise
