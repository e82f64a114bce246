"""`deploy init` on models nobody configured: a tensor-returning CNN from a file, a dict-
returning segmentation-style model, and a transformer taking `input_ids` and
`attention_mask` by keyword (Hugging Face's BertModel, a ModelOutput). Each starter
config is then run as written, through a real tritonserver. Bad input writes nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from deploy.commands.init import parse_input
from deploy.pipeline.errors import ConfigError
from deploy.starter.entries import input_specs
from deploy.starter.inspection import discover
from tests.helpers import ROOT, Cli

MODELS = """
import torch
from torch import nn


class Segmenter(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Conv2d(3, 8, 3, padding=1)
        self.head = nn.Conv2d(8, 5, 1)

    def forward(self, image):
        features = torch.relu(self.body(image))
        return {"out": self.head(features), "features": features.mean(dim=(2, 3))}


def segmenter():
    torch.manual_seed(0)
    return Segmenter()


def broken():
    class Broken(nn.Module):
        def forward(self, image):
            raise RuntimeError("this forward is broken")

    return Broken()


def with_extras():
    class WithExtras(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(8, 5)

        def forward(self, x):
            return self.lin(x), None, 3.0  # None: an unset field; 3.0: a value no output carries

    return WithExtras()


def centred():
    class Centred(nn.Module):
        def forward(self, image):
            flat = image.flatten(1)
            return flat - flat.mean(0, keepdim=True)  # all zeros for a batch of one

    return Centred()
"""


def _getting_started_models() -> str:
    """The `models.py` getting-started shows a newcomer, as written (it defines small_bert)."""
    text = (ROOT / "docs" / "getting-started.md").read_text()
    block = text.split("```python\n# models.py\n", 1)[1].split("```", 1)[0]
    return f"\n\n{block}"


MODELS += _getting_started_models()

CASES = {
    "tiny_cnn": (
        ["--file", str(ROOT / "configs" / "models" / "tiny_cnn.py"), "--callable", "tiny_cnn"],
        ["image:float32:1x1x8x8/4x1x8x8/16x1x8x8"],
        [{"name": "output", "kind": "logits"}],
    ),
    "segmenter": (
        ["--file", "models.py", "--callable", "segmenter"],
        ["image:float32:1x3x16x16/2x3x16x16/4x3x32x32"],
        [{"name": "out", "kind": "other"}, {"name": "features", "kind": "embedding"}],
    ),
    "small_bert": (
        ["--file", "models.py", "--callable", "small_bert"],
        ["input_ids:int64:1x8/2x16/4x32", "attention_mask:int64:1x8/2x16/4x32"],
        [{"name": "last_hidden_state", "kind": "embedding"}, {"name": "pooler_output", "kind": "embedding"}],
    ),
}


@pytest.mark.triton
@pytest.mark.parametrize("case", sorted(CASES))
def test_init_then_run_passes_as_written(tmp_path: Path, case: str, cli: Cli) -> None:
    source, inputs, outputs = CASES[case]
    (tmp_path / "models.py").write_text(MODELS)
    args = [a for i in inputs for a in ("--input", i)]
    made = cli("init", *source, *args, cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / f"{case}.yaml").read_text())
    assert written["outputs"] == outputs
    done = cli("run", f"{case}.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "smoke" in done.stdout and "passed" in done.stdout


def test_dims_get_readable_names_shared_where_inputs_share_them() -> None:
    specs = input_specs(
        [
            parse_input("input_ids:int64:1x8/2x16/4x32"),
            parse_input("attention_mask:int64:1x8/2x16/4x32"),
            parse_input("token_type_ids:int64:1x8/2x16/4x32"),
            parse_input("label_ids:int64:1x4/2x8/4x16"),  # another length: its own name
        ]
    )
    assert [s["dims"] for s in specs] == [["batch", "sequence"]] * 3 + [["batch", "sequence2"]]
    # Token ids below any vocabulary's size; a mask of ones with padding; segment ids 0 / 1.
    assert [(s.get("values"), s.get("value_range")) for s in specs] == [
        (None, [0, 99]),
        ("mask", None),
        (None, [0, 1]),
        (None, [0, 99]),
    ]
    image = input_specs([parse_input("image:float32:1x3x224x224/2x3x256x320/4x3x512x512")])
    assert image[0]["dims"] == ["batch", 3, "height", "width"]  # never one name: that would force H == W
    static = input_specs([parse_input("x:float32:1x3/1x3/1x3")])
    assert static[0]["dims"] == [1, 3]


def test_outputs_are_named_by_key_position_or_as_the_lone_tensor() -> None:
    by_key = discover([("logits", (2, 10), "float32"), ("hidden_states.3", (2, 4, 8), "float32")], True)
    assert [(f.name, f.path, f.kind) for f in by_key] == [
        ("logits", None, "logits"),
        ("hidden_states_3", "hidden_states.3", "embedding"),
    ]
    by_position = discover([("0", (2, 10), "float32"), ("1", (2,), "int64")], True)
    assert [(f.name, f.path, f.kind) for f in by_position] == [
        ("output0", None, "embedding"),
        ("output1", None, "other"),
    ]
    assert discover([("", (2, 10), "float32")], True)[0].name == "output"
    # Keys outside ASCII: the config's names are ASCII, the key is kept as the path (it
    # was the regex of outputs[].name, raw, about a name init had written itself).
    accented = discover([("é-out", (2, 3), "float32"), ("日本", (2, 3), "float32")], True)
    assert [(f.name, f.path) for f in accented] == [("e_out", "é-out"), ("output", "日本")]
    # A wrapper echoing its inputs back (a sentence-transformers module's dict): Triton names
    # each tensor once, so init refused its own config; the key is kept as the path.
    echoed = discover([("input_ids", (2, 8), "int64"), ("embedding", (2, 4), "float32")], True, ["input_ids"])
    assert [(f.name, f.path) for f in echoed] == [("input_ids_out", "input_ids"), ("embedding", None)]


@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (
            ["--callable", "broken", "--input", "image:float32:1x3x8x8/1x3x8x8/2x3x8x8"],
            "this forward is broken",
            3,  # the model's fault
        ),
        (
            ["--callable", "segmenter", "--input", "image:float32:1x3x8x8"],
            "--input: 'image:float32:1x3x8x8' is not",
            2,  # the flag's: a usage error, as bench's --shapes
        ),
        (["--callable", "nosuch", "--input", "image:float32:1x3x8x8/1x3x8x8/2x3x8x8"], "nosuch", 3),
        (["--callable", "segmenter", "--input", "image:float33:1x3x8x8/1x3x8x8/2x3x8x8"], "--input image", 2),
        (  # max mistyped: was "dim 0 is static 1" (exit 3), naming a dim nobody declared static
            ["--callable", "segmenter", "--input", "image:float32:1x3x8x8/2x3x8x8/1x3x8x8"],
            "need min <= opt <= max in every dim (dim 0: 1 / 2 / 1)",
            2,
        ),
        (
            ["--callable", "segmenter", "--input", "image:float32:1x3x8x8/2x3x8/2x3x8x8"],
            "min, opt and max have 4, 3 and 4 dims",
            2,
        ),
        (  # the folders made for --output go again with the error
            [
                "--callable",
                "broken",
                "--input",
                "image:float32:1x3x8x8/1x3x8x8/2x3x8x8",
                "-o",
                "new/sub/m.yaml",
            ],
            "this forward is broken",
            3,
        ),
        (  # init wrote it, and golden refused the config it wrote
            ["--callable", "centred", "--input", "image:float32:1x3x8x8/2x3x8x8/4x3x8x8"],
            "output 'output' depends on the rest of its batch and is all zeros for a batch of one",
            2,
        ),
    ],
)
def test_bad_input_says_which_and_writes_nothing(
    tmp_path: Path, args: list[str], says: str, code: int, cli: Cli
) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    done = cli("init", "--file", "models.py", "--name", "m", *args, cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    assert says in " ".join((done.stdout + done.stderr).split()) and "Traceback" not in done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models.py"]


def test_output_in_a_new_folder_is_written_and_a_folder_or_a_file_in_the_way_is_named(
    tmp_path: Path, cli: Cli
) -> None:
    """`-o new/sub/m.yaml` crashed (exit 70, FileNotFoundError) or, with --file, blamed the
    model file ("file not found: .../new/sub/../../models.py"); `-o DIR --overwrite` crashed
    with IsADirectoryError and left a `.DIR.init` behind."""
    (tmp_path / "models.py").write_text(MODELS)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_text("")
    shape = ["--callable", "segmenter", "--input", "image:float32:1x3x8x8/2x3x8x8/4x3x8x8"]
    made = cli("init", "--file", "models.py", *shape, "-o", "new/sub/m.yaml", cwd=tmp_path)
    assert made.returncode == 0, made.stdout + made.stderr
    assert cli("validate", str(tmp_path / "new" / "sub" / "m.yaml")).returncode == 0
    for output, says in (
        ("adir", "adir is a directory: name the file"),
        ("afile/m.yaml", "afile is a file, not a folder"),
    ):
        done = cli("init", "--file", "models.py", *shape, "-o", output, "--overwrite", cwd=tmp_path)
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stdout + done.stderr
        assert says in " ".join((done.stdout + done.stderr).split())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "afile", "models.py", "new"]
    assert list((tmp_path / "adir").iterdir()) == []


def test_an_existing_file_is_kept_unless_overwrite(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "m.yaml").write_text("mine")
    done = cli("init", "--factory", "x:y", "--name", "m", "--input", "a:float32:1/1/1", cwd=tmp_path)
    assert done.returncode == 3 and "--overwrite" in done.stdout + done.stderr
    assert (tmp_path / "m.yaml").read_text() == "mine"
    with pytest.raises(ConfigError, match="is not NAME:DTYPE"):
        parse_input("a:float32")


def init_file(
    cli: Cli, tmp: Path, file: str, function: str, *inputs: str, extra: tuple[str, ...] = ()
) -> Any:
    """`deploy init --file FILE --callable FUNCTION --input I ...` in `tmp`."""
    shapes = [a for i in inputs for a in ("--input", i)]
    return cli("init", "--file", file, "--callable", function, *shapes, *extra, cwd=tmp)


CLIP = """
import torch


def small_clip():
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    text = {"vocab_size": 100, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1,
            "num_attention_heads": 2, "max_position_embeddings": 32}
    vision = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
              "image_size": 32, "patch_size": 8}
    config = CLIPConfig(text_config=text, vision_config=vision, projection_dim=16)
    config._attn_implementation = "eager"
    return CLIPModel(config).eval()


def fixed():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3)).eval()
"""
CLIP_INPUTS = [
    "input_ids:int64:1x8/2x8/4x16",
    "pixel_values:float32:1x3x32x32/2x3x32x32/4x3x32x32",
    "attention_mask:int64:1x8/2x8/4x16",
]


@pytest.mark.matrix  # a public model end to end: the Jenkins 'Model kinds' stage and `pytest -m matrix`
@pytest.mark.triton
def test_clip_is_written_with_max_batch_size_0_and_is_served_as_sent(tmp_path: Path, cli: Cli) -> None:
    """logits_per_image compares every image with every text of the batch: init measures that
    it depends on the batch and writes max_batch_size 0; as written it passes smoke with
    concurrent clients. Dynamic batching instead is a config error naming the output."""
    (tmp_path / "clip_model.py").write_text(CLIP)
    args = [a for i in CLIP_INPUTS for a in ("--input", i)]
    made = cli(
        "init", "--file", "clip_model.py", "--callable", "small_clip", "--name", "clip", *args, cwd=tmp_path
    )
    assert made.returncode == 0, made.stdout + made.stderr
    text = (tmp_path / "clip.yaml").read_text()
    written = yaml.safe_load(text)
    assert written["stages"]["triton_config"]["max_batch_size"] == 0
    assert "# logits_per_image depends on the rest of its batch: its shape is [2, 2] for the batch" in text
    assert [i["dims"] for i in written["inputs"]] == [
        ["batch", "sequence"],
        ["batch", 3, 32, 32],
        ["batch", "sequence"],
    ]
    assert written["inputs"][2]["values"] == "mask"  # ones, then zero padding
    done = cli("run", "clip.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all answers match their own reference" in done.stdout
    merged = text.replace("    max_batch_size: 0\n", "    dynamic_batching: {max_queue_delay_us: 1000}\n")
    (tmp_path / "merged.yaml").write_text(merged.replace("name: clip", "name: merged"))
    refused = cli("run", "merged.yaml", cwd=tmp_path)
    console = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode == 3, console
    assert (
        "stages.triton_config.dynamic_batching: output 'logits_per_image' depends on the rest of its batch"
        in console
    )


def test_a_fixed_shape_model_gets_no_batch_dim_instead_of_an_error(tmp_path: Path, cli: Cli) -> None:
    """It used to fail with an error about a hidden temp file and a key nobody wrote."""
    (tmp_path / "clip_model.py").write_text(CLIP)
    made = init_file(cli, tmp_path, "clip_model.py", "fixed", "x:float32:1x4/1x4/1x4")
    assert made.returncode == 0, made.stdout + made.stderr
    text = (tmp_path / "fixed.yaml").read_text()
    written = yaml.safe_load(text)
    assert written["batch_dim"] is None and written["stages"]["triton_config"]["max_batch_size"] == 0
    checked = cli("validate", "fixed.yaml", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not list(tmp_path.glob(".*.init"))


def test_a_batch_dim_asked_for_on_fixed_shapes_is_refused_saying_why(tmp_path: Path, cli: Cli) -> None:
    """--batch-dim batch was dropped without a word (batch_dim: null written) where axis 0
    does not vary."""
    (tmp_path / "clip_model.py").write_text(CLIP)
    made = init_file(
        cli, tmp_path, "clip_model.py", "fixed", "x:float32:4x4/4x4/4x4", extra=("--batch-dim", "batch")
    )
    assert made.returncode == 2, made.stdout + made.stderr  # the flags disagree: a usage error
    said = made.stdout + made.stderr
    assert "--batch-dim: axis 0 of every input must be the batch, varying alike from min to max" in said
    assert "(min/opt/max: x 4/4/4)" in said and not (tmp_path / "fixed.yaml").exists()


@pytest.mark.matrix  # a public model end to end: the Jenkins 'Model kinds' stage and `pytest -m matrix`
@pytest.mark.slow
@pytest.mark.triton
def test_a_detection_model_is_written_with_padded_outputs_and_passes_smoke(tmp_path: Path, cli: Cli) -> None:
    """torchvision's SSDlite answers a list of per-image dicts of varying length: init probes
    it at batch 1, writes model.detections with the outputs and the count, and the config
    runs through a real tritonserver (random weights spread so that scores differ:
    mechanics only, these weights detect nothing)."""
    made = cli(
        "init",
        "--file",
        str(ROOT / "benchmarks" / "zoo_models.py"),
        "--callable",
        "ssdlite",
        "--name",
        "ssd",
        "--input",
        "images:float32:1x3x320x320/2x3x320x320/2x3x320x320",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / "ssd.yaml").read_text())
    # As many rows as eager returned (SSDlite keeps up to 300): nothing cut.
    assert written["model"]["detections"]["max_detections"] >= 100
    assert [o["name"] for o in written["outputs"]] == ["boxes", "scores", "labels", "num_detections"]
    assert written["inputs"][0]["dims"] == [1, 3, 320, 320] and written["batch_dim"] is None
    written["stages"]["smoke"].update(clients=2, batching_requests=4)  # ~0.3 s a request on 2 cores
    # NMS: torch.export cannot trace it, and auto's first attempt costs ~30 s here; the
    # fallback itself is tests/stages/test_export_errors.py's.
    written["stages"]["export"]["exporter"] = "torchscript"
    (tmp_path / "ssd.yaml").write_text(yaml.safe_dump(written, sort_keys=False))
    done = cli("run", "ssd.yaml", cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    summary = json.loads((tmp_path / "runs" / "ssd" / "summary.json").read_text())
    stages = {s["stage"]: s for s in summary["stages"]}
    assert stages["export"]["metrics"]["exporter"]["used"] == "torchscript"
    assert "detections_cut" not in stages["golden"]["metrics"]
    smoke = stages["smoke"]["metrics"]["smoke"]["models"]["ssd_python"]
    assert smoke["status"] == "passed" and smoke["traffic"]["mismatch_count"] == 0


KINDS = """
import torch
from torch import nn


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.lstm = nn.LSTM(8, 8, batch_first=True)

    def forward(self, tokens, lengths):
        packed = nn.utils.rnn.pack_padded_sequence(self.embed(tokens), lengths, batch_first=True)
        out, _ = self.lstm(packed)
        return nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=tokens.shape[1])[0]


