"""triton_config: the Triton model repository.

stage.py      the stage: one model per serving format and precision
params.py     its params
production.py warm-up, response cache, version / queue policies, rate limiter, accelerators
ensemble.py   the service around the models: pre / post models and an ensemble per served model
"""

from deploy.stages.triton_config.stage import SPEC

__all__ = ["SPEC"]
