"""triton_config: the Triton model repository.

stage.py    the stage: params, one model per serving format and precision
ensemble.py the service around them: pre / post models and an ensemble per served model
"""

from stages.triton_config.stage import SPEC

__all__ = ["SPEC"]