def tagger():
    torch.manual_seed(0)
    return Tagger()


class Step(nn.Module):
    def forward(self, sample, timestep):
        return sample * torch.sin(timestep.float())


def step():
    return Step()


class Codes(nn.Module):
    def forward(self, x, codes):
        return x * codes.float()


def codes():
    return Codes()
"""


def test_init_calls_the_model_with_the_declared_shapes_and_meaningful_values(
    tmp_path: Path, cli: Cli
) -> None:
    """lengths within the sequence (pack_padded_sequence refuses a length past it), a 0-d
    timestep, no batch dim where axis 0 is not one; the call's shapes are said."""
    (tmp_path / "kinds.py").write_text(KINDS)
    made = init_file(cli, tmp_path, "kinds.py", "tagger", "tokens:int64:1x4/2x8/4x16", "lengths:int64:1/2/4")
    assert made.returncode == 0, made.stdout + made.stderr
    assert "The model was called with: tokens [1, 8] int64, lengths [1] int64" in made.stdout
    inputs = yaml.safe_load((tmp_path / "tagger.yaml").read_text())["inputs"]
    assert inputs[1] | {"min": 0} == {
        "name": "lengths",
        "dtype": "int64",
        "dims": ["batch"],
        "min": 0,
        "opt": [2],
        "max": [4],
        "values": "lengths",
        "of": "sequence",
    }
    assert inputs[0]["value_range"] == [0, 49]  # below the embedding's 50 rows
    made = init_file(cli, tmp_path, "kinds.py", "step", "sample:float32:1x4/2x4/8x4", "timestep:int64://")
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / "step.yaml").read_text())
    assert written["batch_dim"] is None and written["inputs"][1]["dims"] == []
    assert written["inputs"][0]["dims"] == ["rows", 4] and written["inputs"][1]["value_range"] == [0, 999]
    assert "timestep [] int64" in made.stdout


