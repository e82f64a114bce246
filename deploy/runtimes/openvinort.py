"""OpenVINO on the CPU, from an IR (model.xml + model.bin). Imports openvino.

The precision it computes in is asked for, never left to the plugin: on a CPU with bf16
(AVX512-BF16, AMX) the CPU plugin computes an FP32 IR in bf16 by default — about 2× the
speed on resnet50 here, and another precision than FP32, gated as such. An FP16-compressed
IR's weights are decompressed and computed in the precision asked for."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from enum import StrEnum
from pathlib import Path

import numpy as np
import openvino as ov

from deploy.pipeline.errors import StageFailed, first_line
from deploy.runtimes.base import Feeds, chosen_outputs
from deploy.runtimes.timing import Timed

IR_FILE = "model.xml"


class Hint(StrEnum):
    """OpenVINO's performance hint: the plugin picks streams and threads for it."""

    LATENCY = "LATENCY"
    THROUGHPUT = "THROUGHPUT"


class Compute(StrEnum):
    """The precision the CPU plugin computes in (its INFERENCE_PRECISION_HINT)."""

    F32 = "f32"
    BF16 = "bf16"  # only on CPUs that have it: see `lacks`


def lacks(compute: Compute) -> str | None:
    """Why this CPU cannot compute in `compute`; None when it can."""
    capabilities = ov.Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")
    if compute is Compute.BF16 and "BF16" not in capabilities:
        return f"this CPU has no bf16 (OpenVINO's CPU capabilities: {', '.join(capabilities)})"
    return None


def reason(exc: BaseException) -> str:
    """OpenVINO's own words: its messages open with the source locations they passed
    through ("Exception from …", "Check '…' failed at …") and end with the cause."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    said = [line for line in lines if not line.startswith(("Exception from ", "Check '"))]
    return said[-1] if said else first_line(exc)


def refuse_non_ir(xml: Path) -> None:
    """An .xml that is no IR, refused by its root element before OpenVINO tries every
    frontend on it (TensorFlow's prints absl errors to stderr and the reason is lost)."""
    if xml.suffix != ".xml" or not xml.is_file():
        return
    from xml.etree.ElementTree import ParseError, iterparse

    try:
        _, root = next(iterparse(str(xml), events=("start",)))
        tag = root.tag
    except (ParseError, StopIteration, OSError) as exc:
        raise StageFailed(f"{xml} is not an OpenVINO IR: not well-formed XML ({exc})") from None
    if tag != "net":
        raise StageFailed(
            f"{xml} is not an OpenVINO IR: its root element is <{tag}>, an IR's is <net> "
            "(the .xml that ovc or openvino.save_model writes, its .bin beside it)"
        )


class OpenVino:
    def __init__(
        self,
        path: Path,
        hint: Hint = Hint.LATENCY,
        threads: int | None = None,
        outputs: Sequence[str] | None = None,
        compute: Compute = Compute.F32,
    ) -> None:
        xml = path / IR_FILE if path.is_dir() else path
        refuse_non_ir(xml)
        config: dict[str, str] = {"PERFORMANCE_HINT": hint.value, "INFERENCE_PRECISION_HINT": compute.value}
        if threads:
            config["INFERENCE_NUM_THREADS"] = str(threads)
        try:
            self.compiled = ov.Core().compile_model(str(xml), "CPU", config)
        except Exception as exc:
            raise StageFailed(f"OpenVINO cannot load {xml}: {reason(exc)}") from exc
        # A port has every name its tensor had: a Cast folded away (argmax to int32) leaves
        # {"argmax", "label"}, and get_any_name() gave "argmax": asked-for names match any of them.
        every = [name for port in self.compiled.outputs for name in sorted(port.get_names())]
        ports = tuple(port.get_any_name() for port in self.compiled.outputs)
        self._outputs = chosen_outputs(every, outputs, "OpenVINO") if outputs else ports
        self.request = self.compiled.create_infer_request()

    @property
    def outputs(self) -> tuple[str, ...]:
        return self._outputs

    def settings(self) -> dict[str, object]:
        """What the hint chose: streams, threads and the requests to keep in flight
        (reported beside the numbers)."""
        return {
            "hint": str(self.compiled.get_property("PERFORMANCE_HINT")),
            "compute": self.compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name(),
            "streams": int(self.compiled.get_property("NUM_STREAMS")),
            "threads": int(self.compiled.get_property("INFERENCE_NUM_THREADS")),
            "requests": int(self.compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")),
        }

    def input_types(self) -> dict[str, tuple[list[int | None], str]]:
        """name -> (declared shape, None where dynamic; dtype name), for `deploy bench`."""
        return {
            port.get_any_name(): (
                [d.get_length() if d.is_static else None for d in port.get_partial_shape()],
                str(np.dtype(port.get_element_type().to_dtype())),
            )
            for port in self.compiled.inputs
        }

    def call_per_thread(self, feeds: Feeds) -> Callable[[], object]:
        """A call that each thread makes on its own infer request (one is not thread-safe):
        `deploy bench --streams N` calls it from N threads."""
        fixed, local = dict(feeds), threading.local()

        def call() -> object:
            if not hasattr(local, "request"):
                local.request = self.compiled.create_infer_request()
            return local.request.infer(fixed)

        return call

    def infer(self, feeds: Feeds) -> dict[str, np.ndarray]:
        result = self.request.infer(dict(feeds))
        return {name: np.array(result[self.compiled.output(name)]) for name in self._outputs}

    def timed(self, feeds: Feeds) -> Timed:
        fixed = dict(feeds)
        return Timed(lambda: self.request.infer(fixed))
