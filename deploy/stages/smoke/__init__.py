"""smoke: the generated repository on a real tritonserver.

stage.py   the stage: params, serving the repository, checking each model
result.py  what it found per model (the versioned smoke report) and the verdicts
"""

from deploy.stages.smoke.stage import SPEC

__all__ = ["SPEC"]
