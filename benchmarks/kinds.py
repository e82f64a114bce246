"""Models as they come, as a new user meets deploy: `deploy init` writes each config from
the model and the shapes in its documentation, `deploy run` runs that config unchanged,
and a model that passes smoke is checked once more, independently: its published
repository on a fresh tritonserver, at a shape none of the stages used, against eager.
A model whose forward no export can match must be refused, naming the cause.

    .venv/bin/python benchmarks/kinds.py [--only tagger,llama] [--keep DIR]

Prints the table model | init | run | exporter | smoke | fresh check | cause when it failed
(Markdown) and writes benchmarks/results/kinds.json and kinds.md. The models are
benchmarks/kinds_models.py (random weights: mechanics only). tests/matrix/test_model_kinds_*.py
run the same list (the Jenkins matrix's `Model kinds` step and .ci/run).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "benchmarks" / "kinds_models.py"
DEPLOY = [sys.executable, "-m", "deploy"]
TIMEOUT_S = 900


@dataclass(frozen=True)
class Kind:
    name: str
    why: str
    inputs: tuple[str, ...]  # deploy init --input ...
    extra: tuple[str, ...] = ()  # other deploy init options
    refused: str = ""  # where a correct deploy must refuse: the words it must say ("" = it must pass smoke)
    check_rtol: float = 1e-3  # the fresh check's tolerance (detections decode boxes through exp())


KINDS = (
    Kind(
        "scatter_graph",
        "no batch dim: node features [N, 32], edges int64 [2, E] (scatter-add)",
        ("x:float32:4x32/16x32/64x32", "edge_index:int64:2x8/2x32/2x128"),
    ),
    Kind(
        "tagger",
        "packed LSTM: tokens [b, s], lengths [b] (a per-sample scalar)",
        ("tokens:int64:1x4/2x8/4x16", "lengths:int64:1/2/4"),
    ),
    Kind(
        "tiny_unet",
        "diffusion-style block: a 0-d timestep; torch.chunk (Split)",
        ("sample:float32:1x4x8x8/2x4x16x16/4x4x32x32", "timestep:int64://"),
    ),
    Kind(
        "bag",
        "flat indices with offsets (EmbeddingBag): two dims of their own, no batch",
        ("indices:int64:4/16/64", "offsets:int64:1/4/8"),
    ),
    Kind(
        "named_cnn",
        "a NamedTuple output: its field names become the outputs",
        ("image:float32:1x3x8x8/2x3x8x8/4x3x8x8",),
    ),
    Kind(
        "small_bert",
        "two int64 inputs by keyword: token ids, an attention mask",
        ("input_ids:int64:1x8/2x16/4x32", "attention_mask:int64:1x8/2x16/4x32"),
    ),
    Kind(
        "llama",
        "a decoder returning its DynamicCache: the cache's keys and values are outputs",
        ("input_ids:int64:1x4/2x8/4x16",),
    ),
    Kind(
        "mask_rcnn",
        "instance segmentation: a list of images, per-image masks at the image's size",
        ("images:float32:1x3x64x64/1x3x96x112/1x3x128x128",),
        check_rtol=0.01,
    ),
    Kind(
        "vit_mae",
        "ViT-MAE with its masking noise passed as an input",
        ("pixel_values:float32:1x3x32x32/2x3x32x32/4x3x32x32", "noise:float32:1x16/2x16/4x16"),
    ),
    Kind(
        "convnext",
        "Hugging Face ConvNeXt: a ModelOutput with pooling",
        ("pixel_values:float32:1x3x32x32/2x3x32x32/4x3x64x64",),
    ),
    Kind(
        "segformer",
        "Hugging Face SegFormer: logits at a quarter of the image",
        ("pixel_values:float32:1x3x32x32/2x3x64x64/4x3x64x64",),
    ),
    Kind(
        "whisper_encoder",
        "Hugging Face Whisper's encoder: log-mel frames of a fixed length (its positions)",
        ("input_features:float32:1x8x32/2x8x32/4x8x32",),
    ),
    Kind(
        "resizer",
        "resizes inside the model to a size computed in Python: wrong off the three points",
        ("image:float32:1x3x100x100/2x3x160x160/4x3x320x320",),
        refused="but passes at min / opt / max",
    ),
    Kind(
        "branchy",
        "a Python `if` on the data: one branch frozen into any trace",
        ("x:float32:1x8/2x8/4x8",),
        refused="froze a value of the data into the graph at",
    ),
    Kind(
        "masker",
        "draws a random mask in forward (ViT-MAE without its noise input)",
        ("x:float32:1x8x16/2x8x16/4x8x16",),
        refused="the model's forward is not deterministic",
    ),
)


@dataclass
class Row:
    model: str
    init: str = "not run"
    run: str = "not run"
    exporter: str = ""
    smoke: str = ""
    fresh: str = ""  # the independent check on a fresh server at a new shape
    cause: str = ""
    seconds: float = 0.0
    expected: bool = False  # refused where it must be, passed where it must
    extra: dict[str, object] = field(default_factory=dict)


def deploy(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*DEPLOY, *args], cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)


def said(done: subprocess.CompletedProcess[str]) -> str:
    return " ".join((done.stdout + done.stderr).split())


def try_kind(kind: Kind, work: Path) -> Row:
    """init, run, and the fresh check where smoke passed."""
    row, started = Row(kind.name), time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(MODELS, work / MODELS.name)
    args = ["init", "--file", MODELS.name, "--callable", kind.name, "-o", f"{kind.name}.yaml", "--overwrite"]
    made = deploy([*args, *[a for i in kind.inputs for a in ("--input", i)], *kind.extra], work)
    row.init = "wrote" if made.returncode == 0 else f"refused (exit {made.returncode})"
    if made.returncode != 0:
        row.cause = said(made)
    else:
        _run(row, kind, work)
    row.seconds = round(time.monotonic() - started, 1)
    row.expected = (
        (kind.refused in row.cause)
        if kind.refused
        else (row.smoke == "passed" and row.fresh.startswith("ok"))
    )
    return row


def _run(row: Row, kind: Kind, work: Path) -> None:
    done = deploy(["run", f"{kind.name}.yaml"], work)
    row.run = "ok" if done.returncode == 0 else f"failed (exit {done.returncode})"
    summary = json.loads((work / "runs" / kind.name / "summary.json").read_text())
    stages = {s["stage"]: s for s in summary["stages"]}
    export = stages.get("export", {}).get("metrics", {}).get("exporter", {})
    row.exporter = str(export.get("used") or "")
    row.smoke = str(stages.get("smoke", {}).get("status", "not run"))
    row.smoke = "passed" if row.smoke == "ran" else row.smoke
    failed = next((s for s in summary["stages"] if s.get("status") == "failed"), None)
    row.cause = str(failed["message"]) if failed else ""
    if done.returncode == 0:
        row.fresh = fresh_check(work / f"{kind.name}.yaml", kind.check_rtol)


def fresh_check(config_path: Path, rtol: float) -> str:
    """The published repository on a tritonserver of its own, at a shape drawn with
    another seed than golden's, against eager: "ok (cos, max |Δ|)" or what differed."""
    import numpy as np

    from deploy.gates import cases, parity
    from deploy.gates.detection_parity import layout_of
    from deploy.gates.references import Case
    from deploy.gates.tolerance import Tolerance
    from deploy.modelio.loading import load_adapted
    from deploy.pipeline.graph.project import load_project
    from deploy.runtimes.arrays import inputs_at
    from deploy.runtimes.torchrt import TorchModule
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec
    from deploy.stages.smoke import checks

    config = load_project(config_path).config
    repository = (
        config.repository if config.repository.is_absolute() else config_path.parent / config.repository
    )
    shapes = cases.sampled_shapes(config.inputs, 1, seed=4242).get("sample1") or {
        s.name: s.opt for s in config.inputs
    }
    feeds = inputs_at(config.inputs, shapes, np.random.default_rng(4242))
    eager = TorchModule(load_adapted(config, feeds), config.input_names(), config.output_names())
    case = Case(feeds, eager.infer(feeds))
    name = f"{config.name}_python"
    with (
        tempfile.TemporaryDirectory() as scratch,
        serve_repository(ServerSpec(startup_timeout_s=120), repository, Path(scratch)) as served,
    ):
        import tritonclient.http as httpclient

        conn = httpclient.InferenceServerClient(served.server.http)
        inputs, outputs = checks.expected(config, "python", {"opt": case}, served.found[name].batched)
        max_batch = int(conn.get_model_config(name).get("max_batch_size", 0))
        got = checks.infer(checks.ModelEndpoint(conn, "http", name, max_batch), case, inputs, outputs)
        conn.close()
    tol = Tolerance(atol=1e-4, rtol=rtol, min_cosine=0.9999)
    table = parity.compare({"fresh": got}, {"fresh": case}, tol, layout_of(config))
    shown = ", ".join(f"{n} {list(a.shape)}" for n, a in feeds.items())
    bad = parity.failures(table, tol)
    return (
        f"ok at {shown}: {parity.headline(table, tol)}"
        if not bad
        else f"DIFFERS at {shown}: {'; '.join(bad)}"
    )


