"""Several attributes per device on Adult: ours (SPL/SMP/RS+FD, ``auto``) vs multi-freq-ldpy.

Per-attribute count MSE (mean over an attribute's values of ``(estimated - true count)^2``),
averaged over the attributes and the repetitions, at each epsilon. Attributes: Adult's
occupation, education, marital-status, race and sex (missing values kept as their own label,
so every row has all five); one report per row.

Ours: ``create(protocol, epsilon=eps, attributes=...)`` for ``spl``, ``smp``, ``rsfd`` and
``auto`` (docs/MECHANISMS.md §22), each per-attribute estimate unbiased ("raw") and after the
project's default consistency post-processing (``mle`` for SPL/SMP, whose parts are tallies
of the attribute's own mechanism; ``norm-sub`` for RS+FD, whose parts mix in fake data).
``predicted`` is ``n * variance_criterion()`` of auto's choice: the analytic count MSE for
uniform data (where auto puts the optimum); ``predicted at data`` is the same protocol's exact
raw count MSE at Adult's true counts (``(n v0 + beta c)/pi + (1/pi - 1) c (1 - c/n)`` per value,
SMP sampling component j with probability pi), which the measured raw MSE tracks. ``smp`` is
uniform sampling (``1/d`` each, as the peers' SMP); ``auto``'s SMP samples each attribute with
the probability that minimises the criterion (``optimal_weights``, docs/MECHANISMS.md §22).

Every figure is the mean +- sd over ``--reps`` repetitions. One attribute's count MSE is close
to a chi-square variable with few degrees of freedom (sex: one), so a single run varies by a
factor of several; and the best of 12 peers' single runs is biased low (the minimum of noisy
figures). The summary names the peer with the lowest MEAN and the difference's z
(``(ours - peer) / sqrt(sd_o^2/R + sd_p^2/R)``).

The peers run with their own client and estimator code (clip-and-renormalise ``MI``):
SPL/SMP over GRR, OUE, SS and ADP (their adaptive GRR/OUE choice), RS+FD over GRR, OUE-z,
OUE-r and ADP. multi-freq-ldpy's RS+FD runs each attribute at the amplified
``eps' = ln(d (e^eps - 1) + 1)``: that bounds inputs that differ in ONE attribute; for two
devices that differ in every attribute its whole report is only ``eps'``-LDP (ours runs RS+FD
at ``eps`` per attribute so the whole report is ``eps``-LDP; see the exact-ratio test in
tests/test_multi_attribute.py). The table therefore names the best peer among the protocols
whose whole report is ``eps``-LDP (SPL, SMP) and, separately, the best peer overall.

The peers are installed only in this benchmark's own venv, never as project dependencies:
when they do not import, the script re-runs itself in ``/tmp/ldp-peers-venv`` (created once;
override with ``LDP_PEERS_VENV``; ``bench/peers.py``) with the repository on ``PYTHONPATH``.

Joint questions (``--joints``, ours only, no peers needed): the 2-way marginals
occupation x sex and education x income, total variation distance ``0.5 * sum |p - p_true|``
of each estimated joint table (as frequencies) to the true one, for

* ours: one multi-attribute campaign (``auto``) over occupation, sex, education and income with
  both pairs declared; the consistent tables (margins combined with the attributes' counts);
  ``auto``'s criterion counts the pairs' joint error and the attributes' error after combining
  them with their pairs' margins, so its SMP weights favour the pairs (docs/MECHANISMS.md §22);
* (b) the same campaign's raw product-domain tables, without the consistency step;
* (c) SMP with the pair-blind weights (:func:`optimal_weights`, what ``auto`` used before);
* (a) two independent campaigns, one per pair, each a frequency oracle (``auto``) over the
  pair's product domain at epsilon / 2 (the device's budget split between the two questions).

Each is shown raw and after clipping at 0 and renormalising ("clip"). ``--with-numeric`` adds
``age`` and ``hours-per-week`` (as labels, one per distinct value: k = 73 and 94) to the
per-attribute MSE. multi-freq-ldpy has frequency oracles only, so it can take a numeric column
only as a categorical domain; ours is given the same domains (not ``{"bounds": ...}``), so both
answer the same question, the count of every distinct value, and the count MSE is on the same
footing. (Declared numeric, ours would estimate the mean instead, which the peers cannot:
``ldp simulate --scenario multi`` shows that case.)

    python bench/multi.py                      # 2 repetitions, eps 0.5 1 2 4 8
    python bench/multi.py --reps 20 --peer-oracles GRR,OUE --with-numeric
    python bench/multi.py --repetitions 5 --rows 10000
    python bench/multi.py --joints --no-peers  # the joint tables' TVD only
    python bench/multi.py --analytic --with-numeric  # exact raw MSE at the data, no runs
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np
from peers import run_with_peers

EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)
ATTRIBUTES = ("occupation", "education", "marital-status", "race", "sex")
NUMERIC_AS_LABELS = ("age", "hours-per-week")
JOINT_PAIRS = (("occupation", "sex"), ("education", "income"))


def ensure_peers() -> None:
    """Re-run under the peers' venv (bench/peers.py) unless the peers import here."""
    run_with_peers(__file__, ("multi_freq_ldpy",))


