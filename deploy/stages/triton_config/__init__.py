"""triton_config: the Triton model repository.

stage.py      the stage: one model per serving format and precision, written and read back
validation.py what it refuses before writing (check): sizes, scalars, settings, precisions
proto.py      a model's config.pbtxt as Triton's ModelConfig protobuf (render)
batching.py   dynamic batching only where answers are per sample
params.py     its params
production.py warm-up, response cache, version / queue policies, rate limiter, accelerators
ensemble.py   the service around the models: pre / post models and an ensemble per served model
"""

from deploy.stages.triton_config.stage import SPEC

__all__ = ["SPEC"]
