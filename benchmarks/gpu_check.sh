#!/usr/bin/env bash
# The prepared GPU check (issue 39), for a machine with a CUDA GPU and only torch installed.
#
#   benchmarks/gpu_check.sh --pack     # here, with network: the wheels it brings along
#   benchmarks/gpu_check.sh            # there: install them, run, write the table
#
# There it installs the packages torch does not bring from benchmarks/gpu_wheels/ (into
# .gpu-site/, next to the machine's own torch: nothing of the host's is replaced), then
#   1. runs configs/resnet50.yaml as a GPU host would: bench on cuda with eager,
#      TorchScript, ONNX Runtime, the inductor stages' AOTInductor packages (FP32, and on cuda FP16 and bf16) compiled for
#      cuda, and TensorRT where it is installed (skipped with the reason where not);
#      no OpenVINO stages and no smoke (a GPU host here has no tritonserver);
#   2. runs the gpu-marked tests;
#   3. writes benchmarks/results/gpu_<gpu>.md: every runtime at b1 and b32 (bench.md), the
#      compiled path against TensorRT where TensorRT exists, the versions and the date.
# Budget: under 6 minutes on an H100 (the AOTInductor compile is the longest step).
# A dry run of the script itself on a CPU machine: GPU_CHECK_DEVICE=cpu
# GPU_CHECK_CONFIG=configs/tiny.yaml benchmarks/gpu_check.sh (its table says cpu).
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=benchmarks/gpu_wheels
SITE=.gpu-site
# What the lent GPU machines lacked beside torch, numpy, onnx, onnxruntime, matplotlib, yaml and
# rich (measured there, 2026-11): pinned to the versions this checkout's .venv runs.
PACKAGES=(pydantic pydantic-core annotated-types typing-inspection typing-extensions typer click
  shellingham onnxsim onnx-tool onnxconverter-common tritonclient)

if [ "${1:-}" = "--pack" ]; then
  mkdir -p "$WHEELS"
  pinned=()
  for name in "${PACKAGES[@]}"; do
    pinned+=("$name==$(.venv/bin/python -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$name")")
  done
  for py in 3.11 3.12 3.13; do  # the GPU machine's Python is not known in advance (deploy needs 3.11+)
    .venv/bin/pip download --quiet --only-binary=:all: --python-version "$py" --no-deps -d "$WHEELS" \
      --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
      "${pinned[@]}" || echo "no complete set of wheels for Python $py" >&2
  done
  du -sh "$WHEELS"  # the device tool carries at most 64 MiB
  exit 0
fi

PY=${PYTHON:-python3}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
CONFIG=${GPU_CHECK_CONFIG:-configs/resnet50.yaml}
if [ "$DEVICE" = cuda ]; then
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA GPU visible to torch")'
fi
began=$(date +%s)
"$PY" -m pip install --quiet --no-deps --no-index --target "$SITE" --find-links "$WHEELS" "${PACKAGES[@]}"
export PYTHONPATH="$PWD:$PWD/$SITE${PYTHONPATH:+:$PYTHONPATH}"
gpu=cpu_dry_run
if [ "$DEVICE" = cuda ]; then
  gpu=$("$PY" -c 'import torch; print(torch.cuda.get_device_name(0).split()[1].lower())')
fi
work=$(mktemp -d)
generated="$(dirname "$CONFIG")/.gpu_check.yaml"
trap 'rm -rf "$work" "$generated"' EXIT

"$PY" - "$work" "$CONFIG" "$DEVICE" <<'EOF'
import sys, yaml
from pathlib import Path
work, source, device = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
config = yaml.safe_load(source.read_text())
stages = config["stages"]
for name in ("openvino", "openvino_int8", "smoke", "triton_search", "release", "quantize", "stats"):
    stages.pop(name, None)
stages["inductor"] = {"device": device}
reduced = ["inductor_fp16", "inductor_bf16"] if device == "cuda" else []  # a GPU's precisions
for name in reduced:
    stages[name] = {}
stages["validate"]["runtimes"] = ["onnxruntime", "torchscript"]
stages["triton_config"]["formats"] = ["onnx", "torchscript", "python_inductor", "plan"]
stages["triton_config"]["precisions"] = ["fp32"]
stages["triton_config"]["instance_group"] = {"kind": "gpu" if device == "cuda" else "cpu", "count": 1}
stages["bench"] = {"device": device, "batches": [1, 32] if device == "cuda" else [1, 8],
                   "runtimes": ["eager", "torchscript", "onnxruntime", "inductor", *reduced, "tensorrt"]}
stages.pop("select", None)
for key in ("cache_dir", "repository", "run_dir"):
    config[key] = str(work / key)
# Beside its source: the config's relative paths (model file, labels) stay right.
source.with_name(".gpu_check.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
EOF
"$PY" -m deploy run "$generated" --json "$work/summary.json" || true  # the table says what failed
"$PY" -m pytest -p no:cacheprovider -o addopts="" -m gpu -q tests > "$work/gpu_tests.txt" 2>&1 || true

out="benchmarks/results/gpu_${gpu}.md"
"$PY" - "$work" "$out" "$began" <<'EOF'
import json, subprocess, sys, time
from pathlib import Path
work, out, began = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
summary = json.loads((work / "summary.json").read_text())
bench = next((s for s in summary["stages"] if s["stage"] == "bench"), None)
table = Path(bench["outputs"]["table"]["path"]).read_text() if bench and bench.get("outputs") else "(bench did not run)\n"
device = "a dry run on the CPU, not a GPU measurement" if out.stem.endswith("cpu_dry_run") else "measured on this GPU"
lines = [f"# GPU check: {time.strftime('%Y-%m-%d')}, {device} (benchmarks/gpu_check.sh)", ""]
for stage in summary["stages"]:
    said = stage.get('message') or stage.get('metrics', {}).get('headline') or ''
    lines.append(f"- `{stage['stage']}`: {stage['status']}. {said}".rstrip())
lines += ["", table, "", "gpu-marked tests: " + (work / "gpu_tests.txt").read_text().strip().splitlines()[-1],
          "", f"whole check: {time.time() - began:.0f} s"]
out.write_text("\n".join(lines) + "\n")
print(out.read_text())
EOF
