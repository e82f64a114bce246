"""`deploy`: run / plan / validate a pipeline, and maintain its cache.

Exit codes (pipeline.errors.ExitCode): 0 ok, 1 a stage failed, 2 bad command line,
3 bad config or selection, 4 missing environment, 5 a stage crashed, 6 a stage hit its
limits, 7 the release gate refused, 10 `plan --detailed-exitcode`: something will run,
70 internal error, 130 interrupted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

import deploy.commands.startup  # noqa: F401  (first: before any module imports pydantic)
from deploy.commands.bench_cli import bench
from deploy.commands.cache import cache_app
from deploy.commands.cli_common import CacheOpt, ConfigArg, WaitQuietOpt
from deploy.commands.cli_common import console as _console
from deploy.commands.cli_common import project as _project
from deploy.commands.exit_errors import check_cwd, failed, interrupted
from deploy.commands.init_cli import init
from deploy.commands.serve_cli import serve
from deploy.console.terminal import make_console, open_standard_streams, warnings_to_stderr, wide_help
from deploy.domain.vocabulary import Protocol
from deploy.pipeline.errors import (
    ExitCode,
    MissingDependency,
)
from deploy.pipeline.process import stopping
from deploy.pipeline.process.logs import pipes_may_close
from deploy.pipeline.store.writable import UMASK
from deploy.releasing.release_commands import releases, rollback

if TYPE_CHECKING:
    from deploy.pipeline.graph.plan import PlanRow
    from deploy.pipeline.graph.project import Project
    from deploy.spec.config import DeployConfig

# -h everywhere; subcommands inherit it from the group's context.
HELP_OPTIONS = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
    add_completion=True,  # --install-completion / --show-completion (bash, zsh, fish, PowerShell)
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings=HELP_OPTIONS,
    help="Build, verify and cache a PyTorch -> ONNX -> TensorRT -> Triton pipeline from one YAML file.",
)
app.add_typer(cache_app, name="cache")
app.command()(releases)
app.command()(rollback)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            found = version("deploy")
        except PackageNotFoundError:  # run from a source tree that was never installed
            found = "unknown"
        typer.echo(f"deploy {found}")
        raise typer.Exit()


@app.callback()
def _root(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Build, verify and cache a PyTorch -> ONNX -> TensorRT -> Triton pipeline from one YAML file."""


Verbose = Annotated[bool, typer.Option("-v", "--verbose", help="Show tracebacks and more detail.")]


JunitOpt = Annotated[
    Path | None, typer.Option("--junit", help="Also write a JUnit XML file: one testcase per stage.")
]
JsonOpt = Annotated[
    Path | None, typer.Option("--json", help="Also write the run summary (JSON) to this file.")
]


ForceOpt = Annotated[
    list[str], typer.Option("--force", "-f", help="Rerun STAGE even if cached ('all' for every stage).")
]
FromOpt = Annotated[
    str | None, typer.Option("--from", help="Run from STAGE on; earlier stages must be cached.")
]
ToOpt = Annotated[str | None, typer.Option("--to", help="Stop after STAGE.")]
OnlyOpt = Annotated[
    list[str], typer.Option("--only", help="Run only STAGE (repeatable); its inputs must be cached.")
]
AcceptOpt = Annotated[
    str | None,
    typer.Option(
        "--accept-regression",
        metavar="REASON",
        envvar="DEPLOY_ACCEPT_REGRESSION",
        help="Publish what the release gate refuses; REASON goes into the release record (empty: none).",
    ),
]


@app.command()
def run(
    config: ConfigArg,
    force: ForceOpt = [],  # noqa: B006
    start: FromOpt = None,
    stop: ToOpt = None,
    only: OnlyOpt = [],  # noqa: B006
    cache_dir: CacheOpt = None,
    junit: JunitOpt = None,
    summary_json: JsonOpt = None,
    accept_regression: AcceptOpt = None,
    wait_quiet: WaitQuietOpt = None,
    verbose: Verbose = False,
) -> None:
    """Run the pipeline; stages whose inputs are unchanged come from the cache."""
    import os

    from deploy.commands.replay import replayed

    if wait_quiet:  # read by the bench stage's process (stages/bench/machine.py); in no key
        os.environ["DEPLOY_WAIT_QUIET"] = f"{wait_quiet:g}"
    accept_regression = accept_regression or None  # an empty $DEPLOY_ACCEPT_REGRESSION: none
    console = _console()
    whole = not (force or start or stop or only or accept_regression or wait_quiet)  # as Choice.whole
    if whole and not verbose and junit is None and summary_json is None:
        if replayed(config, cache_dir, console):  # nothing changed since the last no-op run
            return
    from deploy.commands.runs import Choice, run_pipeline  # the full path: the engine and the stages

    choice = Choice(force, start, stop, only, accept_regression, remeasure=bool(wait_quiet))
    run_pipeline(config, cache_dir, choice, console, verbose, junit, summary_json)


