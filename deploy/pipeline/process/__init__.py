"""How a stage runs: the runner, child-process isolation, lifelines and signals,
per-stage logs and progress events."""
