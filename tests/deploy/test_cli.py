"""The CLI in a subprocess, as a user or Jenkins runs it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from deploy.pipeline.errors import ExitCode
from tests.helpers import HEAVY, ROOT, Cli, run_cli

PROBE = """
import sys
from deploy.cli import main
sys.argv = ["deploy", *{args!r}]
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


# Stage isolation's fork server: a fully cached run starts no child process.
FORKSERVER = ("multiprocessing.forkserver", "multiprocessing.popen_forkserver")


def heavy_imports(*args: str) -> tuple[int, list[str]]:
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=list(args), heavy=HEAVY + FORKSERVER)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("HEAVY="))
    return proc.returncode, [m for m in line.removeprefix("HEAVY=").split(",") if m]


@pytest.fixture(scope="module")
def cached_config(tmp_path_factory):
    import yaml

    from tests.helpers import tiny_dict

    tmp = tmp_path_factory.mktemp("cli")
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_dict(tmp), sort_keys=False))
    first = run_cli("run", str(path))
    assert first.returncode == 0, first.stderr
    return path


def test_help_and_cached_run_import_no_heavy_library(cached_config):
    assert heavy_imports("--help") == (0, [])
    assert heavy_imports("run", str(cached_config)) == (0, [])
    assert heavy_imports("plan", str(cached_config)) == (0, [])
    assert heavy_imports("validate", str(cached_config)) == (0, [])
    assert heavy_imports("validate", str(ROOT / "configs" / "resnet50.yaml")) == (
        0,
        [],
    )  # every stage's module


def test_a_cached_run_with_a_remote_cache_never_touches_it(cached_config, tmp_path):
    """The remote is read only on a local miss: a warm run imports no storage library."""
    import yaml

    data = yaml.safe_load(cached_config.read_text())
    data["cache"] = {"remote": "s3://nowhere-bucket/cache"}
    path = cached_config.parent / "remote.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    assert heavy_imports("run", str(path)) == (0, [])


def test_first_run_writes_summary_and_parseable_repository(cached_config):
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    summary = json.loads((cached_config.parent / "runs" / "tiny" / "summary.json").read_text())
    assert summary["status"] == "ok" and [s["stage"] for s in summary["stages"]][:2] == ["golden", "export"]
    repo = cached_config.parent / "model_repository"
    for model in ("tiny_onnx", "tiny_torchscript"):
        config = text_format.Parse(
            (repo / model / "config.pbtxt").read_text(), model_config_pb2.ModelConfig()
        )
        assert config.name == model and config.max_batch_size == 16
        assert list(config.input[0].dims) == [1, 8, 8] and list(config.output[0].dims) == [10]
    assert (repo / "tiny_onnx" / "1" / "model.onnx").stat().st_size > 1000


def test_second_run_reports_every_stage_cached(cached_config, cli: Cli):
    proc = cli("run", str(cached_config))
    assert proc.returncode == 0
    summary = json.loads((cached_config.parent / "runs" / "tiny" / "summary.json").read_text())
    states = {s["stage"]: s["status"] for s in summary["stages"]}
    assert set(states.values()) == {"cached"} and len(states) >= 5
    assert "cached" in proc.stdout


def test_plan_names_the_changed_param(cached_config, cli: Cli):
    import yaml

    data = yaml.safe_load(cached_config.read_text())
    data["stages"]["validate"]["min_cosine"] = 0.99
    edited = cached_config.with_name("edited.yaml")
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = cli("plan", str(edited))
    assert proc.returncode == 0
    lines = {
        line.split()[0]: line for line in proc.stdout.splitlines() if line.strip()
    }  # plain: not a terminal
    assert "will run" in lines["validate"] and "params.min_cosine: 0.9999 -> 0.99" in lines["validate"]
    assert all("cached" in lines[s] for s in ("trace", "export", "simplify", "triton_config"))


