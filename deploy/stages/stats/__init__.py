"""stats: what the model costs, read from its ONNX graph.

stage.py     the stage: params, the per-op table, the report
roofline.py  counting an ONNX graph at concrete shapes and placing it on a roofline
"""

from deploy.stages.stats.stage import SPEC

__all__ = ["SPEC"]
