"""An attacker holding the collector's database, trying to group one device's reports.

Each attack turns what the database holds into a sortable *signal* per report id (its storage
order by some measure); the attacker then links each report of campaign A to the report of
campaign B nearest to it in that order, for every pair of campaigns, and we count the links that
join two reports of the same device. Attacks:

* PostgreSQL: ``xmin`` (the inserting transaction; increasing) then ``ctid`` of every live row
  of ``reports`` and ``staged_reports``; ``ctid`` alone; through ``pageinspect``, every tuple
  on the heap pages, dead ones included (the lowest ``xmin`` of a tuple holding the id), and
  the byte offset of the id in the raw pages of each table and primary-key index.
* SQLite: the byte offset of the id's first copy in the database file (page, then place in the
  page), and the WAL frame that first holds it ordered by (salt-1, frame index): the WAL's
  commit order across checkpoint restarts.

:func:`chance_bound` is the count no attack may pass when storage order is independent of
the devices.
"""

from __future__ import annotations

import math
import re
from bisect import bisect_left
from collections.abc import Mapping
from itertools import combinations
from pathlib import Path
from typing import Any

#: (campaign, device) of each report id.
Owner = Mapping[str, tuple[str, int]]
Signal = dict[str, tuple[int, ...]]

_HEX_ID = re.compile(rb"[0-9a-f]{32}")


def chance_bound(devices: int, campaigns: int, sds: float = 6.0) -> float:
    """The most correct links an attack may find when storage order says nothing.

    Per campaign pair each of the ``devices`` guesses is right with probability 1/devices (the
    device labels are exchangeable given the signal), so the count has mean 1; its variance is
    at most 1 (two guesses naming the same report cannot both be right; naming two different
    ones, both right has probability 1/(n(n-1)): the covariances sum to at most 1/n while the
    variances sum to 1 - 1/n). Counts of different pairs are uncorrelated (given any two
    campaigns' orders a third's labels are still uniform). Over P pairs: mean P, variance at
    most P; the count is close to Poisson(P), so mean + 6 sd is passed by chance with
    probability about 5e-6 for P = 10.
    """
    del devices  # the mean and variance bound do not depend on it
    pairs = campaigns * (campaigns - 1) // 2
    return pairs + sds * math.sqrt(pairs)


def correct_links(signal: Signal, owner: Owner) -> int:
    """Links to the nearest report in signal order, summed over campaign pairs, that are right."""
    ranked = sorted(signal, key=lambda rid: signal[rid])
    rank = {rid: i for i, rid in enumerate(ranked)}
    by_campaign: dict[str, list[tuple[int, int]]] = {}
    for rid, (campaign, device) in owner.items():
        if rid in rank:
            by_campaign.setdefault(campaign, []).append((rank[rid], device))
    total = 0
    for a, b in combinations(sorted(by_campaign), 2):
        targets = sorted(by_campaign[b])
        positions = [t[0] for t in targets]
        for position, device in by_campaign[a]:
            j = bisect_left(positions, position)
            near = [k for k in (j - 1, j) if 0 <= k < len(targets)]
            pick = min(near, key=lambda k: abs(positions[k] - position))
            total += targets[pick][1] == device
    return total


def grouped_links(signal: Signal, owner: Owner, per_device: int) -> int:
    """Correct links when each device sent ``per_device`` uploads one after another: the
    reports in signal order are cut into consecutive groups of that size, and within a group
    each report of campaign A is linked to the group's report of campaign B (if any). As for
    :func:`correct_links`, a signal that says nothing of the devices makes each guess right
    with probability about 1/devices, so :func:`chance_bound` applies."""
    ranked = sorted((rid for rid in signal if rid in owner), key=lambda rid: signal[rid])
    total = 0
    for start in range(0, len(ranked), per_device):
        group: dict[str, int] = {}
        for rid in ranked[start : start + per_device]:
            campaign, device = owner[rid]
            group.setdefault(campaign, device)
        for a, b in combinations(sorted(group), 2):
            total += group[a] == group[b]
    return total


def attack(database: str, owner: Owner) -> dict[str, int]:
    """Correct links found by each attack that applies to the backend."""
    if database.startswith(("postgresql://", "postgres://")):
        signals = postgres_signals(database, set(owner))
    else:
        signals = sqlite_signals(database, set(owner))
    return {name: correct_links(signal, owner) for name, signal in signals.items() if signal}


def _first_offsets(data: bytes, ids: set[str], base: tuple[int, ...] = ()) -> Signal:
    out: Signal = {}
    for match in _HEX_ID.finditer(data):
        rid = match.group().decode()
        if rid in ids and rid not in out:
            out[rid] = (*base, match.start())
    return out


