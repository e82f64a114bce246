"""`deploy infer` against a real tritonserver serving a published service: the digits
CNN (trained on scikit-learn's digits) behind PNG pre-processing and labelled top-k."""

from __future__ import annotations

import pytest

from tests.helpers import DIGIT_NAMES, digits_service, run_cli

pytestmark = pytest.mark.triton


@pytest.fixture(scope="module")
def served(tmp_path_factory, digits_checkpoint):
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    work = tmp_path_factory.mktemp("infer")
    config, truth = digits_service(work, digits_checkpoint[0], smoke=False)  # infer is tested, not smoke
    built = run_cli("run", str(config), "--to", "triton_config", cwd=work)
    assert built.returncode == 0, built.stderr[-2000:]
    scratch = work / "server"
    scratch.mkdir()
    with serve_repository(ServerSpec(), work / "model_repository", scratch) as server:
        assert all(state.ready for state in server.states.values()), server.states
        yield work, truth, server.server


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_infer_prints_the_digit_drawn_and_the_latency(served, protocol):
    work, truth, server = served
    url = server.http if protocol == "http" else server.grpc
    images = [str(work / "digits" / name) for name in truth]
    args = ["infer", "--url", url, "--protocol", protocol, *(a for i in images for a in ("--image", i))]
    result = run_cli(*args, cwd=work)
    assert result.returncode == 0, result.stderr
    blocks = result.stdout.split(str(work / "digits") + "/")[1:]
    assert len(blocks) == len(truth)
    right = 0
    for block in blocks:
        name, rest = block.split("  (", 1)
        assert rest.split(" ms)")[0].replace(".", "").isdigit()  # the latency, in ms
        top = rest.split("1. ")[1].split(" ")[0]
        right += top == DIGIT_NAMES[truth[name]]
    assert right >= 8, result.stdout


def test_an_unreadable_image_is_named_with_the_services_reason(served):
    work, _, server = served
    (work / "notes.png").write_bytes(b"these are notes, not pixels")
    result = run_cli("infer", "--url", server.http, "--image", str(work / "notes.png"), cwd=work)
    assert result.returncode == 3 and "Traceback" not in result.stderr
    assert (
        "--image: " in result.stderr
        and "notes.png" in result.stderr
        and "not a readable image" in result.stderr
    )
    # Over plain HTTP: a refusal of the request's bytes is the client's error, 400, not 500.
    import numpy as np
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(server.http)
    meta = client.get_model_metadata("tiny_python_ensemble")
    sent = httpclient.InferInput(meta["inputs"][0]["name"], [1, 1], "BYTES")
    sent.set_data_from_numpy(np.array([[b"these are notes, not pixels"]], dtype=object))
    with pytest.raises(InferenceServerException) as refused:
        client.infer("tiny_python_ensemble", [sent])
    assert refused.value.status() == "400" and "not a readable image" in str(refused.value), refused.value


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--model", "tiny_python", "--text", "seven"], "'tiny_python' is not a published service"),
        # Only an image service here: a text needs a model with text pre-processing, said so.
        (["--text", "seven"], "no text service is ready at"),
        (["--text", "seven"], "set triton_config.preprocess: {kind: text, tokenizer: …}"),
        (
            ["--model", "tiny_python_ensemble", "--text", "seven"],
            "'tiny_python_ensemble' takes image: use --image",
        ),
        (["--model", "nope_ensemble", "--text", "seven"], "nope_ensemble"),
    ],
)
def test_a_model_that_is_not_the_service_asked_for_is_refused(served, args, says):
    work, _, server = served
    result = run_cli("infer", "--url", server.http, *args, cwd=work)
    assert result.returncode == 3 and says in result.stdout + result.stderr, result.stderr
    assert "Traceback" not in result.stderr


def test_deploy_infer_finds_the_server_deploy_serve_started(served):
    """No ports on either side: `deploy serve` takes Triton's 8000-8002 (free here), which
    is where `deploy infer` looks without --url."""
    import signal
    import subprocess
    import sys
    import time

    from deploy.serving.ports import conventional_ports

    work, truth, _ = served
    if not conventional_ports("127.0.0.1"):
        pytest.skip("ports 8000-8002 are taken on this machine; deploy serve then says which it uses")
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy", "serve", str(work / "digits.yaml")],
        cwd=work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    name, digit = next(iter(truth.items()))
    try:
        deadline, answer = time.monotonic() + 180, None
        while time.monotonic() < deadline and proc.poll() is None:
            answer = run_cli("infer", "--image", str(work / "digits" / name), cwd=work)
            if answer.returncode == 0:
                break
            time.sleep(1)
        assert answer is not None and answer.returncode == 0, (answer and answer.stderr, proc.poll())
        assert answer.stdout.split("1. ")[1].split(" ")[0] == DIGIT_NAMES[digit], answer.stdout
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0 and "8000" in out, out