def test_an_integer_input_nothing_names_is_asked_for_by_name(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "kinds.py").write_text(KINDS)
    args = ["init", "--file", "kinds.py", "--callable", "codes", "--input", "x:float32:1x4/2x4/4x4"]
    asked = cli(*args, "--input", "codes:int64:1x4/2x4/4x4", cwd=tmp_path)
    said = " ".join((asked.stdout + asked.stderr).split())
    assert asked.returncode == 3, said
    assert "--input codes: an integer input whose values deploy cannot tell" in said
    assert "--value-range codes=LOW,HIGH" in said and not (tmp_path / "codes.yaml").exists()
    given = cli(*args, "--input", "codes:int64:1x4/2x4/4x4", "--value-range", "codes=2,5", cwd=tmp_path)
    assert given.returncode == 0, given.stdout + given.stderr
    assert yaml.safe_load((tmp_path / "codes.yaml").read_text())["inputs"][1]["value_range"] == [2, 5]


def test_a_factory_module_in_the_working_directory_imports_as_python_m_finds_it(tmp_path: Path) -> None:
    """`--factory kinds:codes` with kinds.py right there: found (the `deploy` script's own
    folder is what the interpreter puts on its path), and written as the file it is, so the
    config works from any directory."""
    from tests.helpers import run_cli

    (tmp_path / "kinds.py").write_text(KINDS)
    made = run_cli(
        "init",
        "--factory",
        "kinds:tagger",
        "--input",
        "tokens:int64:1x4/2x8/4x16",
        "--input",
        "lengths:int64:1/2/4",
        cwd=tmp_path,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    checked = run_cli("validate", "tagger.yaml", "--probe", cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert yaml.safe_load((tmp_path / "tagger.yaml").read_text())["model"] == {
        "file": "kinds.py",
        "callable": "tagger",
    }
    elsewhere = run_cli("validate", str(tmp_path / "tagger.yaml"), "--probe", cwd=tmp_path.parent)
    assert elsewhere.returncode == 0, elsewhere.stdout + elsewhere.stderr


def test_init_written_text_config_passes_its_own_golden_and_export_for_several_seeds(
    tmp_path: Path, cli: Cli
) -> None:
    """Two int64 inputs (token ids and an attention mask): the mask is ones with padding,
    never all zeros, whatever the seed."""
    from tests.helpers import run

    (tmp_path / "models.py").write_text(MODELS)
    made = init_file(
        cli,
        tmp_path,
        "models.py",
        "small_bert",
        "input_ids:int64:1x8/2x16/4x32",
        "attention_mask:int64:1x8/2x16/4x32",
    )
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / "small_bert.yaml").read_text())
    # The ids span the whole vocabulary (BertConfig(vocab_size=500)), so the golden cases
    # at a range's high end read the embedding's last row.
    assert written["inputs"][0]["value_range"] == [0, 499]
    written["stages"]["export"] = {
        "exporter": "torchscript"
    }  # 1 s, not torch.export's 8: the seeds are the point
    written |= {"cache_dir": str(tmp_path / "cache"), "run_dir": str(tmp_path / "runs")}
    for seed in range(3):
        written["model"]["seed"] = seed
        written["name"] = f"bert{seed}"
        path = tmp_path / f"bert{seed}.yaml"
        path.write_text(yaml.safe_dump(written, sort_keys=False))
        results = run(path, stop="export")
        assert {n: r.status.value for n, r in results.items()} == {"golden": "ran", "export": "ran"}, seed