# -- SQLite ------------------------------------------------------------------------------------


def sqlite_signals(path: str, ids: set[str]) -> dict[str, Signal]:
    signals = {"sqlite_file_offset": _first_offsets(Path(path).read_bytes(), ids)}
    wal = Path(path + "-wal")
    if wal.exists():
        signals["sqlite_wal_frames"] = _wal_order(wal.read_bytes(), ids)
    return signals


def _wal_order(data: bytes, ids: set[str]) -> Signal:
    """Per id, (salt-1, frame index) of the first WAL frame whose page holds it."""
    if len(data) < 32:
        return {}
    page_size = int.from_bytes(data[8:12], "big")
    frame = 24 + page_size
    out: Signal = {}
    for index in range((len(data) - 32) // frame):
        start = 32 + index * frame
        salt1 = int.from_bytes(data[start + 8 : start + 12], "big")
        page = data[start + 24 : start + frame]
        for match in _HEX_ID.finditer(page):
            rid = match.group().decode()
            key = (salt1, index)
            if rid in ids and (rid not in out or key < out[rid]):
                out[rid] = key
    return out


# -- PostgreSQL --------------------------------------------------------------------------------


def postgres_signals(url: str, ids: set[str]) -> dict[str, Signal]:
    import psycopg

    signals: dict[str, Signal] = {"pg_xmin": {}, "pg_ctid": {}}
    with psycopg.connect(url, autocommit=True) as conn:
        for tag, table in enumerate(("reports", "staged_reports")):
            # tableoid: the partition, should ``reports`` be partitioned.
            rows = conn.execute(
                f"SELECT report_id, xmin::text::bigint, tableoid::int, ctid::text FROM {table}"
            )
            for rid, xmin, part, ctid in rows:
                block, item = (int(v) for v in ctid.strip("()").split(","))
                signals["pg_xmin"][rid] = (xmin, tag, part, block, item)
                signals["pg_ctid"][rid] = (tag, part, block, item)
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        except psycopg.Error:
            return signals  # no pageinspect on this server: live rows only
        signals["pg_heap_tuples_xmin"] = _heap_tuples(conn, ids)
        for relation in ("reports", "staged_reports", "reports_pkey", "staged_reports_pkey"):
            signals[f"pg_raw_pages_{relation}"] = _raw_pages(conn, relation, ids)
    return signals


def _leaves(conn: Any, relation: str) -> list[tuple[str, int]]:
    """(name, blocks) of the relation, or of each of its partitions if it is partitioned."""
    size = "pg_relation_size(relid) / current_setting('block_size')::int"
    rows = conn.execute(
        f"SELECT relid::regclass::text, {size} FROM pg_partition_tree(%s::regclass) WHERE isleaf",
        (relation,),
    ).fetchall()
    if not rows:  # not partitioned: the relation itself
        rows = conn.execute(
            f"SELECT %s, {size} FROM (SELECT %s::regclass AS relid) r", (relation, relation)
        ).fetchall()
    return [(str(name), int(blocks)) for name, blocks in rows]


def _heap_tuples(conn: Any, ids: set[str]) -> Signal:
    """Lowest xmin of any heap tuple, live or dead, whose data holds the id."""
    out: Signal = {}
    for table, blocks in [leaf for t in ("reports", "staged_reports") for leaf in _leaves(conn, t)]:
        for block in range(blocks):
            rows = conn.execute(
                "SELECT t_xmin::text::bigint, t_data FROM heap_page_items(get_raw_page(%s, %s))",
                (table, block),
            )
            for xmin, data in rows:
                if data is None or xmin is None:
                    continue
                for match in _HEX_ID.finditer(bytes(data)):
                    rid = match.group().decode()
                    if rid in ids and (rid not in out or (xmin,) < out[rid]):
                        out[rid] = (xmin,)
    return out


def _raw_pages(conn: Any, relation: str, ids: set[str]) -> Signal:
    """Block and byte offset of the id's first copy in the relation's raw pages."""
    out: Signal = {}
    for part, (leaf, blocks) in enumerate(_leaves(conn, relation)):
        for block in range(blocks):
            page = conn.execute("SELECT get_raw_page(%s, %s)", (leaf, block)).fetchone()[0]
            for rid, key in _first_offsets(bytes(page), ids, (part, block)).items():
                out.setdefault(rid, key)
    return out


# -- PostgreSQL tally row versions -------------------------------------------------------------


def tally_version_signal(url: str) -> Signal:
    """Per stored report id, the ``xmin`` of the upload whose tally increment it matches.

    Every heap tuple, live or dead, of the tally tables (settled and staged) is read through
    ``pageinspect``; the versions of one shard row, sorted by ``n``, differ by one upload's
    tally, and an increment of one report is that report's own tally (the mechanism's, from the
    campaign record the database holds), stamped with the upload's transaction id. A stored
    report whose tally matches an increment of its campaign gets that ``xmin`` (the lowest, if
    several match): uploads of one device follow each other, so nearby ``xmin``s link its
    reports across campaigns. The decoding is checked against the live rows, so a layout this
    code does not understand fails loudly instead of finding nothing.
    """
    import json

    import psycopg

    from collector.campaigns import Campaign

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pageinspect")
        mechanisms = {
            int(pk): Campaign.from_record(json.loads(record)).mechanism
            for pk, record in conn.execute("SELECT pk, record FROM campaigns")
        }
        width = {pk: len(m.tally([]).vector()) for pk, m in mechanisms.items()}
        tables = [t for t in ("tally_shards", "staged_tallies") if _exists(conn, t)]
        versions: dict[tuple[str, int, int, int], set[tuple[int, int, tuple[int, ...]]]] = {}
        for table in tables:
            names = [
                str(r[0])
                for r in conn.execute(
                    "SELECT attname FROM pg_attribute WHERE attrelid = %s::regclass "
                    "AND attnum > 0 AND NOT attisdropped ORDER BY attnum",
                    (table,),
                )
            ]
            col = {name: i for i, name in enumerate(names)}
            for leaf, blocks in _leaves(conn, table):
                for block in range(blocks):
                    rows = conn.execute(
                        "SELECT t_xmin::text::bigint, tuple_data_split(%s::regclass, t_data, "
                        "t_infomask, t_infomask2, t_bits) FROM heap_page_items("
                        "get_raw_page(%s, %s)) WHERE t_data IS NOT NULL",
                        (leaf, leaf, block),
                    )
                    for xmin, attrs in rows:
                        support = attrs[col["support"]]
                        if support is None:
                            continue  # a numeric state: not an attack on these campaigns
                        pk = _int(attrs[col["campaign"]])
                        k = width[pk]
                        data = bytes(support)[-8 * k :]
                        vector = tuple(
                            int.from_bytes(data[8 * i : 8 * i + 8], "little", signed=True)
                            for i in range(k)
                        )
                        key = (
                            leaf,
                            pk,
                            _int(attrs[col["window_start"]]),
                            _int(attrs[col["shard"]]),
                        )
                        versions.setdefault(key, set()).add(
                            (_int(attrs[col["n"]]), int(xmin), vector)
                        )
        _check_decoding(conn, tables, versions)
        increments: dict[tuple[int, tuple[int, ...]], list[int]] = {}
        for (_, pk, _, _), found in versions.items():
            chain = sorted(found)
            previous = (0, 0, tuple(0 for _ in chain[0][2]))
            for n, xmin, vector in chain:
                if n - previous[0] == 1:
                    step = tuple(a - b for a, b in zip(vector, previous[2], strict=True))
                    increments.setdefault((pk, step), []).append(xmin)
                previous = (n, xmin, vector)
        signal: Signal = {}
        for table in ("reports", "staged_reports"):
            for pk, rid, payload in conn.execute(
                f"SELECT campaign, report_id, payload FROM {table}"
            ):
                mine = tuple(int(v) for v in mechanisms[pk].tally([json.loads(payload)]).vector())
                hits = increments.get((int(pk), mine))
                if hits:
                    signal[str(rid)] = (min(hits),)
    return signal


def _int(raw: bytes | None) -> int:
    assert raw is not None
    return int.from_bytes(bytes(raw), "little", signed=True)


def _exists(conn: Any, table: str) -> bool:
    return bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table,)).fetchone()[0])


def _check_decoding(
    conn: Any,
    tables: list[str],
    versions: Mapping[tuple[str, int, int, int], set[tuple[int, int, tuple[int, ...]]]],
) -> None:
    """Every live frequency row must appear among the decoded tuples, value for value."""
    for table in tables:
        for pk, n, support in conn.execute(
            f"SELECT campaign, n, support FROM {table} WHERE support IS NOT NULL"
        ):
            decoded = {
                (m, v) for key, found in versions.items() if key[1] == pk for m, _, v in found
            }
            assert (int(n), tuple(int(x) for x in support)) in decoded, (table, pk, n)