@app.command()
def plan(
    config: ConfigArg,
    cache_dir: CacheOpt = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the plan as JSON (one object per stage).")
    ] = False,
    detailed_exitcode: Annotated[
        bool,
        typer.Option(
            "--detailed-exitcode",
            help=f"Exit {ExitCode.WILL_RUN} when some stage will (or may) run, or a publish waits for the next run "
            "(stopped amid its renames, or a repository that does not hold the cached tree); 0 when all is in place.",
        ),
    ] = False,
) -> None:
    """Show, per stage, whether it is cached, skipped or will run, and why."""
    from deploy.api import Pipeline
    from deploy.commands.runs import journal_left
    from deploy.pipeline.graph.plan import will_run
    from deploy.pipeline.graph.project import host_issues

    project = _project(config, cache_dir)
    err = make_console(stderr=True)

    def warn(message: str) -> None:
        err.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)

    rows = Pipeline(project).plan(warn)
    for issue in host_issues(project):  # what this machine cannot do: the run will skip it
        warn(str(issue))
    if pending := journal_left(project.config.repository, project.config.name):  # the next run finishes it
        warn(f"{project.config.repository}: {pending}")
    for line in (unpublished := _to_publish(project)):
        warn(line)
    _print_plan(rows, as_json)
    if detailed_exitcode and (will_run(rows) or pending or unpublished):
        raise typer.Exit(ExitCode.WILL_RUN)


def _to_publish(project: Project) -> list[str]:
    """Where a run with every stage cached would still publish (pipeline/publish/pending.py)."""
    from deploy.pipeline.publish.pending import unpublished
    from deploy.pipeline.store.objects import Store

    return unpublished(project, Store(project.cache_dir))


def _print_plan(rows: list[PlanRow], as_json: bool) -> None:
    import json

    from deploy.console.ui import plan_lines, plan_table

    console = _console()
    if as_json:
        print(json.dumps([r.to_json() for r in rows], indent=1))
    elif console.is_terminal:
        console.print(plan_table(rows))
    else:
        for line in plan_lines(rows):
            console.print(line, markup=False, highlight=False, soft_wrap=True)


@app.command()
def validate(
    config: ConfigArg,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="Also build the model and call it once at the min shape: inputs bound by name, dims order, "
            "dtypes and output names checked in seconds (what golden does first).",
        ),
    ] = False,
) -> None:
    """Check a config file (schema, shapes, stage graph) and that the model's package is
    installed, without importing or building it; --probe also builds and calls it."""
    from deploy.modelio.installed import check_installed
    from deploy.pipeline.graph.project import host_issues

    project = _project(config, None)
    check_installed(project.config.model)
    if probe:
        _probe(project.config)
    stages = " -> ".join(project.graph.names())
    probed = " (probed at the min shape)" if probe else ""
    console = _console()
    console.print(f"[green]ok[/] {config}: {project.config.name}: {stages}{probed}")
    for issue in host_issues(project):  # valid, but this machine cannot do it: the run skips it
        console.print(f"note: {issue}", markup=False, highlight=False, soft_wrap=True)


def _probe(config: DeployConfig) -> None:
    """The model built and called at the min shape in a child (child_call): a native crash
    or an os._exit in the model's code is named (exit 5; a hang: 6), not the command's silent end."""
    from deploy.pipeline.process.child_call import CallEnded, in_child

    try:
        in_child(_probed, config)
    except CallEnded as exc:
        raise exc.said_while("--probe built and called it") from None


def _probed(config: DeployConfig) -> None:
    from deploy.pipeline.graph.extras import install_hint

    try:
        from deploy.gates.references import probe_sample
        from deploy.modelio.probe import probe
    except ModuleNotFoundError as exc:
        raise MissingDependency(
            f"the package '{exc.name}' (--probe builds the model)", install_hint(exc.name or "torch")
        ) from None
    probe(config, probe_sample(config))  # its adapter stays in the child: only errors come back


app.command()(init)  # deploy/commands/init_cli.py
app.command()(serve)  # deploy/commands/serve_cli.py


