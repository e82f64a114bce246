"""Export failures name the real cause, capped to its key lines (the exporter's full
message, colour codes and all, stays in the stage log), and the next step; `exporter:
auto` (the default) falls back to the legacy exporter where torch.export fails and says
why; forward's other arguments never become graph inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from deploy.pipeline.errors import ExitCode, StageError, key_lines, plain, root_cause
from tests.helpers import output_path, run, run_cli

DATA_DEPENDENT = '''
import torch


class Branchy(torch.nn.Module):
    """Control flow on a tensor's value: torch.export cannot trace it."""

    def forward(self, image):
        if image.sum() > 1e9:  # never on the golden inputs: eager and the trace agree
            return image.flatten(1)[:, :4]
        return image.nonzero().float().sum(0, keepdim=True).expand(image.shape[0], -1)


def branchy(width: int = 8):
    return Branchy()
'''

DEFAULTS = '''
import torch


class Scaled(torch.nn.Module):
    """A forward with non-tensor arguments that have defaults, as research code has them."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(1, 4, 3)

    def forward(self, image, scale: float = 1.0, return_features: bool = False):
        features = self.conv(image).mean((2, 3))
        logits = features * scale
        return (logits, features) if return_features else logits


def scaled(width: int = 8):
    return Scaled()
'''


def branchy_config(write_config, tmp_path: Path, export: dict) -> Path:
    (tmp_path / "branchy.py").write_text(DATA_DEPENDENT)
    return write_config(
        {"model": {"file": str(tmp_path / "branchy.py"), "callable": "branchy"}, "stages": {"export": export}}
    )


def test_a_pinned_exporter_that_fails_names_the_cause_and_suggests_the_other(write_config, tmp_path) -> None:
    path = branchy_config(write_config, tmp_path, {"exporter": "dynamo"})
    proc = run_cli("run", str(path), "--to", "export")
    console = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.STAGE, console
    assert (
        "\x1b[" not in console and "Traceback" not in console and "see the stack trace above" not in console
    )
    flat = " ".join(console.split())
    assert "torch.export failed: the model branches on values it computes from its inputs" in flat
    assert "GuardOnDataDependentSymNode: Could not guard on data-dependent" in flat
    assert "next: try stages.export.exporter: torchscript" in flat and "or auto" in flat
    summary = json.loads((tmp_path / "runs" / "tiny" / "summary.json").read_text())
    message = next(s for s in summary["stages"] if s["stage"] == "export")["message"]
    assert len(message) < 1200, message  # key lines, not the exporter's pages
    log = (tmp_path / "runs" / "tiny" / "logs" / "export.log").read_text()
    assert "torch.export" in log and "Traceback" in log  # the full story is in the log


def test_auto_falls_back_to_the_legacy_exporter_and_says_why(write_config, tmp_path) -> None:
    # The branch never fires on real inputs: the config accepts the line the trace freezes.
    path = branchy_config(write_config, tmp_path, {"exporter": "auto", "accept_frozen": ["branchy.py:9"]})
    results = run(path, stop="export")
    export = results["export"].metrics
    assert export["exporter"]["asked"] == "auto" and export["exporter"]["used"] == "torchscript"
    failed = export["exporter"]["attempts"][0]
    assert failed["exporter"] == "dynamo" and "branches on values" in failed["cause"]
    assert "GuardOnDataDependentSymNode" in failed["error"]
    assert export["headline"].startswith(
        "auto: torchscript (torch.export failed: the model branches on values"
    )
    table = next(t for t in export["report"] if t["title"] == "Export: the path taken")
    assert [row[:2] for row in table["rows"]] == [["dynamo", "failed"], ["torchscript", "used"]]


def test_a_branch_the_legacy_exporter_freezes_is_refused_naming_its_line(write_config, tmp_path) -> None:
    path = branchy_config(write_config, tmp_path, {"exporter": "torchscript"})
    with pytest.raises(StageError) as failed:
        run(path, stop="export")
    said = str(failed.value)
    assert (
        "froze a value of the data into the graph at" in said
        and "branchy.py:9: `if image.sum() > 1e9:" in said
    )
    assert "stages.export.accept_frozen: ['branchy.py:9']" in said


def test_the_default_is_auto_and_a_model_torch_export_takes_goes_that_way(write_config) -> None:
    path = write_config(replace={"stages": {"export": {}}})
    export = run(path, stop="export")["export"].metrics
    assert export["exporter"] == {
        "asked": "auto",
        "used": "dynamo",
        "attempts": [{"exporter": "dynamo", "error": "", "cause": ""}],
    }
    assert export["headline"].startswith("auto: dynamo, opset ")


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_forward_arguments_with_defaults_are_not_graph_inputs(write_config, tmp_path, exporter) -> None:
    """The legacy exporter used to make `scale` a graph input (`onnx::Cast_1`), which then
    failed at every shape with a hint about frozen shapes."""
    (tmp_path / "scaled.py").write_text(DEFAULTS)
    model = {"file": str(tmp_path / "scaled.py"), "callable": "scaled"}
    path = write_config({"model": model, "stages": {"export": {"exporter": exporter}}})
    results = run(path, stop="export")
    graph = onnx.load(str(output_path(path, results, "export", "onnx"))).graph
    assert [i.name for i in graph.input] == ["image"]
    # model.forward_kwargs fixes them instead: the graph computes with scale 3.
    fixed = write_config(
        {"model": {**model, "forward_kwargs": {"scale": 3.0}}, "stages": {"export": {"exporter": exporter}}},
        name="fixed.yaml",
    )
    again = run(fixed, stop="export")
    import onnxruntime as ort

    feed = np.random.default_rng(0).standard_normal((2, 1, 8, 8)).astype(np.float32)
    plain_out = ort.InferenceSession(str(output_path(path, results, "export", "onnx"))).run(
        None, {"image": feed}
    )[0]
    scaled_out = ort.InferenceSession(str(output_path(fixed, again, "export", "onnx"))).run(
        None, {"image": feed}
    )[0]
    np.testing.assert_allclose(scaled_out, 3 * plain_out, rtol=1e-5, atol=1e-6)


def test_a_graph_input_nobody_declared_is_told_apart_from_a_frozen_shape(tmp_path) -> None:
    from deploy.gates.references import Case, infer_case
    from deploy.pipeline.errors import StageFailed
    from deploy.runtimes.onnxrt import OnnxRuntime
    from tests.helpers import export_two_heads, two_heads_net

    model = OnnxRuntime(export_two_heads(two_heads_net(), tmp_path / "two.onnx"))
    case = Case({"a": np.zeros((2, 4), np.float32)}, {})  # the config declares `a` only
    with pytest.raises(StageFailed) as info:
        infer_case(model, "opt", case)
    text = str(info.value)
    assert "its graph takes input(s) ['b'] that no declared input feeds" in text
    assert "model.forward_kwargs" in text and "froze a shape" not in text


def test_key_lines_cap_a_message_of_symbols_and_keep_where_it_happened() -> None:
    guard = "Could not guard on data-dependent expression " + " + ".join(
        f"4*Min(300, u{i})" for i in range(400)
    )
    text = f"{guard}\n\nconsider using data-dependent friendly APIs\nCaused by: (torchvision/ops/boxes.py:86 in batched_nms)\nFor more information, run with TORCH_LOGS"
    try:
        try:
            raise ValueError(text)
        except ValueError as inner:
            raise RuntimeError("wrapper") from inner
    except RuntimeError as outer:
        line = key_lines(outer)
    assert len(line) < 300 and line.startswith("ValueError: Could not guard on data-dependent expression")
    assert line.endswith("(at torchvision/ops/boxes.py:86 in batched_nms)")


def test_root_cause_is_the_innermost_first_line() -> None:
    try:
        try:
            raise ValueError("the real problem\nmore detail")
        except ValueError as inner:
            raise RuntimeError("\x1b[96mwrapper advice\x1b[0m") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ValueError: the real problem"
    assert plain("\x1b[96mstep 1/3\x1b[0m done") == "step 1/3 done"


SEEDED = """
import torch


