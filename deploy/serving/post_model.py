"""Triton python-backend model: the post-processing step of a published ensemble.

`triton_config` copies this file verbatim as `<name>_post/<version>/model.py`; its
settings are the `deploy_service` JSON parameter of its config.pbtxt (serving/service.py
declares them). Self-contained (numpy only) for the same reason as pre_model.py.

classify: softmax (unless the model already gives probabilities), the top-k classes,
their probabilities and labels (labels.txt beside this file, or the class numbers).
embedding: each vector L2-normalised. Requests the batcher groups are computed at once.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.spec = json.loads(config["parameters"]["deploy_service"]["string_value"])
        self.input = config["input"][0]["name"]
        folder = os.path.join(args["model_repository"], args["model_version"])
        self.labels = None
        if self.spec.get("labels"):
            with open(os.path.join(folder, self.spec["labels"]), encoding="utf-8") as fh:
                self.labels = np.array([line.rstrip("\n") for line in fh], dtype=object)

    def execute(self, requests):
        try:
            arrays = [pb_utils.get_input_tensor_by_name(r, self.input).as_numpy() for r in requests]
            answers = self._answer(np.concatenate(arrays).astype(np.float32))
            bounds = np.cumsum([0] + [len(a) for a in arrays])
            return [
                pb_utils.InferenceResponse(
                    output_tensors=[pb_utils.Tensor(n, v[lo:hi]) for n, v in answers.items()]
                )
                for lo, hi in zip(bounds[:-1], bounds[1:])
            ]
        except Exception as exc:  # every request gets the error, the model stays loaded
            return [pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc))) for _ in requests]

    def _answer(self, values):
        if self.spec["kind"] == "embedding":
            if not self.spec["normalize"]:
                return {"embedding": values}
            norms = np.linalg.norm(values, axis=-1, keepdims=True)
            return {"embedding": values / np.maximum(norms, 1e-12)}
        return self._classify(values.reshape(len(values), -1))

    def _classify(self, scores):
        if self.spec["softmax"]:
            scores = np.exp(scores - scores.max(axis=1, keepdims=True))
            scores /= scores.sum(axis=1, keepdims=True)
        k = min(self.spec["top_k"], scores.shape[1])
        top = np.argsort(-scores, axis=1, kind="stable")[:, :k]
        labels = self.labels[top] if self.labels is not None else top.astype(str).astype(object)
        return {
            "scores": np.take_along_axis(scores, top, axis=1).astype(np.float32),
            "classes": top.astype(np.int64),
            "labels": labels.astype(np.object_),
        }
