"""The bundled Adult loader: known counts, checksums, domains, missing values, CSV input."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources

import numpy as np
import pytest

from simulator import adult
from simulator.adult import ADULT_ATTRIBUTES, ADULT_FILES, load_adult, load_csv
from simulator.errors import DataError, UnknownAttribute


def test_train_split_matches_the_published_facts() -> None:
    data = load_adult("train")
    assert data.n_rows == 32_561
    counts = data.counts("occupation")
    assert len(counts) == 14
    assert counts["Sales"] == 3_650
    assert counts["Prof-specialty"] == 4_140
    assert counts["Armed-Forces"] == 9
    assert sum(counts.values()) == 32_561 - 1_843


def test_missing_values_are_dropped_by_default_and_kept_on_request() -> None:
    data = load_adult("train")
    dropped = data.column("occupation")
    kept = data.column("occupation", missing="keep")
    assert dropped.indices.size == 32_561 - 1_843
    assert kept.labels[-1] == "?" and kept.labels[:-1] == dropped.labels
    assert kept.indices.size == 32_561
    assert int((kept.indices == len(kept.labels) - 1).sum()) == 1_843
    assert kept.indices.dtype == np.int64


def test_bundled_files_match_the_readme_checksums() -> None:
    for file_name, sha256, _rows in ADULT_FILES.values():
        packed = resources.files("simulator").joinpath("data", file_name).read_bytes()
        assert hashlib.sha256(gzip.decompress(packed)).hexdigest() == sha256


def test_a_corrupted_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    bad = dict(ADULT_FILES)
    bad["train"] = ("adult.data.gz", "0" * 64, 32_561)
    monkeypatch.setattr(adult, "ADULT_FILES", bad)
    load_adult.cache_clear()
    try:
        with pytest.raises(DataError, match="checksum mismatch for adult.data.gz"):
            load_adult("train")
    finally:
        monkeypatch.undo()
        load_adult.cache_clear()


def test_test_split_has_its_rows_and_normalised_income() -> None:
    test = load_adult("test")
    assert test.n_rows == 16_281
    assert test.column("income").labels == ["<=50K", ">50K"]
    assert load_adult("all").n_rows == 32_561 + 16_281


def test_every_attribute_has_a_stable_documented_order() -> None:
    data = load_adult("train")
    assert data.attributes == ADULT_ATTRIBUTES
    assert data.column("occupation").labels == sorted(data.column("occupation").labels)
    education = data.column("education").labels
    assert education[0] == "Preschool" and education[-1] == "Doctorate" and len(education) == 16
    ages = data.column("age").labels
    assert ages[0] == "17" and ages[-1] == "90" and [int(a) for a in ages] == sorted(map(int, ages))
    assert data.column("age-bucket").labels[:2] == ["10-19", "20-29"]
    assert data.column("sex").labels == ["Female", "Male"]
    assert len(data.column("native-country").labels) == 41
    # one bucket per row, consistent with the per-age attribute
    bucket = data.column("age-bucket")
    assert bucket.indices.size == data.n_rows


def test_unknown_attribute_names_the_choices() -> None:
    with pytest.raises(UnknownAttribute, match="choose one of: occupation"):
        load_adult("train").column("occupatoin")
    with pytest.raises(ValueError, match="split must be"):
        load_adult("dev")  # type: ignore[arg-type]


def test_any_csv_with_a_header(tmp_path) -> None:
    path = tmp_path / "apps.csv"
    path.write_text("device,browser\n1,firefox\n2,chrome\n3,?\n4,chrome\n5,\n")
    data = load_csv(path)
    labels, indices = data.column("browser")
    assert labels == ["chrome", "firefox"]
    assert indices.tolist() == [1, 0, 0]
    kept = data.column("browser", missing="keep")
    assert kept.labels == ["chrome", "firefox", "?"] and kept.indices.tolist() == [1, 0, 2, 0, 2]
    with pytest.raises(UnknownAttribute, match="header has: device, browser"):
        load_csv(path, columns=["os"])
    (tmp_path / "ragged.csv").write_text("a,b\n1\n")
    with pytest.raises(DataError, match="line 2"):
        load_csv(tmp_path / "ragged.csv")
