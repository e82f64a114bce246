"""export: ONNX with dynamic axes from the shape spec, checked in ONNX Runtime.

stage.py      the stage: params, the attempts (auto: torch.export, then the legacy exporter), the check
exporters.py  the two exporters: dynamic axes / dynamic shapes from the shape spec, I/O names
failures.py   why an exporter failed, in a line or two, and what to try next
"""

from deploy.stages.export.stage import SPEC

__all__ = ["SPEC"]
