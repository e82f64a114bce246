"""Triton python-backend model that serves a model file: `model.onnx` with ONNX Runtime,
an OpenVINO IR (`model.xml` + `model.bin`) with OpenVINO (both on the CPU), or an
AOTInductor package (`model.pt2`) with torch, on the device it was compiled for (its
`package.json` says which).

`triton_config` copies this file verbatim as `<version>/model.py` next to the model file
for the `python`, `python_openvino` and `python_inductor` serving formats: they run on any tritonserver that
has the python backend (such as the one shipped in the nvidia-pytriton wheel), which makes
the repository smoke-testable without the onnxruntime / openvino / pytorch / tensorrt
backends.
Requests that the dynamic batcher groups are concatenated into one call.

OpenVINO computes in the precision the config's `deploy_precision` names, asked for
explicitly: bf16 for a model served as bf16 (on a CPU without bf16 the model refuses to
load rather than compute in another precision than its name), f32 otherwise, even where
the CPU plugin's default would be bf16.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.inputs = [spec["name"] for spec in config["input"]]
        self.outputs = [spec["name"] for spec in config["output"]]
        self.batched = int(config.get("max_batch_size", 0)) > 0
        # 0-d tensors of a model without batching travel as [1] (Triton has no scalars).
        scalars = config.get("parameters", {}).get("deploy_scalars", {}).get("string_value", "")
        self.scalars = set(filter(None, scalars.split(",")))
        ir = os.path.join(folder, "model.xml")
        if os.path.exists(os.path.join(folder, "model.pt2")):
            self.run = _inductor(folder, self.inputs)
        elif os.path.exists(ir):
            precision = config.get("parameters", {}).get("deploy_precision", {}).get("string_value", "fp32")
            self.run = _openvino(ir, self.outputs, "bf16" if precision == "bf16" else "f32")
        else:
            self.run = _onnxruntime(folder, self.outputs)

    def execute(self, requests):
        try:
            feeds = [self._feeds(request) for request in requests]
            if self.batched and len(requests) > 1:
                return self._run_batched(feeds)
            return [self._response(self.run(feed)) for feed in feeds]
        except Exception as exc:  # every request gets the error, the model stays loaded
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]

    def _feeds(self, request):
        feeds = {name: pb_utils.get_input_tensor_by_name(request, name).as_numpy() for name in self.inputs}
        return {name: value.reshape(()) if name in self.scalars else value for name, value in feeds.items()}

    def _run_batched(self, feeds):
        sizes = [len(feed[self.inputs[0]]) for feed in feeds]
        merged = {name: np.concatenate([feed[name] for feed in feeds]) for name in self.inputs}
        results = self.run(merged)
        bounds = np.cumsum([0] + sizes)
        return [
            self._response([result[lo:hi] for result in results]) for lo, hi in zip(bounds[:-1], bounds[1:])
        ]

    def _response(self, results):
        shaped = [v.reshape(1) if n in self.scalars else v for n, v in zip(self.outputs, results)]
        tensors = [
            pb_utils.Tensor(name, np.require(value, requirements="C"))
            for name, value in zip(self.outputs, shaped)
        ]
        return pb_utils.InferenceResponse(output_tensors=tensors)


def _onnxruntime(folder, outputs):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    path = os.path.join(folder, "model.onnx")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(outputs, feeds)


def _openvino(path, outputs, compute):
    import openvino as ov

    core = ov.Core()
    if compute == "bf16" and "BF16" not in core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
        raise pb_utils.TritonModelException("served as bf16, but this CPU has no bf16")
    config = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_PRECISION_HINT": compute}
    compiled = core.compile_model(path, "CPU", config)
    ports = [compiled.output(name) for name in outputs]
    request = compiled.create_infer_request()  # one instance executes one batch at a time

    def run(feeds):
        result = request.infer(feeds)
        return [np.array(result[port]) for port in ports]

    return run


def _inductor(folder, inputs):
    import torch
    import torch._inductor

    with open(os.path.join(folder, "package.json")) as fh:
        device = json.load(fh)["device"]
    runner = torch._inductor.aoti_load_package(os.path.join(folder, "model.pt2"))

    def run(feeds):
        args = [torch.from_numpy(np.require(feeds[name], requirements="C")).to(device) for name in inputs]
        with torch.inference_mode():
            result = runner(*args)
        flat = result if isinstance(result, (list, tuple)) else [result]
        return [t.detach().cpu().numpy() for t in flat]

    return run