class Seeded(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 3, 3, padding=1)

    def forward(self, x):
        noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
        return self.conv(x + 0.1 * noise).mean((2, 3))


def seeded(width: int = 8):
    return Seeded()
"""


def test_a_forward_that_draws_with_its_own_seeded_generator_is_named_when_both_exporters_fail(
    write_config, tmp_path
) -> None:
    """It answers the same every call (golden takes it), and both exporters failed in their
    internals' words ("SymIntArrayRef expected to contain only concrete integers")."""
    (tmp_path / "seeded.py").write_text(SEEDED)
    path = write_config({"model": {"file": str(tmp_path / "seeded.py"), "callable": "seeded"}})
    with pytest.raises(StageError) as failed:
        run(path, only=["golden", "export"])
    said = " ".join(str(failed.value).split())
    assert "The forward draws random numbers (randn (" in said and "seeded.py" in said, said
    assert "an exporter cannot capture a generator; make the noise an input" in said


def test_a_forward_storing_tensors_on_the_module_is_named_when_dims_come_out_fixed(write_config) -> None:
    """raft_small's batch came out of torch.export fixed, said only as "the model computes
    something that holds only at that size": torch.export's own warning names the tensors
    its forward stores on the module (its correlation pyramid). Random weights: the export's
    mechanics; `auto` then deploys it with the legacy exporter (not run here)."""
    model = {
        "factory": "torchvision.models.optical_flow:raft_small",
        "kwargs": {"weights": None},
        "forward_kwargs": {"num_flow_updates": 1},  # one flow out, one refinement
    }
    shape = {"dims": ["batch", 3, 128, 128], "min": [1, 3, 128, 128], "opt": [1, 3, 128, 128]}
    inputs = [{"name": n, **shape, "max": [2, 3, 128, 128]} for n in ("image1", "image2")]
    flat = _dynamo_refused(write_config, model, inputs, "flow")
    assert "the dynamo export fixed dims" in flat, flat
    assert "corr_pyramid" in flat and "the forward stores tensors on the module" in flat, flat