def test_a_decoders_past_leaves_room_for_the_longest_input_ids_in_its_positions() -> None:
    """GPT-2 with 128 positions and input_ids up to 32: the past goes to 96 (golden's max
    case feeds both at once); 32 tokens in 16 positions leave no past and are refused."""
    from deploy.pipeline.errors import ConfigError
    from deploy.starter.decoder_found import DecoderFound, decoder_inputs
    from deploy.starter.entries import input_entry

    ids = input_entry("input_ids", "int64", ["batch", "sequence"], [1, 1], [1, 8], [1, 32])
    found = DecoderFound(layers=2, heads=4, head_dim=8, dtype="float32", cache="transformers", max_past=128)
    past = decoder_inputs([ids], found)[1]
    assert past["max"] == [1, 4, 96, 8] and past["opt"] == [1, 4, 8, 8] and past["min"][2] == 0
    short = DecoderFound(layers=2, heads=4, head_dim=8, dtype="float32", cache="transformers", max_past=16)
    with pytest.raises(
        ConfigError, match=r"a max of 32 tokens leaves no room for a past in the model's 16 positions"
    ):
        decoder_inputs([ids], short)


MASKED = """
import torch


class Masked(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        scores = self.fc(x)
        return scores.masked_fill(x < 0, float("-inf"))  # -inf wherever the input is negative


def masked():
    return Masked()
"""


