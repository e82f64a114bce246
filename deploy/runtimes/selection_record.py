"""selection.json, the select stage's versioned record, as typed records: the target the
decision holds for, per objective the pick and every candidate's verdict, and the models
that serve each pick. Here, beside bench.json's record, because stages other than select
read it (release keeps the target in its release records) and a stage imports no other
stage. Stdlib and the engine's record check only."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

from deploy.pipeline.graph.records import read_record

# selection.json's layout; bumped with the select stage's version (see pipeline/graph/records.py).
# 3: contended and implausible verdicts; `withheld` (why timings decided nothing) for `stable`.
SCHEMA = 4  # 4: generation metrics (ttft, tokens_per_s) decided at a `cell`; 2: the target, each decision's basis, served models and unverified candidates


class Verdict(str, Enum):
    SELECTED = "selected"
    SLOWER = "slower"
    REJECTED = "rejected"  # measured, but breaks a constraint
    UNVERIFIED = "unverified"  # the target never loaded / checked it: not a choice for it
    SKIPPED = "skipped"  # not measured at all
    # Measured, but no verdict may rest on the row: never compared (bench's flags).
    UNSTABLE = "unstable"  # its timing did not settle
    CONTENDED = "contended"  # other processes held the cores while it was timed
    IMPLAUSIBLE = "implausible"  # its numbers contradict the runtime's other rows (parked threads)


class Basis(str, Enum):
    """Which numbers a decision compares."""

    SERVED = "served"  # bench's end-to-end rows through the target server
    IN_PROCESS = "in-process"  # bench's rows of the runtime in its own process


@dataclass(frozen=True)
class Judged:
    """One candidate's line in selection.json."""

    runtime: str
    format: str
    precision: str
    verdict: Verdict
    value: float | None
    reason: str
    model: str = ""


@dataclass(frozen=True)
class Chosen:
    """One objective in selection.json: what won, at which batch, on which numbers, and
    every verdict; `model`, the Triton model to deploy (where the target is a server)."""

    name: str
    metric: str
    batch: int | None
    selected: str | None
    candidates: list[Judged]
    basis: str = Basis.IN_PROCESS.value
    model: str | None = None
    # Why the timings decided nothing ("every contender's timing is contended"): the pick
    # is then the FP32 reference, not a speed verdict. "": the timings decided.
    withheld: str = ""
    cell: str = ""  # a generation metric's row ("prompt 16, concurrency 1"); "": `batch` is


@dataclass(frozen=True)
class Selection:
    """selection.json: the target the decision holds for; per objective the pick and every
    verdict; the worst cosine to FP32 per reduced-precision runtime; and, where a repository
    was given, its models that serve each objective's pick."""

    objectives: list[Chosen]
    accuracy: dict[str, float]
    served: dict[str, list[str]] | None = None
    target: str = ""

    def to_json(self) -> dict[str, object]:
        data = {"schema": SCHEMA, **asdict(self)}
        return data if self.served is not None else {k: v for k, v in data.items() if k != "served"}

    @classmethod
    def read(cls, path: Path) -> Selection:
        return read_record(path, cls, SCHEMA, "a selection record")

    def objectives_of(self, model: str) -> list[str]:
        """The objectives `model` serves (the pick, or the served model chosen for it)."""
        served = self.served or {}
        return [o.name for o in self.objectives if o.model == model or model in served.get(o.name, [])]
