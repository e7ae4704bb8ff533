"""Mutation testing of the privacy and estimation core, one module at a time (cosmic-ray).

    python -m tools.mutation                                  # every module in the config
    python -m tools.mutation --module aggregator/estimate.py  # one (repeatable)
    python -m tools.mutation --module client_sdk/ledger.py --all   # every mutant, no sampling
    python -m tools.mutation --rev HEAD~3                     # the tree of a commit instead

For each module of ``tools/mutation.toml`` it copies the tree (the working tree, tracked and
untracked files, or ``--rev``) to a scratch directory, so mutants never touch your checkout;
runs the module's own test files once unmutated (they must pass); lets cosmic-ray enumerate
every single-point mutant; keeps a uniform sample of ``--sample`` of them drawn with ``--seed``
(sorted by position first, so the same code gives the same sample); and runs the module's tests
against each (``pytest -x``, stopping at the first failure). A mutant is *killed* when the tests
fail or time out (or it cannot be imported), *survived* when they pass. It prints per module:
tried, killed, survived, documented-equivalent survivors, the score ``killed / tried`` and the
score over non-equivalent mutants, then every survivor with its line and the change.

Equivalent mutants (no test can tell them apart from the original) are listed with the reason
in the config's ``[[equivalent]]`` table, keyed by module, operator and the source line.
Exit status 1 when a module's score over non-equivalent mutants is below ``--fail-under``.
"""

from __future__ import annotations

import argparse
import ast
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "tools" / "mutation.toml"


@dataclass(frozen=True)
class Equivalent:
    """A mutant documented as equivalent: same behaviour as the original for every input."""

    module: str
    operator: str
    line: str
    reason: str
    col: int | None = None  # when the line has several mutants of the same operator


@dataclass(frozen=True)
class ModuleSpec:
    """A module to mutate, the test files that exercise it and an optional ``pytest -k``."""

    path: str
    tests: tuple[str, ...]
    select: str | None = None


@dataclass(frozen=True)
class Config:
    seed: int
    sample: int
    timeout_factor: float
    min_timeout: float
    pytest_args: tuple[str, ...]
    skip_tests: str | None
    exclude_operators: tuple[str, ...]
    modules: tuple[ModuleSpec, ...]
    equivalents: tuple[Equivalent, ...]


def load_config(path: Path = CONFIG) -> Config:
    with path.open("rb") as fh:
        raw = tomllib.load(fh)
    d = raw["defaults"]
    return Config(
        seed=int(d["seed"]),
        sample=int(d["sample"]),
        timeout_factor=float(d["timeout-factor"]),
        min_timeout=float(d["min-timeout"]),
        pytest_args=tuple(d["pytest-args"]),
        skip_tests=d.get("skip-tests"),
        exclude_operators=tuple(d.get("exclude-operators", ())),
        modules=tuple(
            ModuleSpec(m["path"], tuple(m["tests"]), m.get("select")) for m in raw["module"]
        ),
        equivalents=tuple(
            Equivalent(e["module"], e["operator"], e["line"].strip(), e["reason"], e.get("col"))
            for e in raw.get("equivalent", ())
        ),
    )


@dataclass
class Mutant:
    operator: str
    line_no: int
    col: int
    occurrence: int
    source_line: str
    outcome: str  # killed | survived | incompetent
    changed_line: str = ""
    equivalent: Equivalent | None = None

    def describe(self) -> str:
        change = f"  ->  {self.changed_line.strip()}" if self.changed_line else ""
        where = f"line {self.line_no}:{self.col}"
        return f"    {where} {self.operator}: {self.source_line.strip()}{change}"


@dataclass
class ModuleResult:
    path: str
    total: int = 0
    mutants: list[Mutant] = field(default_factory=list)
    seconds: float = 0.0
    missing_tests: tuple[str, ...] = ()

    @property
    def tried(self) -> int:
        return len(self.mutants)

    @property
    def killed(self) -> int:
        return sum(m.outcome != "survived" for m in self.mutants)

    @property
    def survivors(self) -> list[Mutant]:
        return [m for m in self.mutants if m.outcome == "survived"]

    @property
    def equivalent(self) -> int:
        return sum(m.equivalent is not None for m in self.survivors)

    @property
    def score(self) -> float:
        return self.killed / self.tried if self.tried else 1.0

    @property
    def score_non_equivalent(self) -> float:
        real = self.tried - self.equivalent
        return self.killed / real if real else 1.0


