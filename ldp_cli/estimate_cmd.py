"""``ldp estimate``: a campaign's estimates from the store (``--db``) or a collector (``--url``)."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import click

import aggregator
from aggregator.export import percent
from client_sdk.errors import InvalidParameter
from ldp_cli.output import emit_json, printable, table

#: Columns of a categorical attribute's table in a multi-attribute answer: the combined count
#: with its own std error and interval, then the raw count with its own (larger) std error.
MULTI_VALUE_HEADERS = (
    "value",
    "count",
    "count std err",
    "count ci low",
    "count ci high",
    "frequency",
    "raw count",
    "raw std err",
)


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
    """The answer from the store; ``query``: :func:`aggregator.service.request_options`'
    arguments (checked there, as the collector checks them for ``--url``)."""
    from aggregator.service import request_options
    from collector.answers import answer_json, campaign_answer
    from ldp_cli.store import opened_store, shown_database

    with opened_store(db, migrate=False, url_option=True) as store:
        campaign = store.get_campaign(campaign_id)
        if campaign is None:
            names = ", ".join(c.id for c, _ in store.list_campaigns()) or "none"
            raise click.ClickException(
                f"no campaign {campaign_id!r} in {shown_database(db)} (campaigns: {names})"
            )
        options = request_options(campaign.kind, start=start, end=end, **query)
        answer = campaign_answer(store, campaign, start=start, end=end, **options)
    return answer_json(campaign, answer)


def _source(db: str | None, url: str | None) -> tuple[str | None, str | None]:
    """``(db, url)`` with exactly one set: the store or the collector to read.

    A flag on the command line wins over the other's environment variable (``LDP_DATABASE``
    for --db, ``LDP_URL`` for --url), as in ``ldp campaign list``: ``LDP_DATABASE=x.db ldp
    estimate c --url U`` asks the collector. Two flags on the command line, or both variables
    and no flag, are a usage error."""
    from click.core import ParameterSource

    ctx = click.get_current_context()

    def typed(name: str) -> bool:
        return ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE

    if db is None and not typed("url") and os.environ.get("LDP_DATABASE_FILE"):
        # As the collector and the other store commands resolve it (ldp_cli.store); not read
        # when --url asks a collector.
        from collector.errors import ConfigError
        from collector.settings import setting_from_environment

        try:
            db = setting_from_environment("database")
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
    if db is not None and url is not None:
        if typed("db") and typed("url"):
            raise click.UsageError(
                "give --db PATH (read the store) or --url URL (ask a collector), not both"
            )
        if typed("db") or typed("url"):
            return (db, None) if typed("db") else (None, url)
        raise click.UsageError(
            "LDP_DATABASE (or LDP_DATABASE_FILE) and LDP_URL are both set: pass --db PATH "
            "(read the store) or --url URL (ask a collector) to choose"
        )
    if db is None and url is None:
        raise click.UsageError(
            "give --db PATH (read the store; or LDP_DATABASE, LDP_DATABASE_FILE) or --url URL "
            "(ask a collector; "
            "or LDP_URL)"
        )
    return db, url


def _from_url(
    url: str, token: str | None, campaign_id: str, params: dict[str, Any], csv: bool
) -> Any:
    from ldp_cli.remote import campaign_segment, collector_request, json_answer

    if not token:
        raise click.ClickException(
            "--url needs the analyst token: export LDP_ANALYST_TOKEN=<token> (or pass --token)"
        )

    answer = collector_request(
        "GET",
        f"{url.rstrip('/')}/v1/campaigns/{campaign_segment(campaign_id)}/estimates",
        token,
        headers={"Accept": "text/csv"} if csv else None,
        params=params,
    )
    return answer.text if csv else json_answer(answer)


def _chosen(post: dict[str, Any]) -> str:
    """`` (chosen X)`` where ``auto`` says which estimate it returned, else nothing."""
    return f" (chosen {post['chosen']})" if post.get("chosen") else ""


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def render_table(body: dict[str, Any]) -> str:
    """The answer as a header block and an aligned table (one row per value; numeric answers:
    the mean with its interval, or the quantiles and the histogram).

    Every line is shown :func:`~ldp_cli.output.printable`: labels and attribute names (an
    admin's), discovered strings (devices') and, with --url, everything the collector sent
    reach the terminal only as text, never as its control sequences."""
    return "\n".join(printable(line) for line in _render(body).split("\n"))


def _render(body: dict[str, Any]) -> str:
    kind = body.get("kind", "frequency")
    if kind == "mean":
        return render_mean(body)
    if kind == "distribution":
        return render_distribution(body)
    if kind == "multi":
        return render_multi(body)
    if kind == "open_domain":
        return render_open(body)
    level = body["level"]
    post = body["postprocess"]
    lines = [
        *_range_header(body),
        f"mechanism {body['mechanism']}, epsilon {body['epsilon']:g}; postprocess "
        f"{post['method']}{_chosen(post)}; {percent(level)} intervals around the raw unbiased "
        f"counts; theoretical std error {body['theoretical_std_error']:,.1f}",
        *([f"postprocess note: {post['note']}"] if post.get("note") else []),
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


def shown(value: str) -> str:
    """A string as a terminal may print it: unprintable characters (a discovered string is
    any bytes the walk found, noise included) as Python escapes, and the spaces at either end
    or in a run as ``\\x20``, as the dashboard shows them (a padded column hid them, so
    ``"a "`` and ``"a"`` looked alike)."""
    from collector.dashboard_openended import shown_string

    return shown_string(value)


def _count(x: float | None) -> str:
    """A count to one decimal; ``-`` where no report measured it (null in the answer)."""
    return "-" if x is None else f"{x:,.1f}"


def _open_rows(items: list[dict[str, Any]], ranked: bool) -> list[list[str]]:
    return [
        [
            *([str(i + 1)] if ranked else []),
            shown(v["value"]),
            _count(v["count"]),
            _count(v["std_error"]),
            _count(v["ci_low"]),
            _count(v["ci_high"]),
            "*" if v["significant"] else "",
        ]
        for i, v in enumerate(items)
    ]


def render_open(body: dict[str, Any]) -> str:
    """An open-domain answer: the discovered strings ranked with intervals and the threshold,
    then the candidates asked about (docs/MECHANISMS.md §24)."""
    level = body["level"]
    lines = [
        *_range_header(body),
        f"mechanism {body['mechanism']} (open domain: strings of at most {body['max_length']} "
        f"bytes), epsilon {body['epsilon']:g} (realised {body['realised_epsilon']:.4g}); "
        f"{percent(level)} intervals",
    ]
    headers = ["value", "count", "std err", "ci low", "ci high", "sig"]
    if body["discovers"]:
        t = body["threshold"]
        lines += ["", f"discovered (top {body['top']}, largest estimated count first)"]
        if body["discovered"]:
            rows = _open_rows(body["discovered"], ranked=True)
            lines.append(table(["rank", *headers], rows, right={0, 2, 3, 4, 5}))
        else:
            lines.append("  none")
        tested = f"Bonferroni over {_plural(t['candidates_tested'], 'string')} tested"
        if t["threshold"] is None:
            threshold = (
                f"none yet for a {body['max_length']}-byte string: the walk's last level holds "
                f"no report yet ({tested})"
            )
        else:
            threshold = (
                f"for a {body['max_length']}-byte string {t['threshold']:,.1f} = z {t['z']:.2f} "
                f"x sigma0 {t['sigma0']:,.1f} ({tested})"
            )
        lines.append(f"* significant: count > z x its null std error; threshold {threshold}")
    else:
        lines += ["", f"no discovery: {body['note']}"]
    if body["candidates"]:
        lines += ["", "candidates (in the order asked)"]
        lines.append(
            table(headers, _open_rows(body["candidates"], ranked=False), right={1, 2, 3, 4})
        )
        lines.append(
            f"* significant: count > z {body['candidate_z']:.2f} x its null std error "
            f"(Bonferroni over {_plural(len(body['candidates']), 'candidate')})"
        )
    elif not body["discovers"]:
        lines.append("ask about strings with --candidate VALUE (repeat it)")
    return "\n".join(lines)


def render_multi(body: dict[str, Any]) -> str:
    """A multi-attribute answer: per attribute a table (or its mean), per declared pair a
    crosstab of consistent counts with each cell's interval."""
    level = body["level"]
    lines = [
        *_range_header(body),
        f"mechanism {body['mechanism']} (several attributes, one report per device), epsilon "
        f"{body['epsilon']:g} (realised {body['realised_epsilon']:.4g}); "
        f"{percent(level)} intervals",
    ]
    for attr in body["attributes"]:
        lines += ["", f"{attr['name']} ({attr['reports']:,} reports carry it)"]
        if attr["kind"] == "mean":
            ci = attr["ci"]
            low, high = attr["bounds"]
            lines.append(
                f"  mean {attr['mean']:.4g} +- {attr['std_error']:.3g} (std err); interval "
                f"[{ci['low']:.4g}, {ci['high']:.4g}]; values clipped into [{low:g}, {high:g}]"
            )
            continue
        # The count's own std error and interval beside it; the raw count (this attribute's
        # reports only: fewer in a declared pair) beside its own, larger, std error.
        rows = [
            [
                v["value"],
                f"{v['count']:,.1f}",
                f"{v['std_error']:,.1f}",
                f"{v['ci_low']:,.1f}",
                f"{v['ci_high']:,.1f}",
                f"{v['frequency']:.4f}",
                f"{v['raw_count']:,.1f}",
                _count(v.get("raw_std_error")),
            ]
            for v in attr["values"]
        ]
        lines.append(table(list(MULTI_VALUE_HEADERS), rows, right=set(range(1, 8))))
    for joint in body["joints"]:
        lines += ["", render_crosstab(joint)]
    for means in body.get("label_means", []):
        lines += ["", f"mean {means['numeric_attribute']} by {means['label_attribute']}"]
        rows = [
            [
                r["label"],
                f"{r['count']:,.1f}",
                "-" if r["mean"] is None else f"{r['mean']:.4g}",
                "-" if r["std_error"] is None else f"{r['std_error']:.3g}",
                "-" if r["ci_low"] is None else f"{r['ci_low']:.4g}",
                "-" if r["ci_high"] is None else f"{r['ci_high']:.4g}",
            ]
            for r in means["rows"]
        ]
        headers = ["label", "count", "mean", "std err", "ci low", "ci high"]
        lines.append(table(headers, rows, right={1, 2, 3, 4, 5}))
    if any(a["kind"] != "mean" for a in body["attributes"]):
        lines += [
            "",
            "count: over all devices (in a declared categorical pair: combined with the pairs' "
            "margins), with its std err and interval; raw count: the attribute's own reports "
            "only, with its own std err",
        ]
    if body["joints"]:
        lines += [
            "",
            f"crosstab cells: consistent count [{percent(level)} interval]; {body['note']}",
        ]
    lines += _multi_trend_lines(body)
    return "\n".join(lines)


