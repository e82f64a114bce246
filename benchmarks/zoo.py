"""Public architectures nobody configured by hand, through the whole pipeline, on both
ONNX exporters and on `auto` (the default: torch.export, the legacy exporter where it
fails): golden -> export -> simplify -> validate -> triton_config -> smoke (a real
tritonserver, python backend on ONNX Runtime, concurrent clients).

    .venv/bin/pip install timm==1.0.31    # the two timm models; without it they fail, saying so
    .venv/bin/python benchmarks/zoo.py [--only resnet18,vit_b_16] [--exporters torchscript]

Each model gets a config written from the entry below (factory, shapes, which output is
which) into a scratch directory; one cache per model, shared by both exporters, so the
golden references are computed once. Prints model x exporter x stage (ran / failed with
the reason / skipped / not run) as Markdown and writes benchmarks/results/zoo.json and
benchmarks/results/zoo.md. torchvision / timm models are built with random weights
(no network here); the parity gates compare each format with eager on the same weights.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
STAGES = ("golden", "export", "simplify", "validate", "triton_config", "smoke")
EXPORTERS = ("torchscript", "dynamo", "auto")
MODELS = str(ROOT / "benchmarks" / "zoo_models.py")
TIMEOUT_S = 1800


def image(size: int = 224, channels: int = 3, name: str = "image") -> dict[str, Any]:
    return {
        "name": name,
        "dims": ["batch", channels, size, size],
        "min": [1, channels, size, size],
        "opt": [2, channels, size, size],
        "max": [4, channels, size, size],
    }


def tokens(name: str, high: int, max_len: int = 64) -> dict[str, Any]:
    return {
        "name": name,
        "dtype": "int64",
        "dims": ["batch", "seq"],
        "min": [1, 8],
        "opt": [2, min(32, max_len)],
        "max": [4, max_len],
        "value_range": [0, high],
    }


@dataclass(frozen=True)
class Entry:
    name: str
    why: str  # what this model proves
    model: dict[str, Any]
    inputs: list[dict[str, Any]]
    outputs: list[dict[str, Any]]
    validate: dict[str, Any] = field(default_factory=dict)
    stages: dict[str, Any] = field(default_factory=dict)  # merged over the zoo's stage settings
    top: dict[str, Any] = field(default_factory=dict)  # top-level keys (batch_dim)


# Box coordinates are decoded through exp(): float noise grows with their scale (pixels).
DETECTION_TOLERANCE = {"tolerance": {"rtol": 0.01}}


def detection(name: str, why: str, builder: str) -> Entry:
    """A torchvision detector: a list of images in, one dict per image out (padded to 100
    rows with a count); the export unrolls the list, so the batch is fixed at 1."""
    shape = [1, 3, 320, 320]
    return Entry(
        name,
        why,
        {"file": MODELS, "callable": builder, "detections": {"max_detections": 100}},
        # torchvision's detectors take images of [0, 1] and normalise them themselves.
        [{"name": "images", "dims": shape, "min": shape, "opt": shape, "max": shape, "value_range": [0, 1]}],
        [{"name": n} for n in ("boxes", "scores", "labels", "num_detections")],
        validate={"rtol": 0.01},
        stages={
            "export": DETECTION_TOLERANCE,
            "simplify": DETECTION_TOLERANCE,
            "triton_config": {"max_batch_size": 0},
            "smoke": {**DETECTION_TOLERANCE, "batching_requests": 16},
        },
        top={"batch_dim": None},
    )


def vision(name: str, why: str, factory: str, **kwargs: Any) -> Entry:
    return Entry(
        name, why, {"factory": factory, "kwargs": kwargs}, [image()], [{"name": "logits", "kind": "logits"}]
    )


ZOO = [
    vision("resnet18", "torchvision CNN", "torchvision.models:resnet18"),
    vision("mobilenet_v3_small", "depthwise-separable CNN", "torchvision.models:mobilenet_v3_small"),
    vision("efficientnet_b0", "depthwise CNN, SiLU, squeeze-excite", "torchvision.models:efficientnet_b0"),
    vision("convnext_tiny", "modern CNN, LayerNorm", "torchvision.models:convnext_tiny"),
    Entry(
        "vit_b_16",
        "vision transformer (torchvision zero-inits its head: a random one here)",
        {"file": str(ROOT / "benchmarks" / "zoo_models.py"), "callable": "vit_b_16"},
        [image()],
        [{"name": "logits", "kind": "logits"}],
    ),
    vision("swin_t", "windowed-attention transformer", "torchvision.models:swin_t"),
    Entry(
        "deeplabv3_mobilenet_v3",
        "segmentation, dict output {'out', 'aux'}",
        {
            "factory": "torchvision.models.segmentation:deeplabv3_mobilenet_v3_large",
            "kwargs": {"weights_backbone": None, "aux_loss": True},
        },
        [image(224)],
        [{"name": "out"}, {"name": "aux"}],
    ),
    Entry(
        "fpn_backbone",
        "detection backbone (ResNet-18 FPN), OrderedDict of 5 feature maps",
        {"file": str(ROOT / "benchmarks" / "zoo_models.py"), "callable": "fpn_backbone"},
        [image(224)],
        [{"name": "p2", "path": "0"}, {"name": "p5", "path": "3"}, {"name": "pool", "path": "pool"}],
    ),
    Entry(
        "timm_deit_tiny",
        "timm vision transformer",
        {
            "factory": "timm:create_model",
            "kwargs": {"model_name": "deit_tiny_patch16_224", "pretrained": False},
        },
        [image()],
        [{"name": "logits", "kind": "logits"}],
    ),
    Entry(
        "timm_mobilevit_xxs",
        "timm CNN/transformer hybrid",
        {"factory": "timm:create_model", "kwargs": {"model_name": "mobilevit_xxs", "pretrained": False}},
        [image(256)],
        [{"name": "logits", "kind": "logits"}],
    ),
    Entry(
        "minilm_bert",
        "Hugging Face BertModel, real packaged weights, keyword inputs, ModelOutput",
        {
            "file": str(ROOT / "benchmarks" / "zoo_models.py"),
            "callable": "minilm_bert",
            "inputs_by": "keyword",
        },
        [tokens("input_ids", 30521), tokens("attention_mask", 1)],
        [{"name": "last_hidden_state", "kind": "embedding", "path": "last_hidden_state"}],
    ),
    Entry(
        "bert_classifier",
        "Hugging Face BertForSequenceClassification, 3 keyword inputs, SequenceClassifierOutput",
        {"file": str(ROOT / "benchmarks" / "zoo_models.py"), "callable": "bert_classifier"},
        [tokens("input_ids", 30521), tokens("attention_mask", 1), tokens("token_type_ids", 1)],
        [{"name": "logits", "kind": "logits"}],
    ),
    Entry(
        "kwargs_only",
        "forward(**inputs) only, dict output",
        {"file": str(ROOT / "benchmarks" / "zoo_models.py"), "callable": "kwargs_only"},
        [
            image(32, name="pixels"),
            {"name": "meta", "dims": ["batch", 4], "min": [1, 4], "opt": [2, 4], "max": [4, 4]},
        ],
        [{"name": "scores", "kind": "logits"}, {"name": "features"}],
    ),
    detection("ssdlite", "detection, list of per-image dicts (NMS), MobileNetV3", "ssdlite"),
    detection("retinanet", "detection, ResNet-50 FPN, focal-loss head", "retinanet"),
    detection("fcos", "detection, ResNet-50 FPN, anchor-free", "fcos"),
    Entry(
        "t5_encoder",
        "Hugging Face T5 encoder (small config): a reshape over dynamic dims",
        {"file": MODELS, "callable": "t5_encoder"},
        [tokens("input_ids", 99), tokens("attention_mask", 1)],
        [{"name": "last_hidden_state", "kind": "embedding"}],
    ),
    Entry(
        "raft_small",
        "optical flow (torchvision RAFT small): two images, iterative refinement",
        {"file": MODELS, "callable": "raft_small", "forward_kwargs": {"num_flow_updates": 4}},
        [image(128, name="image1"), image(128, name="image2")],
        [{"name": "flow", "path": "3"}],  # the last of the 4 refinements
    ),
    Entry(
        "clip",
        "Hugging Face CLIP (small config): logits_per_image depends on the batch",
        {"file": MODELS, "callable": "small_clip"},
        [
            tokens("input_ids", 99, 16),
            {
                "name": "pixel_values",
                "dims": ["batch", 3, 32, 32],
                "min": [1, 3, 32, 32],
                "opt": [2, 3, 32, 32],
                "max": [4, 3, 32, 32],
            },
            tokens("attention_mask", 1, 16),
        ],
        [{"name": "logits_per_image"}, {"name": "text_embeds", "kind": "embedding"}],
        stages={"triton_config": {"max_batch_size": 0}},
    ),
    Entry(
        "over_2gb",
        "synthetic MLP, 2.15 GB of weights (external data)",
        {"file": str(ROOT / "benchmarks" / "zoo_models.py"), "callable": "over_2gb"},
        [{"name": "x", "dims": ["batch", 8192], "min": [1, 8192], "opt": [2, 8192], "max": [4, 8192]}],
        [{"name": "y"}],
    ),
]


def config_for(entry: Entry, exporter: str, work: Path) -> Path:
    opset = 17 if exporter == "torchscript" else 18
    stages: dict[str, dict[str, Any]] = {
        "export": {"exporter": exporter, "opset": opset},
        "simplify": {"on_failure": "passthrough"},
        "validate": {"runtimes": ["onnxruntime"], **entry.validate},
        "triton_config": {"formats": ["python"], "max_batch_size": 4},
        "smoke": {},
    }
    for name, settings in entry.stages.items():
        stages[name] = {**stages[name], **settings}
    data = {
        "name": entry.name,
        "model": entry.model,
        "inputs": entry.inputs,
        "outputs": entry.outputs,
        **entry.top,
        "cache_dir": str(work / "cache"),
        "repository": str(work / f"repository-{exporter}"),
        "run_dir": str(work / f"runs-{exporter}"),
        "stages": stages,
    }
    path = work / f"{entry.name}-{exporter}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def run_one(entry: Entry, exporter: str, work: Path) -> dict[str, Any]:
    path = config_for(entry, exporter, work)
    summary_path = work / f"summary-{exporter}.json"
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "deploy", "run", str(path), "--json", str(summary_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    row: dict[str, Any] = {"model": entry.name, "exporter": exporter, "exit": proc.returncode}
    row["seconds"] = round(time.perf_counter() - started, 1)
    if not summary_path.exists():  # the config itself was refused: no stage ran
        row["error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:]
        return row
    stages = {s["stage"]: s for s in json.loads(summary_path.read_text())["stages"]}
    row["stages"] = {name: cell(stages.get(name)) for name in STAGES}
    row["reasons"] = {name: stages[name]["reasons"] for name in STAGES if name in stages}  # why each ran
    return row


def cell(stage: dict[str, Any] | None) -> str:
    if stage is None:
        return "—"
    status = stage["status"]
    if status == "failed":
        lines = [line.strip() for line in stage["message"].splitlines() if line.strip()]
        return f"failed: {' '.join(lines[:3])[:220]}"  # a config error's issues follow its first line
    if status == "skipped":
        return f"skipped: {stage['message'][:120]}"
    note = stage.get("metrics", {}).get("skipped_because")
    used = stage.get("metrics", {}).get("exporter", {})
    if used.get("asked") == "auto":  # which exporter auto took
        note = f"{used.get('used')}" + (
            " after torch.export failed" if len(used.get("attempts", [])) > 1 else ""
        )
    return f"{status} ({note[:60]})" if note else status


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| model | exporter | " + " | ".join(STAGES) + " | s |",
        "|---|---|" + "---|" * len(STAGES) + "---|",
    ]
    for row in rows:
        cells = (
            [row["stages"].get(s, "") for s in STAGES]
            if "stages" in row
            else [str(row.get("error"))] + [""] * 5
        )
        lines.append(
            f"| {row['model']} | {row['exporter']} | "
            + " | ".join(c.replace("|", "/") for c in cells)
            + f" | {row['seconds']} |"
        )
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """The README's table: per model, per exporter, how far it got and in how long; then
    the pass rate per exporter (through smoke)."""
    why = {e.name: e.why for e in ZOO}
    exporters = [x for x in EXPORTERS if any(r["exporter"] == x for r in rows)]
    by_key = {(r["model"], r["exporter"]): r for r in rows}
    models = list(dict.fromkeys(r["model"] for r in rows))
    lines = [
        "| model | what it proves | " + " | ".join(exporters) + " |",
        "|---|---|" + "---|" * len(exporters),
    ]
    for model in models:
        cells = [_outcome(by_key.get((model, x))) for x in exporters]
        lines.append(f"| {model} | {why.get(model, '')} | " + " | ".join(cells) + " |")
    rates = [f"{x}: {_passed(rows, x)} of {sum(r['exporter'] == x for r in rows)}" for x in exporters]
    return "\n".join(lines) + "\n\nthrough smoke: " + ", ".join(rates)


# A stage that passed in this run, or earlier with the same key (auto's graph is often
# the dynamo row's, byte for byte: everything after export is then cached).
PASSED = ("ran", "cached")


def _passed(rows: list[dict[str, Any]], exporter: str) -> int:
    return sum(r["exporter"] == exporter and r.get("stages", {}).get("smoke") in PASSED for r in rows)


def _outcome(row: dict[str, Any] | None) -> str:
    if row is None:
        return ""
    stages = row.get("stages", {})
    if stages.get("smoke") in PASSED:
        how = str(stages.get("export", "")).partition("(")[2].rstrip(")")
        return f"smoke passed{f' ({how})' if how else ''}, {row['seconds']} s"
    failed = next((s for s in STAGES if str(stages.get(s, "")).startswith("failed")), None)
    if failed is None:
        return f"exit {row['exit']}"
    reason = str(stages[failed]).removeprefix("failed: ").removeprefix("torch.export failed: ")
    return f"{failed} failed: {reason.split(':')[0][:70]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated model names")
    parser.add_argument("--exporters", default=",".join(EXPORTERS))
    parser.add_argument(
        "--summary", action="store_true", help="print the README's table from benchmarks/results/zoo.json"
    )
    args = parser.parse_args()
    if args.summary:
        print(summary(json.loads((ROOT / "benchmarks" / "results" / "zoo.json").read_text())))
        return
    chosen = [e for e in ZOO if not args.only or e.name in args.only.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="zoo-") as tmp:
        for entry in chosen:
            work = Path(tmp) / entry.name
            work.mkdir()
            for exporter in args.exporters.split(","):
                rows.append(run_one(entry, exporter, work))
                print(markdown(rows[-1:]).splitlines()[-1], flush=True)
    results = ROOT / "benchmarks" / "results"
    results.mkdir(exist_ok=True)
    if args.only and (results / "zoo.json").exists():  # rerun some: replace their rows only
        rows = merged(json.loads((results / "zoo.json").read_text()), rows)
    table = markdown(rows)
    print(table)
    (results / "zoo.json").write_text(json.dumps(rows, indent=1))
    (results / "zoo.md").write_text(table + "\n")


def merged(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of both, the new winning, in the zoo's order."""
    by_key = {(r["model"], r["exporter"]): r for r in [*old, *new]}
    order = {e.name: i for i, e in enumerate(ZOO)}
    return sorted(
        by_key.values(), key=lambda r: (order.get(r["model"], len(order)), EXPORTERS.index(r["exporter"]))
    )


if __name__ == "__main__":
    main()
