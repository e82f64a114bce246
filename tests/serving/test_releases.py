"""Released versions in a repository (deploy.serving.releases), on real files."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from deploy.pipeline.errors import EnvError
from deploy.serving import releases
from deploy.serving.releases import Agreement, Comparison, ReleaseRecord


def _version_source(tmp_path: Path, content: bytes) -> Path:
    source = tmp_path / f"src-{len(list(tmp_path.iterdir()))}"
    source.mkdir()
    (source / "model.onnx").write_bytes(content)
    (source / "sub").mkdir()
    (source / "sub" / "vocab.txt").write_text("a\nb\n")
    return source


def _record(source: Path, version: int, **extra: object) -> ReleaseRecord:
    return ReleaseRecord(
        "tiny", "tiny_onnx", version, releases.file_digests(source), "2026-11-25T20:00:00+00:00", **extra
    )


def test_a_placed_version_holds_its_files_and_record(tmp_path: Path) -> None:
    model = tmp_path / "repo" / "tiny_onnx"
    source = _version_source(tmp_path, b"weights-1")
    comparison = Comparison(0, "golden (8)", [Agreement("logits", 0.99991, 0.01, 1.0)], 1.02, 0.98)
    record = _record(source, 1, accuracy={"cosine to FP32": 0.9998}, comparison=comparison)
    placed = releases.place(model, source, record)
    assert placed == model / "1"
    assert (placed / "model.onnx").read_bytes() == b"weights-1"
    assert releases.file_digests(placed) == record.files
    (found,) = releases.releases(model)
    assert found.version == 1 and found.record == record
    assert [p.name for p in model.iterdir()] == ["1"]  # no staging left


def test_versions_count_up_and_ignore_what_triton_ignores(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    assert releases.next_version(model) == 1
    for name in ("1", "2", "0", "notes", "10"):
        (model / name).mkdir(parents=True)
    (model / "3").write_text("a file, not a version")
    assert releases.versions(model) == [1, 2, 10]
    assert releases.next_version(model) == 11


def test_an_existing_version_is_never_overwritten(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    first = _version_source(tmp_path, b"weights-1")
    releases.place(model, first, _record(first, 1))
    second = _version_source(tmp_path, b"weights-2")
    with pytest.raises(EnvError, match="exists already"):
        releases.place(model, second, _record(second, 1))
    assert (model / "1" / "model.onnx").read_bytes() == b"weights-1"
    assert sorted(p.name for p in model.iterdir()) == ["1"]


def test_files_that_differ_from_the_record_are_never_placed(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    source = _version_source(tmp_path, b"weights-1")
    record = _record(source, 1)
    (source / "model.onnx").write_bytes(b"changed after it was verified")
    with pytest.raises(EnvError, match="differ from the record"):
        releases.place(model, source, record)
    assert list(model.iterdir()) == []


def test_unchanged_finds_the_version_with_the_same_files(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    one, two = _version_source(tmp_path, b"w1"), _version_source(tmp_path, b"w2")
    releases.place(model, one, _record(one, 1))
    releases.place(model, two, _record(two, 2))
    assert releases.unchanged(model, releases.file_digests(one)) == 1
    assert releases.unchanged(model, releases.file_digests(two)) == 2
    three = _version_source(tmp_path, b"w3")
    assert releases.unchanged(model, releases.file_digests(three)) is None


def test_prune_keeps_the_newest_and_what_is_served(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    for version in range(1, 6):
        source = _version_source(tmp_path, f"w{version}".encode())
        releases.place(model, source, _record(source, version))
    assert releases.prune(model, keep=2, served={1}) == [2, 3]
    assert releases.versions(model) == [1, 4, 5]
    assert not list(model.glob(f"{releases.STAGING_PREFIX}*"))


def test_versions_without_a_readable_record_say_why(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    (model / "1").mkdir(parents=True)
    source = _version_source(tmp_path, b"w2")
    releases.place(model, source, _record(source, 2))
    record_path = model / "2" / releases.RECORD_FILE
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), "schema": 99}))
    old, newer = releases.releases(model)
    assert old.record is None and old.problem is not None and "before releases" in old.problem
    assert newer.record is None and newer.problem is not None and "schema 99" in newer.problem


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"version": "two"}, "version"),
        ({"files": None}, "files"),
        ({"comparison": {"against": 1}}, "comparison.inputs"),
    ],
)
def test_a_record_with_a_wrong_field_is_unreadable_naming_the_field(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    """Read field by field: a record of the right schema whose field is wrong or missing is
    listed as unreadable with that field's name, its values not taken in."""
    model = tmp_path / "tiny_onnx"
    source = _version_source(tmp_path, b"w1")
    releases.place(model, source, _record(source, 1))
    record_path = model / "1" / releases.RECORD_FILE
    record_path.write_text(json.dumps({**json.loads(record_path.read_text()), **change}))
    (found,) = releases.releases(model)
    assert found.record is None and found.problem is not None, found
    assert f"not a release record ({named}:" in found.problem, found.problem


