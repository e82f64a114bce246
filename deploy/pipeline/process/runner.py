"""Runs the stage graph in order: each stage is served from the cache or executed.

A stage runs in a fresh work dir under the store's tmp/; only when it returns and all its
declared outputs exist are they moved into the store and the action entry written.
Anything else (failure, Ctrl-C, crash) leaves the cache as it was."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

from deploy.pipeline.errors import DiskFull, ExitCode, SelectionError, StageError, disk_full
from deploy.pipeline.graph.choice import StageSelection, outside_message, resume_command
from deploy.pipeline.graph.contract import PROVISIONAL_KEY, Phase
from deploy.pipeline.graph.dag import Node
from deploy.pipeline.graph.keys import KeyParts
from deploy.pipeline.graph.plan import Action, make_plan, source_changed, source_outputs, stage_parts, why
from deploy.pipeline.graph.project import Project
from deploy.pipeline.graph.registry import stage_module
from deploy.pipeline.process import faults, stopping
from deploy.pipeline.process.descriptors import enough_open_files
from deploy.pipeline.process.execute import Job, execute
from deploy.pipeline.process.isolation import Limits, run_isolated
from deploy.pipeline.process.progress import Throttled
from deploy.pipeline.process.run_publishing import RunPublishing
from deploy.pipeline.publish.verification import PASSED
from deploy.pipeline.report.reporter import Reporter
from deploy.pipeline.report.results import RunStatus as RunStatus
from deploy.pipeline.report.results import RunSummary, first_failed
from deploy.pipeline.report.results import StageResult as StageResult
from deploy.pipeline.report.results import Status as Status
from deploy.pipeline.report.summary import RunOf, write_summary
from deploy.pipeline.store import history, locks
from deploy.pipeline.store.objects import Entry, Output, Store
from deploy.pipeline.store.remote import RemoteCache
from deploy.pipeline.store.writable import UMASK, full_of, present, require_writable

REPORT_FILE = history.REPORT_FILE


class Runner:
    def __init__(
        self,
        project: Project,
        store: Store,
        reporter: Reporter,
        selection: StageSelection,
        remote: RemoteCache | None = None,
    ) -> None:
        self.project = project
        self.store = store
        self.remote = remote
        if remote is not None:
            remote.step = Throttled("remote cache", reporter.progress)
        self.reporter = reporter
        self.selection = selection
        self.resolved: dict[str, Output] = {}
        self.absent: set[str] = set()  # outputs of skipped stages
        self.pulled: set[str] = set()  # keys downloaded from the remote cache
        self.results: list[StageResult] = []
        self.summary: RunSummary | None = None  # the run summary, once written
        # Verify, then publish: outputs held until the stages that verify them pass.
        self.publishing = RunPublishing(project, store, reporter, self._needed_nodes)
        self._reported: StageResult | None = None  # the stage under way's result, once it said it

    def run(self) -> list[StageResult]:
        """Runs the needed stages; the summary and report are written only once the
        invocation is accepted (a rejected selection leaves the last ones intact)."""
        started = time.perf_counter()
        umask = os.umask(UMASK)
        try:
            return self._run(started)
        finally:
            os.umask(umask)

    def _run(self, started: float) -> list[StageResult]:
        self.resolved = dict(source_outputs(self.project, self.store))
        self._preflight()
        locks.sweep_dead(self.store.work_root())  # what runs that died left behind
        results = self.results = []
        outcome = RunStatus.INTERRUPTED  # unless the loop below completes
        previous = stopping.stop_on_signals()
        node: Node | None = None
        try:
            for node in self._needed_nodes():
                result = self._interruptible(node)
                results.append(result)
                self.publishing.verified(node, result)
                if result.status is Status.FAILED:
                    break
            outcome = RunStatus.FAILED if first_failed(results) else RunStatus.OK
        except stopping.Stopped as stopped:
            results.append(stopped.result)
            if node is not None and stopped.result.status in (Status.FAILED, Status.SKIPPED):
                self.publishing.verified(node, stopped.result)  # a verdict that withholds, said as it is
            raise KeyboardInterrupt(stopped.result.message) from None
        except Exception as exc:  # deploy's own bug: its traceback follows, the records say it failed
            outcome = RunStatus.FAILED
            if node is not None:
                _crashed(results, node.name, exc)
            raise
        finally:
            try:
                with stopping.deferred():  # a stop now waits for the records: they are the run's
                    self._settle(results, time.perf_counter() - started, outcome)
            finally:
                stopping.restore(previous)
        if (failure := self.failure()) is not None:
            raise failure
        return results

    @property
    def published(self) -> list[tuple[Path | str, list[str]]]:
        """Each destination this run published to, with its model dirs."""
        return self.publishing.published

    def failure(self) -> StageError | None:
        """The run's first failed stage as the error the run raises (its log and the resume)."""
        failed = first_failed(self.results)
        if failed is None:
            return None
        return StageError(failed.name, failed.message, failed.log, self.resume(failed.name), failed.exit_code)

    def _settle(self, results: list[StageResult], took_s: float, outcome: RunStatus) -> None:
        """What a run leaves whatever stopped it: the push, the summary, the memo."""
        faults.point("settle")
        if self.remote is not None and self.remote.spec.push and outcome is not RunStatus.INTERRUPTED:
            self._push()
        interrupted = frozenset(r.name for r in results if r.status is Status.INTERRUPTED)
        # A stop that came once a stage had passed (its result kept) cut the run before its verdict published.
        stopped = outcome is RunStatus.INTERRUPTED
        ended = frozenset(r.name for r in results[-1:] if stopped and r.status in PASSED) - interrupted
        self.publishing.gate.close(interrupted, ended)
        self._write_summary(results, took_s, outcome)
        self.store.memo.save()  # digests rehashed this run (a no-op when none was)

    def _interruptible(self, node: Node) -> StageResult:
        """The stage's result; when the run is stopped during it, _Stopped carries the
        stage as `interrupted` (with its log), so the summary names where it stopped."""
        began, self._reported = time.perf_counter(), None
        try:
            return self._stage(node)
        except KeyboardInterrupt as stop:
            if self._reported is not None:  # it had ended and said so (its outputs stored): as it ended
                raise stopping.Stopped(self._reported) from stop
            why = f"interrupted ({stop})" if str(stop) else "interrupted (Ctrl-C)"
            log = self.project.run_dir / "logs" / f"{node.name}.log"
            result = StageResult(node.name, Status.INTERRUPTED, duration_s=time.perf_counter() - began)
            result.message, result.log = why, log if log.exists() else None
            raise stopping.Stopped(result) from stop

    def _push(self) -> None:
        assert self.remote is not None
        sent = self.remote.push(self.store.committed, self.store)
        if sent.entries:
            self.reporter.note(
                f"remote cache: pushed {sent.entries} entries, {sent.objects} new objects "
                f"({sent.bytes / 1e6:.1f} MB) to {self.remote.spec.url}"
            )

    def _places(self, nodes: Iterable[Node]) -> dict[str, Path]:
        """The directories this run writes: the repository where a stage publishes or releases."""
        config = self.project.config
        places = {"cache_dir": self.store.root, "run_dir": config.run_dir}
        inside = {f"cache_dir ({sub}/)": self.store.root / sub for sub in Store.LAYOUT}
        places |= {field: path for field, path in inside.items() if present(path)}
        local = (d for n in nodes for a in n.spec.outputs for d in self.publishing.destinations(n, a))
        if any(n.spec.phase is Phase.RELEASE for n in nodes) or any(isinstance(d, Path) for d in local):
            places["repository"] = config.repository
        return places

    def _preflight(self) -> None:
        """A stage outside --from/--to/--only that certainly has no cached result is
        rejected before anything runs or is written."""
        nodes = self._needed_nodes()
        require_writable(self._places(nodes))
        enough_open_files()
        needed = {n.name for n in nodes}
        outside = needed - self.selection.run
        if not outside:
            return
        for row in make_plan(self.project, self.store, self.remote):
            if row.name in outside and row.action is Action.RUN:
                raise SelectionError(outside_message(row.name))

    def resume(self, stage: str) -> str:
        return resume_command(self.project.path, stage, self.store.root if self.project.cache_given else None)

    def _needed_nodes(self) -> Iterable[Node]:
        """Every stage up to the last selected one; later stages aren't needed."""
        names = self.project.graph.names()
        last = max(names.index(n) for n in self.selection.run)
        return self.project.graph.nodes[: last + 1]

    # -- one stage -------------------------------------------------------------------
    def _stage(self, node: Node) -> StageResult:
        parts = stage_parts(node, self.project, self.resolved, frozenset(self.absent))
        if parts is None:
            missing = [str(r) for r in node.bindings.values() if str(r) not in self.resolved]
            return self._skip(
                node,
                StageResult(node.name, Status.SKIPPED, message=f"inputs unavailable: {', '.join(missing)}"),
            )
        key = parts.key
        entry, problem = self.store.lookup(key)
        if problem:
            self.reporter.warn(f"{node.name}: cache entry {key[:12]} is damaged ({problem}); rebuilding")
            self.store.drop(key)
        if entry is None and self.remote is not None and not self.selection.forced(node.name):
            entry = self.remote.pull(key, self.store)  # objects verified, entry committed locally
            if entry is not None:
                self.pulled.add(key)
        if node.name not in self.selection.run:
            return self._outside_selection(node, key, parts, entry)
        if entry is not None and self._reusable(node, entry):
            return self._hit(node, key, parts, entry)
        redo = self.selection.redo(entry.metrics.get(PROVISIONAL_KEY)) if entry is not None else None
        forced = ["forced"] if self.selection.forced(node.name) else [redo] if redo else None
        reasons = forced or why(node, self.project, self.store, parts, self.resolved)
        reasons += [f"damaged entry: {problem}"] if problem else []
        with locks.building(self.store.root, key, partial(self._waiting, node.name)):
            built, _ = self.store.lookup(key)  # by a run that held the lock before us
            if built is not None and self._reusable(node, built):
                return self._hit(node, key, parts, built)
            return self._execute(node, key, parts, reasons)

    def _reusable(self, node: Node, entry: Entry) -> bool:
        """A cached result serves: not forced, nor provisional where --wait-quiet redoes it."""
        provisional = entry.metrics.get(PROVISIONAL_KEY)
        return not self.selection.forced(node.name) and self.selection.redo(provisional) is None

    def _waiting(self, stage: str, holder: str) -> None:
        self.reporter.note(f"{stage}: waiting for {holder}, which is building the same stage with this cache")

    def _outside_selection(self, node: Node, key: str, parts: KeyParts, entry: Entry | None) -> StageResult:
        if entry is None:  # found only now: an upstream stage's new output changed its key
            result = StageResult(
                node.name, Status.FAILED, key, message=outside_message(node.name), exit_code=ExitCode.CONFIG
            )
            return self._report(result)
        return self._hit(node, key, parts, entry)

    def _skip(self, node: Node, result: StageResult) -> StageResult:
        self.absent.update(f"{node.name}.{a.name}" for a in node.spec.outputs)
        return self._report(result)

    def _hit(self, node: Node, key: str, parts: KeyParts, entry: Entry) -> StageResult:
        if entry.skipped is not None:  # a remembered skip: same TensorRT / GPU as then
            return self._skip(node, StageResult(node.name, Status.SKIPPED, key, message=entry.skipped))
        result = StageResult(
            node.name,
            Status.CACHED,
            key,
            entry.duration_s,
            outputs=entry.outputs,
            metrics=entry.metrics,
            created=entry.created,
            remote=key in self.pulled,
        )
        self._accept(node, key, parts, result)
        return self._report(result)

    def _accept(self, node: Node, key: str, parts: KeyParts, result: StageResult) -> None:
        self.resolved.update({f"{node.name}.{n}": o for n, o in result.outputs.items()})
        self.store.set_head(self.project.config.name, node.name, key, parts)
        passed = {r.name for r in self.results if r.status in PASSED}
        self.publishing.accepted(node, result, passed)

    def _report(self, result: StageResult) -> StageResult:
        self.reporter.finished(result)
        self._reported = result
        faults.point(f"reported:{result.name}")  # the tests' stop just after a stage said it ended
        return result

    def _execute(self, node: Node, key: str, parts: KeyParts, reasons: list[str]) -> StageResult:
        self.reporter.started(node.name, reasons)
        log = self.project.run_dir / "logs" / f"{node.name}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"# stage {node.name}, key {key}\n# why: {'; '.join(reasons)}\n")
        workdir = Path(tempfile.mkdtemp(dir=self.store.work_root(), prefix=locks.tmp_prefix(node.name)))
        result = StageResult(node.name, Status.RAN, key, reasons=reasons, log=log)
        start = time.perf_counter()
        try:
            self._call(node, workdir, log, result)
            result.duration_s = time.perf_counter() - start
            if result.status is Status.RAN:
                self._store_outputs(node, key, parts, workdir, result)
            elif result.status is Status.SKIPPED:
                self._remember_skip(node, key, parts, result)
        except (OSError, DiskFull) as exc:  # the cache's disk is full: this stage failed, the run reports
            full = disk_full(exc)
            said = str(full) if full else f"the cache at {self.store.root} could not take its outputs: {exc}"
            result.status, result.message, result.exit_code = Status.FAILED, said, ExitCode.ENVIRONMENT
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
        result.duration_s = time.perf_counter() - start
        if result.status is Status.SKIPPED:
            return self._skip(node, result)
        return self._report(result)

    def _remember_skip(self, node: Node, key: str, parts: KeyParts, result: StageResult) -> None:
        """A skip depends only on the key's inputs (e.g. TensorRT version, GPU): cached like
        a result, so a warm run does not even try to import TensorRT again."""
        self.store.commit(Entry(node.name, key, parts, {}, result.metrics, skipped=result.message))
        self.store.set_head(self.project.config.name, node.name, key, parts)

    def _input_paths(self, node: Node) -> dict[str, Path]:
        return {
            name: self.project.graph.node(ref.stage)
            .spec.output(ref.name)
            .within(self.store.path_of(self.resolved[str(ref)]))
            for name, ref in node.bindings.items()
            if ref.stage and str(ref) in self.resolved
        }

    def _call(self, node: Node, workdir: Path, log: Path, result: StageResult) -> None:
        job = Job(
            node.name,
            stage_module(node.name),
            node.params,
            self.project.config,
            self._input_paths(node),
            workdir,
            log,
            self.store.root / "persistent" / node.name,
        )
        settings = self.project.settings_of(node.spec)
        if settings.isolate:
            outcome = run_isolated(
                job, Limits(settings.timeout_s, settings.memory_mb), self.reporter.progress
            )
        else:
            outcome = execute(job, node.spec, self.reporter.progress)
        result.status, result.message, result.exit_code = outcome.status, outcome.message, outcome.exit_code
        result.metrics.update(outcome.metrics)
        full = full_of(self.store.root, workdir) if result.status is Status.FAILED else None
        if full is not None and result.exit_code is not ExitCode.ENVIRONMENT:  # a native abort on a write
            result.message, result.exit_code = f"{DiskFull(full)} ({result.message})", ExitCode.ENVIRONMENT
        moved = source_changed(node, self.project, self.store, self.resolved)
        if moved and result.status is not Status.SKIPPED:  # never cached under the old key; the real cause
            said = f" (the stage said: {result.message})" if result.status is Status.FAILED else ""
            result.status, result.message, result.exit_code = Status.FAILED, moved + said, ExitCode.STAGE

    def _store_outputs(
        self, node: Node, key: str, parts: KeyParts, workdir: Path, result: StageResult
    ) -> None:
        for artifact in node.spec.outputs:
            result.outputs[artifact.name] = self.store.ingest(workdir / artifact.relpath, artifact.kind)
        key, parts = self._after(node, key, parts)
        result.key = key
        entry = Entry(
            node.name,
            key,
            parts,
            result.outputs,
            result.metrics,
            round(result.duration_s, 3),
            datetime.now(UTC).isoformat(timespec="seconds"),
        )
        self.store.commit(entry)
        self._accept(node, key, parts, result)

    def _after(self, node: Node, key: str, parts: KeyParts) -> tuple[str, KeyParts]:
        """A stage that observes state outside the cache may change it (a release publishes
        into the repository it compares with): its entry is kept under the state it left,
        so the next run finds it, while a return to the state before (the repository
        deleted) misses and runs the stage again."""
        if node.spec.observes is None:
            return key, parts
        after = stage_parts(node, self.project, self.resolved, frozenset(self.absent))
        return (key, parts) if after is None else (after.key, after)

    def _write_summary(self, results: list[StageResult], seconds: float, outcome: RunStatus) -> None:
        run = RunOf(self.project, self.store, tuple(self.publishing.gate.notes))
        self.summary = write_summary(run, results, seconds, outcome, self.reporter.warn)


def _crashed(results: list[StageResult], stage: str, exc: Exception) -> None:
    """The stage an unexpected error escaped from, failed in the summary and the JUnit (a
    run recorded `interrupted` with no failure reads green to a CI)."""
    said = f"internal error in deploy: {type(exc).__name__}: {exc}"
    if results and results[-1].name == stage:
        results[-1].status, results[-1].message = Status.FAILED, said
    else:
        results.append(StageResult(stage, Status.FAILED, message=said))
    results[-1].exit_code = ExitCode.INTERNAL
