"""What a published service costs over its bare model, and where the time goes.

    .venv/bin/deploy run configs/resnet50.yaml        # publishes model_repository/
    .venv/bin/python benchmarks/service_overhead.py [--repository model_repository] [--model resnet50_python]

Serves the repository on the embedded tritonserver, then alternates rounds of sequential
batch-1 requests to the bare model (random tensors at the opt shape) and to its ensemble
(a JPEG photo from scikit-learn, 640x427), so both see the same machine. Reports the
client-side median latency of each and the server's own split of one ensemble request:
each step's compute time (Triton's statistics) and what is left (the hops between
steps, the bytes' transfer). Then times the pre-processing's parts in this process
(JPEG decode, resize, crop + normalise) with PIL and numpy, as the pre model does them.
Writes benchmarks/results/service_overhead_<model>.json.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
ROUNDS, PER_ROUND = 6, 15


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repository", type=Path, default=Path("model_repository"))
    parser.add_argument("--model", default="resnet50_python")
    args = parser.parse_args()
    served, timed = _served(args.repository.resolve(), args.model)
    local = _in_process()
    result = {"model": args.model, **served, "in_process_ms": local, "client_ms": timed}
    _print(result)
    out = ROOT / "benchmarks" / "results" / f"service_overhead_{args.model}.json"
    out.write_text(json.dumps(result, indent=1))
    print(f"wrote {out}")


def _photo() -> bytes:
    from PIL import Image
    from sklearn.datasets import load_sample_images

    buffer = io.BytesIO()
    Image.fromarray(load_sample_images().images[0]).save(buffer, format="JPEG")
    return buffer.getvalue()


def _served(repository: Path, model: str) -> tuple[dict[str, object], dict[str, float]]:
    import tritonclient.grpc as grpcclient

    from deploy.serving.launch import serve_repository
    from deploy.serving.requests import statistics as server_statistics
    from deploy.serving.server_spec import ServerSpec

    ensemble = f"{model}_ensemble"
    with tempfile.TemporaryDirectory() as scratch:
        with serve_repository(ServerSpec(), repository, Path(scratch), _only(model, ensemble)) as served:
            conn = grpcclient.InferenceServerClient(served.server.grpc)
            bare_input = _bare_input(conn, model)
            photo = _photo()
            times: dict[str, list[float]] = {model: [], ensemble: []}
            for _ in range(ROUNDS):
                times[model] += _round(conn, model, bare_input)
                times[ensemble] += _round(conn, ensemble, _bytes_input(photo))
            steps = [s.model_name for s in conn.get_model_config(ensemble).config.ensemble_scheduling.step]
            split = {m: _per_execution(server_statistics(conn, m)) for m in [ensemble, *steps]}
    timed = {name: statistics.median(values) for name, values in times.items()}
    return {"server_ms_per_request": split, "steps": steps}, timed


def _only(model: str, ensemble: str):
    def choose(found, backends):
        return [model, ensemble, *[s for s in found[ensemble].steps if s != model]]

    return choose


def _bare_input(conn, model):
    import tritonclient.grpc as grpcclient

    spec = conn.get_model_metadata(model).inputs[0]
    shape = [1] + [int(d) for d in spec.shape[1:]]
    item = grpcclient.InferInput(spec.name, shape, spec.datatype)
    item.set_data_from_numpy(np.random.default_rng(0).standard_normal(shape).astype(np.float32))
    return [item]


def _bytes_input(data: bytes):
    import tritonclient.grpc as grpcclient

    item = grpcclient.InferInput("image", [1, 1], "BYTES")
    item.set_data_from_numpy(np.array([[data]], dtype=np.object_))
    return [item]


def _round(conn, name: str, inputs) -> list[float]:
    found = []
    for _ in range(PER_ROUND):
        started = time.perf_counter()
        conn.infer(name, inputs)
        found.append((time.perf_counter() - started) * 1000)
    return found


def _per_execution(stats) -> dict[str, float]:
    """Mean ms per request of each phase Triton times for this model."""
    requests = max(stats.requests, 1)
    return {phase.removesuffix("_ns"): round(ns / requests / 1e6, 3) for phase, ns in stats.phases_ns.items()}


def _in_process() -> dict[str, float]:
    """The pre model's work on the same photo, part by part (median of 30)."""
    from PIL import Image

    data = _photo()
    parts: dict[str, list[float]] = {"decode": [], "resize": [], "crop_normalize": []}
    mean, std = np.array([0.485, 0.456, 0.406], np.float32), np.array([0.229, 0.224, 0.225], np.float32)
    for _ in range(30):
        t0 = time.perf_counter()
        image = Image.open(io.BytesIO(data)).convert("RGB")
        t1 = time.perf_counter()
        image = image.resize((384, 256), Image.Resampling.BILINEAR)
        t2 = time.perf_counter()
        pixels = np.asarray(image.crop((80, 16, 304, 240)), np.float32)
        pixels = ((pixels / 255 - mean) / std).transpose(2, 0, 1)
        t3 = time.perf_counter()
        for key, (a, b) in zip(parts, ((t0, t1), (t1, t2), (t2, t3))):
            parts[key].append((b - a) * 1000)
    return {key: round(statistics.median(values), 3) for key, values in parts.items()}


def _print(result: dict[str, object]) -> None:
    client = result["client_ms"]
    model = str(result["model"])
    bare, service = client[model], client[f"{model}_ensemble"]
    print(
        f"client median, batch 1: {model} {bare:.2f} ms, {model}_ensemble {service:.2f} ms "
        f"(+{service - bare:.2f} ms, +{100 * (service / bare - 1):.1f} %)"
    )
    for name, phases in result["server_ms_per_request"].items():
        print(f"  server, {name}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in phases.items()))
    print(
        "  in process (PIL + numpy): "
        + ", ".join(f"{k} {v:.2f} ms" for k, v in result["in_process_ms"].items())
    )


if __name__ == "__main__":
    main()