#: Per categorical attribute, the trend table shows at most this many values (the largest).
MULTI_TREND_VALUES = 4


def _multi_trend_lines(body: dict[str, Any]) -> list[str]:
    """Per attribute, per window: the window's own estimate and the smoothed one (categorical:
    the largest values' frequencies, ``raw / smoothed``; numeric: the mean, its interval and
    the smoothed mean). Nothing with fewer than two windows."""
    trend = body.get("trend") or []
    if len(trend) < 2 or not trend[0].get("attributes"):
        return []
    z = _z(body["level"])
    lines = ["", "per window (raw unbiased / smoothed; smoothed values borrow strength across "
             "windows, not unbiased per window):"]  # fmt: skip
    for position, attr in enumerate(body["attributes"]):
        per = [t["attributes"][position] for t in trend]
        if attr["kind"] == "mean":
            rows = [
                [
                    t["window"],
                    f"{a['reports']:,}",
                    _num(a["mean"]),
                    _span(
                        None if a["mean"] is None else a["mean"] - z * a["std_error"],
                        None if a["mean"] is None else a["mean"] + z * a["std_error"],
                    ),
                    _num(a["smoothed_mean"]),
                ]
                for t, a in zip(trend, per, strict=True)
            ]
            headers = ["window", "reports", "mean", "interval", "smoothed mean"]
        else:
            ranked = sorted(range(len(attr["values"])), key=lambda i: -attr["values"][i]["count"])
            shown = sorted(ranked[:MULTI_TREND_VALUES])
            rows = [
                [t["window"], f"{a['reports']:,}"]
                + [
                    "-"
                    if a["frequencies"] is None
                    else f"{a['frequencies'][i]:.3f} / {a['smoothed_frequencies'][i]:.3f}"
                    if a["smoothed_frequencies"] is not None
                    else f"{a['frequencies'][i]:.3f}"
                    for i in shown
                ]
                for t, a in zip(trend, per, strict=True)
            ]
            headers = ["window", "reports", *(attr["values"][i]["value"] for i in shown)]
        lines += ["", attr["name"], table(headers, rows, right=set(range(1, len(headers))))]
    return lines


