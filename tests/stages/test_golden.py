"""Gates that cannot be fooled: golden data that exercises the model, honest scores on
degenerate outputs, atol measured against the reference's scale, agreement metrics only
for declared class scores."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from deploy.gates import accuracy, parity, references
from deploy.gates.tolerance import Tolerance
from deploy.pipeline.errors import ConfigError, ExitCode, StageError
from deploy.pipeline.graph.contract import PARTIAL_KEY
from deploy.pipeline.graph.project import load_project
from deploy.spec.tensors import InputSpec, OutputKind, OutputSpec
from tests.helpers import run

ZERO_MODEL = '''
import torch


class Dead(torch.nn.Module):
    """Always zero: -|x| through a ReLU."""

    def forward(self, x):
        return torch.relu(-x.abs()).flatten(1)


def dead(width: int = 8):  # the tiny config passes width
    return Dead()
'''


def test_integer_value_range_is_inclusive_so_a_mask_has_ones() -> None:
    spec = InputSpec(
        name="mask",
        dtype="int64",
        dims=["batch", 16],
        min=[1, 16],
        opt=[4, 16],
        max=[8, 16],
        value_range=(0, 1),
    )
    drawn = references.random_input(spec, (8, 16), np.random.default_rng(0))
    assert set(np.unique(drawn)) == {0, 1}


def test_equal_value_range_bounds_are_a_config_error(write_config) -> None:
    path = write_config(
        {
            "inputs": [
                {
                    "name": "image",
                    "dims": ["batch", 1, 8, 8],
                    "min": [1, 1, 8, 8],
                    "opt": [4, 1, 8, 8],
                    "max": [16, 1, 8, 8],
                    "value_range": [2, 2],
                }
            ]
        }
    )
    with pytest.raises(
        ConfigError, match=r"inputs\[0\]: value_range needs low < high \(got \[2, 2\]\): equal bounds"
    ):
        load_project(path)


def test_constant_golden_inputs_from_a_file_are_refused(write_config, tmp_path: Path) -> None:
    np.savez(tmp_path / "golden.npz", image=np.zeros((16, 1, 8, 8), np.float32))
    path = write_config({"model": {"golden_inputs": str(tmp_path / "golden.npz")}})
    with pytest.raises(
        StageError, match=r"golden inputs are constant or NaN.*image at max \(all 0\.0\)"
    ) as info:
        run(path, only=["golden"])
    assert "model.golden_inputs" in str(info.value)


def test_golden_inputs_file_is_cut_to_each_shape_and_exact_keys_win(write_config, tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    shared, exact = (
        rng.standard_normal((20, 1, 8, 8)).astype(np.float32),
        rng.standard_normal((4, 1, 8, 8)).astype(np.float32),
    )
    np.savez(tmp_path / "golden.npz", image=shared, **{"opt.image": exact})
    path = write_config({"model": {"golden_inputs": str(tmp_path / "golden.npz")}})
    results = run(path, only=["golden"])
    store_path = load_project(path).cache_dir
    from deploy.pipeline.store.objects import Store

    cases = references.load(Store(store_path).path_of(results["golden"].outputs["golden"]))
    np.testing.assert_array_equal(cases["min"].inputs["image"], shared[:1])
    np.testing.assert_array_equal(cases["max"].inputs["image"], shared[:16])
    np.testing.assert_array_equal(cases["opt"].inputs["image"], exact)


def test_golden_inputs_file_too_small_names_the_input_and_shape(write_config, tmp_path: Path) -> None:
    np.savez(tmp_path / "golden.npz", image=np.ones((2, 1, 8, 8), np.float32))
    path = write_config({"model": {"golden_inputs": str(tmp_path / "golden.npz")}})
    with pytest.raises(
        StageError, match=r"model\.golden_inputs\[image\]: shape \[2, 1, 8, 8\] cannot give the opt shape"
    ) as info:
        run(path, only=["golden"])
    assert info.value.exit_code == ExitCode.CONFIG


def test_golden_inputs_must_be_npz(write_config, tmp_path: Path) -> None:
    (tmp_path / "golden.npy").write_bytes(b"")
    path = write_config({"model": {"golden_inputs": str(tmp_path / "golden.npy")}})
    with pytest.raises(ConfigError, match=r"golden_inputs must be an \.npz"):
        load_project(path)


def test_constant_reference_outputs_are_refused(write_config, tmp_path: Path) -> None:
    (tmp_path / "dead.py").write_text(ZERO_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "dead.py"), "callable": "dead"}})
    with pytest.raises(
        StageError,
        match=r"reference outputs are constant or NaN.*logits at min \(all 0\.0\).*model\.golden_inputs",
    ):
        run(path, only=["golden"])


ROW_MODEL = '''
import torch


class Row(torch.nn.Module):
    """One sum a sample, repeated: a single sample's answer is one value four times."""

    def forward(self, x):
        return x.flatten(1).sum(1, keepdim=True).expand(-1, 4)


