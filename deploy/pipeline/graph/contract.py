"""The stage contract: a declared spec plus a run function.

Everything the cache key needs is declared here, so the key is derivable without
running (or even importing the heavy libraries of) the stage.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from deploy.domain.issues import Issue
from deploy.pipeline.graph.facts import Provides
from deploy.pipeline.graph.hashing import digest_file
from deploy.spec.config import DeployConfig

# The artifact every pipeline starts from: the model as the config declares it.
SOURCE_ARTIFACT = "model"
# The metrics key under which a stage's tables for the run report are kept.
REPORT_KEY = "report"
# The metrics key of a stage that passed with parts of its work skipped.
PARTIAL_KEY = "partial"
PROVISIONAL_KEY = "provisional"  # used by this run, not kept in the cache: the next run does it again
UNCHECKED_KEY = "unchecked"  # {model: why}: what a verifier passed without checking
# The metrics key of a stage's one-line result, shown beside it in the console and report.
HEADLINE_KEY = "headline"
CONCLUSION_KEY = "conclusion"
CONCLUSION_FACTS_KEY = "conclusion_facts"  # [label, value] pairs a later stage adds to it
Cell = str | int | float | None  # one value of a report table: JSON, shown as text

# What a stage records for the run summary and report: JSON numbers, strings and tables of
# its own choosing (`object`, not Any: a reader narrows what it uses).
Metrics = dict[str, object]


class ArtifactKind(str, Enum):
    FILE = "file"
    TREE = "tree"  # a directory, stored as a manifest of file digests


class Section(str, Enum):
    """Parts of the shared config a stage may read; each one it reads enters its key."""

    NAME = "name"
    MODEL = "model"
    SHAPES = "shapes"

    def extract(self, config: DeployConfig) -> Any:
        if self is Section.NAME:
            return config.name
        if self is Section.MODEL:
            # Paths are left out on purpose: the model's identity (digests) is an input.
            return config.model.model_dump(
                mode="json",
                include={
                    "kwargs",
                    "seed",
                    "callable",
                    "factory",
                    "inputs_by",
                    "forward_kwargs",
                    "detections",
                },
            ) | _decoder(config)
        return config.model_dump(mode="json", include={"inputs", "outputs", "batch_dim"}) | _decoder(config)


def _decoder(config: DeployConfig) -> dict[str, Any]:
    """A decoder's declaration in the sections that read the model's tensors; nothing for
    other models (their keys stay what they were)."""
    found = config.model.decoder
    if found is None:
        return {}
    # The tokenizer's content, not only its path: an edited vocabulary changes the service.
    tokenizer = {"tokenizer_digest": digest_file(found.tokenizer)} if found.tokenizer is not None else {}
    return {"decoder": found.model_dump(mode="json"), **tokenizer}


class Phase(IntEnum):
    """Where a stage sits in a pipeline, used only to order stages that the artifact
    graph leaves independent (and transforms of the same artifact): gates run before
    packaging, a server check before measurements. Never a dependency by itself."""

    CONVERT = 1
    ANALYZE = 2
    VERIFY = 3
    PACKAGE = 4
    SERVE = 5
    MEASURE = 6
    RELEASE = 7  # publishes what every earlier stage verified


class Publish(str, Enum):
    """Where a tree artifact is copied after a run, besides the cache."""

    REPOSITORY = "repository"


@dataclass(frozen=True)
class Artifact:
    name: str
    kind: ArtifactKind = ArtifactKind.FILE
    filename: str = ""  # file name inside the stage's work dir (FILE kind)
    publish: Publish | None = None
    # TREE kind: the file inside the directory that writers and readers are handed (an
    # ONNX model, whose weights file lies beside it, named relative to it).
    entry: str = ""

    @property
    def relpath(self) -> str:
        return self.filename or self.name

    def within(self, root: Path) -> Path:
        """What a stage is handed for this artifact stored at `root`."""
        return root / self.entry if self.entry else root


@dataclass
class StageContext:
    """What a running stage sees: its resolved inputs, a place for outputs, a log."""

    config: DeployConfig
    inputs: Mapping[str, Path]
    workdir: Path
    outputs: Mapping[str, Artifact]
    log: logging.Logger
    metrics: Metrics = field(default_factory=dict)
    # A per-stage directory in the cache that outlives runs, for things that speed a
    # stage up without being its result (TensorRT's timing cache). Not in any key.
    persistent: Path | None = None
    # Where progress goes (pipeline/process/progress.py): the runner's reporter, throttled.
    on_progress: Callable[[int, int | None, str], None] | None = None

    def progress(self, done: int, total: int | None = None, what: str = "") -> None:
        """Long work as it goes (done of total steps, the step under way): a bar on a
        terminal, a line every few seconds in CI. Cheap: throttled where it is sent."""
        if self.on_progress is not None:
            self.on_progress(done, total, what)

    def input(self, name: str) -> Path:
        return self.inputs[name]

    def output(self, name: str) -> Path:
        artifact = self.outputs[name]
        path = artifact.within(self.workdir / artifact.relpath)
        if artifact.entry:
            path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def record(self, key: str, value: Any) -> None:
        """Adds a JSON-serialisable number or table to the run summary."""
        self.metrics[key] = value

    def headline(self, text: str) -> None:
        """The stage's result in one line (e.g. "opset 17, ORT vs eager: max|Δ| 6e-08"),
        shown beside it in the console, the summary and the run report."""
        self.metrics[HEADLINE_KEY] = text

    def partial(self, note: str) -> None:
        """The stage passed, but only partly (e.g. "passed 2, skipped 3 (no onnxruntime
        backend)"): shown as `partial` in the console, JUnit output and run report."""
        self.metrics[PARTIAL_KEY] = note

    def provisional(self, why: str) -> None:
        """The result serves this run but is not kept: the next run does the stage again
        (timings taken on a busy machine, a runtime that failed: replayed, they would stand
        for ever, and `--wait-quiet` would never measure again)."""
        self.metrics[PROVISIONAL_KEY] = why

    def unchecked(self, models: dict[str, str]) -> None:
        """A verifier that passed without checking these models (model -> why: its server
        could not load them): a publish it verifies names them unverified, in the manifest too."""
        self.metrics[UNCHECKED_KEY] = dict(sorted(models.items()))

    def conclusion(self, conclusion: Conclusion) -> None:
        """The run's conclusion (select's: what to deploy, for which target, how fast and
        how accurate against what): the run report opens with it."""
        self.metrics[CONCLUSION_KEY] = asdict(conclusion)

    def conclusion_fact(self, label: str, value: str) -> None:
        """A line the run report's conclusion gets from this stage (release: the
        comparison with the deployed version)."""
        facts = self.metrics.get(CONCLUSION_FACTS_KEY)
        self.metrics[CONCLUSION_FACTS_KEY] = [*(facts if isinstance(facts, list) else []), [label, value]]

    def report_table(
        self,
        title: str,
        columns: list[str],
        rows: Sequence[Sequence[Cell]],
        note: str = "",
        console: bool = False,
    ) -> None:
        """A table for the run report (pipeline/report/html.py renders every stage's tables,
        and embeds its .png outputs, without knowing the stage); `console`: also printed
        after the run's results (a decision the user should see without opening the report)."""
        table = ReportTable(title, columns, [list(r) for r in rows], note, console)
        self.metrics[REPORT_KEY] = [*report_json(self.metrics), asdict(table)]


