"""``ldp ... --url`` against an answer of another shape (cd176ed): what the eighth mutation
sweep found unchecked (docs/MUTATION.md, "eighth sweep").

The one-line error quotes what could not be read (``KeyError: 'mechanism'``); a detail made
of what a hostile server sent (a key, a value) can be as long as its answer, so the line shows
its first 200 characters, no more and no fewer, and stays one short line.
"""

from __future__ import annotations

from typing import Any, ClassVar

from click.testing import CliRunner

from aggregator.export import printable
from ldp_cli import remote
from ldp_cli.main import cli
from tests.support.fake_http import JsonHandler, serving

LONG = "k" * 1000


class Odd(JsonHandler):
    """Answers every GET 200 with ``body``."""

    body: ClassVar[Any] = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, type(self).body)


def test_a_long_detail_of_an_unreadable_answer_is_cut_to_200_characters() -> None:
    handler = type("H", (Odd,), {"body": {LONG: 1}})  # a campaign list without "campaigns"
    with serving(handler) as url:
        result = CliRunner().invoke(cli, ["campaign", "list", "--url", url, "--token", "t" * 20])
    assert result.exit_code == 1, result.output
    assert "KeyError: 'campaigns'" in result.output
    assert remote.ANSWERED_BY == [f"{url}/v1/campaigns"]  # until the next command starts
    try:
        # What the command would show had the missing key been the server's long one.
        error = remote.unreadable_answer(KeyError(LONG))
    finally:
        remote.ANSWERED_BY.clear()
    assert error is not None
    detail = printable(str(KeyError(LONG)))
    assert len(detail) > 200
    assert f"(KeyError: {detail[:200]}); is --url" in error.message