def test_init_takes_minus_inf_as_an_answer_and_refuses_only_nan(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "masked.py").write_text(MASKED)
    made = init_file(cli, tmp_path, "masked.py", "masked", "x:float32:1x4/2x4/4x4")
    assert made.returncode == 0, made.stdout + made.stderr
    written = yaml.safe_load((tmp_path / "masked.yaml").read_text())
    assert written["inputs"][0]["dims"][0] == "batch"
    # per sample: -inf - -inf measured as no dependence on the batch, not as a NaN difference
    assert "max_batch_size" not in written["stages"]["triton_config"]
    assert "nan" not in (tmp_path / "masked.yaml").read_text().lower()


ONE_ROW = """
import torch


class OneRow(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(1, 4)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, input_ids):
        return self.head(self.embed(input_ids)).mean(1)


def one_row():
    return OneRow()
"""


def test_a_vocabulary_of_one_is_asked_about_naming_the_embedding(tmp_path: Path, cli: Cli) -> None:
    """It was refused as `value_range needs low < high`, a field the user never wrote."""
    (tmp_path / "one_row.py").write_text(ONE_ROW)
    made = init_file(cli, tmp_path, "one_row.py", "one_row", "input_ids:int64:1x4/2x4/4x4")
    assert made.returncode == 3 and "Traceback" not in made.stderr
    assert "the model's first embedding has a single row, so its only id is 0" in made.stderr, made.stderr
    assert "value_range needs" not in made.stderr and not list(tmp_path.glob("*.yaml"))


