"""What tests share: the pipeline run in-process (torch imported once per test session),
the CLI in a subprocess, the tiny config, and finding stray tritonservers. Test modules
import from here, never from each other or from conftest."""

from __future__ import annotations

import contextlib
import copy
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.pipeline.graph.choice import StageSelection
from deploy.pipeline.graph.dag import select
from deploy.pipeline.graph.project import load_project
from deploy.pipeline.process.progress import Progress
from deploy.pipeline.process.runner import Runner, StageResult
from deploy.pipeline.store.objects import Store
from deploy.runtimes.record import BenchRow

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "configs" / "tiny.yaml"
HEAVY = (
    "numpy",  # its OpenBLAS starts a thread at import: a fork after it (child_call) must not
    "torch",
    "onnx",
    "onnxruntime",
    "onnxsim",
    "tensorrt",
    "tritonclient",
    "fsspec",
    "s3fs",
    "botocore",
    "openvino",
    "nncf",
)


# The golden cases of a config with golden's defaults and dynamic dims: the shape spec's
# three points, two sampled shapes, the two value edges (deploy/gates/cases.py).
CASES = ("min", "opt", "max", "sample1", "sample2", "low", "high")


def merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def tiny_dict(workdir: Path, smoke: bool = False) -> dict[str, Any]:
    """configs/tiny.yaml rooted in `workdir`; without the smoke stage unless asked, so
    that only tests marked `triton` start a server, and without the TensorRT build
    (tests/stages/test_build.py covers it), so that statuses don't depend on TensorRT."""
    data = yaml.safe_load(TINY.read_text())
    if not smoke:
        data["stages"].pop("smoke")
    data["stages"].pop("build")
    formats = data["stages"]["triton_config"]["formats"]
    data["stages"]["triton_config"]["formats"] = [f for f in formats if f != "plan"]
    data["model"]["file"] = str(ROOT / "configs" / "models" / "tiny_cnn.py")
    data["cache_dir"] = str(workdir / "cache")
    data["repository"] = str(workdir / "model_repository")
    data["run_dir"] = str(workdir / "runs")
    return data


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    inherited = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    full_env = {**inherited, "COLUMNS": "200", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=1800,
    )


Cli = Callable[..., subprocess.CompletedProcess[str]]  # the `cli` fixture: run_cli's signature, in process


