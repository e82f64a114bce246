"""The CLI's commands beyond `run`'s pipeline: serve, infer, bench, init, replay, cache,
doctor, and what they share (cli.py wires them to typer)."""
