"""An exporter failure reaches the console as its root cause, in plain text; the
exporter's full message (colour codes and all) stays in the stage log."""

from __future__ import annotations

from pathlib import Path

from pipeline.errors import ExitCode, plain, root_cause
from tests.helpers import run_cli

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


def test_dynamo_export_failure_shows_the_root_cause_without_colour_codes(
    write_config, tmp_path: Path
) -> None:
    (tmp_path / "branchy.py").write_text(DATA_DEPENDENT)
    path = write_config(
        {
            "model": {"file": str(tmp_path / "branchy.py"), "callable": "branchy"},
            "stages": {"export": {"exporter": "dynamo"}},
        }
    )
    proc = run_cli("run", str(path), "--to", "export")
    console = proc.stdout + proc.stderr
    assert proc.returncode == ExitCode.STAGE, console
    assert "\x1b[" not in console
    assert (
        "torch.onnx.export (dynamo) failed: GuardOnDataDependentSymNode: Could not guard on data-dependent"
        in console
    )
    assert "see the stack trace above" not in console and "Traceback" not in console
    log = (tmp_path / "runs" / "tiny" / "logs" / "export.log").read_text()
    assert "torch.export" in log and "Traceback" in log  # the full story is in the log


def test_root_cause_is_the_innermost_first_line() -> None:
    try:
        try:
            raise ValueError("the real problem\nmore detail")
        except ValueError as inner:
            raise RuntimeError("\x1b[96mwrapper advice\x1b[0m") from inner
    except RuntimeError as outer:
        assert root_cause(outer) == "ValueError: the real problem"
    assert plain("\x1b[96mstep 1/3\x1b[0m done") == "step 1/3 done"
