"""serve_repository on a real tritonserver (the nvidia-pytriton wheel's, CPU): a model
it can load comes up READY and answers; a model whose backend it lacks is left out with
the reason; a model that fails to load is UNAVAILABLE with Triton's reason; the server
is gone afterwards."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from deploy.serving.launch import serve_repository
from deploy.serving.model_state import ModelState
from deploy.serving.server_spec import ServerSpec
from tests.helpers import tritonservers

pytestmark = pytest.mark.triton

DOUBLE = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        replies = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "x").as_numpy()
            replies.append(pb_utils.InferenceResponse([pb_utils.Tensor("y", (2 * x).astype(np.float32))]))
        return replies
"""

CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 4
input [{{ name: "x" data_type: TYPE_FP32 dims: [3] }}]
output [{{ name: "y" data_type: TYPE_FP32 dims: [3] }}]
"""


def python_model(repo: Path, name: str, code: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(code)
    (repo / name / "config.pbtxt").write_text(CONFIG.format(name=name))


def test_a_python_model_comes_up_ready_and_answers(tmp_path: Path) -> None:
    import tritonclient.http as httpclient

    repo = tmp_path / "repo"
    python_model(repo, "double", DOUBLE)
    python_model(repo, "broken", "raise RuntimeError('cannot load me')\n")
    (repo / "engine" / "1").mkdir(parents=True)
    (repo / "engine" / "config.pbtxt").write_text('name: "engine"\nplatform: "tensorrt_plan"\n')
    before = tritonservers()
    with serve_repository(ServerSpec(), repo, tmp_path / "work") as served:
        assert set(served.found) == {"double", "broken", "engine"}
        assert "engine" not in served.states  # no tensorrt backend in this server: never asked to load
        assert served.states["double"].state is ModelState.READY
        assert served.states["broken"].state is ModelState.UNAVAILABLE
        assert "cannot load me" in served.states["broken"].reason
        client = httpclient.InferenceServerClient(served.server.http)
        x = np.array([[1.0, 2.0, 3.0]], np.float32)
        request = httpclient.InferInput("x", list(x.shape), "FP32")
        request.set_data_from_numpy(x)
        answer = client.infer("double", [request]).as_numpy("y")
        np.testing.assert_array_equal(answer, 2 * x)
    assert not tritonservers() - before, "the server outlived serve_repository"
