"""The engine: it knows stages only by their declared specs.

graph/     what a config declares: the stage contract, registry, keys, the plan
store/     where results live: the content-addressed store, locks, the remote cache
process/   how a stage runs: the runner, child processes, signals, logs, progress
publish/   how a verified tree leaves the store for a model repository
report/    what a run says: results, the HTML report, JUnit
"""