Peer = tuple[Callable[..., Any], Callable[..., Any], bool]  # client, aggregator, eps-LDP whole


def peers() -> dict[str, Peer]:
    """Peer protocols: (client, aggregator, whether the whole report is eps-LDP)."""
    from multi_freq_ldpy.mdim_freq_est import RSpFD_solution as R
    from multi_freq_ldpy.mdim_freq_est import SMP_solution as M
    from multi_freq_ldpy.mdim_freq_est import SPL_solution as S

    def no_k(agg: Callable[..., Any]) -> Callable[..., Any]:
        return lambda reports, lst_k, d, eps: agg(reports, d, eps)

    return {
        "SPL[GRR]": (S.SPL_GRR_Client, S.SPL_GRR_Aggregator_MI, True),
        "SPL[OUE]": (S.SPL_UE_Client, no_k(S.SPL_UE_Aggregator_MI), True),
        "SPL[SS]": (S.SPL_SS_Client, S.SPL_SS_Aggregator_MI, True),
        "SPL[ADP]": (S.SPL_ADP_Client, S.SPL_ADP_Aggregator_MI, True),
        "SMP[GRR]": (M.SMP_GRR_Client, M.SMP_GRR_Aggregator_MI, True),
        "SMP[OUE]": (M.SMP_UE_Client, no_k(M.SMP_UE_Aggregator_MI), True),
        "SMP[SS]": (M.SMP_SS_Client, M.SMP_SS_Aggregator_MI, True),
        "SMP[ADP]": (M.SMP_ADP_Client, M.SMP_ADP_Aggregator_MI, True),
        "RS+FD[GRR]": (R.RSpFD_GRR_Client, R.RSpFD_GRR_Aggregator_MI, False),
        "RS+FD[OUE-z]": (R.RSpFD_UE_zero_Client, R.RSpFD_UE_zero_Aggregator_MI, False),
        "RS+FD[OUE-r]": (R.RSpFD_UE_rnd_Client, R.RSpFD_UE_rnd_Aggregator_MI, False),
        "RS+FD[ADP]": (R.RSpFD_ADP_Client, R.RSpFD_ADP_Aggregator_MI, False),
    }


def load(
    rows: int | None, attributes: tuple[str, ...] = ATTRIBUTES
) -> tuple[dict[str, list[str]], np.ndarray]:
    """(domain per attribute, n x d matrix of domain indices) of Adult's train split."""
    from simulator.adult import load_adult

    data = load_adult("train")
    domains, cols = {}, []
    for a in attributes:
        if a in NUMERIC_AS_LABELS:  # Adult's numbers, one label per distinct value
            from simulator.numeric import adult_numeric

            values = adult_numeric(a).astype(np.int64)
            distinct = np.unique(values)
            labels, idx = [str(v) for v in distinct], np.searchsorted(distinct, values)
        else:
            labels, idx = data.column(a, missing="keep")
        domains[a] = labels
        cols.append(idx)
    matrix = np.stack(cols, axis=1)
    return domains, matrix[:rows] if rows else matrix


