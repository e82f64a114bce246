"""Triton python-backend model that serves an ONNX file with ONNX Runtime on CPU.

`triton_config` copies this file verbatim as `<version>/model.py` next to `model.onnx`
for the `python` serving format: it runs on any tritonserver that has the python
backend (such as the one shipped in the nvidia-pytriton wheel), which makes the
repository smoke-testable without the onnxruntime / tensorrt backends. Requests that
the dynamic batcher groups are concatenated into one ONNX Runtime call.
"""

import json
import os

import numpy as np
import onnxruntime as ort
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        path = os.path.join(args["model_repository"], args["model_version"], "model.onnx")
        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.inputs = [spec["name"] for spec in config["input"]]
        self.outputs = [spec["name"] for spec in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0

    def execute(self, requests):
        try:
            feeds = [self._feeds(request) for request in requests]
            if self.batched and len(requests) > 1:
                return self._run_batched(feeds)
            return [self._response(self.session.run(self.outputs, feed)) for feed in feeds]
        except Exception as exc:  # every request gets the error, the model stays loaded
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]

    def _feeds(self, request):
        return {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}

    def _run_batched(self, feeds):
        sizes = [len(feed[self.inputs[0]]) for feed in feeds]
        merged = {name: np.concatenate([feed[name] for feed in feeds]) for name in self.inputs}
        results = self.session.run(self.outputs, merged)
        bounds = np.cumsum([0] + sizes)
        return [
            self._response([result[lo:hi] for result in results]) for lo, hi in zip(bounds[:-1], bounds[1:])
        ]

    def _response(self, results):
        tensors = [
            pb_utils.Tensor(name, np.ascontiguousarray(value)) for name, value in zip(self.outputs, results)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)