@app.command()
def infer(
    image: Annotated[
        list[Path] | None, typer.Option("--image", help="An image file (JPEG, PNG, ...) to send; repeatable.")
    ] = None,
    text: Annotated[list[str] | None, typer.Option("--text", help="A sentence to send; repeatable.")] = None,
    sample: Annotated[
        bool,
        typer.Option(
            "--sample", help="Also send the photo shipped with deploy (china.jpg: a temple, CC BY 2.0)."
        ),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model", help="The service (an ensemble, e.g. resnet50_python_ensemble); default: the only one."
        ),
    ] = None,
    url: Annotated[
        str | None,
        typer.Option("--url", help="host:port of the server; default localhost:8000 (http) / 8001 (grpc)."),
    ] = None,
    protocol: Annotated[str, typer.Option("--protocol", help="http | grpc.")] = "http",
    timeout: Annotated[float, typer.Option("--timeout", min=0.1, help="Seconds per request.")] = 60.0,
) -> None:
    """Send images or sentences to a published service on a running Triton server and print
    the top labels (or the embedding's first values) and each request's latency."""
    from deploy.commands.infer import InferRequest
    from deploy.commands.infer import infer as ask_service
    from deploy.samples import PHOTO

    if protocol not in ("http", "grpc"):
        raise typer.BadParameter("http or grpc", param_hint="--protocol")
    where = url or ("localhost:8000" if protocol == Protocol.HTTP else "localhost:8001")
    images = [*([PHOTO] if sample else []), *(image or [])]  # the sample first, then the files
    request = InferRequest(where, protocol, model, images, list(text or []), timeout)  # type: ignore[arg-type]
    console = _console()
    ask_service(request, lambda line: console.print(line, markup=False, highlight=False, soft_wrap=True))


app.command()(bench)  # deploy/commands/bench_cli.py


@app.command()
def doctor(
    config: Annotated[
        Path | None,
        typer.Argument(
            help="A config: also says which of its runtimes cannot run on its declared device here.",
            show_default=False,
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
) -> None:
    """Report packages, TensorRT, GPU, CUDA, tritonserver and docker, with what to install;
    with a config, what of it this machine cannot run."""
    import json
    from dataclasses import asdict

    from rich.markup import escape
    from rich.table import Table

    from deploy.commands.doctor import checks, config_checks

    results = checks() + (config_checks(_project(config, None)) if config is not None else [])
    if as_json:
        print(json.dumps([asdict(c) for c in results], indent=1))
        return
    table = Table(title="deploy doctor", title_justify="left")
    for column in ("check", "ok", "detail", "to fix"):
        table.add_column(column)
    for c in results:
        table.add_row(c.name, "[green]yes[/]" if c.ok else "[yellow]no[/]", escape(c.detail), escape(c.fix))
    _console().print(table)


def main() -> None:
    # pydantic scans every installed distribution's entry points for plugins on first
    # use (~20 ms); the CLI uses none, and its no-op run has a 0.5 s budget.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    os.umask(UMASK)  # what deploy writes is never world-writable, whatever the shell's umask
    open_standard_streams()
    warnings_to_stderr()
    verbose = any(arg in ("-v", "--verbose") for arg in sys.argv[1:])
    wide_help()
    # Ctrl-C, SIGTERM, SIGHUP: "interrupted", exit 130, whenever they land; a reader that goes
    # away (`| head -1`) costs the console, not the run
    with stopping.listening(), pipes_may_close():
        try:
            code = ExitCode.OK if _replayed(sys.argv[1:]) else _invoke(verbose)
        except KeyboardInterrupt as stop:  # one that landed outside _invoke's own handling
            code = interrupted(make_console(stderr=True), str(stop) or stopping.stopped_by())
    sys.exit(code)


def _replayed(args: list[str]) -> bool:
    """`deploy run CONFIG`, the invocation a warm loop repeats, answered before typer
    builds its commands (it coerces every option through a pydantic TypeAdapter: ~60 ms,
    a third of a replay). Any other command line, or no matching footprint, goes through
    typer and `run` as usual; so would a replay that failed: the full path is always right."""
    if len(args) != 2 or args[0] != "run" or args[1].startswith("-"):
        return False
    from deploy.commands.replay import replayed

    try:
        return replayed(Path(args[1]), None, _console())
    except Exception:  # e.g. a footprint of an unexpected shape: the full path decides
        if by := stopping.stopped_by():  # unless the error was a stop's: main says it
            raise KeyboardInterrupt(by) from None
        return False


def _invoke(verbose: bool) -> int:
    err = make_console(stderr=True)
    try:
        check_cwd()
        code = app(standalone_mode=False)  # returns an Exit's code instead of exiting
        if code == ExitCode.INTERRUPTED and (by := stopping.stopped_by()):  # typer's silent 130
            return interrupted(err, by)
    except typer.TyperException as exc:  # usage errors (typer's vendored click)
        show = getattr(exc, "show", None)
        if show is not None:
            show()
        else:
            err.print(str(exc), markup=False, highlight=False)
        return int(getattr(exc, "exit_code", ExitCode.USAGE))
    except (KeyboardInterrupt, typer.Abort) as stop:
        return interrupted(err, str(stop) or stopping.stopped_by())
    except Exception as exc:  # the one place an error becomes an exit code
        if by := stopping.stopped_by():  # a library's error made of the stop (pydantic's SchemaError)
            return interrupted(err, by)
        return failed(err, exc, verbose)
    return code if isinstance(code, int) else ExitCode.OK