def count_mse(freqs: list[np.ndarray], truth: list[np.ndarray], n: int) -> float:
    """Per-attribute count MSE, averaged over the attributes."""
    return float(np.mean([np.mean((f * n - t) ** 2) for f, t in zip(freqs, truth, strict=True)]))


def ours(
    domains: dict[str, list[str]], matrix: np.ndarray, epsilon: float, gen: np.random.Generator
) -> dict[str, tuple[float, float]]:
    """Per protocol: (raw count MSE, post-processed count MSE) of one run."""
    from aggregator import estimate
    from aggregator.postprocess import DEFAULT_POSTPROCESS, postprocess
    from client_sdk.mechanisms import create

    n = matrix.shape[0]
    truth = [np.bincount(matrix[:, j], minlength=len(domains[a])) for j, a in enumerate(domains)]
    cols = {a: matrix[:, j] for j, a in enumerate(domains)}
    out = {}
    for protocol in ("spl", "smp", "rsfd", "auto"):
        mech = create(protocol, epsilon=epsilon, attributes=domains)
        est = estimate(mech, mech.tally(mech.perturb_many(cols, rng=gen)))
        raw = [est.frequencies(a) for a in domains]
        method = "norm-sub" if mech.name == "rsfd" else DEFAULT_POSTPROCESS
        post = [postprocess(est[a], method).counts / est[a].n for a in domains]  # type: ignore[arg-type]
        key = f"auto={mech.name}" if protocol == "auto" else protocol
        out[key] = (count_mse(raw, truth, n), count_mse(post, truth, n))
    return out


def predicted_at_data(mech: Any, truth: list[np.ndarray], n: int) -> float:
    """Exact raw count MSE of ``mech`` (SPL or SMP over categorical attributes; RS+FD is never
    auto's choice on Adult) at the true counts, averaged over the attributes."""
    per = []
    for j, c in enumerate(truth):
        m = mech.mechanisms[j]
        c = c.astype(float)
        base = n * m.v0 + m.beta * c
        pi = mech.sampling_probabilities[j]
        per.append(float(np.mean(base / pi + (1 / pi - 1) * c * (1 - c / n))))
    return float(np.mean(per))


def analytic_main(rows: int | None, epsilons: list[float], with_numeric: bool) -> None:
    """``--analytic``: exact raw count MSE at Adult's true counts of auto's choice and of the
    peers' eps-LDP protocols (uniform SMP and SPL over GRR and OUE, built here with the same
    channels as multi-freq-ldpy's), and the SMP whose weights are optimal for the data itself
    (which no data-independent choice can beat): where the analytic optimum is."""
    from client_sdk.mechanisms.multi import compare_protocols, create

    attributes = ATTRIBUTES + (NUMERIC_AS_LABELS if with_numeric else ())
    domains, matrix = load(rows, attributes)
    n, d = matrix.shape
    truth = [np.bincount(matrix[:, j], minlength=len(domains[a])) for j, a in enumerate(domains)]
    print(f"Exact raw count MSE at the true counts, Adult train n={n}, d={d}")
    for eps in epsilons:
        auto = compare_protocols(epsilon=eps, attributes=domains).chosen
        row = {f"auto={auto.name}": predicted_at_data(auto, truth, n)}
        for protocol in ("smp", "spl"):
            for oracle in ("grr", "oue"):
                mech = create(protocol, epsilon=eps, attributes=domains, oracle=oracle)
                row[f"{protocol.upper()}[{oracle.upper()}]"] = predicted_at_data(mech, truth, n)
        uniform = create("smp", epsilon=eps, attributes=domains)
        a = np.array(
            [
                np.mean(n * m.v0 + m.beta * c + c * (1 - c / n))  # type: ignore[union-attr]
                for m, c in zip(uniform.mechanisms, truth, strict=True)
            ]
        )
        s = np.array([np.mean(c * (1 - c / n)) for c in truth])
        row["SMP data-optimal"] = float(np.mean(a * np.sqrt(a).sum() / np.sqrt(a) - s))
        peers_only = {k: v for k, v in row.items() if k.startswith(("SMP[", "SPL["))}
        best = min(peers_only, key=lambda k: peers_only[k])
        mine = next(iter(row.values()))
        cells = "  ".join(f"{k} {v:.4g}" for k, v in row.items())
        print(f"eps {eps:g}: {cells}  ours/best {mine / row[best]:.3f} ({best})")


