"""The generate record: what `triton_config` writes into a generate model's config.pbtxt
(the `deploy_generate` parameter) for the python model inside the server
(serving/generate_model.py reads the same JSON by these keys) and for every later reader
(smoke, bench, `deploy infer`): the step graph's cache and the request's tensors. One
writer, typed and versioned, and the one place a generate model's names are made."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from deploy.spec.tensors import Frozen

# Copied verbatim into a generate model's version dir (as model.py and decode_loop.py).
GENERATE_MODEL = Path(__file__).with_name("generate_model.py")
DECODE_LOOP = Path(__file__).with_name("decode_loop.py")
GENERATE_PARAMETER = "deploy_generate"
# 4: the model's eos as the default stop; 3: a tokenizer (text in, text out); 2: the step's precision
GENERATE_VERSION = 4
GENERATE_SUFFIX = "_generate"  # one response with every token (HTTP and gRPC)
STREAM_SUFFIX = "_generate_stream"  # decoupled: one response per token (gRPC streams, HTTP generate_stream)

# The request's tensors: token ids in, token ids out, and the optional generation settings.
PROMPT = "input_ids"
TOKENS = "output_ids"
SETTINGS = {  # name -> (Triton type, numpy dtype)
    "max_new_tokens": ("TYPE_INT32", "int32"),
    "temperature": ("TYPE_FP32", "float32"),
    "top_k": ("TYPE_INT32", "int32"),
    "top_p": ("TYPE_FP32", "float32"),
    "seed": ("TYPE_INT64", "int64"),
}
STOP = "stop_ids"
# With a tokenizer (model.decoder.tokenizer): a sentence in place of input_ids, and the
# generated text beside the ids (streamed: each response's new piece of it).
TEXT = "text"
OUTPUT_TEXT = "output_text"
TOKENIZER_FILE = "tokenizer.json"


class GenerateRecord(Frozen):
    version: int = GENERATE_VERSION
    step_model: str  # the served step (a tensor endpoint) whose file this model runs
    model_file: str  # model.onnx / model.xml in this model's version directory
    layers: int
    heads: int
    head_dim: int
    dtype: str
    past: list[str] = Field(description="past_key_values.N.key / .value, in the step's input order")
    max_new_tokens: int  # the default where a request gives none, and the most it may ask
    max_context: int  # prompt + new tokens: the longest past the step was exported for, plus one
    stream: bool
    # fp32: smoke holds it to eager's tokens; a reduced precision (gated on its generations
    # by its stage, gates/decoder_gate.py) to the same file's loop in process.
    precision: str = "fp32"
    tokenizer: str | None = None  # TOKENIZER_FILE in the version directory, where the config gives one
    stop: list[int] = Field(default_factory=list)  # where a request gives no stop_ids: the model's eos
    vocab: int | None = None  # ids a prompt may hold: 0..vocab-1 (input_ids' value_range), None: unchecked


def generate_names(step_model: str) -> tuple[str, str]:
    return step_model + GENERATE_SUFFIX, step_model + STREAM_SUFFIX


def read(text: str) -> GenerateRecord:
    return GenerateRecord.model_validate_json(text)


def of_model(directory: Path) -> GenerateRecord:
    """The record in a generate model's config.pbtxt."""
    from google.protobuf import text_format
    from tritonclient.grpc import model_config_pb2

    config = text_format.Parse((directory / "config.pbtxt").read_text(), model_config_pb2.ModelConfig())
    return read(config.parameters[GENERATE_PARAMETER].string_value)


def step_file(directory: Path, record: GenerateRecord) -> Path:
    """The step's file in the model's highest version directory."""
    files = list(directory.glob(f"*/{record.model_file}"))
    return max(files, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else -1)


def present_names(record: GenerateRecord) -> list[str]:
    """The step's cache outputs, in the past's order (Optimum's names: present.N.key / .value)."""
    return [name.replace("past_key_values.", "present.", 1) for name in record.past]
