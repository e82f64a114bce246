"""deploy and Triton Model Navigator 0.14, cold, on the same model, in one invocation: the
wall time each takes to its pick, what each picked, and the two picks timed in one process.

    .venv/bin/python benchmarks/vs_navigator.py [configs/resnet50.yaml]

deploy: `deploy run CONFIG` in a fresh directory with an empty cache (every stage, every
gate: golden, parity at every conversion, the INT8 gates, smoke on a real tritonserver,
bench, select); its time is the process's wall time. Then deploy again, on the config cut to
Navigator's scope on a CPU (FP32 only, one served format, no ensembles: `navigators_scope`),
every gate of what is left kept. Navigator: `nav.torch.optimize` on the
same weights (deploy's loader builds the model) with target_device CPU and its defaults, to
`get_runner`; its time runs from the process's start to that pick. Then, in Navigator's
process, both picks are timed at batch 1 and 8 (benchmarks/vs_navigator_child.py).

Navigator lives in its own venv (.venv-navigator, made here on first use): `pip install
--no-deps triton-model-navigator==0.14.0` and its light dependencies, over this project's
venv (a .pth line), since it requires tensorrt, which cannot be installed here.

Each side's wall time comes with the CPU share other processes took meanwhile (the
machine's busy time less this script's children's): above 25 % the comparison is said to
be contended. Writes benchmarks/results/vs_navigator_<name>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from pipeline_bench import deploy_command  # this directory is the script's: on sys.path

ROOT = Path(__file__).resolve().parents[1]
VENV = ROOT / ".venv-navigator"
NAVIGATOR = "triton-model-navigator==0.14.0"
# Its requirements this project's venv lacks, minus tensorrt / onnxruntime-gpu / modelopt.
NAVIGATOR_DEPS = (
    "dacite~=1.8 fire jsonlines loguru onnx_graphsurgeon polygraphy py-cpuinfo pynvml~=11.5 "
    "python-slugify~=8.0 text-unidecode termcolor wrapt pyee"
).split()


def navigator_python() -> Path:
    """The Navigator venv's interpreter, made on first use."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    here = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    theirs = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    # addsitedir, not a plain path: this venv's own .pth files (deploy's editable install) apply too
    Path(theirs, "zz_deploy_venv.pth").write_text(f"import site; site.addsitedir({here!r})\n")
    target = ["--target", theirs, "--no-deps", "--upgrade", NAVIGATOR, *NAVIGATOR_DEPS]
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", *target], check=True)
    return python


class Others:
    """CPU time other processes took while a child ran: the machine's busy time less this
    process's and its reaped children's."""

    def __enter__(self) -> Others:
        self.at, self.busy, self.ours = time.monotonic(), _busy_s(), _ours_s()
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.monotonic() - self.at
        others = max(0.0, (_busy_s() - self.busy) - (_ours_s() - self.ours))
        self.share = round(others / (wall * (os.cpu_count() or 1)), 3)


def _busy_s() -> float:
    """The machine's busy CPU seconds (deploy's own /proc reading; its `own_s` counts live
    children only, so our reaped children are counted by `_ours_s` instead)."""
    from deploy.runtimes.contention import usage

    now = usage()
    if now is None:
        sys.exit("this benchmark reads /proc (Linux)")
    return now.busy_s


def _ours_s() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def run_deploy(config: Path, scratch: Path) -> dict[str, Any]:
    command = deploy_command()
    start = time.perf_counter()
    with Others() as others:
        proc = subprocess.run([*command, "run", str(config)], cwd=scratch, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        sys.exit(f"deploy run failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    summary = json.loads(
        (scratch / "runs" / yaml.safe_load(config.read_text())["name"] / "summary.json").read_text()
    )
    return {"wall_s": round(wall, 1), "others_share": others.share, **_deploy_pick(summary)}


def _deploy_pick(summary: dict[str, Any]) -> dict[str, Any]:
    """The latency objective's pick, its Triton model and the file its runtime loads."""
    from deploy.runtimes.catalog import artifact_of

    stages = {s["stage"]: s for s in summary["stages"]}
    selection = json.loads(Path(stages["select"]["outputs"]["selection"]["path"]).read_text())
    chosen = selection["objectives"][0]
    runtime = next(c["runtime"] for c in chosen["candidates"] if c["verdict"] == "selected")
    artifact = artifact_of(runtime)
    where = next(
        Path(s["outputs"][artifact]["path"]) for s in stages.values() if artifact in s.get("outputs", {})
    )
    files = (
        sorted(p for p in where.rglob("*") if p.suffix in (".xml", ".onnx", ".pt"))
        if where.is_dir()
        else [where]
    )
    seconds = {name: s["seconds"] for name, s in stages.items()}
    return {
        "pick": runtime,
        "model": chosen.get("model"),
        "file": str(files[0]),
        "stage_s": seconds,
    }


def run_navigator(python: Path, config: Path, deploy_file: str, scratch: Path) -> dict[str, Any]:
    out = scratch / "navigator.json"
    child = [str(python), str(ROOT / "benchmarks" / "vs_navigator_child.py"), str(config)]
    start_wall, start = time.time(), time.perf_counter()
    with Others() as others, open(scratch / "navigator.log", "w") as log:
        proc = subprocess.run(
            [*child, str(scratch / "ws"), deploy_file, str(out)], stdout=log, stderr=subprocess.STDOUT
        )
    if not out.exists():
        sys.exit(f"Navigator failed ({proc.returncode}); its log: {scratch / 'navigator.log'}")
    found = json.loads(out.read_text())
    found["wall_s"] = round(found.pop("picked_at") - start_wall, 1)
    found["process_s"] = round(time.perf_counter() - start, 1)  # with the speed timing after the pick
    return {**found, "others_share": others.share, "returncode": proc.returncode}


def navigators_scope(config: Path, scratch: Path) -> Path:
    """The config cut to what Navigator decides among on a CPU: FP32 only (no INT8, no
    OpenVINO), one served format and no ensembles; every gate of what is left is kept
    (golden, trace / export / simplify parity, validate, smoke on the server, bench, select)."""
    data = yaml.safe_load(config.read_text())
    stages = data["stages"]
    for name in ("quantize", "openvino", "openvino_int8"):
        stages.pop(name, None)
    triton = stages["triton_config"]
    triton |= {"formats": ["python"], "precisions": ["fp32"]}
    triton.pop("preprocess", None)
    triton.pop("postprocess", None)
    stages["validate"]["runtimes"] = ["onnxruntime", "torchscript"]
    stages["bench"]["runtimes"] = ["eager", "torchscript", "onnxruntime", "triton"]
    path = scratch / f"{data['name']}_navigators_scope.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("config", nargs="?", default=str(ROOT / "configs" / "resnet50.yaml"))
    args = parser.parse_args()
    config = Path(args.config).resolve()
    python = navigator_python()
    tmp = Path(tempfile.mkdtemp(prefix="vs-navigator-"))  # kept when a side fails: its logs are there
    for side in ("deploy", "scope", "navigator"):
        (tmp / side).mkdir()
    ours = run_deploy(config, tmp / "deploy")
    print(f"deploy: {ours['wall_s']} s to {ours['pick']} (others {ours['others_share']:.0%})", flush=True)
    print(f"  stage seconds: {ours['stage_s']}", flush=True)
    scoped = run_deploy(navigators_scope(config, tmp), tmp / "scope")
    print(
        f"deploy, Navigator's scope: {scoped['wall_s']} s to {scoped['pick']} (others {scoped['others_share']:.0%})"
    )
    print(f"  stage seconds: {scoped['stage_s']}", flush=True)
    theirs = run_navigator(python, config, ours["file"], tmp / "navigator")
    if theirs["returncode"] == 0:
        shutil.rmtree(tmp)
    else:
        print(f"Navigator's process failed after its pick ({theirs['returncode']}): {tmp / 'navigator'}")
    print(f"navigator: {theirs['wall_s']} s to {theirs['format']} on {theirs['runner']}")
    ratio = round(ours["wall_s"] / theirs["wall_s"], 2)
    scoped_ratio = round(scoped["wall_s"] / theirs["wall_s"], 2)
    contended = max(ours["others_share"], scoped["others_share"], theirs["others_share"]) > 0.25
    result = {
        "config": str(config.relative_to(ROOT)),
        "deploy": ours,
        "deploy_navigators_scope": scoped,
        "navigator": theirs,
        "wall_ratio": ratio,
        "wall_ratio_navigators_scope": scoped_ratio,
        "contended": contended,
    }
    name = yaml.safe_load(config.read_text())["name"]
    out = ROOT / "benchmarks" / "results" / f"vs_navigator_{name}.json"
    out.write_text(json.dumps(result, indent=1))
    said = " (CONTENDED: not a verdict)" if contended else ""
    print(f"deploy / navigator wall time: {ratio}x; in Navigator's scope {scoped_ratio}x{said}; {out}")
    for row in theirs.get("speeds", []):
        print(
            f"  b{row['batch']}: navigator {row['navigator_ms']:.2f} ms, deploy {row['deploy_ms']:.2f} ms, "
            f"deploy/navigator time {row['ratio']}"
        )


if __name__ == "__main__":
    main()