def test_plan_warns_about_a_summary_of_another_release_and_goes_on(cached_config, cli: Cli):
    """A summary.json without this release's schema means no last-run info: a warning,
    not a crash."""
    import yaml

    data = yaml.safe_load(cached_config.read_text())
    data["stages"]["validate"]["min_cosine"] = 0.98  # validate will run: the plan asks the last run
    edited = cached_config.with_name("edited_old_summary.yaml")
    edited.write_text(yaml.safe_dump(data, sort_keys=False))
    summary = cached_config.parent / "runs" / "tiny" / "summary.json"
    kept = summary.read_text()
    summary.write_text(
        json.dumps({"pipeline": "tiny", "status": "failed", "stages": [{"stage": "validate"}]})
    )
    try:
        proc = cli("plan", str(edited))
    finally:
        summary.write_text(kept)
    assert proc.returncode == 0, proc.stderr
    assert f"warning: last run's failures unknown: {summary}: run summary schema None" in proc.stderr
    assert "will run" in next(ln for ln in proc.stdout.splitlines() if ln.startswith("validate"))


def test_repository_is_restored_from_cache_when_deleted_or_edited(cached_config, cli: Cli):
    import shutil

    repo = cached_config.parent / "model_repository"
    original = (repo / "tiny_torchscript" / "config.pbtxt").read_text()
    shutil.rmtree(repo / "tiny_onnx")
    (repo / "tiny_torchscript" / "config.pbtxt").write_text("max_batch_size: 1\n")
    assert cli("run", str(cached_config)).returncode == 0
    assert (repo / "tiny_onnx" / "config.pbtxt").is_file()
    assert (repo / "tiny_torchscript" / "config.pbtxt").read_text() == original


def test_stage_failure_exit_code_names_log_and_resume(cached_config, cli: Cli):
    import yaml

    data = yaml.safe_load(cached_config.read_text())
    data["stages"]["validate"].update({"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0})
    strict = cached_config.with_name("strict.yaml")
    strict.write_text(yaml.safe_dump(data, sort_keys=False))
    proc = cli("run", str(strict))
    assert proc.returncode == ExitCode.STAGE
    assert "stage 'validate' failed: onnxruntime vs eager parity failed" in proc.stderr
    assert "validate.log" in proc.stderr and f"deploy run {strict} --from validate" in proc.stderr
    assert "--cache-dir" not in proc.stderr  # the config's own cache: the resume needs none
    assert "Traceback" not in proc.stderr


def test_the_resume_names_a_cache_given_on_the_command_line(cached_config, cli: Cli, tmp_path: Path):
    """`--from` needs the earlier stages cached: a resume without the run's --cache-dir
    looked in the config's cache, found nothing and exited 3."""
    import shlex

    import yaml

    data = yaml.safe_load(cached_config.read_text())
    data["stages"]["validate"].update({"atol": 0.0, "rtol": 0.0, "min_cosine": 1.0})
    strict = cached_config.with_name("strict.yaml")
    strict.write_text(yaml.safe_dump(data, sort_keys=False))
    elsewhere = tmp_path / "other-cache"
    failed = cli("run", str(strict), "--cache-dir", str(elsewhere))
    assert failed.returncode == ExitCode.STAGE
    resume = next(line for line in failed.stderr.splitlines() if "resume: " in line).split("resume: ", 1)[1]
    assert resume == f"deploy run {strict} --from validate --cache-dir {shlex.quote(str(elsewhere))}"
    again = cli(*shlex.split(resume)[1:])
    assert again.returncode == ExitCode.STAGE and "stage 'validate' failed" in again.stderr  # it resumed


def test_unknown_force_stage_is_a_usage_error(cached_config, cli: Cli):
    proc = cli("run", str(cached_config), "--force", "nope")
    assert proc.returncode == ExitCode.USAGE and "nope" in proc.stderr + proc.stdout


def test_cache_ls_verify_gc(cached_config, cli: Cli):
    cache = cached_config.parent / "cache"
    listing = cli("cache", "ls", "--cache-dir", str(cache))
    assert listing.returncode == 0 and "triton_config" in listing.stdout and "tiny" in listing.stdout
    assert cli("cache", "verify", "--cache-dir", str(cache)).returncode == 0
    stray = cache / "objects" / "ff" / ("f" * 64)
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"orphan")
    gc = cli("cache", "gc", "--cache-dir", str(cache))
    assert gc.returncode == 0 and not stray.exists()
    assert cli("run", str(cached_config)).returncode == 0  # nothing live was collected
    again = cli("run", str(cached_config))
    assert again.returncode == 0 and "7 stages: 7 cached" in again.stdout, again.stdout


def test_cache_verify_finds_and_drops_damaged_entries(cached_config, cli: Cli):
    import os

    from deploy.pipeline.store.objects import Store

    store = Store(cached_config.parent / "cache")
    entry, _ = store.lookup(store.head("tiny")["golden"].key)
    golden = store.object_path(entry.outputs["golden"].digest)
    os.chmod(golden, 0o644)
    golden.write_bytes(b"garbage")
    proc = cli("cache", "verify", "--cache-dir", str(store.root))
    assert proc.returncode == ExitCode.STAGE and "golden.golden" in proc.stdout
    rerun = cli("run", str(cached_config))
    assert rerun.returncode == 0 and "ran" in rerun.stdout


@pytest.mark.parametrize("kind", ["StageFailed", "DeployError"])
def test_error_messages_are_styled_text_never_markup(tmp_path, write_config, kind):
    """`error` is styled, the message printed as it is: no literal `[bold red]error[/]`
    (markup switched off for the whole line), and brackets in user text (here a path)
    are neither eaten as markup nor fatal to rich (a stray `[/]`)."""
    if kind == "StageFailed":  # `deploy serve` before anything was published
        repo = tmp_path / "repo[red]x[/]"
        proc = run_cli("serve", str(write_config(replace={"repository": str(repo)})))
        code, expected = ExitCode.STAGE, f"error: no models of 'tiny' in {repo}; run `deploy run` first"
    else:  # a ConfigError
        missing = tmp_path / "x[red]y[/].yaml"
        proc = run_cli("validate", str(missing))
        code, expected = ExitCode.CONFIG, f"error (ConfigError): {missing}: 1 error(s)"
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.startswith(expected), proc.stderr
    assert "[bold red]" not in proc.stderr and "Traceback" not in proc.stderr


def test_version_prints_the_distribution_version_without_heavy_imports():
    from importlib.metadata import version

    proc = run_cli("--version")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"deploy {version('deploy')}"
    assert heavy_imports("--version") == (0, [])


def _command_paths() -> list[list[str]]:
    """Every command and group of the CLI, as argv prefixes: [], ["run"], ["cache", "ls"], ..."""
    import typer

    from deploy.cli import app

    def walk(command, prefix):
        yield prefix
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, [*prefix, name])

    return list(walk(typer.main.get_command(app), []))