def copy_tree(rev: str | None, dest: Path) -> None:
    """The working tree's files (tracked and untracked, not ignored), or a commit's, in ``dest``."""
    dest.mkdir(parents=True)
    if rev is not None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], check=True, capture_output=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    listing = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"],
        check=True,
        capture_output=True,
    ).stdout.decode()
    for name in filter(None, listing.split("\0")):
        src = ROOT / name
        if src.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def _cosmic_ray(args: Sequence[str], cwd: Path, env: dict[str, str]) -> None:
    # Its own process group, so an interrupted run can stop it (see _stop_children); a test run
    # it had started finishes on its own, in a scratch copy that is removed.
    proc = subprocess.Popen(
        [sys.executable, "-m", "cosmic_ray.cli", "--verbosity", "ERROR", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    _ACTIVE.add(proc)
    try:
        out, err = proc.communicate()
    finally:
        _ACTIVE.discard(proc)
    if proc.returncode != 0:
        raise SystemExit(f"cosmic-ray {args[0]} failed:\n{out}\n{err}")


_ACTIVE: set[subprocess.Popen] = set()


def _stop_children() -> None:
    for proc in list(_ACTIVE):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _changed_line(diff: str | None) -> str:
    for line in (diff or "").splitlines():
        if line.startswith("+") and not line.startswith("+++"):
            return line[1:]
    return ""


def _match_equivalent(
    cfg: Config, module: str, operator: str, source_line: str, col: int
) -> Equivalent | None:
    for eq in cfg.equivalents:
        if (
            eq.module == module
            and eq.operator == operator
            and eq.line == source_line.strip()
            and eq.col in (None, col)
        ):
            return eq
    return None


def annotation_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's annotations are: never evaluated (``from __future__ import annotations``),
    so a mutant there (``int | None`` to ``int / None``) is equivalent by construction."""
    tree = ast.parse(source)
    lazy = any(
        isinstance(node, ast.ImportFrom)
        and node.module == "__future__"
        and any(alias.name == "annotations" for alias in node.names)
        for node in tree.body
    )
    if not lazy:
        return []
    spans = []
    for node in ast.walk(tree):
        notes: list[ast.expr | None] = []
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            notes.append(node.returns)
        elif isinstance(node, ast.arg):
            notes.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            notes.append(node.annotation)
        for note in notes:
            if note is not None and note.end_lineno is not None and note.end_col_offset is not None:
                spans.append(
                    ((note.lineno, note.col_offset), (note.end_lineno, note.end_col_offset))
                )
    return spans


#: Why a survivor inside an ``@overload`` stub is equivalent (see :func:`overload_spans`).
OVERLOAD_STUB = (
    "inside an @overload stub: the implementation's def rebinds the name, so the stub (its "
    "defaults, its body, its decorator) is never called; mypy checks the stubs"
)


def overload_spans(source: str) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Where the module's ``@overload`` stubs are, decorators included.

    A stub is rebound by the next ``def`` of the same name and never called, so a mutant there
    (a default changed, the decorator removed) behaves as the original for every input. They
    stay in the sample (so the sample does not move) and a survivor there counts as equivalent.
    """
    spans = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        names = [
            d.id if isinstance(d, ast.Name) else d.attr if isinstance(d, ast.Attribute) else ""
            for d in node.decorator_list
        ]
        if "overload" in names and node.end_lineno is not None and node.end_col_offset is not None:
            first = node.decorator_list[0]
            spans.append(((first.lineno, 0), (node.end_lineno, node.end_col_offset)))
    return spans


def in_spans(pos: tuple[int, int], spans: list[tuple[tuple[int, int], tuple[int, int]]]) -> bool:
    return any(start <= tuple(pos) < end for start, end in spans)


def _sample(items: list, size: int | None, seed: int) -> list:
    if size is None or size >= len(items):
        return items
    return random.Random(seed).sample(items, size)


def run_module(
    cfg: Config,
    spec: ModuleSpec,
    *,
    rev: str | None,
    sample: int | None,
    seed: int,
    workdir: Path,
    log=lambda line: print(line, flush=True),
) -> ModuleResult:
    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    started = time.monotonic()
    tree = workdir / spec.path.replace("/", "_").removesuffix(".py")
    copy_tree(rev, tree)
    result = ModuleResult(spec.path)
    if not (tree / spec.path).is_file():
        raise SystemExit(f"{spec.path}: no such module in the tree")
    tests = tuple(t for t in spec.tests if (tree / t).exists())
    result.missing_tests = tuple(t for t in spec.tests if t not in tests)
    if not tests:
        raise SystemExit(f"{spec.path}: none of its test files exist in the tree")
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1")
    keyword = " and ".join(
        f"({expr})" for expr in (spec.select, cfg.skip_tests and f"not ({cfg.skip_tests})") if expr
    )
    select = ["-k", keyword] if keyword else []
    command = [sys.executable, "-m", "pytest", *cfg.pytest_args, *select, *tests]

    t0 = time.monotonic()
    base = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True)
    baseline = time.monotonic() - t0
    if base.returncode != 0:
        raise SystemExit(f"{spec.path}: the unmutated tests fail:\n{base.stdout[-3000:]}")
    timeout = max(cfg.min_timeout, cfg.timeout_factor * baseline)

    config_text = "\n".join(
        [
            "[cosmic-ray]",
            f"module-path = {spec.path!r}",
            f"timeout = {timeout:.1f}",
            "excluded-modules = []",
            f"test-command = {shlex.join(command)!r}",
            "[cosmic-ray.distributor]",
            'name = "local"',
        ]
    )
    cfg_path = tree / "cosmic-ray.toml"
    cfg_path.write_text(config_text + "\n")
    session = tree / "session.sqlite"
    _cosmic_ray(["init", str(cfg_path), str(session)], tree, env)

    excluded = re.compile("|".join(f"(?:{p})" for p in cfg.exclude_operators) or "(?!x)x")
    source = (tree / spec.path).read_text().splitlines()
    stubs = overload_spans((tree / spec.path).read_text())
    with use_db(str(session), WorkDB.Mode.open) as db:
        items = sorted(
            db.pending_work_items,
            key=lambda w: (
                w.mutations[0].start_pos,
                w.mutations[0].operator_name,
                w.mutations[0].occurrence,
            ),
        )
        annotations = annotation_spans((tree / spec.path).read_text())
        eligible = [
            w
            for w in items
            if not excluded.fullmatch(w.mutations[0].operator_name)
            and not in_spans(w.mutations[0].start_pos, annotations)
        ]
        chosen = {w.job_id for w in _sample(eligible, sample, seed)}
        skip = [w.job_id for w in items if w.job_id not in chosen]
        db.set_multiple_results(
            skip, WorkResult(output="not sampled", worker_outcome=WorkerOutcome.SKIPPED)
        )
        result.total = len(eligible)
    log(
        f"{spec.path}: {len(chosen)} of {len(eligible)} mutants, tests "
        f"{' '.join(tests)} (baseline {baseline:.1f}s, timeout {timeout:.0f}s)"
    )
    _cosmic_ray(["exec", str(cfg_path), str(session)], tree, env)

    with use_db(str(session), WorkDB.Mode.open) as db:
        for item, res in db.completed_work_items:
            if item.job_id not in chosen:
                continue
            m = item.mutations[0]
            line_no, col = m.start_pos
            text = source[line_no - 1] if line_no <= len(source) else ""
            if res.worker_outcome == WorkerOutcome.NORMAL:
                outcome = "survived" if res.test_outcome == "survived" else "killed"
                if res.test_outcome == "incompetent":
                    outcome = "incompetent"
            elif res.worker_outcome == WorkerOutcome.NO_TEST:
                continue
            else:  # the mutant could not even be run (exception in the worker): killed
                outcome = "incompetent"
            mutant = Mutant(
                m.operator_name, line_no, col, m.occurrence, text, outcome, _changed_line(res.diff)
            )
            if outcome == "survived":
                mutant.equivalent = _match_equivalent(cfg, spec.path, m.operator_name, text, col)
                if mutant.equivalent is None and in_spans(m.start_pos, stubs):
                    mutant.equivalent = Equivalent(
                        spec.path, m.operator_name, text.strip(), OVERLOAD_STUB
                    )
            result.mutants.append(mutant)
    result.mutants.sort(key=lambda m: (m.line_no, m.col, m.operator))
    result.seconds = time.monotonic() - started
    return result


def format_table(results: Iterable[ModuleResult]) -> str:
    rows = [
        "| module | mutants | tried | killed | survived | equivalent | score "
        "| score (non-equiv.) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        rows.append(
            f"| `{r.path}` | {r.total} | {r.tried} | {r.killed} | {len(r.survivors)} | "
            f"{r.equivalent} | {r.score:.0%} | {r.score_non_equivalent:.0%} |"
        )
    return "\n".join(rows)


def format_survivors(results: Iterable[ModuleResult]) -> str:
    out = []
    for r in results:
        if r.missing_tests:
            out.append(f"{r.path}: test files not in this tree: {', '.join(r.missing_tests)}")
        real = [m for m in r.survivors if m.equivalent is None]
        equiv = [m for m in r.survivors if m.equivalent is not None]
        if real:
            out.append(f"{r.path}: survivors")
            out.extend(m.describe() for m in real)
        if equiv:
            out.append(f"{r.path}: equivalent survivors (documented)")
            out.extend(
                f"{m.describe()}\n        ({m.equivalent.reason})" for m in equiv if m.equivalent
            )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.mutation", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--module", action="append", help="a module path from the config (repeatable)"
    )
    parser.add_argument("--sample", type=int, help="mutants per module (default: the config's)")
    parser.add_argument("--all", action="store_true", help="every mutant, no sampling")
    parser.add_argument("--seed", type=int, help="sampling seed (default: the config's)")
    parser.add_argument("--rev", help="mutate this commit's tree instead of the working tree")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="modules mutated at once, each in its own copy (default 1)",
    )
    parser.add_argument("--config", type=Path, default=CONFIG)
    parser.add_argument(
        "--fail-under",
        type=float,
        default=0.0,
        help="exit 1 if a module's non-equivalent score is below this (0-1)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory")
    args = parser.parse_args(argv)
    # SIGTERM as an exception, so the scratch copy is removed and children are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    try:
        import cosmic_ray  # noqa: F401
    except ImportError:
        parser.error("cosmic-ray is not installed: pip install -e '.[dev,mutation]'")
    cfg = load_config(args.config)
    known = {m.path: m for m in cfg.modules}
    if args.module:
        unknown = [m for m in args.module if m not in known]
        if unknown:
            parser.error(
                f"not in {args.config.name}: {', '.join(unknown)}; known: {', '.join(known)}"
            )
        specs = [known[m] for m in args.module]
    else:
        specs = list(cfg.modules)
    sample = None if args.all else (args.sample if args.sample is not None else cfg.sample)
    seed = cfg.seed if args.seed is None else args.seed

    workdir = Path(tempfile.mkdtemp(prefix="ldp-mutation-"))

    def one(spec: ModuleSpec) -> ModuleResult:
        r = run_module(cfg, spec, rev=args.rev, sample=sample, seed=seed, workdir=workdir)
        print(
            f"{r.path}: {r.killed}/{r.tried} killed, {len(r.survivors)} survived "
            f"({r.seconds:.0f}s)",
            flush=True,
        )
        return r

    try:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            try:
                results = list(pool.map(one, specs))
            except BaseException:
                pool.shutdown(wait=False, cancel_futures=True)
                _stop_children()
                raise
    finally:
        if args.keep:
            print(f"scratch kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    label = "all mutants" if sample is None else f"sample {sample} per module, seed {seed}"
    print(f"\n{label}; {args.rev or 'working tree'}\n")
    print(format_table(results))
    survivors = format_survivors(results)
    if survivors:
        print("\n" + survivors)
    return int(any(r.score_non_equivalent < args.fail_under for r in results))


if __name__ == "__main__":
    sys.exit(main())
