"""deploy: a PyTorch model to a correct, fast TensorRT engine in Triton, rebuilt when
something changes.

    import deploy
    pipeline = deploy.load("configs/resnet50.yaml")   # or a dict with the same keys
    pipeline.plan()                                   # what would run, and why
    result = pipeline.run()                           # RunResult: per stage, selection, repository

The package is also the app: the `deploy` command line (run, plan, validate, serve,
doctor, bench, cache) is a layer over the same calls, on top of the engine (`pipeline`),
the stages (`stages`) and the libraries they share. `import deploy` imports no heavy
library: the API is loaded on first use."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

# A library prints nothing unless its user configures logging.
logging.getLogger("deploy").addHandler(logging.NullHandler())

if TYPE_CHECKING:
    from deploy.api import LogReporter, Pipeline, RunResult, load
    from deploy.live_model import optimize
    from deploy.pipeline.errors import (
        CallEnded,
        ConfigError,
        DeployError,
        EnvError,
        SelectionError,
        StageError,
    )

# The errors a call raises, as `deploy.ConfigError` etc. (deploy.pipeline.errors holds them; light).
ERRORS = ("CallEnded", "ConfigError", "DeployError", "EnvError", "SelectionError", "StageError")
__all__ = [
    "CallEnded",
    "ConfigError",
    "DeployError",
    "EnvError",
    "LogReporter",
    "Pipeline",
    "RunResult",
    "SelectionError",
    "StageError",
    "load",
    "optimize",
]


def __getattr__(name: str) -> Any:
    if name == "optimize":
        from deploy.live_model import optimize

        return optimize
    if name in ERRORS:
        from deploy.pipeline import errors

        return getattr(errors, name)
    if name in __all__:
        from deploy import api

        return getattr(api, name)
    raise AttributeError(f"module 'deploy' has no attribute '{name}'")