@dataclass(frozen=True)
class ReportTable:
    """A table a stage adds to the run report (and, with `console`, to the console)."""

    title: str
    columns: list[str]
    rows: list[list[Cell]]
    note: str = ""
    console: bool = False


@dataclass(frozen=True)
class Conclusion:
    """What the report leads with: the decision, the target it holds for and the server
    that verified it, the numbers that justify it (label -> value, e.g. "speed vs FP32"
    -> "2.9x: 14.3 vs 41.6 ms"), and the stage whose chart comes next."""

    decision: str
    target: str
    facts: list[tuple[str, str]]
    chart_stage: str = ""

    @classmethod
    def of(cls, metrics: Mapping[str, object]) -> Conclusion | None:
        found = metrics.get(CONCLUSION_KEY)
        if not isinstance(found, dict):
            return None
        facts = [(str(k), str(v)) for k, v in found.get("facts", [])]
        return cls(
            str(found.get("decision", "")),
            str(found.get("target", "")),
            facts,
            str(found.get("chart_stage", "")),
        )


def report_json(metrics: Mapping[str, object]) -> list[object]:
    found = metrics.get(REPORT_KEY, [])
    return list(found) if isinstance(found, list) else []


def report_tables(metrics: Mapping[str, object]) -> list[ReportTable]:
    """The tables a stage recorded, read back from its metrics (or the run summary)."""
    return [ReportTable(**t) for t in report_json(metrics) if isinstance(t, dict)]