def _z(level: float) -> float:
    from aggregator.estimate import z_value

    return z_value(level)


def render_crosstab(joint: dict[str, Any]) -> str:
    """One declared pair as a crosstab: rows x columns, each cell ``count [low, high]``."""
    a, b = joint["pair"]
    headers = [f"{a} \\ {b}", *joint["columns"]]
    rows = []
    for i, label in enumerate(joint["rows"]):
        cells = [
            f"{joint['counts'][i][j]:,.0f} [{joint['ci_low'][i][j]:,.0f}, "
            f"{joint['ci_high'][i][j]:,.0f}]"
            for j in range(len(joint["columns"]))
        ]
        rows.append([label, *cells])
    return f"{a} x {b}\n" + table(headers, rows, right=set(range(1, len(headers))))


def _central_note(body: dict[str, Any]) -> list[str]:
    """A line stating the central (epsilon, delta) of a campaign sent through a shuffler."""
    if body.get("central_epsilon") is None:
        return []
    return [
        f"shuffled: the release is ({body['central_epsilon']:.4g}, {body['central_delta']:.3g})-DP "
        "centrally (amplification by shuffling, docs/MECHANISMS.md §21)"
    ]


def _deleted_note(body: dict[str, Any]) -> list[str]:
    """A line naming the windows whose reports retention deleted (their tallies are kept)."""
    gone = body.get("reports_deleted") or []
    if not gone:
        return []
    return [
        f"reports of {len(gone)} window(s) {gone[0]} .. {gone[-1]} deleted by retention "
        "(estimated from their kept tallies)"
    ]


