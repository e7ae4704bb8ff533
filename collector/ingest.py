"""Report ingest: reading an upload body, validating each report, storing the valid ones.

Guarantees:

* a request refused as a whole (wrong content type, bad gzip or JSON, a stale digest, over a
  size limit) stores nothing;
* otherwise every report is checked on its own (id, day, payload shape for the campaign's
  mechanism) and the valid ones are stored and tallied in one transaction; each invalid one is
  listed with its index and a reason;
* a report id already stored for the campaign (on PostgreSQL: for the campaign and the
  report's window; a retry carries its original day) or repeated within the batch is a
  duplicate: not stored or counted again, and not an error, so a retried upload is safe.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import AggregateState, AnyMechanism, Payload
from collector import clock
from collector.campaigns import CLOCK_SKEW_DAYS, Campaign
from collector.errors import APIError
from collector.storage import ReportRow, Storage, WindowBatch

REPORT_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
_DAY = re.compile(r"\d{4}-\d{2}-\d{2}")
_REPORT_KEYS = frozenset(("id", "day", "payload"))
_BATCH_KEYS = frozenset(("digest", "reports"))


@dataclass
class BatchResult:
    """The answer to one upload: counts and the reasons for each rejected report."""

    accepted: int = 0
    duplicate: int = 0
    rejected: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return self.accepted + self.duplicate + self.rejected

    def reject(self, index: int, rid: object, reason: str) -> None:
        self.rejected += 1
        self.errors.append(
            {
                "index": index,
                "id": rid[:64] if type(rid) is str else None,
                "reason": f"report #{index}: {reason}",
            }
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "accepted": self.accepted,
            "duplicate": self.duplicate,
            "rejected": self.rejected,
            "errors": self.errors,
        }


def too_large(what: str, limit: int, setting: str) -> APIError:
    return APIError(
        413,
        "too_large",
        f"{what} exceeds the limit of {limit}; split the batch (limit set by {setting})",
    )


def decode_body(
    raw: bytes, *, content_type: str | None, content_encoding: str | None, max_bytes: int
) -> object:
    """The JSON value of an upload body, after an optional gzip layer capped at ``max_bytes``."""
    mimetype = (content_type or "").split(";", 1)[0].strip().lower()
    if mimetype != "application/json":
        raise APIError(
            415,
            "unsupported_media_type",
            f"send Content-Type: application/json, got {content_type or 'none'!r}",
        )
    encoding = (content_encoding or "identity").strip().lower()
    if encoding == "gzip":
        raw = gunzip_capped(raw, max_bytes)
    elif encoding != "identity":
        raise APIError(
            415,
            "unsupported_media_type",
            f"Content-Encoding must be gzip or absent, got {content_encoding!r}",
        )
    if len(raw) > max_bytes:
        raise too_large(f"the body ({len(raw)} bytes)", max_bytes, "LDP_MAX_BODY_BYTES")
    try:
        # UTF-8 only (RFC 8259 section 8.1): json.loads on bytes would also guess UTF-16/32.
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise APIError(
            400, "malformed_json", f"the body must be UTF-8 encoded JSON: {exc}"
        ) from None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise APIError(400, "malformed_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        # A body of nested arrays/objects deeper than the parser's stack ("[[[[..."): refuse it
        # as bad input (it was a 500 before the reliability fuzzing found it).
        raise APIError(
            400,
            "malformed_json",
            "the body nests JSON arrays or objects too deeply; no valid request nests more "
            "than a few levels",
        ) from None


def gunzip_capped(raw: bytes, max_bytes: int) -> bytes:
    """Decompress a gzip body, refusing (413) as soon as the output passes ``max_bytes``.

    The cap is enforced while decompressing, so a small gzip bomb never expands in memory.
    """
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(raw, max_bytes + 1)
        if len(out) > max_bytes or inflater.unconsumed_tail:
            raise too_large("the decompressed body", max_bytes, "LDP_MAX_BODY_BYTES")
        out += inflater.flush()
    except zlib.error as exc:
        raise APIError(400, "malformed_body", f"the body is not valid gzip: {exc}") from None
    if not inflater.eof:
        raise APIError(400, "malformed_body", "the gzip body is truncated")
    if len(out) > max_bytes:
        raise too_large("the decompressed body", max_bytes, "LDP_MAX_BODY_BYTES")
    return out


class _Days:
    """Day string -> window start (or the reason it is refused), cached within one batch."""

    def __init__(self, campaign: Campaign, today: dt.date) -> None:
        self.campaign = campaign
        self.latest = today + dt.timedelta(days=CLOCK_SKEW_DAYS)
        self.earliest = today - dt.timedelta(days=campaign.horizon_days)
        self.cache: dict[str, tuple[str | None, str | None]] = {}

    def window(self, day: object) -> tuple[str | None, str | None]:
        if type(day) is not str:
            return None, f"'day' must be a date string YYYY-MM-DD, got {type(day).__name__}"
        hit = self.cache.get(day)
        if hit is None:
            hit = self.cache[day] = self._resolve(day)
        return hit

    def _resolve(self, day: str) -> tuple[str | None, str | None]:
        try:
            if not _DAY.fullmatch(day):
                raise ValueError
            date = dt.date.fromisoformat(day)
        except ValueError:
            return None, f"'day' must be a date YYYY-MM-DD (no time), got {day[:40]!r}"
        if date > self.latest:
            return None, (
                f"day {day} is in the future (latest accepted {self.latest.isoformat()}, "
                f"{CLOCK_SKEW_DAYS} day of clock skew)"
            )
        if date < self.earliest:
            return None, (
                f"day {day} is older than the campaign's horizon of "
                f"{self.campaign.horizon_days} days (earliest {self.earliest.isoformat()})"
            )
        return self.campaign.window_of(date).isoformat(), None


def ingest_batch(
    storage: Storage,
    campaign: Campaign,
    body: object,
    *,
    max_reports: int,
    today: dt.date | None = None,
) -> BatchResult:
    """Validate an upload for ``campaign`` and store its valid, new reports (one transaction)."""
    if not isinstance(body, Mapping):
        raise APIError(
            400, "invalid_batch", f"the body must be a JSON object, got {type(body).__name__}"
        )
    unknown = [str(k)[:32] for k in sorted(set(body) - _BATCH_KEYS)[:8]]
    if unknown:
        raise APIError(
            400, "invalid_batch", f"unknown field(s) {unknown}; allowed: digest, reports"
        )
    digest, reports = body.get("digest"), body.get("reports")
    if not isinstance(reports, list):
        raise APIError(400, "invalid_batch", "'reports' must be a list of reports")
    if not isinstance(digest, str):
        raise APIError(
            400, "invalid_batch", "'digest' must be the campaign digest from GET /v1/campaigns/{id}"
        )
    if digest != campaign.digest:
        raise APIError(
            409,
            "stale_config",
            f"the batch was made with configuration {digest[:64]!r}, but campaign "
            f"{campaign.id!r} has digest {campaign.digest!r}: fetch GET /v1/campaigns/"
            f"{campaign.id} and perturb again",
        )
    if len(reports) > max_reports:
        raise too_large(f"a batch of {len(reports)} reports", max_reports, "LDP_MAX_BATCH_REPORTS")

    result = BatchResult()
    days = _Days(campaign, today or clock.today())
    mech = campaign.mechanism
    # Pass 1: the envelope of each report (fields, id, day). Payloads are checked in pass 2.
    candidates: list[tuple[int, str, str, Payload]] = []
    for i, report in enumerate(reports):
        rid = report.get("id") if type(report) is dict else None
        reason = None
        if type(report) is not dict:
            reason = f"a report is an object with id, day and payload, got {type(report).__name__}"
        elif report.keys() != _REPORT_KEYS:
            got = [str(k)[:32] for k in sorted(report)[:8]]
            reason = f"a report has exactly the fields day, id, payload; got {got}"
        elif type(rid) is not str or not REPORT_ID.fullmatch(rid):
            reason = "'id' must be 16 to 64 characters of [A-Za-z0-9_-]"
        else:
            window, reason = days.window(report["day"])
            if reason is None:
                candidates.append((i, rid, window, report["payload"]))  # type: ignore[arg-type]
                continue
        result.reject(i, rid, reason)
    # Pass 2: payload shapes, decoded once (the decoded rows also give the tally).
    candidates, decoded = _check_payloads(mech, candidates, result)
    result.errors.sort(key=lambda e: e["index"])
    seen: set[str] = set()
    groups: dict[str, tuple[list[ReportRow], list[int]]] = {}
    for pos, (_, rid, window, payload) in enumerate(candidates):
        if rid in seen:
            result.duplicate += 1
            continue
        seen.add(rid)
        rows, where = groups.setdefault(window, ([], []))
        rows.append((rid, payload_json(payload)))
        where.append(pos)
    windows = {
        window: WindowBatch(rows, _tally_of(mech, decoded, np.asarray(where, dtype=np.int64)))
        for window, (rows, where) in groups.items()
    }
    # The batch's own repeats count as duplicates in the stored counters too (/metrics).
    counts = storage.ingest(campaign, windows, rejected=result.rejected, duplicate=result.duplicate)
    result.accepted = counts.accepted
    result.duplicate += counts.duplicate
    return result


def _check_payloads(
    mech: AnyMechanism, candidates: list[tuple[int, str, str, Payload]], result: BatchResult
) -> tuple[list[tuple[int, str, str, Payload]], Any]:
    """The candidates whose payload the mechanism accepts, and their decoded batch (an array;
    a multi-attribute mechanism's ``MultiBatch``, sliced by rows the same way).

    Fast path: the mechanism's strict batch parser accepts every payload at once. Otherwise
    each payload is checked alone (``check_payload``) and the rejected ones are recorded.
    """
    try:
        return candidates, mech.decode_many([c[3] for c in candidates])
    except (ValueError, TypeError, OverflowError):  # InvalidReport is a ValueError
        pass
    good = []
    for cand in candidates:
        try:
            mech.check_payload(cand[3])
        except InvalidReport as exc:
            result.reject(cand[0], cand[1], exc.reason)
            continue
        except (ValueError, TypeError, OverflowError) as exc:  # a parser that slipped
            result.reject(cand[0], cand[1], f"payload rejected by {mech.name}: {exc}")
            continue
        good.append(cand)
    while True:
        try:
            return good, mech.decode_many([c[3] for c in good])
        except InvalidReport as exc:
            # The batch parser is stricter than check_payload on this report: reject it too.
            bad = exc.index if exc.index is not None and 0 <= exc.index < len(good) else 0
            result.reject(good[bad][0], good[bad][1], exc.reason)
            del good[bad]


def _tally_of(
    mech: AnyMechanism, decoded: Any, where: np.ndarray
) -> Callable[[Sequence[int] | None], AggregateState]:
    def tally(positions: Sequence[int] | None) -> AggregateState:
        rows = where if positions is None else where[np.asarray(positions, dtype=np.int64)]
        return mech.tally(decoded[rows])  # the mechanism's own exact state

    return tally


def payload_json(payload: Payload) -> str:
    """Canonical JSON text of a checked payload (the stored form)."""
    if type(payload) is str:
        # Payload strings that passed the mechanism's parser are base64: nothing to escape.
        return f'"{payload}"'
    return json.dumps(payload, separators=(",", ":"))
