"""select: the (format, precision) to deploy per objective, from bench rows and accuracy.

stage.py      the stage: params (objectives), reading its inputs, the deployment tree
selection.py  candidates, decisions and verdicts, and the versioned selection record
"""

from stages.select.stage import SPEC

__all__ = ["SPEC"]