def row(width: int = 8):
    return Row()
'''


def test_an_output_constant_only_at_batch_1_is_compared_not_refused(write_config, tmp_path: Path) -> None:
    """It was refused as comparing nothing; at opt and max its rows differ, so parity has
    something to compare."""
    (tmp_path / "row.py").write_text(ROW_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "row.py"), "callable": "row"}})
    assert run(path, only=["golden"])["golden"].status.value == "ran"


INPLACE_MODEL = """
import torch


class Doubles(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)  # writes into its input
        return x.flatten(1) + 1


def doubles(width: int = 8):
    return Doubles()
"""


def test_a_forward_that_writes_into_its_input_keeps_golden_inputs_as_drawn(
    write_config, tmp_path: Path
) -> None:
    """The second call got the first's doubled input: refused as "not deterministic", and the
    golden inputs saved were not the ones the answers came from."""
    (tmp_path / "doubles.py").write_text(INPLACE_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "doubles.py"), "callable": "doubles"}})
    results = run(path, only=["golden"])
    from deploy.pipeline.store.objects import Store

    cases = references.load(Store(load_project(path).cache_dir).path_of(results["golden"].outputs["golden"]))
    for case in cases.values():
        x, y = case.inputs["image"], next(iter(case.outputs.values()))
        np.testing.assert_allclose(y, x.reshape(len(x), -1) * 2 + 1, rtol=1e-6)


def test_a_draw_of_few_values_is_never_all_one_value() -> None:
    """A bool flag at batch 2 came out all True on 3 of 4 seeds; golden then refused it."""
    from deploy.runtimes.arrays import random_input
    from deploy.spec.tensors import InputSpec

    flag = InputSpec(name="flag", dtype="bool", dims=["batch"], min=[1], opt=[2], max=[4])
    k = InputSpec(name="k", dtype="int64", dims=["batch"], min=[1], opt=[4], max=[4], value_range=(1, 5))
    for seed in range(64):
        rng = np.random.default_rng(seed)
        assert len(set(random_input(flag, (2,), rng).tolist())) == 2, seed
        drawn = random_input(k, (4,), rng)
        assert len(set(drawn.tolist())) > 1 and drawn.min() >= 1 and drawn.max() <= 5, seed


BLIND_MODEL = '''
import torch


class Blind(torch.nn.Module):
    """Its input's signal dies before the head (as in an untrained GoogLeNet, whose random
    weights make every image score alike): every sample gets the bias, which varies by class."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.linspace(-1.0, 1.0, 10))

    def forward(self, x):
        return torch.relu(-x.abs()).flatten(1)[:, :10] + self.bias


def blind(width: int = 8):
    return Blind()
'''


def test_answers_that_ignore_the_input_values_make_golden_partial_saying_why(
    write_config, tmp_path: Path
) -> None:
    """Not constant (ten different scores), but the same at every case: a converter that
    broke every layer before the head would still pass parity on them, so golden says so
    (partial); a model that computes from shapes alone is right to, so it is not refused."""
    (tmp_path / "blind.py").write_text(BLIND_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "blind.py"), "callable": "blind"}})
    golden = run(path, only=["golden"])["golden"]
    note = golden.metrics[PARTIAL_KEY]
    assert golden.status.value == "ran" and re.search(
        r"do not depend on the input values: at opt and \w+.*the inputs differ but every output is the same.*"
        r"model\.checkpoint",
        note,
    ), note
    assert "do not depend" not in run(write_config(name="seeing.yaml"), only=["golden"])[
        "golden"
    ].metrics.get(PARTIAL_KEY, "")


SQUARE_MODEL = '''
import torch


class Square(torch.nn.Module):
    """An even function, as a spectrogram's magnitude or a norm is."""

    def forward(self, x):
        return (x * x).flatten(1)


def square(width: int = 8):
    return Square()