def _range_header(body: dict[str, Any]) -> list[str]:
    """The first lines of every answer: the campaign, its reports and windows, what retention
    deleted and the central guarantee of shuffled reports."""
    windows = body["windows"]
    span = f"{windows[0]} .. {windows[-1]}" if windows else "-"
    return [
        f"campaign {body['campaign']}: {body['n']:,} reports in {len(windows)} window(s) {span}",
        *_deleted_note(body),
        *_central_note(body),
    ]


def _numeric_header(body: dict[str, Any]) -> list[str]:
    low, high = body["bounds"]
    return [
        *_range_header(body),
        f"mechanism {body['mechanism']}, epsilon {body['epsilon']:g}; values clipped to "
        f"[{low:g}, {high:g}]; {percent(body['level'])} intervals",
        "",
    ]


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:,.4g}"


def _span(low: float | None, high: float | None) -> str:
    return "-" if low is None or high is None else f"{low:,.4g} .. {high:,.4g}"


def _trend_lines(body: dict[str, Any]) -> list[str]:
    """Per window: the window's own mean (and median) with intervals, and the smoothed mean."""
    distribution = body["kind"] == "distribution"
    rows = []
    for t in body["trend"]:
        row = [t["window"], f"{t['n']:,}", _num(t["mean"])]
        if distribution:
            row += [
                _span(t["mean_low"], t["mean_high"]),
                _num(t["median"]),
                _span(t["median_low"], t["median_high"]),
            ]
        else:
            row.append(_span(t["ci_low"], t["ci_high"]))
        rows.append([*row, _num(t["smoothed_mean"])])
    if len(rows) < 2:
        return []
    headers = ["window", "reports", "mean", "interval"]
    if distribution:
        headers += ["median", "interval"]
    headers.append("smoothed mean")
    return ["", "per window:", table(headers, rows, right=set(range(1, len(headers))))]


def _quantile_name(q: float) -> str:
    return "median" if q == 0.5 else f"p{100 * q:g}"


def render_mean(body: dict[str, Any]) -> str:
    """A mean answer: the mean +- the interval's half-width, the interval, the std errors."""
    ci = body["ci"]
    half = (ci["high"] - ci["low"]) / 2
    lines = _numeric_header(body) + [
        f"mean {body['mean']:,.4g} ± {half:,.4g} ({percent(ci['level'])} interval "
        f"{ci['low']:,.4g} .. {ci['high']:,.4g})",
        # Not "worst case": the estimated error, from the reports, can exceed the formula's
        # bound sqrt(max_x Var / n) (6 reports: 4,472 beside a "worst case" of 4,083).
        f"std error {body['std_error']:,.4g} (estimated from the reports; the mechanism's "
        f"formula bound at n = {body['n']:,}: {body['worst_case_std_error']:,.4g})",
    ]
    lines += _trend_lines(body)
    return "\n".join(lines)


