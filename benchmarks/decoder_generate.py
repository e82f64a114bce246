"""Generation speed of a decoder deployed with its cache, as users measure it: time to the
first token (TTFT), the gaps between tokens (inter-token latency, ITL: median and p99) and
tokens/s over every sequence in flight, at concurrency 1, 4 and 16, for prompts of 16 and
256 tokens, side by side in one run:

    eager            transformers' `generate` on the PyTorch model (a streamer times tokens)
    deploy in-proc   deploy's generate loop (serving/decode_loop.py) over the exported step
                     graph in ONNX Runtime, in this process
    deploy served    the `<name>_python_generate_stream` model on a real tritonserver, over a
                     gRPC stream (the python backend: the same loop, one thread per sequence)
    optimum ORT      (--optimum) Optimum's `text-generation-with-past` export of the same
                     weights, run by its ORTModelForCausalLM, in its own venv (.venv-optimum,
                     made on first use: optimum-onnx resolves transformers 4.57)

The model is the character Llama of configs/models/char_llama.py (GQA, RoPE), trained here on
the Zen of Python (seeded, ~20 s): its greedy tokens mean something, and every row's tokens
are checked against eager's (token-exact). Each row says whether other processes took more
than a quarter of the cores meanwhile (contended); no ratio is given from a contended row.

    .venv/bin/python benchmarks/decoder_generate.py [--new-tokens 32] [--optimum]

Writes benchmarks/results/decoder_generate.json and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "configs" / "models"))
import char_llama  # noqa: E402

from deploy.runtimes import contention  # noqa: E402
from deploy.serving import generation_perf as perf  # noqa: E402
from deploy.serving.decode_loop import CacheShape  # noqa: E402

CONCURRENCY = (1, 4, 16)
ROUNDS = 5  # each cell five times over, pooled; the row says how far its rounds spread
PROMPTS = (16, 256)


def prompt_of(length: int, index: int) -> list[int]:
    """`length` characters of the Zen, each sequence from its own offset."""
    text = char_llama.encode(char_llama.zen())
    start = (index * 37) % (len(text) - length)
    return text[start : start + length]


def timed_row(
    name: str, one: Any, prompt_len: int, clients: int, expected: dict[tuple[int, int], list[int]]
) -> dict[str, Any]:
    """`clients` sequences at once, each `one(prompt) -> (tokens, times from its start)`,
    timed as bench times them (deploy/serving/generation_perf.py), checked against eager."""
    prompts = [prompt_of(prompt_len, i) for i in range(clients)]
    want = [expected[(prompt_len, i)] for i in range(clients)]
    row = perf.timed(name, "in-process", "python", "fp32", one, prompts, want, ROUNDS)
    return {
        "runtime": name,
        **row.model_dump(mode="json", exclude={"subject", "where", "format", "precision"}),
    }


class Times:
    """A transformers streamer (put / end) that notes when each new token arrives."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.first = True

    def put(self, value: Any) -> None:
        if self.first:  # generate hands the prompt to the streamer first
            self.first = False
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def hf_runner(model: Any, new: int) -> Any:
    """transformers' greedy generate on `model` (eager PyTorch, or Optimum's ORT model)."""
    import torch

    def one(prompt: list[int]) -> tuple[list[int], list[float]]:
        ids = torch.tensor([prompt])
        streamer, start = Times(), time.perf_counter()
        with torch.no_grad():
            out = model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, do_sample=False,
                                 eos_token_id=None, streamer=streamer)  # fmt: skip
        return out[0, len(prompt) :].tolist(), [t - start for t in streamer.times]

    return one


