"""quantize: post-training INT8 ONNX, gated on accuracy.

stage.py        the stage: params, recipes, the gate and the fallback around the quantizer
calibration.py  activation ranges for onnxruntime.quantization, checked before use
"""

from deploy.stages.quantize.stage import SPEC

__all__ = ["SPEC"]
