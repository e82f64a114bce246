"""A decoder whose forward answers a dict or a ModelOutput holding `((key, value), ...)`
is written and deployed as a decoder, as one answering `(logits, past)` is: before, init
took its cache for plain outputs and deployed a model nobody could generate with. A model
that names no positions gets a past whose max says it is a guess."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.helpers import Cli, run_cli

pytestmark = pytest.mark.triton

MODELS = '''
import torch
from torch import nn


class Step(nn.Module):
    """A one-layer toy decoder without positions (random weights: mechanics only)."""

    def __init__(self, style, vocab=50, heads=2, dim=8):
        super().__init__()
        torch.manual_seed(0)
        self.style, self.heads, self.dim = style, heads, dim
        self.embed = nn.Embedding(vocab, heads * dim)
        self.kqv = nn.Linear(heads * dim, 3 * heads * dim)
        self.head = nn.Linear(heads * dim, vocab)

    def forward(self, input_ids, past_key_values=None):
        b, s = input_ids.shape
        x = self.embed(input_ids)
        q, k, v = (t.view(b, s, self.heads, self.dim).transpose(1, 2) for t in self.kqv(x).chunk(3, -1))
        if past_key_values is not None:
            k = torch.cat([past_key_values[0][0], k], 2)
            v = torch.cat([past_key_values[0][1], v], 2)
        done = k.shape[2] - s
        allowed = torch.arange(k.shape[2])[None, :] <= torch.arange(s)[:, None] + done
        scores = (q @ k.transpose(2, 3)).masked_fill(~allowed, float("-inf")).softmax(-1)
        logits = self.head((scores @ v).transpose(1, 2).reshape(b, s, -1) + x)
        if self.style == "dict":
            return {"logits": logits, "past_key_values": ((k, v),)}
        from transformers.modeling_outputs import CausalLMOutputWithPast

        return CausalLMOutputWithPast(logits=logits, past_key_values=((k, v),))


def as_dict():
    return Step("dict").eval()


def as_model_output():
    return Step("model_output").eval()
'''


def _init(cli: Cli, tmp: Path, function: str) -> tuple[str, dict]:
    made = cli(
        "init",
        "--file",
        "models.py",
        "--callable",
        function,
        "--input",
        "input_ids:int64:1x1/1x4/1x8",
        cwd=tmp,
    )
    assert made.returncode == 0, made.stderr
    text = (tmp / f"{function}.yaml").read_text()
    return text, yaml.safe_load(text)


@pytest.mark.parametrize("function", ["as_dict", "as_model_output"])
def test_a_dict_or_model_output_cache_is_written_as_a_decoder(
    tmp_path: Path, cli: Cli, function: str
) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    text, config = _init(cli, tmp_path, function)
    assert config["model"]["decoder"] == {"layers": 1, "cache": "tuples"}
    assert [i["name"] for i in config["inputs"]] == [
        "input_ids",
        "past_key_values.0.key",
        "past_key_values.0.value",
    ]
    assert config["inputs"][1]["max"] == [1, 2, 1024 - 8, 8]
    assert "assumes 1024, a GUESS" in text


def test_a_dict_cache_decoder_generates_through_triton_as_eager_does(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    _init(cli, tmp_path, "as_dict")
    done = run_cli("run", "as_dict.yaml", "--cache-dir", str(tmp_path / "cache"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    # smoke's generate check: greedy tokens through the server equal eager's, token for token
    assert "as_dict_python_generate: passed" in done.stdout
    _a_long_prompt_without_a_count_gets_the_room_left(tmp_path)


def _a_long_prompt_without_a_count_gets_the_room_left(tmp_path: Path) -> None:
    """A request naming no max_new_tokens whose prompt leaves less room than the default
    (64) was refused; it gets the room left, greedy as eager."""
    import importlib.util

    import torch

    from deploy.serving.generate_client import Asked
    from deploy.serving.generate_client import generate as ask
    from deploy.serving.launch import serve_repository
    from deploy.serving.server_spec import ServerSpec

    spec = importlib.util.spec_from_file_location("toy_models", tmp_path / "models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, prompt = module.as_dict(), [int(i) % 50 for i in range(1017 - 3)]  # context 1017: room for 3
    ids = torch.tensor([prompt])
    with torch.no_grad():
        for _ in range(3):
            ids = torch.cat([ids, model(ids)["logits"][:, -1:].argmax(-1)], 1)
    expected = ids[0, len(prompt) :].tolist()
    with serve_repository(ServerSpec(), tmp_path / "model_repository", tmp_path / "serve") as served:
        got = ask(served.server.http, "http", "as_dict_python_generate", Asked(prompt, {}, (-1,)), False)
        # `deploy infer` sends to services: a generate model is named as one, with the ways to reach it
        # (it said "not a published service taking images or text (inputs [..., 'text', ...])").
        named = run_cli(
            "infer", "--text", "hi", "--model", "as_dict_python_generate", "--url", served.server.http
        )
        unnamed = run_cli("infer", "--text", "hi", "--url", served.server.http)
    assert got.tokens == expected
    said = " ".join(named.stderr.split())
    assert named.returncode == 3 and "'as_dict_python_generate' is a decoder's generate model" in said, said
    assert "deploy.serving.generate_client" in said and "Traceback" not in said
    said = " ".join(unnamed.stderr.split())
    assert (
        unnamed.returncode == 3 and "as_dict_python_generate_stream" in said and "preprocess" not in said
    ), said


def test_max_new_tokens_beyond_the_exported_context_is_a_config_error(tmp_path: Path, cli: Cli) -> None:
    """Every request asking for them was refused at the server, while smoke (asking for
    fewer) passed."""
    (tmp_path / "models.py").write_text(MODELS)
    _, config = _init(cli, tmp_path, "as_dict")
    config["model"]["decoder"]["max_new_tokens"] = 1017  # the past's max is 1016
    path = tmp_path / "too_many.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    refused = cli("validate", str(path), cwd=tmp_path)
    said = " ".join(refused.stderr.split())
    assert refused.returncode == 3, said
    assert (
        "model.decoder.max_new_tokens: 1017 new tokens do not fit the context" in said
        and "at most 1016" in said
    )
    config["model"]["decoder"]["max_new_tokens"] = 1016
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    assert cli("validate", str(path), cwd=tmp_path).returncode == 0
