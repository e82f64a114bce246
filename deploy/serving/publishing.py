"""Where the Triton repository is published, and by which stage: a fact (`PUBLISHING`)
that triton_config's params state (`publish`, `publish_to`) and that every stage able
to publish reads through the engine (`read_fact`), never from another stage's YAML.
`all` publishes the repository as the last stage that rewrites it leaves it (triton_search's
tuned one where configured: the engine publishes each artifact once, from the last link of
its chain, pipeline/process/run_publishing.py `destinations`); `selected`
only the models serving what the select stage chose; so exactly one tree reaches
`model_repository/` and, with `publish_to`, object storage."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from urllib.parse import urlparse

from pydantic import BaseModel

from deploy.pipeline.graph.facts import Fact
from deploy.pipeline.graph.registry import read_fact
from deploy.spec.config import DeployConfig


class PublishPolicy(str, Enum):
    ALL = "all"
    SELECTED = "selected"
    RELEASED = "released"  # the release stage: each changed model as a new version, gated


@dataclass(frozen=True)
class Publishing:
    policy: PublishPolicy = PublishPolicy.ALL
    remote: str | None = None  # object storage (s3://…) or a shared dir, besides the local one


PUBLISHING: Fact[Publishing] = Fact("publishing", Publishing())


def publishing(config: DeployConfig) -> Publishing:
    return read_fact(config, PUBLISHING)


def destinations(config: DeployConfig) -> tuple[Path | str, ...]:
    """The local repository, and the remote one where `publish_to` names it."""
    remote = publishing(config).remote
    return (config.repository, *([remote] if remote else []))


def when_all(_params: BaseModel, config: DeployConfig) -> tuple[Path | str, ...]:
    return destinations(config) if publishing(config).policy is PublishPolicy.ALL else ()


def when_selected(_params: BaseModel, config: DeployConfig) -> tuple[Path | str, ...]:
    return destinations(config) if publishing(config).policy is PublishPolicy.SELECTED else ()


def candidate_url(remote: str) -> str:
    """Where a candidate is copied on object storage for a server to read before it is
    verified: beside `publish_to`, never in it (a server polling publish_to sees nothing)."""
    return f"{remote.rstrip('/')}.candidate"


def published_url(config: DeployConfig) -> str | None:
    """`publish_to` as tritonserver reads it (`triton_url`); None without one."""
    remote = publishing(config).remote
    return triton_url(remote) if remote else None


def triton_url(remote: str) -> str:
    """A repository URL as tritonserver reads it: for an S3-compatible endpoint
    ($AWS_ENDPOINT_URL_S3 / $AWS_ENDPOINT_URL) Triton's own form,
    s3://http://host:port/bucket/path; otherwise as written."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if not remote.startswith("s3://") or not endpoint:
        return remote
    parsed = urlparse(endpoint)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"s3://{parsed.scheme}://{parsed.hostname}:{port}/{remote.removeprefix('s3://')}"
