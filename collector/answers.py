"""A campaign's estimates for a range of days: storage read + the one estimate service.

``campaign_answer`` is the whole estimate query of the collector: the HTTP view
(``GET /v1/campaigns/{id}/estimates``), the dashboard and ``ldp estimate --db`` call it and only
parse their inputs and format the typed answer (:mod:`aggregator.results`). It reads the running
tallies of the windows that hold the days asked for (O(tally size) per window) and hands them to
:func:`aggregator.service.estimate_range`, with the campaign's own minimum number of reports.
``postprocess="pattern"`` also reads the stored reports of those windows (O(reports), built
on demand: docs/AGGREGATOR.md "Pattern MLE") into pattern histograms; a window whose reports
retention deleted gets none, and the answer falls back to ``mle`` saying so.
"""

from __future__ import annotations

import datetime as dt
from contextlib import nullcontext
from dataclasses import replace
from typing import Any

from aggregator.pattern import PatternHistogram, histogram_of_payloads, pattern_refusal
from aggregator.postprocess import PATTERN_METHOD
from aggregator.schema import to_json
from aggregator.service import EstimateAnswer, EstimateQuery, estimate_range
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import Mechanism, OpenDomainMechanism
from collector.campaigns import Campaign
from collector.shuffled import central_fields
from collector.storage import Storage

#: ``postprocess=pattern`` reads at most this many stored reports per query (20-30 us per
#: report on a loaded 2-core host, so 10-15 s at the cap; docs/AGGREGATOR.md "Pattern MLE").
MAX_PATTERN_REPORTS = 500_000


def campaign_answer(
    store: Storage,
    campaign: Campaign,
    *,
    start: dt.date | None = None,
    end: dt.date | None = None,
    **options: Any,
) -> EstimateAnswer:
    """The typed estimate of ``campaign`` over the days ``start``..``end`` (None: unbounded).

    ``options`` are :class:`~aggregator.service.EstimateQuery` fields (``level``,
    ``postprocess``, ``top_k``, ``trend``, ``smoothing``, ``quantiles``, ``bootstrap``). The
    answer's ``from``/``to`` echo the days asked for (null when not given). Raises what
    :func:`~aggregator.service.estimate_range` raises (``NotEnoughReports``,
    ``InvalidParameter``; also for ``postprocess="pattern"`` over more than
    :data:`MAX_PATTERN_REPORTS` stored reports).
    """
    query = EstimateQuery(min_reports=campaign.min_reports, campaign=campaign.id, **options)
    mech = campaign.mechanism
    if query.candidates and isinstance(mech, OpenDomainMechanism):
        # A string no device could report is refused before any read: the aggregator found it
        # only after the whole discovery (5 to 27 s on a pem campaign of 31 windows), and on a
        # young campaign answered "not enough reports" instead, so the caller retried it.
        for candidate in query.candidates:
            mech.normalise(candidate)
    # An SS campaign whose tally keeps its pattern counts needs no report read.
    wants_patterns = (
        query.postprocess == PATTERN_METHOD
        and pattern_refusal(campaign.mechanism) is None
        and not getattr(campaign.mechanism, "patterns", False)
    )
    # The pattern MLE compares each window's reports with its tally: both reads in one snapshot
    # where the backend offers one, so an ingest committing meanwhile does not split them.
    snapshot = getattr(store, "snapshot", None) if wants_patterns else None
    with snapshot() if snapshot is not None else nullcontext():
        tallies = store.tallies(
            campaign,
            campaign.window_of(start).isoformat() if start else None,
            campaign.window_of(end).isoformat() if end else None,
        )
        # Windows whose reports retention deleted (docs/COLLECTOR.md "Retention"): still
        # estimated.
        mark = store.purged_before(campaign)
        patterns = None
        if wants_patterns:
            kept = [w for w in tallies if mark is None or w >= mark]
            held = sum(int(tallies[w].n) for w in kept)
            if held > MAX_PATTERN_REPORTS:
                raise InvalidParameter(
                    f"postprocess 'pattern' reads every stored report of the range: {held:,} "
                    f"reports is more than {MAX_PATTERN_REPORTS:,}; narrow from/to or use 'mle'"
                )
            patterns = window_patterns(store, campaign, list(tallies), purged_before=mark)
    shown_from = start.isoformat() if start else None
    shown_to = end.isoformat() if end else None
    answer = estimate_range(campaign.mechanism, tallies, query, patterns=patterns)
    deleted = [w for w in sorted(tallies) if mark is not None and w < mark]
    # The answer echoes the days asked for, not the windows they fall in (null: unbounded).
    return replace(answer, from_=shown_from, to=shown_to, reports_deleted=deleted)


def window_patterns(
    store: Storage, campaign: Campaign, windows: list[str], *, purged_before: str | None
) -> dict[str, PatternHistogram | None]:
    """Per window, the pattern histogram of its stored reports (mixed and staged), or None for
    a window before the purge mark (its reports are deleted). O(reports of the windows): each
    report is read and decoded once, ``PAYLOAD_CHUNK`` at a time."""
    mech = campaign.mechanism
    if not isinstance(mech, Mechanism):
        raise InvalidParameter(f"campaign {campaign.id!r} is not a frequency campaign")
    out: dict[str, PatternHistogram | None] = {}
    for window in windows:
        if purged_before is not None and window < purged_before:
            out[window] = None
            continue
        out[window] = histogram_of_payloads(
            mech, (payload for _, payload in store.iter_reports(campaign, window))
        )
    return out


def answer_json(campaign: Campaign, answer: EstimateAnswer) -> dict[str, Any]:
    """The served JSON of an answer: its fields, plus ``central_epsilon``/``central_delta`` when
    the campaign's reports come through a shuffler (docs/MECHANISMS.md §21). HTTP, the
    dashboard and ``ldp estimate`` all show this one form."""
    body: dict[str, Any] = to_json(answer)
    body.update(central_fields(campaign, body))
    return body
