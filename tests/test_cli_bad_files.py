"""Files the user hands the ``ldp`` commands that are not what they should be.

A file that is not UTF-8, JSON nested past the parser's stack, a CSV field past the csv module's
limit, a ``--db`` that is not a database: each was a Python traceback. Each must be a one-line
``Error:`` naming the file and the fix, a non-zero exit, and nothing written.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from collector.storage import open_storage
from ldp_cli.main import cli

LATIN1 = b"caf\xe9\nbar\n"  # "café" in Latin-1: byte 0xe9 at offset 3 is not UTF-8


def run(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args))


def refused(result: Result, *words: str) -> None:
    """A clear error: exit 1 or 2, no traceback, every one of ``words`` in the message."""
    assert result.exit_code in (1, 2), (result.exit_code, result.output, result.exception)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    for word in words:
        assert word in result.output, result.output


@pytest.fixture()
def db(tmp_path: Path) -> str:
    """A store with one campaign, ``seed`` (as ``ldp serve --init`` leaves it, plus one)."""
    path = str(tmp_path / "ldp.db")
    store = open_storage(path)
    store.migrate()
    store.close()
    made = run("campaign", "create", "seed", "--db", path, "--domain", "a,b", "-e", "1")
    assert made.exit_code == 0, made.output
    return path


def campaigns(db: str) -> list[str]:
    listed = run("campaign", "list", "--db", db, "--format", "json")
    assert listed.exit_code == 0, listed.output
    return sorted(item["id"] for item in json.loads(listed.output)["campaigns"])


@pytest.mark.parametrize("option", ["--domain-file", "--attributes-file"])
def test_a_file_that_is_not_utf8_is_named_and_nothing_is_created(
    db: str, tmp_path: Path, option: str
) -> None:
    bad = tmp_path / "labels.txt"
    bad.write_bytes(LATIN1)
    result = run("campaign", "create", "x", "--db", db, option, str(bad), "-e", "1")
    refused(result, option, str(bad), "not UTF-8", "0xe9", "offset 3")
    assert campaigns(db) == ["seed"]


def test_a_byte_order_mark_is_not_part_of_the_first_label(db: str, tmp_path: Path) -> None:
    """Windows editors start UTF-8 files with U+FEFF; it was kept in the first label."""
    labels = tmp_path / "labels.txt"
    labels.write_bytes("\ufeffSales\r\nTech\r\n".encode())
    made = run("campaign", "create", "x", "--db", db, "--domain-file", str(labels), "-e", "1")
    assert made.exit_code == 0, made.output
    shown = run("campaign", "show", "x", "--db", db, "--format", "json")
    assert '"Sales"' in shown.output and "\\ufeff" not in shown.output, shown.output


def test_json_nested_too_deeply_is_refused_on_both_options(db: str, tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "attributes.json"
    path.write_text(deep)
    refused(run("campaign", "create", "x", "--db", db, "--attributes", deep), "--attributes")
    refused(
        run("campaign", "create", "x", "--db", db, "--attributes-file", str(path)),
        "--attributes-file",
        "too deeply",
    )
    # A --param value is JSON when it parses; otherwise a string, which the rules then judge.
    param = run(
        "campaign", "create", "x", "--db", db, "--domain", "a,b", "-m", "olh", "--param",
        "g=" + "[" * 100_000, "-e", "1",
    )  # fmt: skip
    refused(param, "g")
    assert campaigns(db) == ["seed"]


@pytest.mark.parametrize(
    "command",
    [
        ["estimate", "seed"],
        ["campaign", "list"],
        ["campaign", "show", "seed"],
        ["tally", "verify"],
        ["retention", "run"],
        ["mix"],
    ],
    ids=lambda c: "-".join(c),
)
def test_a_db_that_is_not_a_database_is_named(tmp_path: Path, command: list[str]) -> None:
    """``ldp estimate`` answered this with StorageUnavailable's traceback."""
    notdb = tmp_path / "notes.txt"
    notdb.write_bytes(LATIN1 * 100)
    refused(run(*command, "--db", str(notdb)), str(notdb), "not a database")
    assert notdb.read_bytes() == LATIN1 * 100
    refused(run(*command, "--db", str(tmp_path / "missing.db")), "no database file")
    assert not (tmp_path / "missing.db").exists()


