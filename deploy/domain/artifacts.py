"""Every artifact a stage writes and another reads, declared once: its name, the stage that
owns it (writes it first) and what it holds. Stages read and write them by these objects
(`ctx.input(ONNX)`), imported by name, so a misspelt artifact is an import error, never a
run-time KeyError; tests/pipeline/test_artifacts.py checks the list against every stage's
declared outputs. Each is a `str` (its name), so it keys the cache and the graph as before."""

from __future__ import annotations


class Produced(str):
    """An artifact's name, with its owner and what it holds."""

    owner: str
    holds: str

    def __new__(cls, name: str, owner: str, holds: str) -> Produced:
        made = super().__new__(cls, name)
        made.owner, made.holds = owner, holds
        return made

    def __reduce__(self) -> tuple[type[Produced], tuple[str, str, str]]:  # crosses to stage processes
        return Produced, (str(self), self.owner, self.holds)


ACCURACY_FP16 = Produced("accuracy_fp16", "fp16", "file accuracy.json")
ACCURACY_INDUCTOR_BF16 = Produced("accuracy_inductor_bf16", "inductor_bf16", "file accuracy.json")
ACCURACY_INDUCTOR_FP16 = Produced("accuracy_inductor_fp16", "inductor_fp16", "file accuracy.json")
ACCURACY_INT8 = Produced("accuracy_int8", "quantize", "file accuracy.json")
ACCURACY_OPENVINO_BF16 = Produced("accuracy_openvino_bf16", "openvino", "file accuracy_openvino_bf16.json")
ACCURACY_OPENVINO_FP16 = Produced("accuracy_openvino_fp16", "openvino", "file accuracy_openvino_fp16.json")
ACCURACY_OPENVINO_INT8 = Produced("accuracy_openvino_int8", "openvino_int8", "file accuracy.json")
BATCHING = Produced("batching", "golden", "file batching.json")
CHART = Produced("chart", "select", "file select.png")
DEPLOYMENT = Produced("deployment", "select", "a tree")
EAGER = Produced("eager", "golden", "file eager.json")
ENGINE = Produced("engine", "build", "file model.plan")
GENERATIONS = Produced("generations", "golden", "file generations.json")
GOLDEN = Produced("golden", "golden", "file golden.npz")
INDUCTOR = Produced("inductor", "inductor", "a tree, entry model.pt2")
INDUCTOR_BF16 = Produced("inductor_bf16", "inductor_bf16", "a tree, entry model.pt2")
INDUCTOR_FP16 = Produced("inductor_fp16", "inductor_fp16", "a tree, entry model.pt2")
LAYERS = Produced("layers", "build", "file layers.json")
MANIFEST = Produced("manifest", "build", "file manifest.json")
ONNX = Produced("onnx", "export", "a tree, entry model.onnx; simplify rewrites it (onnxsim)")
ONNX_ANSWERS = Produced("onnx_answers", "simplify", "file onnx_answers.npz (gates/kept_answers.py)")
ONNX_FP16 = Produced("onnx_fp16", "fp16", "a tree, entry model.onnx")
ONNX_INT8 = Produced("onnx_int8", "quantize", "a tree, entry model.onnx")
OPENVINO = Produced("openvino", "openvino", "a tree, entry model.xml")
OPENVINO_ANSWERS = Produced(
    "openvino_answers", "openvino", "file openvino_answers.npz (gates/kept_answers.py)"
)
OPENVINO_FP16 = Produced("openvino_fp16", "openvino", "a tree, entry model.xml")
OPENVINO_INT8 = Produced("openvino_int8", "openvino_int8", "a tree, entry model.xml")
PLOT = Produced("plot", "bench", "file bench.png")
RELEASE = Produced("release", "release", "file release.json")
REPORT = Produced("report", "validate", "file parity.json")
REPOSITORY = Produced("repository", "triton_config", "a tree; triton_search rewrites it (the chosen config)")
RESULTS = Produced("results", "bench", "file bench.json")
GENERATION_SPEED = Produced("generation_speed", "bench", "file generation.json")
SEARCH_CSV = Produced("search_csv", "triton_search", "file search.csv")
SEARCH_PLOT = Produced("search_plot", "triton_search", "file search.png")
SEARCH_RESULTS = Produced("search_results", "triton_search", "file search.json")
SELECTION = Produced("selection", "select", "file selection.json")
SERVER_LOG = Produced("server_log", "smoke", "file server.log")
SMOKE = Produced("smoke", "smoke", "file smoke.json")
STATS = Produced("stats", "stats", "file stats.json")
TABLE = Produced("table", "bench", "file bench.md")
TIMING_CACHE = Produced("timing_cache", "build", "file timing.cache")
TORCHSCRIPT = Produced("torchscript", "trace", "file model.pt")
TORCHSCRIPT_ANSWERS = Produced(
    "torchscript_answers", "trace", "file torchscript_answers.npz (gates/kept_answers.py)"
)
