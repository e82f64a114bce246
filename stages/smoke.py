"""smoke: the generated repository on a real tritonserver.

Starts (or reaches) a server, loads every model whose backend the server has, checks
each model's metadata against the shape spec, sends the golden inputs over HTTP and
gRPC at the min / opt / max batches and compares the answers with the eager reference,
and with dynamic batching confirms from Triton's statistics that requests were batched.
Models whose backend the server lacks are reported skipped, with that reason.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from pipeline.config import Label
from pipeline.errors import StageFailed
from pipeline.stage import Artifact, Section, StageContext, StageSpec
from stages._server_spec import ServerSpec, identity
from stages._tolerance import Tolerance

Protocol = Literal["http", "grpc"]
# config.pbtxt platform/backend -> (serving format, backend directory name)
PLATFORMS = {
    "onnxruntime_onnx": ("onnx", "onnxruntime"),
    "pytorch_libtorch": ("torchscript", "pytorch"),
    "tensorrt_plan": ("plan", "tensorrt"),
    "python": ("python", "python"),
}


class SmokeParams(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)

    server: ServerSpec = ServerSpec()
    protocols: tuple[Protocol, ...] = Field(("http", "grpc"), min_length=1)
    tolerance: Tolerance = Tolerance()
    # Dynamic-batching check: this many single-item requests sent at once (0: off).
    batching_requests: int = Field(64, ge=0)
    request_timeout_s: float = Field(120, gt=0)


def run(ctx: StageContext, params: SmokeParams) -> None:
    from stages import _golden
    from stages import _triton_server as ts

    golden = _golden.load(ctx.input("golden"))
    scratch = ctx.workdir / "server"  # backends dir, server log: not outputs
    scratch.mkdir()
    repo = _private_copy(ctx.input("repository"), scratch / "repository")
    models = _formats(repo)
    report: dict[str, Any] = {"models": {}}
    server = None
    try:
        backends = _backends(params, scratch)
        loadable = [m for m, info in models.items() if backends is None or info.backend in backends]
        report["models"] = {m: _skipped(info.backend) for m, info in models.items() if m not in loadable}
        with ts.serving(params.server, repo, loadable, scratch) as server:
            report["server"] = _server_info(server, params)
            report["models"].update(_check_all(server, loadable, models, ctx, params, golden))
    finally:
        _finish(ctx, report, server)
    _verdict(report, server)


def _private_copy(tree: Path, dest: Path) -> Path:
    """Hard-linked copy: the server and its python stubs may write beside the models
    (__pycache__), which must not land in the cache's laid-out tree."""
    shutil.copytree(tree, dest, copy_function=os.link)
    return dest


@dataclass(frozen=True)
class Model:
    fmt: str
    backend: str
    precision: str
    directory: Path


def _formats(repo: Path) -> dict[str, Model]:
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    found = {}
    for path in sorted(repo.glob("*/config.pbtxt")):
        config = text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())
        kind = config.platform or config.backend
        fmt, backend = PLATFORMS.get(kind, (kind, kind))
        precision = config.parameters["deploy_precision"].string_value if "deploy_precision" in config.parameters else "fp32"
        found[path.parent.name] = Model(fmt, backend, precision, path.parent)
    return found


def _backends(params: SmokeParams, workdir: Path) -> set[str] | None:
    from stages import _triton_server as ts

    if params.server.kind in ("url", "docker"):
        return None  # unknown until a load is tried
    launch = ts.locate(params.server, workdir)
    return {p.name for p in launch.backend_dir.iterdir()} if launch.backend_dir else None


def _skipped(backend: str) -> dict[str, Any]:
    return {"status": "skipped", "reason": f"the server has no '{backend}' backend"}


def _server_info(server: Any, params: SmokeParams) -> dict[str, Any]:
    import tritonclient.http as httpclient

    meta = httpclient.InferenceServerClient(server.http).get_server_metadata()
    return {
        "kind": params.server.kind, "version": meta.get("version"), "http": server.http, "grpc": server.grpc,
        "backends": sorted(server.backends) if server.backends is not None else None, "notes": server.notes,
    }


