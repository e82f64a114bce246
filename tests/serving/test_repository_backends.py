"""Which models a given server can load (beyond tests/serving/test_repository.py): the
backends of the local server are read from its backend directory, unknown for a URL or an
image; a model of a backend the layouts do not know keeps its own name; directories
without a config.pbtxt are not models."""

from __future__ import annotations

from pathlib import Path

from deploy.serving.repository import backends, loadable, models
from deploy.serving.server_spec import ServerSpec


def test_the_wheels_server_has_the_python_backend_only(tmp_path: Path) -> None:
    assert backends(ServerSpec(), tmp_path) == {"python"}


def test_a_local_binarys_backends_are_its_backend_dirs(tmp_path: Path) -> None:
    binary = tmp_path / "triton" / "bin" / "tritonserver"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    for name in ("onnxruntime", "python"):
        (tmp_path / "triton" / "backends" / name).mkdir(parents=True)
    assert backends(ServerSpec(kind="binary", path=binary), tmp_path / "work") == {"onnxruntime", "python"}


def test_servers_started_elsewhere_have_unknown_backends(tmp_path: Path) -> None:
    assert backends(ServerSpec(kind="url", url="h:1", grpc_url="h:2"), tmp_path) is None
    assert backends(ServerSpec(kind="docker", image="tritonserver:x"), tmp_path) is None


def test_unknown_backends_keep_their_name_and_stray_directories_are_not_models(tmp_path: Path) -> None:
    (tmp_path / "m_dali" / "1").mkdir(parents=True)
    (tmp_path / "m_dali" / "config.pbtxt").write_text('name: "m_dali"\nbackend: "dali"\n')
    (tmp_path / "m_ens").mkdir()
    (tmp_path / "m_ens" / "config.pbtxt").write_text(
        'name: "m_ens"\nplatform: "ensemble"\nensemble_scheduling { step { model_name: "m_dali" model_version: -1 } }\n'
    )
    (tmp_path / "notes" / "1").mkdir(parents=True)  # no config.pbtxt
    (tmp_path / "README.md").write_text("not a model\n")
    found = models(tmp_path)
    assert {n: (m.fmt, m.backend, m.precision, m.directory) for n, m in found.items()} == {
        "m_dali": ("dali", "dali", "fp32", tmp_path / "m_dali"),
        "m_ens": ("ensemble", "ensemble", "fp32", tmp_path / "m_ens"),
    }
    assert found["m_ens"].steps == ("m_dali",)
    # An ensemble (Triton's built-in platform) loads when every step does.
    assert loadable(found, {"python", "dali"}) == ["m_dali", "m_ens"] and loadable(found, {"python"}) == []