WINDOWS = """
import torch


class Windows(torch.nn.Module):
    def forward(self, x):  # swin's `if window_size[0] >= pad_H`: a branch on the size
        if x.shape[2] >= 12 and x.shape[3] >= 12:
            return x.mean((2, 3))
        return x.amax((2, 3))


def windows():
    return Windows()
"""


def test_dims_torch_export_cannot_keep_are_named_by_torch_export(write_config, tmp_path) -> None:
    """A branch on the image's size (swin_t's `if window_size[0] >= pad_H`): torch.onnx
    exported one branch with the dims dynamic, which parity caught as "computes something
    else" (swin_t's came out with every dim fixed, the batch named first); torch.export
    alone names the dims whose guards fail over the declared range."""
    (tmp_path / "windows.py").write_text(WINDOWS)
    shape = {"dims": ["batch", 1, "height", "width"], "min": [1, 1, 8, 8], "opt": [2, 1, 12, 12]}
    model = {"file": str(tmp_path / "windows.py"), "callable": "windows"}
    flat = _dynamo_refused(write_config, model, [{"name": "x", **shape, "max": [2, 1, 16, 16]}], "y")
    assert "the converted graph computes something else there" in flat, flat
    assert "torch.export alone: Constraints violated (height, width) (the model tests those sizes" in flat, (
        flat
    )


def _dynamo_refused(write_config, model: dict, inputs: list[dict], output: str) -> str:
    """The export stage's failure, in one line, for `model` exported by torch.export alone."""
    path = write_config(
        replace={
            "model": model,
            "inputs": inputs,
            "outputs": [{"name": output}],
            "stages": {"export": {"exporter": "dynamo"}},
        }
    )
    with pytest.raises(StageError) as info:
        run(path, stop="export")
    return " ".join(str(info.value).split())
