"""golden: the eager model's answers at every golden case, and what the eager model is.

stage.py   the stage: inputs at min / opt / max, sampled shapes and value edges; eager's
           answers; determinism, batch independence, float64 rounding (eager.json)
params.py  its YAML section: how many shapes to sample, whether to add the value edges
answers.py what golden refuses or leaves out of the answers: NaN named with the inputs
           that produced it, constant outputs, edge cases that compare nothing, and the
           detections a fixed layout cut
"""

from deploy.stages.golden.stage import SPEC

__all__ = ["SPEC"]
