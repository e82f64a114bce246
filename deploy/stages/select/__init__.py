"""select: what to deploy per objective, for the target smoke verified, from bench rows and accuracy.

stage.py       the stage: params (objectives), reading its inputs, the deployment tree
candidates.py  the target (a verified server, or in-process runtimes) and the candidates for it
selection.py   decisions and verdicts, and the versioned selection record
output.py      the decision line, the status table, each objective's verdicts
"""

from deploy.stages.select.stage import SPEC

__all__ = ["SPEC"]
