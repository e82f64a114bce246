"""Released versions in a Triton repository: each release of a model is a numeric
version directory beside the previous ones (Triton's own layout), holding the model's
files and a release record (`deploy-release.json`) that says what it is and how it was
verified. Triton reads only the numeric directories' model files; the record travels with
its version and goes when the version is pruned.

Placing a version is one rename of a complete, verified directory staged beside it (same
file system): a server polling the repository sees the version whole or not at all, and a
failure leaves the repository as it was. A version is good until it is rolled back (its
record says so). Pruning keeps the newest `keep` good versions, the served one and the
newest good one before it (what a plain rollback returns to).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from deploy.pipeline.errors import EnvError
from deploy.pipeline.graph.hashing import atomic_write_text, digest_file
from deploy.pipeline.graph.records import SchemaMismatch, typed
from deploy.pipeline.process import faults

RECORD_FILE = "deploy-release.json"
CONFIG_FILE = "config.pbtxt"
RECORD_SCHEMA = 2  # 2: per-item time ratio (new / deployed), one direction for every ratio
STAGING_PREFIX = ".staging-release-"
BYTECODE = "__pycache__"


class StaleRelease(Exception):
    """A release record of another schema: listed as unreadable, never guessed at."""


@dataclass(frozen=True)
class Agreement:
    """One output of the release against the version it replaces, on the same inputs."""

    output: str
    cosine: float  # the worst sample's
    max_abs: float
    top1: float | None = None  # fraction of samples with the same argmax (classifiers)
    # The sample whose size moved most: its norm, new / deployed (what cosine cannot see: a
    # checkpoint answering twice as large agrees by cosine and argmax); None in older records.
    scale: float | None = None


@dataclass(frozen=True)
class Comparison:
    """The release side by side with the version it replaces."""

    against: int  # the version compared with
    inputs: str  # what it was measured on, e.g. "golden (8) + held-out (64), real data"
    agreement: list[Agreement]
    # Every ratio is time, new / deployed: above 1 is slower (the record, the table and the
    # report say the same number).
    latency_ratio: float | None = None  # median time per request, alternating in one process
    per_item_ratio: float | None = None  # time per item at the largest batch
    latency_ci: list[float] | None = None  # latency_ratio's 95 % confidence interval [low, high]
    per_item_ci: list[float] | None = None  # per_item_ratio's
    rounds: int = 0  # interleaved timing rounds behind the ratios (the more the machine's noise needed)
    # The machine while both were timed (runtimes.contention): intra-op threads given to both
    # sides (the one threads policy) and e.g. "CONTENDED: load 6.1 on 2 cores, others 58 % of
    # the cores". Interleaving keeps the ratio fair under load; the interval says what it cost.
    threads: int | None = None
    machine: str = ""
    # A decoder (config model.decoder) is compared by what it generates: its one agreement
    # is the next token's (teacher forced), latency is time to the first token (the
    # prefill step) and per item is one decode step (the inter-token latency).
    decoder: bool = False


@dataclass(frozen=True)
class ReleaseRecord:
    pipeline: str
    model: str
    version: int
    files: dict[str, str]  # path inside the version dir -> sha256: what "unchanged" compares
    made: str  # UTC, ISO
    model_config_sha256: str = ""  # the model's config.pbtxt when released (also compared)
    config_sha256: str = ""
    checkpoint_sha256: str = (
        ""  # the model's identity: its source (files, factory, kwargs) and golden answers
    )
    inputs: str = ""  # what the release was checked on (golden given or random, held-out data)
    accuracy: dict[str, float] = field(default_factory=dict)  # e.g. {"cosine to FP32": 0.9998}
    latency_ms: float | None = None
    throughput: float | None = None
    timing_flag: str = ""  # why latency_ms / throughput bear no verdict (CONTENDED: ..., implausible: ...)
    target: str = ""  # what the numbers were measured on (select's target)
    selected_for: list[str] = field(default_factory=list)  # the objectives select chose it for
    server: str = ""  # the server that verified it
    build_url: str | None = None  # the CI build that released it ($BUILD_URL)
    report: str | None = None  # the run report
    comparison: Comparison | None = None
    accepted_regression: str | None = None  # the reason a refused release was accepted
    rolled_back: str | None = None  # "2026-11-25T21:30:00+00:00 to v1": no longer served, on purpose
    schema: int = RECORD_SCHEMA

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @property
    def good(self) -> bool:
        """Not rolled back: what a rollback may return to and pruning keeps."""
        return self.rolled_back is None

    @classmethod
    def from_json(cls, text: str) -> ReleaseRecord:
        """The record, checked field by field: a wrong or missing field is StaleRelease
        naming it (the listing shows the version as unreadable, never guesses)."""
        data = json.loads(text)
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema not in (1, RECORD_SCHEMA):
            raise StaleRelease(f"release record schema {schema!r}")
        if isinstance(data.get("comparison"), dict):
            _per_item(data["comparison"])
        try:
            record: ReleaseRecord = typed(cls, {**data, "schema": RECORD_SCHEMA}, "not a release record")
        except SchemaMismatch as exc:
            raise StaleRelease(str(exc)) from None
        return record


def _per_item(comparison: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 kept throughput new / old: its inverse is the time per item, and so are
    its interval's ends, swapped (in place)."""
    ratio, ci = comparison.pop("throughput_ratio", None), comparison.pop("throughput_ci", None)
    if ratio:
        comparison["per_item_ratio"] = round(1 / ratio, 4)
        comparison["per_item_ci"] = [round(1 / ci[1], 4), round(1 / ci[0], 4)] if ci else None
    return comparison


