"""What a published service must answer, computed in Python: the request's bytes decoded
with PIL and torchvision's transforms (or tokenized with `tokenizers`), the eager model
(or, for a reduced-precision model, the local runtime on the very file served), then
softmax / top-k or L2-normalisation in torch.

One `References` serves a whole smoke run: each model is loaded once (the eager model,
a local runtime per served file) and each request's answer is computed once, so the FP32
ensembles of one model (served by ONNX Runtime, by OpenVINO) share theirs."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from pathlib import Path

import numpy as np

from deploy.domain.vocabulary import Layout
from deploy.pipeline.graph.contract import StageContext
from deploy.serving.service import TOKENIZER_FILE, Color
from deploy.serving.service_client import Sample
from deploy.serving.service_record import (
    EmbeddingRecord,
    ImageRecord,
    PostRecord,
    PreRecord,
    TextRecord,
)

Arrays = dict[str, np.ndarray]
Runner = Callable[[Arrays], Arrays]


class References:
    """One smoke run's service references (see the module's docstring)."""

    def __init__(self, ctx: StageContext) -> None:
        self.ctx = ctx
        self._runners: dict[tuple[Path | None, str], Runner] = {}
        self._answers: dict[tuple[object, ...], Arrays] = {}

    def outputs(
        self, pre: PreRecord, pre_dir: Path, items: list[Sample], served_file: Path | None, precision: str
    ) -> Arrays:
        """The model's declared outputs for `items`: the eager model's (`served_file` None)
        or the local runtime's on `served_file`."""
        key = (pre_dir, served_file, precision, *(hashlib.sha256(s.data).hexdigest() for s in items))
        if key not in self._answers:
            feeds = (
                _image_feeds(pre, items) if isinstance(pre, ImageRecord) else _text_feeds(pre, pre_dir, items)
            )
            feeds = {s.name: feeds[s.name].astype(s.dtype) for s in self.ctx.config.inputs}
            self._answers[key] = self._runner(served_file, precision, feeds)(feeds)
        return self._answers[key]

    def _runner(self, served_file: Path | None, precision: str, sample: Arrays) -> Runner:
        # By precision too: the FP32 IR served as bf16 is computed in bf16 (runtimes/files.py).
        key = (served_file, precision)
        if key not in self._runners:
            self._runners[key] = (
                _eager(self.ctx, sample) if served_file is None else _local(self.ctx, served_file, precision)
            )
        return self._runners[key]


def _eager(ctx: StageContext, sample: Arrays) -> Runner:
    import torch

    from deploy.modelio.loading import load_adapted

    model = load_adapted(ctx.config, sample)
    inputs, outputs = ctx.config.inputs, ctx.config.outputs

    def run(feeds: Arrays) -> Arrays:
        with torch.no_grad():
            outs = model(*(torch.from_numpy(feeds[s.name]) for s in inputs))
        return {o.name: t.float().numpy() for o, t in zip(outputs, outs)}

    return run


def _local(ctx: StageContext, served_file: Path, precision: str) -> Runner:
    from deploy.runtimes.files import runtime_for

    runtime = runtime_for(served_file, ctx.config.output_names(), precision)
    return lambda feeds: dict(runtime.infer(feeds))


def _image_feeds(pre: ImageRecord, items: list[Sample]) -> dict[str, np.ndarray]:
    import torch
    from PIL import Image
    from torchvision.transforms import v2

    steps = v2.Compose(
        [
            v2.Resize(pre.resize, interpolation=v2.InterpolationMode.BILINEAR),
            v2.CenterCrop(pre.crop),
            v2.PILToTensor(),
            v2.ToDtype(torch.float32),
            v2.Lambda(lambda t: t * pre.scale),
            v2.Normalize(pre.mean, pre.std),
        ]
    )
    mode = "RGB" if pre.color == Color.RGB else "L"
    batch = torch.stack([steps(Image.open(io.BytesIO(s.data)).convert(mode)) for s in items])
    if pre.layout == Layout.NHWC:
        batch = batch.permute(0, 2, 3, 1)
    return {pre.feed: batch.numpy()}


def _text_feeds(pre: TextRecord, folder: Path, items: list[Sample]) -> dict[str, np.ndarray]:
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
    tokenizer.enable_truncation(pre.max_length)
    tokenizer.enable_padding(length=None)
    found = tokenizer.encode_batch([s.data.decode() for s in items])
    width = max(pre.min_length, max(len(e.ids) for e in found))
    tokenizer.enable_padding(length=width)  # the served model pads short requests the same way
    found = tokenizer.encode_batch([s.data.decode() for s in items])
    fields = {f: np.array([getattr(e, f) for e in found], np.int64) for f in set(pre.feeds.values())}
    return {name: fields[f] for name, f in pre.feeds.items()}


def postprocess(post: PostRecord | None, outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the service answers for these model outputs, computed in torch."""
    import torch

    if post is None:
        return outputs
    values = torch.from_numpy(outputs[post.reads])
    if isinstance(post, EmbeddingRecord):
        return {
            "embedding": torch.nn.functional.normalize(values, dim=-1).numpy()
            if post.normalize
            else values.numpy()
        }
    scores = values.flatten(1)
    probs = scores.softmax(1) if post.softmax else scores
    top = probs.topk(min(post.top_k, probs.shape[1]), dim=1)
    return {"scores": top.values.numpy(), "classes": top.indices.numpy(), "probabilities": probs.numpy()}
