"""An independent client hammers a live tritonserver (`deploy serve`, explicit model
control) while a two-model pipeline (the digits CNN served FP32 and FP16, both by the
python backend) goes through: a release, a rollback, a release killed with SIGKILL while
its versions are placed (recovered by the next command: reverted), and one killed while
the models are switched (recovered: completed). Each client thread asks both models, one
after the other, again and again; every answer is identified by the checkpoint whose
version answers it (ONNX Runtime on the released files), and a pair whose two answers
come from different checkpoints is an answer from a mixed pipeline.

    .venv/bin/python benchmarks/release_hammer.py [--threads 4] [--out benchmarks/results/release_hammer.json]

Run twice in one invocation: on the machine as it is (load ~1), then beside a CPU hog the
script starts itself (2 x cores busy processes, stopped by the script when the phases
end; each also stops itself after 15 minutes), so the mixed window is known quiet and
under load. The load average is recorded per phase.

Real trained weights (scikit-learn's digits, 8, 30 and 15 epochs), a real server, real
kills (the release's fault-injection points, deploy.pipeline.process.faults)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from deploy.pipeline.process.faults import FAULT_ENV  # noqa: E402
from deploy.serving import releases  # noqa: E402
from tests.helpers import tiny_dict, train_tiny_digits  # noqa: E402

MODELS = ("tiny_python", "tiny_python_fp16")


class Hammer(threading.Thread):
    """Asks both models in turn; keeps (time, model, answer or error)."""

    def __init__(self, url: str, x: np.ndarray, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        self.url, self.x, self.stop = url, x, stop
        self.pairs: list[tuple[float, dict[str, Any]]] = []

    def run(self) -> None:
        import tritonclient.http as http

        client = http.InferenceServerClient(self.url)
        feed = http.InferInput("image", list(self.x.shape), "FP32")
        feed.set_data_from_numpy(self.x)
        while not self.stop.is_set():
            pair: dict[str, Any] = {}
            for model in MODELS:
                try:
                    pair[model] = client.infer(model, [feed]).as_numpy("logits")
                except Exception as exc:  # every failure is a finding
                    pair[model] = repr(exc)
            self.pairs.append((time.monotonic(), pair))


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "deploy", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def config(work: Path, checkpoint: Path, servers: list[str]) -> Path:
    data = tiny_dict(work)
    data["model"]["checkpoint"] = str(checkpoint)
    data["stages"] = {
        "export": data["stages"]["export"],
        "simplify": {},
        "fp16": {},
        "triton_config": {
            "formats": ["python"],
            "precisions": ["fp32", "fp16"],
            "max_batch_size": 16,
            "publish": "released",
        },
        "release": {"keep": 10, "servers": servers, "accept_regression": "benchmark: every retrain"},
    }
    path = work / "digits.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_ready(url: str) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{url}/v2/models/{MODELS[1]}/ready", timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the server never became ready")


def identify(repository: Path, x: np.ndarray) -> dict[str, dict[str, np.ndarray]]:
    """model -> {checkpoint identity: its answer} for every version kept now."""
    import onnxruntime as ort

    found: dict[str, dict[str, np.ndarray]] = {}
    for model in MODELS:
        for release in releases.releases(repository / model):
            assert release.record is not None
            session = ort.InferenceSession(str(repository / model / str(release.version) / "model.onnx"))
            answer = np.asarray(session.run(["logits"], {"image": x})[0])
            found.setdefault(model, {})[release.record.checkpoint_sha256[:12]] = answer
    return found


def which(refs: dict[str, np.ndarray], answer: np.ndarray) -> str | None:
    """The checkpoint whose answer this is: the nearest reference, within 1 % of its scale
    (FP16 batched by the server rounds differently than alone) and clearly nearer than
    any other checkpoint's."""
    found = sorted((float(np.max(np.abs(answer - a))), n, float(np.max(np.abs(a)))) for n, a in refs.items())
    distance, name, scale = found[0]
    others = [d for d, n, _ in found if n != name]
    return name if distance <= 0.01 * scale and all(distance < 0.25 * d for d in others) else None