@dataclass(frozen=True)
class Release:
    """A version found in a model directory, with its record where it has one."""

    version: int
    record: ReleaseRecord | None
    problem: str | None = None  # why the record could not be read


def versions(model_dir: Path) -> list[int]:
    """The model's numeric version directories, oldest first (what Triton reads)."""
    if not model_dir.is_dir():
        return []
    found = [int(p.name) for p in model_dir.iterdir() if p.is_dir() and p.name.isdigit() and int(p.name) > 0]
    return sorted(found)


def releases(model_dir: Path) -> list[Release]:
    return [_release(model_dir / str(v), v) for v in versions(model_dir)]


def _release(version_dir: Path, version: int) -> Release:
    path = version_dir / RECORD_FILE
    if not path.is_file():
        return Release(version, None, "no release record (published before releases)")
    try:
        return Release(version, ReleaseRecord.from_json(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError, StaleRelease) as exc:
        return Release(version, None, f"unreadable release record: {exc}")


def next_version(model_dir: Path) -> int:
    found = versions(model_dir)
    return found[-1] + 1 if found else 1


def matching(model_dir: Path, files: Mapping[str, str], model_config_sha256: str = "") -> Release | None:
    """The newest version whose record holds exactly these files (by digest) and model
    config, if any."""
    for release in reversed(releases(model_dir)):
        record = release.record
        if (
            record is not None
            and record.files == dict(files)
            and record.model_config_sha256 == model_config_sha256
        ):
            return release
    return None


def unchanged(model_dir: Path, files: Mapping[str, str], model_config_sha256: str = "") -> int | None:
    found = matching(model_dir, files, model_config_sha256)
    return None if found is None else found.version


def stamp(model_dir: Path, pipeline: str, placed: Iterable[int] = ()) -> None:
    """The model dir's publish stamp: the files the transactions placed, never whatever
    else lies there (a stray temp file, a copied version): config.pbtxt, each version the
    last stamp listed or this transaction `placed` (its record's files and the record),
    and the last stamp's other files that remain. What `deploy serve` and smoke check a
    repository against, and what the foreign check reads (serving/foreign.py)."""
    from deploy.pipeline.publish.tree import STAMP, Stamp

    listed = [rel for rel in _stamped(model_dir) if not _in_version(rel)]
    kept = {int(rel.split("/")[0]) for rel in _stamped(model_dir) if _in_version(rel)}
    for version in sorted((kept | set(placed)) & set(versions(model_dir))):
        listed += [f"{version}/{rel}" for rel in _version_files(model_dir, version)]
    files = {
        rel: (digest_file(model_dir / rel), (model_dir / rel).stat().st_size)
        for rel in _present(model_dir, listed)
    }
    atomic_write_text(model_dir / STAMP, Stamp(pipeline, files).to_json())


def _stamped(model_dir: Path) -> list[str]:
    from deploy.pipeline.publish.tree import STAMP, Stamp

    try:
        found = Stamp.from_json((model_dir / STAMP).read_bytes())
    except OSError:
        found = None
    return [*(found.files if found is not None else ()), CONFIG_FILE]


def _in_version(rel: str) -> bool:
    top = rel.split("/")[0]
    return "/" in rel and top.isdigit() and int(top) > 0


def _version_files(model_dir: Path, version: int) -> list[str]:
    """A released version's files as its record lists them (and the record); an older
    publish's (no record) as the last stamp did."""
    record = _release(model_dir / str(version), version).record
    if record is not None and record.version == version:
        return [*sorted(record.files), RECORD_FILE]
    return [rel.split("/", 1)[1] for rel in _stamped(model_dir) if rel.startswith(f"{version}/")]


def _present(model_dir: Path, listed: Iterable[str]) -> list[str]:
    return sorted({rel for rel in listed if (model_dir / rel).is_file()})


def serve_only(model_dir: Path, version: int) -> None:
    """Points the model's version_policy at `version` alone (config.pbtxt, replaced whole)."""
    atomic_write_text(model_dir / CONFIG_FILE, serving_only(model_dir, version))


def serving_only(model_dir: Path, version: int) -> str:
    """The model's config.pbtxt with its version_policy pointed at `version` alone."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    config = pb.ModelConfig()
    text_format.Parse((model_dir / CONFIG_FILE).read_text(), config)
    config.version_policy.Clear()
    config.version_policy.specific.versions.append(version)
    return str(text_format.MessageToString(config))


def with_policy_of(current: Path, text: str) -> str:
    """The config `text`, with the version_policy of the config at `current` (as it is
    when only the policy differs, or when `current` has none)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    if not current.is_file():
        return text
    now, wanted = pb.ModelConfig(), pb.ModelConfig()
    text_format.Parse(current.read_text(), now)
    text_format.Parse(text, wanted)
    if now.version_policy == wanted.version_policy:
        return text
    wanted.version_policy.CopyFrom(now.version_policy)
    if not now.HasField("version_policy"):
        wanted.ClearField("version_policy")
    return text_format.MessageToString(wanted)


def mark_rolled_back(model_dir: Path, version: int, note: str | None) -> None:
    """Keeps in the version's record that it was rolled back (a release refuses to bring
    the same files back unless accepted); None: good again (served again by a rollback)."""
    found = _release(model_dir / str(version), version).record
    if found is not None and found.rolled_back != note:
        atomic_write_text(model_dir / str(version) / RECORD_FILE, replace(found, rolled_back=note).to_json())


def file_digests(version_dir: Path) -> dict[str, str]:
    """path inside a version dir -> sha256, the record left out."""
    return {
        str(p.relative_to(version_dir)): digest_file(p)
        for p in sorted(version_dir.rglob("*"))
        if p.is_file() and p.name != RECORD_FILE
    }


def restore(version_dir: Path, source: Path, files: Mapping[str, str]) -> list[str]:
    """Puts back, from `source` (a version dir holding exactly `files`), each file of a
    released version that is missing or changed since (one rename each); the files restored."""
    found = file_digests(version_dir)
    changed = [rel for rel, digest in files.items() if found.get(rel) != digest]
    from deploy.pipeline.store.leftovers import repairing

    for rel in changed:
        with repairing(version_dir / rel) as staged:
            shutil.copyfile(source / rel, staged)
    return changed


def staging(model_dir: Path) -> Path:
    """A staging or set-aside dir beside the versions, named with this process's pid: the
    next command removes it if this process dies first (pipeline/store/leftovers.py)."""
    return model_dir / f"{STAGING_PREFIX}{os.getpid()}-{uuid.uuid4().hex}"


def place(model_dir: Path, source: Path, record: ReleaseRecord) -> Path:
    """Copies the version directory `source` in as `model_dir/<record.version>`, its
    record inside: staged beside it and verified against the record's digests, then
    renamed into place. Returns the version directory."""
    target = model_dir / str(record.version)
    if target.exists():
        raise EnvError(f"{target} exists already: another release placed version {record.version}")
    model_dir.mkdir(parents=True, exist_ok=True)
    staged = staging(model_dir)
    try:
        shutil.copytree(source, staged, ignore=shutil.ignore_patterns(RECORD_FILE))
        found = file_digests(staged)
        if found != record.files:
            raise EnvError(
                f"release {record.version} of {model_dir.name}: the copied files differ from the record's"
            )
        atomic_write_text(staged / RECORD_FILE, record.to_json())
        faults.rename(staged, target)  # fails, rather than merges, if the target appeared meanwhile
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    return target


def good(model_dir: Path) -> list[int]:
    """The versions not rolled back, oldest first (one without a readable record counts:
    nothing says it was rolled back)."""
    return [r.version for r in releases(model_dir) if r.record is None or r.record.good]


def before(model_dir: Path, version: int) -> int | None:
    """The newest good version older than `version`: where a plain rollback goes."""
    return max((v for v in good(model_dir) if v < version), default=None)


def prune(model_dir: Path, keep: int, served: set[int] | None = None) -> list[int]:
    """Removes every version but the newest `keep` (rolled back or not: `rollback --to`
    may still name any of them), those in `served`, and the newest good one before the
    newest served (where a plain rollback goes); returns those removed. Each goes by a
    rename out of the numeric namespace first, so a server never sees a half-deleted one."""
    found = versions(model_dir)
    kept = set(served or ()) | set(found[-keep:])
    fallback = before(model_dir, max(served or found[-1:] or [0]))
    removed = []
    for version in (v for v in found if v not in kept and v != fallback):
        aside = staging(model_dir)
        faults.rename(model_dir / str(version), aside)
        shutil.rmtree(aside, ignore_errors=True)
        removed.append(version)
    return removed


def served(model_dir: Path) -> set[int]:
    """The versions a server reading this model dir serves, by its config.pbtxt's
    `version_policy` (Triton's default: the newest one)."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2 as pb

    found = versions(model_dir)
    if not (model_dir / "config.pbtxt").is_file():
        return set(found[-1:])
    config = pb.ModelConfig()
    text_format.Parse((model_dir / "config.pbtxt").read_text(), config)
    policy = config.version_policy
    if policy.HasField("all"):
        return set(found)
    if policy.HasField("specific"):
        return set(policy.specific.versions) & set(found)
    newest = policy.latest.num_versions if policy.HasField("latest") else 1
    return set(found[-newest:]) if found else set()


def sweep(model_dir: Path) -> None:
    """Staging left behind by a release or rollback whose process died (a live one's stays)."""
    from deploy.pipeline.store.leftovers import owner
    from deploy.pipeline.store.locks import alive

    if model_dir.is_dir():
        for leftover in model_dir.glob(f"{STAGING_PREFIX}*"):
            pid = owner(leftover.name)
            if pid is None or not alive(pid):
                shutil.rmtree(leftover, ignore_errors=True)
