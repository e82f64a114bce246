"""Triton python-backend model: the pre-processing step of a published ensemble.

`triton_config` copies this file verbatim as `<name>_pre/<version>/model.py`; its
settings are the `deploy_service` JSON parameter of its config.pbtxt (serving/service.py
declares them). Self-contained on purpose (numpy, PIL, tokenizers only): the repository
is served by tritonservers that have none of this project installed.

image: each request holds encoded images (JPEG, PNG, ...) as bytes, [batch, 1]; each is
decoded and resized / center-cropped / normalised as torchvision's transforms do it on a
PIL image. text: each request holds sentences, [batch, 1], tokenized together and padded
to the request's longest (at least the model's minimum sequence length).
"""

import io
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.spec = json.loads(config["parameters"]["deploy_service"]["string_value"])
        self.input = config["input"][0]["name"]
        self.outputs = {o["name"]: pb_utils.triton_string_to_numpy(o["data_type"]) for o in config["output"]}
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.prepare = _image(self.spec) if self.spec["kind"] == "image" else _text(self.spec, folder)

    def execute(self, requests):
        responses = []
        for request in requests:  # each request keeps its own answer (and its own padding)
            try:
                items = pb_utils.get_input_tensor_by_name(request, self.input).as_numpy().reshape(-1)
                arrays = self.prepare(list(items))
                tensors = [
                    pb_utils.Tensor(n, np.ascontiguousarray(arrays[n], dtype=t))
                    for n, t in self.outputs.items()
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=tensors))
            except ValueError as exc:  # the request's bytes refused: the client's to fix (HTTP 400)
                error = pb_utils.TritonError(str(exc), pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
            except Exception as exc:  # the request gets the error, the model stays loaded
                responses.append(pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))))
        return responses


def _image(spec):
    from PIL import Image

    # (x * scale - mean) / std as one multiply-add: x * gain - offset
    gain = np.float32(spec["scale"]) / np.array(spec["std"], np.float32)
    offset = np.array(spec["mean"], np.float32) / np.array(spec["std"], np.float32)
    mode = "RGB" if spec["color"] == "rgb" else "L"

    def one(data):
        data = bytes(data)
        if len(data) > spec["max_bytes"]:
            raise ValueError(f"image of {len(data)} bytes refused: at most {spec['max_bytes']} bytes")
        try:
            image = Image.open(io.BytesIO(data))  # reads the header only
        except Exception as exc:
            reason = str(exc).split(" <")[0]  # PIL names its BytesIO object: noise to a client
            raise ValueError(f"not a readable image ({len(data)} bytes): {reason}") from None
        width, height = image.size
        if width * height > spec["max_pixels"]:
            raise ValueError(
                f"image of {width} x {height} pixels refused before decoding: at most {spec['max_pixels']} pixels"
            )
        try:
            image = image.convert(mode)
        except Exception as exc:
            reason = str(exc).split(" <")[0]
            raise ValueError(f"not a readable image ({len(data)} bytes): {reason}") from None
        image = _resize_shorter(image, spec["resize"])
        pixels = np.asarray(_center_crop(image, spec["crop"]), np.float32).reshape(
            spec["crop"], spec["crop"], -1
        )
        pixels = pixels * gain - offset
        return pixels.transpose(2, 0, 1) if spec["layout"] == "NCHW" else pixels

    return lambda items: {spec["feed"]: np.stack([one(item) for item in items])}


def _resize_shorter(image, size):
    """torchvision's Resize(int): the shorter side to `size`, the longer truncated, bilinear."""
    from PIL import Image

    width, height = image.size
    short, long = min(width, height), max(width, height)
    new_long = int(size * long / short)
    new = (size, new_long) if width <= height else (new_long, size)
    return image if new == (width, height) else image.resize(new, Image.Resampling.BILINEAR)


def _center_crop(image, size):
    width, height = image.size
    top, left = round((height - size) / 2.0), round((width - size) / 2.0)
    return image.crop((left, top, left + size, top + size))


def _text(spec, folder):
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(os.path.join(folder, spec["tokenizer"]))
    tokenizer.enable_truncation(spec["max_length"])
    tokenizer.enable_padding(pad_to_multiple_of=None)

    def prepare(items):
        texts = [_sentence(bytes(item), spec["max_bytes"]) for item in items]
        found = tokenizer.encode_batch(texts)
        fields = {
            name: np.array([getattr(e, name) for e in found], np.int64)
            for name in set(spec["feeds"].values())
        }
        short = spec["min_length"] - fields[next(iter(fields))].shape[1]
        if short > 0:  # below the model's minimum sequence length: padded further (mask 0)
            pad = {"ids": tokenizer.padding["pad_id"], "type_ids": tokenizer.padding["pad_type_id"]}
            fields = {
                k: np.pad(v, ((0, 0), (0, short)), constant_values=pad.get(k, 0)) for k, v in fields.items()
            }
        return {model_input: fields[field] for model_input, field in spec["feeds"].items()}

    return prepare


def _sentence(data, limit):
    """UTF-8 text of at most `limit` bytes, or a ValueError the client reads."""
    if len(data) > limit:
        raise ValueError(f"text of {len(data)} bytes refused: at most {limit} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"text is not UTF-8 (byte {data[exc.start]:#04x} at offset {exc.start})") from None
