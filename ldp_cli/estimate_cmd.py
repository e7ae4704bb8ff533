"""``ldp estimate``: a campaign's estimates from the store (``--db``) or a collector (``--url``)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import click

import aggregator
from client_sdk.errors import InvalidParameter
from ldp_cli.output import emit_json, table


def _day(value: str | None, name: str) -> dt.date | None:
    if value is None:
        return None
    try:
        if len(value) != 10:
            raise ValueError
        return dt.date.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"must be a day YYYY-MM-DD, got {value!r}", param_hint=name
        ) from None


def _from_store(
    db: str, campaign_id: str, start: dt.date | None, end: dt.date | None, **query: Any
) -> dict[str, Any]:
    from collector.storage import open_storage

    if "://" not in db and not Path(db).is_file():
        raise click.ClickException(
            f"no database at {db}; pass the collector's --database file (or use --url)"
        )
    store = open_storage(db)
    try:
        campaign = store.get_campaign(campaign_id)
        if campaign is None:
            names = ", ".join(c.id for c, _ in store.list_campaigns()) or "none"
            raise click.ClickException(f"no campaign {campaign_id!r} in {db} (campaigns: {names})")
        tallies = store.tallies(
            campaign,
            campaign.window_of(start).isoformat() if start else None,
            campaign.window_of(end).isoformat() if end else None,
        )
        body = aggregator.estimate_windows(
            campaign.mechanism,
            tallies,
            min_reports=campaign.min_reports,
            campaign=campaign.id,
            **query,
        )
    finally:
        store.close()
    body.update(
        {"from": start.isoformat() if start else None, "to": end.isoformat() if end else None}
    )
    return body


def _from_url(
    url: str, token: str | None, campaign_id: str, params: dict[str, str], csv: bool
) -> Any:
    import requests

    if not token:
        raise click.ClickException(
            "--url needs the analyst token: export LDP_ANALYST_TOKEN=<token> (or pass --token)"
        )
    headers = {"Authorization": f"Bearer {token}"}
    if csv:
        headers["Accept"] = "text/csv"
    try:
        answer = requests.get(
            f"{url.rstrip('/')}/v1/campaigns/{campaign_id}/estimates",
            params=params,
            headers=headers,
            timeout=30,
        )
    except requests.RequestException as exc:
        raise click.ClickException(
            f"cannot reach the collector at {url}: {exc}; is 'ldp serve' running?"
        ) from None
    if answer.status_code != 200:
        try:
            message = answer.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = answer.text[:200]
        raise click.ClickException(f"the collector answered {answer.status_code}: {message}")
    return answer.text if csv else answer.json()


def render_table(body: dict[str, Any]) -> str:
    """The answer as a header block and an aligned table, one row per value."""
    level = body["level"]
    post = body["postprocess"]
    windows = body["windows"]
    span = f"{windows[0]} .. {windows[-1]}" if windows else "-"
    lines = [
        f"campaign {body['campaign']}: {body['n']:,} reports in {len(windows)} window(s) {span}",
        f"mechanism {body['mechanism']}, epsilon {body['epsilon']:g}; postprocess "
        f"{post['method']}; {level:.0%} intervals around the raw unbiased counts; "
        f"theoretical std error {body['theoretical_std_error']:,.1f}",
        "",
    ]
    rows = [
        [
            v["value"],
            f"{v['count']:,.1f}",
            f"{v['frequency']:.4f}",
            f"{v['raw_count']:,.1f}",
            f"{v['std_error']:,.1f}",
            f"{v['ci_low']:,.1f}",
            f"{v['ci_high']:,.1f}",
            "*" if v["significant"] else "",
        ]
        for v in body["values"]
    ]
    headers = ["value", "count", "frequency", "raw count", "std err", "ci low", "ci high", "sig"]
    lines.append(table(headers, rows, right={1, 2, 3, 4, 5, 6}))
    top = body["top_k"]
    found = ", ".join(v["value"] for v in top["values"]) or "none"
    lines += [
        "",
        f"* significantly above zero (raw count > {top['threshold']:,.1f} = z {top['z']:.2f} x "
        f"sigma0 {top['sigma0']:,.1f}, Bonferroni over {len(rows)} values): {found}",
    ]
    return "\n".join(lines)


@click.command("estimate")
@click.argument("campaign")
@click.option("--from", "start", metavar="DAY", help="First day (YYYY-MM-DD); default: all.")
@click.option("--to", "end", metavar="DAY", help="Last day (YYYY-MM-DD), inclusive.")
@click.option(
    "--level",
    type=float,
    default=aggregator.DEFAULT_LEVEL,
    show_default=True,
    help="Confidence level of the intervals and of the top-k test.",
)
@click.option(
    "--postprocess",
    type=click.Choice(list(aggregator.POSTPROCESSORS)),
    default=aggregator.DEFAULT_POSTPROCESS,
    show_default=True,
    help="Consistency post-processing (docs/AGGREGATOR.md says which to use when).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "csv"]),
    default="table",
    show_default=True,
    help="table for people; json or csv for machines.",
)
@click.option("--db", envvar="LDP_DATABASE", metavar="PATH", help="Read this SQLite store.")
@click.option("--url", envvar="LDP_URL", metavar="URL", help="Ask this collector instead.")
@click.option(
    "--token",
    envvar="LDP_ANALYST_TOKEN",
    metavar="TOKEN",
    show_envvar=True,
    help="Analyst token for --url (prefer the environment variable).",
)
def estimate_command(
    campaign: str,
    start: str | None,
    end: str | None,
    level: float,
    postprocess: str,
    fmt: str,
    db: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Estimated count of every value of CAMPAIGN, with standard errors and intervals.

    Sums the tallies of the windows from --from to --to, applies --postprocess and lists the
    values significantly above zero. Reads the store directly (--db, or LDP_DATABASE) or a
    running collector (--url, with the token in LDP_ANALYST_TOKEN).

    Example:

    \b
        ldp estimate occupation --db ldp.db --from 2026-11-01 --to 2026-11-22
        LDP_ANALYST_TOKEN=... ldp estimate occupation --url http://127.0.0.1:8750 --format csv
    """
    day_from, day_to = _day(start, "--from"), _day(end, "--to")
    if day_from and day_to and day_from > day_to:
        raise click.BadParameter(f"--from {day_from} is after --to {day_to}")
    if not 0 < level < 1:
        raise click.BadParameter(f"must be in (0, 1), got {level}", param_hint="--level")
    if (db is None) == (url is None):
        raise click.UsageError(
            "give exactly one of --db PATH (read the store) or --url URL (ask a collector)"
        )
    if url is not None:
        params = {"level": repr(level), "postprocess": postprocess}
        if start:
            params["from"] = start
        if end:
            params["to"] = end
        body = _from_url(url, token, campaign, params, csv=fmt == "csv")
        if fmt == "csv":
            click.echo(body, nl=False)
            return
    else:
        assert db is not None  # exactly one of --db and --url, checked above
        try:
            body = _from_store(db, campaign, day_from, day_to, level=level, postprocess=postprocess)
        except aggregator.NotEnoughReports as exc:
            raise click.ClickException(
                f"{exc}; wait for more reports or widen --from/--to"
            ) from None
        except InvalidParameter as exc:
            raise click.ClickException(str(exc)) from None
    if fmt == "json":
        emit_json(body)
    elif fmt == "csv":
        click.echo(aggregator.to_csv(body), nl=False)
    else:
        click.echo(render_table(body))
