"""Open-ended values (issue 16): discover the heavy hitters among strings nobody listed.

Data:

* ``adult``: Adult (train) ``native-country`` treated as unknown strings (42 values, one 91%);
* ``zipf``: a deterministic synthetic population: ``--n`` devices (default 10**6) over 10**5
  distinct pseudo-words and host names of 3 to 16 bytes (``synthetic_strings``), counts
  ``n p_i`` (largest remainders) with ``p_i`` proportional to ``i^-1.1``. Generated here.

Per epsilon and method: precision, recall and F1 of the top 10 and top 50 (the discovered list
against the true top-k), count MSE of the discovered items (true count 0 if absent), report
bytes, device time per report (``perturb``, OS randomness, the device path), collector time
in wall and CPU seconds (tally of the n reports + one top-50 discovery, and the JSON wire
payloads' decoding) and the tally's size (fixed by the sketch, not n). ``--reps R`` repeats
each run with seeds ``seed .. seed+R-1`` and prints mean±sd.

``--peers`` measures pure-LDP's PEM, TreeHist and SFP (``--peer-methods``) over its CMS and
HCMS (``--peer-oracles``, sketch 32 x 1024) on the same devices in the same run, in
bench/peers.py's own venv, and prints the best peer's F1 at each epsilon.

    nice -n 10 python bench/openended.py --data zipf --n 1000000 --epsilons 1 2 4 8 --reps 3
    nice -n 10 python bench/openended.py --data adult
    nice -n 10 python bench/openended.py --n 100000 --peers --peer-methods pem treehist sfp
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
    *,
    device_sample: int = 2000,
    wire_sample: int = 100_000,
) -> dict[str, Any]:
    """One run of ours. Collector figures, wall clock and CPU (``time.process_time``, which
    other processes' load does not inflate): ``tally`` (batch arrays to the tally, perturbation
    excluded), ``discover`` (one top-50 discovery) and ``wire`` (JSON payloads to the tally,
    extrapolated to n from ``wire_sample`` payloads); decode = tally + discover."""
    mech = create(name, epsilon=eps, max_length=max_length, **params)
    gen = np.random.default_rng(seed)
    tally = mech.empty_tally()
    tally_s = tally_cpu = 0.0
    for start in range(0, len(values), CHUNK):
        batch = mech.perturb_many(values[start : start + CHUNK], rng=gen)
        w0, c0 = time.perf_counter(), time.process_time()
        tally = tally + mech.tally(batch)
        tally_s += time.perf_counter() - w0
        tally_cpu += time.process_time() - c0
    row: dict[str, Any] = {}
    for k in (10, 50):
        w0, c0 = time.perf_counter(), time.process_time()
        found = aggregator.discover(mech, tally, top=k)
        if k == 50:
            row.update(discover_s=time.perf_counter() - w0, discover_cpu=time.process_time() - c0)
        p, r, f = prf(found.values, ranked[:k])
        mse = float(np.mean([(i.count - truth.get(i.value, 0)) ** 2 for i in found.items]))
        row[f"top{k}"] = (p, r, f, mse, sum(i.significant for i in found.items))
    sample = values[:device_sample]
    d0 = time.perf_counter()
    for v in sample:
        mech.perturb(v)
    per_report = (time.perf_counter() - d0) / len(sample)
    wire = mech.encode_many(mech.perturb_many(values[:wire_sample], rng=gen))
    w0, c0 = time.perf_counter(), time.process_time()
    mech.tally(wire)
    scale = len(values) / len(wire)
    row.update(
        bytes=mech.report_bytes,
        device_us=per_report * 1e6,
        tally_s=tally_s,
        tally_cpu=tally_cpu,
        wire_s=(time.perf_counter() - w0) * scale,
        wire_cpu=(time.process_time() - c0) * scale,
        tally_mb=mech.tally_size * 8 / 1e6,
    )
    return row


def memory_peaks(
    name: str, params: dict[str, Any], values: list[str], max_length: int, sizes: list[int]
) -> list[tuple[int, float]]:
    """Peak traced memory (MB, ``tracemalloc``) of ``mech.tally`` over an iterator of JSON
    payloads made 10,000 at a time, for each number of reports in ``sizes`` (at most
    ``len(values)``): the collector's
    memory is bounded by its chunk and the sketch, so the peaks should not grow with n."""
    import tracemalloc

    mech = create(name, epsilon=2.0, max_length=max_length, **params)

    def payloads(n: int) -> Any:
        for start in range(0, n, 10_000):
            chunk = values[start : min(n, start + 10_000)]
            yield from mech.encode_many(mech.perturb_many(chunk, rng=start))

    out = []
    for n in sizes:
        tracemalloc.start()
        mech.tally(payloads(n))
        out.append((n, tracemalloc.get_traced_memory()[1] / 1e6))
        tracemalloc.stop()
    return out


def summarise(runs: list[dict[str, Any]]) -> dict[str, tuple[float, float]]:
    """Mean and standard deviation (ddof 1; 0 for one run) of every figure over repetitions."""
    flat: dict[str, list[float]] = {}
    for run in runs:
        for key, value in run.items():
            if isinstance(value, tuple):
                for part, v in zip(("P", "R", "F1", "MSE", "sig"), value, strict=True):
                    flat.setdefault(f"{key}_{part}", []).append(float(v))
            else:
                flat.setdefault(key, []).append(float(value))
    return {
        k: (float(np.mean(v)), float(np.std(v, ddof=1)) if len(v) > 1 else 0.0)
        for k, v in flat.items()
    }


def _pm(stat: dict[str, tuple[float, float]], key: str, fmt: str = ".2f") -> str:
    mean, sd = stat.get(key, (float("nan"), float("nan")))
    return f"{mean:{fmt}}±{sd:{fmt}}"


def _numpy2_shim(module: Any) -> None:
    """pure-LDP's frequency-oracle base calls ``np.zeros(None)`` for sketch oracles (no domain
    size), which NumPy 2 refuses; give that one module a ``zeros`` that reads None as ``()``.
    Nothing of the peer's algorithms changes."""
    import types

    shim = types.SimpleNamespace(**{k: getattr(np, k) for k in dir(np) if not k.startswith("__")})
    shim.zeros = lambda shape=(), *a, **k: np.zeros(() if shape is None else shape, *a, **k)
    module.np = shim


