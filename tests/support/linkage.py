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
