"""A starter config's text, commented for the person who will edit it: the model's source,
its inputs and outputs, the shapes it was called with, and the stages that take it to a
smoke-tested Triton model (max_batch_size: 0 where an output depends on the rest of its
batch, or where there is no batch dim). Stdlib and PyYAML."""

from __future__ import annotations

import yaml

from deploy.starter.decoder_found import (
    DEFAULT_MAX_PAST,
    DEFAULT_NEW_TOKENS,
    POSITION_FIELDS,
    DecoderFound,
    decoder_inputs,
)
from deploy.starter.entries import InputEntry, SourceEntry
from deploy.starter.inspection import COUNT, Findings, Found

DETECTION_RTOL = 0.01
# Who wrote the file: its first line says so.
INIT = "`deploy init`"
CALLED = "The model was called with: "
WARNING = "Warning: "
SAID = (f"# {CALLED}", f"# {WARNING}")  # the comment lines `deploy init` also prints
OPTIMIZE = "`deploy.optimize`"


def starter(
    name: str,
    source: SourceEntry,
    inputs: list[InputEntry],
    found: Findings,
    batch_dim: str | None,
    writer: str = INIT,
) -> str:
    """The config's text; `batch_dim` None for a model without one."""
    model, inputs = _model(source, inputs, found)
    body: dict[str, object] = {
        "name": name,
        "model": model,
        "inputs": inputs,
        "outputs": [_output(o) for o in found.outputs],
    }
    fixed = batch_dim is None or bool(found.detections)
    if fixed or batch_dim != "batch":
        body["batch_dim"] = None if fixed else batch_dim
    lines = [
        f"# Written by {writer} for '{name}'; check the guesses, then `deploy run` this file.",
        "# Every key is in the config reference; `deploy validate FILE` checks the file.",
        *_notes(found, fixed),
        yaml.safe_dump(body, sort_keys=False, default_flow_style=None).rstrip(),
        *_called(found),
        *[
            f"# outputs: {o.name} {list(o.shape)} at that call (kind '{o.kind}' is a guess)"
            for o in found.outputs
            if found.decoder is None
        ],
        "",
        "stages:",
        *_stage_lines(found, fixed),
        "",
    ]
    return "\n".join(lines)


def _model(
    source: SourceEntry, inputs: list[InputEntry], found: Findings
) -> tuple[SourceEntry, list[InputEntry]]:
    """The model section and the inputs, as what the model returned makes them: padded
    detections, or a decoder's cache as inputs."""
    model = SourceEntry(**source)
    if found.detections:
        model["detections"] = {"max_detections": found.detections}
    if found.decoder is not None:
        model["decoder"] = {"layers": found.decoder.layers, "cache": found.decoder.cache}
        inputs = decoder_inputs(inputs, found.decoder)
        room = int(inputs[1]["max"][2])  # a one-token prompt and its new tokens fit the past's max + 1
        if room < DEFAULT_NEW_TOKENS:
            model["decoder"]["max_new_tokens"] = room
    return model, inputs


def _called(found: Findings) -> list[str]:
    shown = ", ".join(f"{n} {shape} {dtype}" for n, (shape, dtype) in found.called_with.items())
    return [f"# {CALLED}{shown}"] if shown else []


def _stage_lines(found: Findings, fixed: bool) -> list[str]:
    # Detections decode box coordinates through exp(): float noise grows with their scale.
    tolerance = f" {{tolerance: {{rtol: {DETECTION_RTOL}}}}}" if found.detections else " {}"
    return [
        f"  export:{tolerance}          # ONNX; exporter auto: torch.export, the legacy exporter where it fails",
        f"  simplify:{tolerance}        # onnxsim, with a parity check against the eager model",
        "  validate:           # ONNX Runtime against the eager model at every golden case",
        "    runtimes: [onnxruntime]",
        *([f"    rtol: {DETECTION_RTOL}"] if found.detections else []),
        "  triton_config:      # a Triton repository; `python` (ONNX Runtime) loads on any tritonserver",
        "    formats: [python]",
        *(
            ["    max_batch_size: 0  # no batch dim: each request is one call of the model, as sent"]
            if fixed
            else []
        ),
        *_batch_lines(found),
        f"  smoke:{tolerance}           # a real tritonserver: metadata, HTTP + gRPC parity, concurrent clients",
        "  # quantize: {}      # INT8 with an accuracy gate (give calibration data: docs/how-to)",
        "  # bench: {}         # trtexec-style timing of every runtime",
    ]


def _notes(found: Findings, fixed: bool) -> list[str]:
    if found.decoder is not None:
        d = found.decoder
        return [
            f"# A decoder with its key/value cache ({d.layers} layer(s), {d.heads} key/value head(s) of {d.head_dim}):",
            "# exported one step at a time, the past as inputs (empty at the prefill), the present as outputs,",
            "# Optimum's names; positions follow from the past's length (one sequence per row, no padding).",
            *_guessed_positions(d),
        ]
    if found.detections:
        return [
            "# The model answers one dict of detections per image: each tensor is padded to max_detections",
            f"# rows, with {COUNT} valid ones. It takes its batch as a list of images, which the export",
            "# unrolls: the batch is fixed at 1.",
            *([f"# {WARNING}{found.warning}."] if found.warning else []),
        ]
    if found.uncached:
        return [
            f"# A generative model written without its key/value cache: {found.uncached}.",
            "# Served as one full forward per call: right, but a token costs the whole sequence",
            "# (docs/how-to/decoders.md says which caches deploy exports).",
        ]
    warned = [f"# {WARNING}{found.warning}."] if found.warning else []
    if fixed:
        return [
            "# Not every input has a batch dim alike: batch_dim: null, Triton's max_batch_size is 0.",
            *warned,
        ]
    return warned


def _guessed_positions(decoder: DecoderFound) -> list[str]:
    if not decoder.guessed:
        return []
    return [
        f"# The model's config names no positions ({POSITION_FIELDS[0]} or alike): the past's max",
        f"# assumes {DEFAULT_MAX_PAST}, a GUESS. Set it to the model's context less input_ids' max.",
    ]


def _batch_lines(found: Findings) -> list[str]:
    """max_batch_size: 0 where an output depends on the rest of its batch (measured)."""
    record = found.batching
    if record is None or not record.dependent() or found.detections:
        return []
    names = {m.name: o.name for m, o in zip(record.outputs, found.outputs)}
    said = [
        f"    # {names.get(o.name, o.name)} depends on the rest of its batch: {o.difference()}"
        for o in record.dependent()
    ]
    return [
        *said,
        "    # Triton must not merge clients' requests (dynamic batching): each request runs as sent.",
        "    max_batch_size: 0",
    ]


def _output(found: Found) -> dict[str, str]:
    entry = {"name": found.name}
    if found.path is not None:
        entry["path"] = found.path
    return entry | {"kind": found.kind}