PEER_METHODS = ("pem", "treehist", "sfp")


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
    seed: int = 0,
    method: str = "pem",
) -> dict[str, Any]:
    """One run of a pure-LDP heavy-hitter protocol (``method``: its PEM, TreeHist or SFP) over
    its CMS or HCMS (sketch ``k_hash`` x ``m``), fragments of ``fragment`` characters over the
    data's alphabet plus the padding ``*``; every other parameter is the library's default.

    TreeHist and SFP split epsilon between a word and a fragment report (the library's split);
    their length is ``max_length`` rounded up to a multiple of ``fragment`` (TreeHist asserts
    it). TreeHist refuses a padding character inside its alphabet and only extends prefixes by
    alphabet fragments, so it could never reach a word shorter than the maximum: its devices'
    strings are padded with ``*`` to that length before they reach it (``*`` then being part of
    its alphabet, as in PEM's), which changes nothing of its algorithm. Found strings are cut
    at the first ``*``."""
    import random
    import warnings

    import pure_ldp.core._freq_oracle_server as fos
    from pure_ldp.frequency_oracles.apple_cms import CMSClient, CMSServer
    from pure_ldp.heavy_hitters.apple_sfp import SFPClient, SFPServer
    from pure_ldp.heavy_hitters.prefix_extending import PEMClient, PEMServer
    from pure_ldp.heavy_hitters.treehistogram import TreeHistClient, TreeHistServer

    _numpy2_shim(fos)

    random.seed(eps + 1000 * seed)
    np.random.seed(int(eps * 10) + 1000 * seed)
    alphabet = sorted({ch for v in set(values) for ch in v} | {"*"})
    had = oracle == "hcms"
    server_fo = CMSServer(eps, k_hash, m, is_hadamard=had)
    client_fo = CMSClient(eps, server_fo.get_hash_funcs(), m, is_hadamard=had)
    length = -(-max_length // fragment) * fragment
    inputs = values
    client: Any
    server: Any
    if method == "pem":
        args = (eps, fragment, max_length, fragment, alphabet)
        client = PEMClient(*args, fo_client=client_fo)
        server = PEMServer(*args, fo_server=server_fo)
        sketches = server.g
    elif method == "treehist":
        # Its own padding character must lie outside the alphabet; the strings arrive padded.
        kw: dict[str, Any] = {"alphabet": alphabet, "padding_char": "\x00"}
        client = TreeHistClient(eps, fragment, length, fo_client=client_fo, **kw)
        server = TreeHistServer(eps, length, fragment, fo_server=server_fo, **kw)
        inputs = [v[:length].ljust(length, "*") for v in values]
        sketches = 2
    elif method == "sfp":
        client = SFPClient(eps, fragment, length, alphabet=set(alphabet), fo_client=client_fo)
        server = SFPServer(eps, fragment, length, alphabet=set(alphabet), fo_server=server_fo)
        sketches = server.group_size + 1
    else:
        raise ValueError(f"unknown peer method {method!r}; expected one of {PEER_METHODS}")
    device_s = tally_s = 0.0
    # In chunks: a CMS report is a length-m vector, so 10**6 of them would not fit in memory.
    for start in range(0, len(inputs), 10_000):
        t0 = time.perf_counter()
        reports = [client.privatise(v) for v in inputs[start : start + 10_000]]
        t1 = time.perf_counter()
        for r in reports:
            server.aggregate(r)
        device_s += t1 - t0
        tally_s += time.perf_counter() - t1
    row: dict[str, Any] = {"tally_s": tally_s}
    t2 = time.perf_counter()
    for top in (10, 50):
        with warnings.catch_warnings():
            # The library's reminders that epsilon < 1 or n < 10,000 estimate loosely.
            warnings.filterwarnings("ignore", message=".*estimations may be highly inaccurate")
            hh, freq = server.find_heavy_hitters(k=top)
        found = [h.split("*")[0] for h in hh]
        p, r, f = prf(found, ranked[:top])
        errors = [(c - truth.get(v, 0)) ** 2 for v, c in zip(found, freq, strict=True)]
        mse = float(np.mean(errors)) if errors else float("nan")
        row[f"top{top}"] = (p, r, f, mse, 0)
    row.update(
        bytes=0,
        device_us=device_s / len(values) * 1e6,
        discover_s=(time.perf_counter() - t2) / 2,
        tally_mb=sketches * k_hash * m * 8 / 1e6,
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
        "--reps",
        type=int,
        default=1,
        help="repetitions with seeds seed, seed+1, ... (devices' order and randomness); "
        "figures are mean±sd over them",
    )
    ap.add_argument(
        "--memory",
        action="store_true",
        help="also the peak traced memory of tallying n/10 and n wire payloads (an iterator)",
    )
    ap.add_argument(
        "--peers",
        action="store_true",
        help="also pure-LDP's heavy hitters (--peer-methods) over CMS and HCMS "
        "(in bench/peers.py's venv)",
    )
    ap.add_argument("--peer-oracles", nargs="*", choices=["cms", "hcms"], default=["cms", "hcms"])
    ap.add_argument(
        "--peer-methods",
        nargs="*",
        choices=PEER_METHODS,
        default=list(PEER_METHODS),
        help="pure-LDP's PEM, TreeHist and SFP (default all three)",
    )
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
    truth = dict(zip(strings, counts.tolist(), strict=True))
    ranked = strings  # already by decreasing count
    seeds = [args.seed + r for r in range(args.reps)]
    ranked_values = devices(strings, counts, args.seed)
    print(
        f"# {args.data}: n = {int(counts.sum()):,}, distinct = {len(strings):,}, "
        f"max_length = {max_length}; top-10 counts {counts[:10].tolist()}, "
        f"50th {int(counts[min(49, len(counts) - 1)])}; {args.reps} repetition(s), "
        f"seeds {seeds}; mean±sd"
    )
    print(
        "method              eps | F1 top10   F1 top50   P50        sig50      MSE top10  | bytes "
        "device_us | tally s/cpu     discover50 s/cpu  decode s/cpu    wire(n) s/cpu   | tally_MB"
    )
    for eps in args.epsilons:
        for label in args.methods:
            name, params = OURS[label]
            runs = []
            for seed in seeds:
                values = devices(strings, counts, seed)
                runs.append(
                    run_ours(name, params, eps, values, max_length, truth, ranked, seed + 7)
                )
                runs[-1]["decode_s"] = runs[-1]["tally_s"] + runs[-1]["discover_s"]
                runs[-1]["decode_cpu"] = runs[-1]["tally_cpu"] + runs[-1]["discover_cpu"]
            st = summarise(runs)
            print(
                f"{label:18s} {eps:4g} | {_pm(st, 'top10_F1')} {_pm(st, 'top50_F1')} "
                f"{_pm(st, 'top50_P')} {_pm(st, 'top50_sig', '.1f')} "
                f"{st['top10_MSE'][0]:10.3g} | {runs[0]['bytes']:5d} "
                f"{st['device_us'][0]:9.1f} | {_pm(st, 'tally_s', '.1f')}/{st['tally_cpu'][0]:.1f} "
                f"{_pm(st, 'discover_s', '.1f')}/{st['discover_cpu'][0]:.1f} "
                f"{_pm(st, 'decode_s', '.1f')}/{st['decode_cpu'][0]:.1f} "
                f"{_pm(st, 'wire_s', '.1f')}/{st['wire_cpu'][0]:.1f} | {runs[0]['tally_mb']:8.2f}",
                flush=True,
            )
        if args.peers:
            best: dict[str, tuple[float, str]] = {}
            for method in args.peer_methods:
                for oracle in args.peer_oracles:
                    runs = []
                    for seed in seeds:
                        values = devices(strings, counts, seed)
                        runs.append(
                            run_peer(
                                oracle,
                                eps,
                                values,
                                max_length,
                                truth,
                                ranked,
                                seed=seed,
                                method=method,
                            )
                        )
                    st = summarise(runs)
                    label = f"peer-{method}-{oracle}"
                    for key in ("top10_F1", "top50_F1"):
                        if st[key][0] > best.get(key, (-1.0, ""))[0]:
                            best[key] = (st[key][0], label)
                    print(
                        f"{label:18s} {eps:4g} | {_pm(st, 'top10_F1')} {_pm(st, 'top50_F1')} "
                        f"{_pm(st, 'top50_P')} {'-':>9s} {st['top10_MSE'][0]:10.3g} |     - "
                        f"{st['device_us'][0]:9.1f} | {_pm(st, 'tally_s', '.1f')}/- "
                        f"{_pm(st, 'discover_s', '.1f')}/-  -  - | {runs[0]['tally_mb']:8.2f}",
                        flush=True,
                    )
            if best:
                print(
                    f"# best peer at eps {eps:g}: F1 top10 {best['top10_F1'][0]:.2f} "
                    f"({best['top10_F1'][1]}), F1 top50 {best['top50_F1'][0]:.2f} "
                    f"({best['top50_F1'][1]})",
                    flush=True,
                )
    if args.memory:
        for label in args.methods:
            name, params = OURS[label]
            sizes = [max(1, len(ranked_values) // 10), len(ranked_values)]
            for n, peak in memory_peaks(name, params, ranked_values, max_length, sizes):
                print(f"{label}: tally of {n:,} wire payloads (iterator): peak {peak:.1f} MB")
    print(
        "(wall s under the machine's load / CPU s of this process; decode = tally of the n "
        "batch reports + one top-50 discovery; wire = JSON payloads to the tally, "
        "extrapolated to n from 100,000)"
    )


if __name__ == "__main__":
    main()