def test_short_help_is_an_alias_for_help_everywhere():
    from typer.testing import CliRunner

    from deploy.cli import app

    proc = run_cli("-h")
    assert proc.returncode == 0 and "Usage:" in proc.stdout and "--version" in proc.stdout, proc.stderr
    paths = _command_paths()
    assert ["run"] in paths and ["cache", "ls"] in paths
    runner = CliRunner()
    for path in paths:
        short, long = runner.invoke(app, [*path, "-h"]), runner.invoke(app, [*path, "--help"])
        assert short.exit_code == 0, (path, short.output)
        assert short.output == long.output and "Usage:" in short.output, path


def _piped(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The `deploy` console script (completion keys on its name) with its output to a pipe
    (a CI log) and no width in the environment."""
    clean = {
        k: v for k, v in os.environ.items() if k not in ("COLUMNS", "TERMINAL_WIDTH", "DEPLOY_CACHE_DIR")
    }
    script = str(Path(sys.executable).with_name("deploy"))
    return subprocess.run([script, *args], capture_output=True, text=True, env={**clean, **(env or {})})


def test_output_to_a_pipe_is_not_hard_wrapped(tmp_path):
    folder = tmp_path / ("a-folder-whose-name-is-long-" * 5)
    folder.mkdir()
    missing = folder / "missing.yaml"
    done = _piped("validate", str(missing))
    assert done.returncode == 3 and f"{missing}: 1 error(s)" in done.stderr, done.stderr  # one line
    example = "image:float32:1x3x224x224/4x3x224x224/8x3x224x224"
    assert example in _piped("init", "--help").stdout


def test_shell_completion_completes_commands_and_options():
    env = {"_DEPLOY_COMPLETE": "complete_bash", "COMP_WORDS": "deploy ru", "COMP_CWORD": "1"}
    assert _piped(env=env).stdout.split() == ["run"]
    env |= {"COMP_WORDS": "deploy run --fr", "COMP_CWORD": "2"}
    assert _piped(env=env).stdout.split() == ["--from"]
    assert "--install-completion" in _piped("--help").stdout


@pytest.mark.parametrize("closed", [">&-", ">&- 2>&-"])
def test_a_run_with_its_output_closed_runs(write_config, tmp_path: Path, closed: str) -> None:
    """`deploy run ... >&-` (a supervisor's closed pipe) crashed at start, sys.stdout None,
    and then in each stage's child; it runs, and its summary says what it did."""
    config = write_config()
    command = f"{sys.executable} -m deploy run {config} --to golden {closed}"
    done = subprocess.run(["bash", "-c", command], cwd=tmp_path, timeout=600)
    assert done.returncode == 0
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"] if s["status"] != "not run"] == ["ran"]


@pytest.mark.parametrize("point", ["settle", "ci-files"])
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_stop_after_the_last_stage_still_writes_every_record(
    write_config, tmp_path: Path, point: str, signal_name: str
) -> None:
    """The handlers were put back when the last stage ended: a SIGTERM then killed the run
    before its summary, JUnit or --json (exit 143), a SIGINT cut them half way. Then it
    exited 130 after a summary saying ok: a stop once the outcome is written changes none
    of it, and the exit is the run's."""
    from deploy.pipeline.process.faults import FAULT_ENV

    config = write_config()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "deploy",
            "run",
            str(config),
            "--to",
            "golden",
            "--junit",
            "j.xml",
            "--json",
            "s.json",
        ],
        cwd=tmp_path,
        env={**os.environ, FAULT_ENV: f"{signal_name}@{point}"},
        capture_output=True,
        text=True,
        timeout=600,
        # A shell's background job (CI's launcher) starts with SIGINT ignored, which deploy
        # keeps ignored, as `nohup` and `&` ask: the run must start with it as a terminal has it.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert done.returncode == ExitCode.OK, done.stdout + done.stderr
    said = "arrived after the run's records were written: the run is as they say"
    assert said in done.stderr and "Traceback" not in done.stderr
    for summary in (tmp_path / "s.json", tmp_path / "runs" / "tiny" / "summary.json"):
        recorded = json.loads(summary.read_text())
        assert recorded["status"] == "ok", summary
        assert [s["status"] for s in recorded["stages"] if s["status"] != "not run"] == ["ran"], summary
    assert 'name="golden"' in (tmp_path / "j.xml").read_text()


@pytest.mark.parametrize(("broken", "status"), [(False, ExitCode.OK), (True, ExitCode.CONFIG)])
def test_a_stop_once_the_command_has_ended_keeps_its_exit_status(
    write_config, tmp_path: Path, broken: bool, status: ExitCode
) -> None:
    """The interpreter's exit (the fork server waited for) took ~0.7 s after `run ok`: a
    SIGTERM then killed the process (143, an exit no table lists) after it said ok."""
    from deploy.pipeline.process.faults import FAULT_ENV

    config = write_config({"stages": {"export": {"opset": 5}}} if broken else None)
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "validate", str(config)],
        cwd=tmp_path,
        env={**os.environ, FAULT_ENV: "SIGTERM@exited"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == status, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


def test_the_closing_line_names_a_repository_only_for_what_it_holds(cached_config, cli: Cli, tmp_path: Path):
    """A run that published nothing named `repository: model_repository` as if it had, even
    where no such directory existed."""
    import yaml

    from tests.helpers import tiny_dict

    fresh = tmp_path / "fresh.yaml"
    fresh.write_text(yaml.safe_dump(tiny_dict(tmp_path), sort_keys=False))
    never = cli("run", str(fresh), "--to", "golden")
    assert never.returncode == 0 and "repository:" not in never.stdout.splitlines()[-1], never.stdout
    assert not (tmp_path / "model_repository").exists()
    earlier = cli("run", str(cached_config), "--to", "golden")  # its repository holds an earlier publish
    assert earlier.stdout.splitlines()[-1].endswith(
        "repository: " + str(cached_config.parent / "model_repository") + " (nothing published by this run)"
    )


def test_a_deleted_working_directory_is_said_before_anything_runs(tmp_path: Path) -> None:
    """validate, plan and run ended in a FileNotFoundError traceback (exit 70), doctor in
    oneMKL's fatal error: the shell's directory had been removed."""
    gone = tmp_path / "gone"
    gone.mkdir()
    config = ROOT / "configs" / "tiny.yaml"
    script = f"cd {gone} && rmdir {gone} && exec {sys.executable} -m deploy validate {config}"
    done = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.returncode == ExitCode.ENVIRONMENT, done.stderr
    assert "the current directory no longer exists" in done.stderr and "Traceback" not in done.stderr


def test_a_tilde_in_a_cache_path_is_the_home_directory(tmp_path: Path) -> None:
    """DEPLOY_CACHE_DIR='~/cache' (quoted, so no shell expanded it) made a directory named `~`."""
    import yaml

    from tests.helpers import tiny_dict

    work = tmp_path / "work"
    work.mkdir()
    (work / "tiny.yaml").write_text(yaml.safe_dump(tiny_dict(work), sort_keys=False))
    env = {"HOME": str(tmp_path / "home"), "DEPLOY_CACHE_DIR": "~/cache"}
    done = run_cli("run", "tiny.yaml", "--to", "golden", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "home" / "cache").is_dir() and not (work / "~").exists()


def test_a_console_nobody_reads_costs_the_output_not_the_run(cached_config: Path) -> None:
    """`deploy run ... | head -1`: the first write after the reader left raised
    BrokenPipeError; the run stopped as `interrupted`, every stage `not run`, exit 1 with
    nothing said. Now the run goes on to its end and its own exit code."""
    command = (
        f"{sys.executable} -m deploy run {cached_config} --force golden 2>&1 | true; echo $"
        + "{PIPESTATUS[0]}"
    )
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}
    )
    assert done.stdout.strip() == "0", done.stdout + done.stderr
    summary = json.loads((cached_config.parent / "runs" / "tiny" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["stages"][0]["status"] == "ran", summary["stages"][0]


def test_an_open_files_limit_too_low_for_a_run_is_said_and_a_low_soft_one_raised(cached_config: Path) -> None:
    """Under `ulimit -n 16` the fork server failed an assertion (a traceback) and the run
    said "interrupted (Ctrl-C)"; under a soft 64 smoke timed out ("Too many open files")."""
    import resource

    def limited(soft: int, hard: int) -> Callable[[], None]:
        return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    command = [
        sys.executable,
        "-m",
        "deploy",
        "run",
        str(cached_config),
        "--force",
        "golden",
        "--to",
        "golden",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    hard = subprocess.run(command, env=env, capture_output=True, text=True, preexec_fn=limited(16, 16))
    assert hard.returncode == ExitCode.ENVIRONMENT, hard.stderr
    assert "the open-files limit (ulimit -n) is 16, and its hard limit too" in hard.stderr
    assert "Traceback" not in hard.stderr
    _, ceiling = resource.getrlimit(resource.RLIMIT_NOFILE)
    soft = subprocess.run(command, env=env, capture_output=True, text=True, preexec_fn=limited(16, ceiling))
    assert soft.returncode == 0, soft.stderr  # the soft limit raised to what the hard one allows


def test_force_color_on_a_pipe_gives_the_plain_layout_not_a_terminal_s(write_config, tmp_path: Path) -> None:
    """Many CIs set FORCE_COLOR: rich then took the pipe for a terminal, and the log got
    spinner frames, cursor codes and 80-column tables cutting notes short (18 KB for 2)."""
    config = write_config()
    done = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(config), "--to", "golden"],
        cwd=tmp_path,
        env={**os.environ, "FORCE_COLOR": "1", "TERM": "xterm-256color"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "\r" not in done.stdout + done.stderr and "\x1b[?25" not in done.stdout + done.stderr
    golden = next(line for line in done.stdout.splitlines() if line.startswith("golden ") and " ran " in line)
    assert golden.endswith("(batch of 4 vs each alone)")  # the whole note, on its one line