def _check_all(server: Any, loadable: list[str], models: dict[str, Model], ctx: StageContext, params: SmokeParams, golden: Any) -> dict[str, Any]:
    from stages import _triton_checks as checks

    states = checks.wait_models(server, loadable, time.monotonic() + params.server.startup_timeout_s)
    results = {}
    for name in loadable:
        state = states[name]
        if state.get("state") != "READY":
            results[name] = _unavailable(state, models[name].backend, params)
            continue
        results[name] = _check_model(server, name, models[name], ctx, params, _reference(models[name], golden, ctx))
    return results


def _unavailable(state: dict[str, str], backend: str, params: SmokeParams) -> dict[str, Any]:
    reason = state.get("reason", "")
    # A server we did not configure (URL, image) reports a missing backend only on load.
    if params.server.kind in ("url", "docker") and "backend" in reason and "not found" in reason.lower():
        return _skipped(backend) | {"reason": reason}
    return {"status": "failed", "problems": [f"{state.get('state', '?')}: {reason}"]}


def _reference(model: Model, golden: Any, ctx: StageContext) -> Any:
    """FP32 models answer for the whole chain: compared with the eager reference. A
    reduced-precision model is compared with ONNX Runtime running the very file served
    (serving parity); its accuracy against FP32 is the quantize stage's gate."""
    if model.precision == "fp32":
        return golden
    from stages import _onnx
    from stages._golden import Case

    files = sorted(model.directory.glob("*/model.onnx"))
    if not files:
        return golden
    local = _onnx.run_golden(_onnx.session(files[-1]), ctx.config, golden)
    return {label: Case(case.inputs, local[label]) for label, case in golden.items()}


def _check_model(server: Any, name: str, model: Model, ctx: StageContext, params: SmokeParams, golden: Any) -> dict[str, Any]:
    from stages import _parity
    from stages import _triton_checks as checks

    inputs, outputs = checks.expected(ctx.config, model.fmt, golden)
    reference = "eager PyTorch" if model.precision == "fp32" else f"local ONNX Runtime on the served {model.precision} file"
    result: dict[str, Any] = {"status": "passed", "format": model.fmt, "precision": model.precision, "reference": reference, "problems": [], "protocols": {}}
    batch = ctx.config.batch_range()
    for protocol in params.protocols:
        conn = checks.client(server, protocol, params.request_timeout_s)
        meta, config = _describe(conn, protocol, name)
        problems = checks.metadata_problems(meta, inputs, outputs)
        problems += [p for p in [checks.batch_problem(config, batch[2] if batch else None)] if p]
        if problems:
            result["problems"] += [f"{protocol}: {p}" for p in problems]
            break
        table = _golden_parity(conn, protocol, name, golden, inputs, outputs, int(config.get("max_batch_size", 0)), params)
        result["protocols"][protocol] = table
        result["problems"] += [f"{protocol} {p}" for p in _parity.failures(table, params.tolerance)]
    if not result["problems"] and "dynamic_batching" in config and params.batching_requests:
        result["batching"] = checks.batching(server, name, golden["opt"], inputs, params.batching_requests, params.request_timeout_s)
        if not result["batching"]["batched"] or result["batching"]["errors"]:
            result["problems"].append(f"dynamic batching did not batch: {result['batching']}")
    result["status"] = "failed" if result["problems"] else "passed"
    return result