def cli_here(
    capfd: pytest.CaptureFixture[str], *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """run_cli's answer without a new interpreter: deploy's `main()` in this process, as a
    fresh `python -m deploy` would run it (its arguments, environment, working directory,
    umask and signal handlers, all put back afterwards), its console read at the file
    descriptors. An interpreter importing deploy costs ~0.8 s of CPU, and a run's fork
    server importing torch ~3 s more, where this worker's fork server is already up: for a
    test about what the CLI says and returns, not about the process around it."""
    from deploy.cli import main

    inherited = {k: v for k, v in os.environ.items() if k != "DEPLOY_CACHE_DIR"}
    capfd.readouterr()
    with _as_a_process(["deploy", *args], cwd, {**inherited, "COLUMNS": "200", **(env or {})}):
        try:
            main()
            code: int = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    out, err = capfd.readouterr()
    return subprocess.CompletedProcess(["deploy", *args], code, out, err)


@contextlib.contextmanager
def _as_a_process(argv: list[str], cwd: Path | None, env: dict[str, str]) -> Iterator[None]:
    saved_env, saved_cwd, saved_argv = dict(os.environ), os.getcwd(), sys.argv
    saved_umask = os.umask(0o022)
    os.umask(saved_umask)
    saved_signals = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    os.environ.clear()
    os.environ.update(env)
    os.chdir(cwd or saved_cwd)
    sys.argv = argv
    try:
        yield
    finally:
        sys.argv = saved_argv
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        os.umask(saved_umask)
        for sig, handler in saved_signals.items():
            if handler is not None:  # None: set outside Python, left as it is
                signal.signal(sig, handler)


def signals_as_a_terminal_sends_them() -> None:
    """A Popen preexec_fn: a shell's background job (`cmd &` without job control) starts
    with SIGINT ignored, a suite started under `nohup` with SIGHUP ignored, and deploy
    keeps an ignored signal ignored: the child would shrug off the test's Ctrl-C or
    hang-up. Reset both, as a terminal's foreground job has them."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def living_in_session(sid: int) -> set[int]:
    """The processes of session `sid` still running (zombies left out: they exited, and
    this sandbox's init never reaps the orphans)."""
    import psutil

    found = set()
    for proc in psutil.process_iter(["status"]):
        try:
            if proc.info["status"] != psutil.STATUS_ZOMBIE and os.getsid(proc.pid) == sid:
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError, PermissionError):
            continue
    return found


# Set for this test run (tests/conftest.py) and inherited by everything it starts: the mark
# that tells our tritonservers from a user's or another run's on the same machine.
RUN_MARK = "DEPLOY_TEST_RUN"


def tritonservers(mark: str | None = None) -> set[int]:
    """The running tritonservers this test run started: those whose environment carries
    its RUN_MARK (`mark`, default this run's), never every process of that name."""
    import psutil

    want = mark if mark is not None else os.environ.get(RUN_MARK)
    found = set()
    for proc in psutil.process_iter(["name", "cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue  # exited; only its parent's wait is pending
            named = (
                proc.info["name"] == "tritonserver"
                or "tritonserver" in " ".join(proc.info["cmdline"] or [])[:200].split(" ")[0]
            )
            if named and want is not None and proc.environ().get(RUN_MARK) == want:
                found.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


_HOG = "import time\nend = time.monotonic() + {s}\nwhile time.monotonic() < end: pass"
_LAUNCH = (  # the hog writes nowhere: it must not hold the launcher's pipes open
    "import subprocess, sys\n"
    "print(subprocess.Popen([sys.executable, '-c', sys.argv[1]], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid)"
)


@contextlib.contextmanager
def cpu_hogs(n: int, seconds: float = 120) -> Iterator[list[int]]:
    """`n` busy loops that are not this process's children (a launcher starts each and
    exits), so contention counts them as another job's work, as on a shared agent; each
    ends by itself after `seconds` and is killed (by pid, only these) on the way out."""
    pids = []
    for _ in range(n):
        out = subprocess.run(
            [sys.executable, "-c", _LAUNCH, _HOG.format(s=seconds)],
            capture_output=True,
            text=True,
            check=True,
        )
        pids.append(int(out.stdout))
    try:
        time.sleep(0.3)  # running
        yield pids
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def comparable(row: dict[str, Any]) -> bool:
    """Whether select may rest a verdict on a bench.json row: settled, not contended (on a
    loaded agent, or beside the other test workers, most rows are), not implausible."""
    contended = bool((row.get("environment") or {}).get("contended"))
    return bool(row["stable"]) and not contended and not row.get("implausible")


def output_path(path: Path, results: dict[str, StageResult], stage: str, artifact: str) -> Path:
    """Where a stage's output of the last run lies in the cache (for a directory
    artifact with an entry file, e.g. an ONNX model, that file)."""
    project = load_project(path)
    stored = Store(project.cache_dir).path_of(results[stage].outputs[artifact])
    return project.graph.node(stage).spec.output(artifact).within(stored)


def real_tensorrt() -> bool:
    """TensorRT with its builder libraries, and a GPU to build on."""
    try:
        import tensorrt
    except ImportError:
        return False
    from deploy.runtimes.devices import gpu_identity

    return hasattr(tensorrt, "Builder") and gpu_identity() is not None


class Recorder:
    """A Reporter that keeps the warnings (e.g. about damaged cache entries)."""

    def __init__(self) -> None:
        self.warnings: list[str] = []
        self.notes: list[str] = []
        self.progress_events: list[Progress] = []

    def started(self, name: str, reasons: list[str]) -> None:
        pass

    def finished(self, result: StageResult) -> None:
        pass

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def note(self, message: str) -> None:
        self.notes.append(message)

    def progress(self, event: Progress) -> None:
        self.progress_events.append(event)


def run(
    path: Path,
    only: Sequence[str] = (),
    force: Sequence[str] = (),
    start: str | None = None,
    stop: str | None = None,
    recorder: Recorder | None = None,
) -> dict[str, StageResult]:
    from deploy.pipeline.store.remote import remote_for

    project = load_project(path)
    names = select(project.graph, list(only), start, stop)
    reporter = recorder or Recorder()
    runner = Runner(
        project,
        Store(project.cache_dir),
        reporter,
        StageSelection(frozenset(names), frozenset(force)),
        remote_for(project.config, reporter.warn),
    )
    return {r.name: r for r in runner.run()}


def statuses(results: dict[str, StageResult]) -> dict[str, str]:
    return {name: r.status.value for name, r in results.items()}


class WindowedLatency:
    """A call whose latency (time.sleep) follows a schedule of one delay per measurement
    window, the last repeating, for testing the benchmark's stability rule.

    Single stream: pass `per_window` (calls per window, i.e. ceil(iterations / K) with
    duration 0) and `warmup` (calls before the first window: 1 with warmup_ms 0).
    Streams: pass the instance's `edge` as the measurement's snapshot, which it takes twice
    per window edge (just before and just after the edge's time); the schedule moves on at
    every edge (the first one ends the warm-up)."""

    def __init__(self, delays_ms: Sequence[float], per_window: int = 0, warmup: int = 1) -> None:
        self.delays_ms, self.per_window, self.warmup = list(delays_ms), per_window, warmup
        self.calls, self.edges = 0, 0

    def window(self) -> int:
        if self.per_window:
            return max(0, self.calls - self.warmup) // self.per_window
        return max(0, (self.edges - 1) // 2)

    def __call__(self) -> None:
        import time  # appended helper: the module's imports stay as they were

        delay = self.delays_ms[min(self.window(), len(self.delays_ms) - 1)]
        self.calls += 1
        time.sleep(delay / 1000)

    def edge(self) -> int:
        self.edges += 1
        return self.edges


# Credentials moto accepts; real ones never reach a test.
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


class S3Server:
    """moto's standalone S3 server on a free loopback port: real HTTP, spoken to by real
    boto3 / s3fs clients (how s3fs and DVC test their S3 remotes). `env` points the
    standard AWS variables at it."""

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        from deploy.serving.ports import free_port

        self.port = free_port("127.0.0.1")
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.env = {**S3_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self) -> S3Server:
        import urllib.request

        self.server.start()
        # moto keeps its buckets per process, across servers: start empty.
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST"))
        return self

    def stop(self) -> None:
        self.server.stop()

    def client(self) -> Any:
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, **_boto_credentials())

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        return [o["Key"] for page in pages for o in page.get("Contents", [])]


def _boto_credentials() -> dict[str, str]:
    return {
        "aws_access_key_id": S3_ENV["AWS_ACCESS_KEY_ID"],
        "aws_secret_access_key": S3_ENV["AWS_SECRET_ACCESS_KEY"],
        "region_name": S3_ENV["AWS_DEFAULT_REGION"],
    }


def two_heads_net() -> Any:
    """A seeded, eval-mode torch module with two inputs (a, b: [batch, 4] float32) and two
    outputs returned as a tuple (mix, gate: [batch, 3]), different enough that their order
    shows. Built in milliseconds; torch is imported here, not when this module is."""
    import torch

    class TwoHeads(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.mix = torch.nn.Linear(8, 3)
            self.gate = torch.nn.Linear(4, 3)

        def forward(self, a: Any, b: Any) -> Any:
            return self.mix(torch.cat([a, b], dim=1)), torch.sigmoid(self.gate(a - b))

    torch.manual_seed(0)
    return TwoHeads().eval()


def export_two_heads(net: Any, path: Path) -> Path:
    """`two_heads_net()` as ONNX at `path` (inputs a, b; outputs mix, gate; batch dynamic)."""
    import warnings

    import torch

    names = ("a", "b", "mix", "gate")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the TorchScript exporter: fast, and enough here
        torch.onnx.export(
            net,
            (torch.zeros(2, 4), torch.zeros(2, 4)),
            str(path),
            input_names=["a", "b"],
            output_names=["mix", "gate"],
            dynamic_axes={name: {0: "batch"} for name in names},
            opset_version=17,
            dynamo=False,
        )
    return path


DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def train_tiny_digits(path: Path, epochs: int) -> float:
    """configs/models/tiny_cnn.py trained on sklearn's 8x8 digits for `epochs` (seeded:
    the same weights every time); writes the state_dict to `path` and the split beside it
    (train.npy, test.npy, test_labels.npy); returns the held-out accuracy."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    sys.path.insert(0, str(ROOT / "configs" / "models"))
    from tiny_cnn import tiny_cnn

    digits = load_digits()
    x = torch.tensor(digits.images / 16.0, dtype=torch.float32).unsqueeze(1)
    y = torch.tensor(digits.target)
    torch.manual_seed(0)
    order = torch.randperm(len(x))
    train, test = order[:1400], order[1400:]
    model = tiny_cnn(width=8)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    for _ in range(epochs):
        for batch in train.split(64):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = float((model(x[test]).argmax(1) == y[test]).float().mean())
    torch.save(model.state_dict(), path)
    np.save(path.parent / "train.npy", x[train].numpy())
    np.save(path.parent / "test.npy", x[test].numpy())
    np.save(path.parent / "test_labels.npy", y[test].numpy())
    return accuracy


def digits_eager(checkpoint: Path, x: Any) -> Any:
    """The trained digits checkpoint's eager answers to `x` (numpy in, numpy out): the
    reference the converted formats are compared with."""
    import numpy as np
    import torch

    sys.path.insert(0, str(ROOT / "configs" / "models"))
    from tiny_cnn import tiny_cnn

    model = tiny_cnn(width=8)
    model.load_state_dict(torch.load(checkpoint))
    with torch.no_grad():
        return np.asarray(model.eval()(torch.from_numpy(x)).numpy())


def shared_digits(tmp: pytest.TempPathFactory, epochs: int) -> tuple[Path, float]:
    """train_tiny_digits' checkpoint for `epochs`, trained once per test session: xdist's
    workers share it through a lock (the training is seeded: every copy would hold the
    same weights). Read-only for the tests: (state_dict path, held-out accuracy)."""
    import fcntl

    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")  # one id for all workers of a session
    base = tmp.getbasetemp()
    folder = (base.parent / f"shared-{run}" if run else base / "shared") / f"digits{epochs}"
    folder.mkdir(parents=True, exist_ok=True)
    done = folder / "accuracy.json"
    with open(folder.parent / f"digits{epochs}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not done.exists():
            done.write_text(json.dumps(train_tiny_digits(folder / "tiny_digits.pt", epochs)))
    return folder / "tiny_digits.pt", float(json.loads(done.read_text()))


def digits_service(
    workdir: Path, checkpoint: Path, count: int = 10, smoke: bool = True
) -> tuple[Path, dict[str, int]]:
    """The tiny CNN trained on sklearn's digits (`checkpoint`) published as a service:
    PNG bytes in (grayscale, 8x8, pixel / 255 as it was trained on digits / 16), the top-3
    digit names out. Writes the config, labels.txt and `count` held-out digits as PNGs;
    returns (config path, {png name: true digit}). Without `smoke` the repository is
    published unverified (for the tests of what serves it, not of smoke)."""
    import numpy as np
    from PIL import Image

    data = tiny_dict(workdir, smoke=True)
    data["model"]["checkpoint"] = str(checkpoint)
    (workdir / "labels.txt").write_text("".join(f"{n}\n" for n in DIGIT_NAMES))
    gray = {"kind": "image", "color": "grayscale", "resize": 8, "crop": 8, "mean": [0.0], "std": [1.0]}
    data["stages"]["triton_config"].update(
        formats=["python"],
        preprocess=gray,
        postprocess={"kind": "classify", "top_k": 3, "labels": str(workdir / "labels.txt")},
    )
    samples = workdir / "digits"
    samples.mkdir()
    held_out = np.load(checkpoint.parent / "test.npy")  # digits / 16, never trained on
    labels = np.load(checkpoint.parent / "test_labels.npy")
    truth = {}
    for index in range(count):
        name = f"digit{index}.png"
        Image.fromarray(np.round(held_out[index, 0] * 255).astype(np.uint8)).save(samples / name)
        truth[name] = int(labels[index])
    data["stages"]["smoke"]["service"] = {"samples": str(samples)}
    if not smoke:
        data["stages"].pop("smoke")
    path = workdir / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, truth


def in_kernel(code: str, cwd: Path, env: dict[str, str]) -> str:
    """Runs `code` as one cell of a real Jupyter kernel; what it printed (a failed cell
    fails the test with its traceback)."""
    jupyter_client = pytest.importorskip("jupyter_client", reason="the dev extra installs it")
    manager = jupyter_client.KernelManager(kernel_name="python3")
    manager.kernel_spec_manager.ensure_native_kernel = True
    manager.start_kernel(cwd=str(cwd), env=env, extra_arguments=[])
    client = manager.client()
    client.start_channels()
    try:
        client.wait_for_ready(timeout=120)
        outputs: list[str] = []
        reply = client.execute_interactive(
            code, timeout=600, output_hook=lambda msg: outputs.append(_kernel_text(msg))
        )
        assert reply["content"]["status"] == "ok", reply["content"]
        return "".join(outputs)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def _kernel_text(msg: dict) -> str:
    content = msg.get("content", {})
    if msg.get("msg_type") == "stream":
        return str(content.get("text", ""))
    if msg.get("msg_type") == "error":
        return "\n".join(content.get("traceback", []))
    return ""


# A host record for made-up bench results.
HOST = {"host_cpu": "a test CPU", "host_cores": 2}


def bench_row(
    runtime: str, batch: int, median_ms: float, p99_ms: float | None = None, concurrency: int = 1
) -> BenchRow:
    """A single-stream bench row of made-up numbers (select's and the charts' tests): only
    the runtime, batch, median and p99 vary. `runtime` is what the row times: a runtime,
    or `triton:MODEL` for a served model (runtime triton, that model)."""
    runtime, _, model = runtime.partition(":")
    return BenchRow(
        runtime=runtime,
        model=model or None,
        concurrency=concurrency,
        device="cpu",
        batch=batch,
        iterations=200,
        warmup_calls=10,
        min_ms=median_ms,
        max_ms=p99_ms or median_ms,
        mean_ms=median_ms,
        median_ms=median_ms,
        percentiles_ms={"p99": p99_ms or median_ms},
        percentiles_supported={"p99": True},
        qps=1000 / median_ms,
        items_per_s=1000 * batch * concurrency / median_ms,
        wall_s=1.0,
        cv=0.01,
        stable=True,
        windows_used=3,
        measured_s=1.0,
        windows=[],
    )
