"""The PUBLISHING fact: read through triton_config's validated params (never its raw
section), its default without triton_config, and the URL tritonserver is given."""

from __future__ import annotations

import pytest

from deploy.pipeline.graph.project import load_project
from deploy.serving.publishing import PublishPolicy, destinations, published_url, publishing


def test_triton_configs_params_state_the_fact(write_config) -> None:
    path = write_config({"stages": {"triton_config": {"publish_to": "s3://bucket/repo"}}})
    config = load_project(path).config
    assert publishing(config).policy is PublishPolicy.ALL and publishing(config).remote == "s3://bucket/repo"
    assert destinations(config) == (config.repository, "s3://bucket/repo")


def test_without_triton_config_the_default_holds(write_config) -> None:
    path = write_config(replace={"stages": {"trace": {}, "export": {}}})
    config = load_project(path).config
    assert publishing(config).policy is PublishPolicy.ALL and published_url(config) is None


def test_an_s3_endpoint_becomes_tritons_own_url_form(write_config, monkeypatch: pytest.MonkeyPatch) -> None:
    config = load_project(write_config({"stages": {"triton_config": {"publish_to": "s3://b/r"}}})).config
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9000")
    assert published_url(config) == "s3://http://127.0.0.1:9000/b/r"
