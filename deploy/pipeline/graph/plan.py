"""What would run, and why, derived from keys alone (nothing is executed or imported).

A stage whose inputs come from a stage that must rerun cannot know its own key
yet: it is `pending`, and will hit the cache anyway if the upstream output comes out
byte-identical (the exports are deterministic).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path

from deploy.pipeline.graph import keys
from deploy.pipeline.graph.contract import PARTIAL_KEY, SOURCE_ARTIFACT, ArtifactKind
from deploy.pipeline.graph.dag import Node
from deploy.pipeline.graph.keys import KeyParts
from deploy.pipeline.graph.project import Project
from deploy.pipeline.graph.source import source_digest
from deploy.pipeline.report.results import RunSummary
from deploy.pipeline.store.objects import Output, Store
from deploy.pipeline.store.remote import RemoteCache

NEVER_RAN = keys.NEVER_RAN


class Action(str, Enum):
    CACHED = "cached"
    RUN = "run"
    PENDING = "pending"  # reruns unless an upstream stage reproduces its earlier output
    SKIP = "skip"  # a remembered skip (e.g. no TensorRT), or an input whose producer skips
    REMOTE = "remote"  # a local miss the remote cache holds: downloaded, not run

    @property
    def text(self) -> str:
        return {
            "cached": "cached",
            "run": "will run",
            "pending": "runs if upstream output changes",
            "skip": "skipped",
            "remote": "from the remote cache",
        }[self.value]


@dataclass
class PlanRow:
    name: str
    action: Action
    key: str | None
    reasons: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, object]:
        return {"stage": self.name, "action": self.action.value, "key": self.key, "reasons": self.reasons}


def source_outputs(project: Project, store: Store) -> dict[str, Output]:
    digest = source_digest(project.config.model, store.memo)
    return {SOURCE_ARTIFACT: Output(ArtifactKind.FILE, digest, 0)}


def source_changed(node: Node, project: Project, store: Store, resolved: dict[str, Output]) -> str:
    """Why a stage's outputs may not be cached: the model's source (its file, checkpoint,
    module ...) changed while the stage ran, so they came from other code than its key
    names (they were cached under the old key, and replayed for the old file ever after)."""
    if not any(str(ref) == SOURCE_ARTIFACT for ref in node.bindings.values()):
        return ""
    if source_digest(project.config.model, store.memo) == resolved[SOURCE_ARTIFACT].digest:
        return ""
    model = project.config.model
    fields = [
        f"model.{f}" for f in ("file", "checkpoint", "torchscript", "golden_inputs") if getattr(model, f)
    ]
    return (
        f"the model's source ({', '.join(fields) or 'model.factory'}) changed while {node.name} ran: what it "
        "built may come from either version, so nothing was cached; rerun to build from the source as it is now"
    )


ABSENT = "absent"


def stage_parts(
    node: Node, project: Project, resolved: dict[str, Output], absent: frozenset[str] = frozenset()
) -> KeyParts | None:
    """The key material of a stage, or None while an input's digest is unknown. Optional
    inputs whose producer was skipped enter the key as absent."""
    digests = {}
    for name, ref in node.bindings.items():
        if str(ref) in resolved:
            digests[name] = resolved[str(ref)].digest
        elif name in node.spec.optional_inputs and str(ref) in absent:
            digests[name] = ABSENT
        else:
            return None
    return keys.components(node.spec, node.params, project.config, digests)


def why(
    node: Node, project: Project, store: Store, parts: KeyParts | None, resolved: dict[str, Output]
) -> list[str]:
    head = store.head(project.config.name).get(node.name)
    last = head.components if head is not None else None
    if parts is not None:
        return keys.reasons(last, parts) or ["same key as the last run, but no cache entry for it"]
    own = keys.components(node.spec, node.params, project.config, {})
    changed = [r for r in keys.reasons(last, own) if not r.startswith(("inputs.", "inputs:"))]
    waiting = [str(ref.stage) for ref in node.bindings.values() if str(ref) not in resolved]
    return [f"after {', '.join(dict.fromkeys(waiting))} runs", *changed]


@dataclass(frozen=True)
class Failure:
    key: str | None
    message: str
    finished: str

    def reason(self, key: str | None) -> str:
        same = " with this same key" if key is not None and key == self.key else ""
        first = self.message.strip().splitlines()[0] if self.message.strip() else "no message"
        return f"failed in the last run ({self.finished}){same}: {first}"


def last_failures(summary: Path, warn: Callable[[str], None] | None = None) -> dict[str, Failure]:
    """stage -> its failure in the run that wrote `summary`; {} when there is none. A
    summary that cannot be read (another release's schema, a damaged file) means no last
    run info: `warn` is told why, the plan goes on."""
    if not summary.is_file():
        return {}  # no run yet
    try:
        found = RunSummary.read(summary)
    except (OSError, ValueError) as exc:
        if warn is not None:
            warn(f"last run's failures unknown: {exc}")
        return {}
    return {s.stage: Failure(s.key, s.message, found.finished or "?") for s in found.failed()}


@dataclass
class _Walk:
    """What the plan knows while it walks the graph in execution order."""

    project: Project
    store: Store
    resolved: dict[str, Output]
    remote: RemoteCache | None = None  # asked on a local miss (the entry only, nothing downloaded)
    warn: Callable[[str], None] | None = None  # told when the last run's summary is unreadable
    absent: set[str] = field(default_factory=set)  # outputs of stages that will skip
    _entries: dict[str, list[KeyParts]] | None = None
    _failures: dict[str, Failure] | None = None

    def failure(self, stage: str) -> Failure | None:
        """How `stage` failed in the last run, if it did (the summary is read on first need)."""
        if self._failures is None:
            self._failures = last_failures(self.project.run_dir / "summary.json", self.warn)
        return self._failures.get(stage)

    def entries(self, stage: str) -> list[KeyParts]:
        """Key material of every cached entry of `stage` (read once, on first need)."""
        if self._entries is None:
            self._entries = {}
            for _, entry in self.store.entries():
                if entry is not None:
                    self._entries.setdefault(entry.stage, []).append(entry.components)
        return self._entries.get(stage, [])


def make_plan(
    project: Project,
    store: Store,
    remote: RemoteCache | None = None,
    warn: Callable[[str], None] | None = None,
) -> list[PlanRow]:
    """The same decisions `Runner` makes, from keys alone: cached (locally or in the
    remote cache), a remembered skip, certain to run, or pending on an upstream stage's
    new output. `warn` hears of a last run summary that cannot be read."""
    walk = _Walk(project, store, dict(source_outputs(project, store)), remote, warn)
    return [_row(node, walk) for node in project.graph.nodes]


def cached_outputs(project: Project, store: Store) -> dict[str, Output] | None:
    """Every stage's outputs when every stage is cached here (what a run would replay), else None."""
    walk = _Walk(project, store, dict(source_outputs(project, store)))
    rows = [_row(node, walk) for node in project.graph.nodes]
    return walk.resolved if all(r.action in (Action.CACHED, Action.SKIP) for r in rows) else None


def _row(node: Node, walk: _Walk) -> PlanRow:
    outputs = [f"{node.name}.{a.name}" for a in node.spec.outputs]
    missing = _absent_inputs(node, walk)
    if missing:
        walk.absent.update(outputs)
        return PlanRow(node.name, Action.SKIP, None, [f"inputs unavailable: {', '.join(missing)}"])
    parts = stage_parts(node, walk.project, walk.resolved, frozenset(walk.absent))
    if parts is None:
        return _unknown_key(node, walk)
    key = parts.key
    entry, problem = walk.store.lookup(key)
    remote = walk.remote.entry(key) if entry is None and walk.remote is not None else None
    if remote is not None and remote.skipped is None:
        walk.resolved.update({f"{node.name}.{n}": o for n, o in remote.outputs.items()})
        return PlanRow(node.name, Action.REMOTE, key, [f"built {remote.created} elsewhere"])
    entry = entry or remote
    if entry is not None and entry.skipped is not None:
        walk.absent.update(outputs)
        return PlanRow(node.name, Action.SKIP, key, [f"cached skip: {entry.skipped}"])
    if entry is not None:
        walk.resolved.update({f"{node.name}.{n}": o for n, o in entry.outputs.items()})
        partly = entry.metrics.get(PARTIAL_KEY)  # e.g. a runtime bench could not time: replayed as it was
        said = [f"cached partial: {partly} (--force {node.name} runs it again)"] if partly else []
        return PlanRow(node.name, Action.CACHED, key, said)
    extra = [f"cache entry is damaged: {problem}"] if problem else []
    return PlanRow(
        node.name,
        Action.RUN,
        key,
        _with_failure(node, walk, key, why(node, walk.project, walk.store, parts, walk.resolved)) + extra,
    )


def _with_failure(node: Node, walk: _Walk, key: str | None, reasons: list[str]) -> list[str]:
    """A stage that failed last time says so first ("never ran" would be untrue)."""
    failure = walk.failure(node.name)
    if failure is None:
        return reasons
    return [failure.reason(key), *(r for r in reasons if r != NEVER_RAN)]


def _absent_inputs(node: Node, walk: _Walk) -> list[str]:
    """Required inputs whose producer will skip: the runner skips this stage too."""
    return [
        str(ref)
        for name, ref in node.bindings.items()
        if str(ref) in walk.absent and name not in node.spec.optional_inputs
    ]


def _unknown_key(node: Node, walk: _Walk) -> PlanRow:
    """An upstream stage will run, so this key is not known yet. It can still hit only if
    some cached entry of this stage has the same own key material and agrees on every
    input already known; otherwise it certainly runs."""
    reasons = _with_failure(node, walk, None, why(node, walk.project, walk.store, None, walk.resolved))
    if any(_could_match(node, walk, found) for found in walk.entries(node.name)):
        return PlanRow(node.name, Action.PENDING, None, reasons)
    return PlanRow(
        node.name, Action.RUN, None, [*reasons, "no cached result for these parameters and known inputs"]
    )


def _could_match(node: Node, walk: _Walk, found: KeyParts) -> bool:
    own = keys.components(node.spec, node.params, walk.project.config, {})
    if found.own() != own.own():
        return False
    known = _known_inputs(node, walk)
    return all(found.inputs.get(name) == digest for name, digest in known.items())


def _known_inputs(node: Node, walk: _Walk) -> dict[str, str]:
    known = {}
    for name, ref in node.bindings.items():
        if str(ref) in walk.resolved:
            known[name] = walk.resolved[str(ref)].digest
        elif str(ref) in walk.absent:
            known[name] = ABSENT
    return known


def will_run(rows: list[PlanRow]) -> bool:
    """Whether `deploy run` would execute any stage (pending ones count: they may)."""
    return any(r.action in (Action.RUN, Action.PENDING) for r in rows)
