"""A runtime's answers on the golden inputs, kept by the stage that computed them on its own
output file (trace: the TorchScript file; simplify: the ONNX file; openvino: the FP32 IR),
so that validate judges that very file on those very cases, at its own tolerance, without
running the runtime a second time. validate uses a record only where it names the runtime
validate would run, the file validate was given and the golden inputs it holds (sha256 of
each, sidecars included) and the library version installed now; otherwise, or where the
answers were too big to keep, it runs the runtime itself and says why. numpy and the
standard library only (onnx for an ONNX file's external data)."""

from __future__ import annotations

import importlib
import json
import zipfile
from dataclasses import dataclass, fields
from pathlib import Path

import numpy as np

from deploy.gates.references import Answers, Golden
from deploy.pipeline.graph.hashing import digest_file, digest_json
from deploy.runtimes.catalog import CATALOG, checking
from deploy.runtimes.plugin import Family

SCHEMA = 1
# A decoder's logits at every golden case can run to hundreds of MiB: validate recomputes those.
MAX_BYTES = 64 * 2**20
LIBRARY = {Family.ONNX: "onnxruntime", Family.OPENVINO: "openvino", Family.TORCHSCRIPT: "torch"}
_META = "__meta__"


@dataclass(frozen=True)
class KeptAnswers:
    runtime: str  # the catalog's name of what computed them (onnxruntime, openvino, torchscript)
    file_sha256: str  # the model file and its sidecars (weights) as the producer wrote them
    golden_sha256: str  # golden.npz, whose inputs they answer
    library: str  # e.g. "onnxruntime 1.23.2": another version may answer differently
    answers: Answers | None  # None: not kept (`why` says)
    why: str = ""

    def write(self, path: Path) -> None:
        meta = {k: v for k, v in vars(self).items() if k != "answers"} | {"schema": SCHEMA}
        arrays = {
            f"{case}.{name}": a for case, outs in (self.answers or {}).items() for name, a in outs.items()
        }
        with open(path, "wb") as fh:
            np.savez(fh, **arrays, **{_META: np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)})

    @classmethod
    def read(cls, path: Path) -> KeptAnswers | None:
        """None where the file is not a record of this schema (validate then recomputes)."""
        try:
            with np.load(path, allow_pickle=False) as data:
                meta = json.loads(data[_META].tobytes())
                arrays = {k: data[k] for k in data.files if k != _META}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile):  # truncated, not a record
            return None
        if not isinstance(meta, dict) or meta.pop("schema", None) != SCHEMA or set(meta) != FIELDS:
            return None
        answers: Answers = {}
        for key, array in arrays.items():
            case, name = key.split(".", 1)
            answers.setdefault(case, {})[name] = array
        return cls(**meta, answers=answers if not meta["why"] else None)


FIELDS = {f.name for f in fields(KeptAnswers)} - {"answers"}


def keep(path: Path, artifact: str, model: Path, golden: Path, answers: Answers) -> None:
    """The producer's side: its answers on `model`, its own output `artifact`, unless they
    are too big; recorded under the runtime validate runs on that artifact."""
    runtime = checking(artifact)
    size = sum(a.nbytes for outs in answers.values() for a in outs.values())
    why = (
        "" if size <= MAX_BYTES else f"its answers ({size / 2**20:.0f} MiB) are over {MAX_BYTES // 2**20} MiB"
    )
    digests = (file_sha256(model), file_sha256(golden))
    KeptAnswers(runtime, *digests, library(runtime), None if why else answers, why).write(path)


def not_kept(path: Path, artifact: str, why: str) -> None:
    """The producer made no answers on its output (e.g. simplify disabled): validate runs it."""
    KeptAnswers(checking(artifact), "", "", "", None, why).write(path)


def usable(path: Path | None, runtime: str, model: Path, golden_path: Path, golden: Golden) -> Answers | str:
    """The kept answers where they are what validate would compute; else why not."""
    kept = KeptAnswers.read(path) if path is not None else None
    if kept is None:
        return "no answers kept"
    if kept.answers is None:
        return kept.why
    if not library(runtime):
        return f"no answers are kept for {runtime}"
    for what, theirs, ours in (
        ("runtime", kept.runtime, runtime),
        ("library version", kept.library, library(runtime)),
        ("model file", kept.file_sha256, file_sha256(model)),
        ("golden inputs", kept.golden_sha256, file_sha256(golden_path)),
    ):
        if theirs != ours:
            return f"kept for another {what} ({theirs[:16]}, here {ours[:16]})"
    missing = [
        f"{c}.{o}" for c, case in golden.items() for o in case.outputs if o not in kept.answers.get(c, {})
    ]
    return kept.answers if not missing else f"kept without {', '.join(missing[:4])}"


def library(runtime: str) -> str:
    """What computes the runtime's answers, with its version ("" where none is named here:
    no record is kept for such a runtime, so none can match)."""
    module = LIBRARY.get(CATALOG[runtime].family)
    return f"{module} {importlib.import_module(module).__version__}" if module else ""


def file_sha256(path: Path) -> str:
    """The file and what it loads beside it (an IR's .bin, an ONNX file's external data, by
    the names it loads them by; the file's own name is the store's, not part of it)."""
    parts = [("", path), *((p.name, p) for p in _sidecars(path))]
    return digest_json([[name, digest_file(p)] for name, p in parts])


def _sidecars(path: Path) -> list[Path]:
    if path.suffix == ".xml":
        return [b for b in [path.with_suffix(".bin")] if b.exists()]
    if path.suffix == ".onnx":
        from deploy.modelio.onnx_files import data_files

        return [path.parent / name for name in data_files(path)]
    return []