def _describe(conn: Any, protocol: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    if protocol == "grpc":
        return conn.get_model_metadata(name, as_json=True), conn.get_model_config(name, as_json=True)["config"]
    return conn.get_model_metadata(name), conn.get_model_config(name)


def _golden_parity(conn: Any, protocol: str, name: str, golden: Any, inputs: Any, outputs: Any, max_batch_size: int, params: SmokeParams) -> Any:
    from tritonclient.utils import InferenceServerException

    from stages import _parity
    from stages import _triton_checks as checks

    results: dict[Label, Any] = {}
    for label, case in golden.items():
        try:
            results[label] = checks.infer(conn, protocol, name, case, inputs, outputs, max_batch_size)
        except InferenceServerException as exc:
            error = {"passed": False, "error": f"inference failed: {exc.message()}"}
            return {label: {o.spec_name: error for o in outputs}}
    return _parity.compare(results, golden, params.tolerance)


def _finish(ctx: StageContext, report: dict[str, Any], server: Any) -> None:
    ctx.record("smoke", report)
    ctx.record("headline", _headline(report))
    if server is not None and server.log_path.exists():
        ctx.log.info("server log:\n%s", server.log_path.read_text(errors="replace"))
        shutil.copyfile(server.log_path, ctx.output("server_log"))
    ctx.output("report").write_text(json.dumps(report, indent=1))


def _verdict(report: dict[str, Any], server: Any) -> None:
    models = report["models"]
    failed = {m: r for m, r in models.items() if r["status"] == "failed"}
    if failed or not any(r["status"] == "passed" for r in models.values()):
        lines = [f"{m}: {'; '.join(r['problems'])}" for m, r in failed.items()] or ["no model could be smoke-tested"]
        tail = server.log_tail(25) if server is not None else ""
        raise StageFailed("Triton smoke test failed:\n  " + "\n  ".join(lines) + f"\nserver log tail:\n{tail}")


def serve(config: Any, params: SmokeParams, repository: Path, say: Callable[[str], None]) -> None:
    """`deploy serve`: the same server on the published repository, in the foreground,
    until Ctrl-C (which the context manager turns into a clean stop)."""
    import tempfile

    from stages import _triton_checks as checks
    from stages import _triton_server as ts

    with tempfile.TemporaryDirectory(prefix="deploy-serve-") as tmp:
        models = {m: info for m, info in _formats(repository).items() if m.startswith(f"{config.name}_")}
        if not models:
            raise StageFailed(f"no models of '{config.name}' in {repository}; run `deploy run` first")
        backends = _backends(params, Path(tmp))
        loadable = [m for m, info in models.items() if backends is None or info.backend in backends]
        with ts.serving(params.server, repository.absolute(), loadable, Path(tmp)) as server:
            say(f"HTTP  http://{server.http}\ngRPC  {server.grpc}\nserver log  {server.log_path}")
            for name, state in checks.wait_models(server, loadable, time.monotonic() + params.server.startup_timeout_s).items():
                say(f"model {name}: {state.get('state')} {state.get('reason', '')}".rstrip())
            for name in sorted(set(models) - set(loadable)):
                say(f"model {name}: not loaded ({_skipped(models[name].backend)['reason']})")
            say("serving; Ctrl-C stops the server")
            while server.process is None or server.process.poll() is None:
                time.sleep(0.5)
            raise StageFailed(f"tritonserver exited; log tail:\n{server.log_tail()}")


def _headline(report: dict[str, Any]) -> str:
    parts = []
    for name, result in report.get("models", {}).items():
        if result["status"] == "skipped":
            parts.append(f"{name}: skipped")
            continue
        parts.append(f"{name}: {result['status']} ({_model_numbers(result)})")
    return "; ".join(parts)


def _model_numbers(result: dict[str, Any]) -> str:
    from stages._parity import headline

    tables = result.get("protocols", {})
    numbers = [f"{p} {headline(t)}" for p, t in tables.items()] or ["no inference"]
    batched = result.get("batching")
    if batched:
        numbers.append(f"{batched['inferences']} requests in {batched['executions']} executions")
    return ", ".join(numbers)


SPEC = StageSpec(
    name="smoke",
    version=1,
    params=SmokeParams,
    inputs=("repository", "golden"),
    outputs=(Artifact("report", filename="smoke.json"), Artifact("server_log", filename="server.log")),
    run=run,
    uses=frozenset({Section.SHAPES}),
    env=("tritonclient", "nvidia-pytriton", "onnxruntime", "numpy"),
    identity=lambda params: identity(params.server),
    description="real tritonserver: metadata, HTTP + gRPC parity at min/opt/max, dynamic batching",
)
