"""Settings an app reads from a file or the environment, and a closed client (fourth sweep of
the SDK, 2026-11-27).

* An ingest token read from a file (``open("token").read()``) or an endpoint from an ``.env``
  file keeps its line break. The constructor took it; then every config fetch and upload
  failed in the background as "collector unreachable: InvalidHeader" (or ``InvalidURL``), and
  ``report`` returned ``NotSent("not_ready")`` for ever, saying the campaign was being
  fetched. Now the constructor raises ``InvalidParameter`` saying what is wrong (never quoting
  the token).
* ``state_dir=5`` raised a bare ``TypeError`` from ``pathlib`` instead of ``InvalidParameter``.
* ``prefetch`` on a closed client fetched from the collector and wrote the config into the
  ``state_dir`` it had let go (another client may hold it by then), and ``budget_left`` with
  ``reports_per_window=None`` answered; every other call raises ``ClientClosed``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from client_sdk import ClientClosed, InvalidParameter, TelemetryClient
from tests.support.server import CollectorProcess, running_collector


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("settings")) as server:
        body = {"id": "s", "domain": ["a", "b"], "mechanism": "grr", "epsilon": 0.5}
        assert server.post_campaign(body).status_code == 201
        yield server


@pytest.mark.parametrize("suffix", ["\n", "\r\n", " ", "\t"])
def test_a_token_read_with_its_line_break_is_refused_without_quoting_it(
    srv: CollectorProcess, tmp_path: Path, suffix: str
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(srv.ingest_token + suffix)
    with pytest.raises(InvalidParameter, match="ingest_token.*whitespace") as err:
        TelemetryClient(srv.url, ingest_token=token_file.read_text(), state_dir=tmp_path / "s")
    assert srv.ingest_token not in str(err.value)
    # The same token, stripped, works: the state_dir was not kept locked by the refusal.
    with TelemetryClient(
        srv.url, ingest_token=token_file.read_text().strip(), state_dir=tmp_path / "s"
    ) as client:
        client.prefetch("s")
        assert client.report("s", "a")
        assert client.flush(30)


def test_settings_from_the_environment_with_a_line_break_are_refused(
    srv: CollectorProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LDP_ENDPOINT", srv.url + "\n")
    monkeypatch.setenv("LDP_INGEST_TOKEN", srv.ingest_token)
    monkeypatch.setenv("LDP_STATE_DIR", str(tmp_path / "s"))
    with pytest.raises(InvalidParameter, match="url.*LDP_ENDPOINT.*whitespace"):
        TelemetryClient()
    monkeypatch.setenv("LDP_ENDPOINT", srv.url)
    monkeypatch.setenv("LDP_INGEST_TOKEN", srv.ingest_token + "\r")
    with pytest.raises(InvalidParameter, match="LDP_INGEST_TOKEN"):
        TelemetryClient()
    monkeypatch.setenv("LDP_INGEST_TOKEN", srv.ingest_token)
    with TelemetryClient() as client:
        client.prefetch("s")


@pytest.mark.parametrize("url", ["http://127.0.0.1:1 ", "http://127.0.0.1:1\n", "http://a b:1"])
def test_a_url_with_whitespace_is_refused(url: str, tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match="whitespace"):
        TelemetryClient(url, ingest_token="t" * 20, state_dir=tmp_path)


@pytest.mark.parametrize("state_dir", [5, 1.5, b"/tmp/x", ["a"]])
def test_a_state_dir_that_is_no_path_is_an_invalid_parameter(
    state_dir: object, tmp_path: Path
) -> None:
    with pytest.raises(InvalidParameter, match="state_dir must be a path"):
        TelemetryClient("http://127.0.0.1:1", ingest_token="t" * 20, state_dir=state_dir)  # type: ignore[arg-type]


def test_a_closed_client_neither_fetches_nor_answers(srv: CollectorProcess, tmp_path: Path) -> None:
    client = TelemetryClient(
        srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path, reports_per_window=None
    )
    client.close()
    with pytest.raises(ClientClosed):
        client.prefetch("s")
    assert not os.listdir(tmp_path / "campaigns")  # nothing written after close
    with pytest.raises(ClientClosed):
        client.budget_left("s")