'''


def test_an_even_function_is_not_said_to_ignore_its_input(write_config, tmp_path: Path) -> None:
    """The low edge was -|x| beside the high edge's |x|: the same answers twice, and golden
    called |rfft(x)| or x² partial, "do not depend on the input values"."""
    (tmp_path / "square.py").write_text(SQUARE_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "square.py"), "callable": "square"}})
    golden = run(path, only=["golden"])["golden"]
    assert golden.status.value == "ran" and PARTIAL_KEY not in golden.metrics, golden.metrics


SPECTRUM_MODEL = """
import torch


class Spectrum(torch.nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x.flatten(1))


def spectrum(width: int = 8):
    return Spectrum()
"""


def test_a_complex_output_is_refused_naming_complex_and_the_way_out(write_config, tmp_path: Path) -> None:
    """The export failed later on a shape ([.., 2] against [..]) that named no complex type."""
    (tmp_path / "spectrum.py").write_text(SPECTRUM_MODEL)
    path = write_config({"model": {"file": str(tmp_path / "spectrum.py"), "callable": "spectrum"}})
    with pytest.raises(StageError, match=r"logits \(torch.complex64\): a complex output.*torch.view_as_real"):
        run(path, only=["golden"])


def test_a_bfloat16_output_is_refused_naming_it_and_the_cast(write_config, tmp_path: Path) -> None:
    """`.numpy()` raised TypeError on it; ONNX Runtime's Python API cannot return one either."""
    (tmp_path / "half.py").write_text(
        SPECTRUM_MODEL.replace("torch.fft.rfft(x.flatten(1))", "x.flatten(1).bfloat16()")
    )
    path = write_config({"model": {"file": str(tmp_path / "half.py"), "callable": "spectrum"}})
    with pytest.raises(
        StageError, match=r"logits \(torch.bfloat16\): an output numpy .* cannot hold; return it as float32"
    ):
        run(path, only=["golden"])


def test_an_output_empty_at_every_shape_is_refused_naming_it(write_config, tmp_path: Path) -> None:
    """A `y[:, :0]` output passed every check until Triton refused its dims in smoke
    ("dimension must be integer >= 1") after a server-log dump."""
    (tmp_path / "empty.py").write_text(
        SPECTRUM_MODEL.replace("torch.fft.rfft(x.flatten(1))", "x.flatten(1)[:, :0]")
    )
    path = write_config({"model": {"file": str(tmp_path / "empty.py"), "callable": "spectrum"}})
    with pytest.raises(
        StageError, match=r"outputs: 'logits' \[\d+, 0\] has an axis that is empty at every shape"
    ):
        run(path, only=["golden"])


def test_a_forward_that_raises_at_one_case_is_named_with_the_case_and_its_shapes(
    write_config, tmp_path: Path
) -> None:
    """A max beyond the model's positions raised "index 130 is out of bounds", naming no shape."""
    short = SPECTRUM_MODEL.replace(
        "torch.fft.rfft(x.flatten(1))", "x.flatten(1) + torch.zeros(9)[x.shape[0]]"
    )
    (tmp_path / "short.py").write_text(short)
    path = write_config({"model": {"file": str(tmp_path / "short.py"), "callable": "spectrum"}})
    with pytest.raises(StageError, match=r"at max \(image \[16, 1, 8, 8\]\): the model's forward raised"):
        run(path, only=["golden"])


def test_a_forward_that_raises_at_a_drawn_shape_names_the_drawing_and_the_way_out(
    write_config, tmp_path: Path
) -> None:
    """raft_small takes only sizes divisible by 8: it failed at `sample1`, a shape nobody
    declared, and the message named no field."""
    picky = SPECTRUM_MODEL.replace(
        "torch.fft.rfft(x.flatten(1))", "x.flatten(1) if x.shape[0] in (1, 4, 16) else 1 / 0"
    )
    (tmp_path / "picky.py").write_text(picky)
    path = write_config(
        {"model": {"file": str(tmp_path / "picky.py"), "callable": "spectrum"}},
        replace={"stages": {"golden": {"sampled_shapes": 3}}},
    )
    with pytest.raises(
        StageError, match=r"at sample\d .*a shape drawn between min and max.*sampled_shapes: 0"
    ):
        run(path, only=["golden"])


def test_a_batch_centred_output_at_a_batch_of_one_is_refused_naming_min(write_config, tmp_path: Path) -> None:
    """`y - y.mean(0)` is all zeros at batch 1: export then failed with "cosine undefined: an
    all-zero reference" and advised a tolerance, which could not help."""
    (tmp_path / "centred.py").write_text(
        SPECTRUM_MODEL.replace(
            "torch.fft.rfft(x.flatten(1))", "x.flatten(1) - x.flatten(1).mean(0, keepdim=True)"
        )
    )
    path = write_config({"model": {"file": str(tmp_path / "centred.py"), "callable": "spectrum"}})
    with pytest.raises(
        StageError,
        match=r"inputs\[\]\.min: output 'logits' depends on the rest of its batch and is all zeros at min .*batch 2 or more",
    ) as refused:
        run(path, only=["golden"])
    assert refused.value.exit_code == ExitCode.CONFIG  # the config's shapes, not a failed stage


def test_zero_vs_zero_is_not_a_perfect_cosine() -> None:
    zeros = np.zeros((2, 10), np.float32)
    m = parity.metrics(zeros, zeros, Tolerance())
    assert m.cosine is None and not m.passed
    table = {"min": {"logits": m}}
    assert "cosine undefined" in parity.failures(table, Tolerance())[0]
    assert "cos undefined" in parity.headline(table, Tolerance())


def test_headline_says_when_atol_cannot_bite() -> None:
    rng = np.random.default_rng(0)
    tiny = (rng.standard_normal((4, 10)) * 1e-9).astype(np.float32)
    wrong_but_within_atol = tiny + np.float32(5e-5)
    m = parity.metrics(wrong_but_within_atol, tiny, Tolerance(atol=1e-4, min_cosine=0.0))
    assert m.within_tolerance and not m.atol_bites
    assert m.scaled_err > 1000  # the error is thousands of times the reference's scale
    headline = parity.headline({"min": {"logits": m}}, Tolerance(atol=1e-4))
    assert "atol 0.0001 cannot bite" in headline


def test_atol_bites_on_outputs_of_normal_scale() -> None:
    ref = np.linspace(-3, 3, 40, dtype=np.float32)
    m = parity.metrics(ref + np.float32(1e-6), ref, Tolerance())
    assert m.atol_bites and m.passed
    assert "cannot bite" not in parity.headline({"min": {"out": m}}, Tolerance())


def test_agreement_metrics_only_for_declared_logits() -> None:
    rng = np.random.default_rng(0)
    ref = [{"out": rng.standard_normal((8, 5))}]
    as_logits = accuracy.measure(ref, ref, 3, {"out": OutputKind.LOGITS})
    as_embedding = accuracy.measure(ref, ref, 3, {"out": OutputKind.EMBEDDING})
    assert as_logits["out"].top1_agreement == 1.0
    assert as_embedding["out"].top1_agreement is None
    assert "top1_agreement" not in as_embedding["out"].to_json()
    assert as_logits["out"].to_json()["top3_agreement"] == 1.0


def test_an_agreement_gate_without_a_logits_output_is_a_config_error(write_config) -> None:
    path = write_config(
        {
            "outputs": [{"name": "logits", "kind": "embedding"}],
            "stages": {"fp16": {"gate": {"min_top1_agreement": 0.9}}},
        }
    )
    with pytest.raises(
        ConfigError, match=r"stages\.fp16\.gate\.min_top1_agreement: needs an output declared `kind: logits`"
    ):
        load_project(path)


def test_output_kind_defaults_to_other() -> None:
    assert OutputSpec(name="y").kind is OutputKind.OTHER


def test_golden_inputs_keys_that_name_no_input_are_refused(write_config, tmp_path: Path) -> None:
    np.savez(tmp_path / "golden.npz", imgae=np.ones((16, 1, 8, 8), np.float32))
    path = write_config({"model": {"golden_inputs": str(tmp_path / "golden.npz")}})
    with pytest.raises(StageError, match=r"keys \['imgae'\] name no input \(inputs: \['image'\]"):
        run(path, only=["golden"])


def test_nan_reference_outputs_are_refused(write_config, tmp_path: Path) -> None:
    (tmp_path / "nan.py").write_text(ZERO_MODEL.replace("torch.relu(-x.abs())", "(x * float('nan'))"))
    path = write_config({"model": {"file": str(tmp_path / "nan.py"), "callable": "dead"}})
    with pytest.raises(
        StageError,
        match=r"eager's answers are NaN.*logits at min is NaN in 64 of 64 values \(sample 0 of the batch\); "
        r"the inputs there: image \[1, 1, 8, 8\] float32",
    ):
        run(path, only=["golden"])


NOISY = """
import torch


class Noisy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 10)

    def forward(self, x):
        x = x.flatten(1)
        keep = torch.rand(x.shape[0], 64) > 0.5  # ViT-MAE-style masking, drawn on every call
        return self.fc(x * keep)


def noisy(width: int = 8):
    return Noisy()
"""


def test_a_forward_that_draws_noise_is_named_before_anything_is_exported(
    write_config, tmp_path: Path
) -> None:
    (tmp_path / "noisy.py").write_text(NOISY)
    path = write_config({"model": {"file": str(tmp_path / "noisy.py"), "callable": "noisy"}})
    with pytest.raises(StageError) as failed:
        run(path)
    said = " ".join(str(failed.value).split())
    assert said.startswith(
        "stage 'golden' failed: the model's forward is not deterministic: two calls on the same"
    )
    assert f"it ran rand ({tmp_path / 'noisy.py'}:12: keep = torch.rand(x.shape[0], 64) > 0.5" in said
    assert "pass the noise as an input" in said and "depends on the rest" not in said
    assert not (tmp_path / "cache" / "tmp").exists() or not any((tmp_path / "cache" / "tmp").iterdir())


def test_golden_checks_between_the_three_points_and_records_the_cases(write_config) -> None:
    metrics = run(write_config(), only=["golden"])["golden"].metrics
    cases = metrics["cases"]
    assert list(cases) == ["min", "opt", "max", "sample1", "sample2", "low", "high"]
    sampled = [cases[c]["image"][0] for c in ("sample1", "sample2")]
    assert all(1 <= b <= 16 for b in sampled) and sampled != [1, 16] and sampled != [4, 4]
    assert metrics["headline"].startswith("outputs logits [4, 10] at opt, 7 cases")


DETECTOR = '''
import torch


