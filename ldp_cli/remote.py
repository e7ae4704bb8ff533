"""The CLI's requests to a running collector (``--url``): reaching it, its error answers, and
answers that are not the JSON they should be (another server at that URL, a proxy's page)."""

from __future__ import annotations

from typing import Any

import click

from aggregator.export import printable
from client_sdk.transport import json_of

#: URLs whose collector answered this process with a 2xx (``collector_request``): an answer
#: this CLI cannot read is then reported against them (``ldp_cli.main``), not as a traceback.
ANSWERED_BY: list[str] = []


def campaign_segment(campaign_id: str) -> str:
    """``campaign_id`` as one URL path segment, or a ``click.ClickException`` for an id no
    campaign can have (``collector.campaigns.SLUG``).

    Put in the path as typed, ``ldp campaign archive 'occupation/archive?' --url ...`` archived
    campaign ``occupation`` (the ``?`` cut the path, and the HTTP client resolves ``../``
    segments too), where ``--db`` said there is no such campaign: an irreversible action on a
    campaign nobody named. The id is percent-encoded as well, should the rule ever widen.
    """
    from urllib.parse import quote

    from collector.campaigns import SLUG

    if not SLUG.fullmatch(campaign_id):
        raise click.ClickException(
            f"no campaign {campaign_id!r}: campaign ids match {SLUG.pattern} "
            "(see: ldp campaign list)"
        )
    return quote(campaign_id, safe="")


def collector_request(
    method: str, url: str, token: str, *, headers: dict[str, str] | None = None, **kwargs: Any
) -> Any:
    """``requests.request`` with the token; a ``click.ClickException`` for an unreachable
    collector or a 4xx/5xx (its error message quoted)."""
    import requests

    try:
        answer = requests.request(
            method,
            url,
            headers={"Authorization": f"Bearer {token}", **(headers or {})},
            timeout=30,
            **kwargs,
        )
    except requests.RequestException as exc:
        raise click.ClickException(
            f"cannot reach the collector at {url}: {exc}; is 'ldp serve' running?"
        ) from None
    if answer.status_code >= 400:
        try:
            message = str(json_of(answer)["error"]["message"])
        except (ValueError, KeyError, TypeError):
            message = answer.text[:200]
        # Shown, not run: whatever answers at --url chose these characters, and a terminal
        # runs its control sequences (OSC sets the window title or makes a link, a carriage
        # return overwrites the line: "Error: ...\rfake: all good").
        raise click.ClickException(
            f"the collector answered {answer.status_code}: {printable(message)}"
        )
    ANSWERED_BY.append(url)
    return answer


def unreadable_answer(exc: Exception) -> click.ClickException | None:
    """The error to show for ``exc``, raised after a collector answered this process with a
    2xx, when it is what reading an answer of the wrong shape raises (a key missing, a list
    where an object belongs); None when no collector has answered."""
    if not ANSWERED_BY or not isinstance(
        exc, KeyError | TypeError | AttributeError | IndexError | ValueError
    ):
        return None
    from client_sdk import __version__

    return click.ClickException(
        f"the answer from {printable(ANSWERED_BY[-1])} is not what ldp {__version__} reads "
        f"({type(exc).__name__}: {printable(str(exc))[:200]}); is --url a collector of this "
        "version?"
    )


def json_answer(answer: Any) -> Any:
    """The JSON body of a collector's 2xx, or a ``click.ClickException`` saying it is not."""
    try:
        return json_of(answer)
    except ValueError:
        raise click.ClickException(
            f"{answer.url} answered {answer.status_code} with a body that is not the "
            f"collector's JSON (is --url the collector's address?): {answer.text[:120]!r}"
        ) from None
