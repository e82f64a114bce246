"""bench: trtexec-style timing of every runtime, and Triton end to end.

stage.py     the stage: params, key, rows, outputs
calls.py     each runtime as a timed call over fixed inputs
output.py    JSON / Markdown / PNG, and the regression gate

The measurement itself is shared with the Triton config search: runtimes/harness.py
(warm-up, windows until stable, percentiles), runtimes/streams.py (parallel closed-loop
streams), runtimes/record.py (typed rows), serving/perf.py (the sweep on a live server).
"""

from deploy.stages.bench.stage import SPEC

__all__ = ["SPEC"]
