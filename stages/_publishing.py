"""Which stage publishes the Triton repository. `triton_config.publish` decides for the
whole pipeline: `all` publishes the repository as built (and as triton_search tunes it);
`selected` publishes only the models serving what the select stage chose. Every stage
that can publish asks here, so exactly one tree reaches `model_repository/`."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel

from pipeline.config import DeployConfig

# The stage whose params hold the policy, and the field.
OWNER, FIELD = "triton_config", "publish"


class PublishPolicy(str, Enum):
    ALL = "all"
    SELECTED = "selected"


def policy(config: DeployConfig) -> PublishPolicy:
    raw = config.stages.get(OWNER) or {}
    value = raw.get(FIELD, PublishPolicy.ALL.value)
    # An invalid value never gets here: triton_config's params are validated first.
    return PublishPolicy(value) if value in {p.value for p in PublishPolicy} else PublishPolicy.ALL


def when_all(_params: BaseModel, config: DeployConfig) -> bool:
    return policy(config) is PublishPolicy.ALL


def when_selected(_params: BaseModel, config: DeployConfig) -> bool:
    return policy(config) is PublishPolicy.SELECTED
