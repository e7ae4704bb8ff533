"""``ldp ... --url`` against a server whose 2xx answers are not the collector's shape.

Before, ``{"campaigns": 5}`` from ``GET /v1/campaigns``, a campaign resource without
``mechanism`` or an estimate answer that is a list ended the command with a Python traceback
(``TypeError: 'int' object is not iterable``, ``KeyError: 'mechanism'``). Now it is one line
naming the URL and what could not be read, exit status 1; the same exceptions raised by a
command that no collector answered still propagate (they would be the CLI's own bugs).
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from click.testing import CliRunner

from ldp_cli.main import cli
from tests.support.fake_http import JsonHandler, serving


class Odd(JsonHandler):
    """Answers every request 200 with ``body``."""

    body: ClassVar[Any] = None

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, type(self).body)

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer(200, type(self).body)


CASES = [
    (["campaign", "list"], {"campaigns": 5}, "TypeError"),
    (["campaign", "list"], {"campaigns": [{"id": "x"}]}, "KeyError: 'mechanism'"),
    (["campaign", "list"], [1, 2], "TypeError"),
    (["campaign", "show", "x"], {"id": "x"}, "KeyError: 'campaigns'"),
    (["campaign", "archive", "x"], {"id": "x"}, "KeyError: 'archived'"),
    (["campaign", "create", "x", "-e", "1", "--domain", "a,b"], {"id": "x"}, "KeyError"),
    (["estimate", "x"], {"campaign": "x"}, "KeyError"),
    (["estimate", "x"], [], "AttributeError"),
]


@pytest.mark.parametrize(("args", "body", "words"), CASES, ids=lambda v: str(v)[:30])
def test_an_answer_of_another_shape_is_a_one_line_error(
    args: list[str], body: Any, words: str
) -> None:
    handler = type("H", (Odd,), {"body": body})
    with serving(handler) as url:
        result = CliRunner().invoke(cli, [*args, "--url", url, "--token", "t" * 20])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert f"the answer from {url}/v1/campaigns" in result.output
    assert words in result.output
    assert "Traceback" not in result.output


def test_the_cli_s_own_errors_still_propagate_when_no_collector_answered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Only an answer read from --url is blamed: without one, the exception is the CLI's."""
    from ldp_cli import mechanisms_cmd

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise KeyError("a bug")

    monkeypatch.setattr(mechanisms_cmd, "compare", broken)
    result = CliRunner().invoke(cli, ["mechanisms", "--epsilon", "1", "--k", "4"])
    assert isinstance(result.exception, KeyError)
