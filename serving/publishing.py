"""Which stage publishes the Triton repository, and where. `triton_config.publish`
decides for the whole pipeline: `all` publishes the repository as built (and as
triton_search tunes it); `selected` publishes only the models serving what the select
stage chose. Every stage that can publish asks here, so exactly one tree reaches
`model_repository/` and, with `triton_config.publish_to`, object storage."""

from __future__ import annotations

import os
from enum import Enum
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel

from pipeline.config import DeployConfig

# The stage whose params hold the policy and the remote destination, and the fields.
OWNER, FIELD, REMOTE = "triton_config", "publish", "publish_to"


class PublishPolicy(str, Enum):
    ALL = "all"
    SELECTED = "selected"


def policy(config: DeployConfig) -> PublishPolicy:
    raw = config.stages.get(OWNER) or {}
    value = raw.get(FIELD, PublishPolicy.ALL.value)
    # An invalid value never gets here: triton_config's params are validated first.
    return PublishPolicy(value) if value in {p.value for p in PublishPolicy} else PublishPolicy.ALL


def destinations(config: DeployConfig) -> tuple[Path | str, ...]:
    """The local repository, and the remote one where `publish_to` names it."""
    remote = (config.stages.get(OWNER) or {}).get(REMOTE)
    return (config.repository, *([str(remote)] if remote else []))


def when_all(_params: BaseModel, config: DeployConfig) -> tuple[Path | str, ...]:
    return destinations(config) if policy(config) is PublishPolicy.ALL else ()


def when_selected(_params: BaseModel, config: DeployConfig) -> tuple[Path | str, ...]:
    return destinations(config) if policy(config) is PublishPolicy.SELECTED else ()


def published_url(config: DeployConfig) -> str | None:
    """`publish_to` as tritonserver reads it: for an S3-compatible endpoint
    ($AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL) Triton's own form,
    s3://http://host:port/bucket/path; otherwise as written."""
    remote = (config.stages.get(OWNER) or {}).get(REMOTE)
    if not remote:
        return None
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not str(remote).startswith("s3://") or not endpoint:
        return str(remote)
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"s3://{parsed.scheme}://{parsed.hostname}:{port}/{str(remote).removeprefix('s3://')}"