PER_SAMPLE = """
import torch


class PerSample(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 3)

    def forward(self, x):
        y = self.layer(x)
        return [y[i] for i in range(x.shape[0])]


def per_sample():
    return PerSample()
"""


def test_outputs_that_follow_the_batch_are_refused_saying_so(tmp_path: Path, cli: Cli) -> None:
    """One tensor a sample: init raised KeyError (exit 70, a traceback)."""
    (tmp_path / "per_sample.py").write_text(PER_SAMPLE)
    made = init_file(cli, tmp_path, "per_sample.py", "per_sample", "x:float32:1x4/2x4/4x4")
    assert made.returncode == 3 and "Traceback" not in made.stderr, made.stderr
    assert "the number of outputs follows the batch" in made.stderr and not list(tmp_path.glob("*.yaml"))


def test_kwargs_read_as_yaml_take_pythons_none_too() -> None:
    """`--kwarg weights=None` reached torchvision as the string 'None' (KeyError: 'None')."""
    from deploy.commands.init import parse_kwargs

    assert parse_kwargs(["weights=None", "num_classes=10", "name=x"]) == {
        "weights": None,
        "num_classes": 10,
        "name": "x",
    }
    assert parse_kwargs(["weights=null"]) == {"weights": None}


def test_an_input_name_no_tensor_takes_is_named_as_such() -> None:
    """`--input b-2:...` got pydantic's pattern in regex: `String should match pattern '^[A-Za-z_]...'`."""
    with pytest.raises(ConfigError, match=r"'b-2' is not a tensor name \(letters, digits, _ and \."):
        parse_input("b-2:float32:1x4/2x4/4x4")