def in_process_runner(onnx: Path, new: int) -> Any:
    """deploy's loop over the exported step in ONNX Runtime (one session, shared: it is
    thread-safe), as bench runs it."""
    import onnxruntime as ort

    session = ort.InferenceSession(str(onnx), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()][1:]
    key = session.get_inputs()[1]
    cache = CacheShape(len(names) // 2, key.shape[1], key.shape[3], "float32", names)
    return perf.in_process([lambda f: session.run(None, f)] * max(CONCURRENCY), cache, new)


def deployed(work: Path, weights: Path) -> Path:
    """`deploy init` + `deploy run` of the trained decoder; the repository."""
    deploy = [sys.executable, "-m", "deploy"]
    subprocess.run([*deploy, "init", "--file", str(ROOT / "configs" / "models" / "char_llama.py"),
                    "--callable", "char_llama", "--kwarg", f"weights={weights}", "--input",
                    "input_ids:int64:1x1/1x16/1x256", "--name", "zen", "-o", str(work / "zen.yaml")],
                   check=True, cwd=work)  # fmt: skip
    config = yaml.safe_load((work / "zen.yaml").read_text())
    config["model"]["decoder"]["max_new_tokens"] = 256
    config["stages"]["smoke"] = {"clients": 4}
    (work / "zen.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    subprocess.run([*deploy, "run", "zen.yaml"], check=True, cwd=work)
    return work / "model_repository"


def table(rows: list[dict[str, Any]]) -> str:
    head = "| runtime | prompt | concurrency | TTFT median / p99 ms | ITL median / p99 ms | tokens/s | token-exact | machine |"
    lines = [head, "|" + "---|" * 8]
    for r in rows:
        itl = f"{r['itl_ms_median']:.2f} / {r['itl_ms_p99']:.2f}" if r["itl_ms_median"] is not None else "-"
        lines.append(
            f"| {r['runtime']} | {r['prompt']} | {r['concurrency']} | {r['ttft_ms_median']:.1f} / {r['ttft_ms_p99']:.1f} "
            f"| {itl} | {r['tokens_per_s']:.0f} | {'yes' if r['token_exact'] else 'NO'} | {r['machine']} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument(
        "--optimum", action="store_true", help="also Optimum's ORTModelForCausalLM (its own venv)"
    )
    args = parser.parse_args()
    import torch

    torch.set_num_threads(contention.fitted_threads())
    with tempfile.TemporaryDirectory(prefix="decoder-bench-") as tmp:
        work = Path(tmp)
        weights = work / "zen.pt"
        print(f"trained: next-character accuracy {char_llama.train(weights):.3f}", flush=True)
        eager = char_llama.char_llama(str(weights))
        repository = deployed(work, weights)
        runners = {"eager": hf_runner(eager, args.new_tokens)}
        runners["deploy in-proc"] = in_process_runner(
            repository / "zen_python" / "1" / "model.onnx", args.new_tokens
        )
        expected = {
            (p, i): runners["eager"](prompt_of(p, i))[0] for p in PROMPTS for i in range(max(CONCURRENCY))
        }
        rows = _served_rows(repository, work, args.new_tokens, expected)
        rows = [
            timed_row(n, r, p, c, expected) for n, r in runners.items() for p in PROMPTS for c in CONCURRENCY
        ] + rows
        if args.optimum:
            eager.save_pretrained(work / "hf")
            rows += _optimum_rows(work, args.new_tokens, expected)
    out = ROOT / "benchmarks" / "results" / "decoder_generate.json"
    out.write_text(
        json.dumps({"new_tokens": args.new_tokens, "cores": contention.cores(), "rows": rows}, indent=1)
    )
    print(table(rows))


VENV = ROOT / ".venv-optimum"
# optimum-onnx needs transformers < 4.58 (deploy uses 5.x) and with it huggingface-hub < 1
# and tokenizers < 0.23: those live in the venv; torch, onnx, onnxruntime and numpy come from
# this project's venv through a .pth line, appended, so the venv's own versions win.
OPTIMUM = (
    "optimum-onnx==0.1.0",
    "optimum~=2.1.0",
    "transformers==4.57.6",
    "huggingface-hub>=0.34,<1.0",
    "tokenizers>=0.22,<0.23",
)


def _purelib(python: str | Path) -> str:
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    return subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()


def optimum_python() -> Path:
    """The Optimum venv's interpreter, made on first use."""
    python = VENV / "bin" / "python"
    if python.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", *OPTIMUM]
    subprocess.run(pip, check=True)
    Path(_purelib(python), "main-venv.pth").write_text(_purelib(sys.executable) + "\n")
    return python


def _optimum_rows(work: Path, new: int, expected: dict[tuple[int, int], list[int]]) -> list[dict[str, Any]]:
    """Optimum's export and ORTModelForCausalLM of the same weights, timed alike in its venv."""
    (work / "expected.json").write_text(json.dumps({f"{p},{i}": t for (p, i), t in expected.items()}))
    child = [
        str(optimum_python()),
        str(ROOT / "benchmarks" / "decoder_generate_optimum.py"),
        str(work),
        str(new),
    ]
    done = subprocess.run(child, capture_output=True, text=True, check=True, cwd=ROOT)
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _served_rows(
    repository: Path, work: Path, new: int, expected: dict[tuple[int, int], list[int]]
) -> list[dict[str, Any]]:
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    (work / "server").mkdir()
    with serve_repository(ServerSpec(), repository, work / "server") as served:
        # One open stream per sequence in flight, each warmed: no timed request pays a connect.
        one = perf.ServedStreams(
            served.server.grpc, "zen_python_generate_stream", new, max(CONCURRENCY), prompt_of(16, 0)
        )
        try:
            return [timed_row("deploy served", one, p, c, expected) for p in PROMPTS for c in CONCURRENCY]
        finally:
            one.close()


if __name__ == "__main__":
    main()
