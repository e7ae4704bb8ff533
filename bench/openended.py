"""Open-ended values (issue 16): discover the heavy hitters among strings nobody listed.

Data:

* ``adult``: Adult (train) ``native-country`` treated as unknown strings (42 values, one 91%);
* ``zipf``: a deterministic synthetic population: ``--n`` devices (default 10**6) over 10**5
  distinct pseudo-words and host names of 3 to 16 bytes (``synthetic_strings``), counts
  ``n p_i`` (largest remainders) with ``p_i`` proportional to ``i^-1.1``. Generated here.

Per epsilon and method: precision, recall and F1 of the top 10 and top 50 (the discovered list
against the true top-k), count MSE of the discovered items (true count 0 if absent), report
bytes, device time per report (``perturb``, OS randomness, the device path), collector time
(tally of the reports in chunks + discovery) and the tally's size (fixed by the sketch, not n).

    nice -n 10 python bench/openended.py --data zipf --n 100000 --epsilons 1 2 4 8
    nice -n 10 python bench/openended.py --data adult
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import aggregator  # noqa: E402
from client_sdk.mechanisms import create  # noqa: E402
from simulator.openended_data import (  # noqa: E402
    adult_population,
    devices,
    prf,
    zipf_population,
)

CHUNK = 100_000


def run_ours(
    name: str,
    params: dict[str, Any],
    eps: float,
    values: list[str],
    max_length: int,
    truth: dict[str, int],
    ranked: list[str],
    seed: int,
) -> dict[str, Any]:
    mech = create(name, epsilon=eps, max_length=max_length, **params)
    gen = np.random.default_rng(seed)
    t0 = time.perf_counter()
    tally = mech.empty_tally()
    device_s = 0.0
    for start in range(0, len(values), CHUNK):
        d0 = time.perf_counter()
        batch = mech.perturb_many(values[start : start + CHUNK], rng=gen)
        device_s += time.perf_counter() - d0
        tally = tally + mech.tally(batch)
    agg_s = time.perf_counter() - t0 - device_s
    t1 = time.perf_counter()
    row: dict[str, Any] = {}
    for k in (10, 50):
        found = aggregator.discover(mech, tally, top=k)
        vals = found.values
        p, r, f = prf(vals, ranked[:k])
        mse = float(np.mean([(i.count - truth.get(i.value, 0)) ** 2 for i in found.items]))
        row[f"top{k}"] = (p, r, f, mse, sum(i.significant for i in found.items))
    discover_s = (time.perf_counter() - t1) / 2
    sample = values[:2000]
    d0 = time.perf_counter()
    for v in sample:
        mech.perturb(v)
    per_report = (time.perf_counter() - d0) / len(sample)
    wire = mech.encode_many(mech.perturb_many(values[:20_000], rng=1))
    w0 = time.perf_counter()
    mech.tally(wire)
    wire_s = (time.perf_counter() - w0) * len(values) / len(wire)
    row.update(
        bytes=mech.report_bytes,
        device_us=per_report * 1e6,
        tally_s=agg_s,
        discover_s=discover_s,
        wire_decode_s=wire_s,
        tally_mb=mech.tally_size * 8 / 1e6,
    )
    return row


def _numpy2_shim(module: Any) -> None:
    """pure-LDP's frequency-oracle base calls ``np.zeros(None)`` for sketch oracles (no domain
    size), which NumPy 2 refuses; give that one module a ``zeros`` that reads None as ``()``.
    Nothing of the peer's algorithms changes."""
    import types

    shim = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    shim.zeros = lambda shape=(), *a, **k: np.zeros(() if shape is None else shape, *a, **k)
    module.np = shim


