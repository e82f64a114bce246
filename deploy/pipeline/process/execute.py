"""Running one stage's code: the same body in the runner's process (`isolate: false`)
or in a child process (pipeline.process.isolation), with the outcome as a picklable record.

Only the outcome crosses back: the stage writes its outputs into its work dir, which
the runner ingests into the store when (and only when) the outcome is `ran`.
"""

from __future__ import annotations

import importlib
import logging
import traceback
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from deploy.pipeline.errors import (
    ConfigError,
    DeployError,
    ExitCode,
    MissingDependency,
    StageFailed,
    StageSkipped,
    disk_full,
    plain,
    root_cause,
)
from deploy.pipeline.graph.contract import Metrics, StageContext, StageSpec
from deploy.pipeline.process.logs import captured
from deploy.pipeline.process.progress import Sink, Throttled
from deploy.pipeline.report.results import Status
from deploy.spec.config import DeployConfig


@dataclass(frozen=True)
class Job:
    """Everything a stage's run needs, picklable: the child imports `module` for the spec."""

    stage: str
    module: str
    params: BaseModel
    config: DeployConfig
    inputs: dict[str, Path]
    workdir: Path
    log: Path
    persistent: Path | None

    def spec(self) -> StageSpec:
        from deploy.pipeline.graph.registry import specs_in

        spec = specs_in(importlib.import_module(self.module)).get(self.stage)
        assert isinstance(spec, StageSpec), f"{self.module} defines no stage '{self.stage}'"
        return spec


@dataclass
class Outcome:
    status: Status
    message: str = ""
    exit_code: ExitCode = ExitCode.STAGE
    metrics: Metrics = field(default_factory=dict)


def execute(job: Job, spec: StageSpec, sink: Sink | None = None) -> Outcome:
    """Runs the stage; every way it can end becomes an Outcome (its log has the detail).
    `sink` hears the stage's progress."""
    outcome = Outcome(Status.RAN)
    with captured(job.log) as logger:
        outputs = {a.name: a for a in spec.outputs}
        ctx = StageContext(
            job.config, job.inputs, job.workdir, outputs, logger, outcome.metrics, job.persistent
        )
        ctx.on_progress = Throttled(job.stage, sink) if sink is not None else None
        try:
            spec.run(ctx, job.params)
            unwritten = [a.name for a in spec.outputs if not ctx.output(a.name).exists()]
            if unwritten:
                raise StageFailed(f"stage finished without writing output(s): {', '.join(unwritten)}")
        except StageSkipped as exc:
            logger.warning("skipped: %s", exc)
            outcome.status, outcome.message = Status.SKIPPED, str(exc)
        except Exception as exc:
            _reraise_interrupt(exc)
            outcome.status = Status.FAILED
            outcome.message, outcome.exit_code = _failure(exc, logger)
        except SystemExit as exc:  # the user's model code called sys.exit(): not ours to exit with
            logger.error("sys.exit() called in stage code\n%s", traceback.format_exc())
            outcome.status = Status.FAILED
            outcome.message = f"code run by the stage called sys.exit({exc.code!r}) (traceback in the log)"
    return outcome


def _failure(exc: Exception, logger: logging.Logger) -> tuple[str, ExitCode]:
    """The outcome's message and exit code for a stage that raised `exc`, logged in full."""
    if isinstance(exc, StageFailed):  # the cause (an exporter's pages of advice) goes to the log
        logger.error("%s", exc, exc_info=exc.__cause__ is not None)
        return plain(str(exc)), ExitCode.STAGE
    if isinstance(exc, DeployError):  # e.g. a library the stage needs is missing: exit code kept
        logger.error("%s", exc)
        return _message(exc), exc.exit_code
    known = _missing(exc) if isinstance(exc, ModuleNotFoundError) else disk_full(exc)
    if known is not None:  # an extra not installed, a full disk: exit 4, saying what to do
        logger.error("%s\n%s", known, traceback.format_exc())
        return str(known), known.exit_code
    logger.error("unexpected error\n%s", traceback.format_exc())
    return f"{root_cause(exc)} (traceback in the log)", ExitCode.STAGE


def _missing(exc: ModuleNotFoundError) -> MissingDependency:
    from deploy.pipeline.graph.extras import install_hint

    name = exc.name or str(exc)
    return MissingDependency(
        f"the package '{name.split('.')[0]}' (imported by the stage)", install_hint(name)
    )


def _message(exc: DeployError) -> str:
    """A config problem found while a stage ran: the problems themselves, each naming its
    key (the console's one line per stage shows the first)."""
    if isinstance(exc, ConfigError):
        return plain("\n".join(str(issue) for issue in exc.issues))
    return plain(str(exc))


def _reraise_interrupt(exc: BaseException) -> None:
    """Ctrl-C that a library turned into its own error (torch's tracer, a C extension's
    callback) is still Ctrl-C: the run is interrupted, not a failed stage."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, KeyboardInterrupt):
            raise KeyboardInterrupt from exc
        seen = seen.__cause__ or seen.__context__
