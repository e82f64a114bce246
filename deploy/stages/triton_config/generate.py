"""A decoder's generate models: beside each python-backend step model (`<model>`, one
step with its cache, a tensor endpoint), `<model>_generate` answers token ids with the
tokens after them in one response, and `<model>_generate_stream` (decoupled) with one
response per token. Both run serving/generate_model.py over the step's own file and the
loop in serving/decode_loop.py, described by a generate record (serving/generate_record.py)."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

from deploy.domain.vocabulary import ServingFormat
from deploy.serving.generate_record import (
    DECODE_LOOP,
    GENERATE_MODEL,
    GENERATE_PARAMETER,
    OUTPUT_TEXT,
    PROMPT,
    SETTINGS,
    STOP,
    TEXT,
    TOKENIZER_FILE,
    TOKENS,
    GenerateRecord,
)
from deploy.serving.layout import FORMAT_PARAMETER, LAYOUTS
from deploy.spec.config import DeployConfig
from deploy.stages.triton_config.params import TritonParams

# The step formats a generate model can run: ONNX Runtime's and OpenVINO's python models.
GENERATING = (ServingFormat.PYTHON, ServingFormat.PYTHON_OPENVINO)


def records(
    step: str, fmt: ServingFormat, precision: str, config: DeployConfig, stop: list[int]
) -> list[GenerateRecord]:
    """The generate and the streaming record of one step model; `stop`: the ids a request
    that names none stops at (the model's eos, as transformers' generate does)."""
    decoder = config.model.decoder
    assert decoder is not None  # only called for a decoder config
    key = config.inputs[1]  # past_key_values.0.key: [batch, heads, past, head_dim]
    common = dict(
        step_model=step,
        model_file=LAYOUTS[fmt].model_file,
        layers=decoder.layers,
        heads=key.opt[1],
        head_dim=key.opt[3],
        dtype=key.dtype,
        past=decoder.past_names(),
        max_new_tokens=decoder.max_new_tokens,
        max_context=key.max[2] + 1,
        precision=precision,
        tokenizer=TOKENIZER_FILE if decoder.tokenizer is not None else None,
        stop=list(stop),
        vocab=_vocabulary(config),
    )
    return [GenerateRecord(stream=False, **common), GenerateRecord(stream=True, **common)]


def _vocabulary(config: DeployConfig) -> int | None:
    """The ids input_ids may hold, from its value_range (init writes the model's vocabulary)."""
    found = config.inputs[0].value_range
    return int(found[1]) + 1 if found is not None else None


def proto(pb: ModuleType, name: str, record: GenerateRecord, params: TritonParams, fmt: ServingFormat) -> Any:
    model = pb.ModelConfig(name=name, backend="python", max_batch_size=0)
    text = record.tokenizer is not None  # then a request gives input_ids or text
    model.input.add(name=PROMPT, data_type=pb.TYPE_INT64, dims=[-1], optional=text)
    if text:
        model.input.add(name=TEXT, data_type=pb.TYPE_STRING, dims=[1], optional=True)
        model.output.add(name=OUTPUT_TEXT, data_type=pb.TYPE_STRING, dims=[1])
    for setting, (kind, _) in SETTINGS.items():
        model.input.add(name=setting, data_type=getattr(pb, kind), dims=[1], optional=True)
    model.input.add(name=STOP, data_type=pb.TYPE_INT64, dims=[-1], optional=True)
    model.output.add(name=TOKENS, data_type=pb.TYPE_INT64, dims=[-1])
    model.instance_group.add(kind=pb.ModelInstanceGroup.KIND_CPU, count=params.instance_group.count)
    model.model_transaction_policy.decoupled = record.stream
    model.parameters[GENERATE_PARAMETER].string_value = record.model_dump_json()
    # As every model's: repository.models tells the step's format and precision by them.
    model.parameters["deploy_precision"].string_value = record.precision
    model.parameters[FORMAT_PARAMETER].string_value = fmt
    return model


def write(
    root: Path,
    version: int,
    step_dir: Path,
    record: GenerateRecord,
    text: str,
    name: str,
    config: DeployConfig,
) -> None:
    """`<name>/config.pbtxt` and its version dir: the model, the loop and the step's file(s)."""
    folder = root / name / str(version)
    folder.mkdir(parents=True)
    (root / name / "config.pbtxt").write_text(text)
    shutil.copyfile(GENERATE_MODEL, folder / "model.py")
    shutil.copyfile(DECODE_LOOP, folder / "decode_loop.py")
    step_file = step_dir / str(version) / record.model_file
    for source in (step_file, step_file.with_suffix(".bin")):
        if source.exists():
            shutil.copyfile(source, folder / source.name)
    decoder = config.model.decoder
    if decoder is not None and decoder.tokenizer is not None:
        shutil.copyfile(decoder.tokenizer, folder / TOKENIZER_FILE)
