"""Model sources: import path, file + callable, checkpoints (.pt / .safetensors), TorchScript."""

from __future__ import annotations

import pytest

from deploy.pipeline.errors import ExitCode, StageError
from tests.helpers import output_path, run


def test_safetensors_checkpoint_gives_the_same_golden_as_pt(write_config, digits_checkpoint, tmp_path):
    import torch
    from safetensors.torch import save_file

    from deploy.gates import references

    checkpoint, _ = digits_checkpoint
    st = tmp_path / "digits.safetensors"
    save_file(torch.load(checkpoint), str(st))
    pt_path = write_config({"model": {"checkpoint": str(checkpoint)}}, name="pt.yaml")
    st_path = write_config({"model": {"checkpoint": str(st)}}, name="st.yaml")
    pt = references.load(output_path(pt_path, run(pt_path, stop="golden"), "golden", "golden"))
    st_cases = references.load(output_path(st_path, run(st_path, stop="golden"), "golden", "golden"))
    assert (pt["opt"].outputs["logits"] == st_cases["opt"].outputs["logits"]).all()


def test_torchscript_source_runs_through_export_and_validate(write_config, tmp_path):
    first = write_config(name="first.yaml")
    results = run(first, stop="trace")
    scripted = tmp_path / "tiny.pt"
    scripted.write_bytes(output_path(first, results, "trace", "torchscript").read_bytes())
    path = write_config(replace={"model": {"torchscript": str(scripted)}}, name="ts.yaml")
    assert {r.status.value for r in run(path, stop="validate").values()} == {"ran"}


def test_factory_import_path(write_config):
    path = write_config(replace={"model": {"factory": "torch.nn:Identity"}, "stages": {"trace": {}}})
    assert run(path)["trace"].status.value == "ran"


@pytest.mark.parametrize(
    ("model", "fragment"),
    [
        (
            {"factory": "no_such_module_xyz:build"},
            "the package 'no_such_module_xyz' .* pip install no_such_module_xyz",
        ),
        ({"factory": "torch.nn:NoSuchThing"}, "has no attribute 'NoSuchThing'"),
        ({"factory": "torch.nn:Linear", "kwargs": {"bogus": 1}}, "calling the model factory failed"),
    ],
)
def test_bad_model_source_fails_trace_with_a_clear_message(write_config, model, fragment):
    path = write_config(replace={"model": model, "stages": {"trace": {}}})
    with pytest.raises(StageError, match=fragment):
        run(path)


def test_checkpoint_that_does_not_fit_names_the_file(write_config, tmp_path):
    import torch

    bad = tmp_path / "wrong.pt"
    torch.save({"unrelated.weight": torch.zeros(3)}, bad)
    path = write_config({"model": {"checkpoint": str(bad)}, "stages": {}})
    with pytest.raises(StageError, match=r"wrong\.pt does not fit the model"):
        run(path)


def test_a_factory_that_downloads_without_a_network_says_how_to_do_without(write_config, tmp_path):
    """A real download attempt (torchvision's pretrained weights do the same): `.invalid` never
    resolves (RFC 2606), as no host does on a machine without a network."""
    (tmp_path / "downloads.py").write_text(
        "import urllib.request\n\n\ndef build(width: int = 8):\n"
        "    urllib.request.urlopen('http://weights.deploy-test.invalid/model.pt', timeout=5)\n"
    )
    path = write_config(replace={"model": {"file": str(tmp_path / "downloads.py"), "callable": "build"}})
    with pytest.raises(
        StageError, match=r"could not reach the network; give the weights as model\.checkpoint"
    ) as found:
        run(path)
    assert found.value.exit_code == ExitCode.ENVIRONMENT and "URLError" in str(found.value)
