"""triton_search: the Triton model configuration that meets a latency / throughput goal.

stage.py    the stage: params (the space, the goal), key, outputs
search_record.py  a point, what it measured, the result; search_results.json (SearchResults, versioned)
search.py   the loop: the grid, each point served and measured, early stop, score, the winner
output.py   the CSV (perf_analyzer's columns), the Pareto plot, the report's tables
"""

from deploy.stages.triton_search.stage import SPEC

__all__ = ["SPEC"]