def mean_sd(values: list[float]) -> tuple[float, float]:
    """Mean and sample sd (0 for one value)."""
    arr = np.asarray(values, dtype=float)
    return float(arr.mean()), float(arr.std(ddof=1)) if arr.size > 1 else 0.0


def peer_run(name: str, peer: Peer, lst_k: list[int], matrix: np.ndarray, epsilon: float) -> float:
    client, aggregator, _ = peer
    d = len(lst_k)
    n = matrix.shape[0]
    truth = [np.bincount(matrix[:, j], minlength=lst_k[j]) for j in range(d)]
    reports = [client(row, lst_k, d, epsilon) for row in matrix.tolist()]
    freqs = aggregator(reports, lst_k, d, epsilon)
    return count_mse([np.asarray(f, dtype=float) for f in freqs], truth, n)


def tvd(table: np.ndarray, truth: np.ndarray) -> float:
    """Total variation distance between two count tables, as frequencies over ``truth``'s n."""
    n = truth.sum()
    return float(0.5 * np.abs(table / n - truth / n).sum())


def clipped(table: np.ndarray) -> np.ndarray:
    """Clip at 0 and rescale to the same total (a valid distribution)."""
    c = np.clip(table, 0, None)
    return c * (table.sum() / c.sum()) if c.sum() > 0 else c


def joints_run(
    domains: dict[str, list[str]], matrix: np.ndarray, epsilon: float, gen: np.random.Generator
) -> dict[str, list[float]]:
    """Per method, the TVD of each pair's table (JOINT_PAIRS order), raw then clipped, and
    last the count MSE of the attributes (mean over their values and the attributes; nan where
    the method has no one-way counts of its own)."""
    from aggregator import estimate
    from client_sdk.mechanisms import create
    from client_sdk.mechanisms.multi import MultiMechanism, optimal_weights

    names = list(domains)
    cols = {a: matrix[:, j] for j, a in enumerate(names)}
    n = matrix.shape[0]
    counts = {a: np.bincount(cols[a], minlength=len(domains[a])) for a in names}
    truths = []
    for a, b in JOINT_PAIRS:
        t = np.zeros((len(domains[a]), len(domains[b])))
        np.add.at(t, (cols[a], cols[b]), 1)
        truths.append(t)
    mech = create("auto", epsilon=epsilon, attributes=domains, pairs=list(JOINT_PAIRS))
    blind = MultiMechanism(
        "smp", epsilon=epsilon, attributes=domains, pairs=list(JOINT_PAIRS), weights=[1] * mech.d
    )
    blind = MultiMechanism(
        "smp",
        epsilon=epsilon,
        attributes=domains,
        pairs=list(JOINT_PAIRS),
        weights=optimal_weights(blind.mechanisms),
    )
    out: dict[str, list[float]] = {}
    for label, m in ((f"ours ({mech.name}, consistent)", mech), ("(c) smp, pair-blind", blind)):
        est = estimate(m, m.tally(m.perturb_many(cols, rng=gen)))
        row: list[float] = []
        for pair, truth in zip(JOINT_PAIRS, truths, strict=True):
            table = est.joints[pair].table
            row += [tvd(table, truth), tvd(clipped(table), truth)]
        mse = [np.mean((est.consistent_counts(a) - counts[a]) ** 2) for a in names]
        out[label] = [*row, float(np.mean(mse))]
        if m is mech:
            raw: list[float] = []
            for pair, truth in zip(JOINT_PAIRS, truths, strict=True):
                table = est.joints[pair].raw
                raw += [tvd(table, truth), tvd(clipped(table), truth)]
            out["(b) raw product"] = [*raw, float("nan")]
    label = "(a) 2 campaigns, eps/2"
    out[label] = []
    margins: dict[str, list[np.ndarray]] = {}
    for (a, b), truth in zip(JOINT_PAIRS, truths, strict=True):
        kb = len(domains[b])
        product = [f"{x}|{y}" for x in domains[a] for y in domains[b]]
        single = create("auto", epsilon=epsilon / 2, domain=product)
        e = estimate(single, single.tally(single.perturb_many(cols[a] * kb + cols[b], rng=gen)))
        table = np.asarray(e.counts, dtype=float).reshape(truth.shape)
        out[label] += [tvd(table, truth), tvd(clipped(table), truth)]
        margins.setdefault(a, []).append(table.sum(axis=1))
        margins.setdefault(b, []).append(table.sum(axis=0))
    mse = [np.mean((np.mean(margins[a], axis=0) - counts[a]) ** 2) for a in names]
    out[label].append(float(np.mean(mse)) if n else float("nan"))
    return out


