"""bench: trtexec-style timing of every runtime, and Triton end to end.

stage.py     the stage: params, key, rows, outputs
harness.py   the measurement loop (warm-up, windows until stable, percentiles)
streams.py   parallel closed-loop streams
runtimes.py  each runtime as a timed call over fixed inputs
triton.py    perf_analyzer-style concurrency sweep on a live server
output.py    JSON / Markdown / PNG, and the regression gate
"""

from stages.bench.stage import SPEC

__all__ = ["SPEC"]