def test_ldp_serve_names_a_database_that_is_not_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It said "the database failed: file is not a database" without saying which file."""
    for role in ("ADMIN", "ANALYST", "INGEST"):
        monkeypatch.setenv(f"LDP_{role}_TOKEN", role.lower() * 8)
    monkeypatch.delenv("LDP_DATABASE", raising=False)
    notdb = tmp_path / "notes.txt"
    notdb.write_bytes(LATIN1 * 100)
    refused(run("serve", "--database", str(notdb), "-p", "0"), str(notdb), "not a database")
    assert notdb.read_bytes() == LATIN1 * 100


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"col\n" + LATIN1, ["not UTF-8", "0xe9", "offset 7"]),
        (b"col\n" + b"x" * 200_000 + b"\n", ["line 2", "not CSV", "field larger"]),
    ],
    ids=["latin1", "huge-field"],
)
def test_simulate_names_what_is_wrong_with_the_csv(
    tmp_path: Path, content: bytes, words: list[str]
) -> None:
    data = tmp_path / "data.csv"
    data.write_bytes(content)
    out = tmp_path / "out"
    result = run(
        "simulate", "--data", str(data), "--column", "col", "-r", "1", "-e", "1", "-o", str(out)
    )
    refused(result, str(data), *words)
    assert not out.exists()


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--collector", "collector.example:8750"], ["--collector", "http://"]),
        (["--port", "99999"], ["--port", "65535"]),  # it listened on 99999 mod 65536
        (["--retry-seconds", "nan"], ["--retry-seconds", "finite"]),
        (["--database", "{notdb}"], ["{notdb}", "staging file", "not a database"]),
        (["--database", "{missing}"], ["{missing}", "unable to open"]),
    ],
    ids=["url", "port", "nan", "not-a-database", "missing-directory"],
)
def test_ldp_shuffle_refuses_what_it_cannot_serve_with(
    tmp_path: Path, extra: list[str], words: list[str]
) -> None:
    """Each started a shuffler that forwarded nowhere, listened elsewhere, lost its forwarding
    thread or printed a traceback."""
    notdb = tmp_path / "notes.txt"
    notdb.write_bytes(LATIN1)
    paths = {"notdb": str(notdb), "missing": str(tmp_path / "no" / "such.db")}
    options = {
        "--collector": "http://127.0.0.1:9",
        "--token": "t" * 20,
        "--database": str(tmp_path / "s.db"),
        "--port": "0",
    }
    for name, value in zip(extra[::2], extra[1::2], strict=True):
        options[name] = value.format(**paths)
    args = [part for pair in options.items() for part in pair]
    refused(run("shuffle", *args), *(w.format(**paths) for w in words))
    assert not (tmp_path / "s.db").exists() or "--database" in extra


@pytest.mark.parametrize(
    "command",
    [
        ["campaign", "list"],
        ["campaign", "show", "x"],
        ["campaign", "create", "x", "--domain", "a,b", "-e", "1"],
        ["campaign", "archive", "x"],
        ["estimate", "x"],
    ],
    ids=lambda c: "-".join(c[:2]),
)
@pytest.mark.parametrize(
    "body", [b"<html>a web page</html>", b"[" * 5000 + b"]" * 5000], ids=["html", "deep"]
)
def test_a_url_that_is_not_the_collector_is_named(command: list[str], body: bytes) -> None:
    """A 200 that is not the collector's JSON (another server at --url, a captive portal, JSON
    nested past the parser's stack) was a JSONDecodeError or RecursionError traceback."""
    with not_the_collector(body) as url:
        result = run(*command, "--url", url, "--token", "t" * 20)
    refused(result, "is not the collector's JSON", "--url")


def test_simulate_over_http_names_a_url_that_is_not_the_collector(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for role in ("ADMIN", "ANALYST", "INGEST"):
        monkeypatch.setenv(f"LDP_{role}_TOKEN", role.lower() + "-token-0123456789abcdef")
    with not_the_collector(b"<html>a web page</html>") as url:
        result = run("simulate", "--mode", "http", "--url", url, "-a", "occupation", "-e", "1",
                     "-r", "1", "-o", str(tmp_path / "out"))  # fmt: skip
    refused(result, "is not the collector's JSON", "--url")


@contextmanager
def not_the_collector(body: bytes) -> Iterator[str]:
    """A loopback server answering every GET and POST 200 with ``body``; yields its URL."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class NotTheCollector(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer  # noqa: N815 - http.server's naming

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotTheCollector)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("option", ["--chunk", "--max-retention-days"])
def test_retention_numbers_stop_where_sqlite_and_the_settings_do(db: str, option: str) -> None:
    """``--chunk 99999999999999999999`` reached SQLite's LIMIT: OverflowError, a traceback.
    Both options stop at the collector settings' 2**31 - 1 (LDP_MAX_RETENTION_DAYS does)."""
    refused(run("retention", "run", "--db", db, option, str(2**64)), option, "2147483647")
    assert run("retention", "run", "--db", db, option, str(2**31 - 1)).exit_code == 0


@pytest.mark.parametrize(
    ("command", "words"),
    [
        (["audit", "grr", "-e", "1", "--k", "3", "--samples", "1000", "--seed", "-1"], ["--seed"]),
        (["demo", "--seed", "-1"], ["--seed"]),
        (["simulate", "--seed", "-1"], ["--seed"]),
        (["audit", "grr", "-e", "1", "--k", "3", "--samples", str(10**20)], ["--samples"]),
    ],
    ids=["audit-seed", "demo-seed", "simulate-seed", "audit-samples"],
)
def test_numbers_no_run_can_use_are_refused_at_once(command: list[str], words: list[str]) -> None:
    """A negative seed was NumPy's ValueError traceback once the run had started; 10**20
    samples started an audit that would not end."""
    refused(run(*command), *words)