class RunSettings(BaseModel):
    """How a stage's code is run, not what it computes: given in the stage's section of
    the YAML beside its params (`export: {opset: 18, timeout_s: 600}`), never in its key."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    timeout_s: float = Field(
        3600.0,
        gt=0,
        description="Wall-clock limit of the stage's run; past it the stage is stopped and fails (exit 6). "
        "The default differs per stage (each stage's section says it).",
    )
    memory_mb: int | None = Field(
        None,
        ge=64,
        description="Resident-memory limit of the stage's process and its children; past it the stage is "
        "stopped and fails (exit 6). null: none (the kernel's out-of-memory killer still ends it: exit 5).",
    )
    isolate: bool = Field(
        True,
        description="Run the stage in a child process, so a crash (segfault, abort, out-of-memory kill) or a "
        "hang fails the stage, not the run. false: in deploy's own process (for a debugger); then timeout_s "
        "and memory_mb are not enforced.",
    )


RUN_SETTINGS = tuple(RunSettings.model_fields)


def split_section(section: object) -> tuple[object, dict[str, object]]:
    """A stage's section: its params, and the run settings (RUN_SETTINGS) beside them."""
    if not isinstance(section, dict):
        return section or {}, {}
    params = {k: v for k, v in section.items() if k not in RUN_SETTINGS}
    return params, {k: v for k, v in section.items() if k in RUN_SETTINGS}


P = TypeVar("P", bound=BaseModel)


@dataclass(frozen=True)
class StageSpec(Generic[P]):
    """Generic over the stage's params model: `run`, `check`, `identity` and
    `select_inputs` are type-checked against it."""

    name: str
    version: int
    params: type[P]
    inputs: tuple[str, ...]  # every artifact it may read (select_inputs picks among them)
    outputs: tuple[Artifact, ...]
    run: Callable[[StageContext, P], None]
    uses: frozenset[Section] = frozenset()
    # Distributions whose versions enter the key (read from metadata, never imported).
    env: tuple[str, ...] = ()
    # What else the output depends on that no library version says: a server binary's
    # digest, a docker image, a GPU's compute capability. Must be cheap: no heavy imports.
    identity: Callable[[P], Mapping[str, object]] | None = None
    # State outside the cache the output depends on, read cheaply from the config's places
    # (what a repository holds now: the release compares with it). Enters the key as `env`.
    observes: Callable[[P, DeployConfig], Mapping[str, object]] | None = None
    # Cross-stage checks against the shared config, run before anything executes.
    check: Callable[[P, DeployConfig], list[Issue]] | None = None
    # What this machine's install cannot do of these params (a runtime on a device it
    # lacks), answered cheaply: validate, plan and doctor say it before a run, and the
    # stage skips that part with the same reason. Not errors: the rest still runs.
    host: Callable[[P, DeployConfig], list[Issue]] | None = None
    # The inputs this stage reads with these params, when that depends on them (e.g.
    # triton_config reads onnx_int8 only when asked to serve INT8); default: `inputs`.
    select_inputs: Callable[[P], tuple[str, ...]] | None = None
    # Inputs the stage can do without when their producer was skipped (e.g. no engine
    # without TensorRT): the key records them as absent and the stage decides.
    optional_inputs: frozenset[str] = frozenset()
    # Inputs read only when some stage of the config makes them (e.g. select reads the
    # INT8 accuracy report where quantize is configured): otherwise left unbound, not an error.
    if_configured: frozenset[str] = frozenset()
    # Where the outputs marked `publish` are copied with this config, besides the cache:
    # local directories and object-storage URLs (s3://…). Default: the place the marker
    # names (config.repository). Not in the key: publishing changes no artifact.
    publishes: Callable[[P, DeployConfig], tuple[Path | str, ...]] | None = None
    description: str = ""
    phase: Phase = Phase.CONVERT
    # Added with its default params to a config one of whose stages reads an artifact of
    # the same name that no configured stage makes (the golden references: every
    # converting stage needs them, no config should have to ask for them).
    implied: bool = False
    # The default of the stage's `timeout_s` run setting (RunSettings).
    timeout_s: float = 3600.0
    # Facts its params state for other stages (pipeline/graph/facts.py), e.g. the publish policy.
    provides: tuple[Provides[P, Any], ...] = ()
    # Artifacts this stage verifies (smoke: the repository, on a real server): one marked
    # for publishing is published only once every configured verifier passed on it
    # (pipeline/publish/verification.py).
    verifies: frozenset[str] = frozenset()

    def params_from(self, section: object, base_dir: Path | None) -> P:
        """Its params from its YAML section (run settings left out), validated."""
        params, _ = split_section(section)
        return self.params.model_validate(params, context={"base_dir": base_dir})

    def destinations(self, params: P, config: DeployConfig, artifact: Artifact) -> tuple[Path | str, ...]:
        """Where a published output goes with these params and config (none if unmarked)."""
        if artifact.publish is None:
            return ()
        if self.publishes is None:
            return (getattr(config, artifact.publish.value),)
        return self.publishes(params, config)

    def inputs_for(self, params: P) -> tuple[str, ...]:
        return self.select_inputs(params) if self.select_inputs is not None else self.inputs

    def output(self, name: str) -> Artifact:
        return next(a for a in self.outputs if a.name == name)
