"""deploy with only its core dependencies: every command that needs an extra names what to
install (the way deploy was installed) and exits 4, without a traceback. The extras are
made absent for real: a `sitecustomize` on PYTHONPATH makes their imports fail in every
process the command starts (stage processes included), as they fail where they are not
installed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from deploy.pipeline.errors import ExitCode
from deploy.pipeline.graph.extras import EXTRA_OF
from tests.helpers import run_cli, tiny_dict

BLOCKER = """
import importlib.abc, sys

class _Absent(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {absent!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None

sys.meta_path.insert(0, _Absent())
"""


@pytest.fixture
def core_only(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER.format(absent=set(EXTRA_OF)))
    return {"PYTHONPATH": f"{site}:{Path(__file__).resolve().parents[1]}"}


@pytest.mark.parametrize(
    "args",
    [("validate", "{config}"), ("run", "{config}"), ("bench", "{model}", "--shapes", "x:1x4")],
    ids=["validate", "run", "bench"],
)
def test_a_command_needing_an_extra_names_it_and_exits_4(
    tmp_path: Path, core_only: dict[str, str], args: tuple[str, ...]
) -> None:
    config = tmp_path / "tiny.yaml"
    config.write_text(yaml.safe_dump(tiny_dict(tmp_path)))
    (tmp_path / "m.onnx").write_bytes(b"not read: onnxruntime is absent")
    done = run_cli(
        *(a.format(config=config, model=tmp_path / "m.onnx") for a in args), cwd=tmp_path, env=core_only
    )
    said = " ".join((done.stdout + done.stderr).split())
    assert done.returncode == ExitCode.ENVIRONMENT, said
    assert "Traceback" not in said and "internal error" not in said, said
    assert "not available; install it with:" in said and ("setup.sh" in said or "deploy[" in said), said
    if args[0] == "validate":  # the model file imports torch: deploy's extra, not a bare `pip install torch`
        assert "[torch]" in said and "pip install torch" not in said, said


def test_a_factory_that_fails_when_called_names_the_real_cause(tmp_path: Path) -> None:
    """A weights package the factory imports when called is missing: exit 4 naming it; a
    weights file it reads is missing: exit 3 naming model.callable and the path."""
    (tmp_path / "m.py").write_text(
        "import torch\n"
        "def needs_package():\n    import absent_weights_pkg  # noqa\n\n"
        "def needs_file():\n    return torch.load('/nonexistent/weights.pt')\n"
        "def says_how():\n    raise ImportError('the weights wheel: pip install --no-deps w==1')\n"
    )
    said = {}
    for name in ("needs_package", "needs_file", "says_how"):
        config = {**tiny_dict(tmp_path), "name": name, "model": {"file": "m.py", "callable": name}}
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(config))
        said[name] = run_cli("validate", str(tmp_path / f"{name}.yaml"), "--probe", cwd=tmp_path)
    assert said["needs_package"].returncode == ExitCode.ENVIRONMENT, said["needs_package"].stderr
    assert "the package 'absent_weights_pkg'" in said["needs_package"].stderr
    assert said["needs_file"].returncode == ExitCode.CONFIG, said["needs_file"].stderr
    assert (
        "model.callable" in said["needs_file"].stderr
        and "/nonexistent/weights.pt" in said["needs_file"].stderr
    )
    assert said["says_how"].returncode == ExitCode.ENVIRONMENT, said["says_how"].stderr
    assert "pip install --no-deps w==1" in said["says_how"].stderr
    assert all("Traceback" not in s.stderr for s in said.values())


def test_the_install_hint_fits_the_way_deploy_was_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from deploy.pipeline.graph import extras

    assert extras.checkout() == Path(__file__).resolve().parents[1]  # this checkout, set up by setup.sh
    assert "scripts/setup.sh" in extras.install_hint("onnxruntime") and "[onnx]" in extras.install_hint(
        "onnxruntime"
    )
    monkeypatch.setattr(extras, "checkout", lambda: None)  # as an installed wheel
    assert extras.install_hint("onnxruntime.capi") == "pip install 'deploy[onnx]'"
    assert extras.install_hint("tritonclient") == "pip install 'deploy[triton]'"
    assert extras.install_hint("tokenizers") == "pip install tokenizers"  # not an extra's