def test_an_input_given_twice_is_named(tmp_path: Path, cli: Cli) -> None:
    """It was blamed on the forward: "missing a required argument: 'b'"."""
    made = init_file(cli, tmp_path, str(ROOT / "configs" / "models" / "tiny_cnn.py"), "tiny_cnn",
                     "image:float32:1x1x8x8/4x1x8x8/16x1x8x8", "image:float32:1x1x8x8/4x1x8x8/16x1x8x8")  # fmt: skip
    assert made.returncode == 2 and "--input: ['image'] given more than once" in made.stderr, made.stderr


EXITS = """
import sys

import torch


class Exits(torch.nn.Module):
    def forward(self, x):
        sys.exit(0)


def exits_in_forward():
    return Exits()


def exits_when_built():
    sys.exit(0)
"""


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("exits_in_forward", "the model's forward called sys.exit(0)"),
        ("exits_when_built", "calling the model factory called sys.exit(0)"),
    ],
)
def test_a_model_that_calls_sys_exit_is_a_refusal_not_a_success(
    tmp_path: Path, cli: Cli, function: str, said: str
) -> None:
    """init runs the model in its own process: sys.exit(0) there ended it with exit 0 and no
    config, which CI reads as success."""
    (tmp_path / "exits.py").write_text(EXITS)
    made = init_file(cli, tmp_path, "exits.py", function, "x:float32:1x4/2x4/4x4")
    assert made.returncode == 3 and said in made.stderr, made.stderr


def test_an_integer_inputs_range_is_written_as_integers() -> None:
    """`--value-range k=1,5` on an int64 input was written `[1.0, 5.0]`."""
    from deploy.starter.entries import Values, _with, input_entry

    ids = input_entry("k", "int64", ["batch"], [1], [2], [4])
    written = _with(ids, Values(value_range=(1.0, 5.0)))["value_range"]
    assert written == [1, 5] and all(type(v) is int for v in written)
    scale = input_entry("scale", "float32", ["batch"], [1], [2], [4])
    assert _with(scale, Values(value_range=(0.5, 2.0)))["value_range"] == [0.5, 2.0]


AT_THE_EDGES = """
import torch


class UpToTwo(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        assert x.shape[0] <= 2, "batch above 2"
        return self.lin(x)


class Scaled(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x, temperature: float):
        return self.lin(x) / temperature
"""


def test_a_max_shape_the_model_refuses_is_named_before_a_config_is_written(tmp_path: Path, cli: Cli) -> None:
    """init called the model at min and opt only: it wrote a config whose run failed at
    golden's max case (a ViT given a larger image than its position table)."""
    (tmp_path / "edges.py").write_text(AT_THE_EDGES)
    made = init_file(cli, tmp_path, "edges.py", "UpToTwo", "x:float32:1x8/2x8/4x8")
    assert made.returncode == 3, made.stderr
    assert (
        "--input: at the max shapes (x [4, 8]) the model raised" in made.stderr
        and "batch above 2" in made.stderr
    )
    assert not (tmp_path / "UpToTwo.yaml").exists()
    assert init_file(cli, tmp_path, "edges.py", "UpToTwo", "x:float32:1x8/2x8/2x8").returncode == 0


def test_a_forward_argument_without_an_input_is_refused_with_the_init_flag_that_declares_it(
    tmp_path: Path, cli: Cli
) -> None:
    """The refusal advised model.forward_kwargs and model.inputs_by, which init has no flag for."""
    (tmp_path / "edges.py").write_text(AT_THE_EDGES)
    made = init_file(cli, tmp_path, "edges.py", "Scaled", "x:float32:1x8/2x8/4x8")
    assert made.returncode == 3 and "--input temperature:float32:// for a 0-d scalar" in made.stderr, (
        made.stderr
    )
    scalar = init_file(cli, tmp_path, "edges.py", "Scaled", "x:float32:1x8/2x8/4x8", "temperature:float32://")
    assert scalar.returncode == 0, scalar.stderr


PADDED = """
import torch


class Pooled(torch.nn.Module):
    def forward(self, x, pad_mask):
        kept = (~pad_mask).unsqueeze(-1).float()
        return (x * kept).sum(1) / kept.sum(1)
"""


