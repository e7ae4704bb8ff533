"""A process forked after its ``TelemetryClient`` started (fourth sweep of the SDK, 2026-11-27).

An app that creates its client at import time and then forks (a pre-fork server, a
``multiprocessing`` pool with the ``fork`` start method, a daemonising ``os.fork()``) hands the
child a copy of the client: the same SQLite connection, the same ``flock`` descriptor, no
upload thread. Before:

* the child's ``report`` stored reports through the parent's SQLite connection (which SQLite
  forbids across a fork) into the parent's outbox, with no upload thread of its own;
* the child's exit (``close()`` from ``atexit``) called ``flock(LOCK_UN)`` on the descriptor it
  shares with the parent, which released the parent's lock on ``state_dir``: a second client
  then opened the same ``state_dir`` while the parent's still ran (``StateDirInUse`` is the
  documented guarantee).

Now the inherited client is closed in the child without touching what it shares with the
parent: its calls raise ``ClientClosed`` saying it was inherited through ``os.fork()``, and its
``close()`` leaves the parent's lock alone.
"""

from __future__ import annotations

import os
import select
import signal
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from client_sdk import ClientClosed, PrivacyBudget, StateDirInUse, TelemetryClient
from tests.support.server import CollectorProcess, running_collector

pytestmark = [
    pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork"),
    pytest.mark.filterwarnings("ignore:.*fork.*:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("fork")) as server:
        body = {"id": "f", "domain": ["a", "b"], "mechanism": "grr", "epsilon": 0.5}
        assert server.post_campaign(body).status_code == 201
        yield server


def _client(srv: CollectorProcess, state_dir: Path) -> TelemetryClient:
    client = TelemetryClient(
        srv.url,
        ingest_token=srv.ingest_token,
        state_dir=state_dir,
        campaigns=["f"],
        reports_per_window=None,
        budget=PrivacyBudget.unlimited(),
        flush_interval=3600,
        close_timeout=5,
    )
    client.prefetch()
    return client


#: Generous bound on a forked child's answer (not a timing claim).
CHILD_DEADLINE = 120.0


def _in_child(action: Callable[[], str]) -> str:
    """Run ``action`` in a forked child; what it returned, or the exception it raised.

    Callers fork with the parent client's upload thread idle (after a ``flush``): a fork copies
    only the calling thread, and a lock another thread holds at that moment (SQLite's, while
    the thread checkpoints) stays held for ever in the child."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which never returns to pytest
        try:
            os.close(read)
            try:
                out = action()
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                out = f"{type(exc).__name__}: {exc}"
            os.write(write, out.encode())
        finally:
            os._exit(0)
    os.close(write)
    # A bound, not a timing claim: a child of a threaded process that deadlocked (a lock some
    # other thread held at the fork) fails the test instead of hanging the suite.
    ready, _, _ = select.select([read], [], [], CHILD_DEADLINE)
    if not ready:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        os.close(read)
        pytest.fail(f"the forked child gave no answer within {CHILD_DEADLINE} s")
    with os.fdopen(read) as pipe:
        text = pipe.read()
    assert os.waitpid(pid, 0)[1] == 0
    return text


def test_the_child_cannot_report_through_the_inherited_client(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    client = _client(srv, tmp_path / "state")
    try:
        assert client.report("f", "a")
        assert client.flush(30)  # the upload thread idle at the fork (see _in_child)

        def report() -> str:
            return repr(client.report("f", "b"))

        out = _in_child(report)
        assert out.startswith(ClientClosed.__name__), out
        assert "os.fork()" in out
        # Nothing reached the parent's outbox from the child.
        assert client.pending_reports() == []
        assert client.flush(30)
        assert [r["outcome"] for r in client.sent_reports()] == ["acknowledged"]
    finally:
        client.close()


def test_the_childs_close_keeps_the_parents_lock(srv: CollectorProcess, tmp_path: Path) -> None:
    state_dir = tmp_path / "state"
    client = _client(srv, state_dir)
    try:

        def close_and_reopen() -> str:
            client.close()  # what the child's atexit does when it exits normally
            try:
                TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=state_dir)
            except StateDirInUse:
                return "in use"
            return "opened"

        # The parent still holds state_dir: the child cannot open it either.
        assert client.flush(30)  # the upload thread idle at the fork (see _in_child)
        assert _in_child(close_and_reopen) == "in use"
        with pytest.raises(StateDirInUse):
            TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=state_dir)
        # The parent's client works on.
        assert client.report("f", "a")
        assert client.flush(30)
        assert client.stats()["accepted"] == 1
    finally:
        client.close()
    # Closed by its owner, the state_dir is free again.
    TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=state_dir).close()


def test_a_child_makes_its_own_client_on_its_own_state_dir(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    client = _client(srv, tmp_path / "parent")

    def own_client() -> str:
        child = _client(srv, tmp_path / "child")
        try:
            return f"{bool(child.report('f', 'a'))} {child.flush(30)}"
        finally:
            child.close()

    try:
        assert client.flush(30)  # the upload thread idle at the fork (see _in_child)
        assert _in_child(own_client) == "True True"
    finally:
        client.close()