def table(rows: list[Row]) -> str:
    lines = [
        "| model | init | run | exporter | smoke | fresh check (new shape, own server) | as it must | cause when it failed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cause = r.cause.replace("|", "/")[:400]
        fresh = r.fresh.split(":")[0] if r.fresh else ""
        lines.append(
            f"| {r.model} | {r.init} | {r.run} | {r.exporter} | {r.smoke} | {fresh} | {'yes' if r.expected else 'NO'} | {cause} |"
        )
    return "\n".join(lines)


def _merged(path: Path, rows: list[Row]) -> list[Row]:
    """`--only` reruns some models: their rows replace those of the last full run, in KINDS' order."""
    try:
        earlier = {r["model"]: Row(**r) for r in json.loads(path.read_text())}
    except (OSError, ValueError, TypeError):
        earlier = {}
    earlier |= {r.model: r for r in rows}
    return [earlier[k.name] for k in KINDS if k.name in earlier]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--keep", type=Path, default=None, help="work here (kept) instead of a temporary dir")
    options = parser.parse_args()
    chosen = [k for k in KINDS if not options.only or k.name in options.only.split(",")]
    base = options.keep or Path(tempfile.mkdtemp(prefix="kinds-"))
    rows = []
    for kind in chosen:
        rows.append(try_kind(kind, base / kind.name))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    out = ROOT / "benchmarks" / "results"
    rows = _merged(out / "kinds.json", rows) if options.only else rows
    (out / "kinds.json").write_text(json.dumps([asdict(r) for r in rows], indent=1))
    (out / "kinds.md").write_text(table(rows) + "\n")
    print(table(rows))
    if options.keep is None:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
