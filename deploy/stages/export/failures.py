"""Why an exporter failed, in a line or two, and what to try next. The exporters wrap
their errors in pages of advice, graph dumps and kilobytes of symbolic expressions; the
console gets the root cause, where it happened, and the one next step that applies (the
full message stays in the stage's log)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from deploy.pipeline.errors import StageFailed, clip, innermost, key_lines, plain
from deploy.stages.export.params import Exporter

# Root causes torch.export meets on real models, and what they mean for the user.
CAUSES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        re.compile(r"GuardOnDataDependentSymNode|data-dependent", re.I),
        "the model branches on values it computes from its inputs (e.g. detection post-processing), which "
        "torch.export cannot trace for every input",
    ),
    (
        re.compile(r"Cannot view a tensor|view\b.*symbolic|as a tensor with shape", re.I),
        "a view / reshape over the dynamic dims that torch.export cannot prove valid for every size",
    ),
    (
        re.compile(r"Constraints violated|specializ|must be specialized", re.I),
        "the model fixes a dim the shape spec declares dynamic: give it min = opt = max in the shape spec, or "
        "set the dim to a constant",
    ),
    (
        re.compile(
            r"Unsupported: ONNX export of operator|is not supported in opset|Exporting the operator", re.I
        ),
        "an operator the exporter cannot write at this opset: raise stages.export.opset",
    ),
    (
        re.compile(
            r"Unrecognized attribute: \w+ for operator|num_outputs for operator Split|noop_with_empty_axes",
            re.I,
        ),
        "torch.export's converter writes opset 18 and converting its graph down left an opset-18 attribute in an "
        "older op (Split's num_outputs, ReduceMean's noop_with_empty_axes): export at opset 18 or above (or leave "
        "stages.export.opset unset)",
    ),
)


# The stage's own parity gate, as its message starts (an export that ran but differs).
PARITY = "vs eager parity failed"


@dataclass(frozen=True)
class Attempt:
    """One exporter's try: what went wrong ("" when it worked)."""

    exporter: Exporter
    error: str = ""
    cause: str = ""  # what the error means, where it is a known one

    @property
    def ok(self) -> bool:
        return not self.error

    def text(self) -> str:
        meaning = f": {self.cause}" if self.cause else ""
        return f"{_title(self.exporter)} failed{meaning}: {self.error}"


def refuse_wrapped_script(model: Any) -> None:
    """A TorchScript model that needs deploy's adapter (outputs by key or path, inputs by
    name): torch.export takes no ScriptModule, and the legacy exporter cannot trace a loaded
    one inside another module ("not part of the active trace"), so neither can export it."""
    import torch

    inner = getattr(model, "model", None)
    if isinstance(model, torch.jit.ScriptModule) or not isinstance(inner, torch.jit.ScriptModule):
        return
    picked = [
        ".".join(map(str, p)) for p in getattr(model, "picks", ()) if any(isinstance(s, str) for s in p)
    ]
    why = (
        f"its outputs are found by key or path ({', '.join(picked)})"
        if picked
        else "its inputs are bound by name"
    )
    raise StageFailed(
        f"model.torchscript: {why}, and a TorchScript model can only be exported as it is: torch.export "
        "takes no ScriptModule, and the legacy exporter cannot trace one inside deploy's adapter. Script it "
        "with a forward that takes the inputs in order and returns the declared outputs as a tuple, or give "
        "the model as Python (model.file or model.factory)"
    )


def attempt_failed(exporter: Exporter, exc: BaseException) -> Attempt:
    """The exporter's error as key lines, and its meaning where known."""
    if isinstance(exc, StageFailed):  # deploy's own check, already said in a line or two
        return Attempt(exporter, clip(plain(str(exc)), 600))
    root = innermost(exc)
    text = f"{type(root).__name__}: {plain(str(root))}"
    cause = next((meaning for pattern, meaning in CAUSES if pattern.search(text)), "")
    return Attempt(exporter, key_lines(exc), cause)


def message(asked: Exporter, attempts: list[Attempt]) -> str:
    """The stage's failure: each attempt, then the next step."""
    tried = {a.exporter for a in attempts}
    lines = [a.text() for a in attempts if not a.ok]
    if asked is not Exporter.AUTO and asked.other not in tried:
        lines.append(
            f"next: try stages.export.exporter: {asked.other.value} ({_title(asked.other)}), or auto, which tries "
            "torch.export first and the legacy exporter where it fails"
        )
    elif any(PARITY in a.error for a in attempts):
        lines.append(
            "next: an export ran but ONNX Runtime's answers differ from eager's; the cause measured is said above "
            "(a tolerance is the fix only where it says float rounding)"
        )
    elif len(tried) > 1:
        lines.append(f"next: both exporters failed; {_next_step(attempts)}")
    return "; ".join(lines) + " (full messages in the stage log)"


def _next_step(attempts: list[Attempt]) -> str:
    """The one next step the causes point at; none invented where they are unknown."""
    causes = " ".join(a.cause for a in attempts)
    if "froze a value" in " ".join(a.error for a in attempts):
        return "the legacy exporter's failure names the line of your code to change"
    if "fixes a dim" in causes or "view / reshape" in causes:
        return "where the model fixes a shape, make that dim static in the shape spec"
    return "the causes above are each exporter's own"


def _title(exporter: Exporter) -> str:
    return "torch.export" if exporter is Exporter.DYNAMO else "the legacy (TorchScript) exporter"