def test_a_bool_padding_mask_is_written_as_padding(tmp_path: Path, cli: Cli) -> None:
    """A bool `pad_mask` was drawn at random: its rows never had the trailing padding a real
    batch has (a transformer exported wrong at padded positions passed every gate)."""
    (tmp_path / "padded.py").write_text(PADDED)
    made = init_file(
        cli, tmp_path, "padded.py", "Pooled", "x:float32:1x4x3/2x8x3/4x16x3", "pad_mask:bool:1x4/2x8/4x16"
    )
    assert made.returncode == 0, made.stderr
    written = yaml.safe_load((tmp_path / "Pooled.yaml").read_text())
    assert [i.get("values") for i in written["inputs"]] == [None, "padding"]


FINDERS = """
import torch


class Finder(torch.nn.Module):
    def __init__(self, rows):
        super().__init__()
        self.rows = rows
        self.head = torch.nn.Conv2d(3, 1, 1)

    def forward(self, images):
        found = []
        for image in images:
            score = self.head(image[None]).mean().reshape(1).repeat(self.rows)
            found.append({"boxes": score[:, None].repeat(1, 4), "scores": score, "labels": torch.ones_like(score).long()})
        return found


def finds_one():
    return Finder(1).eval()


def finds_nothing():
    return Finder(0).eval()
"""


@pytest.mark.parametrize(("function", "warned"), [("finds_nothing", True), ("finds_one", False)])
def test_a_detector_that_finds_nothing_is_written_with_a_warning_naming_what_golden_will_refuse(
    tmp_path: Path, cli: Cli, function: str, warned: bool
) -> None:
    """Random-weight detectors (torchvision's at weights=None) found nothing; init wrote their
    config without a word, and the run then failed at golden on answers made of padding."""
    (tmp_path / "finders.py").write_text(FINDERS)
    made = init_file(cli, tmp_path, "finders.py", function, "images:float32:1x3x8x8/1x3x8x8/1x3x8x8")
    assert made.returncode == 0, made.stdout + made.stderr
    said = " ".join(made.stdout.split())
    warning = "Warning: the detector found no object in any image init drew"
    assert (warning in said) is warned, said
    assert (warning in (tmp_path / f"{function}.yaml").read_text()) is warned
    assert "The model was called with: images [1, 3, 8, 8] float32" in said


def test_what_no_output_can_carry_is_said_not_dropped_without_a_word(tmp_path: Path, cli: Cli) -> None:
    (tmp_path / "models.py").write_text(MODELS)
    done = init_file(cli, tmp_path, "models.py", "with_extras", "x:float32:1x8/2x8/4x8")
    assert done.returncode == 0, done.stdout + done.stderr
    said = "the forward also returns values no output can carry (not tensors), left out: 2 (float)"
    assert said in done.stdout and f"# Warning: {said}." in (tmp_path / "with_extras.yaml").read_text()
    assert [o["name"] for o in yaml.safe_load((tmp_path / "with_extras.yaml").read_text())["outputs"]] == [
        "output0"
    ]


def test_output_names_the_pipeline_unless_name_does(tmp_path: Path, cli: Cli) -> None:
    """Two configs of one model, written with -o to two files, kept the callable's name: their
    runs shared runs/<name>/ and the repository's models, each replacing the other's."""
    (tmp_path / "models.py").write_text(MODELS)
    first = init_file(
        cli, tmp_path, "models.py", "with_extras", "x:float32:1x8/2x8/4x8", extra=("-o", "small.yaml")
    )
    named = init_file(
        cli,
        tmp_path,
        "models.py",
        "with_extras",
        "x:float32:1x8/2x8/4x8",
        extra=("-o", "b.yaml", "--name", "mine"),
    )
    assert first.returncode == named.returncode == 0, (
        first.stdout + first.stderr + named.stdout + named.stderr
    )
    assert yaml.safe_load((tmp_path / "small.yaml").read_text())["name"] == "small"
    assert yaml.safe_load((tmp_path / "b.yaml").read_text())["name"] == "mine"


def test_a_model_file_that_is_not_python_says_so(tmp_path: Path, cli: Cli) -> None:
    """NUL bytes read as "model.file: ..., line None: source code string cannot contain null bytes"."""
    (tmp_path / "binary.py").write_bytes(b"import torch\x00\n")
    done = cli(
        "init", "--file", "binary.py", "--callable", "m", "--input", "x:float32:1x4/2x4/4x4", cwd=tmp_path
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert (
        done.returncode == 3
        and "binary.py is not Python source: source code string cannot contain null bytes" in said
    ), said
    assert "line None" not in said and sorted(p.name for p in tmp_path.iterdir()) == ["binary.py"]