def joints_main(rows: int | None, epsilons: list[float], repetitions: int, seed: int) -> None:
    """Print the joint tables' TVD table (see the module docstring)."""
    attrs = tuple(dict.fromkeys(a for pair in JOINT_PAIRS for a in pair))
    domains, matrix = load(rows, attrs)
    n = matrix.shape[0]
    pairs = ", ".join(f"{a} x {b} ({len(domains[a])}x{len(domains[b])})" for a, b in JOINT_PAIRS)
    print(f"\nJoint tables on Adult train, n={n}: {pairs}; TVD to the true joint, mean +- sd "
          f"of {repetitions} runs (raw / clipped); attributes' count MSE (consistent counts; "
          "(a): the mean of its tables' margins)")
    head = "".join(f"{f'{a} x {b}':>34}" for a, b in JOINT_PAIRS)
    print(f"{'eps':>4}  {'method':<30}{head}{'attr count MSE':>16}")
    for eps in epsilons:
        gen = np.random.default_rng([seed, int(eps * 1000), 7])
        runs: dict[str, list[list[float]]] = {}
        for _ in range(repetitions):
            for k, v in joints_run(domains, matrix, eps, gen).items():
                runs.setdefault(k, []).append(v)
        for k, v in runs.items():
            m = np.mean(v, axis=0)
            sd = np.std(v, axis=0, ddof=1) if len(v) > 1 else np.zeros_like(m)
            cells = "".join(
                f"{f'{m[2 * i]:.4f}±{sd[2 * i]:.4f} / {m[2 * i + 1]:.4f}':>34}"
                for i in range(len(JOINT_PAIRS))
            )
            mse = "-" if np.isnan(m[-1]) else f"{m[-1]:.4g}"
            print(f"{eps:>4g}  {k:<30}{cells}{mse:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repetitions", "--reps", dest="repetitions", type=int, default=2)
    parser.add_argument(
        "--peer-oracles",
        default="",
        help="only the peers over these oracles, e.g. GRR,OUE (default: all 12 protocols)",
    )
    parser.add_argument("--rows", type=int, default=None, help="first rows of Adult train")
    parser.add_argument("--epsilons", default=",".join(f"{e:g}" for e in EPSILONS))
    parser.add_argument("--seed", type=int, default=2021)
    parser.add_argument("--no-peers", action="store_true", help="ours only (no venv needed)")
    parser.add_argument(
        "--joints", action="store_true", help="only the joint tables' TVD (module docstring)"
    )
    parser.add_argument(
        "--with-numeric",
        action="store_true",
        help="add age and hours-per-week (as labels) to the per-attribute MSE",
    )
    parser.add_argument(
        "--analytic",
        action="store_true",
        help="only the exact raw count MSE at the true counts (analytic_main; no peers needed)",
    )
    args = parser.parse_args()
    if args.analytic:
        epsilons = [float(e) for e in args.epsilons.split(",")]
        analytic_main(args.rows, epsilons, args.with_numeric)
        return
    if args.joints:
        epsilons = [float(e) for e in args.epsilons.split(",")]
        joints_main(args.rows, epsilons, args.repetitions, args.seed)
        return
    if not args.no_peers:
        ensure_peers()
    from client_sdk.mechanisms.multi import compare_protocols

    attributes = ATTRIBUTES + (NUMERIC_AS_LABELS if args.with_numeric else ())
    domains, matrix = load(args.rows, attributes)
    n, d = matrix.shape
    lst_k = [len(domains[a]) for a in domains]
    epsilons = [float(e) for e in args.epsilons.split(",")]
    print(
        f"Adult train, n={n}, d={d} attributes "
        f"{', '.join(f'{a} (k={len(domains[a])})' for a in domains)}; "
        f"{args.repetitions} repetitions; per-attribute count MSE averaged over attributes"
    )
    table = []
    wanted = [o.strip().upper() for o in args.peer_oracles.split(",") if o.strip()]
    chosen_peers = {
        k: v
        for k, v in (peers().items() if not args.no_peers else ())
        if not wanted or k.split("[")[1].rstrip("]").split("-")[0] in wanted
    }
    truth = [np.bincount(matrix[:, j], minlength=len(domains[a])) for j, a in enumerate(domains)]
    for eps in epsilons:
        started = time.perf_counter()
        gen = np.random.default_rng([args.seed, int(eps * 1000)])
        mine: dict[str, list[tuple[float, float]]] = {}
        for _ in range(args.repetitions):
            for k, v in ours(domains, matrix, eps, gen).items():
                mine.setdefault(k, []).append(v)
        choice = compare_protocols(epsilon=eps, attributes=domains)
        predicted = n * choice.chosen.variance_criterion()
        at_data = predicted_at_data(choice.chosen, truth, n)
        theirs: dict[str, tuple[float, float]] = {}
        if chosen_peers:
            np.random.seed(args.seed + int(eps * 1000))  # the peers draw from NumPy's global state
            for name, peer in chosen_peers.items():
                runs = [peer_run(name, peer, lst_k, matrix, eps) for _ in range(args.repetitions)]
                theirs[name] = mean_sd(runs)
        print(f"\neps {eps:g} ({time.perf_counter() - started:.0f} s); {choice.reason}")
        print(f"  {'ours':<14} {'raw MSE (mean +- sd)':>24} {'post MSE (mean +- sd)':>24}")
        stats = {}
        for k, v in mine.items():
            raw, post = mean_sd([x[0] for x in v]), mean_sd([x[1] for x in v])
            stats[k] = post
            print(
                f"  {k:<14} {raw[0]:>12.5g} +- {raw[1]:<9.3g} {post[0]:>12.5g} +- {post[1]:<9.3g}"
            )
        print(f"  {'predicted':<14} {predicted:>12.5g}   (auto's analytic count MSE, uniform data)")
        print(f"  {'at data':<14} {at_data:>12.5g}   (auto's exact raw count MSE, true counts)")
        for name, (mse, sd) in theirs.items():
            amp = (
                ""
                if peers()[name][2]
                else (f"   whole report eps'={math.log(d * (math.exp(eps) - 1) + 1):.3g}")
            )
            print(f"  {name:<14} {'':>27} {mse:>12.5g} +- {sd:<9.3g}{amp}")
        auto_key = next(k for k in stats if k.startswith("auto"))
        row: dict[str, Any] = {"eps": eps, "ours": stats[auto_key], "auto": auto_key}
        if theirs:
            fair = {k: v for k, v in theirs.items() if peers()[k][2]}
            row["fair"] = min(fair.items(), key=lambda kv: kv[1][0])
            row["all"] = min(theirs.items(), key=lambda kv: kv[1][0])
        table.append(row)
    r = args.repetitions
    print(
        f"\n{'eps':>4} {'ours (auto + post)':>34} {'best eps-LDP peer (mean)':>38} "
        f"{'z':>6} {'best peer, any (mean)':>36}"
    )
    for row in table:
        (om, osd) = row["ours"]
        line = f"{row['eps']:>4g} {row['auto']:>12} {om:>11.5g} +- {osd:<8.3g}"
        if "fair" in row:
            fn, (fm, fsd) = row["fair"]
            an, (am, asd) = row["all"]
            se = math.sqrt((osd**2 + fsd**2) / r) if r > 1 else float("nan")
            z = (om - fm) / se if se > 0 else float("nan")
            line += f" {fn:>12} {fm:>11.5g} +- {fsd:<8.3g} {z:>6.2f}"
            line += f" {an:>12} {am:>11.5g} +- {asd:<8.3g}"
            line += "  ours <= best eps-LDP peer" if om <= fm else "  ours > best eps-LDP peer"
        print(line)

if __name__ == "__main__":
    main()
