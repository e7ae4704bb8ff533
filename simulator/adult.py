"""The UCI Adult data set, bundled and checksum-verified, and any CSV file with a header.

``load_adult("train")`` reads the bundled ``adult.data.gz`` (32,561 rows), ``"test"`` the
bundled ``adult.test.gz`` (16,281 rows), ``"all"`` both. Every load decompresses the file and
compares the sha256 of the decompressed bytes with the value published in the data set's
README (``simulator/data/README.md``); a mismatch raises :class:`DataError`.

Attributes offered by name (:data:`ADULT_ATTRIBUTES`) and the order of their domains:

* ``age``: one value per age, in numeric order (``"17"`` ... ``"90"``);
* ``age-bucket``: decades in numeric order (``"10-19"``, ``"20-29"``, ... ``"90-99"``);
* ``education``: in schooling order (by the data set's ``education-num``);
* ``income``: ``"<=50K"``, ``">50K"`` (the test split's trailing ``'.'`` is removed);
* every other attribute: its values sorted alphabetically.

Missing values (``'?'`` in Adult; ``'?'``, ``''`` or ``'NA'`` in a CSV) are **dropped** by
default (``missing="drop"``); with ``missing="keep"`` they become their own category ``"?"``,
placed last in the domain. Only values that occur are in a domain.

The data never leaves this process in the clear: the simulator hands the indices to a
mechanism's ``perturb_many`` or to the SDK, which sends only perturbed reports.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Literal, NamedTuple

import numpy as np

from simulator.errors import DataError, UnknownAttribute

#: Columns of the Adult files, in file order (from ``adult.names``).
ADULT_COLUMNS: tuple[str, ...] = (
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
)

#: Categorical attributes the simulator offers by name.
ADULT_ATTRIBUTES: tuple[str, ...] = (
    "occupation",
    "education",
    "marital-status",
    "relationship",
    "race",
    "sex",
    "workclass",
    "native-country",
    "age",
    "age-bucket",
    "income",
)

#: The bundled files: split -> (file name, sha256 of the decompressed bytes, data rows).
ADULT_FILES: dict[str, tuple[str, str, int]] = {
    "train": (
        "adult.data.gz",
        "5b00264637dbfec36bdeaab5676b0b309ff9eb788d63554ca0a249491c86603d",
        32_561,
    ),
    "test": (
        "adult.test.gz",
        "a2a9044bc167a35b2361efbabec64e89d69ce82d9790d2980119aac5fd7e9c05",
        16_281,
    ),
}

ATTRIBUTION = (
    "UCI Adult data set: Becker, B. & Kohavi, R. (1996), UCI Machine Learning Repository, "
    "https://doi.org/10.24432/C5XW20, CC BY 4.0"
)

MISSING_LABEL = "?"
CSV_MISSING = frozenset({"?", "", "NA"})

Split = Literal["train", "test", "all"]
Missing = Literal["drop", "keep"]


class Column(NamedTuple):
    """One attribute as a domain and a row of domain indices (unpacks as ``labels, indices``)."""

    labels: list[str]
    indices: np.ndarray  # int64, one entry per kept row


@dataclass(frozen=True, eq=False)
class Dataset:
    """Rows of string-valued columns; :meth:`column` turns one into a domain and indices."""

    name: str
    columns: Mapping[str, np.ndarray]  # column -> object array of stripped strings
    missing_values: frozenset[str] = frozenset({MISSING_LABEL})
    #: column -> ordering rule of its domain: "alpha" (default), "numeric" or "by:a|b|..."
    orders: Mapping[str, str] = field(default_factory=dict)
    #: Whom to credit for the data (the bundled Adult files' citation); None: the user's own.
    attribution: str | None = None

    @property
    def n_rows(self) -> int:
        return len(next(iter(self.columns.values()))) if self.columns else 0

    @property
    def attributes(self) -> tuple[str, ...]:
        """Names accepted by :meth:`column`."""
        return tuple(self.columns)

    def column(self, name: str, *, missing: Missing = "drop") -> Column:
        """The domain of attribute ``name`` and each kept row's index into it.

        ``missing="drop"`` (default) leaves out rows whose value is missing; ``"keep"`` maps
        them to the category ``"?"``, the last label. Domain order: see the module docstring.
        """
        if missing not in ("drop", "keep"):
            raise ValueError(f"missing must be 'drop' or 'keep', got {missing!r}")
        if name not in self.columns:
            raise UnknownAttribute(
                f"no attribute {name!r} in {self.name}; choose one of: "
                + ", ".join(self.attributes)
            )
        values = self.columns[name]
        is_missing = np.isin(values, list(self.missing_values))
        present = values[~is_missing]
        labels = _order(sorted(set(present.tolist())), self.orders.get(name, "alpha"))
        if missing == "keep" and is_missing.any():
            labels.append(MISSING_LABEL)
            values = np.where(is_missing, MISSING_LABEL, values)
        else:
            values = present
        lookup = {label: i for i, label in enumerate(labels)}
        indices = np.fromiter((lookup[v] for v in values.tolist()), np.int64, count=len(values))
        return Column(labels, indices)

    def counts(self, name: str, *, missing: Missing = "drop") -> dict[str, int]:
        """True count of each value of ``name`` (in domain order)."""
        labels, indices = self.column(name, missing=missing)
        return dict(zip(labels, np.bincount(indices, minlength=len(labels)).tolist(), strict=True))


def _order(labels: list[str], how: str) -> list[str]:
    if how == "numeric":
        return sorted(labels, key=lambda s: (float(s.split("-")[0]), s))
    if how.startswith("by:"):  # explicit ranking, e.g. education by education-num
        rank = {label: i for i, label in enumerate(how[3:].split("|"))}
        return sorted(labels, key=lambda s: (rank.get(s, len(rank)), s))
    return sorted(labels)


def _read_bundled(file_name: str, sha256: str) -> bytes:
    try:
        packed = resources.files("simulator").joinpath("data", file_name).read_bytes()
    except FileNotFoundError:
        raise DataError(
            f"bundled data file simulator/data/{file_name} is missing; reinstall the package "
            "(pip install -e .) so its package data is present"
        ) from None
    try:
        raw = gzip.decompress(packed)
    except (OSError, EOFError) as exc:
        raise DataError(f"simulator/data/{file_name} is not valid gzip: {exc}") from None
    digest = hashlib.sha256(raw).hexdigest()
    if digest != sha256:
        raise DataError(
            f"checksum mismatch for {file_name}: sha256 of the decompressed file is {digest}, "
            f"the data set's README says {sha256}; restore the file from "
            "../shared/data/adult/ or a clean checkout"
        )
    return raw


def _parse_adult(raw: bytes, expected_rows: int, file_name: str) -> list[list[str]]:
    rows = []
    for line in raw.decode("ascii").splitlines():
        if not line.strip() or line.startswith("|"):
            continue
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != len(ADULT_COLUMNS):
            raise DataError(f"{file_name}: expected 15 fields, got {len(fields)}: {line[:60]!r}")
        fields[-1] = fields[-1].rstrip(".")  # the test split writes '>50K.'
        rows.append(fields)
    if len(rows) != expected_rows:
        raise DataError(f"{file_name}: expected {expected_rows} rows, found {len(rows)}")
    return rows


@lru_cache(maxsize=4)
def load_adult(split: Split = "train") -> Dataset:
    """The bundled UCI Adult data, verified against its published sha256 checksums.

    ``split``: ``"train"`` (adult.data, 32,561 rows, the set 'Programming Differential Privacy'
    uses), ``"test"`` (adult.test, 16,281 rows) or ``"all"`` (both, 48,842 rows).
    Raises :class:`DataError` if a file is missing or its checksum differs.
    """
    if split not in ("train", "test", "all"):
        raise ValueError(f"split must be 'train', 'test' or 'all', got {split!r}")
    parts = ["train", "test"] if split == "all" else [split]
    rows: list[list[str]] = []
    for part in parts:
        file_name, sha256, expected = ADULT_FILES[part]
        rows.extend(_parse_adult(_read_bundled(file_name, sha256), expected, file_name))
    table = np.array(rows, dtype=object)
    raw_cols = {name: table[:, i] for i, name in enumerate(ADULT_COLUMNS)}
    ages = raw_cols["age"].astype(int)
    decade = (ages // 10) * 10
    buckets = np.array([f"{d}-{d + 9}" for d in decade.tolist()], dtype=object)
    edu_num = raw_cols["education-num"].astype(int).tolist()
    by_num = sorted(set(zip(edu_num, raw_cols["education"].tolist(), strict=True)))
    columns = {name: raw_cols[name] for name in ADULT_ATTRIBUTES if name in raw_cols}
    columns["age-bucket"] = buckets
    columns = {name: columns[name] for name in ADULT_ATTRIBUTES}
    orders = {
        "age": "numeric",
        "age-bucket": "numeric",
        "education": "by:" + "|".join(label for _, label in by_num),
    }
    return Dataset(name=f"adult-{split}", columns=columns, orders=orders, attribution=ATTRIBUTION)


def load_csv(path: str | Path, *, columns: Sequence[str] | None = None) -> Dataset:
    """Any CSV file whose first line is a header; every column is read as a category.

    Missing values are ``'?'``, ``''`` and ``'NA'``. ``columns`` restricts what is kept.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8"
        ) from None
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}") from None
    reader = csv.reader(io.StringIO(text))
    try:
        header = [h.strip() for h in next(reader)]
        body = [[f.strip() for f in row] for row in reader if row]
    except StopIteration:
        raise DataError(f"{path} is empty; a CSV with a header line is expected") from None
    except csv.Error as exc:
        raise DataError(f"{path} line {reader.line_num}: not CSV: {exc}") from None
    for i, row in enumerate(body, start=2):
        if len(row) != len(header):
            raise DataError(f"{path} line {i}: {len(row)} fields, the header has {len(header)}")
    wanted = list(columns) if columns is not None else header
    for name in wanted:
        if name not in header:
            raise UnknownAttribute(
                f"no column {name!r} in {path}; its header has: {', '.join(header)}"
            )
    if not body:
        raise DataError(f"{path} has a header but no rows")
    table = np.array(body, dtype=object)
    cols = {name: table[:, header.index(name)] for name in wanted}
    return Dataset(name=path.name, columns=cols, missing_values=CSV_MISSING)