def render_distribution(body: dict[str, Any]) -> str:
    """A distribution answer: mean, quantiles with intervals, then the histogram."""
    m = body["mean_ci"]
    lines = _numeric_header(body) + [
        f"mean {body['mean']:,.4g} ({percent(m['level'])} interval {m['low']:,.4g} .. "
        f"{m['high']:,.4g}; bootstrap over {body['bootstrap']} replicates, widened to hold "
        "the unbiased linear estimate's)",
        "",
    ]
    quantiles = [
        [_quantile_name(q["q"]), f"{q['value']:,.4g}", f"{q['low']:,.4g}", f"{q['high']:,.4g}"]
        for q in body["quantiles"]
    ]
    lines.append(table(["quantile", "value", "ci low", "ci high"], quantiles, right={1, 2, 3}))
    top = max([b["ci_high"] for b in body["bins"]] + [1e-12])
    bins = [
        [
            f"{b['low']:,.4g} .. {b['high']:,.4g}",
            f"{b['frequency']:.4f}",
            f"{b['ci_low']:.4f}",
            f"{b['ci_high']:.4f}",
            "#" * round(30 * b["frequency"] / top),
        ]
        for b in body["bins"]
    ]
    lines += ["", table(["bin", "frequency", "ci low", "ci high", ""], bins, right={1, 2, 3})]
    lines += _trend_lines(body)
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
    help="Confidence level in (0, 1) of the intervals and of the significance tests (below "
    "2^-53 the tests use 2^-53: 1 - level would round to 1).",
)
@click.option(
    "--postprocess",
    type=click.Choice(list(aggregator.POSTPROCESS_METHODS)),
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
@click.option(
    "--top",
    type=click.IntRange(1, None),
    default=None,
    help="Open-domain campaigns: list at most this many discoveries (default 10, at most "
    "200). It also widens the search (max(3 top, 48) prefixes kept per level), so a larger "
    "--top tests more strings: a higher threshold, and counts that can shift a little.",
)
@click.option(
    "--candidate",
    "candidates",
    multiple=True,
    metavar="VALUE",
    help="Open-domain campaigns: also estimate the count of this string (repeat it).",
)
@click.option(
    "--db",
    envvar="LDP_DATABASE",
    metavar="PATH|URL",
    help="Read this store: a SQLite file or a postgresql:// URL [env LDP_DATABASE; --url on "
    "the command line wins over it].",
)
@click.option(
    "--url",
    envvar="LDP_URL",
    metavar="URL",
    help="Ask this collector instead [env LDP_URL; --db on the command line wins over it].",
)
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
    top: int | None,
    candidates: tuple[str, ...],
    db: str | None,
    url: str | None,
    token: str | None,
) -> None:
    """Estimated count of every value of CAMPAIGN, with standard errors and intervals.

    Sums the tallies of the windows from --from to --to, applies --postprocess and lists the
    values significantly above zero. A numeric campaign prints its mean with the interval, or
    its quantiles (median, p90, p99) and histogram. An open-domain campaign lists the strings
    its reports reveal (ranked, with intervals and the significance threshold) and the counts of
    the --candidate strings. Reads the store directly (--db, or
    LDP_DATABASE) or a running collector (--url, with the token in LDP_ANALYST_TOKEN).

    Example:

    \b
        ldp estimate occupation --db ldp.db --from 2026-11-01 --to 2026-11-22
        ldp estimate homepage --db ldp.db --top 20 --candidate example.org
        LDP_ANALYST_TOKEN=... ldp estimate occupation --url http://127.0.0.1:8750 --format csv
    """
    day_from, day_to = _day(start, "--from"), _day(end, "--to")
    # The query's checks (from after to, level, --top/--candidate on a campaign that is not
    # open-domain) are the estimate service's: request_options here for --db, the collector's
    # for --url; the same messages either way.
    db, url = _source(db, url)
    if url is not None:
        params: dict[str, Any] = {"level": repr(level), "postprocess": postprocess}
        if start:
            params["from"] = start
        if end:
            params["to"] = end
        if top is not None:
            params["top"] = str(top)
        if candidates:
            params["candidate"] = list(candidates)
        body = _from_url(url, token, campaign, params, csv=fmt == "csv")
        if fmt == "csv":
            click.echo(body, nl=False)
            return
    else:
        assert db is not None  # exactly one of --db and --url (_source)
        try:
            body = _from_store(
                db,
                campaign,
                day_from,
                day_to,
                level=level,
                postprocess=postprocess,
                top=top,
                candidates=candidates,
            )
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