def run_peer(
    oracle: str,
    eps: float,
    values: list[str],
    max_length: int,
    truth: dict[str, int],
    ranked: list[str],
    k_hash: int = 32,
    m: int = 1024,
    fragment: int = 2,
) -> dict[str, Any]:
    """pure-LDP's PEM over its CMS or HCMS (sketch ``k_hash`` x ``m``, its defaults' size),
    fragments of ``fragment`` characters over the data's alphabet plus its padding ``*``."""
    import random

    import pure_ldp.core._freq_oracle_server as fos
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer

    _numpy2_shim(fos)

    random.seed(eps)
    np.random.seed(int(eps * 10))
    alphabet = sorted({ch for v in set(values) for ch in v} | {"*"})
    had = oracle == "hcms"
    server_fo = CMSServer(eps, k_hash, m, is_hadamard=had)
    client_fo = CMSClient(eps, server_fo.get_hash_funcs(), m, is_hadamard=had)
    args = (eps, fragment, max_length, fragment, alphabet)
    client = PEMClient(*args, fo_client=client_fo)
    server = PEMServer(*args, fo_server=server_fo)
    t0 = time.perf_counter()
    reports = [client.privatise(v) for v in values]
    device_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    for r in reports:
        server.aggregate(r)
    row: dict[str, Any] = {"tally_s": time.perf_counter() - t1}
    t2 = time.perf_counter()
    for top in (10, 50):
        hh, freq = server.find_heavy_hitters(k=top)
        found = [h.split("*")[0] for h in hh]
        p, r, f = prf(found, ranked[:top])
        mse = float(np.mean([(c - truth.get(v, 0)) ** 2 for v, c in zip(found, freq, strict=True)]))
        row[f"top{top}"] = (p, r, f, mse, 0)
    row.update(
        bytes=0,
        device_us=device_s / len(values) * 1e6,
        discover_s=(time.perf_counter() - t2) / 2,
        wire_decode_s=float("nan"),
        tally_mb=server.g * k_hash * m * 8 / 1e6,
    )
    return row


OURS = {
    "pem-cms": ("pem", {"oracle": "cms", "flips": "optimized", "width": 1024, "depth": 16}),
    "pem-hcms": ("pem", {"oracle": "hcms", "width": 4096, "depth": 16}),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", choices=["zipf", "adult"], default="zipf")
    ap.add_argument("--n", type=int, default=1_000_000, help="zipf devices")
    ap.add_argument("--epsilons", type=float, nargs="*", default=[1.0, 2.0, 4.0, 8.0])
    ap.add_argument("--methods", nargs="*", choices=sorted(OURS), default=sorted(OURS))
    ap.add_argument("--max-length", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--peers",
        action="store_true",
        help="also pure-LDP's PEM over CMS and HCMS (in bench/peers.py's venv)",
    )
    ap.add_argument("--peer-oracles", nargs="*", choices=["cms", "hcms"], default=["cms", "hcms"])
    args = ap.parse_args()
    if args.peers:
        from peers import run_with_peers

        run_with_peers(__file__, ("pure_ldp",))
    if args.data == "zipf":
        strings, counts = zipf_population(args.n)
        max_length = args.max_length or 16
    else:
        strings, counts = adult_population()
        max_length = args.max_length or max(len(s.encode()) for s in strings)
    values = devices(strings, counts, args.seed)
    truth = dict(zip(strings, counts.tolist(), strict=True))
    ranked = strings  # already by decreasing count
    print(
        f"# {args.data}: n = {len(values):,}, distinct = {len(strings):,}, "
        f"max_length = {max_length}; top-10 counts {counts[:10].tolist()}, "
        f"50th {int(counts[min(49, len(counts) - 1)])}"
    )
    print(
        "method     eps | top10 P/R/F1      MSE       | top50 P/R/F1      MSE       sig50 |"
        " bytes  device_us  tally_s  discover_s  wire_decode_s(n)  tally_MB"
    )
    for eps in args.epsilons:
        for label in args.methods:
            name, params = OURS[label]
            r = run_ours(name, params, eps, values, max_length, truth, ranked, args.seed + 7)
            p10, r10, f10, m10, _ = r["top10"]
            p50, r50, f50, m50, s50 = r["top50"]
            print(
                f"{label:9s} {eps:4g} | {p10:.2f}/{r10:.2f}/{f10:.2f} {m10:10.4g} | "
                f"{p50:.2f}/{r50:.2f}/{f50:.2f} {m50:10.4g} {s50:5d} | {r['bytes']:5d} "
                f"{r['device_us']:9.1f} {r['tally_s']:8.2f} {r['discover_s']:10.2f} "
                f"{r['wire_decode_s']:16.2f} {r['tally_mb']:9.2f}",
                flush=True,
            )
        if args.peers:
            for oracle in args.peer_oracles:
                r = run_peer(oracle, eps, values, max_length, truth, ranked)
                p10, r10, f10, m10, _ = r["top10"]
                p50, r50, f50, m50, _ = r["top50"]
                print(
                    f"peer-pem-{oracle:4s} {eps:4g} | {p10:.2f}/{r10:.2f}/{f10:.2f} {m10:10.4g} | "
                    f"{p50:.2f}/{r50:.2f}/{f50:.2f} {m50:10.4g}     - |     - "
                    f"{r['device_us']:9.1f} {r['tally_s']:8.2f} {r['discover_s']:10.2f} "
                    f"{'-':>16s} {r['tally_mb']:9.2f}",
                    flush=True,
                )
    print(f"(n = {len(values):,}; wire decode extrapolated from 20,000 JSON payloads)")


if __name__ == "__main__":
    main()