def tally(
    pairs: list[tuple[float, dict[str, Any]]], refs: dict[str, Any], marks: list[tuple[str, float]]
) -> list[dict[str, Any]]:
    """Per phase (between marks): requests, failed, unidentified, pairs from a mixed pipeline."""
    rows = []
    for (phase, start), (_, end) in zip(marks, [*marks[1:], ("end", float("inf"))], strict=True):
        inside = [(t, p) for t, p in pairs if start <= t < end]
        failed = sum(isinstance(a, str) for _, p in inside for a in p.values())
        names = [
            (t, {m: which(refs[m], a) for m, a in p.items() if not isinstance(a, str)}) for t, p in inside
        ]
        unknown = sum(n is None for _, p in names for n in p.values())
        mixed = [t for t, p in names if len(p) == 2 and None not in p.values() and len(set(p.values())) == 2]
        rows.append(
            {
                "phase": phase,
                "requests": 2 * len(inside),
                "failed": failed,
                "unidentified": unknown,
                "mixed_pairs": len(mixed),
                "mixed_span_s": round(max(mixed) - min(mixed), 3) if mixed else 0.0,
            }
        )
    return rows


HOG = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end:\n    pass\n"


def hog(count: int) -> list[subprocess.Popen[bytes]]:
    """`count` busy processes (each ends itself after 15 minutes if this script dies)."""
    return [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "release_hammer.json")
    args = parser.parse_args()
    runs = []
    for busy in (0, 2 * (os.cpu_count() or 2)):
        hogs = hog(busy)
        try:
            if busy:
                time.sleep(20)  # the load average catches up
            runs.append({"hog_processes": busy, **hammer(args.threads)})
        finally:
            for process in hogs:  # ours only: the processes this script started
                process.kill()
                process.wait()
    result = {"machine": f"{os.cpu_count()} cores", "threads": args.threads, "runs": runs}
    args.out.write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


def hammer(threads: int) -> dict[str, Any]:
    """The phases on a fresh server and repository: per phase, the requests, failures and
    the mixed window; the load average at each phase's end."""
    work = Path(tempfile.mkdtemp(prefix="release-hammer-"))
    checkpoints = {}
    for epochs in (8, 30, 15):
        checkpoints[epochs] = work / f"e{epochs}" / "tiny_digits.pt"
        checkpoints[epochs].parent.mkdir()
        train_tiny_digits(checkpoints[epochs], epochs)
    ports = free_ports(3)
    url = f"127.0.0.1:{ports[0]}"
    path = config(work, checkpoints[8], [])
    assert cli("run", str(path)).returncode == 0
    flags = ["--http-port", str(ports[0]), "--grpc-port", str(ports[1]), "--metrics-port", str(ports[2])]
    server = subprocess.Popen(
        [sys.executable, "-m", "deploy", "serve", str(path), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    x = np.load(checkpoints[8].parent / "test.npy")[:4].astype(np.float32)
    stop, marks, said = threading.Event(), [], {}
    refs: dict[str, dict[str, np.ndarray]] = {}
    try:
        wait_ready(url)
        hammers = [Hammer(url, x, stop) for _ in range(threads)]
        for h in hammers:
            h.start()
        steps = [
            ("serving v1", None, None, 8),
            ("release v2", ("run",), None, 30),
            ("rollback to v1", ("rollback",), None, None),
            ("release killed while placing, then recovered", ("run",), "placed:tiny_python", 15),
            ("release killed while switching, then recovered", ("run",), "switched:tiny_python", 15),
        ]
        for phase, command, fault, epochs in steps:
            marks.append((phase, time.monotonic()))
            if epochs is not None:
                path = config(work, checkpoints[epochs], [f"http://{url}"])
            if command is not None:
                done = cli(*command, str(path), env={FAULT_ENV: fault} if fault else None)
                said[phase] = {"exit": done.returncode}
                if fault:  # the next command that touches the repository recovers it
                    listed = cli("releases", str(path))
                    said[phase]["recovery"] = listed.stderr.strip()
            time.sleep(3.0)
            said.setdefault(phase, {})["load_average"] = load_average()
            for model, found in identify(work / "model_repository", x).items():  # before pruning
                refs.setdefault(model, {}).update(found)
        stop.set()
        for h in hammers:
            h.join(timeout=30)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=60)
    pairs = sorted(p for h in hammers for p in h.pairs)
    rows = tally(pairs, refs, marks)
    for row in rows:
        row.update(said.get(row["phase"], {}))
    total = {k: sum(r[k] for r in rows) for k in ("requests", "failed", "unidentified", "mixed_pairs")}
    total["longest_mixed_span_s"] = max(r["mixed_span_s"] for r in rows)
    return {"phases": rows, "total": total}


if __name__ == "__main__":
    main()