def test_sweep_removes_what_a_killed_release_left(tmp_path: Path) -> None:
    model = tmp_path / "tiny_onnx"
    (model / f"{releases.STAGING_PREFIX}dead" / "sub").mkdir(parents=True)
    (model / "1").mkdir()
    releases.sweep(model)
    assert [p.name for p in model.iterdir()] == ["1"]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("", {3}),
        ("version_policy: { latest: { num_versions: 2 } }", {2, 3}),
        ("version_policy: { all: {} }", {1, 2, 3}),
        ("version_policy: { specific: { versions: [1, 7] } }", {1}),
    ],
)
def test_served_follows_the_version_policy(tmp_path: Path, policy: str, expected: set[int]) -> None:
    model = tmp_path / "tiny_onnx"
    for version in (1, 2, 3):
        (model / str(version)).mkdir(parents=True)
    (model / "config.pbtxt").write_text(f'name: "tiny_onnx"\nbackend: "onnxruntime"\n{policy}\n')
    assert releases.served(model) == expected


def _history(tmp_path: Path, rolled_back: set[int], count: int = 5) -> Path:
    model = tmp_path / "tiny_onnx"
    for version in range(1, count + 1):
        source = _version_source(tmp_path, f"w{version}".encode())
        note = f"2026-11-26T03:00:00+00:00 to v{version - 1}" if version in rolled_back else None
        releases.place(model, source, _record(source, version, rolled_back=note))
    return model


def test_a_rollback_goes_to_the_newest_version_never_rolled_back(tmp_path: Path) -> None:
    model = _history(tmp_path, rolled_back={2, 3})  # v2 and v3: the same retrain, rolled back twice
    assert releases.good(model) == [1, 4, 5]
    assert releases.before(model, 4) == 1 and releases.before(model, 5) == 4
    assert releases.before(model, 1) is None


def test_pruning_keeps_the_newest_versions_and_the_one_to_roll_back_to(tmp_path: Path) -> None:
    """v1 good, v2..v4 the same retrain rolled back, v5 released: keep 3 keeps the newest
    three, rolled back or not (`rollback --to` may name any of them), and v1, where a
    plain rollback from v5 goes."""
    model = _history(tmp_path, rolled_back={2, 3, 4})
    assert releases.prune(model, keep=3, served={5}) == [2]
    assert releases.versions(model) == [1, 3, 4, 5]


def test_pruning_never_removes_the_served_version_or_the_good_one_before_it(tmp_path: Path) -> None:
    model = _history(tmp_path, rolled_back=set(), count=6)
    assert releases.prune(model, keep=1, served={3}) == [1, 4, 5]
    assert releases.versions(model) == [2, 3, 6]  # 3 served, 2 before it, 6 the newest good


def test_a_schema_1_record_reads_with_one_direction_for_every_ratio(tmp_path: Path) -> None:
    source = _version_source(tmp_path, b"w1")
    data = json.loads(_record(source, 1).to_json())
    comparison = {"against": 1, "inputs": "golden", "agreement": [], "latency_ratio": 1.1}
    data |= {"schema": 1, "comparison": comparison | {"throughput_ratio": 0.8, "throughput_ci": [0.5, 1.0]}}
    record = ReleaseRecord.from_json(json.dumps(data))
    assert record.comparison is not None and record.comparison.per_item_ratio == 1.25  # time: 1 / 0.8
    assert record.comparison.per_item_ci == [1.0, 2.0]


def test_numbers_timed_on_a_busy_machine_say_so_in_the_headline_and_the_listing(tmp_path: Path) -> None:
    """A release's headline gave "latency 1.00x" and `deploy releases` a latency timed under
    load beside a quiet one, neither saying CONTENDED (which the record held)."""
    from deploy.releasing.release_list import summary
    from deploy.stages.release.output import headline
    from deploy.stages.release.release_report import ModelRelease, ReleaseAction

    busy = "CONTENDED: load 6.0 on 2 cores, others 88 % of the cores"
    compared = Comparison(
        1, "golden (8)", [Agreement("logits", 0.9999, 0.01, 1.0)], 1.0, 1.0, threads=1, machine=busy
    )
    said = headline([ModelRelease("tiny_onnx", ReleaseAction.RELEASED, 2, 1, compared)])
    assert said.endswith(
        f"latency 1.00x (on golden (8)), timed {busy} (versions interleaved: the ratio, not the times)"
    )
    quiet = replace(compared, machine="quiet: load 0.2 on 2 cores, others 1 % of the cores")
    assert "timed" not in headline([ModelRelease("tiny_onnx", ReleaseAction.RELEASED, 2, 1, quiet)])
    source = _version_source(tmp_path, b"weights-2")
    record = _record(source, 2, latency_ms=32.6, throughput=30.1, timing_flag=busy)
    row = summary(releases.Release(2, record))
    assert row["latency_ms"] == 32.6 and row["note"] == f"latency_ms and throughput were timed {busy}"
    assert summary(releases.Release(1, _record(source, 1, latency_ms=0.63)))["note"] == ""
