"""triton_search: the Triton model configuration that meets a latency / throughput goal.

stage.py   the stage: params (the space, the goal), key, outputs
search.py  the loop: points, measurements, early stop, score, and the versioned results
"""

from deploy.stages.triton_search.stage import SPEC

__all__ = ["SPEC"]