class Many(torch.nn.Module):
    """One dict per image with 12 rows: more than the config keeps."""

    def forward(self, images: list[torch.Tensor]):
        found = []
        for image in images:
            rows = image.flatten()[:48].reshape(12, 4)
            found.append({"boxes": rows, "scores": rows.sum(1)})
        return found


def many(width: int = 8):
    return Many()
'''


def test_detections_a_fixed_layout_cuts_are_recorded_and_said(write_config, tmp_path: Path) -> None:
    (tmp_path / "many.py").write_text(DETECTOR)
    path = write_config(
        {
            "model": {
                "file": str(tmp_path / "many.py"),
                "callable": "many",
                "detections": {"max_detections": 5},
            }
        },
        replace={
            "inputs": [
                {
                    "name": "images",
                    "dims": [1, 1, 8, 8],
                    "min": [1, 1, 8, 8],
                    "opt": [1, 1, 8, 8],
                    "max": [1, 1, 8, 8],
                }
            ],
            "outputs": [{"name": "boxes"}, {"name": "scores"}, {"name": "num_detections"}],
            "batch_dim": None,
            "stages": {"export": {"exporter": "torchscript"}},
        },
    )
    metrics = run(path, only=["golden"])["golden"].metrics
    assert metrics["detections_cut"][0] == "min: 12 found, 5 kept"
    assert "detections cut to max_detections (min: 12 found, 5 kept" in metrics["headline"]


def test_a_generation_config_s_length_penalty_is_named_and_golden_stays_plain_greedy() -> None:
    """exponential_decay_length_penalty (raising eos after a start index) was not among the
    settings golden turns off: golden applied it, the served greedy loop did not, and smoke
    failed on every prompt without naming it. Random weights: mechanics only."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from deploy.stages.golden.generate import _hf, not_applied

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         eos_token_id=3)  # fmt: skip
    model = LlamaForCausalLM(config).eval()
    model.generation_config.exponential_decay_length_penalty = (2, 3.0)
    assert not_applied(model.generation_config) == {"exponential_decay_length_penalty": (2, 3.0)}
    ids = [5, 17, 40]
    plain = list(ids)
    with torch.no_grad():
        for _ in range(8):  # argmax over a full recompute: greedy by definition
            plain.append(int(model(torch.tensor([plain])).logits[0, -1].argmax()))
            if plain[-1] == 3:
                break
        penalised = model.generate(torch.tensor([ids]), max_new_tokens=8)[0, len(ids) :].tolist()
    got = _hf(model, ids, 8)
    assert got == plain[len(ids) :], (got, plain)
    assert penalised != got, "the penalty changed nothing here: this test would not see it applied"
